//! The constant arrays behind the generated `select`: which platform, world size
//! and key lead to which band set, laid out so that one query is a handful of
//! loads and no branch on its values.

use proc_macro2::TokenStream;
use quote::quote;
use tuned_schema::parse::ParsedFile;
use tuned_schema::{Band, Collective, DType, Link, Mode, Table, TableKey};

use super::tokens;

/// The shapes and contents of `select`'s arrays.
pub struct Layout<'f> {
    files: &'f [&'f ParsedFile],
    /// One more than the largest major of any file (at least 1).
    pub majors: usize,
    /// One more than the largest minor of any file (at least 1).
    pub minors: usize,
    /// The world sizes that have a table somewhere, ascending.
    pub world_sizes: Vec<u32>,
    /// One more than the largest of them: the first size that needs no lookup.
    pub ws_limit: usize,
    /// Distinct band lists; the first ones are each collective's fallback
    /// alone (`[{ algo = "nccl" }]`, `[{ algo = "unfused" }]`): what a query
    /// with no table selects ([`Layout::fallback_set`]).
    pub band_sets: Vec<Vec<Band>>,
    /// Bounded bands of the longest set (at least 1, so arrays are never empty).
    pub edge_count: usize,
}

impl<'f> Layout<'f> {
    pub fn new(files: &'f [&'f ParsedFile]) -> Self {
        let platforms = files.iter().map(|f| f.document.platform.arch);
        let majors = platforms
            .clone()
            .map(|a| usize::from(a.major) + 1)
            .max()
            .unwrap_or(1);
        let minors = platforms
            .map(|a| usize::from(a.minor) + 1)
            .max()
            .unwrap_or(1);
        let mut world_sizes: Vec<u32> = tables(files).map(|(_, t)| t.key.world_size).collect();
        world_sizes.sort_unstable();
        world_sizes.dedup();
        let ws_limit = world_sizes.last().map_or(0, |&w| w as usize + 1);
        let fallbacks = Collective::ALL.map(|c| {
            vec![Band {
                max: None,
                algo: c.fallback(),
            }]
        });
        let mut band_sets: Vec<Vec<Band>> = Vec::new();
        for bands in fallbacks.iter().chain(tables(files).map(|(_, t)| &t.bands)) {
            if !band_sets.contains(bands) {
                band_sets.push(bands.clone());
            }
        }
        let edge_count = band_sets
            .iter()
            .map(|set| set.iter().filter(|b| b.max.is_some()).count())
            .max()
            .unwrap_or(0)
            .max(1);
        Layout {
            files,
            majors,
            minors,
            world_sizes,
            ws_limit,
            band_sets,
            edge_count,
        }
    }

    fn no_file(&self) -> usize {
        self.files.len()
    }

    /// TABLE's strides: mode 1, dtype `modes`, world size `dtypes × modes`, …
    fn world_stride(&self) -> usize {
        DType::ALL.len() * Mode::ALL.len()
    }

    pub fn collective_stride(&self) -> usize {
        (self.world_sizes.len() + 1) * self.world_stride()
    }

    fn platform_stride(&self) -> usize {
        Collective::ALL.len() * self.collective_stride()
    }

    pub fn table_len(&self) -> usize {
        (self.files.len() + 1) * self.platform_stride()
    }

    fn table_index(&self, slot: usize, world: usize, k: &TableKey) -> usize {
        slot * self.platform_stride()
            + k.collective as usize * self.collective_stride()
            + world * self.world_stride()
            + k.dtype as usize * Mode::ALL.len()
            + k.mode as usize
    }

    /// The slot of the file answering (link, major, minor), by the one
    /// arch-fallback rule ([`tuned_schema::Arch::answered_by`]), else none.
    fn platform_slot(&self, link: Link, major: u8, minor: u8) -> usize {
        let on_link = || {
            self.files
                .iter()
                .enumerate()
                .map(|(slot, f)| (slot, &f.document.platform))
                .filter(move |(_, p)| p.link == link)
        };
        tuned_schema::Arch::from_compute_capability(major, minor)
            .answered_by(on_link().map(|(_, p)| p.arch))
            .and_then(|arch| on_link().find(|(_, p)| p.arch == arch))
            .map_or(self.no_file(), |(slot, _)| slot)
    }

    pub fn platform_offset_tokens(&self) -> TokenStream {
        let links = Link::ALL.iter().map(|&link| {
            let rows = (0..=self.majors).map(|major| {
                let cells = (0..self.minors).map(|minor| {
                    // Row `majors` (past every file) has no file at all.
                    let slot = match (u8::try_from(major), u8::try_from(minor)) {
                        (Ok(major), Ok(minor)) if usize::from(major) < self.majors => {
                            self.platform_slot(link, major, minor)
                        }
                        _ => self.no_file(),
                    };
                    index_lit(slot * self.platform_stride())
                });
                quote!([#(#cells),*])
            });
            quote!([#(#rows),*])
        });
        quote!([#(#links),*])
    }

    pub fn world_offset_tokens(&self) -> TokenStream {
        let no_world = self.world_sizes.len();
        let cells = (0..=self.ws_limit).map(|ws| {
            let slot = self
                .world_sizes
                .iter()
                .position(|&w| w as usize == ws)
                .unwrap_or(no_world);
            index_lit(slot * self.world_stride())
        });
        quote!([#(#cells),*])
    }

    /// The band set a query of `collective` with no table selects from: its
    /// fallback alone.
    fn fallback_set(&self, collective: Collective) -> usize {
        let alone = [Band {
            max: None,
            algo: collective.fallback(),
        }];
        self.band_sets
            .iter()
            .position(|set| set[..] == alone)
            .expect("every fallback has a band set of its own")
    }

    pub fn table_tokens(&self) -> TokenStream {
        // Every cell without a table (no file, no table for the world size
        // or the key) selects its collective's fallback.
        let mut cells: Vec<usize> = (0..self.table_len())
            .map(|index| {
                let collective = index % self.platform_stride() / self.collective_stride();
                self.fallback_set(Collective::ALL[collective])
            })
            .collect();
        for (slot, table) in tables(self.files) {
            let world = self
                .world_sizes
                .iter()
                .position(|&w| w == table.key.world_size)
                .unwrap_or(0);
            let index = self.table_index(slot, world, &table.key);
            cells[index] = self
                .band_sets
                .iter()
                .position(|set| *set == table.bands)
                .expect("every table's bands are a band set");
        }
        let cells = cells.into_iter().map(index_lit);
        quote!([#(#cells),*])
    }

    pub fn band_set_tokens(&self) -> TokenStream {
        let sets = self.band_sets.iter().map(|set| {
            let bounded = set.iter().filter_map(|b| b.max);
            let edges = bounded
                .chain(std::iter::repeat(u64::MAX))
                .take(self.edge_count)
                .map(tokens::u64_lit);
            let last = set.last().expect("band sets are never empty").algo;
            let algos = set
                .iter()
                .map(|b| b.algo)
                .chain(std::iter::repeat(last))
                .take(self.edge_count + 1)
                .map(tokens::algo);
            quote!(([#(#edges),*], [#(#algos),*]))
        });
        quote!([#(#sets),*])
    }
}

/// Every table of every file, with the file's slot.
fn tables<'f>(files: &'f [&'f ParsedFile]) -> impl Iterator<Item = (usize, &'f Table)> {
    files
        .iter()
        .enumerate()
        .flat_map(|(slot, f)| f.document.tables.iter().map(move |t| (slot, t)))
}

/// An index or offset into one of the arrays. Written unsuffixed: should it ever
/// exceed its array's element type, the `overflowing_literals` lint (an error by
/// default) stops the build rather than wrapping.
fn index_lit(n: usize) -> proc_macro2::Literal {
    proc_macro2::Literal::usize_unsuffixed(n)
}
