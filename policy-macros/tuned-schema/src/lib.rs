//! Schema version 1 of the `tuned/*.toml` selection tables: the vocabulary, the
//! typed document, and (with the `parse` feature) parsing with positions,
//! validation, the canonical writer and a plain interpreter.
//!
//! The proc-macro in `policy-macros` is a thin shell over this crate; the tuner
//! writes files through it; `policy` re-exports the vocabulary.
//!
//! - [`parse::parse_file`]: TOML text → [`Document`] (with positions), errors
//!   as [`Diagnostic`]s naming `file:line:col`;
//! - [`validate::validate`]: every rule, within and across files, and
//!   [`validate::parse_document`], one file parsed and checked on its own;
//! - [`write::to_toml_string`]: the canonical text of a document;
//! - [`interpret`]: the reference meaning of a set of documents;
//! - [`folder::load_folder`]: all of the above for a folder of files;
//! - [`merge::merge`]: new tables into an existing file, keeping the rest.
//!
//! Underneath all of them, without the `parse` feature (what `policy` and so
//! every engine builds): the vocabulary ([`vocab`]: [`Algo`], [`Arch`],
//! [`Query`], [`TableKey`], … and the rules written once on it, such as
//! [`Arch::answered_by`], the arch fallback, and [`Query::key`] /
//! [`TableKey::query`], a query's table and back), the rule by which a custom
//! algorithm declines a call ([`decline`]), the document types ([`document`])
//! and byte sizes as people write them ([`size`]).
//!
//! ```
//! use tuned_schema::size::{format_size, parse_size};
//! use tuned_schema::Arch;
//!
//! assert_eq!(parse_size("448KiB"), Ok(448 * 1024));
//! assert_eq!(format_size(1152 * 1024), "1152KiB");
//! // sm103 has no file of its own: sm100's answers, never another major's.
//! let files = [Arch::SM90, Arch::SM100];
//! assert_eq!(Arch::from_compute_capability(10, 3).answered_by(files), Some(Arch::SM100));
//! assert_eq!(Arch::from_compute_capability(12, 0).answered_by(files), None);
//! ```

#![warn(missing_docs)]

pub mod decline;
pub mod diagnostic;
pub mod document;
pub mod merge;
pub mod size;
pub mod vocab;

#[cfg(feature = "serde")]
mod named;

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
