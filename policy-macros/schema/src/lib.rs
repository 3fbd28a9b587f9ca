//! Schema version 1 of the `tuned/*.toml` selection tables: the vocabulary, the
//! typed document, and (with the `parse` feature) parsing with positions,
//! validation, the canonical writer and a plain interpreter.
//!
//! The proc-macro in `policy-macros` is a thin shell over this crate; the tuner
//! writes files through it; `policy` re-exports the vocabulary.

pub mod document;
pub mod vocab;

pub use document::*;
pub use vocab::*;
