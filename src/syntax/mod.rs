//! Lexing and parsing: source text → [`ast::File`], with every syntax error as a
//! [`Diagnostic`]. The parser recovers at `;`, so a file reports all its syntax errors.

pub mod ast;
pub mod lexer;

pub use lexer::{Comment, Span};

use crate::diag::Diagnostic;
use lalrpop_util::{ErrorRecovery, ParseError};
use lexer::Tok;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, unused_parens, dead_code)]
    grammar,
    "/tcc.rs"
);

/// Deeper bracket nesting than this is refused before parsing, so that no later
/// (recursive) pass can run out of stack on hostile input.
pub const MAX_NESTING: usize = 64;

/// What parsing produced: the tree (possibly partial), the comments (for `fmt`) and
/// the syntax diagnostics.
#[derive(Debug, Default)]
pub struct Parsed {
    pub file: ast::File,
    pub comments: Vec<Comment>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses a whole source file. Never panics; syntax errors become diagnostics.
pub fn parse(src: &str) -> Parsed {
    let lexed = lexer::lex(src);
    let mut diagnostics: Vec<Diagnostic> = lexed
        .bad
        .iter()
        .map(|s| {
            let text = src.get(s.clone()).unwrap_or("?");
            Diagnostic::error(
                "E0001",
                // Escaped: a control or bidi character must not act on the terminal.
                format!(
                    "unexpected character{} `{}`",
                    if text.chars().count() > 1 { "s" } else { "" },
                    text.escape_debug()
                ),
                s.clone(),
                "not part of the language",
            )
            .with_hint("names are letters, digits and `_`; comments start with `//`")
        })
        .collect();

    if let Some(d) = nesting_error(&lexed.tokens) {
        diagnostics.push(d);
        return Parsed { file: ast::File::default(), comments: lexed.comments, diagnostics };
    }

    let mut recovered: Vec<ErrorRecovery<usize, Tok, ()>> = Vec::new();
    let result = grammar::FileParser::new().parse(&mut recovered, lexed.tokens);
    for r in &recovered {
        diagnostics.push(syntax_error(&r.error, src.len()));
    }
    let file = match result {
        Ok(f) => f,
        Err(e) => {
            diagnostics.push(syntax_error(&e, src.len()));
            ast::File::default()
        }
    };
    diagnostics.sort_by_key(|d| d.primary.span.start);
    Parsed { file, comments: lexed.comments, diagnostics }
}

fn nesting_error(tokens: &[(usize, Tok, usize)]) -> Option<Diagnostic> {
    let mut depth = 0usize;
    for (l, t, r) in tokens {
        match t {
            Tok::LParen | Tok::LBracket | Tok::LBrace => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(
                        Diagnostic::error(
                            "E0004",
                            format!("brackets nested more than {MAX_NESTING} deep"),
                            *l..*r,
                            "too deep",
                        )
                        .with_hint("split the expression into several statements with temporaries"),
                    );
                }
            }
            Tok::RParen | Tok::RBracket | Tok::RBrace => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The span a recovered error covers: from the offending token to the last one skipped.
pub(crate) fn recovery_span(e: &ErrorRecovery<usize, Tok, ()>, l: usize, r: usize) -> Span {
    let start = e.dropped_tokens.first().map(|t| t.0).unwrap_or(l).min(l);
    let end = e.dropped_tokens.last().map(|t| t.2).unwrap_or(r).max(r);
    start..end.max(start)
}

/// Turns lalrpop's terminal names into words a user reads.
fn friendly(expected: &str) -> String {
    match expected.trim_matches('"') {
        "ident" => "a name".to_string(),
        "int" => "an integer".to_string(),
        "real" => "a number".to_string(),
        other => format!("`{other}`"),
    }
}

fn expected_list(expected: &[String]) -> String {
    let mut words: Vec<String> = expected.iter().map(|e| friendly(e)).collect();
    words.dedup();
    match words.len() {
        0 => String::new(),
        1 => format!("expected {}", words[0]),
        n if n <= 6 => format!("expected {} or {}", words[..n - 1].join(", "), words[n - 1]),
        _ => format!("expected one of {}, ...", words[..6].join(", ")),
    }
}

fn hint_for(expected: &[String]) -> String {
    let has = |s: &str| expected.iter().any(|e| e.trim_matches('"') == s);
    if has(";") {
        "declarations and statements end with `;`".to_string()
    } else if has("]") || has(",") {
        "index lists are names separated by commas, like `A[i,j]`".to_string()
    } else if has("=") || has("+=") {
        "a statement is `R[i,j] = A[i,k] * B[k,j];` (or `+=` to accumulate)".to_string()
    } else {
        "see the language summary in the README or `book/src/language.md`".to_string()
    }
}

fn syntax_error(e: &ParseError<usize, Tok, ()>, len: usize) -> Diagnostic {
    match e {
        ParseError::InvalidToken { location } => {
            Diagnostic::error("E0001", "invalid token", *location..*location, "here").with_hint("remove this character")
        }
        ParseError::UnrecognizedEof { location, expected } => {
            Diagnostic::error("E0003", "unexpected end of file", (*location).min(len)..len, expected_list(expected))
                .with_hint(hint_for(expected))
        }
        ParseError::UnrecognizedToken { token: (l, t, r), expected } => {
            Diagnostic::error("E0002", format!("unexpected {t}"), *l..*r, expected_list(expected))
                .with_hint(hint_for(expected))
        }
        ParseError::ExtraToken { token: (l, t, r) } => {
            Diagnostic::error("E0002", format!("unexpected {t}"), *l..*r, "nothing more was expected here")
                .with_hint("remove it")
        }
        ParseError::User { .. } => Diagnostic::error("E0002", "syntax error", 0..0, "here"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_design_sketch() {
        let src = r#"
            range N = 64;
            index p, q, r, s, a, b, c, d : N;
            input  tensor A[p,q,r,s] : f64 symmetric(p q)(r s);
            input  tensor C[a,p]     : f64;
            output tensor B[a,b,c,d] : f64;
            B[a,b,c,d] = C[a,p] * C[b,q] * C[c,r] * C[d,s] * A[p,q,r,s];
            grid G[4, 4, 2];
            distribute A[p,q,r,s] over G as [p:0, q:1];
            R[a,b] += -0.25 * X[a,b] - (Y[a,b] + exp(Z[a,b])) / 2;
            model m {
              dims batch = 8, seq = 16;
              index b2 : batch;
              layer attn { Q[b2] = X[b2] * 2; }
              parallel { data = 8; tensor = 4 on seq; sequence = ulysses(4); zero = 3; }
            }
        "#;
        let p = parse(src);
        assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
        assert_eq!(p.file.items.len(), 10);
    }

    #[test]
    fn reports_every_syntax_error() {
        let p = parse("range N = ;\nindex i : N;\ntensor A[i : f64;\nA[i] = ;\n");
        let codes: Vec<_> = p.diagnostics.iter().map(|d| d.code).collect();
        assert_eq!(codes.len(), 3, "{:?}", p.diagnostics);
        assert!(p.file.items.iter().any(|i| matches!(i, ast::Item::Index(_))));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let src = format!("A = {}1{};", "(".repeat(10_000), ")".repeat(10_000));
        let p = parse(&src);
        assert_eq!(p.diagnostics[0].code, "E0004");
    }
}
