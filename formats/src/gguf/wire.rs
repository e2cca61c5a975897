//! Little-endian wire encoding of GGUF header items, both ways.
//!
//! Decoding runs over the whole file as one slice with a position, so every length can be
//! checked against the bytes that are really there before anything is allocated: a count
//! of N elements of at least `m` bytes each must satisfy `N * m <= remaining`, a string
//! length must be `<= remaining`, and vectors of variable-size elements start small and
//! grow only as elements are actually parsed. Allocation is therefore bounded by a small
//! multiple of the input length, whatever the input claims (the fuzz target checks it).
//! Nesting of arrays of arrays is bounded by [`MAX_ARRAY_DEPTH`].
//!
//! The rules mirror ggml's `gguf_reader` (`ggml/src/gguf.cpp`): u64 string lengths, u32
//! type codes, u64 array counts; unlike ggml, arrays of arrays are read (gguf-py writes
//! them) and bools other than 0/1 are rejected, as the GGUF specification asks.

use super::error::{GgufError, Result};
use super::value::{
    Array, GgufString, SharedBytes, StringArray, Value, ValueType, for_each_number,
};

/// Deepest nesting of arrays of arrays accepted (an array of scalars is depth 1).
pub const MAX_ARRAY_DEPTH: usize = 32;

/// Vectors of variable-size elements reserve at most this many slots up front; the rest
/// grows as elements are parsed, so a false count cannot make a large allocation.
const MAX_PREALLOC: usize = 1024;

/// A position in the file's bytes.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The owner of `bytes`, when string arrays may share them rather than copy them.
    shared: Option<&'a SharedBytes>,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor {
            bytes,
            pos: 0,
            shared: None,
        }
    }

    /// A cursor over `file`'s bytes, whose string arrays keep to them.
    pub(crate) fn shared(file: &'a SharedBytes) -> Cursor<'a> {
        Cursor {
            bytes: (**file).as_ref(),
            pos: 0,
            shared: Some(file),
        }
    }

    /// All the bytes, read or not.
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes; `what` names the item for the error when they are not there.
    pub(crate) fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8]> {
        let available = self.remaining();
        match usize::try_from(n) {
            Ok(n) if n <= available => {
                let out = &self.bytes[self.pos..self.pos + n];
                self.pos += n;
                Ok(out)
            }
            _ => Err(GgufError::Truncated {
                what: what(),
                offset: self.pos(),
                needed: n,
                available: available as u64,
            }),
        }
    }

    pub(crate) fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Checks that `count` elements of at least `min_size` bytes each can fit in what is
    /// left of the file.
    pub(crate) fn check_count(
        &self,
        count: u64,
        min_size: usize,
        what: impl FnOnce() -> String,
    ) -> Result<usize> {
        let available = self.remaining() as u64;
        let max = available / min_size as u64;
        if count > max {
            return Err(GgufError::CountTooLarge {
                what: what(),
                count,
                offset: self.pos(),
                available,
                max,
            });
        }
        // `count <= remaining bytes`, so it fits in usize.
        Ok(count as usize)
    }

    /// A u64-length-prefixed byte string.
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(|| format!("length of {}", what()))?;
        self.take(len, what)
    }
}

/// Reads a value type code.
fn value_type(c: &mut Cursor<'_>, what: &dyn Fn() -> String) -> Result<ValueType> {
    let offset = c.pos();
    let code = c.u32(what)?;
    ValueType::from_code(code).ok_or_else(|| GgufError::InvalidValueType {
        what: what(),
        code,
        offset,
    })
}

/// Reads the type and value of metadata key `key`.
pub(crate) fn read_value(c: &mut Cursor<'_>, key: &str) -> Result<Value> {
    let ty = value_type(c, &|| format!("type of key '{key}'"))?;
    macro_rules! scalar {
        ($($variant:ident $ty:ident $as:ident $get:ident),*) => {
            match ty {
                $( ValueType::$variant => {
                    let bytes = c.array(|| format!("value of key '{key}'"))?;
                    Value::$variant($ty::from_le_bytes(bytes))
                } )*
                ValueType::Bool => {
                    let offset = c.pos();
                    let [byte] = c.array(|| format!("value of key '{key}'"))?;
                    Value::Bool(bool_from_byte(byte, key, offset)?)
                }
                ValueType::String => Value::String(GgufString::from_bytes(
                    c.string(&|| format!("value of key '{key}'"))?.to_vec(),
                )),
                ValueType::Array => Value::Array(read_array(c, key, 1)?),
            }
        };
    }
    Ok(for_each_number!(scalar))
}

fn bool_from_byte(byte: u8, key: &str, offset: u64) -> Result<bool> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::InvalidBool {
            key: key.to_string(),
            byte,
            offset,
        }),
    }
}

