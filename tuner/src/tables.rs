//! The tables `show` and `explain` read: the ones compiled into `policy`, or
//! tuned files read from disk (a sweep's output, before it is compiled). Both
//! answer through the rules `policy` generates its code from: which file
//! answers a platform ([`policy::Arch::answered_by`]), which band holds
//! a size, and which capacity a custom algorithm has there (the file's entry,
//! else [`policy::default_capacity`]). For the compiled tables the
//! answers are `policy`'s own functions; for files, `tuned_schema::interpret`,
//! the reference the generated code is tested against.

use std::path::Path;

use policy::{Algo, Arch, Capacity, CapacityEntry, Collective, Link, Query};
use policy::{PlatformInfo, TableInfo};
use tuned_schema::validate::parse_document;
use tuned_schema::{Document, interpret};

/// A set of platform files.
#[derive(Clone, Copy, Debug)]
pub enum TableSet {
    /// `policy::PLATFORMS`, answered by `policy::select` and friends.
    Compiled,
    /// Files read from disk (see [`TableSet::load`]).
    Files {
        /// The file or folder as given, for messages.
        origin: &'static str,
        /// The documents, for `tuned_schema::interpret`.
        documents: &'static [Document],
        /// The same, as `policy::PLATFORMS` holds them, for display.
        platforms: &'static [PlatformInfo],
    },
}

impl TableSet {
    /// Reads a tuned file, or every `*.toml` of a folder, and checks them as
    /// `policy-macros` would (a folder that would not compile is an error).
    /// The tables live as long as the process: a command reads them once.
    pub fn load(path: &Path) -> Result<TableSet, String> {
        let shown = path.display().to_string();
        let files: Vec<(String, Document)> = if path.is_dir() {
            tuned_schema::folder::load_folder(path, &shown)
                .map_err(|d| refused(&shown, &d))?
                .into_iter()
                .map(|f| (f.parsed.path, f.parsed.document))
                .collect()
        } else {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
            // Every check of one file on its own (its `[[assert]]`s may name
            // platforms of files beside it, which are not read here).
            let doc = parse_document(&shown, &text).map_err(|d| refused(&shown, &d))?;
            vec![(shown.clone(), doc)]
        };
        let platforms: Vec<PlatformInfo> = files
            .iter()
            .map(|(path, doc)| platform_info(doc, path))
            .collect();
        let documents: Vec<Document> = files.into_iter().map(|(_, doc)| doc).collect();
        Ok(TableSet::Files {
            origin: leak(shown),
            documents: Vec::leak(documents),
            platforms: Vec::leak(platforms),
        })
    }

    /// Where the tables come from, for the first line of a report.
    pub fn origin(&self) -> String {
        match self {
            TableSet::Compiled => "compiled into policy".to_string(),
            TableSet::Files { origin, .. } => format!("read from {origin}"),
        }
    }

    pub fn platforms(&self) -> &'static [PlatformInfo] {
        match self {
            TableSet::Compiled => policy::PLATFORMS,
            TableSet::Files { platforms, .. } => platforms,
        }
    }

    /// The arch of the file that answers `(arch, link)`.
    pub fn table_arch(&self, arch: Arch, link: Link) -> Option<Arch> {
        match self {
            TableSet::Compiled => policy::table_arch(arch, link),
            TableSet::Files { documents, .. } => interpret::table_arch(documents, arch, link),
        }
    }

    /// The file that answers `(arch, link)`.
    pub fn platform_for(&self, arch: Arch, link: Link) -> Option<&'static PlatformInfo> {
        let answering = self.table_arch(arch, link)?;
        self.platforms()
            .iter()
            .find(|p| p.arch == answering && p.link == link)
    }

    /// The tables' algorithm for `q`, before the kernels' run-time checks.
    pub fn select(&self, q: Query) -> Algo {
        match self {
            TableSet::Compiled => policy::select(q),
            TableSet::Files { documents, .. } => interpret::select(documents, q),
        }
    }

    /// The capacity of `algo` for `collective` on `(arch, link)`.
    pub fn capacity(&self, arch: Arch, link: Link, collective: Collective, algo: Algo) -> Capacity {
        match self {
            TableSet::Compiled => policy::capacity(arch, link, collective, algo),
            TableSet::Files { documents, .. } => {
                interpret::capacity(documents, arch, link, collective, algo)
            }
        }
    }
}

/// Why the tables at `shown` cannot be used.
fn refused(shown: &str, diagnostics: &[tuned_schema::Diagnostic]) -> String {
    format!(
        "{shown} would not compile into policy:{}",
        crate::format::diagnostics(diagnostics)
    )
}

fn leak(text: String) -> &'static str {
    String::leak(text)
}

