//! A requantization: [`plan`] decides each tensor's target type the way llama.cpp's
//! quantizer does, [`imatrix`] reads the importance matrix that steers it, [`run`] writes
//! the result.

pub mod imatrix;
pub mod plan;
pub mod run;
