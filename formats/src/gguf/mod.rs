//! GGUF (placeholder until the reader lands).
