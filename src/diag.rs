//! One `Diagnostic` type for every user-facing message: rendered with ariadne for
//! people, or as JSON for tools (`--error-format=json`, the language server).
//!
//! Error codes: `E00xx` syntax, `E01xx` names and declarations, `E02xx` indices and
//! shapes, `E03xx` statements, `E04xx` symmetry and storage, `E05xx` grids and distributions,
//! `E06xx` models, `E07xx` running (inputs, sizes); `W....` are warnings.

use crate::span::Span;
use ariadne::{Color, Config, IndexType, Label as ALabel, Report, ReportKind, Source};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// A secondary place in the source with a message ("first declared here").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostic {
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
    /// The primary span and what to say under it.
    pub primary: Label,
    pub secondary: Vec<Label>,
    /// What the user can do about it.
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>, span: Span, label: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            primary: Label { span, message: label.into() },
            secondary: Vec::new(),
            hint: None,
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>, span: Span, label: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, ..Self::error(code, message, span, label) }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Self {
        self.secondary.push(Label { span, message: message.into() });
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// True when any diagnostic is an error (warnings alone do not fail a command).
pub fn has_errors(diags: &[Diagnostic]) -> bool {
    diags.iter().any(Diagnostic::is_error)
}

fn clamp(span: &Span, len: usize) -> Span {
    let start = span.start.min(len);
    start..span.end.clamp(start, len)
}

/// Renders diagnostics the way a person reads them. `color` is for terminals only;
/// tests and pipes get plain ASCII-free-of-escapes text.
pub fn render(diags: &[Diagnostic], file_name: &str, src: &str, color: bool) -> String {
    let shown = displayable(src);
    let src = shown.as_str();
    let name = file_name.escape_debug().to_string();
    let file_name = name.as_str();
    // One line index of the source for every report (built per report, 70k
    // diagnostics took minutes).
    let mut cache = (file_name, Source::from(src));
    let mut out = Vec::new();
    for d in diags {
        let kind = match d.severity {
            Severity::Error => ReportKind::Error,
            Severity::Warning => ReportKind::Warning,
        };
        let primary = clamp(&d.primary.span, src.len());
        let mut report = Report::build(kind, (file_name, primary.clone()))
            .with_config(Config::default().with_color(color).with_index_type(IndexType::Byte))
            .with_code(d.code)
            .with_message(&d.message)
            .with_label(
                ALabel::new((file_name, primary))
                    .with_message(&d.primary.message)
                    .with_color(if d.is_error() { Color::Red } else { Color::Yellow })
                    .with_order(0),
            );
        for (i, l) in d.secondary.iter().enumerate() {
            report = report.with_label(
                ALabel::new((file_name, clamp(&l.span, src.len())))
                    .with_message(&l.message)
                    .with_color(Color::Blue)
                    .with_order(i as i32 + 1),
            );
        }
        if let Some(h) = &d.hint {
            report = report.with_help(h);
        }
        // Writing into a Vec cannot fail.
        let _ = report.finish().write(&mut cache, &mut out);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `src` as it may be shown on a terminal, byte for byte as long (spans stay
/// valid): a lone carriage return becomes a line break (the lexer ends lines
/// there too), other control characters become `?` per byte, and bidirectional
/// or invisible format characters (three bytes each) become U+FFFD, so that a
/// hostile source cannot move the cursor, clear the screen or reorder what is
/// shown.
pub fn displayable(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => out.push('\r'),
            '\r' => out.push('\n'),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.extend(std::iter::repeat_n('?', c.len_utf8())),
            '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}' => {
                out.push('\u{FFFD}')
            }
            c => out.push(c),
        }
    }
    debug_assert_eq!(out.len(), src.len());
    out
}

/// A position as editors count it: 1-based line, 1-based column in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LineCol {
    pub line: usize,
    pub column: usize,
}

/// Converts a byte offset into a line and column.
pub fn line_col(src: &str, offset: usize) -> LineCol {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = src.get(..offset).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = src.get(line_start..offset).map(|s| s.chars().count()).unwrap_or(0) + 1;
    LineCol { line, column }
}

#[derive(Serialize)]
struct JsonSpan {
    start: usize,
    end: usize,
    start_pos: LineCol,
    end_pos: LineCol,
}

#[derive(Serialize)]
struct JsonLabel<'a> {
    span: JsonSpan,
    message: &'a str,
}

