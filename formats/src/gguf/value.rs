//! Typed metadata values that keep their exact wire type (`enum gguf_type` in ggml's
//! `gguf.h`): a `u16` read is a `u16` written, strings keep their bytes, arrays keep their
//! element type, and arrays of arrays keep each inner array's own type. That is what makes
//! a re-emit byte-identical without holding on to the raw bytes.
//!
//! Floats compare by bit pattern (`PartialEq`), so NaN payloads and `-0.0` survive round
//! trips and comparisons alike.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// The wire type of a metadata value, with the code GGUF stores for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// 8-bit unsigned integer (code 0).
    U8,
    /// 8-bit signed integer (code 1).
    I8,
    /// 16-bit unsigned integer (code 2).
    U16,
    /// 16-bit signed integer (code 3).
    I16,
    /// 32-bit unsigned integer (code 4).
    U32,
    /// 32-bit signed integer (code 5).
    I32,
    /// 32-bit IEEE float (code 6).
    F32,
    /// Boolean, one byte 0 or 1 (code 7).
    Bool,
    /// Length-prefixed (u64) byte string, UTF-8 by convention (code 8).
    String,
    /// Array: element type (u32), count (u64), elements (code 9).
    Array,
    /// 64-bit unsigned integer (code 10).
    U64,
    /// 64-bit signed integer (code 11).
    I64,
    /// 64-bit IEEE float (code 12).
    F64,
}

