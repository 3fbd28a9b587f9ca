//! Schema version 1 of the `tuned/*.toml` selection tables: the vocabulary, the
//! typed document, and (with the `parse` feature) parsing with positions,
//! validation, the canonical writer and a plain interpreter.
//!
//! The proc-macro in `policy-macros` is a thin shell over this crate; the tuner
//! writes files through it; `policy` re-exports the vocabulary.
//!
//! - [`parse::parse_document`] / [`parse::parse_file`]: TOML text → [`Document`]
//!   (with positions), errors as [`Diagnostic`]s naming `file:line:col`;
//! - [`validate::validate`]: every rule, within and across files;
//! - [`write::to_toml_string`]: the canonical text of a document;
//! - [`interpret`]: the reference meaning of a set of documents;
//! - [`folder::load_folder`]: all of the above for a folder of files;
//! - [`merge::merge`]: new tables into an existing file, keeping the rest.

pub mod diagnostic;
pub mod document;
pub mod merge;
pub mod size;
pub mod vocab;

#[cfg(feature = "parse")]
pub mod folder;
#[cfg(feature = "parse")]
pub mod interpret;
#[cfg(feature = "parse")]
pub mod parse;
#[cfg(feature = "parse")]
pub mod validate;
#[cfg(feature = "parse")]
pub mod write;

pub use diagnostic::{Diagnostic, Pos};
pub use document::*;
pub use vocab::*;
