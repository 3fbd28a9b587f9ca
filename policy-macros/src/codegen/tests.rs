use std::path::PathBuf;

use quote::quote;
use tuned_schema::folder::LoadedFile;
use tuned_schema::parse::parse_file;

use super::generate;

/// A valid file for `arch`/`link` with one all-reduce table per dtype in `dtypes`,
/// all with the same bands, plus an NCCL-only all-gather table.
fn file(arch: &str, link: &str, dtypes: &[&str]) -> LoadedFile {
    let mut text = format!(
        r#"schema = 1
[platform]
arch = "{arch}"
gpu = "test"
link = "{link}"
source = "measured"

[[capacity]]
collective = "all_reduce"
algo = "one_shot_push"
max = "1MiB"
align = 16
"#
    );
    for dtype in dtypes {
        text.push_str(&format!(
            r#"
[[table]]
collective = "all_reduce"
world_size = 8
dtype = "{dtype}"
mode = "graph"
bands = [
  {{ max = "64KiB", algo = "one_shot_push" }},
  {{ algo = "nccl" }},
]
"#
        ));
    }
    text.push_str(
        r#"
[[table]]
collective = "all_gather"
world_size = 8
dtype = "bf16"
mode = "graph"
bands = [{ algo = "nccl" }]
"#,
    );
    let path = format!("tuned/{arch}-{link}.toml");
    LoadedFile {
        absolute: PathBuf::from(format!("/abs/{path}")),
        parsed: parse_file(&path, &text).unwrap(),
    }
}

fn normalized(tokens: proc_macro2::TokenStream) -> String {
    tokens.to_string()
}

/// Fails with the missing fragment (the whole expansion is too long to print).
fn assert_has(code: &str, fragment: &str) {
    assert!(code.contains(fragment), "the expansion lacks:\n{fragment}");
}

