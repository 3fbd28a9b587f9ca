//! `include_tuned!("tuned")`: turns a folder of `*.toml` selection tables into
//! `const fn` selection code with compile-time checks.
//!
//! The macro is a thin shell: `tuned-schema` reads and validates the files,
//! the private `codegen` module turns them into tokens. Every problem in the input becomes a
//! compile error that starts with `file:line:col:` and points at the folder
//! literal; the macro never panics on bad input.
//!
//! The expansion defines, in the invoking module: `table_arch`, `select`,
//! `capacity`, `PLATFORMS`, `static TABLES: policy::Tables` (the same, as one
//! value for a dispatcher) and `const _: () = assert!(…)` checks. It refers to
//! the vocabulary as `::policy::…`, so the invoking crate must depend on `policy`
//! (or be `policy`, which declares `extern crate self as policy`); engines
//! usually invoke it as `policy::include_tuned!`, which re-exports it.
//!
//! Layers: `args` (the macro's one argument, a folder relative to the
//! invoking crate's `Cargo.toml`), then `tuned_schema::folder::load_folder`
//! (parse and validate every file), then `codegen` (one module per generated
//! item, plus the compile-time checks).
//!
//! ```rust,ignore
//! // In an engine: `select`, `capacity`, `table_arch`, `PLATFORMS` and
//! // `TABLES` generated from my-engine/tuned/*.toml.
//! pub mod tables {
//!     policy::include_tuned!("tuned");
//! }
//! const CHOICE: policy::Algo = tables::select(QUERY);
//! ```

#![warn(missing_docs)]

mod args;
mod codegen;

use std::path::PathBuf;

use proc_macro::TokenStream;
use syn::LitStr;
use tuned_schema::Diagnostic;
use tuned_schema::folder::load_folder;

use args::{Args, Base};

/// Generates the selection functions from every `*.toml` file in a folder.
/// A file that does not parse or validate is a compile error naming its
/// `file:line:col`; so is a folder that cannot be read or holds no `*.toml` file.
///
/// ```text
/// policy_macros::include_tuned!("tuned");                           // relative to Cargo.toml
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
        Ok(files) => {
            let mut tokens = codegen::generate(&files);
            tokens.extend(tables_static(&args.folder));
            tokens.into()
        }
        Err(error) => {
            // The items the expansion would define, beside the error: those
            // of no file, where every query runs the collective's fallback.
            // Code that uses them then compiles, so the file's problems are
            // the only errors and none cascades ("cannot find function `select`").
            let mut tokens = error.to_compile_error();
            tokens.extend(codegen::generate(&[]));
            tokens.extend(tables_static(&args.folder));
            tokens.into()
        }
    }
}

/// `static TABLES`: the generated items as one value, which a dispatcher
/// compiled before the invoking crate (`kernels`) can call through. A `static`
/// rather than a `const` so that it has one address, by which `use_tables`
/// recognises a second hand-over of the same tables.
fn tables_static(folder: &LitStr) -> proc_macro2::TokenStream {
    // The macro runs inside the invoking crate's rustc, which Cargo gives the
    // crate's name; without Cargo the folder alone has to do.
    let origin = match std::env::var("CARGO_PKG_NAME") {
        Ok(name) if !name.is_empty() => format!("{name}: {}", folder.value()),
        _ => folder.value(),
    };
    quote::quote! {
        /// The tables of this module as one value, for
        /// [`policy::use_tables`](::policy::use_tables) and dispatchers.
        pub static TABLES: ::policy::Tables = ::policy::Tables::__generated(
            #origin,
            select,
            capacity,
            table_arch,
            PLATFORMS,
        );
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
