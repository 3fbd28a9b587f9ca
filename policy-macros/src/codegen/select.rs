//! `table_arch` (a `match` over the files) and `select` (lookups in constant
//! arrays, see [`Layout`]). Nothing is scanned at run time.

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::quote;
use tuned_schema::parse::ParsedFile;
use tuned_schema::{Link, Mode};

use super::layout::Layout;
use super::tokens;

/// `table_arch(arch, link)`: the arch-fallback rule
/// ([`tuned_schema::Arch::answered_by`]) evaluated here for every (link, major,
/// minor) of the files' links and majors, as `match` arms over minor ranges
/// (`m1..=m2-1 → m1`, …, `mk..=255 → mk`; minors below m1 have no table).
pub fn table_arch_fn(files: &[&ParsedFile]) -> TokenStream {
    let mut archs: BTreeMap<(Link, u8), Vec<tuned_schema::Arch>> = BTreeMap::new();
    for file in files {
        let p = &file.document.platform;
        archs
            .entry((p.link, p.arch.major))
            .or_default()
            .push(p.arch);
    }
    let mut arms = Vec::new();
    for ((link, major), available) in archs {
        // Runs of minors that the rule sends to the same file.
        let mut run: Option<(u8, u8, tuned_schema::Arch)> = None;
        let mut runs = Vec::new();
        for minor in 0..=u8::MAX {
            let answer = tuned_schema::Arch::from_compute_capability(major, minor)
                .answered_by(available.iter().copied());
            run = match (run, answer) {
                (Some((low, _, arch)), Some(a)) if a == arch => Some((low, minor, arch)),
                (previous, answer) => {
                    runs.extend(previous);
                    answer.map(|a| (minor, minor, a))
                }
            };
        }
        runs.extend(run);
        let link = tokens::link(link);
        let major_lit = tokens::u8_lit(major);
        for (low, high, arch) in runs {
            let arch = tokens::arch(arch);
            let (low, high) = (tokens::u8_lit(low), tokens::u8_lit(high));
            arms.push(
                quote! { (#link, #major_lit, #low..=#high) => ::core::option::Option::Some(#arch), },
            );
        }
    }
    quote! {
        /// The architecture whose file answers queries for `(arch, link)`: the file
        /// with exactly that arch and link, else the one with the same link and major
        /// compute capability and the highest minor not above `arch`'s, else `None`
        /// (and then every query selects its collective's fallback: NCCL, or the
        /// unfused path of the fused all-reduce + add + RMSNorm).
        #[must_use]
        #[inline]
        pub const fn table_arch(
            arch: ::policy::Arch,
            link: ::policy::Link,
        ) -> ::core::option::Option<::policy::Arch> {
            match (link, arch.major, arch.minor) {
                #(#arms)*
                _ => ::core::option::Option::None,
            }
        }
    }
}

/// `select(q)`: a few loads from small constant arrays and one branch-free count
/// of band edges below `q.bytes`.
///
/// Indexing arrays does not branch on the query, so no decision mispredicts
/// and the cost stays the same whatever the mix of queries (see the `select`
/// benchmark). The arrays are built by [`Layout`].
pub fn select_fn(files: &[&ParsedFile]) -> TokenStream {
    let layout = Layout::new(files);
    let platform_offset = layout.platform_offset_tokens();
    let world_offset = layout.world_offset_tokens();
    let table = layout.table_tokens();
    let bands = layout.band_set_tokens();
    let n = proc_macro2::Literal::usize_unsuffixed;
    let minors = n(layout.minors);
    let (major_rows, last_major, last_minor) =
        (n(layout.majors + 1), n(layout.majors), n(layout.minors - 1));
    let (ws_limit, ws_cells) = (n(layout.ws_limit), n(layout.ws_limit + 1));
    let (edge_count, band_count) = (n(layout.edge_count), n(layout.edge_count + 1));
    let set_count = n(layout.band_sets.len());
    let table_len = n(layout.table_len());
    let links = n(Link::ALL.len());
    let collective_stride = n(layout.collective_stride());
    let dtype_stride = n(Mode::ALL.len());
    let bands_below = (0..layout.edge_count).map(|k| {
        let k = n(k);
        quote!((q.bytes > edges[#k]) as usize)
    });
    quote! {
        /// The algorithm that runs `q`: the band of `q`'s table that contains
        /// `q.bytes`, or the collective's fallback
        /// ([`Collective::fallback`](::policy::Collective::fallback)) when there is
        /// no table (see [`table_arch`]).
        #[must_use]
        #[inline]
        pub const fn select(q: ::policy::Query) -> ::policy::Algo {
            // TABLE is indexed [platform][collective][world size][dtype][mode] and
            // holds a band set; the first sets are each collective's fallback
            // alone, where there is no table. The two lookups below give the
            // platform's and the world size's offsets into it, pre-multiplied.
            //
            // [link][major][minor] → offset of the platform file; the last platform
            // has no file. Majors past every file share the last row; minors past
            // every file answer like the highest one (the fallback rule agrees).
            const PLATFORM_OFFSET: [[[u32; #minors]; #major_rows]; #links] = #platform_offset;
            // world_size → offset; sizes with no table (and all above) → the last.
            const WORLD_OFFSET: [u32; #ws_cells] = #world_offset;
            const TABLE: [u16; #table_len] = #table;
            // Per band set: inclusive upper bounds padded with u64::MAX, and the
            // algorithm of each band (padding repeats the last).
            const BANDS: [([u64; #edge_count], [::policy::Algo; #band_count]); #set_count] = #bands;

            // A function rather than `if` at each use, so a bound of 0 is no
            // "comparison is useless" warning in the caller's crate.
            const fn at_most(value: usize, bound: usize) -> usize {
                if value < bound { value } else { bound }
            }
            let major = at_most(q.arch.major as usize, #last_major);
            let minor = at_most(q.arch.minor as usize, #last_minor);
            let index = PLATFORM_OFFSET[q.link as usize][major][minor] as usize
                + q.key.collective as usize * #collective_stride
                + WORLD_OFFSET[at_most(q.key.world_size as usize, #ws_limit)] as usize
                + q.key.dtype as usize * #dtype_stride
                + q.key.mode as usize;
            let (edges, algos) = &BANDS[TABLE[index] as usize];
            // Edges strictly increase, so the number below `q.bytes` is its band.
            let band = 0 #(+ #bands_below)*;
            algos[band]
        }
    }
}
