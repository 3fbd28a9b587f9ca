//! Where each part of a parsed file was written, so that validation (which works
//! on the typed [`Document`](crate::Document)) can still point at line:col.
//!
//! Each vector is parallel to the document's vector of the same name.

use crate::diagnostic::Pos;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Positions {
    /// The `[platform]` header.
    pub platform: Pos,
    pub capacities: Vec<CapacityPos>,
    pub tables: Vec<TablePos>,
    pub asserts: Vec<AssertPos>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapacityPos {
    /// The `[[capacity]]` header.
    pub entry: Pos,
    pub algo: Pos,
    pub max: Pos,
    pub align: Pos,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablePos {
    /// The `[[table]]` header.
    pub entry: Pos,
    pub world_size: Pos,
    /// The `bands = [` value.
    pub bands_value: Pos,
    pub bands: Vec<BandPos>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BandPos {
    /// The band's opening `{`.
    pub band: Pos,
    pub max: Option<Pos>,
    pub algo: Pos,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssertPos {
    /// The `[[assert]]` header.
    pub entry: Pos,
    pub world_size: Pos,
    pub bytes: Pos,
    /// One per entry of `algo_in`.
    pub algo_in: Vec<Pos>,
}
