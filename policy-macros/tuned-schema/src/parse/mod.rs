//! TOML text → [`Document`], keeping where each part was written.
//!
//! This step checks syntax, keys and types (unknown keys are errors, so a typo
//! cannot silently drop a setting). The rules between values (band order,
//! capacity, assertions …) are [`crate::validate`]'s job;
//! [`crate::validate::parse_document`] runs both for one file.

mod fields;
mod positions;
mod table_source;

pub use positions::{AssertPos, BandPos, CapacityPos, Positions, TablePos};

use toml::de::DeTable;

use crate::diagnostic::{Diagnostic, LineIndex, Pos};
use crate::document::{
    Assertion, Band, CapacityEntry, Document, Platform, Provenance, SCHEMA_VERSION, Source, Table,
};
use crate::vocab::{Algo, Arch, Capacity, Collective, DType, Link, Mode, TableKey};
use fields::{Fields, Sink, as_str, as_table, named};

/// One parsed file: its document, and where each part of it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedFile {
    /// The path as it should appear in messages, e.g. `../tuned/sm90-nvlink.toml`.
    pub path: String,
    /// The file's content, checked for syntax, keys and types only.
    pub document: Document,
    /// Where each part of `document` was written.
    pub positions: Positions,
}

/// Parses one file: syntax, keys and value types. See [`crate::validate`] for the rest.
pub fn parse_file(path: &str, text: &str) -> Result<ParsedFile, Vec<Diagnostic>> {
    let mut sink = Sink {
        file: path.to_string(),
        index: LineIndex::new(text),
        diagnostics: Vec::new(),
    };
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(error) => {
            let offset = error.span().map_or(0, |span| span.start);
            sink.error(
                offset..offset,
                format!("TOML syntax error: {}", error.message()),
            );
            return Err(sink.diagnostics);
        }
    };
    let parsed = read_root(&mut sink, root.get_ref());
    match parsed {
        Some((document, positions)) if sink.diagnostics.is_empty() => Ok(ParsedFile {
            path: path.to_string(),
            document,
            positions,
        }),
        _ => {
            sink.diagnostics.sort();
            Err(sink.diagnostics)
        }
    }
}

const ROOT_KEYS: &[&str] = &["schema", "platform", "capacity", "table", "assert"];
const PLATFORM_KEYS: &[&str] = &["arch", "gpu", "link", "source", "citation", "provenance"];
const PROVENANCE_KEYS: &[&str] = &[
    "tuner_version",
    "date",
    "driver",
    "cuda",
    "nccl",
    "host",
    "samples",
    "evidence",
];
const CAPACITY_KEYS: &[&str] = &["collective", "algo", "max", "align"];
/// The key columns, the table's own source (see `table_source`), then the rest.
const TABLE_KEYS: &[&str] = &[
    "collective",
    "world_size",
    "dtype",
    "mode",
    "source",
    "citation",
    "evidence",
    "date",
    "tuner_version",
    "note",
    "bands",
];
const BAND_KEYS: &[&str] = &["max", "algo"];
const ASSERT_KEYS: &[&str] = &[
    "arch",
    "link",
    "collective",
    "world_size",
    "dtype",
    "mode",
    "bytes",
    "algo_in",
    "why",
];

fn read_root(sink: &mut Sink<'_>, root: &DeTable<'_>) -> Option<(Document, Positions)> {
    let top = Fields::new(sink, root, "the file", Pos { line: 1, col: 1 }, ROOT_KEYS);
    let schema_ok = read_schema_version(sink, &top);

    let platform = match top.optional_table(sink, "platform") {
        Some(Some((table, pos))) => read_platform(sink, table, pos),
        Some(None) => {
            sink.error_at(top.at, "the file is missing the [platform] table");
            None
        }
        None => None,
    };
    let capacities = top.tables(sink, "capacity").map(|entries| {
        collect_all(
            entries
                .into_iter()
                .map(|(t, pos)| read_capacity(sink, t, pos)),
        )
    });
    let tables = top
        .tables(sink, "table")
        .map(|entries| collect_all(entries.into_iter().map(|(t, pos)| read_table(sink, t, pos))));
    // Asserts default to the file's platform; without one, they cannot be read.
    let platform_key = platform.as_ref().map(|(p, _)| (p.arch, p.link));
    let asserts = top.tables(sink, "assert").and_then(|entries| {
        let (arch, link) = platform_key?;
        collect_all(
            entries
                .into_iter()
                .map(|(t, pos)| read_assert(sink, t, pos, arch, link)),
        )
    });

    let (platform, platform_pos) = platform?;
    let (capacities, capacity_pos): (Vec<_>, Vec<_>) = capacities??.into_iter().unzip();
    let (tables, table_pos): (Vec<_>, Vec<_>) = tables??.into_iter().unzip();
    let (asserts, assert_pos): (Vec<_>, Vec<_>) = asserts?.into_iter().unzip();
    schema_ok?;
    Some((
        Document {
            platform,
            capacities,
            tables,
            asserts,
        },
        Positions {
            platform: platform_pos,
            capacities: capacity_pos,
            tables: table_pos,
            asserts: assert_pos,
        },
    ))
}

