//! `const _: () = assert!(…)` items that check the GENERATED functions against the
//! files they came from. Validation has already refused bad input with a clear
//! message; these make the compiler re-prove the same facts about the code that
//! will actually run, so a bug in code generation cannot ship silently.
//!
//! Each message starts with the `file:line:col` of the row it checks.

use proc_macro2::TokenStream;
use quote::quote;
use tuned_schema::parse::{ParsedFile, TablePos};
use tuned_schema::validate::assertion_query;
use tuned_schema::{Algo, Arch, Collective, DType, Link, Mode, Query, Table};

use super::tokens;

pub fn const_checks(files: &[&ParsedFile]) -> TokenStream {
    let mut checks = Vec::new();
    for file in files {
        for (table, pos) in file.document.tables.iter().zip(&file.positions.tables) {
            table_checks(&mut checks, file, table, pos);
        }
        assertion_checks(&mut checks, file);
        checks.push(no_table_check(file));
    }
    checks.push(unknown_arch_check());
    quote!(#(#checks)*)
}

/// `const _: () = assert!(cond, "file:line:col: what");`
fn check(
    condition: TokenStream,
    file: &ParsedFile,
    pos: tuned_schema::Pos,
    what: String,
) -> TokenStream {
    let message = format!("{}:{}: {what}", file.path, pos);
    quote! { const _: () = ::core::assert!(#condition, #message); }
}

fn selects(q: Query, algo: Algo) -> TokenStream {
    let q = tokens::query(q);
    let algo = tokens::algo(algo);
    quote!(select(#q).same_as(#algo))
}

fn table_query(file: &ParsedFile, table: &Table, bytes: u64) -> Query {
    let p = &file.document.platform;
    table.key.query(p.arch, p.link, bytes)
}

fn table_checks(out: &mut Vec<TokenStream>, file: &ParsedFile, table: &Table, pos: &TablePos) {
    let bands = &table.bands;
    let (Some(first), Some(last)) = (bands.first(), bands.last()) else {
        return;
    };
    // Every size has an algorithm: the smallest and the largest select the end bands.
    out.push(check(
        selects(table_query(file, table, 0), first.algo),
        file,
        pos.entry,
        format!("0 bytes must select the first band, {}", first.algo.name()),
    ));
    out.push(check(
        selects(table_query(file, table, u64::MAX), last.algo),
        file,
        pos.entry,
        format!(
            "u64::MAX bytes must select the open last band, {}",
            last.algo.name()
        ),
    ));
    for (i, (band, band_pos)) in bands.iter().zip(&pos.bands).enumerate() {
        let Some(max) = band.max else { continue };
        let max_pos = band_pos.max.unwrap_or(band_pos.band);
        // Strictly increasing: this edge is below the next one.
        if let Some(next_max) = bands.get(i + 1).and_then(|b| b.max) {
            let (a, b) = (tokens::u64_lit(max), tokens::u64_lit(next_max));
            out.push(check(
                quote!(#a < #b),
                file,
                max_pos,
                "band maxima must be strictly increasing".to_string(),
            ));
        }
        // The edge belongs to this band; one byte more belongs to the next.
        out.push(check(
            selects(table_query(file, table, max), band.algo),
            file,
            max_pos,
            format!("{max} bytes must select {}", band.algo.name()),
        ));
        if let (Some(next), Some(above)) = (bands.get(i + 1), max.checked_add(1)) {
            out.push(check(
                selects(table_query(file, table, above), next.algo),
                file,
                max_pos,
                format!("{above} bytes must select {}", next.algo.name()),
            ));
        }
        if band.algo.is_custom() {
            out.push(capacity_check(file, table, band.algo, max, max_pos));
        }
    }
}

/// A custom band's largest size fits the capacity the generated `capacity` reports.
fn capacity_check(
    file: &ParsedFile,
    table: &Table,
    algo: Algo,
    max: u64,
    pos: tuned_schema::Pos,
) -> TokenStream {
    let p = &file.document.platform;
    let arch = tokens::arch(p.arch);
    let link = tokens::link(p.link);
    let collective = tokens::collective(table.key.collective);
    let algo_tokens = tokens::algo(algo);
    let world_size = tokens::u32_lit(table.key.world_size);
    let bytes = tokens::u64_lit(max);
    check(
        quote! {
            capacity(#arch, #link, #collective, #algo_tokens)
                .accepts_message(#collective, #world_size, #bytes)
        },
        file,
        pos,
        format!(
            "{max} bytes must fit the capacity and alignment of {}",
            algo.name()
        ),
    )
}

fn assertion_checks(out: &mut Vec<TokenStream>, file: &ParsedFile) {
    for (a, pos) in file.document.asserts.iter().zip(&file.positions.asserts) {
        let q = tokens::query(assertion_query(a));
        let allowed = a.algo_in.iter().map(|x| tokens::algo(*x));
        out.push(check(
            quote!(select(#q).is_in(&[#(#allowed),*])),
            file,
            pos.entry,
            format!("[[assert]] does not hold: {}", a.why),
        ));
    }
}

/// World size 1 never has a table (validation requires ≥ 2), so every
/// collective must select its fallback there.
fn no_table_check(file: &ParsedFile) -> TokenStream {
    let p = &file.document.platform;
    let checks = Collective::ALL.map(|collective| {
        let q = Query::new(collective, p.arch, p.link, 1, DType::Bf16, Mode::Graph, 16);
        let fallback = collective.fallback();
        check(
            selects(q, fallback),
            file,
            file.positions.platform,
            format!(
                "{} with no table (world_size 1) must select {}",
                collective.name(),
                fallback.name()
            ),
        )
    });
    quote!(#(#checks)*)
}

/// `sm00` can have no file (arch names have no leading zero), so every
/// collective must select its fallback there.
fn unknown_arch_check() -> TokenStream {
    let checks = Collective::ALL.map(|collective| {
        let q = Query::new(
            collective,
            Arch::from_compute_capability(0, 0),
            Link::NvLink,
            8,
            DType::Bf16,
            Mode::Graph,
            16,
        );
        let fallback = collective.fallback();
        let condition = selects(q, fallback);
        let message = format!(
            "an architecture with no file must select {} for {}",
            fallback.name(),
            collective.name()
        );
        quote! {
            const _: () = ::core::assert!(#condition, #message);
        }
    });
    quote!(#(#checks)*)
}
