//! Tensor access: a [`TensorView`] is a tensor's name, dtype, shape and bytes, borrowed
//! from a loaded file (or from the caller, to hand to a writer). Row ranges are views of
//! the same kind; sub-blocks over several leading axes are [`Slice`]s, which yield the
//! contiguous byte runs that make them up without copying anything else.

use super::header::checked_byte_len;
use super::{Dtype, Error, Result, decode};
use std::borrow::Cow;
use std::ops::Range;

/// A tensor's name, dtype, shape and data bytes (little-endian, row-major).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorView<'a> {
    name: &'a str,
    dtype: Dtype,
    shape: Cow<'a, [usize]>,
    data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// A view of caller-owned data; `data` must be exactly dtype x shape bytes.
    pub fn new(
        name: &'a str,
        dtype: Dtype,
        shape: impl Into<Cow<'a, [usize]>>,
        data: &'a [u8],
    ) -> Result<TensorView<'a>> {
        let shape = shape.into();
        let expected = checked_byte_len(name, dtype, &shape)?;
        if expected != data.len() {
            return Err(Error::WrongDataLength {
                name: name.to_owned(),
                dtype,
                shape: shape.into_owned(),
                expected,
                actual: data.len(),
            });
        }
        Ok(TensorView {
            name,
            dtype,
            shape,
            data,
        })
    }

    /// A view whose size the caller has already validated.
    pub(crate) fn validated(
        name: &'a str,
        dtype: Dtype,
        shape: &'a [usize],
        data: &'a [u8],
    ) -> Self {
        TensorView {
            name,
            dtype,
            shape: Cow::Borrowed(shape),
            data,
        }
    }

    /// The tensor's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Its shape, outermost axis first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Its raw bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Its element count.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Rows `rows` of the outermost axis, as a view of the same bytes (no copy).
    /// Errors if the tensor is a scalar, the range does not fit, or (F4, F6) the rows do
    /// not start and end on byte boundaries.
    pub fn rows(&self, rows: Range<usize>) -> Result<TensorView<'a>> {
        let slice = self.slice(std::slice::from_ref(&rows))?;
        let data = slice.as_contiguous().unwrap_or(&[]);
        Ok(TensorView {
            name: self.name,
            dtype: self.dtype,
            shape: Cow::Owned(slice.shape),
            data,
        })
    }

    /// The sub-block `ranges[i]` of each leading axis `i` (the axes after them whole),
    /// as the contiguous byte runs that make it up, without copying.
    pub fn slice(&self, ranges: &[Range<usize>]) -> Result<Slice<'a>> {
        Slice::new(self, ranges)
    }

    /// The values as f32 (F32, F16, BF16 and the F8 types; see [`decode_f32_into`]).
    ///
    /// [`decode_f32_into`]: super::decode_f32_into
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.elements_for_decode()?];
        self.decode_f32_into(&mut out)?;
        Ok(out)
    }

    /// Decodes the values into `out` (one f32 per element).
    pub fn decode_f32_into(&self, out: &mut [f32]) -> Result<()> {
        decode::decode_f32_into(self.name, self.dtype, self.data, out)
    }

    fn elements_for_decode(&self) -> Result<usize> {
        if decode::can_decode_f32(self.dtype) {
            Ok(self.elements())
        } else {
            Err(Error::CannotDecode {
                name: self.name.to_owned(),
                dtype: self.dtype,
            })
        }
    }
}

/// A sub-block of a tensor over its leading axes: a shape and the byte runs, in
/// row-major order, that hold it.
#[derive(Clone, Debug)]
pub struct Slice<'a> {
    name: &'a str,
    dtype: Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
    /// Outer axes walked run by run: (range, stride in elements).
    outer: Vec<(Range<usize>, usize)>,
    /// Element offset of each run from its outer position (the start of the innermost
    /// sliced axis).
    run_start: usize,
    /// Elements per run.
    run_len: usize,
    runs: usize,
}

