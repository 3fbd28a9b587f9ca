//! Validated files → the items `policy` exports. A plain function over
//! `proc_macro2`, so it is unit-tested without a compiler in the loop.

mod capacity;
mod checks;
mod layout;
mod platforms;
mod select;
mod tokens;

use proc_macro2::TokenStream;
use quote::quote;
use tuned_schema::folder::LoadedFile;
use tuned_schema::parse::ParsedFile;

/// Everything `include_tuned!` expands to, for files that passed validation.
pub fn generate(files: &[LoadedFile]) -> TokenStream {
    let parsed: Vec<&ParsedFile> = files.iter().map(|f| &f.parsed).collect();
    let rebuild_on_edit = files.iter().map(|f| {
        let path = f.absolute.to_string_lossy().into_owned();
        quote! { const _: &[u8] = ::core::include_bytes!(#path); }
    });
    let table_arch = select::table_arch_fn(&parsed);
    let select = select::select_fn(&parsed);
    let capacity = capacity::capacity_fn(&parsed);
    let platforms = platforms::platforms_const(&parsed);
    let checks = checks::const_checks(&parsed);
    quote! {
        // Cargo tracks files read by `include_bytes!`: editing a table rebuilds.
        #(#rebuild_on_edit)*
        #table_arch
        #select
        #capacity
        #platforms
        #checks
    }
}

#[cfg(test)]
mod tests;
