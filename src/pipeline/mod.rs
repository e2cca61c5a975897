//! A requantization: [`plan`] decides each tensor's target type the way llama.cpp's
//! quantizer does.

pub mod plan;
