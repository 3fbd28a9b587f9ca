//! Where each part of a parsed file was written, so that validation (which works
//! on the typed [`Document`](crate::Document)) can still point at line:col.
//!
//! Each vector is parallel to the document's vector of the same name.

use crate::diagnostic::Pos;

/// Where each part of one file's [`Document`](crate::Document) was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Positions {
    /// The `[platform]` header.
    pub platform: Pos,
    /// One per `[[capacity]]`, parallel to `Document::capacities`.
    pub capacities: Vec<CapacityPos>,
    /// One per `[[table]]`, parallel to `Document::tables`.
    pub tables: Vec<TablePos>,
    /// One per `[[assert]]`, parallel to `Document::asserts`.
    pub asserts: Vec<AssertPos>,
}

/// Where one `[[capacity]]` and its values were written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapacityPos {
    /// The `[[capacity]]` header.
    pub entry: Pos,
    /// The `algo` value.
    pub algo: Pos,
    /// The `max` value.
    pub max: Pos,
    /// The `align` value.
    pub align: Pos,
}

/// Where one `[[table]]` and the values validation may refuse were written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablePos {
    /// The `[[table]]` header.
    pub entry: Pos,
    /// The `world_size` value.
    pub world_size: Pos,
    /// The `bands = [` value.
    pub bands_value: Pos,
    /// One per band, parallel to `Table::bands`.
    pub bands: Vec<BandPos>,
}

/// Where one band of a table was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BandPos {
    /// The band's opening `{`.
    pub band: Pos,
    /// The `max` value; `None` where the band has none (the open last band).
    pub max: Option<Pos>,
    /// The `algo` value.
    pub algo: Pos,
}

/// Where one `[[assert]]` and the values validation may refuse were written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssertPos {
    /// The `[[assert]]` header.
    pub entry: Pos,
    /// The `world_size` value.
    pub world_size: Pos,
    /// The `bytes` value.
    pub bytes: Pos,
    /// One per entry of `algo_in`.
    pub algo_in: Vec<Pos>,
}