fn leak_opt(text: Option<&str>) -> Option<&'static str> {
    text.map(|t| leak(t.to_string()))
}

/// A document as `policy::PLATFORMS` would hold it.
fn platform_info(doc: &Document, path: &str) -> PlatformInfo {
    let tables: Vec<TableInfo> = doc
        .tables
        .iter()
        .map(|t| {
            let origin = doc.origin(t);
            TableInfo {
                key: t.key,
                source: origin.source.name(),
                source_inherited: origin.inherited,
                citation: leak_opt(origin.citation),
                evidence: leak_opt(origin.evidence),
                date: leak_opt(origin.date),
                tuner_version: leak_opt(origin.tuner_version),
                note: leak_opt(t.note.as_deref()),
                bands: Vec::leak(t.bands.clone()),
            }
        })
        .collect();
    let capacities: Vec<CapacityEntry> = doc.capacities.clone();
    PlatformInfo {
        arch: doc.platform.arch,
        link: doc.platform.link,
        gpu: leak(doc.platform.gpu.clone()),
        source: doc.platform.source.name(),
        citation: leak_opt(doc.platform.citation.as_deref()),
        file: leak(path.to_string()),
        capacities: Vec::leak(capacities),
        tables: Vec::leak(tables),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{DType, Mode};
    use proptest::prelude::*;

    /// The repository's `tuned/`, read once.
    fn repository_tuned() -> TableSet {
        static TUNED: std::sync::OnceLock<TableSet> = std::sync::OnceLock::new();
        *TUNED.get_or_init(|| {
            TableSet::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned")).unwrap()
        })
    }

    /// Queries over every compiled platform, its neighbours in minor version,
    /// every key and sizes at, around and between band edges.
    fn query() -> impl Strategy<Value = Query> {
        let archs: Vec<Arch> = policy::PLATFORMS
            .iter()
            .flat_map(|p| {
                [0, 1, 3, 9].map(|minor| Arch::from_compute_capability(p.arch.major, minor))
            })
            .chain([Arch::from_compute_capability(7, 5)])
            .collect();
        let edges: Vec<u64> = policy::PLATFORMS
            .iter()
            .flat_map(|p| p.tables)
            .flat_map(|t| t.bands)
            .filter_map(|b| b.max)
            .flat_map(|m| [m - 1, m, m + 1])
            .chain([0, 1, 16, u64::MAX])
            .collect();
        (
            proptest::sample::select(archs),
            proptest::sample::select(Link::ALL.to_vec()),
            proptest::sample::select(Collective::ALL.to_vec()),
            0u32..12,
            proptest::sample::select(DType::ALL.to_vec()),
            proptest::sample::select(Mode::ALL.to_vec()),
            prop_oneof![proptest::sample::select(edges), any::<u64>(), 0u64..1 << 28],
        )
            .prop_map(|(arch, link, c, w, d, m, bytes)| Query::new(c, arch, link, w, d, m, bytes))
    }

    proptest! {
        /// The repository's files read from disk answer as the compiled code.
        #[test]
        fn the_files_answer_as_the_compiled_code(
            q in query(),
            algo in proptest::sample::select(Algo::ALL.to_vec()),
        ) {
            let files = repository_tuned();
            let compiled = TableSet::Compiled;
            prop_assert_eq!(files.table_arch(q.arch, q.link), compiled.table_arch(q.arch, q.link));
            prop_assert_eq!(files.select(q), compiled.select(q));
            let c = q.key.collective;
            prop_assert_eq!(
                files.capacity(q.arch, q.link, c, algo),
                compiled.capacity(q.arch, q.link, c, algo)
            );
        }
    }

    #[test]
    fn the_tuned_folder_read_from_disk_is_the_compiled_one() {
        let platforms = repository_tuned().platforms();
        assert_eq!(platforms.len(), policy::PLATFORMS.len());
        for (read, compiled) in platforms.iter().zip(policy::PLATFORMS) {
            assert_eq!((read.arch, read.link), (compiled.arch, compiled.link));
            assert_eq!(read.tables, compiled.tables);
            assert_eq!(read.capacities, compiled.capacities);
            assert_eq!(read.source, compiled.source);
            assert_eq!(read.citation, compiled.citation);
        }
    }

    #[test]
    fn a_file_that_would_not_compile_is_refused() {
        let dir = std::env::temp_dir().join(format!("tuner-tables-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("sm90-nvlink.toml");
        std::fs::write(&bad, "schema = 1\n[platform]\n").unwrap();
        let err = TableSet::load(&bad).unwrap_err();
        assert!(err.contains("would not compile into policy"), "{err}");
        let err = TableSet::load(&dir).unwrap_err();
        assert!(err.contains("sm90-nvlink.toml"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