/// Reads an array body (element type, count, elements) at nesting level `depth`.
fn read_array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<Array> {
    let offset = c.pos();
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep {
            key: key.to_string(),
            max: MAX_ARRAY_DEPTH,
            offset,
        });
    }
    let elem = value_type(c, &|| format!("element type of array in key '{key}'"))?;
    let count = c.u64(|| format!("length of array in key '{key}'"))?;
    let what = || format!("length of arr[{}] in key '{key}'", elem.name());
    let n = c.check_count(count, elem.min_wire_size(), what)?;
    macro_rules! elements {
        ($($variant:ident $ty:ident $as:ident $get:ident),*) => {
            match elem {
                $( ValueType::$variant => {
                    const SIZE: usize = std::mem::size_of::<$ty>();
                    let bytes = c.take((n * SIZE) as u64, || format!("elements of key '{key}'"))?;
                    Array::$variant(
                        bytes
                            .chunks_exact(SIZE)
                            .map(|b| {
                                let mut le = [0u8; SIZE];
                                le.copy_from_slice(b);
                                $ty::from_le_bytes(le)
                            })
                            .collect(),
                    )
                } )*
                ValueType::Bool => {
                    let start = c.pos();
                    let bytes = c.take(n as u64, || format!("elements of key '{key}'"))?;
                    Array::Bool(
                        bytes
                            .iter()
                            .enumerate()
                            .map(|(i, &b)| bool_from_byte(b, key, start + i as u64))
                            .collect::<Result<_>>()?,
                    )
                }
                ValueType::String => {
                    // The lengths are read and checked; the strings stay where they are
                    // (in the file's map) or are copied in one piece.
                    let start = c.pos;
                    for i in 0..n {
                        c.string(&|| format!("string {i} of key '{key}'"))?;
                    }
                    Array::String(match c.shared {
                        Some(file) => StringArray::shared(file.clone(), start..c.pos, n),
                        None => StringArray::from_wire(c.bytes[start..c.pos].to_vec(), n),
                    })
                }
                ValueType::Array => {
                    let mut out = Vec::with_capacity(n.min(MAX_PREALLOC));
                    for _ in 0..n {
                        out.push(read_array(c, key, depth + 1)?);
                    }
                    Array::Array(out)
                }
            }
        };
    }
    Ok(for_each_number!(elements))
}

/// Where a header's bytes go, in order: a growing `Vec`, or memory of the header's
/// size (written in place, with no copy of a vocabulary of megabytes).
pub(crate) trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
    /// Appends `n` bytes, to be filled in.
    fn next(&mut self, n: usize) -> &mut [u8];
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn next(&mut self, n: usize) -> &mut [u8] {
        let start = self.len();
        self.resize(start + n, 0);
        &mut self[start..]
    }
}

/// Bytes filled in order from the start, sized beforehand (a write past the end
/// panics: the sizes of what is written were computed by the same rules).
pub(crate) struct Filling<'a> {
    pub(crate) buf: &'a mut [u8],
    pub(crate) pos: usize,
}

impl Sink for Filling<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.next(bytes.len()).copy_from_slice(bytes);
    }

    fn next(&mut self, n: usize) -> &mut [u8] {
        let start = self.pos;
        self.pos += n;
        &mut self.buf[start..self.pos]
    }
}

/// Appends a u64-length-prefixed string.
pub(crate) fn write_string(out: &mut impl Sink, bytes: &[u8]) {
    out.put(&(bytes.len() as u64).to_le_bytes());
    out.put(bytes);
}

/// The bytes [`write_value`] appends for `value`: what a header is sized by before it
/// is written, so a vocabulary of megabytes goes into one allocation.
pub(crate) fn value_len(value: &Value) -> usize {
    4 + match value {
        Value::String(s) => 8 + s.as_bytes().len(),
        Value::Array(a) => array_len(a),
        scalar => scalar.value_type().fixed_size().unwrap_or(0),
    }
}

/// The bytes [`write_array`] appends for `array`.
fn array_len(array: &Array) -> usize {
    4 + 8
        + match array {
            Array::String(v) => v.wire_len(),
            Array::Array(v) => v.iter().map(array_len).sum(),
            fixed => fixed.len() * fixed.elem_type().fixed_size().unwrap_or(0),
        }
}

/// Appends a value: its type code, then its payload.
pub(crate) fn write_value(out: &mut impl Sink, value: &Value) {
    out.put(&value.value_type().code().to_le_bytes());
    macro_rules! payload {
        ($($variant:ident $ty:ident $as:ident $get:ident),*) => {
            match value {
                $( Value::$variant(v) => out.put(&v.to_le_bytes()), )*
                Value::Bool(b) => out.put(&[u8::from(*b)]),
                Value::String(s) => write_string(out, s.as_bytes()),
                Value::Array(a) => write_array(out, a),
            }
        };
    }
    for_each_number!(payload)
}

/// Appends an array body: element type, count, elements.
fn write_array(out: &mut impl Sink, array: &Array) {
    out.put(&array.elem_type().code().to_le_bytes());
    out.put(&(array.len() as u64).to_le_bytes());
    macro_rules! elements {
        ($($variant:ident $ty:ident $as:ident $get:ident),*) => {
            match array {
                $( Array::$variant(v) => {
                    // Sized once and filled in place: a loop the compiler turns into
                    // vector stores, where one `extend` per element was not.
                    const SIZE: usize = std::mem::size_of::<$ty>();
                    for (to, x) in out.next(v.len() * SIZE).chunks_exact_mut(SIZE).zip(v) {
                        to.copy_from_slice(&x.to_le_bytes());
                    }
                } )*
                Array::Bool(v) => {
                    for (to, &b) in out.next(v.len()).iter_mut().zip(v) {
                        *to = u8::from(b);
                    }
                }
                Array::String(v) => v.write_wire(out),
                Array::Array(v) => {
                    for a in v {
                        write_array(out, a);
                    }
                }
            }
        };
    }
    for_each_number!(elements)
}

/// Depth of array nesting in a value (0 for scalars), for the writer's check that what it
/// writes can be read back.
pub(crate) fn array_depth(array: &Array) -> usize {
    match array {
        Array::Array(inner) => 1 + inner.iter().map(array_depth).max().unwrap_or(0),
        _ => 1,
    }
}
