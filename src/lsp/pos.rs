//! Byte offsets (what spans hold) ↔ LSP positions (0-based line, UTF-16 code units).
//!
//! A line ends at `\n` (a `\r` before it belongs to the line break, not to the
//! line). Positions past the end of a line clamp to its end, lines past the end of
//! the text to the end of the text, and a column inside a character (the second
//! half of a surrogate pair) to the start of that character — so that no position a
//! client sends can make an out-of-bounds or non-boundary slice.

use crate::syntax::Span;
use lsp_types::{Position, Range};

/// The start of every line, for fast conversions in both directions.
#[derive(Debug, Clone)]
pub struct LineIndex {
    /// Byte offset of the first character of each line; `starts[0] == 0`.
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts, len: text.len() }
    }

    /// The byte range of line `line` without its line break (`\n` or `\r\n`).
    fn line_bounds(&self, text: &str, line: usize) -> (usize, usize) {
        let start = self.starts[line];
        let mut end = self.starts.get(line + 1).map(|&s| s - 1).unwrap_or(self.len);
        if end > start && text.as_bytes().get(end - 1) == Some(&b'\r') && end < self.len {
            end -= 1;
        }
        (start, end.max(start))
    }

    /// The position of a byte offset (clamped to the text; an offset inside a
    /// character counts as its start).
    pub fn position(&self, text: &str, offset: usize) -> Position {
        let mut offset = offset.min(self.len).min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = match self.starts.binary_search(&offset) {
            Ok(l) => l,
            Err(l) => l - 1,
        };
        let start = self.starts[line];
        let col: usize = text[start..offset].chars().map(char::len_utf16).sum();
        Position { line: line as u32, character: col as u32 }
    }

    /// The byte offset of a position, clamped as described in the module docs.
    pub fn offset(&self, text: &str, pos: Position) -> usize {
        let line = pos.line as usize;
        if line >= self.starts.len() {
            return text.len();
        }
        let (start, end) = self.line_bounds(text, line);
        let mut units = 0usize;
        for (i, ch) in text[start..end].char_indices() {
            let w = ch.len_utf16();
            if units + w > pos.character as usize {
                return start + i;
            }
            units += w;
        }
        end
    }

    pub fn range(&self, text: &str, span: &Span) -> Range {
        let start = self.position(text, span.start);
        let end = self.position(text, span.end.max(span.start));
        Range { start, end }
    }

    /// The byte span of an LSP range (start ≤ end even if the client swapped them).
    pub fn span(&self, text: &str, range: Range) -> Span {
        let a = self.offset(text, range.start);
        let b = self.offset(text, range.end);
        a.min(b)..a.max(b)
    }

    /// The position just past the last character.
    pub fn end(&self, text: &str) -> Position {
        self.position(text, text.len())
    }
}

/// Length of a piece of text in UTF-16 code units.
pub fn utf16_len(s: &str) -> u32 {
    s.chars().map(|c| c.len_utf16() as u32).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: u32, character: u32) -> Position {
        Position { line, character }
    }

    #[test]
    fn ascii_round_trip() {
        let t = "ab\ncd\n";
        let li = LineIndex::new(t);
        assert_eq!(li.position(t, 0), p(0, 0));
        assert_eq!(li.position(t, 3), p(1, 0));
        assert_eq!(li.position(t, 5), p(1, 2));
        assert_eq!(li.position(t, 6), p(2, 0));
        for off in 0..=t.len() {
            assert_eq!(li.offset(t, li.position(t, off)), off);
        }
    }

    #[test]
    fn utf16_columns() {
        // 'é' is 2 bytes, 1 UTF-16 unit; '𝔸' is 4 bytes, 2 UTF-16 units.
        let t = "// é𝔸\nrange N = 0;";
        let li = LineIndex::new(t);
        let n = t.find('N').unwrap();
        assert_eq!(li.position(t, n), p(1, 6));
        let x = t.find('\n').unwrap();
        assert_eq!(li.position(t, x), p(0, 6));
        assert_eq!(li.offset(t, p(0, 3)), 3); // after "// "
        assert_eq!(li.offset(t, p(0, 4)), 5); // after 'é'
        assert_eq!(li.offset(t, p(0, 5)), 5); // inside the surrogate pair: start of '𝔸'
        assert_eq!(li.offset(t, p(0, 6)), 9);
        assert_eq!(li.offset(t, p(0, 99)), 9); // clamped to the end of the line
        assert_eq!(li.offset(t, p(9, 0)), t.len());
        // a byte offset inside a character counts as its start
        assert_eq!(li.position(t, 4), p(0, 3));
    }

    #[test]
    fn crlf_lines() {
        let t = "ab\r\ncd";
        let li = LineIndex::new(t);
        assert_eq!(li.offset(t, p(0, 9)), 2);
        assert_eq!(li.offset(t, p(1, 1)), 5);
        assert_eq!(li.position(t, 4), p(1, 0));
        assert_eq!(li.end(t), p(1, 2));
    }
}
