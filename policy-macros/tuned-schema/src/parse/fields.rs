//! Typed, position-aware access to the keys of one TOML table.
//!
//! Every getter reports what is wrong (missing key, wrong type, unknown name)
//! into the shared [`Sink`] and returns `None`, so one pass over a file collects
//! as many problems as it can instead of stopping at the first.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use crate::diagnostic::{Diagnostic, LineIndex, Pos};
use crate::size::parse_size;

pub(super) type Value<'i> = Spanned<DeValue<'i>>;

/// Where diagnostics of one file go.
pub(super) struct Sink<'t> {
    pub file: String,
    pub index: LineIndex<'t>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Sink<'_> {
    pub fn pos(&self, span: Range<usize>) -> Pos {
        self.index.pos(span.start)
    }

    pub fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        let pos = self.pos(span);
        self.error_at(pos, message);
    }

    pub fn error_at(&mut self, pos: Pos, message: impl Into<String>) {
        self.diagnostics
            .push(Diagnostic::at(&self.file, pos, message));
    }
}

/// The keys of one table, checked against the keys it may have.
pub(super) struct Fields<'a, 'i> {
    table: &'a DeTable<'i>,
    /// How the table is named in messages, e.g. `[[table]]`.
    what: &'static str,
    /// Where missing keys are reported: the table's header or opening brace.
    pub at: Pos,
}

impl<'a, 'i> Fields<'a, 'i> {
    /// Reports every key that is not in `allowed`.
    pub fn new(
        sink: &mut Sink<'_>,
        table: &'a DeTable<'i>,
        what: &'static str,
        at: Pos,
        allowed: &[&str],
    ) -> Self {
        for key in table.keys() {
            if !allowed.contains(&key.get_ref().as_ref()) {
                sink.error(
                    key.span(),
                    format!(
                        "unknown key `{}` in {what}; expected one of: {}",
                        key.get_ref(),
                        allowed.join(", ")
                    ),
                );
            }
        }
        Fields { table, what, at }
    }

    pub fn get(&self, key: &str) -> Option<&'a Value<'i>> {
        self.table.get(key)
    }

    fn required(&self, sink: &mut Sink<'_>, key: &str) -> Option<&'a Value<'i>> {
        let value = self.get(key);
        if value.is_none() {
            sink.error_at(
                self.at,
                format!("{} is missing required key `{key}`", self.what),
            );
        }
        value
    }

    pub fn required_str(&self, sink: &mut Sink<'_>, key: &str) -> Option<(&'a str, Pos)> {
        let value = self.required(sink, key)?;
        as_str(sink, key, value).map(|s| (s, sink.pos(value.span())))
    }

    pub fn optional_string(&self, sink: &mut Sink<'_>, key: &str) -> Option<Option<String>> {
        Some(self.optional_string_at(sink, key)?.map(|(text, _)| text))
    }

    /// An optional string with where it was written.
    pub fn optional_string_at(
        &self,
        sink: &mut Sink<'_>,
        key: &str,
    ) -> Option<Option<(String, Pos)>> {
        match self.get(key) {
            None => Some(None),
            Some(value) => {
                let text = as_str(sink, key, value)?.to_string();
                Some(Some((text, sink.pos(value.span()))))
            }
        }
    }

