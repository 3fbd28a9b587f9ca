//! What a folder of tuned files must stay when a fit writes into it: one the
//! proc-macro compiles (every `*.toml` parses, one file per platform, the new
//! tables checked beside the others), and no test tables (synthetic,
//! loopback) among a real platform's.

use std::path::{Path, PathBuf};

use policy::{Arch, Link};
use tuned_schema::validate::validate_documents;
use tuned_schema::{Diagnostic, Document, Source};

use crate::format::diagnostics;
use crate::tuned_file::existing_document;

/// Runs every check the proc-macro runs on `doc` as it would sit in `folder`,
/// with the other tuned files there (its assertions may name them). The
/// folder's other `*.toml` files must be tuned files for other platforms (see
/// [`check_folder`]): the macro compiles every one of them.
pub fn check_in_folder(doc: &Document, folder: &Path, replacing: &Path) -> Result<(), String> {
    let mut docs = vec![doc.clone()];
    for sibling in siblings(folder, replacing) {
        docs.push(sibling.usable_for(doc.platform.arch, doc.platform.link)?);
    }
    validate_documents(&docs).map_err(|d| diagnostics(&d))
}

/// What stands in the way of writing `<arch>-<link>` tables to `toml_path`,
/// checked before a sweep measures anything and before `fit` writes: the
/// folder must be one `policy-macros` could compile with the new file in it
/// (every other `*.toml` parses and is for another platform), and a file
/// already at `toml_path` must parse, since the new tables are merged into
/// it. Returns that file, if there is one.
pub fn check_folder(toml_path: &Path, arch: Arch, link: Link) -> Result<Option<Document>, String> {
    let folder = folder_of(toml_path);
    if folder.is_file() {
        return Err(format!(
            "{} is a file, not a folder: the tables go into <arch>-<link>.toml inside a folder",
            folder.display()
        ));
    }
    for sibling in siblings(folder, toml_path) {
        sibling.usable_for(arch, link)?;
    }
    existing_document(toml_path).map_err(|d| {
        format!(
            "cannot merge into {}, which does not parse (fix or move it first):{}",
            toml_path.display(),
            diagnostics(&d)
        )
    })
}

/// The folder a TOML path is in (`.` for a bare file name).
pub fn folder_of(toml_path: &Path) -> &Path {
    toml_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Refuses to put test tables (`kind`:
/// [`test_kind`](crate::tuned_file::test_kind)) where they could be taken for
/// a platform's: into the folder `policy` compiles, into a crate's `tuned/`
/// folder (what `include_tuned!("tuned")` reads), or into a folder that holds
/// measured or published tables of a real platform (the file they would
/// merge into, or one compiled beside them). `--force` overrides it.
pub fn check_test_destination(kind: &str, toml_path: &Path) -> Result<(), String> {
    let folder = folder_of(toml_path);
    let refuse = |why: String| {
        Err(format!(
            "refusing to write {kind} tables into {}: {why}; they describe no GPU platform. Choose another folder, or pass --force",
            folder.display()
        ))
    };
    if is_policy_folder(folder) {
        return refuse(
            "policy compiles every *.toml there into the tables engines run".to_string(),
        );
    }
    let crate_dir = folder
        .parent()
        .filter(|crate_dir| folder.ends_with("tuned") && crate_dir.join("Cargo.toml").is_file());
    if let Some(crate_dir) = crate_dir {
        return refuse(format!(
            "it is the tuned/ folder of the crate in {}, which include_tuned!(\"tuned\") compiles",
            crate_dir.display()
        ));
    }
    let real: Vec<String> = toml_paths(folder)
        .into_iter()
        .filter(|path| matches!(existing_document(path), Ok(Some(doc)) if holds_real_tables(&doc)))
        .map(|path| path.display().to_string())
        .collect();
    if !real.is_empty() {
        return refuse(format!(
            "{} {} measured or published tables of a real platform",
            real.join(", "),
            if real.len() == 1 { "holds" } else { "hold" }
        ));
    }
    Ok(())
}

/// True when `doc` answers queries of a real link with tables that are not
/// synthetic (a file with no table still selects NCCL for its platform).
fn holds_real_tables(doc: &Document) -> bool {
    if doc.platform.link == Link::Loopback {
        return false;
    }
    if doc.tables.is_empty() {
        return doc.platform.source != Source::Synthetic;
    }
    doc.tables
        .iter()
        .any(|t| doc.origin(t).source != Source::Synthetic)
}

/// The repository's `tuned/` (and `policy/tuned`, its link), when this tuner
/// was built from a checkout that still exists.
fn is_policy_folder(folder: &Path) -> bool {
    let Ok(folder) = folder.canonicalize() else {
        return false;
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    [manifest.join("../tuned"), manifest.join("../policy/tuned")]
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .any(|p| p == folder)
}

/// Another `*.toml` of the folder.
struct Sibling {
    path: PathBuf,
    parsed: Result<Document, Vec<Diagnostic>>,
}

impl Sibling {
    /// The document, if the folder can hold it beside a file for `(arch, link)`.
    fn usable_for(self, arch: Arch, link: Link) -> Result<Document, String> {
        let doc = self.parsed.map_err(|d| {
            format!(
                "{} does not parse, and policy-macros compiles every *.toml of a folder, so the folder would not build; fix or move it:{}",
                self.path.display(),
                diagnostics(&d)
            )
        })?;
        if (doc.platform.arch, doc.platform.link) == (arch, link) {
            return Err(format!(
                "{} also defines {arch} {}; policy-macros refuses two files for one platform in one folder (merge them, or move one)",
                self.path.display(),
                link.name()
            ));
        }
        Ok(doc)
    }
}

/// The other `*.toml` files of `folder`, parsed or not.
fn siblings(folder: &Path, replacing: &Path) -> Vec<Sibling> {
    toml_paths(folder)
        .into_iter()
        .filter(|path| !same_file(path, replacing))
        // None: gone since the folder was listed.
        .filter_map(|path| {
            let parsed = existing_document(&path).transpose()?;
            Some(Sibling { path, parsed })
        })
        .collect()
}

/// The `*.toml` files directly in `folder` (the ones the macro reads), sorted.
fn toml_paths(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    paths.sort();
    paths
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