#[test]
fn table_arch_maps_minor_ranges_to_the_highest_file_not_above() {
    let files = [
        file("sm80", "nvlink", &["bf16"]),
        file("sm86", "nvlink", &["bf16"]),
        file("sm90", "pcie", &["bf16"]),
    ];
    let code = normalized(generate(&files));
    let arm = |link: proc_macro2::TokenStream, major: u8, low: u8, high: u8, minor: u8| {
        let (major, low, high, minor) = (
            proc_macro2::Literal::u8_unsuffixed(major),
            proc_macro2::Literal::u8_unsuffixed(low),
            proc_macro2::Literal::u8_unsuffixed(high),
            proc_macro2::Literal::u8_unsuffixed(minor),
        );
        normalized(quote! {
            (#link, #major, #low..=#high) => ::core::option::Option::Some(
                ::policy::Arch::from_compute_capability(#major, #minor)
            ),
        })
    };
    assert_has(&code, &arm(quote!(::policy::Link::NvLink), 8, 0, 5, 0));
    assert_has(&code, &arm(quote!(::policy::Link::NvLink), 8, 6, 255, 6));
    assert_has(&code, &arm(quote!(::policy::Link::Pcie), 9, 0, 255, 0));
}

#[test]
fn tables_with_identical_bands_share_one_band_set() {
    let code = normalized(generate(&[file("sm90", "nvlink", &["bf16", "f16", "f32"])]));
    // Set 0 is NCCL-only (the all-gather table uses it) and set 1 the unfused
    // path alone (the fused collective's fallback); the three all-reduce
    // tables share set 2, padded to one edge and two algorithms.
    let bands = normalized(quote! {
        const BANDS: [([u64; 1], [::policy::Algo; 2]); 3] = [
            ([18446744073709551615], [::policy::Algo::Nccl, ::policy::Algo::Nccl]),
            ([18446744073709551615], [::policy::Algo::Unfused, ::policy::Algo::Unfused]),
            ([65536], [::policy::Algo::OneShotPush, ::policy::Algo::Nccl])
        ];
    });
    assert_has(&code, &bands);
}

#[test]
fn select_arrays_map_each_key_to_its_band_set() {
    let code = normalized(generate(&[file("sm90", "nvlink", &["f16"])]));
    // World size 8 is slot 0, every other size slot 1, whose offset is
    // 1 × (3 dtypes × 2 modes) = 6.
    let world = normalized(quote!(
        const WORLD_OFFSET: [u32; 10] = [6, 6, 6, 6, 6, 6, 6, 6, 0, 6];
    ));
    assert_has(&code, &world);
    // [platform 2][collective 3][world 2][dtype 3][mode 2]: only
    // (sm90, all_reduce, 8, f16, graph), index 2, uses set 2; every other
    // cell its collective's fallback, set 0 (NCCL) but for the fused
    // collective's, set 1 (unfused).
    let per_collective = 2 * 3 * 2;
    let mut cells: Vec<usize> = (0..2 * 3 * per_collective)
        .map(|i| usize::from(i % (3 * per_collective) / per_collective == 2))
        .collect();
    cells[2] = 2; // platform 0, all_reduce 0, world slot 0: f16 (1) × 2 modes + graph (0)
    let cells = cells
        .into_iter()
        .map(proc_macro2::Literal::usize_unsuffixed);
    let table = normalized(quote!(const TABLE: [u16; 72] = [#(#cells),*];));
    assert_has(&code, &table);
}

#[test]
fn capacity_arms_come_from_the_file() {
    let code = normalized(generate(&[file("sm90", "nvlink", &["bf16"])]));
    let arm = normalized(quote! {
        (::policy::Link::NvLink, 9, 0, ::policy::Collective::AllReduce, ::policy::Algo::OneShotPush)
            => ::policy::Capacity { max_bytes: 1048576, align: 16 },
    });
    assert_has(&code, &arm);
}

#[test]
fn every_file_is_included_so_edits_rebuild() {
    let code = normalized(generate(&[
        file("sm80", "nvlink", &["bf16"]),
        file("sm90", "nvlink", &["bf16"]),
    ]));
    for path in ["/abs/tuned/sm80-nvlink.toml", "/abs/tuned/sm90-nvlink.toml"] {
        let include = normalized(quote!(
            const _: &[u8] = ::core::include_bytes!(#path);
        ));
        assert_has(&code, &include);
    }
}

#[test]
fn band_edges_are_checked_at_compile_time_with_their_position() {
    let code = normalized(generate(&[file("sm90", "nvlink", &["bf16"])]));
    // The band `{ max = "64KiB", … }` is on line 20, its max at column 11.
    for what in [
        "tuned/sm90-nvlink.toml:20:11: 65536 bytes must select one_shot_push",
        "tuned/sm90-nvlink.toml:20:11: 65537 bytes must select nccl",
        "tuned/sm90-nvlink.toml:20:11: 65536 bytes must fit the capacity and alignment of one_shot_push",
        "tuned/sm90-nvlink.toml:14:1: 0 bytes must select the first band, one_shot_push",
        "tuned/sm90-nvlink.toml:2:1: all_reduce with no table (world_size 1) must select nccl",
        "tuned/sm90-nvlink.toml:2:1: all_reduce_add_rmsnorm with no table (world_size 1) must select unfused",
        "an architecture with no file must select nccl for all_gather",
        "an architecture with no file must select unfused for all_reduce_add_rmsnorm",
    ] {
        assert_has(&code, &format!("\"{what}\""));
    }
    let edge = normalized(quote! {
        select(::policy::Query {
            key: ::policy::TableKey {
                collective: ::policy::Collective::AllReduce,
                world_size: 8,
                dtype: ::policy::DType::Bf16,
                mode: ::policy::Mode::Graph,
            },
            arch: ::policy::Arch::from_compute_capability(9, 0),
            link: ::policy::Link::NvLink,
            bytes: 65537,
        }).same_as(::policy::Algo::Nccl)
    });
    assert_has(&code, &edge);
}

#[test]
fn platforms_list_each_file_in_order() {
    let code = normalized(generate(&[
        file("sm80", "nvlink", &["bf16"]),
        file("sm90", "nvlink", &["bf16"]),
    ]));
    let first = code
        .find("file : \"tuned/sm80-nvlink.toml\"")
        .expect("sm80 listed");
    let second = code
        .find("file : \"tuned/sm90-nvlink.toml\"")
        .expect("sm90 listed");
    assert!(first < second);
}