    /// A required string naming one of `all` (each spelled by `name`), e.g.
    /// a dtype; `kind` is what they are called in messages.
    pub fn required_name<T: Copy>(
        &self,
        sink: &mut Sink<'_>,
        (key, kind): (&str, &str),
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Option<(T, Pos)> {
        let (text, pos) = self.required_str(sink, key)?;
        Some((named(sink, (text, pos), kind, all, name)?, pos))
    }

    pub fn required_u64(&self, sink: &mut Sink<'_>, key: &str) -> Option<(u64, Pos)> {
        let value = self.required(sink, key)?;
        as_u64(sink, key, value).map(|n| (n, sink.pos(value.span())))
    }

    pub fn optional_u64(&self, sink: &mut Sink<'_>, key: &str) -> Option<Option<u64>> {
        match self.get(key) {
            None => Some(None),
            Some(value) => as_u64(sink, key, value).map(Some),
        }
    }

    pub fn required_u32(&self, sink: &mut Sink<'_>, key: &str) -> Option<(u32, Pos)> {
        let (n, pos) = self.required_u64(sink, key)?;
        match u32::try_from(n) {
            Ok(n) => Some((n, pos)),
            Err(_) => {
                sink.error_at(pos, format!("`{key}` is too large: {n}"));
                None
            }
        }
    }

    /// A byte size: a non-negative integer or a string such as `"448KiB"`.
    pub fn required_size(&self, sink: &mut Sink<'_>, key: &str) -> Option<(u64, Pos)> {
        let value = self.required(sink, key)?;
        as_size(sink, key, value).map(|n| (n, sink.pos(value.span())))
    }

    pub fn optional_size(&self, sink: &mut Sink<'_>, key: &str) -> Option<Option<(u64, Pos)>> {
        if self.get(key).is_none() {
            return Some(None);
        }
        self.required_size(sink, key).map(Some)
    }

    pub fn required_array(&self, sink: &mut Sink<'_>, key: &str) -> Option<(&'a DeArray<'i>, Pos)> {
        let value = self.required(sink, key)?;
        match value.get_ref() {
            DeValue::Array(array) => Some((array, sink.pos(value.span()))),
            other => {
                wrong_type(sink, key, "an array", other, value.span());
                None
            }
        }
    }

    /// A table-valued key such as `[platform]`, with its position.
    pub fn optional_table(
        &self,
        sink: &mut Sink<'_>,
        key: &str,
    ) -> Option<Option<(&'a DeTable<'i>, Pos)>> {
        let Some(value) = self.get(key) else {
            return Some(None);
        };
        as_table(sink, key, value).map(|t| Some((t, sink.pos(value.span()))))
    }

    /// An array of tables such as `[[table]]`: each table with its position.
    pub fn tables(&self, sink: &mut Sink<'_>, key: &str) -> Option<Vec<(&'a DeTable<'i>, Pos)>> {
        let Some(value) = self.get(key) else {
            return Some(Vec::new());
        };
        let DeValue::Array(array) = value.get_ref() else {
            wrong_type(
                sink,
                key,
                "an array of tables",
                value.get_ref(),
                value.span(),
            );
            return None;
        };
        let mut tables = Vec::new();
        let mut ok = true;
        for item in array.iter() {
            match as_table(sink, key, item) {
                Some(t) => tables.push((t, sink.pos(item.span()))),
                None => ok = false,
            }
        }
        ok.then_some(tables)
    }
}

pub(super) fn as_str<'a>(sink: &mut Sink<'_>, key: &str, value: &'a Value<'_>) -> Option<&'a str> {
    match value.get_ref() {
        DeValue::String(s) => Some(s.as_ref()),
        other => {
            wrong_type(sink, key, "a string", other, value.span());
            None
        }
    }
}

pub(super) fn as_table<'a, 'i>(
    sink: &mut Sink<'_>,
    key: &str,
    value: &'a Value<'i>,
) -> Option<&'a DeTable<'i>> {
    match value.get_ref() {
        DeValue::Table(t) => Some(t),
        other => {
            wrong_type(sink, key, "a table", other, value.span());
            None
        }
    }
}

fn as_u64(sink: &mut Sink<'_>, key: &str, value: &Value<'_>) -> Option<u64> {
    match value.get_ref() {
        DeValue::Integer(i) => match i128::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) if n >= 0 && n <= i128::from(u64::MAX) => Some(n as u64),
            _ => {
                sink.error(
                    value.span(),
                    format!("`{key}` must be a non-negative integer, found {i}"),
                );
                None
            }
        },
        other => {
            wrong_type(sink, key, "an integer", other, value.span());
            None
        }
    }
}

fn as_size(sink: &mut Sink<'_>, key: &str, value: &Value<'_>) -> Option<u64> {
    match value.get_ref() {
        DeValue::Integer(_) => as_u64(sink, key, value),
        DeValue::String(s) => match parse_size(s) {
            Ok(n) => Some(n),
            Err(message) => {
                sink.error(value.span(), message);
                None
            }
        },
        other => {
            wrong_type(
                sink,
                key,
                "a size (an integer or a string such as \"448KiB\")",
                other,
                value.span(),
            );
            None
        }
    }
}

fn wrong_type(
    sink: &mut Sink<'_>,
    key: &str,
    expected: &str,
    found: &DeValue<'_>,
    span: Range<usize>,
) {
    sink.error(
        span,
        format!("`{key}` must be {expected}, found {}", found.type_str()),
    );
}

/// The one of `all` that `name` spells `text`; else an error at `pos`:
/// "unknown algorithm `ring`; expected one of: nccl, one_shot_push, …".
pub(super) fn named<T: Copy>(
    sink: &mut Sink<'_>,
    (text, pos): (&str, Pos),
    kind: &str,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Option<T> {
    let found = all.iter().copied().find(|&v| name(v) == text);
    if found.is_none() {
        let valid: Vec<&str> = all.iter().map(|&v| name(v)).collect();
        let valid = valid.join(", ");
        sink.error_at(
            pos,
            format!("unknown {kind} `{text}`; expected one of: {valid}"),
        );
    }
    found
}
