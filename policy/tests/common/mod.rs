//! Helpers shared by the integration tests.

use std::path::Path;

use policy::{Arch, Collective, DType, Link, Mode, Query};
use tuned_schema::Document;
use tuned_schema::folder::load_folder;

/// The documents of a folder relative to this crate, through the plain reader
/// (not the macro): the reference the generated code is compared with.
#[allow(dead_code)]
pub fn documents(folder: &str) -> Vec<Document> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    load_folder(&dir, folder)
        .unwrap_or_else(|errors| panic!("{folder} should be valid: {errors:#?}"))
        .into_iter()
        .map(|file| file.parsed.document)
        .collect()
}

#[allow(dead_code)]
pub fn query(
    collective: Collective,
    arch: Arch,
    world_size: u32,
    dtype: DType,
    mode: Mode,
    bytes: u64,
) -> Query {
    Query::new(
        collective,
        arch,
        Link::NvLink,
        world_size,
        dtype,
        mode,
        bytes,
    )
}
