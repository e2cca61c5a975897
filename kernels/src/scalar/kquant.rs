//! PLACEHOLDER kquant