#[derive(Serialize)]
struct JsonDiagnostic<'a> {
    file: &'a str,
    code: &'a str,
    severity: Severity,
    message: &'a str,
    primary: JsonLabel<'a>,
    secondary: Vec<JsonLabel<'a>>,
    hint: Option<&'a str>,
}

fn json_label<'a>(l: &'a Label, src: &str) -> JsonLabel<'a> {
    let s = clamp(&l.span, src.len());
    JsonLabel {
        span: JsonSpan { start: s.start, end: s.end, start_pos: line_col(src, s.start), end_pos: line_col(src, s.end) },
        message: &l.message,
    }
}

/// One JSON object per line, one line per diagnostic (byte offsets and line/column).
pub fn render_json(diags: &[Diagnostic], file_name: &str, src: &str) -> String {
    let mut out = String::new();
    for d in diags {
        let j = JsonDiagnostic {
            file: file_name,
            code: d.code,
            severity: d.severity,
            message: &d.message,
            primary: json_label(&d.primary, src),
            secondary: d.secondary.iter().map(|l| json_label(l, src)).collect(),
            hint: d.hint.as_deref(),
        };
        out.push_str(&serde_json::to_string(&j).unwrap_or_default());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_characters_are_shown_inert_and_spans_stay_valid() {
        let src = "range N = 3;\u{1b}[2J\0 // note\rtensor\u{202E}x \u{85}y\r\nz";
        let shown = displayable(src);
        assert_eq!(shown.len(), src.len());
        for bad in ['\u{1b}', '\0', '\u{202E}', '\u{85}'] {
            assert!(!shown.contains(bad), "{bad:?} in {shown:?}");
        }
        // The lone CR is a line break; the CRLF pair is kept.
        assert!(shown.contains("note\ntensor") && shown.contains("y\r\nz"), "{shown:?}");
        let d = Diagnostic::error("E0001", "m", 12..13, "here");
        let out = render(&[d], "a\u{1b}.tc", src, false);
        assert!(!out.contains('\u{1b}') && !out.contains('\u{202E}'), "{out:?}");
    }

    #[test]
    fn line_col_counts_chars() {
        let src = "ab\nçd e";
        assert_eq!(line_col(src, 0), LineCol { line: 1, column: 1 });
        assert_eq!(line_col(src, 3), LineCol { line: 2, column: 1 });
        // 'ç' is two bytes: byte 6 is the space, column 3.
        assert_eq!(line_col(src, 6), LineCol { line: 2, column: 3 });
        assert_eq!(line_col(src, 999), LineCol { line: 2, column: 5 });
        // inside a multi-byte character: counts up to its start
        assert_eq!(line_col(src, 4), LineCol { line: 2, column: 1 });
    }

    #[test]
    fn render_names_code_message_and_hint() {
        let src = "range N = 0;";
        let d = Diagnostic::error("E0102", "range `N` is empty", 10..11, "size 0").with_hint("give it a size ≥ 1");
        let text = render(std::slice::from_ref(&d), "t.tc", src, false);
        assert!(text.contains("E0102"), "{text}");
        assert!(text.contains("range `N` is empty"), "{text}");
        assert!(text.contains("give it a size"), "{text}");
        let json = render_json(&[d], "t.tc", src);
        let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(v["code"], "E0102");
        assert_eq!(v["primary"]["span"]["start_pos"]["column"], 11);
    }

    #[test]
    fn out_of_range_spans_do_not_panic() {
        let d = Diagnostic::error("E0001", "x", 50..80, "here");
        let _ = render(std::slice::from_ref(&d), "t.tc", "short", false);
        let _ = render_json(&[d], "t.tc", "short");
    }
}