impl ValueType {
    /// Every type, in code order.
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type with the given wire code, if any.
    pub fn from_code(code: u32) -> Option<ValueType> {
        Self::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// The wire code.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The short name llama.cpp uses (`gguf_type_name`): `u8`, `i32`, `f32`, `bool`,
    /// `str`, `arr`, ...
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "str",
            ValueType::Array => "arr",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// The type with the given short name (as [`ValueType::name`] spells it).
    pub fn from_name(name: &str) -> Option<ValueType> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Bytes one value occupies on the wire, for the fixed-size types.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes one value of this type can occupy: its fixed size, a string's
    /// 8-byte length, an array's 4-byte type and 8-byte count.
    pub(crate) fn min_wire_size(self) -> usize {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            fixed => fixed.fixed_size().unwrap_or(1),
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A GGUF string: bytes, UTF-8 by convention but not by guarantee, kept exactly.
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct GgufString(Vec<u8>);

/// Bytes up to the first NUL: what llama.cpp holds of a GGUF string once it is a C string
/// (`const char *`), as its imatrix reader and its metadata dump take them.
pub fn c_str(bytes: &[u8]) -> &[u8] {
    bytes.split(|&b| b == 0).next().unwrap_or_default()
}

impl GgufString {
    /// A string holding these bytes.
    pub fn from_bytes(bytes: Vec<u8>) -> GgufString {
        GgufString(bytes)
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The text, if the bytes are valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The text, with invalid UTF-8 replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for GgufString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string_lossy(), f)
    }
}

impl fmt::Display for GgufString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

impl From<&str> for GgufString {
    fn from(s: &str) -> GgufString {
        GgufString(s.as_bytes().to_vec())
    }
}

impl From<String> for GgufString {
    fn from(s: String) -> GgufString {
        GgufString(s.into_bytes())
    }
}

impl From<Vec<u8>> for GgufString {
    fn from(bytes: Vec<u8>) -> GgufString {
        GgufString(bytes)
    }
}

/// Calls `$m!` with the fixed-size numeric variants: `Variant rust_type as_fn get_fn`.
macro_rules! for_each_number {
    ($m:ident) => {
        $m! {
            U8 u8 as_u8 get_u8, I8 i8 as_i8 get_i8, U16 u16 as_u16 get_u16,
            I16 i16 as_i16 get_i16, U32 u32 as_u32 get_u32, I32 i32 as_i32 get_i32,
            F32 f32 as_f32 get_f32, U64 u64 as_u64 get_u64, I64 i64 as_i64 get_i64,
            F64 f64 as_f64 get_f64
        }
    };
}
pub(crate) use for_each_number;

/// One metadata value with its exact wire type.
#[derive(Clone, Debug)]
pub enum Value {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// `str`.
    String(GgufString),
    /// `arr` of any element type.
    Array(Array),
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

/// The strings of an `arr[str]`, packed as the file holds them: each string's u64 length
/// then its bytes, all in one buffer. A vocabulary of hundreds of thousands of tokens is
/// then read and written as one piece: parsed from a file, the strings stay in the file's
/// bytes (its map) and are not copied at all; an array's copies (an output header copies
/// its source's metadata) share them until one of them changes.
#[derive(Clone, Default)]
pub struct StringArray {
    packed: Arc<Packed>,
}

/// Bytes a parsed header's arrays share with the file they were read from (its map, or
/// the buffer it was read into), kept alive as long as any of them is.
pub(crate) type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a [`StringArray`]'s wire bytes are.
#[derive(Clone)]
enum Wire {
    /// Its own buffer (strings pushed, or a shared array that changed).
    Owned(Vec<u8>),
    /// A range of a parsed file's bytes.
    Shared(SharedBytes, Range<usize>),
}

impl Default for Wire {
    fn default() -> Wire {
        Wire::Owned(Vec::new())
    }
}

impl Wire {
    fn bytes(&self) -> &[u8] {
        match self {
            Wire::Owned(v) => v,
            Wire::Shared(file, range) => &(**file).as_ref()[range.clone()],
        }
    }
}

/// [`StringArray`]'s buffers.
#[derive(Clone, Default)]
struct Packed {
    /// The strings as an `arr[str]` holds them.
    wire: Wire,
    /// How many.
    count: usize,
    /// Where each string's bytes end in `wire`: found on the first look at a string (a
    /// header that is only copied to another file never needs them).
    ends: OnceLock<Vec<usize>>,
}

impl Packed {
    fn ends(&self) -> &[usize] {
        self.ends
            .get_or_init(|| scan(self.wire.bytes(), self.count))
    }
}

/// Where each of the first `count` strings of `wire` ends (`wire` holds at least that many
/// whole strings, as every [`StringArray`] does).
fn scan(wire: &[u8], count: usize) -> Vec<usize> {
    let mut ends = Vec::with_capacity(count);
    let mut pos = 0usize;
    while ends.len() < count {
        let Some(len) = wire.get(pos..pos + LEN) else {
            break;
        };
        let mut le = [0u8; LEN];
        le.copy_from_slice(len);
        let len = usize::try_from(u64::from_le_bytes(le)).unwrap_or(usize::MAX);
        pos = pos.saturating_add(LEN).saturating_add(len).min(wire.len());
        ends.push(pos);
    }
    ends
}

/// The bytes of a string's length before the string.
const LEN: usize = std::mem::size_of::<u64>();

impl StringArray {
    /// No strings.
    pub fn new() -> StringArray {
        StringArray::default()
    }

    /// No strings, with room for `strings` of `bytes` bytes in all.
    pub fn with_capacity(strings: usize, bytes: usize) -> StringArray {
        StringArray {
            packed: Arc::new(Packed {
                wire: Wire::Owned(Vec::with_capacity(bytes + LEN * strings)),
                count: 0,
                ends: OnceLock::from(Vec::with_capacity(strings)),
            }),
        }
    }

    /// The `count` strings of `wire`, bytes as an `arr[str]` holds them (the caller has
    /// read and checked their lengths).
    pub(crate) fn from_wire(wire: Vec<u8>, count: usize) -> StringArray {
        Self::with_wire(Wire::Owned(wire), count)
    }

    /// The `count` strings at `range` of `file`, bytes as an `arr[str]` holds them (the
    /// caller has read and checked their lengths), shared rather than copied.
    pub(crate) fn shared(file: SharedBytes, range: Range<usize>, count: usize) -> StringArray {
        Self::with_wire(Wire::Shared(file, range), count)
    }

    fn with_wire(wire: Wire, count: usize) -> StringArray {
        StringArray {
            packed: Arc::new(Packed {
                wire,
                count,
                ends: OnceLock::new(),
            }),
        }
    }

    /// The number of strings.
    pub fn len(&self) -> usize {
        self.packed.count
    }

    /// Whether there are no strings.
    pub fn is_empty(&self) -> bool {
        self.packed.count == 0
    }

    /// The bytes of string `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let ends = self.packed.ends();
        let end = *ends.get(i)?;
        let start = if i == 0 { 0 } else { ends[i - 1] } + LEN;
        Some(&self.packed.wire.bytes()[start..end])
    }

    /// Appends a string (copying the strings first if they are shared).
    pub fn push(&mut self, s: impl AsRef<[u8]>) {
        let s = s.as_ref();
        let p = Arc::make_mut(&mut self.packed);
        let mut ends = match p.ends.take() {
            Some(ends) => ends,
            None => scan(p.wire.bytes(), p.count),
        };
        let mut wire = match std::mem::take(&mut p.wire) {
            Wire::Owned(v) => v,
            shared => shared.bytes().to_vec(),
        };
        wire.extend_from_slice(&(s.len() as u64).to_le_bytes());
        wire.extend_from_slice(s);
        ends.push(wire.len());
        p.wire = Wire::Owned(wire);
        p.count += 1;
        p.ends = OnceLock::from(ends);
    }

    /// The bytes of the strings as an `arr[str]` holds them: each one's u64 length, then
    /// its bytes.
    pub(crate) fn wire_len(&self) -> usize {
        self.packed.wire.bytes().len()
    }

    /// Appends the strings as an `arr[str]` holds them ([`StringArray::wire_len`] bytes).
    pub(crate) fn write_wire(&self, out: &mut impl super::wire::Sink) {
        out.put(self.packed.wire.bytes());
    }

    /// The strings' bytes, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + DoubleEndedIterator + '_ {
        (0..self.len()).map(|i| &self[i])
    }
}

/// Arrays are equal when they hold the same strings, that is the same wire bytes.
impl PartialEq for StringArray {
    fn eq(&self, other: &StringArray) -> bool {
        self.packed.wire.bytes() == other.packed.wire.bytes()
    }
}

impl Eq for StringArray {}

impl std::hash::Hash for StringArray {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.packed.wire.bytes().hash(state);
    }
}

