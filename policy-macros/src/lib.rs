//! `include_tuned!("../tuned")`: turns a folder of `*.toml` selection tables into
//! `const fn` selection code with compile-time checks.
//!
//! The macro is a thin shell: `tuned-schema` reads and validates the files,
//! the private `codegen` module turns them into tokens. Every problem in the input becomes a
//! compile error that starts with `file:line:col:` and points at the folder
//! literal; the macro never panics on bad input.
//!
//! The expansion defines, in the invoking module: `table_arch`, `select`,
//! `capacity`, `PLATFORMS` and `const _: () = assert!(…)` checks. It refers to
//! the vocabulary as `::policy::…`, so the invoking crate must depend on `policy`
//! (or be `policy`, which declares `extern crate self as policy`).

mod args;
mod codegen;

use std::path::PathBuf;

use proc_macro::TokenStream;
use syn::LitStr;
use tuned_schema::Diagnostic;
use tuned_schema::folder::load_folder;

use args::{Args, Base};

/// Generates the selection functions from every `*.toml` file in a folder.
///
/// ```text
/// policy_macros::include_tuned!("../tuned");                      // relative to Cargo.toml
/// policy_macros::include_tuned!("fixtures/bad", relative_to = file); // relative to this .rs file
/// ```
#[proc_macro]
pub fn include_tuned(input: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(input as Args);
    let expanded = resolve_folder(&args).and_then(|folder| {
        load_folder(&folder, &args.folder.value())
            .map_err(|diagnostics| to_error(&args.folder, diagnostics))
    });
    match expanded {
        Ok(files) => codegen::generate(&files).into(),
        Err(error) => error.to_compile_error().into(),
    }
}

fn resolve_folder(args: &Args) -> syn::Result<PathBuf> {
    let base = match args.base {
        Base::Manifest => std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .ok_or_else(|| {
                syn::Error::new(
                    args.folder.span(),
                    "CARGO_MANIFEST_DIR is not set: build with cargo, or use `relative_to = file`",
                )
            })?,
        Base::File => proc_macro::Span::call_site()
            .local_file()
            .and_then(|file| file.parent().map(PathBuf::from))
            .ok_or_else(|| {
                syn::Error::new(
                    args.folder.span(),
                    "the invoking source file is not on disk; use a path relative to the manifest",
                )
            })?,
    };
    Ok(base.join(args.folder.value()))
}

/// One compile error per diagnostic, each pointing at the folder literal.
fn to_error(folder: &LitStr, diagnostics: Vec<Diagnostic>) -> syn::Error {
    let mut errors = diagnostics
        .into_iter()
        .map(|d| syn::Error::new(folder.span(), d.to_string()));
    let mut combined = errors
        .next()
        .unwrap_or_else(|| syn::Error::new(folder.span(), "invalid tables"));
    for error in errors {
        combined.combine(error);
    }
    combined
}
