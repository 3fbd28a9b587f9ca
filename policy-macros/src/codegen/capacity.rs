//! `capacity(arch, link, collective, algo)`: what the answering file declares,
//! else the documented default.

use proc_macro2::TokenStream;
use quote::quote;
use tuned_schema::parse::ParsedFile;

use super::tokens;

pub fn capacity_fn(files: &[&ParsedFile]) -> TokenStream {
    let arms = files.iter().flat_map(|file| {
        let p = &file.document.platform;
        let link = tokens::link(p.link);
        let major = tokens::u8_lit(p.arch.major);
        let minor = tokens::u8_lit(p.arch.minor);
        file.document.capacities.iter().map(move |entry| {
            let collective = tokens::collective(entry.collective);
            let algo = tokens::algo(entry.algo);
            let capacity = tokens::capacity(entry.capacity);
            quote! { (#link, #major, #minor, #collective, #algo) => #capacity, }
        })
    });
    quote! {
        /// How large a message `algo` takes for `collective` on `(arch, link)`, and
        /// its alignment: what the platform file chosen by [`table_arch`] declares,
        /// else [`default_capacity`](::policy::default_capacity). `kernels` sizes its
        /// buffers from this; sizes it does not accept run on the collective's
        /// fallback (NCCL; the unfused path of the fused all-reduce + add + RMSNorm).
        #[must_use]
        #[inline]
        pub const fn capacity(
            arch: ::policy::Arch,
            link: ::policy::Link,
            collective: ::policy::Collective,
            algo: ::policy::Algo,
        ) -> ::policy::Capacity {
            let table = match table_arch(arch, link) {
                ::core::option::Option::Some(table) => table,
                ::core::option::Option::None => return ::policy::default_capacity(collective, algo),
            };
            match (link, table.major, table.minor, collective, algo) {
                #(#arms)*
                _ => ::policy::default_capacity(collective, algo),
            }
        }
    }
}
