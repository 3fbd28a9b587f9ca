//! Reading every `*.toml` file of a folder (the proc-macro's and the tuner's view
//! of `tuned/`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::diagnostic::{Diagnostic, LineIndex};
use crate::parse::{ParsedFile, parse_file};
use crate::validate::validate;

/// One file read from a folder.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedFile {
    /// Where the file is on disk, for `include_bytes!` and the tuner.
    pub absolute: PathBuf,
    /// Its document and positions, validated with the rest of the folder.
    pub parsed: ParsedFile,
}

/// Reads, parses and validates every `*.toml` file directly in `dir` (in file-name
/// order, not recursing). `shown_as` is how the folder is named in messages, e.g.
/// `../tuned`; each file appears as `shown_as/name.toml`.
///
/// A missing or unreadable folder, one with no `*.toml` file, and a file that is
/// not UTF-8 are errors too: an empty table set is almost always a wrong path.
pub fn load_folder(dir: &Path, shown_as: &str) -> Result<Vec<LoadedFile>, Vec<Diagnostic>> {
    let paths = toml_files(dir, shown_as)?;
    let mut files = Vec::new();
    let mut diagnostics = Vec::new();
    for (absolute, name) in paths {
        let display = display_path(shown_as, &name);
        match read_text(&absolute, &display).and_then(|text| parse_file(&display, &text)) {
            Ok(parsed) => files.push(LoadedFile { absolute, parsed }),
            Err(errors) => diagnostics.extend(errors),
        }
    }
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    let parsed: Vec<ParsedFile> = files.iter().map(|f| f.parsed.clone()).collect();
    validate(&parsed)?;
    Ok(files)
}

/// `../tuned` + `sm90-nvlink.toml` → `../tuned/sm90-nvlink.toml`
fn display_path(shown_as: &str, name: &str) -> String {
    if shown_as.is_empty() || shown_as == "." {
        name.to_string()
    } else {
        format!("{}/{name}", shown_as.trim_end_matches('/'))
    }
}

/// The `*.toml` files of `dir`, sorted by name, with their names.
fn toml_files(dir: &Path, shown_as: &str) -> Result<Vec<(PathBuf, String)>, Vec<Diagnostic>> {
    let cannot = |e: std::io::Error| {
        vec![Diagnostic::whole(
            shown_as,
            format!("cannot read folder {}: {e}", dir.display()),
        )]
    };
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(cannot)? {
        let entry = entry.map_err(cannot)?;
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if name.ends_with(".toml") && path.is_file() {
            found.push((path, name));
        }
    }
    if found.is_empty() {
        return Err(vec![Diagnostic::whole(
            shown_as,
            format!(
                "no *.toml file in folder {}; add a platform file (see tuned/README.md)",
                dir.display()
            ),
        )]);
    }
    found.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(found)
}

fn read_text(path: &Path, display: &str) -> Result<String, Vec<Diagnostic>> {
    let bytes = fs::read(path)
        .map_err(|e| vec![Diagnostic::whole(display, format!("cannot read file: {e}"))])?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.as_bytes()[..e.utf8_error().valid_up_to()].to_vec();
        // The valid prefix is UTF-8 by construction; locate the first bad byte in it.
        let prefix = String::from_utf8(valid).unwrap_or_default();
        let pos = LineIndex::new(&prefix).pos(prefix.len());
        vec![Diagnostic::at(display, pos, "the file is not valid UTF-8")]
    })
}
