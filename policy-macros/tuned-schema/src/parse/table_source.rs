//! A `[[table]]`'s own source: `source`, and `citation` (published) or
//! `evidence`, `date` and `tuner_version` (measured, and synthetic: what
//! `tuner sweep --synthetic` writes).
//!
//! Every inconsistent combination is refused here, at the key that is wrong,
//! because each one would leave a reviewer unable to tell where a table came
//! from: a measured table without its evidence, a citation on a measured table,
//! a `citation` with no `source` (does it replace the file's citation or not?).

use super::fields::{Fields, Sink};
use crate::diagnostic::Pos;
use crate::document::{Measurement, Source, TableSource};

/// Keys that only a measured (or synthetic) table has, and what each names.
const MEASURED_ONLY: [(&str, &str); 3] = [
    (
        "evidence",
        "the evidence file the bands were fitted from, relative to this file",
    ),
    ("date", "the ISO date of the sweep, e.g. \"2026-11-29\""),
    ("tuner_version", "the version of the tuner that measured it"),
];

/// `Some(None)`: the table takes the file's source. `None`: an error was reported.
pub(super) fn read_table_source(
    sink: &mut Sink<'_>,
    f: &Fields<'_, '_>,
) -> Option<Option<TableSource>> {
    let source = match f.get("source") {
        None => None,
        Some(_) => Some(f.required_name(sink, ("source", "source"), &Source::ALL, Source::name)?),
    };
    let strings = read_strings(sink, f)?;
    match source {
        None => no_source(sink, &strings),
        Some((Source::Published, at)) => published(sink, &strings, at),
        Some((source @ (Source::Measured | Source::Synthetic), at)) => {
            measured(sink, &strings, source, at)
        }
    }
}

/// The optional string keys that were given, with their text and position.
struct Given {
    entries: Vec<(&'static str, String, Pos)>,
}

impl Given {
    fn get(&self, key: &str) -> Option<&(&'static str, String, Pos)> {
        self.entries.iter().find(|(k, _, _)| *k == key)
    }
}

fn read_strings(sink: &mut Sink<'_>, f: &Fields<'_, '_>) -> Option<Given> {
    let mut entries = Vec::new();
    let mut ok = true;
    for key in ["citation", "evidence", "date", "tuner_version"] {
        match f.optional_string_at(sink, key) {
            Some(Some((text, pos))) => entries.push((key, text, pos)),
            Some(None) => {}
            None => ok = false,
        }
    }
    ok.then_some(Given { entries })
}

/// Without `source`, none of the other keys may appear: the table takes the
/// file's source, and a lone `citation` or `evidence` would silently half-override it.
fn no_source(sink: &mut Sink<'_>, given: &Given) -> Option<Option<TableSource>> {
    for (key, _, pos) in &given.entries {
        let needs = if *key == "citation" {
            "published"
        } else {
            "measured"
        };
        sink.error_at(
            *pos,
            format!(
                "`{key}` needs `source = \"{needs}\"` in the same [[table]]; a table without `source` takes the file's source from [platform]"
            ),
        );
    }
    given.entries.is_empty().then_some(None)
}

fn published(sink: &mut Sink<'_>, given: &Given, at: Pos) -> Option<Option<TableSource>> {
    let mut ok = true;
    for (key, _) in &MEASURED_ONLY {
        if let Some((_, _, pos)) = given.get(key) {
            sink.error_at(
                *pos,
                format!(
                    "`{key}` is for measured and synthetic tables; a table with source = \"published\" names where its figures come from in `citation`"
                ),
            );
            ok = false;
        }
    }
    let citation = non_empty(
        sink,
        given,
        "citation",
        at,
        "published",
        "where the figures come from: project and file, PR or figure",
    );
    let citation = citation?;
    ok.then_some(Some(TableSource::Published { citation }))
}

fn measured(
    sink: &mut Sink<'_>,
    given: &Given,
    source: Source,
    at: Pos,
) -> Option<Option<TableSource>> {
    let mut ok = true;
    let name = source.name();
    if let Some((_, _, pos)) = given.get("citation") {
        sink.error_at(
            *pos,
            format!(
                "`citation` is for published tables; a table with source = \"{name}\" names its `evidence`"
            ),
        );
        ok = false;
    }
    let [evidence, date, tuner_version] =
        MEASURED_ONLY.map(|(key, what)| non_empty(sink, given, key, at, name, what));
    let date = date.and_then(|date| iso_date(sink, given, date));
    let measurement = Measurement {
        evidence: evidence?,
        date: date?,
        tuner_version: tuner_version?,
    };
    ok.then_some(TableSource::with_measurement(source, measurement))
}

/// The text of a key the source requires: present and not blank.
fn non_empty(
    sink: &mut Sink<'_>,
    given: &Given,
    key: &str,
    source_at: Pos,
    source: &str,
    what: &str,
) -> Option<String> {
    match given.get(key) {
        None => {
            sink.error_at(
                source_at,
                format!("source = \"{source}\" requires `{key}`: {what}"),
            );
            None
        }
        Some((_, text, pos)) if text.trim().is_empty() => {
            sink.error_at(*pos, format!("`{key}` is empty; it must name {what}"));
            None
        }
        Some((_, text, _)) => Some(text.clone()),
    }
}

/// Dates are compared and sorted as text, so only `YYYY-MM-DD` is accepted.
fn iso_date(sink: &mut Sink<'_>, given: &Given, date: String) -> Option<String> {
    if is_iso_date(&date) {
        return Some(date);
    }
    let pos = given.get("date").map_or_else(Pos::default, |e| e.2);
    sink.error_at(
        pos,
        format!("`date` must be an ISO date such as \"2026-11-29\", found \"{date}\""),
    );
    None
}

fn is_iso_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let [year, month, day] = parts[..] else {
        return false;
    };
    if !(digits(year, 4) && digits(month, 2) && digits(day, 2)) {
        return false;
    }
    let (month, day): (u32, u32) = (month.parse().unwrap_or(0), day.parse().unwrap_or(0));
    (1..=12).contains(&month) && (1..=31).contains(&day)
}

#[cfg(test)]
mod tests {
    use super::is_iso_date;

    #[test]
    fn iso_dates() {
        assert!(is_iso_date("2026-11-29"));
        for bad in [
            "2026-13-01",
            "2026-1-01",
            "26-11-29",
            "2026/11/29",
            "",
            "2026-11-00",
        ] {
            assert!(!is_iso_date(bad), "{bad}");
        }
    }
}