impl<'a> Slice<'a> {
    fn new(view: &TensorView<'a>, ranges: &[Range<usize>]) -> Result<Slice<'a>> {
        let dims = view.shape();
        let out_of_range = || Error::SliceOutOfRange {
            name: view.name.to_owned(),
            ranges: ranges.to_vec(),
            shape: dims.to_vec(),
        };
        if ranges.len() > dims.len()
            || ranges
                .iter()
                .zip(dims)
                .any(|(r, &d)| r.start > r.end || r.end > d)
        {
            return Err(out_of_range());
        }
        let mut shape: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
        shape.extend_from_slice(&dims[ranges.len()..]);
        let elements: usize = shape.iter().product();
        if elements == 0 {
            // Nothing to read; and with a zero axis the other axes' products (strides)
            // are unbounded, so they are not computed.
            return Ok(Slice {
                name: view.name,
                dtype: view.dtype,
                shape,
                data: view.data,
                outer: Vec::new(),
                run_start: 0,
                run_len: 0,
                runs: 0,
            });
        }
        // strides[i]: elements between consecutive indices of axis i. Every axis is
        // non-empty here, so these are at most the (validated) element count.
        let mut strides = vec![1usize; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        // The innermost axis whose range is not whole: runs are contiguous from there in.
        let inner = ranges.iter().zip(dims).rposition(|(r, &d)| r.len() != d);
        let (outer, run_start, run_len) = match inner {
            None => (Vec::new(), 0, elements),
            Some(m) => (
                ranges[..m]
                    .iter()
                    .cloned()
                    .zip(strides[..m].iter().copied())
                    .collect(),
                ranges[m].start * strides[m],
                ranges[m].len() * strides[m],
            ),
        };
        let runs = outer
            .iter()
            .map(|(r, _): &(Range<usize>, usize)| r.len())
            .product();
        let bits = view.dtype.bit_size();
        let on_byte = |elements: usize| (elements * bits).is_multiple_of(8);
        let aligned = on_byte(run_start)
            && on_byte(run_len)
            && outer.iter().all(|(_, stride)| on_byte(*stride));
        if !aligned {
            return Err(Error::SliceMisaligned {
                name: view.name.to_owned(),
                dtype: view.dtype,
                ranges: ranges.to_vec(),
            });
        }
        Ok(Slice {
            name: view.name,
            dtype: view.dtype,
            shape,
            data: view.data,
            outer,
            run_start,
            run_len,
            runs,
        })
    }

    /// The tensor's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The slice's shape: the range lengths, then the remaining axes.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Its element count.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Its size in bytes.
    pub fn byte_len(&self) -> usize {
        self.elements() * self.dtype.bit_size() / 8
    }

    /// The byte runs that hold the slice, in order (one when it is contiguous).
    pub fn chunks(&self) -> Chunks<'_, 'a> {
        Chunks {
            slice: self,
            index: vec![0; self.outer.len()],
            done: 0,
        }
    }

    /// The bytes, when the slice is one contiguous run (or empty).
    pub fn as_contiguous(&self) -> Option<&'a [u8]> {
        match self.runs {
            0 => Some(&[]),
            1 => self.chunks().next(),
            _ => None,
        }
    }

    /// The bytes, gathered into one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.byte_len());
        for chunk in self.chunks() {
            out.extend_from_slice(chunk);
        }
        out
    }

    /// The values as f32 (F32, F16, BF16 and the F8 types).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        if !decode::can_decode_f32(self.dtype) {
            return Err(Error::CannotDecode {
                name: self.name.to_owned(),
                dtype: self.dtype,
            });
        }
        let mut out = vec![0f32; self.elements()];
        self.decode_f32_into(&mut out)?;
        Ok(out)
    }

    /// Decodes the values into `out` (one f32 per element).
    pub fn decode_f32_into(&self, out: &mut [f32]) -> Result<()> {
        if out.len() != self.elements() {
            return Err(Error::OutputLength {
                name: self.name.to_owned(),
                expected: self.elements(),
                actual: out.len(),
            });
        }
        let mut rest = out;
        for chunk in self.chunks() {
            let n = chunk.len() * 8 / self.dtype.bit_size();
            let (head, tail) = rest.split_at_mut(n);
            decode::decode_f32_into(self.name, self.dtype, chunk, head)?;
            rest = tail;
        }
        Ok(())
    }
}