impl std::ops::Index<usize> for StringArray {
    type Output = [u8];

    /// The bytes of string `i`; panics if there is no such string.
    fn index(&self, i: usize) -> &[u8] {
        match self.get(i) {
            Some(s) => s,
            None => panic!("string {i} of an array of {}", self.len()),
        }
    }
}

impl fmt::Debug for StringArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

impl<S: AsRef<[u8]>> FromIterator<S> for StringArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> StringArray {
        let mut out = StringArray::new();
        for s in iter {
            out.push(s);
        }
        out
    }
}

impl<S: AsRef<[u8]>> From<Vec<S>> for StringArray {
    fn from(v: Vec<S>) -> StringArray {
        v.into_iter().collect()
    }
}

impl AsRef<[u8]> for GgufString {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// An array value: the element type is the variant, so every element has it.
///
/// `Array(Vec<Array>)` is an array of arrays; each inner array has its own element type
/// and length, as the wire format allows.
#[derive(Clone, Debug)]
pub enum Array {
    /// `arr[u8]`.
    U8(Vec<u8>),
    /// `arr[i8]`.
    I8(Vec<i8>),
    /// `arr[u16]`.
    U16(Vec<u16>),
    /// `arr[i16]`.
    I16(Vec<i16>),
    /// `arr[u32]`.
    U32(Vec<u32>),
    /// `arr[i32]`.
    I32(Vec<i32>),
    /// `arr[f32]`.
    F32(Vec<f32>),
    /// `arr[bool]`.
    Bool(Vec<bool>),
    /// `arr[str]`, packed (see [`StringArray`]).
    String(StringArray),
    /// `arr[arr]`: each element an array of its own type.
    Array(Vec<Array>),
    /// `arr[u64]`.
    U64(Vec<u64>),
    /// `arr[i64]`.
    I64(Vec<i64>),
    /// `arr[f64]`.
    F64(Vec<f64>),
}

/// Bitwise equality for one element type (floats by bit pattern).
trait WireEq {
    fn wire_eq(&self, other: &Self) -> bool;
}

macro_rules! wire_eq_exact {
    ($($ty:ty),*) => { $( impl WireEq for $ty {
        fn wire_eq(&self, other: &Self) -> bool { self == other }
    } )* };
}
wire_eq_exact!(
    u8, i8, u16, i16, u32, i32, u64, i64, bool, GgufString, Array
);

impl WireEq for f32 {
    fn wire_eq(&self, other: &Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}

impl WireEq for f64 {
    fn wire_eq(&self, other: &Self) -> bool {
        self.to_bits() == other.to_bits()
    }
}

impl<T: WireEq> WireEq for Vec<T> {
    fn wire_eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a.wire_eq(b))
    }
}

