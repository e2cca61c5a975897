//! The error of the model-level library modules ([`crate::model`], [`crate::convert`],
//! [`mod@crate::dequantize`], [`crate::diff`]): what failed in the containers, the
//! codecs or the conversion rules, each wrapped in what was being done (a tensor, a key)
//! where that helps to find it.
//!
//! [`Error::Context`] keeps the error it wraps as its [`std::error::Error::source`], so a
//! report that walks the chain (`anyhow`'s `{:#}` at the command line) prints
//! `what: why: deeper cause`.

use quantforge_formats::gguf::GgufError;
use quantforge_formats::safetensors::Error as SafetensorsError;
use std::fmt::Display;

/// Why a model could not be read, converted, dequantized or compared.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a GGUF file.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// Reading or writing a safetensors file.
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    /// A codec refused its input.
    #[error(transparent)]
    Codec(#[from] quantforge_kernels::Error),
    /// Parsing a JSON value this crate records in metadata.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A size or count that does not fit the type it must be stored in.
    #[error(transparent)]
    OutOfRange(#[from] std::num::TryFromIntError),
    /// A number in metadata that does not parse.
    #[error(transparent)]
    Number(#[from] std::num::ParseIntError),
    /// Bytes that should be UTF-8 text and are not.
    #[error(transparent)]
    Utf8(#[from] std::str::Utf8Error),
    /// Input that breaks a rule of the conversion (the message says which).
    #[error("{0}")]
    Invalid(String),
    /// `source`, met while doing what `context` says.
    #[error("{context}")]
    Context {
        /// What was being done ("tensor `blk.0.attn_q.weight`").
        context: String,
        /// What failed.
        #[source]
        source: Box<Error>,
    },
}

/// A result of this crate's model-level modules.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Invalid`] with this message.
    pub fn invalid(message: impl Display) -> Error {
        Error::Invalid(message.to_string())
    }
}

/// Wrapping errors (or a missing value) in what was being done, like `anyhow::Context`
/// but keeping the typed [`Error`].
pub trait Context<T> {
    /// The error, wrapped in `context`.
    fn context(self, context: impl Display) -> Result<T>;
    /// The error, wrapped in the context `f` makes (only called on failure).
    fn with_context<C: Display>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: impl Display) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context.to_string(),
            source: Box::new(e.into()),
        })
    }

    fn with_context<C: Display>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: f().to_string(),
            source: Box::new(e.into()),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, context: impl Display) -> Result<T> {
        self.ok_or_else(|| Error::invalid(context))
    }

    fn with_context<C: Display>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.ok_or_else(|| Error::invalid(f()))
    }
}

/// Returns [`Error::Invalid`] with the formatted message unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::error::Error::Invalid(format!($($arg)+)));
        }
    };
}

/// Returns [`Error::Invalid`] with the formatted message.
macro_rules! bail {
    ($($arg:tt)+) => {
        return Err($crate::error::Error::Invalid(format!($($arg)+)))
    };
}

pub(crate) use {bail, ensure};
