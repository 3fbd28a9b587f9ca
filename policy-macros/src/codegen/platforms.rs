//! `PLATFORMS`: the tables as data, for `tuner show` and for people.

use proc_macro2::TokenStream;
use quote::quote;
use tuned_schema::parse::ParsedFile;

use super::tokens;

pub fn platforms_const(files: &[&ParsedFile]) -> TokenStream {
    let platforms = files.iter().map(|file| platform_info(file));
    quote! {
        /// Every platform file the tables were generated from, in file-name order.
        pub const PLATFORMS: &[::policy::PlatformInfo] = &[#(#platforms),*];
    }
}

fn platform_info(file: &ParsedFile) -> TokenStream {
    let doc = &file.document;
    let p = &doc.platform;
    let arch = tokens::arch(p.arch);
    let link = tokens::link(p.link);
    let gpu = &p.gpu;
    let source = p.source.name();
    let citation = tokens::some_str(p.citation.as_deref());
    let path = &file.path;
    let capacities = doc.capacities.iter().map(|c| {
        let collective = tokens::collective(c.collective);
        let algo = tokens::algo(c.algo);
        let capacity = tokens::capacity(c.capacity);
        quote! {
            ::policy::CapacityEntry { collective: #collective, algo: #algo, capacity: #capacity }
        }
    });
    let tables = doc.tables.iter().map(|t| {
        let key = tokens::table_key(t.key);
        // Resolved here, so `PLATFORMS` readers never re-implement the default.
        let origin = doc.origin(t);
        let source = origin.source.name();
        let inherited = origin.inherited;
        let citation = tokens::some_str(origin.citation);
        let evidence = tokens::some_str(origin.evidence);
        let date = tokens::some_str(origin.date);
        let tuner_version = tokens::some_str(origin.tuner_version);
        let note = tokens::some_str(t.note.as_deref());
        let bands = t.bands.iter().map(|b| {
            let max = match b.max {
                Some(max) => {
                    let max = tokens::u64_lit(max);
                    quote!(::core::option::Option::Some(#max))
                }
                None => quote!(::core::option::Option::None),
            };
            let algo = tokens::algo(b.algo);
            quote!(::policy::Band { max: #max, algo: #algo })
        });
        quote! {
            ::policy::TableInfo {
                key: #key,
                source: #source,
                source_inherited: #inherited,
                citation: #citation,
                evidence: #evidence,
                date: #date,
                tuner_version: #tuner_version,
                note: #note,
                bands: &[#(#bands),*],
            }
        }
    });
    quote! {
        ::policy::PlatformInfo {
            arch: #arch,
            link: #link,
            gpu: #gpu,
            source: #source,
            citation: #citation,
            file: #path,
            capacities: &[#(#capacities),*],
            tables: &[#(#tables),*],
        }
    }
}
