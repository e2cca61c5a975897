//! Why a plan cannot be made or carried out.

use super::FileType;
use quantforge_kernels::GgmlType;

/// Why a plan cannot be made or carried out.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file type has no default tensor type; llama.cpp refuses it as a target.
    #[error("invalid output file type {0}: llama.cpp cannot quantize to it")]
    InvalidFileType(FileType),
    /// A model hyperparameter is missing or out of range.
    #[error("model metadata: {0}")]
    Metadata(String),
    /// A tensor name's `blk.N.` has a number beyond a C `int` (`--prune-layers`).
    #[error("tensor {0}: layer number out of range")]
    BadLayerNumber(String),
    /// Two tensors share a name.
    #[error("tensor {0} appears twice")]
    DuplicateTensor(String),
    /// A `--tensor-type` pattern is not a valid regular expression.
    #[error("invalid --tensor-type pattern {pattern:?}: {cause}")]
    BadPattern {
        /// The pattern as given.
        pattern: String,
        /// What the regex parser said.
        cause: Box<regex::Error>,
    },
    /// A `--tensor-type` argument is not `PATTERN=TYPE`.
    #[error("malformed --tensor-type {0:?}: expected PATTERN=TYPE")]
    MalformedTensorType(String),
    /// A type name that is not a ggml type.
    #[error("unknown ggml type {0:?}")]
    UnknownType(String),
    /// A row does not fit the target's blocks and llama.cpp has no smaller type for it.
    #[error(
        "tensor {tensor}: rows of {ncols} are not whole blocks of {ty} and no fallback type is defined for {ty}"
    )]
    NoFallback {
        /// The tensor's name.
        tensor: String,
        /// The type it was meant to get.
        ty: GgmlType,
        /// Its row length.
        ncols: u64,
    },
    /// A type chosen explicitly (`--token-embedding-type`, `--output-tensor-type`,
    /// `--tensor-type`) does not fit the tensor's rows; llama.cpp would abort.
    #[error("tensor {tensor}: rows of {ncols} are not whole blocks of {ty} (block of {block})")]
    RowNotWholeBlocks {
        /// The tensor's name.
        tensor: String,
        /// The type it was given.
        ty: GgmlType,
        /// Its row length.
        ncols: u64,
        /// The block size of `ty`.
        block: usize,
    },
    /// An expert tensor of a MoE model whose name carries no `blk.N.`.
    #[error("failed to determine the layer of tensor {tensor}")]
    NoLayer {
        /// The tensor's name.
        tensor: String,
    },
    /// An expert tensor whose `blk.N.` is outside the model's layers.
    #[error("bad layer {layer} for tensor {tensor}: must be in [0, {n_layer})")]
    BadLayer {
        /// The tensor's name.
        tensor: String,
        /// The layer its name gives.
        layer: i64,
        /// The model's `block_count`.
        n_layer: u32,
    },
    /// The plan needs an importance matrix that was not given.
    #[error("this quantization requires an importance matrix: tensor {tensor} would be {ty}")]
    ImatrixRequired {
        /// The first tensor that needs it.
        tensor: String,
        /// Its target type.
        ty: GgmlType,
    },
    /// A quantized tensor would be requantized without `--allow-requantize`.
    #[error("requantizing from type {from} is disabled (tensor {tensor}); pass --allow-requantize")]
    RequantizeDisabled {
        /// The first such tensor.
        tensor: String,
        /// Its source type.
        from: GgmlType,
    },
}
