//! A requantization: [`plan`] decides each tensor's target type the way llama.cpp's
//! quantizer does, [`run`] writes the result.

pub mod plan;
pub mod run;
