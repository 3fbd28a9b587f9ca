//! How vocabulary values are spelled in generated code: always through
//! `::policy::…`, so the output compiles in any crate that depends on `policy`
//! (and in `policy` itself, which declares `extern crate self as policy`).

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use tuned_schema::{Algo, Arch, Capacity, Collective, DType, Link, Mode, Query, TableKey};

pub fn algo(a: Algo) -> TokenStream {
    let variant = quote::format_ident!("{}", a.variant());
    quote!(::policy::Algo::#variant)
}

pub fn collective(c: Collective) -> TokenStream {
    match c {
        Collective::AllReduce => quote!(::policy::Collective::AllReduce),
        Collective::AllGather => quote!(::policy::Collective::AllGather),
    }
}

pub fn link(l: Link) -> TokenStream {
    match l {
        Link::NvLink => quote!(::policy::Link::NvLink),
        Link::Pcie => quote!(::policy::Link::Pcie),
        Link::Loopback => quote!(::policy::Link::Loopback),
    }
}

pub fn dtype(d: DType) -> TokenStream {
    match d {
        DType::Bf16 => quote!(::policy::DType::Bf16),
        DType::F16 => quote!(::policy::DType::F16),
        DType::F32 => quote!(::policy::DType::F32),
    }
}

pub fn mode(m: Mode) -> TokenStream {
    match m {
        Mode::Graph => quote!(::policy::Mode::Graph),
        Mode::Eager => quote!(::policy::Mode::Eager),
    }
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
