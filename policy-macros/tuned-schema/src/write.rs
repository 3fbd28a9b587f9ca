//! [`Document`] → canonical TOML text.
//!
//! Canonical means: the same document always gives the same bytes, and
//! `parse(to_toml_string(doc)) == doc`. Keys come in a fixed order, entries in the
//! document's order, sizes as strings in their largest exact unit (`"448KiB"`),
//! each band on its own line, one blank line between sections, and absent optional
//! values are left out. The tuner relies on this to rewrite files without noise.

use std::fmt::Write as _;

use crate::document::{
    Assertion, Band, CapacityEntry, Document, Platform, SCHEMA_VERSION, Table, TableSource,
};
use crate::size::format_size;

/// The canonical text of `doc` (see the module docs); it never fails, and
/// does not validate `doc`.
pub fn to_toml_string(doc: &Document) -> String {
    let mut out = format!("schema = {SCHEMA_VERSION}\n");
    write_platform(&mut out, &doc.platform);
    for entry in &doc.capacities {
        write_capacity(&mut out, entry);
    }
    for table in &doc.tables {
        write_table(&mut out, table);
    }
    for assertion in &doc.asserts {
        write_assert(&mut out, assertion);
    }
    out
}

fn write_platform(out: &mut String, p: &Platform) {
    out.push_str("\n[platform]\n");
    key_str(out, "arch", &p.arch.name());
    key_str(out, "gpu", &p.gpu);
    key_str(out, "link", p.link.name());
    key_str(out, "source", p.source.name());
    opt_str(out, "citation", &p.citation);

    let v = &p.provenance;
    if *v == Default::default() {
        return;
    }
    out.push_str("\n[platform.provenance]\n");
    opt_str(out, "tuner_version", &v.tuner_version);
    opt_str(out, "date", &v.date);
    opt_str(out, "driver", &v.driver);
    opt_str(out, "cuda", &v.cuda);
    opt_str(out, "nccl", &v.nccl);
    opt_str(out, "host", &v.host);
    if let Some(samples) = v.samples {
        let _ = writeln!(out, "samples = {samples}");
    }
    opt_str(out, "evidence", &v.evidence);
}

fn write_capacity(out: &mut String, c: &CapacityEntry) {
    out.push_str("\n[[capacity]]\n");
    key_str(out, "collective", c.collective.name());
    key_str(out, "algo", c.algo.name());
    key_str(out, "max", &format_size(c.capacity.max_bytes));
    let _ = writeln!(out, "align = {}", c.capacity.align);
}

fn write_table(out: &mut String, t: &Table) {
    out.push_str("\n[[table]]\n");
    key_str(out, "collective", t.key.collective.name());
    let _ = writeln!(out, "world_size = {}", t.key.world_size);
    key_str(out, "dtype", t.key.dtype.name());
    key_str(out, "mode", t.key.mode.name());
    if let Some(source) = &t.source {
        write_table_source(out, source);
    }
    opt_str(out, "note", &t.note);
    out.push_str("bands = [\n");
    for band in &t.bands {
        let _ = writeln!(out, "  {},", inline_band(band));
    }
    out.push_str("]\n");
}

/// A table's own source, right after its key so a reviewer sees it first.
fn write_table_source(out: &mut String, source: &TableSource) {
    key_str(out, "source", source.source().name());
    match source {
        TableSource::Published { citation } => key_str(out, "citation", citation),
        TableSource::Measured(m) | TableSource::Synthetic(m) => {
            key_str(out, "evidence", &m.evidence);
            key_str(out, "date", &m.date);
            key_str(out, "tuner_version", &m.tuner_version);
        }
    }
}

/// `{ max = "4KiB", algo = "one_shot_push" }` or `{ algo = "nccl" }`
fn inline_band(band: &Band) -> String {
    match band.max {
        Some(max) => format!(
            "{{ max = {}, algo = {} }}",
            quoted(&format_size(max)),
            quoted(band.algo.name())
        ),
        None => format!("{{ algo = {} }}", quoted(band.algo.name())),
    }
}

fn write_assert(out: &mut String, a: &Assertion) {
    out.push_str("\n[[assert]]\n");
    key_str(out, "arch", &a.arch.name());
    key_str(out, "link", a.link.name());
    key_str(out, "collective", a.collective.name());
    let _ = writeln!(out, "world_size = {}", a.world_size);
    key_str(out, "dtype", a.dtype.name());
    key_str(out, "mode", a.mode.name());
    key_str(out, "bytes", &format_size(a.bytes));
    let algos: Vec<String> = a.algo_in.iter().map(|x| quoted(x.name())).collect();
    let _ = writeln!(out, "algo_in = [{}]", algos.join(", "));
    key_str(out, "why", &a.why);
}

fn key_str(out: &mut String, key: &str, value: &str) {
    let _ = writeln!(out, "{key} = {}", quoted(value));
}

fn opt_str(out: &mut String, key: &str, value: &Option<String>) {
    if let Some(value) = value {
        key_str(out, key, value);
    }
}

/// A TOML basic string: quotes, backslashes and control characters escaped.
fn quoted(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\t' => s.push_str("\\t"),
            '\r' => s.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(s, "\\u{:04X}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(quoted("plain"), "\"plain\"");
        assert_eq!(quoted("a \"q\" \\ b"), "\"a \\\"q\\\" \\\\ b\"");
        assert_eq!(quoted("l1\nl2\t\u{7}"), "\"l1\\nl2\\t\\u0007\"");
        assert_eq!(quoted("µs ≤ 5"), "\"µs ≤ 5\"");
    }

    #[test]
    fn bands_are_inline_tables() {
        let band = Band {
            max: Some(448 * 1024),
            algo: crate::vocab::Algo::TwoShotPull,
        };
        assert_eq!(
            inline_band(&band),
            "{ max = \"448KiB\", algo = \"two_shot_pull\" }"
        );
        let open = Band {
            max: None,
            algo: crate::vocab::Algo::Nccl,
        };
        assert_eq!(inline_band(&open), "{ algo = \"nccl\" }");
    }
}
