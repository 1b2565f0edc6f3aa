//! The lexer: logos turns source text into spanned tokens for the lalrpop parser.
//!
//! Comments are not tokens for the parser, but they are kept (with spans) so that
//! `tcc fmt` can put them back.

use logos::Logos;
use std::fmt;

pub use crate::span::Span;

#[derive(Logos, Debug, Clone, PartialEq)]
#[logos(skip r"[ \t\r\n\f\u{FEFF}]+")]
pub enum Tok {
    #[regex(r"//[^\n\r]*", |lex| lex.slice().to_string())]
    Comment(String),

    // keywords
    #[token("range")]
    Range,
    #[token("index")]
    Index,
    #[token("input")]
    Input,
    #[token("output")]
    Output,
    #[token("temporary")]
    Temporary,
    #[token("param")]
    Param,
    #[token("tensor")]
    Tensor,
    #[token("symmetric")]
    Symmetric,
    #[token("antisymmetric")]
    Antisymmetric,
    #[token("grid")]
    Grid,
    #[token("distribute")]
    Distribute,
    #[token("over")]
    Over,
    #[token("as")]
    As,
    #[token("model")]
    Model,
    #[token("dims")]
    Dims,
    #[token("layer")]
    Layer,
    #[token("parallel")]
    Parallel,
    #[token("program")]
    Program,
    #[token("on")]
    On,
    #[token("f32")]
    F32,
    #[token("f64")]
    F64,
    #[token("c64")]
    C64,
    #[token("c128")]
    C128,
    #[token("bf16")]
    BF16,
    #[token("f16")]
    F16,

    #[regex(r"[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice().to_string())]
    Ident(String),
    /// An integer literal, kept as text so that overflow is a diagnostic, not a panic.
    #[regex(r"[0-9]+", |lex| lex.slice().to_string(), priority = 3)]
    Int(String),
    /// A real literal: `0.5`, `1e-3`, `2.5E+4`, `.25`.
    #[regex(r"([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+", |lex| lex.slice().to_string())]
    Real(String),

    #[token(";")]
    Semi,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token("+=")]
    PlusEq,
    #[token("=")]
    Eq,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("|")]
    Pipe,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,
    #[token("==")]
    EqEq,
    #[token("!=")]
    Ne,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Tok::Comment(_) => "comment",
            Tok::Range => "`range`",
            Tok::Index => "`index`",
            Tok::Input => "`input`",
            Tok::Output => "`output`",
            Tok::Temporary => "`temporary`",
            Tok::Param => "`param`",
            Tok::Tensor => "`tensor`",
            Tok::Symmetric => "`symmetric`",
            Tok::Antisymmetric => "`antisymmetric`",
            Tok::Grid => "`grid`",
            Tok::Distribute => "`distribute`",
            Tok::Over => "`over`",
            Tok::As => "`as`",
            Tok::Model => "`model`",
            Tok::Dims => "`dims`",
            Tok::Layer => "`layer`",
            Tok::Parallel => "`parallel`",
            Tok::Program => "`program`",
            Tok::On => "`on`",
            Tok::F32 => "`f32`",
            Tok::F64 => "`f64`",
            Tok::C64 => "`c64`",
            Tok::C128 => "`c128`",
            Tok::BF16 => "`bf16`",
            Tok::F16 => "`f16`",
            Tok::Ident(s) => return write!(f, "identifier `{s}`"),
            Tok::Int(s) => return write!(f, "integer `{s}`"),
            Tok::Real(s) => return write!(f, "number `{s}`"),
            Tok::Semi => "`;`",
            Tok::Comma => "`,`",
            Tok::Colon => "`:`",
            Tok::LBracket => "`[`",
            Tok::RBracket => "`]`",
            Tok::LParen => "`(`",
            Tok::RParen => "`)`",
            Tok::LBrace => "`{`",
            Tok::RBrace => "`}`",
            Tok::PlusEq => "`+=`",
            Tok::Eq => "`=`",
            Tok::Plus => "`+`",
            Tok::Minus => "`-`",
            Tok::Star => "`*`",
            Tok::Slash => "`/`",
            Tok::Pipe => "`|`",
            Tok::Lt => "`<`",
            Tok::Le => "`<=`",
            Tok::Gt => "`>`",
            Tok::Ge => "`>=`",
            Tok::EqEq => "`==`",
            Tok::Ne => "`!=`",
        };
        f.write_str(s)
    }
}

/// A comment with its span, kept for the formatter.
#[derive(Debug, Clone, PartialEq)]
pub struct Comment {
    pub text: String,
    pub span: Span,
}

/// The result of lexing: tokens for the parser, comments for the formatter, and
/// the spans of characters that start no token.
#[derive(Debug, Default)]
pub struct Lexed {
    pub tokens: Vec<(usize, Tok, usize)>,
    pub comments: Vec<Comment>,
    pub bad: Vec<Span>,
}

/// Lexes the whole source. Never fails: unknown characters are collected in `bad`
/// (adjacent ones merged) and skipped.
pub fn lex(src: &str) -> Lexed {
    let mut out = Lexed::default();
    let mut lexer = Tok::lexer(src);
    while let Some(tok) = lexer.next() {
        let span = lexer.span();
        match tok {
            Ok(Tok::Comment(text)) => out.comments.push(Comment { text, span }),
            Ok(t) => out.tokens.push((span.start, t, span.end)),
            Err(()) => match out.bad.last_mut() {
                Some(last) if last.end == span.start => last.end = span.end,
                _ => out.bad.push(span),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        lex(src).tokens.into_iter().map(|(_, t, _)| t).collect()
    }

    #[test]
    fn numbers_and_operators() {
        assert_eq!(
            toks("R += 0.25 * 1e-3 * 2 / .5"),
            vec![
                Tok::Ident("R".into()),
                Tok::PlusEq,
                Tok::Real("0.25".into()),
                Tok::Star,
                Tok::Real("1e-3".into()),
                Tok::Star,
                Tok::Int("2".into()),
                Tok::Slash,
                Tok::Real(".5".into()),
            ]
        );
    }

    #[test]
    fn keywords_are_not_identifiers_but_prefixes_are() {
        assert_eq!(toks("range ranges"), vec![Tok::Range, Tok::Ident("ranges".into())]);
    }

    #[test]
    fn comments_are_kept_aside_and_bad_chars_merged() {
        let l = lex("a // hi\n@@ b $");
        assert_eq!(l.comments.len(), 1);
        assert_eq!(l.comments[0].text, "// hi");
        assert_eq!(l.bad, vec![8..10, 13..14]);
        assert_eq!(l.tokens.len(), 2);
    }
}
