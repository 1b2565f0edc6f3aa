//! One document's analysis and every editor feature computed from it, as pure
//! functions of the text (no I/O, no protocol): the server calls these, tests and
//! the no-crash property test call them directly.
//!
//! A document is re-analysed in full on every change: parse, check (the same
//! [`crate::compile`] as `tcc check`, so the diagnostics are the same), and build
//! the symbol [`Index`]. The optimizer's report (for hover on a statement) is
//! computed on first need and kept until the next change.

use super::index::{Index, Ns, OccKind, SymKind, Symbol};
use super::pos::{utf16_len, LineIndex};
use crate::diag::{Diagnostic, Severity};
use crate::sema::hir::{Func, Hir};
use crate::syntax::{ast, lexer, Span};
use crate::tir::OptReport;
use lsp_types as lt;
use std::cell::OnceCell;

/// Everything known about one version of a document.
pub struct Analysis {
    pub text: String,
    pub lines: LineIndex,
    pub file: ast::File,
    /// The same diagnostics `tcc check` prints, in position order.
    pub diagnostics: Vec<Diagnostic>,
    /// The checked program, when there is no error.
    pub hir: Option<Hir>,
    pub index: Index,
    /// The unit name of top-level statements (the file stem, as `tcc check` uses).
    pub stem: String,
    opt: OnceCell<Option<OptReport>>,
}

impl Analysis {
    pub fn new(text: String, stem: &str) -> Analysis {
        let (hir, diagnostics) = crate::pipeline::check(&text, stem, &Default::default());
        let (file, index) = tolerant_index(&text, stem);
        Analysis {
            lines: LineIndex::new(&text),
            file,
            diagnostics,
            hir,
            index,
            stem: stem.to_string(),
            opt: OnceCell::new(),
            text,
        }
    }

    pub fn offset(&self, pos: lt::Position) -> usize {
        self.lines.offset(&self.text, pos)
    }

    pub fn range(&self, span: &Span) -> lt::Range {
        self.lines.range(&self.text, span)
    }

