//! What is wrong with an input file, and where.

use core::fmt;

/// One problem in one file. `line` and `col` are 1-based; both are 0 when the
/// problem concerns the whole file or folder (e.g. it cannot be read).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Diagnostic {
    /// The file as it should appear in messages (e.g. `../tuned/sm90-nvlink.toml`).
    pub file: String,
    /// 1-based line, or 0 for the whole file.
    pub line: u32,
    /// 1-based column in characters, or 0 for the whole file.
    pub col: u32,
    /// What is wrong, as one or more sentences for a person.
    pub message: String,
}

impl Diagnostic {
    /// A problem at `pos` in `file`.
    pub fn at(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_string(),
            line: pos.line,
            col: pos.col,
            message: message.into(),
        }
    }

    /// A problem with the whole file or folder, with no position inside it.
    pub fn whole(file: &str, message: impl Into<String>) -> Self {
        Self::at(file, Pos { line: 0, col: 0 }, message)
    }

    /// `file:line:col`, or just `file` for a whole-file problem.
    pub fn location(&self) -> String {
        if self.line == 0 {
            self.file.clone()
        } else {
            format!("{}:{}:{}", self.file, self.line, self.col)
        }
    }
}

/// `file:line:col: message`, the shape compilers and editors understand.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location(), self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// A 1-based line and column (in characters) inside a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// 1-based line (0 in a [`Diagnostic`] about a whole file).
    pub line: u32,
    /// 1-based column, counted in characters, not bytes.
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Turns byte offsets (what the TOML parser reports) into line:col.
pub struct LineIndex<'t> {
    text: &'t str,
    /// Byte offset where each line starts.
    line_starts: Vec<usize>,
}

impl<'t> LineIndex<'t> {
    /// Indexes the line starts of `text` (one pass over it).
    pub fn new(text: &'t str) -> Self {
        let line_starts = core::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex { text, line_starts }
    }

    /// The position of byte `offset`; offsets past the end map to the end.
    pub fn pos(&self, offset: usize) -> Pos {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&start| start <= offset) - 1;
        let start = self.line_starts[line];
        // Count characters, not bytes, so columns match what editors show.
        let col = self.text[start..]
            .char_indices()
            .take_while(|&(i, _)| start + i < offset)
            .count();
        Pos {
            line: line as u32 + 1,
            col: col as u32 + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_line_and_column() {
        let index = LineIndex::new("ab\ncé d\n\nx");
        assert_eq!(index.pos(0), Pos { line: 1, col: 1 });
        assert_eq!(index.pos(2), Pos { line: 1, col: 3 });
        assert_eq!(index.pos(3), Pos { line: 2, col: 1 });
        // `é` is two bytes but one column.
        assert_eq!(index.pos(6), Pos { line: 2, col: 3 });
        assert_eq!(index.pos(9), Pos { line: 3, col: 1 });
        assert_eq!(index.pos(10), Pos { line: 4, col: 1 });
        assert_eq!(index.pos(99), Pos { line: 4, col: 2 });
    }

    #[test]
    fn display_names_file_line_col() {
        let d = Diagnostic::at("tuned/a.toml", Pos { line: 3, col: 7 }, "bad");
        assert_eq!(d.to_string(), "tuned/a.toml:3:7: bad");
        assert_eq!(
            Diagnostic::whole("tuned", "missing").to_string(),
            "tuned: missing"
        );
    }
}