/// All items, or `None` if any failed (each failure has already been reported).
fn collect_all<T>(items: impl Iterator<Item = Option<T>>) -> Option<Vec<T>> {
    let all: Vec<Option<T>> = items.collect();
    all.into_iter().collect()
}

fn read_schema_version(sink: &mut Sink<'_>, top: &Fields<'_, '_>) -> Option<()> {
    let (version, pos) = top.required_u64(sink, "schema")?;
    if version != u64::from(SCHEMA_VERSION) {
        sink.error_at(
            pos,
            format!(
                "unsupported schema version {version}; this build reads schema {SCHEMA_VERSION}"
            ),
        );
        return None;
    }
    Some(())
}

fn read_platform(sink: &mut Sink<'_>, table: &DeTable<'_>, at: Pos) -> Option<(Platform, Pos)> {
    let f = Fields::new(sink, table, "[platform]", at, PLATFORM_KEYS);
    let arch = read_arch(sink, &f);
    let gpu = f.required_str(sink, "gpu");
    let link = read_link(sink, &f);
    let source = f.required_name(sink, ("source", "source"), &Source::ALL, Source::name);
    let citation = f.optional_string(sink, "citation");
    let provenance = match f.optional_table(sink, "provenance") {
        Some(Some((t, pos))) => read_provenance(sink, t, pos),
        Some(None) => Some(Provenance::default()),
        None => None,
    };
    let platform = Platform {
        arch: arch?,
        gpu: gpu?.0.to_string(),
        link: link?,
        source: source?.0,
        citation: citation?,
        provenance: provenance?,
    };
    Some((platform, at))
}