macro_rules! impl_value_and_array {
    ($($variant:ident $ty:ident $as:ident $get:ident),*) => {
        impl Value {
            $(
                #[doc = concat!("The value, if it is a `", stringify!($ty), "`.")]
                pub fn $as(&self) -> Option<$ty> {
                    match self { Value::$variant(v) => Some(*v), _ => None }
                }
            )*

            /// The wire type.
            pub fn value_type(&self) -> ValueType {
                match self {
                    $( Value::$variant(_) => ValueType::$variant, )*
                    Value::Bool(_) => ValueType::Bool,
                    Value::String(_) => ValueType::String,
                    Value::Array(_) => ValueType::Array,
                }
            }
        }

        impl Array {
            /// The element type.
            pub fn elem_type(&self) -> ValueType {
                match self {
                    $( Array::$variant(_) => ValueType::$variant, )*
                    Array::Bool(_) => ValueType::Bool,
                    Array::String(_) => ValueType::String,
                    Array::Array(_) => ValueType::Array,
                }
            }

            /// Number of elements.
            pub fn len(&self) -> usize {
                match self {
                    $( Array::$variant(v) => v.len(), )*
                    Array::Bool(v) => v.len(),
                    Array::String(v) => v.len(),
                    Array::Array(v) => v.len(),
                }
            }

            /// An empty array of the given element type.
            pub fn empty(elem: ValueType) -> Array {
                match elem {
                    $( ValueType::$variant => Array::$variant(Vec::new()), )*
                    ValueType::Bool => Array::Bool(Vec::new()),
                    ValueType::String => Array::String(StringArray::new()),
                    ValueType::Array => Array::Array(Vec::new()),
                }
            }
        }

        impl PartialEq for Value {
            fn eq(&self, other: &Value) -> bool {
                match (self, other) {
                    $( (Value::$variant(a), Value::$variant(b)) => a.wire_eq(b), )*
                    (Value::Bool(a), Value::Bool(b)) => a == b,
                    (Value::String(a), Value::String(b)) => a == b,
                    (Value::Array(a), Value::Array(b)) => a == b,
                    _ => false,
                }
            }
        }

        impl PartialEq for Array {
            fn eq(&self, other: &Array) -> bool {
                match (self, other) {
                    $( (Array::$variant(a), Array::$variant(b)) => a.wire_eq(b), )*
                    (Array::Bool(a), Array::Bool(b)) => a == b,
                    (Array::String(a), Array::String(b)) => a == b,
                    (Array::Array(a), Array::Array(b)) => a.wire_eq(b),
                    _ => false,
                }
            }
        }

        $(
            impl From<$ty> for Value {
                fn from(v: $ty) -> Value { Value::$variant(v) }
            }
            impl From<Vec<$ty>> for Array {
                fn from(v: Vec<$ty>) -> Array { Array::$variant(v) }
            }
        )*
    };
}
for_each_number!(impl_value_and_array);

impl Eq for Value {}
impl Eq for Array {}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.into())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::String(v.into())
    }
}

impl From<GgufString> for Value {
    fn from(v: GgufString) -> Value {
        Value::String(v)
    }
}

impl From<Array> for Value {
    fn from(v: Array) -> Value {
        Value::Array(v)
    }
}

impl From<Vec<bool>> for Array {
    fn from(v: Vec<bool>) -> Array {
        Array::Bool(v)
    }
}

impl From<Vec<GgufString>> for Array {
    fn from(v: Vec<GgufString>) -> Array {
        Array::String(v.into_iter().collect())
    }
}

impl From<StringArray> for Array {
    fn from(v: StringArray) -> Array {
        Array::String(v)
    }
}

impl From<Vec<Array>> for Array {
    fn from(v: Vec<Array>) -> Array {
        Array::Array(v)
    }
}

