//! The one error type of the kernels crate.

use crate::GgmlType;

/// Everything a codec call can reject. Each variant carries what is needed to find the
/// offending input.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// A type code that ggml never defined.
    #[error("unknown ggml type code {0}")]
    UnknownTypeCode(u32),
    /// A type name that ggml does not know.
    #[error("unknown ggml type name '{0}'")]
    UnknownTypeName(String),
    /// A type ggml removed; files holding it cannot be read by current ggml either.
    #[error("ggml type {name} (code {code}) was removed from ggml and is not supported")]
    RemovedType {
        /// Its former code.
        code: u32,
        /// Its former name.
        name: &'static str,
    },
    /// A row or buffer length that is not a whole number of blocks.
    #[error("{n} elements is not a whole number of {ty} blocks of {block}")]
    NotBlockMultiple {
        /// The type whose block size was violated.
        ty: GgmlType,
        /// The element count given.
        n: usize,
        /// The block size of `ty`.
        block: usize,
    },
    /// A size that overflows `usize`.
    #[error("{n} elements of {ty} overflow the address space")]
    TooLarge {
        /// The type.
        ty: GgmlType,
        /// The element count given.
        n: usize,
    },
    /// Two buffers whose lengths do not agree.
    #[error("{what}: expected {expected}, got {actual}")]
    LengthMismatch {
        /// Which length was wrong.
        what: &'static str,
        /// The length the other arguments imply.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A NaN or infinity in the input to a quantizer.
    #[error("non-finite value {value} at element {index}")]
    NonFinite {
        /// Index of the element in the source slice.
        index: usize,
        /// The value found there.
        value: f32,
    },
    /// A NaN or infinity in an importance matrix.
    #[error("non-finite importance weight {value} at column {index}")]
    NonFiniteWeight {
        /// Column of the weight.
        index: usize,
        /// The value found there.
        value: f32,
    },
    /// A type whose quantizer needs an importance matrix, given none.
    #[error(
        "quantizing to {ty} needs an importance matrix (ggml's quantizer refuses to run without one)"
    )]
    ImatrixRequired {
        /// The type.
        ty: GgmlType,
    },
    /// The operation is not defined for this type (ggml has no such codec either).
    #[error("{op} is not supported for type {ty}")]
    Unsupported {
        /// The type.
        ty: GgmlType,
        /// `"quantize"` or `"dequantize"`.
        op: &'static str,
    },
}

/// Result alias of the kernels crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