fn read_arch(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<Arch> {
    let (text, pos) = f.required_str(sink, "arch")?;
    let arch = Arch::from_name(text);
    if arch.is_none() {
        sink.error_at(
            pos,
            format!("unknown arch `{text}`; expected `sm` and the compute capability, e.g. sm80, sm90, sm100, sm103"),
        );
    }
    arch
}

fn read_link(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<Link> {
    let link = f.required_name(sink, ("link", "link"), &Link::ALL, Link::name);
    link.map(|(l, _)| l)
}

fn read_provenance(sink: &mut Sink<'_>, table: &DeTable<'_>, at: Pos) -> Option<Provenance> {
    let f = Fields::new(sink, table, "[platform.provenance]", at, PROVENANCE_KEYS);
    let tuner_version = f.optional_string(sink, "tuner_version");
    let date = f.optional_string(sink, "date");
    let driver = f.optional_string(sink, "driver");
    let cuda = f.optional_string(sink, "cuda");
    let nccl = f.optional_string(sink, "nccl");
    let host = f.optional_string(sink, "host");
    let samples = f.optional_u64(sink, "samples");
    let evidence = f.optional_string(sink, "evidence");
    Some(Provenance {
        tuner_version: tuner_version?,
        date: date?,
        driver: driver?,
        cuda: cuda?,
        nccl: nccl?,
        host: host?,
        samples: samples?,
        evidence: evidence?,
    })
}

fn read_collective(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<Collective> {
    let key = ("collective", "collective");
    let collective = f.required_name(sink, key, &Collective::ALL, Collective::name);
    collective.map(|(c, _)| c)
}

fn read_dtype(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<DType> {
    let dtype = f.required_name(sink, ("dtype", "dtype"), &DType::ALL, DType::name);
    dtype.map(|(d, _)| d)
}

fn read_mode(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<Mode> {
    let mode = f.required_name(sink, ("mode", "mode"), &Mode::ALL, Mode::name);
    mode.map(|(m, _)| m)
}

fn read_algo(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<(Algo, Pos)> {
    f.required_name(sink, ("algo", "algorithm"), &Algo::ALL, Algo::name)
}

fn read_capacity(
    sink: &mut Sink<'_>,
    table: &DeTable<'_>,
    at: Pos,
) -> Option<(CapacityEntry, CapacityPos)> {
    let f = Fields::new(sink, table, "[[capacity]]", at, CAPACITY_KEYS);
    let collective = read_collective(sink, &f);
    let algo = read_algo(sink, &f);
    let max = f.required_size(sink, "max");
    let align = f.required_size(sink, "align");
    let ((algo, algo_pos), (max_bytes, max_pos), (align, align_pos)) = (algo?, max?, align?);
    Some((
        CapacityEntry {
            collective: collective?,
            algo,
            capacity: Capacity { max_bytes, align },
        },
        CapacityPos {
            entry: at,
            algo: algo_pos,
            max: max_pos,
            align: align_pos,
        },
    ))
}

fn read_table(sink: &mut Sink<'_>, table: &DeTable<'_>, at: Pos) -> Option<(Table, TablePos)> {
    let f = Fields::new(sink, table, "[[table]]", at, TABLE_KEYS);
    let collective = read_collective(sink, &f);
    let world_size = f.required_u32(sink, "world_size");
    let dtype = read_dtype(sink, &f);
    let mode = read_mode(sink, &f);
    let source = table_source::read_table_source(sink, &f);
    let note = f.optional_string(sink, "note");
    let bands = f.required_array(sink, "bands").and_then(|(array, pos)| {
        let bands = collect_all(array.iter().map(|item| read_band(sink, item)))?;
        Some((bands, pos))
    });
    let (world_size, world_size_pos) = world_size?;
    let (bands, bands_value) = bands?;
    let (bands, band_pos): (Vec<_>, Vec<_>) = bands.into_iter().unzip();
    Some((
        Table {
            key: TableKey {
                collective: collective?,
                world_size,
                dtype: dtype?,
                mode: mode?,
            },
            source: source?,
            note: note?,
            bands,
        },
        TablePos {
            entry: at,
            world_size: world_size_pos,
            bands_value,
            bands: band_pos,
        },
    ))
}

fn read_band(sink: &mut Sink<'_>, item: &fields::Value<'_>) -> Option<(Band, BandPos)> {
    let table = as_table(sink, "bands", item)?;
    let at = sink.pos(item.span());
    let f = Fields::new(sink, table, "a band", at, BAND_KEYS);
    let max = f.optional_size(sink, "max");
    let algo = read_algo(sink, &f);
    let (max, (algo, algo_pos)) = (max?, algo?);
    Some((
        Band {
            max: max.map(|(m, _)| m),
            algo,
        },
        BandPos {
            band: at,
            max: max.map(|(_, pos)| pos),
            algo: algo_pos,
        },
    ))
}

fn read_assert(
    sink: &mut Sink<'_>,
    table: &DeTable<'_>,
    at: Pos,
    file_arch: Arch,
    file_link: Link,
) -> Option<(Assertion, AssertPos)> {
    let f = Fields::new(sink, table, "[[assert]]", at, ASSERT_KEYS);
    let arch = match f.get("arch") {
        None => Some(file_arch),
        Some(_) => read_arch(sink, &f),
    };
    let link = match f.get("link") {
        None => Some(file_link),
        Some(_) => read_link(sink, &f),
    };
    let collective = read_collective(sink, &f);
    let world_size = f.required_u32(sink, "world_size");
    let dtype = read_dtype(sink, &f);
    let mode = read_mode(sink, &f);
    let bytes = f.required_size(sink, "bytes");
    let algo_in = read_algo_list(sink, &f);
    let why = f.required_str(sink, "why");
    let ((world_size, world_size_pos), (bytes, bytes_pos), (algo_in, algo_pos)) =
        (world_size?, bytes?, algo_in?);
    Some((
        Assertion {
            arch: arch?,
            link: link?,
            collective: collective?,
            world_size,
            dtype: dtype?,
            mode: mode?,
            bytes,
            algo_in,
            why: why?.0.to_string(),
        },
        AssertPos {
            entry: at,
            world_size: world_size_pos,
            bytes: bytes_pos,
            algo_in: algo_pos,
        },
    ))
}

fn read_algo_list(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<(Vec<Algo>, Vec<Pos>)> {
    let (array, _) = f.required_array(sink, "algo_in")?;
    let items = array.iter().map(|item| {
        let text = as_str(sink, "algo_in", item)?;
        let pos = sink.pos(item.span());
        let algo = named(sink, (text, pos), "algorithm", &Algo::ALL, Algo::name)?;
        Some((algo, pos))
    });
    Some(collect_all(items)?.into_iter().unzip())
}