/// Iterator over the contiguous byte runs of a [`Slice`].
#[derive(Debug)]
pub struct Chunks<'s, 'a> {
    slice: &'s Slice<'a>,
    /// Position within each outer range (an odometer, last axis fastest).
    index: Vec<usize>,
    done: usize,
}

impl<'a> Iterator for Chunks<'_, 'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.slice;
        if self.done >= s.runs {
            return None;
        }
        let start: usize = s.run_start
            + s.outer
                .iter()
                .zip(&self.index)
                .map(|((r, stride), &i)| (r.start + i) * stride)
                .sum::<usize>();
        let bits = s.dtype.bit_size();
        let begin = start * bits / 8;
        let end = begin + s.run_len * bits / 8;
        self.done += 1;
        for (pos, (r, _)) in self.index.iter_mut().zip(&s.outer).rev() {
            *pos += 1;
            if *pos < r.len() {
                break;
            }
            *pos = 0;
        }
        s.data.get(begin..end)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.slice.runs - self.done;
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    #[test]
    fn rows_and_blocks() {
        let data = iota(24);
        let t = TensorView::new("t", Dtype::U8, vec![2, 3, 4], &data).unwrap();
        let r = t.rows(1..2).unwrap();
        assert_eq!(r.shape(), [1, 3, 4]);
        assert_eq!(r.data(), &data[12..24]);
        let s = t.slice(&[0..2, 1..3]).unwrap();
        assert_eq!(s.shape(), [2, 2, 4]);
        let chunks: Vec<_> = s.chunks().collect();
        assert_eq!(chunks, [&data[4..12], &data[16..24]]);
        assert_eq!(s.to_vec().len(), 16);
        let whole = t.slice(&[0..2, 0..3, 0..4]).unwrap();
        assert_eq!(whole.as_contiguous(), Some(&data[..]));
        let inner = t.slice(&[1..2, 0..3, 1..2]).unwrap();
        assert_eq!(inner.to_vec(), [13, 17, 21]);
        assert_eq!(t.rows(1..1).unwrap().shape(), [0, 3, 4]);
        assert!(t.rows(0..3).is_err());
        assert!(t.slice(&[0..1, 0..1, 0..1, 0..1]).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = t.rows(2..1);
        assert!(backwards.is_err());
    }

    #[test]
    fn empty_tensors_with_huge_axes_slice_without_overflow() {
        let t = TensorView::new("z", Dtype::F64, vec![0, 1 << 40, 1 << 40], &[]).unwrap();
        assert_eq!(t.slice(&[0..0, 0..5]).unwrap().chunks().count(), 0);
        // Upstream's rule: the product is checked left to right, so a zero must come
        // before the axes whose product would overflow.
        assert!(TensorView::new("z", Dtype::F64, vec![1 << 40, 1 << 40, 0], &[]).is_err());
        let t = TensorView::new("z", Dtype::F32, vec![3, 0, 1 << 40, 1 << 40], &[]).unwrap();
        assert_eq!(t.rows(1..2).unwrap().shape(), [1, 0, 1 << 40, 1 << 40]);
        assert!(t.to_f32().unwrap().is_empty());
    }

    #[test]
    fn sub_byte_slices_must_fall_on_bytes() {
        let data = iota(3);
        let t = TensorView::new("q", Dtype::F4, vec![3, 2], &data).unwrap();
        assert_eq!(t.rows(1..3).unwrap().data(), &data[1..3]);
        let err = t.slice(&[0..3, 0..1]).unwrap_err();
        assert!(matches!(err, Error::SliceMisaligned { .. }), "{err}");
    }

    #[test]
    fn decodes_slices() {
        let values: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = TensorView::new("w", Dtype::F32, vec![3, 4], &bytes).unwrap();
        assert_eq!(t.to_f32().unwrap(), values);
        assert_eq!(
            t.slice(&[1..3, 2..4]).unwrap().to_f32().unwrap(),
            [6.0, 7.0, 10.0, 11.0]
        );
        let err = TensorView::new("w", Dtype::F32, vec![5], &bytes).unwrap_err();
        assert!(err.to_string().contains("tensor `w`"));
    }
}
