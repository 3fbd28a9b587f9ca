//! How vocabulary values are spelled in generated code: always through
//! `::policy::…`, so the output compiles in any crate that depends on `policy`
//! (and in `policy` itself, which declares `extern crate self as policy`).

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use tuned_schema::{Algo, Arch, Capacity, Collective, DType, Link, Mode, Query, TableKey};

/// `::policy::<Type>::<Variant>` for a fieldless vocabulary value: its
/// derived `Debug` is its variant's identifier, so new variants need nothing
/// here.
fn variant(ty: &str, value: impl std::fmt::Debug) -> TokenStream {
    let (ty, variant) = (
        quote::format_ident!("{ty}"),
        quote::format_ident!("{value:?}"),
    );
    quote!(::policy::#ty::#variant)
}

pub fn algo(a: Algo) -> TokenStream {
    variant("Algo", a)
}

pub fn collective(c: Collective) -> TokenStream {
    variant("Collective", c)
}

pub fn link(l: Link) -> TokenStream {
    variant("Link", l)
}

pub fn dtype(d: DType) -> TokenStream {
    variant("DType", d)
}

pub fn mode(m: Mode) -> TokenStream {
    variant("Mode", m)
}

pub fn arch(a: Arch) -> TokenStream {
    let (major, minor) = (u8_lit(a.major), u8_lit(a.minor));
    quote!(::policy::Arch::from_compute_capability(#major, #minor))
}

pub fn capacity(c: Capacity) -> TokenStream {
    let (max_bytes, align) = (u64_lit(c.max_bytes), u64_lit(c.align));
    quote!(::policy::Capacity { max_bytes: #max_bytes, align: #align })
}

pub fn table_key(k: TableKey) -> TokenStream {
    let collective = collective(k.collective);
    let world_size = u32_lit(k.world_size);
    let dtype = dtype(k.dtype);
    let mode = mode(k.mode);
    quote! {
        ::policy::TableKey {
            collective: #collective,
            world_size: #world_size,
            dtype: #dtype,
            mode: #mode,
        }
    }
}

pub fn query(q: Query) -> TokenStream {
    let key = table_key(q.key);
    let arch = arch(q.arch);
    let link = link(q.link);
    let bytes = u64_lit(q.bytes);
    quote! {
        ::policy::Query {
            key: #key,
            arch: #arch,
            link: #link,
            bytes: #bytes,
        }
    }
}

pub fn some_str(text: Option<&str>) -> TokenStream {
    match text {
        Some(text) => quote!(::core::option::Option::Some(#text)),
        None => quote!(::core::option::Option::None),
    }
}

pub fn u8_lit(n: u8) -> Literal {
    Literal::u8_unsuffixed(n)
}

pub fn u32_lit(n: u32) -> Literal {
    Literal::u32_unsuffixed(n)
}

pub fn u64_lit(n: u64) -> Literal {
    Literal::u64_unsuffixed(n)
}