    /// The optimizer's report for the whole file (None while it has errors).
    pub fn opt_report(&self) -> Option<&OptReport> {
        self.opt
            .get_or_init(|| {
                let hir = self.hir.as_ref()?;
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    crate::pipeline::optimize(hir, &Default::default()).1
                }))
                .ok()
            })
            .as_ref()
    }

    // ---- diagnostics ----

    pub fn lsp_diagnostics(&self, uri: &lt::Uri) -> Vec<lt::Diagnostic> {
        self.diagnostics.iter().map(|d| self.lsp_diagnostic(d, uri)).collect()
    }

    fn lsp_diagnostic(&self, d: &Diagnostic, uri: &lt::Uri) -> lt::Diagnostic {
        let mut message = d.message.clone();
        if !d.primary.message.is_empty() && d.primary.message != "here" {
            message.push_str(&format!(": {}", d.primary.message));
        }
        if let Some(h) = &d.hint {
            message.push_str(&format!("\nhelp: {h}"));
        }
        let related: Vec<lt::DiagnosticRelatedInformation> = d
            .secondary
            .iter()
            .map(|l| lt::DiagnosticRelatedInformation {
                location: lt::Location { uri: uri.clone(), range: self.range(&l.span) },
                message: l.message.clone(),
            })
            .collect();
        lt::Diagnostic {
            range: self.range(&d.primary.span),
            severity: Some(match d.severity {
                Severity::Error => lt::DiagnosticSeverity::ERROR,
                Severity::Warning => lt::DiagnosticSeverity::WARNING,
            }),
            code: Some(lt::NumberOrString::String(d.code.to_string())),
            source: Some("tcc".to_string()),
            message,
            related_information: if related.is_empty() { None } else { Some(related) },
            ..lt::Diagnostic::default()
        }
    }

    // ---- hover ----

    pub fn hover(&self, pos: lt::Position) -> Option<lt::Hover> {
        let off = self.offset(pos);
        let (text, span) = self.hover_text(off)?;
        Some(lt::Hover {
            contents: lt::HoverContents::Markup(lt::MarkupContent { kind: lt::MarkupKind::Markdown, value: text }),
            range: Some(self.range(&span)),
        })
    }

    fn hover_text(&self, off: usize) -> Option<(String, Span)> {
        let stmt = self.index.stmt_at(off);
        if let Some(o) = self.index.occurrence_at(off) {
            let mut text = match (o.kind, o.sym) {
                (_, Some(s)) => self.symbol_text(&self.index.symbols[s]),
                (OccKind::Func, None) => match Func::from_name(&o.name) {
                    Some(f) => format!("```tcc\n{}(x)\n```\nelement-wise function: {}", f.name(), func_doc(f)),
                    None => match crate::sema::hir::SPECIAL_FUNCS.iter().find(|(n, _, _)| *n == o.name) {
                        Some((_, call, doc)) => format!("```tcc\n{call}\n```\n{doc}"),
                        None => format!("unknown function `{}`", o.name),
                    },
                },
                (OccKind::Key, None) => format!("`{}`: a parallelism setting", o.name),
                (OccKind::Name(ns), None) => format!("unknown {} `{}`", ns_word(ns), o.name),
            };
            // On the left-hand side of a statement: the statement's report too.
            if let Some(st) = stmt.filter(|s| s.lhs_name_span == o.span) {
                text.push_str("\n\n---\n\n");
                text.push_str(&self.stmt_text(st));
            }
            return Some((text, o.span.clone()));
        }
        if let Some(st) = stmt {
            return Some((self.stmt_text(st), st.span.clone()));
        }
        // A keyword: what it declares.
        let lexed = lexer::lex(&self.text);
        let (l, t, r) = lexed.tokens.iter().find(|(l, _, r)| *l <= off && off < *r)?;
        keyword_doc(t).map(|d| (d.to_string(), *l..*r))
    }

    /// Markdown for a symbol: its declaration and what follows from it.
    pub fn symbol_text(&self, s: &Symbol) -> String {
        let scope = match s.model {
            Some(m) => format!("\n\nin model `{}`", self.index.models[m].name),
            None => String::new(),
        };
        let body = match &s.kind {
            SymKind::Range { parts, .. } if !parts.is_empty() => {
                format!(
                    "```tcc\nrange {} = {};\n```\nunion of the index spaces {}",
                    s.name,
                    parts.join(" + "),
                    parts.join(", ")
                )
            }
            SymKind::Range { size, dim, .. } => {
                let idx: Vec<&str> = self
                    .index
                    .symbols
                    .iter()
                    .filter(|x| matches!(&x.kind, SymKind::Index { range } if self.space(&range.name, x.model).map(|r| &self.index.symbols[r].name_span) == Some(&s.name_span)))
                    .map(|x| x.name.as_str())
                    .collect();
                let decl = match size {
                    Some(size) if *dim => format!("dims {} = {}", s.name, int_text(size)),
                    Some(size) => format!("range {} = {};", s.name, int_text(size)),
                    None => format!("range {};", s.name),
                };
                let mut t = format!(
                    "```tcc\n{decl}\n```\n{} of {}",
                    if *dim { "model dimension" } else { "index space" },
                    size_text(size)
                );
                if !idx.is_empty() {
                    t.push_str(&format!("; indices: {}", idx.join(", ")));
                }
                t
            }
            SymKind::Index { range } => {
                let r = self.space(&range.name, s.model);
                let size = r.and_then(|r| self.range_size(r));
                let runtime =
                    r.is_some_and(|r| matches!(&self.index.symbols[r].kind, SymKind::Range { size: None, parts, .. } if parts.is_empty()));
                format!(
                    "```tcc\nindex {} : {};\n```\nindex over `{}` ({})",
                    s.name,
                    range.name,
                    range.name,
                    match size {
                        Some(n) => format!("{n} values"),
                        None if runtime => "size given at run time".to_string(),
                        None => "size unknown".to_string(),
                    }
                )
            }
            SymKind::Tensor(t) => self.tensor_text(s, t),
            SymKind::Grid { dims } => {
                let ds: Vec<String> = dims.iter().map(int_text).collect();
                let procs: Option<u128> = dims
                    .iter()
                    .map(|d| if d.negative { None } else { d.text.parse::<u128>().ok() })
                    .try_fold(1u128, |a, b| b.and_then(|b| a.checked_mul(b)));
                format!(
                    "```tcc\ngrid {}[{}];\n```\nprocessor grid of {} ranks",
                    s.name,
                    ds.join(", "),
                    procs.map_or("?".to_string(), |p| p.to_string())
                )
            }
            SymKind::Program => {
                let n = self.index.stmts.iter().filter(|st| st.unit == s.name).count();
                format!("```tcc\nprogram {}\n```\n{n} statement(s)", s.name)
            }
            SymKind::Model => {
                let n = self.index.stmts.iter().filter(|st| st.unit == s.name).count();
                format!("```tcc\nmodel {}\n```\n{n} statement(s)", s.name)
            }
            SymKind::Layer => format!("```tcc\nlayer {}\n```", s.name),
        };
        format!("{body}{scope}")
    }

    fn space(&self, name: &str, model: Option<usize>) -> Option<usize> {
        self.index.resolve(Ns::Space, name, model)
    }

    /// The size of a range (or of an index's range), when it is a valid literal.
    fn range_size(&self, sym: usize) -> Option<u128> {
        match &self.index.symbols.get(sym)?.kind {
            SymKind::Range { size: Some(size), .. } if !size.negative => size.text.parse().ok(),
            SymKind::Index { range } => {
                let s = &self.index.symbols[sym];
                let r = self.space(&range.name, s.model)?;
                if r == sym {
                    return None;
                }
                match &self.index.symbols[r].kind {
                    SymKind::Range { size: Some(size), .. } if !size.negative => size.text.parse().ok(),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn tensor_text(&self, s: &Symbol, t: &super::index::TensorSym) -> String {
        let role = match t.role {
            Some(ast::RoleKind::Input) => "input ",
            Some(ast::RoleKind::Output) => "output ",
            Some(ast::RoleKind::Param) => "param ",
            Some(ast::RoleKind::Temporary) => "temporary ",
            None => "",
        };
        // What `sema` decides: f64 unless written, and f32 for implicit model temporaries.
        let elem = match (t.elem, t.implicit) {
            (Some(ast::ElemKind::F32), _) | (None, true) => "f32",
            (Some(ast::ElemKind::C64), _) => "c64",
            (Some(ast::ElemKind::C128), _) => "c128",
            (Some(ast::ElemKind::BF16), _) => "bf16",
            (Some(ast::ElemKind::F16), _) => "f16",
            _ => "f64",
        };
        let dims: Vec<&ast::Ident> = t.dims.iter().flatten().collect();
        let idx = dims.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(",");
        let mut decl = if t.dims.is_some() {
            format!("{role}tensor {}[{idx}] : {elem}", s.name)
        } else {
            format!("{role}tensor {} : {elem}", s.name)
        };
        for sym in &t.symmetry {
            decl.push(' ');
            decl.push_str(sym);
        }
        let mut out = if t.implicit {
            format!("```tcc\n{decl}\n```\ntemporary created by its first assignment")
        } else {
            format!("```tcc\n{decl};\n```")
        };
        if dims.is_empty() {
            out.push_str("\n\nscalar");
        } else {
            let mut ranges = Vec::new();
            let mut sizes = Vec::new();
            for d in &dims {
                let id = self.space(&d.name, s.model);
                let rname = id.map(|i| match &self.index.symbols[i].kind {
                    SymKind::Index { range } => range.name.clone(),
                    _ => self.index.symbols[i].name.clone(),
                });
                ranges.push(rname.unwrap_or_else(|| "?".to_string()));
                sizes.push(id.and_then(|i| self.range_size(i)));
            }
            let shape: Vec<String> = sizes.iter().map(|s| s.map_or("?".to_string(), |n| n.to_string())).collect();
            out.push_str(&format!("\n\nshape: [{}] over ({})", shape.join(", "), ranges.join(", ")));
            if sizes.iter().all(Option::is_some) {
                let n = sizes.iter().flatten().try_fold(1u128, |a, &b| a.checked_mul(b));
                if let Some(n) = n {
                    let bytes = n.saturating_mul(match elem {
                        "f32" => 4,
                        "c128" => 16,
                        _ => 8,
                    });
                    out.push_str(&format!("  \n{n} elements, {}", human_bytes(bytes as f64)));
                }
            }
        }
        out.push_str(&format!("  \nelement type: {elem}"));
        if t.symmetry.is_empty() {
            out.push_str("  \nsymmetry: none");
        } else {
            out.push_str(&format!("  \nsymmetry: {}", t.symmetry.join(" ")));
        }
        out
    }

    /// Markdown for a statement: the optimizer's order, flops and memory.
    pub fn stmt_text(&self, st: &super::index::StmtInfo) -> String {
        let Some(report) = self.opt_report() else {
            return "**statement** — the optimizer's report appears once the file has no errors".to_string();
        };
        let Some(r) = report.stmts.iter().find(|r| r.unit == st.unit && r.stmt == st.pos) else {
            return "**statement** — no optimizer report for it".to_string();
        };
        let mut t = format!("**statement** `{}` (unit `{}`)\n\n", r.text, r.unit);
        if r.order.is_empty() {
            t.push_str("contraction order: as written\n\n");
        } else {
            t.push_str("contraction order:\n");
            for (k, o) in r.order.iter().enumerate() {
                let m = r.method.get(k).map(|m| format!(" ({m:?})")).unwrap_or_default();
                t.push_str(&format!("- `{o}`{m}\n"));
            }
            t.push('\n');
        }
        let ratio = if r.flops_after > 0.0 {
            format!(" (×{:.1} fewer)", r.flops_before / r.flops_after)
        } else {
            String::new()
        };
        t.push_str(&format!("flops: {} → {}{ratio}  \n", human_count(r.flops_before), human_count(r.flops_after)));
        t.push_str(&format!(
            "peak memory of temporaries: {} → {}",
            human_bytes(r.peak_bytes_before),
            human_bytes(r.peak_bytes_after)
        ));
        if !r.temporaries.is_empty() {
            t.push_str(&format!("  \ntemporaries: {}", r.temporaries.join(", ")));
        }
        if !r.reused.is_empty() {
            t.push_str(&format!("  \nreused: {}", r.reused.join(", ")));
        }
        if !r.factorized.is_empty() {
            t.push_str(&format!("  \nfactorized: {}", r.factorized.join(", ")));
        }
        t
    }

    // ---- navigation ----

    /// The declaration of the name under the cursor.
    pub fn definition(&self, pos: lt::Position) -> Option<Span> {
        let o = self.index.occurrence_at(self.offset(pos))?;
        o.sym.map(|s| self.index.symbols[s].name_span.clone())
    }

    /// Every occurrence of the symbol under the cursor.
    pub fn references(&self, pos: lt::Position, include_declaration: bool) -> Vec<Span> {
        let Some(s) = self.index.occurrence_at(self.offset(pos)).and_then(|o| o.sym) else {
            return Vec::new();
        };
        self.index.references(s).filter(|o| include_declaration || !o.is_decl).map(|o| o.span.clone()).collect()
    }

    // ---- completion ----

    pub fn completion(&self, pos: lt::Position) -> Vec<lt::CompletionItem> {
        let off = self.offset(pos);
        // The word being typed, and the token before it.
        let bytes = self.text.as_bytes();
        let mut start = off;
        while start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            start -= 1;
        }
        let prefix = &self.text[start..off];
        let lexed = lexer::lex(&self.text[..start]);
        let toks = &lexed.tokens;
        let prev = toks.last().map(|t| &t.1);
        // Where the current declaration or statement began.
        let stmt_start = toks
            .iter()
            .rposition(|(_, t, _)| matches!(t, lexer::Tok::Semi | lexer::Tok::LBrace | lexer::Tok::RBrace))
            .map_or(0, |i| i + 1);
        let here = &toks[stmt_start.min(toks.len())..];
        let depth_sq = here.iter().fold(0i32, |d, (_, t, _)| match t {
            lexer::Tok::LBracket => d + 1,
            lexer::Tok::RBracket => d - 1,
            _ => d,
        });
        let in_sym = here.iter().any(|(_, t, _)| matches!(t, lexer::Tok::Symmetric | lexer::Tok::Antisymmetric))
            && here.iter().fold(0i32, |d, (_, t, _)| match t {
                lexer::Tok::LParen => d + 1,
                lexer::Tok::RParen => d - 1,
                _ => d,
            }) > 0;
        let first = here.first().map(|t| &t.1);
        let model = self.index.model_at(off);

        #[derive(PartialEq)]
        enum Want {
            Indices,
            Ranges,
            Grids,
            ElemTypes,
            Nothing,
            Anything,
        }
        let want = match prev {
            _ if depth_sq > 0 && matches!(first, Some(lexer::Tok::Grid)) => Want::Nothing,
            _ if depth_sq > 0 || in_sym => Want::Indices,
            Some(lexer::Tok::Colon) if matches!(first, Some(lexer::Tok::Index)) => Want::Ranges,
            Some(lexer::Tok::Colon) => Want::ElemTypes,
            Some(lexer::Tok::On) => Want::Ranges,
            Some(lexer::Tok::Over) => Want::Grids,
            Some(
                lexer::Tok::Range
                | lexer::Tok::Index
                | lexer::Tok::Tensor
                | lexer::Tok::Grid
                | lexer::Tok::Program
                | lexer::Tok::Model
                | lexer::Tok::Layer,
            ) => Want::Nothing, // a new name is being declared
            _ => Want::Anything,
        };

        let mut items = Vec::new();
        let mut push = |label: &str, kind: lt::CompletionItemKind, detail: String| {
            if label.starts_with(prefix) && !items.iter().any(|i: &lt::CompletionItem| i.label == label) {
                items.push(lt::CompletionItem {
                    label: label.to_string(),
                    kind: Some(kind),
                    detail: Some(detail),
                    ..Default::default()
                });
            }
        };
        for id in self.index.visible(model) {
            let s = &self.index.symbols[id];
            let ok = matches!(
                (&want, &s.kind),
                (Want::Anything, _)
                    | (Want::Indices, SymKind::Index { .. })
                    | (Want::Ranges, SymKind::Range { .. })
                    | (Want::Grids, SymKind::Grid { .. })
            );
            if ok {
                let kind = match s.kind {
                    SymKind::Range { .. } => lt::CompletionItemKind::TYPE_PARAMETER,
                    SymKind::Index { .. } => lt::CompletionItemKind::VARIABLE,
                    SymKind::Tensor(_) => lt::CompletionItemKind::STRUCT,
                    SymKind::Grid { .. } => lt::CompletionItemKind::CLASS,
                    SymKind::Program | SymKind::Model | SymKind::Layer => lt::CompletionItemKind::MODULE,
                };
                push(&s.name, kind, self.symbol_detail(s));
            }
        }
        if want == Want::Anything {
            for f in Func::ALL {
                push(f.name(), lt::CompletionItemKind::FUNCTION, format!("element-wise: {}", func_doc(f)));
            }
            for (name, _, doc) in crate::sema::hir::SPECIAL_FUNCS {
                push(name, lt::CompletionItemKind::FUNCTION, doc.to_string());
            }
            for k in KEYWORDS {
                push(k, lt::CompletionItemKind::KEYWORD, "keyword".to_string());
            }
        }
        if want == Want::ElemTypes {
            for k in ["f32", "f64", "c64", "c128", "bf16", "f16", "symmetric", "antisymmetric"] {
                push(k, lt::CompletionItemKind::KEYWORD, "keyword".to_string());
            }
        }
        items
    }

    /// A one-line description (completion detail, document symbol detail).
    pub fn symbol_detail(&self, s: &Symbol) -> String {
        match &s.kind {
            SymKind::Range { size: Some(size), .. } => format!("{} = {}", s.kind_word(), int_text(size)),
            SymKind::Range { parts, .. } if !parts.is_empty() => format!("{} = {}", s.kind_word(), parts.join(" + ")),
            SymKind::Range { size: None, .. } => format!("{}: size given at run time", s.kind_word()),
            SymKind::Index { range } => format!("index : {}", range.name),
            SymKind::Tensor(t) => {
                let dims = t
                    .dims
                    .as_ref()
                    .map(|d| format!("[{}]", d.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(",")))
                    .unwrap_or_default();
                let role = match t.role {
                    Some(ast::RoleKind::Input) => "input ",
                    Some(ast::RoleKind::Output) => "output ",
                    Some(ast::RoleKind::Param) => "param ",
                    _ => "",
                };
                format!("{role}tensor{dims}")
            }
            SymKind::Grid { dims } => format!("grid[{}]", dims.iter().map(int_text).collect::<Vec<_>>().join(", ")),
            _ => s.kind_word().to_string(),
        }
    }

    // ---- document symbols ----

    #[allow(deprecated)] // `DocumentSymbol::deprecated` must be written
    pub fn document_symbols(&self) -> Vec<lt::DocumentSymbol> {
        let sym = |s: &Symbol, children: Option<Vec<lt::DocumentSymbol>>| lt::DocumentSymbol {
            name: s.name.clone(),
            detail: Some(self.symbol_detail(s)),
            kind: match s.kind {
                SymKind::Range { .. } => lt::SymbolKind::TYPE_PARAMETER,
                SymKind::Index { .. } => lt::SymbolKind::VARIABLE,
                SymKind::Tensor(_) => lt::SymbolKind::STRUCT,
                SymKind::Grid { .. } => lt::SymbolKind::CLASS,
                SymKind::Program => lt::SymbolKind::FUNCTION,
                SymKind::Model => lt::SymbolKind::MODULE,
                SymKind::Layer => lt::SymbolKind::METHOD,
            },
            tags: None,
            deprecated: None,
            range: self.range(&cover(&s.decl_span, &s.name_span)),
            selection_range: self.range(&s.name_span),
            children,
        };
        let mut out = Vec::new();
        for s in self.index.symbols.iter().filter(|s| s.model.is_none()) {
            let children = if matches!(s.kind, SymKind::Model) {
                let m = self.index.models.iter().position(|m| m.span == s.decl_span);
                Some(
                    self.index
                        .symbols
                        .iter()
                        .filter(|c| c.model.is_some() && c.model == m)
                        .map(|c| sym(c, None))
                        .collect(),
                )
            } else {
                None
            };
            out.push(sym(s, children));
        }
        out.sort_by_key(|d| (d.range.start.line, d.range.start.character));
        out
    }

    // ---- formatting ----

    /// The edits `tcc fmt` would make: one replacing the whole text (none when it is
    /// already formatted), or the formatter's refusal as a message.
    pub fn formatting(&self) -> Result<Vec<lt::TextEdit>, String> {
        match crate::fmt::format_source(&self.text) {
            Ok(f) if f == self.text => Ok(Vec::new()),
            Ok(f) => Ok(vec![lt::TextEdit {
                range: lt::Range { start: lt::Position::new(0, 0), end: self.lines.end(&self.text) },
                new_text: f,
            }]),
            Err(diags) => {
                let first = diags.first().map(|d| {
                    let p = self.lines.position(&self.text, d.primary.span.start);
                    format!("{} (line {}, column {})", d.message, p.line + 1, p.character + 1)
                });
                Err(format!("cannot format: {}", first.unwrap_or_else(|| "the formatter refused the file".to_string())))
            }
        }
    }

    // ---- semantic tokens ----

    /// Every token with a meaning, as LSP's relative encoding.
    pub fn semantic_tokens(&self) -> Vec<lt::SemanticToken> {
        let lexed = lexer::lex(&self.text);
        let mut toks: Vec<(Span, u32, u32)> = Vec::new();
        for c in &lexed.comments {
            // A `\r` before the line break is not part of the line.
            let end = if c.text.ends_with('\r') { c.span.end - 1 } else { c.span.end };
            toks.push((c.span.start..end, TT_COMMENT, 0));
        }
        for (l, t, r) in &lexed.tokens {
            let span = *l..*r;
            use lexer::Tok::*;
            let ty = match t {
                Comment(_) => TT_COMMENT,
                F32 | F64 | C64 | C128 | BF16 | F16 => TT_TYPE,
                Ident(_) => {
                    match self.index.occurrences.binary_search_by_key(&(*l, *r), |o| (o.span.start, o.span.end)) {
                        Ok(i) => {
                            let o = &self.index.occurrences[i];
                            let (ty, mods) = self.occurrence_token(o);
                            toks.push((span, ty, mods));
                            continue;
                        }
                        Err(_) => TT_VARIABLE,
                    }
                }
                Int(_) | Real(_) => TT_NUMBER,
                PlusEq | Eq | Plus | Minus | Star | Slash => TT_OPERATOR,
                Semi | Comma | Colon | LBracket | RBracket | LParen | RParen | LBrace | RBrace => continue,
                _ => TT_KEYWORD,
            };
            toks.push((span, ty, 0));
        }
        toks.sort_by_key(|t| t.0.start);
        let mut out = Vec::with_capacity(toks.len());
        let (mut line, mut col) = (0u32, 0u32);
        for (span, ty, mods) in toks {
            let p = self.lines.position(&self.text, span.start);
            let text = self.text.get(span.clone()).unwrap_or("");
            if text.contains('\n') {
                continue;
            }
            let length = utf16_len(text);
            let delta_start = if p.line == line { p.character - col } else { p.character };
            out.push(lt::SemanticToken {
                delta_line: p.line - line,
                delta_start,
                length,
                token_type: ty,
                token_modifiers_bitset: mods,
            });
            line = p.line;
            col = p.character;
        }
        out
    }

    fn occurrence_token(&self, o: &super::index::Occurrence) -> (u32, u32) {
        let decl = if o.is_decl { MOD_DECLARATION } else { 0 };
        match (o.kind, o.sym.map(|s| &self.index.symbols[s])) {
            (OccKind::Func, _) => (TT_FUNCTION, MOD_DEFAULT_LIBRARY),
            (OccKind::Key, None) => (TT_PROPERTY, 0),
            (_, Some(s)) => match &s.kind {
                SymKind::Range { .. } => (TT_TYPE, decl),
                SymKind::Index { .. } => (TT_PARAMETER, decl),
                SymKind::Tensor(t) => {
                    let ro = if matches!(t.role, Some(ast::RoleKind::Input | ast::RoleKind::Param)) {
                        MOD_READONLY
                    } else {
                        0
                    };
                    (TT_VARIABLE, decl | ro)
                }
                SymKind::Grid { .. } => (TT_STRUCT, decl),
                SymKind::Program | SymKind::Model | SymKind::Layer => (TT_NAMESPACE, decl),
            },
            (OccKind::Name(ns), None) => match ns {
                Ns::Space => (TT_PARAMETER, 0),
                Ns::Tensor => (TT_VARIABLE, 0),
                Ns::Grid => (TT_STRUCT, 0),
                Ns::Unit => (TT_NAMESPACE, 0),
            },
        }
    }
}

/// The symbol index of a text that may not parse. The parser recovers from an
/// error only at a `;`, and loses the whole tree when it cannot (a statement being
/// typed at the end of the file, a missing `;` before `}`). For navigation and
/// completion, such a text is repaired — a `;` inserted before the token where
/// parsing stopped, or the open brackets closed at the end — and re-parsed, a few
/// times at most; the spans are then mapped back to the original text.
fn tolerant_index(text: &str, stem: &str) -> (ast::File, Index) {
    let mut cur = text.to_string();
    // origin[i]: the original offset of byte i of `cur` (inserted bytes map to
    // the place they were inserted).
    let mut origin: Vec<usize> = (0..text.len()).collect();
    let mut parsed = crate::syntax::parse(&cur);
    for _ in 0..16 {
        let lexed = lexer::lex(&cur);
        if !parsed.file.items.is_empty() || lexed.tokens.is_empty() || !crate::diag::has_errors(&parsed.diagnostics) {
            break;
        }
        // The first place where a statement runs into a `}` or a new declaration
        // (a missing `;`), else the end of the text.
        let unterminated =
            parsed.diagnostics.iter().filter(|d| d.code == "E0002").map(|d| d.primary.span.clone()).find(|sp| {
                let tok = cur.get(sp.clone()).unwrap_or("");
                tok == "}"
                    || (KEYWORDS.contains(&tok)
                        && !matches!(
                            tok,
                            "f32"
                                | "f64"
                                | "c64"
                                | "c128"
                                | "bf16"
                                | "f16"
                                | "symmetric"
                                | "antisymmetric"
                                | "over"
                                | "as"
                                | "on"
                        ))
            });
        let (at, insert) = match unterminated {
            Some(sp) => (sp.start.min(cur.len()), ";".to_string()),
            None => (cur.len(), closers(&lexed.tokens)),
        };
        if insert.is_empty() {
            break;
        }
        let o = origin.get(at).copied().unwrap_or(text.len());
        cur.insert_str(at, &insert);
        origin.splice(at..at, std::iter::repeat_n(o, insert.len()));
        parsed = crate::syntax::parse(&cur);
    }
    let mut index = Index::build(&parsed.file, stem);
    if cur.len() != text.len() {
        index.remap(&|off| origin.get(off).copied().unwrap_or(text.len()));
    }
    (parsed.file, index)
}

/// What closes the brackets still open at the end of `tokens` (with a `;` before
/// each `}` and at the very end, to end the statement being written).
fn closers(tokens: &[(usize, lexer::Tok, usize)]) -> String {
    let mut stack = Vec::new();
    for (_, t, _) in tokens {
        match t {
            lexer::Tok::LParen => stack.push(")"),
            lexer::Tok::LBracket => stack.push("]"),
            lexer::Tok::LBrace => stack.push("}"),
            lexer::Tok::RParen | lexer::Tok::RBracket | lexer::Tok::RBrace => {
                stack.pop();
            }
            _ => {}
        }
    }
    let mut out = String::from(" ");
    for c in stack.iter().rev() {
        if *c == "}" {
            out.push_str(";}");
        } else {
            out.push_str(c);
        }
    }
    if stack.first() != Some(&"}") {
        out.push(';');
    }
    out
}

// The semantic token legend: positions in these lists are the numbers sent.
const TT_KEYWORD: u32 = 0;
const TT_COMMENT: u32 = 1;
const TT_NUMBER: u32 = 2;
const TT_OPERATOR: u32 = 3;
const TT_TYPE: u32 = 4;
const TT_PARAMETER: u32 = 5;
const TT_VARIABLE: u32 = 6;
const TT_FUNCTION: u32 = 7;
const TT_NAMESPACE: u32 = 8;
const TT_STRUCT: u32 = 9;
const TT_PROPERTY: u32 = 10;
const MOD_DECLARATION: u32 = 1;
const MOD_READONLY: u32 = 2;
const MOD_DEFAULT_LIBRARY: u32 = 4;

/// The legend announced in the server's capabilities.
pub fn semantic_legend() -> lt::SemanticTokensLegend {
    use lt::{SemanticTokenModifier as M, SemanticTokenType as T};
    lt::SemanticTokensLegend {
        token_types: vec![
            T::KEYWORD,
            T::COMMENT,
            T::NUMBER,
            T::OPERATOR,
            T::TYPE,
            T::PARAMETER,
            T::VARIABLE,
            T::FUNCTION,
            T::NAMESPACE,
            T::STRUCT,
            T::PROPERTY,
        ],
        token_modifiers: vec![M::DECLARATION, M::READONLY, M::DEFAULT_LIBRARY],
    }
}

/// The language's keywords (what the lexer reserves).
pub const KEYWORDS: [&str; 25] = [
    "range",
    "index",
    "input",
    "output",
    "temporary",
    "param",
    "tensor",
    "symmetric",
    "antisymmetric",
    "grid",
    "distribute",
    "over",
    "as",
    "model",
    "dims",
    "layer",
    "parallel",
    "program",
    "on",
    "f32",
    "f64",
    "c64",
    "c128",
    "bf16",
    "f16",
];

fn keyword_doc(t: &lexer::Tok) -> Option<&'static str> {
    use lexer::Tok::*;
    Some(match t {
        Range => "`range N = 64;` declares an index space and its size; `range N;` one whose size is given at run time",
        Index => "`index i, j : N;` declares indices ranging over a space",
        Input => "`input tensor`: supplied by the caller, read-only",
        Output => "`output tensor`: computed and returned",
        Temporary => "`temporary tensor`: an intermediate (the default role)",
        Param => "`param tensor`: model weights (inside a `model`), read-only",
        Tensor => "`tensor A[i,j] : f64;` declares a tensor, its indices and element type",
        Symmetric => "`symmetric(p q)`: the value is unchanged when these dimensions are permuted",
        Antisymmetric => "`antisymmetric(a b)`: the value changes sign with an odd permutation of these dimensions",
        Grid => "`grid G[4, 4];` declares a processor grid",
        Distribute => "`distribute T[a,b] over G as [a:0, b:1];` maps tensor dimensions to grid dimensions",
        Over | As => "part of `distribute T[...] over G as [...]`",
        Model => "`model name { ... }`: a model layer with dims, tensors, layers and parallel hints",
        Dims => "`dims batch = 8, seq = 16;` declares the model's own index spaces",
        Layer => "`layer name { statements }`: a group of a model's statements",
        Parallel => "`parallel { data = 8; tensor = 4 on hidden; ... }`: hints for the planner",
        Program => "`program name { statements }`: a named unit (one exported function)",
        On => "`on dim`: the model dimension a parallel strategy splits",
        F32 => "32-bit floating point",
        F64 => "64-bit floating point (the default)",
        C64 => "complex of two 32-bit floats (numpy complex64)",
        C128 => "complex of two 64-bit floats (numpy complex128, C double _Complex)",
        BF16 => "bfloat16 storage (8-bit exponent, 7-bit fraction); arithmetic in f32, rounded once when stored",
        F16 => "IEEE half storage (numpy float16); arithmetic in f32, rounded once when stored",
        _ => return None,
    })
}

fn func_doc(f: Func) -> &'static str {
    match f {
        Func::Exp => "eˣ",
        Func::Log => "natural logarithm",
        Func::Sqrt => "square root",
        Func::Recip => "1/x",
        Func::Abs => "|x|",
        Func::Relu => "max(x, 0)",
        Func::Tanh => "hyperbolic tangent",
        Func::Sigmoid => "1/(1+e⁻ˣ)",
        Func::Gelu => "GELU (tanh approximation)",
        Func::Silu => "x·sigmoid(x)",
        Func::Conj => "complex conjugate (the identity on real values)",
    }
}

