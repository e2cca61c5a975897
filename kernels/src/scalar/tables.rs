//! PLACEHOLDER tables
