//! A JSON layout for files people review: pretty-printed down to a chosen
//! depth, single-line below it. The evidence file uses it so each measured point
//! (with its samples) is one line: readable, and a diff names the points that
//! changed rather than thousands of lines of numbers.

use std::io;

use serde::Serialize;
use serde_json::ser::Formatter;

/// Serialises `value`; containers opened at nesting depth `compact_from` or
/// deeper (the root is depth 1) are written on one line.
pub fn to_string<T: Serialize>(value: &T, compact_from: usize) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(
        &mut out,
        Layout {
            compact_from,
            open: Vec::new(),
        },
    );
    value
        .serialize(&mut serializer)
        .expect("serialising plain data into memory cannot fail");
    out.push(b'\n');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

struct Layout {
    compact_from: usize,
    /// One entry per open container: whether it has a value yet.
    open: Vec<bool>,
}

impl Layout {
    /// Whether the innermost open container is written on one line.
    fn compact(&self) -> bool {
        self.open.len() >= self.compact_from
    }

    fn open<W: ?Sized + io::Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.open.push(false);
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + io::Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        let compact = self.compact();
        let has_value = self.open.pop().unwrap_or(false);
        if has_value && !compact {
            writer.write_all(b"\n")?;
            self.indent(writer)?;
        }
        writer.write_all(bracket)
    }

    fn begin_item<W: ?Sized + io::Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if self.compact() {
            if !first {
                writer.write_all(b", ")?;
            }
            Ok(())
        } else {
            writer.write_all(if first { b"\n" } else { b",\n" })?;
            self.indent(writer)
        }
    }

    fn end_item(&mut self) {
        if let Some(has_value) = self.open.last_mut() {
            *has_value = true;
        }
    }

    fn indent<W: ?Sized + io::Write>(&self, writer: &mut W) -> io::Result<()> {
        for _ in 0..self.open.len() {
            writer.write_all(b"  ")?;
        }
        Ok(())
    }
}

impl Formatter for Layout {
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.begin_item(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.end_item();
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.begin_item(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.end_item();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pretty_above_compact_below() {
        let value = json!({ "a": [ { "b": [1, 2], "c": {} } ], "d": [] });
        let text = to_string(&value, 3);
        let expected = "{\n  \"a\": [\n    {\"b\": [1, 2], \"c\": {}}\n  ],\n  \"d\": []\n}\n";
        assert_eq!(text, expected);
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