fn ns_word(ns: Ns) -> &'static str {
    match ns {
        Ns::Space => "range or index",
        Ns::Tensor => "tensor",
        Ns::Grid => "grid",
        Ns::Unit => "program or model",
    }
}

/// "size 64", or "size given at run time" for `range N;`.
fn size_text(size: &Option<ast::IntLit>) -> String {
    match size {
        Some(size) => format!("size {}", int_text(size)),
        None => "size given at run time".to_string(),
    }
}

fn int_text(l: &ast::IntLit) -> String {
    format!("{}{}", if l.negative { "-" } else { "" }, l.text)
}

fn cover(a: &Span, b: &Span) -> Span {
    a.start.min(b.start)..a.end.max(b.end)
}

fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut k = 0;
    while v >= 1024.0 && k + 1 < UNITS.len() {
        v /= 1024.0;
        k += 1;
    }
    if k == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[k])
    }
}

fn human_count(x: f64) -> String {
    if x < 1e4 {
        format!("{x:.0}")
    } else {
        format!("{x:.3e}")
    }
}

/// The file stem `tcc check` would use for a document URI (`.../dir/name.tc` →
/// `name`; percent-escapes decoded; `main` when there is none).
pub fn stem_of_uri(uri: &str) -> String {
    let rest = uri.split_once(':').map_or(uri, |(_, r)| r);
    let path = rest.split(['?', '#']).next().unwrap_or("");
    let last = path.rsplit('/').next().unwrap_or("").as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut decoded = Vec::with_capacity(last.len());
    let mut i = 0;
    while i < last.len() {
        if last[i] == b'%' && i + 2 < last.len() {
            if let (Some(h), Some(l)) = (hex(last[i + 1]), hex(last[i + 2])) {
                decoded.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        decoded.push(last[i]);
        i += 1;
    }
    let name = String::from_utf8_lossy(&decoded).into_owned();
    let stem = match name.rfind('.') {
        Some(0) | None => name.as_str(),
        Some(d) => &name[..d],
    };
    if stem.is_empty() {
        "main".to_string()
    } else {
        stem.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolves(src: &str, at: &str, nth: usize) -> bool {
        let (_, ix) = tolerant_index(src, "t");
        let off = src.match_indices(at).nth(nth).unwrap().0;
        ix.occurrence_at(off).is_some_and(|o| o.sym.is_some())
    }

    #[test]
    fn index_survives_unfinished_text() {
        // a statement being typed at the end
        assert!(resolves("range N = 2; index i : N; tensor A[i];\nA[i] = A[", "A", 2));
        // a missing `;` before `}`
        assert!(resolves("range N = 2; index i : N; tensor A[i];\nprogram p { A[i] = A[i] * 2 }\nA[i] = 1;", "A", 3));
        // inside an unclosed model and layer
        let src = "model m { dims d = 2; index i : d; input tensor X[i];\n layer l { Y[i] = X[i";
        assert!(resolves(src, "X", 1));
        assert!(resolves(src, "i] =", 0));
        // spans are those of the original text
        let (_, ix) = tolerant_index(src, "t");
        assert!(ix.occurrences.iter().all(|o| o.span.end <= src.len() && src[o.span.clone()] == o.name));
    }

    #[test]
    fn stems() {
        assert_eq!(stem_of_uri("file:///a/b/four_index.tc"), "four_index");
        assert_eq!(stem_of_uri("file:///a/my%20file.tc"), "my file");
        assert_eq!(stem_of_uri("untitled:Untitled-1"), "Untitled-1");
        assert_eq!(stem_of_uri("file:///a/%C3%A9t%C3%A9.tc"), "été");
        assert_eq!(stem_of_uri("file:///a/é%"), "é%");
        assert_eq!(stem_of_uri("file:///a/"), "main");
        assert_eq!(stem_of_uri("file:///a/x%2"), "x%2");
    }
}