impl Value {
    /// The full type as text: `u32`, `str`, `arr[str]`, `arr[arr]`.
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(a) => a.type_name(),
            other => other.value_type().name().to_string(),
        }
    }

    /// The value as a `u64` if it is an integer of any width and sign that fits.
    pub fn as_u64_lossless(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The string, if the value is one.
    pub fn as_gguf_string(&self) -> Option<&GgufString> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The text, if the value is a UTF-8 string.
    pub fn as_str(&self) -> Option<&str> {
        self.as_gguf_string()?.as_str()
    }

    /// The array, if the value is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The bool, if the value is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

impl Array {
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The full type as text: `arr[u32]`, `arr[str]`, `arr[arr]`.
    pub fn type_name(&self) -> String {
        format!("arr[{}]", self.elem_type().name())
    }
}

#[cfg(test)]
mod tests {
    use super::StringArray;

    #[test]
    fn string_arrays_keep_each_string_and_its_bytes() {
        let mut a = StringArray::new();
        assert!(a.is_empty() && a.get(0).is_none());
        a.push("");
        a.push(b"\xff\x00");
        a.push("token");
        assert_eq!(a.len(), 3);
        assert_eq!(a.get(0), Some(&b""[..]));
        assert_eq!(&a[1], b"\xff\x00");
        assert_eq!(&a[2], b"token");
        assert!(a.get(3).is_none());
        let all: Vec<&[u8]> = a.iter().collect();
        assert_eq!(all, [&b""[..], b"\xff\x00", b"token"]);
        assert_eq!(a.iter().next_back(), Some(&b"token"[..]));
        let same: StringArray = vec![&b""[..], b"\xff\x00", b"token"].into();
        assert_eq!(a, same);
        assert_ne!(a, StringArray::from(vec!["", "token"]));
        assert_eq!(format!("{a:?}"), "[\"\", \"\u{fffd}\\0\", \"token\"]");
    }

    /// Copies share the strings until one of them changes.
    #[test]
    fn a_copy_changes_apart_from_its_source() {
        let a = StringArray::from(vec!["a", "bc"]);
        let mut b = a.clone();
        b.push("def");
        assert_eq!(a, StringArray::from(vec!["a", "bc"]));
        assert_eq!(b.len(), 3);
        assert_eq!(&b[2], b"def");
        assert_eq!(a.wire_len(), 2 * 8 + 3);
    }

    /// Strings parsed from a file stay in its bytes, read as pushed ones, and are copied
    /// out only when the array changes.
    #[test]
    fn strings_shared_with_a_file_read_and_change_like_owned_ones() {
        use super::{SharedBytes, StringArray};
        use std::hash::{BuildHasher, RandomState};
        let owned = StringArray::from(vec![&b"ab"[..], b"", b"\xffz"]);
        let mut file = b"head".to_vec();
        let start = file.len();
        let mut wire = Vec::new();
        owned.write_wire(&mut wire);
        file.extend_from_slice(&wire);
        file.extend_from_slice(b"tail");
        let end = start + wire.len();
        let shared_file: SharedBytes = std::sync::Arc::new(file);
        let shared = StringArray::shared(shared_file.clone(), start..end, 3);
        assert_eq!(shared.len(), 3);
        assert_eq!(shared.wire_len(), owned.wire_len());
        assert_eq!(shared, owned);
        let hasher = RandomState::new();
        assert_eq!(hasher.hash_one(&shared), hasher.hash_one(&owned));
        assert_eq!(
            shared.iter().collect::<Vec<_>>(),
            owned.iter().collect::<Vec<_>>()
        );
        assert_eq!(shared.get(1), Some(&b""[..]));
        assert!(shared.get(3).is_none());
        let mut changed = shared.clone();
        changed.push("new");
        assert_eq!(&changed[3], b"new");
        assert_eq!(&changed[2], b"\xffz");
        assert_eq!(shared, owned);
        // The empty file range is an empty array.
        let empty = StringArray::shared(shared_file, start..start, 0);
        assert!(empty.is_empty() && empty == StringArray::new());
        // Lazily found ends also hold for an array read into its own buffer.
        let copied = StringArray::from_wire(wire, 3);
        assert_eq!(&copied[0], b"ab");
        assert_eq!(copied, owned);
    }
}
