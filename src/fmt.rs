//! `tcc fmt`: canonical formatting of a source file, comments kept.
//!
//! The canonical style (see `book/src/cli.md`, "Formatting"):
//!
//! * one declaration, statement, `dims` line or `parallel` entry per line, each
//!   ending with `;`; blocks (`program`, `model`, `layer`, `parallel`) open with
//!   `{` on the header's line, indent their contents by two spaces and close with
//!   `}` on a line of its own (an empty block is `{}`);
//! * spaces around `=`, `+=`, binary `+ - * /` and the `:` of `index` and tensor
//!   declarations; `, ` between listed names and numbers (`index i, j : O;`,
//!   `grid G[4, 4, 2];`, `[a:0, b:1]`), but none inside a tensor's index brackets
//!   (`A[p,q]`) and one between the names of a symmetry group (`symmetric(p q)(r s)`,
//!   `symmetric((p q)(r s))`) or a block rule (`spin(a b | i j)`, `irrep(p q r s)`);
//!   tile coordinates are written like tensor indices (`tiles[[0,1], [1,0]]`); range
//!   attributes follow the size (`range V = 200 tile 40 spin(100, 100);`);
//! * what is optional and written stays written (the role keyword, the element
//!   type, empty brackets `E[]`), numbers keep their text; a redundant leading `+`
//!   and trailing commas are dropped (they do not change the syntax tree);
//! * comments: an own-line comment stays before what follows it, at its
//!   indentation; a trailing comment stays at the end of its line; comments inside
//!   a declaration or statement move to the end of its line (or, when that place
//!   is taken, onto their own lines before it); comments at the end of a block or
//!   file stay there. Trailing white space is removed from comments;
//! * at most one blank line between items, where the source had at least one;
//!   none at the start of a block or file; the output ends with one newline.
//!
//! Invariants (tested here, in `tests/fmt.rs` and by property tests): formatting is
//! idempotent, the result parses to the same syntax tree up to spans, and every
//! comment survives.

use crate::diag::Diagnostic;
use crate::syntax::ast::*;
use crate::syntax::lexer::{self, Tok};
use crate::syntax::{Comment, Span};

/// Formats a whole file. Refuses (with the syntax diagnostics) a file that does not parse.
pub fn format_source(src: &str) -> Result<String, Vec<Diagnostic>> {
    let parsed = crate::syntax::parse(src);
    if crate::diag::has_errors(&parsed.diagnostics) {
        return Err(parsed.diagnostics);
    }
    let tokens = lexer::lex(src).tokens;
    let nodes: Vec<Node> = parsed.file.items.iter().map(|i| item_node(src, &tokens, i)).collect();
    let mut comments = parsed.comments;
    comments.sort_by_key(|c| c.span.start);
    let mut f = Printer { src, comments: &comments, next: 0, out: String::new() };
    f.seq(&nodes, src.len(), 0);
    Ok(f.out)
}

/// The syntax tree printed without its spans: two files have the same key exactly
/// when they parse to the same tree up to positions. Used by the formatter's tests
/// (formatting must not change the tree).
#[doc(hidden)]
pub fn ast_key(file: &File) -> String {
    strip_spans(&format!("{file:?}"))
}

/// Removes every `N..M` (a span's `Debug` form) from a `Debug` dump. Literal texts
/// in the tree (`"0.5"`, `"1."`) never contain `..`.
fn strip_spans(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if b[j..].starts_with(b"..") {
                let mut k = j + 2;
                while k < b.len() && b[k].is_ascii_digit() {
                    k += 1;
                }
                if k > j + 2 {
                    out.push('_');
                    i = k;
                    continue;
                }
            }
        }
        // Copy one whole character (the dump may hold non-ASCII names' escapes).
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8().max(1);
    }
    out
}

// ---------------------------------------------------------------------------
// The layout tree: what is printed on one line, and what is a block.

enum Node {
    /// A declaration or statement, printed on one line.
    Leaf { span: Span, text: String },
    /// `header { children }`; `open` is the span of the `{` token.
    Block { span: Span, header: String, open: Span, children: Vec<Node> },
}

impl Node {
    fn span(&self) -> &Span {
        match self {
            Node::Leaf { span, .. } | Node::Block { span, .. } => span,
        }
    }
}

/// The span of the first `{` token at or after `from` (the opening brace of a block
/// whose header ends there). Falls back to an empty span at `from`.
fn open_brace(tokens: &[(usize, Tok, usize)], from: usize) -> Span {
    let start = tokens.partition_point(|t| t.0 < from);
    tokens[start..].iter().find(|t| t.1 == Tok::LBrace).map(|t| t.0..t.2).unwrap_or(from..from)
}

fn item_node(src: &str, tokens: &[(usize, Tok, usize)], item: &Item) -> Node {
    let leaf = |text: String| Node::Leaf { span: item.span(), text };
    match item {
        Item::Range(d) => leaf(range_decl(d)),
        Item::Index(d) => leaf(index_decl(d)),
        Item::Tensor(d) => leaf(tensor_decl(d)),
        Item::Stmt(s) => leaf(stmt(s)),
        Item::Grid(g) => {
            leaf(format!("grid {}[{}];", g.name.name, g.dims.iter().map(int).collect::<Vec<_>>().join(", ")))
        }
        Item::Distribute(d) => leaf(format!(
            "distribute {} over {} as [{}];",
            tensor_ref(&d.tensor),
            d.grid.name,
            d.mapping.iter().map(|(i, n)| format!("{}:{}", i.name, int(n))).collect::<Vec<_>>().join(", ")
        )),
        Item::Program(p) => Node::Block {
            span: p.span.clone(),
            header: format!("program {}", p.name.name),
            open: open_brace(tokens, p.name.span.end),
            children: p.items.iter().map(|i| item_node(src, tokens, i)).collect(),
        },
        Item::Model(m) => Node::Block {
            span: m.span.clone(),
            header: format!("model {}", m.name.name),
            open: open_brace(tokens, m.name.span.end),
            children: m.items.iter().map(|i| model_item_node(src, tokens, i)).collect(),
        },
        // Only present after a syntax error, which `format_source` refuses; kept
        // verbatim should that ever change.
        Item::Error(s) => leaf(src.get(s.clone()).unwrap_or("").trim().to_string()),
    }
}

fn model_item_node(src: &str, tokens: &[(usize, Tok, usize)], item: &ModelItem) -> Node {
    let leaf = |text: String| Node::Leaf { span: item.span(), text };
    match item {
        ModelItem::Dims(d) => leaf(format!(
            "dims {};",
            d.dims.iter().map(|(n, v)| format!("{} = {}", n.name, int(v))).collect::<Vec<_>>().join(", ")
        )),
        ModelItem::Index(d) => leaf(index_decl(d)),
        ModelItem::Tensor(d) => leaf(tensor_decl(d)),
        ModelItem::Layer(l) => Node::Block {
            span: l.span.clone(),
            header: format!("layer {}", l.name.name),
            open: open_brace(tokens, l.name.span.end),
            children: l.items.iter().map(|i| item_node(src, tokens, i)).collect(),
        },
        ModelItem::Parallel(p) => Node::Block {
            span: p.span.clone(),
            header: "parallel".to_string(),
            open: open_brace(tokens, p.span.start),
            children: p.entries.iter().map(|e| Node::Leaf { span: e.span.clone(), text: parallel_entry(e) }).collect(),
        },
        ModelItem::Error(s) => leaf(src.get(s.clone()).unwrap_or("").trim().to_string()),
    }
}

// ---------------------------------------------------------------------------
// One-line forms.

fn int(i: &IntLit) -> String {
    if i.negative {
        format!("-{}", i.text)
    } else {
        i.text.clone()
    }
}

fn names(v: &[Ident], sep: &str) -> String {
    v.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(sep)
}

fn range_decl(d: &RangeDecl) -> String {
    let mut s = format!("range {}", d.name.name);
    if !d.parts.is_empty() {
        s.push_str(&format!(" = {}", names(&d.parts, " + ")));
    }
    if let Some(size) = &d.size {
        s.push_str(&format!(" = {}", int(size)));
    }
    for a in &d.attrs {
        match &a.args {
            RangeArgs::Int(v) => s.push_str(&format!(" {} {}", a.name.name, int(v))),
            RangeArgs::List(v) => {
                s.push_str(&format!(" {}({})", a.name.name, v.iter().map(int).collect::<Vec<_>>().join(", ")))
            }
        }
    }
    s.push(';');
    s
}

fn sym_group(g: &SymGroup) -> String {
    if g.is_pair() {
        format!("({})", g.members.iter().map(sym_group).collect::<String>())
    } else {
        format!("({})", names(&g.indices, " "))
    }
}

fn block_spec(b: &BlockSpec) -> String {
    match &b.body {
        BlockBody::Names { upper, lower: Some(lower) } => {
            format!("{}({} | {})", b.name.name, names(upper, " "), names(lower, " "))
        }
        BlockBody::Names { upper, lower: None } => format!("{}({})", b.name.name, names(upper, " ")),
        BlockBody::Coords(coords) => {
            let list: Vec<String> =
                coords.iter().map(|c| format!("[{}]", c.iter().map(int).collect::<Vec<_>>().join(","))).collect();
            format!("{}[{}]", b.name.name, list.join(", "))
        }
    }
}

fn index_decl(d: &IndexDecl) -> String {
    format!("index {} : {};", names(&d.names, ", "), d.range.name)
}

fn tensor_decl(d: &TensorDecl) -> String {
    let mut s = String::new();
    if let Some(role) = &d.role {
        s.push_str(match role.kind {
            RoleKind::Input => "input ",
            RoleKind::Output => "output ",
            RoleKind::Temporary => "temporary ",
            RoleKind::Param => "param ",
        });
    }
    s.push_str("tensor ");
    s.push_str(&d.name.name);
    if let Some(dims) = &d.dims {
        s.push_str(&format!("[{}]", names(dims, ",")));
    }
    if let Some(e) = &d.elem {
        s.push_str(match e.kind {
            ElemKind::F32 => " : f32",
            ElemKind::F64 => " : f64",
            ElemKind::C64 => " : c64",
            ElemKind::C128 => " : c128",
            ElemKind::BF16 => " : bf16",
            ElemKind::F16 => " : f16",
        });
    }
    for spec in &d.symmetry {
        s.push(' ');
        s.push_str(match spec.kind {
            SymKind::Symmetric => "symmetric",
            SymKind::Antisymmetric => "antisymmetric",
        });
        for g in &spec.groups {
            s.push_str(&sym_group(g));
        }
    }
    for b in &d.blocks {
        s.push(' ');
        s.push_str(&block_spec(b));
    }
    s.push(';');
    s
}

fn tensor_ref(t: &TensorRef) -> String {
    match &t.indices {
        Some(ix) => format!("{}[{}]", t.name.name, names(ix, ",")),
        None => t.name.name.clone(),
    }
}

/// A subscript as written, without spaces: `y+r`, `2*x+r`, `(t-1)*2`.
fn sub_expr(e: &SubExpr) -> String {
    match e {
        SubExpr::Name(n) => n.name.clone(),
        SubExpr::Int(i) => i.text.clone(),
        SubExpr::Sum { terms, .. } => {
            let mut s = String::new();
            for (k, (minus, t)) in terms.iter().enumerate() {
                if *minus {
                    s.push('-');
                } else if k > 0 {
                    s.push('+');
                }
                s.push_str(&sub_expr(t));
            }
            s
        }
        SubExpr::Product { factors, .. } => factors.iter().map(sub_expr).collect::<Vec<_>>().join("*"),
        SubExpr::Paren { arg, .. } => format!("({})", sub_expr(arg)),
    }
}

fn stmt(s: &Stmt) -> String {
    let op = match s.op {
        AssignOp::Assign => "=",
        AssignOp::AddAssign => "+=",
    };
    format!("{} {} {};", tensor_ref(&s.lhs), op, expr(&s.rhs))
}

fn expr(e: &Expr) -> String {
    let mut s = String::new();
    for (k, term) in e.terms.iter().enumerate() {
        match (k, term.sign) {
            (0, Sign::Plus) => {}
            (0, Sign::Minus) => s.push('-'),
            (_, Sign::Plus) => s.push_str(" + "),
            (_, Sign::Minus) => s.push_str(" - "),
        }
        for (j, (op, f)) in term.factors.iter().enumerate() {
            if j > 0 {
                s.push_str(match op {
                    MulOp::Mul => " * ",
                    MulOp::Div => " / ",
                });
            }
            factor(f, &mut s);
        }
    }
    s
}

fn factor(f: &Factor, s: &mut String) {
    match f {
        Factor::Number(n) => s.push_str(&n.text),
        Factor::Tensor(t) => s.push_str(&tensor_ref(t)),
        Factor::Affine(a) => {
            let subs: Vec<String> = a.subs.iter().map(sub_expr).collect();
            s.push_str(&format!("{}[{}]", a.name.name, subs.join(",")));
        }
        Factor::Call { func, arg, .. } => {
            s.push_str(&func.name);
            s.push('(');
            s.push_str(&expr(arg));
            s.push(')');
        }
        Factor::Paren { expr: e, .. } => {
            s.push('(');
            s.push_str(&expr(e));
            s.push(')');
        }
        Factor::Apply { func, args, .. } => {
            s.push_str(&func.name);
            s.push('(');
            for (k, a) in args.iter().enumerate() {
                if k > 0 {
                    s.push_str(", ");
                }
                s.push_str(&expr(&a.expr));
                if let Some((op, rhs)) = &a.cmp {
                    s.push_str(&format!(" {} ", op.symbol()));
                    s.push_str(&expr(rhs));
                }
            }
            s.push(')');
        }
    }
}

fn parallel_entry(e: &ParallelEntry) -> String {
    let value = match &e.value {
        ParallelValue::Int(i) => int(i),
        ParallelValue::Call { func, arg, .. } => format!("{}({})", func.name, int(arg)),
        ParallelValue::Name(n) => n.name.clone(),
    };
    match &e.on {
        Some(on) => format!("{} = {} on {};", e.key.name, value, on.name),
        None => format!("{} = {};", e.key.name, value),
    }
}

// ---------------------------------------------------------------------------
// Printing with comments.

struct Printer<'a> {
    src: &'a str,
    /// All comments, sorted by position; `next` is the first not yet printed.
    comments: &'a [Comment],
    next: usize,
    out: String,
}

impl<'a> Printer<'a> {
    fn line(&mut self, indent: usize, blank_before: bool, text: &str) {
        if blank_before && !self.out.is_empty() {
            self.out.push('\n');
        }
        for _ in 0..indent {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// True when the source between `a` and `b` holds a blank line.
    fn blank_between(&self, a: usize, b: usize) -> bool {
        self.src.get(a..b).is_some_and(|s| s.bytes().filter(|&c| c == b'\n').count() >= 2)
    }

    /// The next comment, if it starts before `end`.
    fn peek_before(&self, end: usize) -> Option<&'a Comment> {
        self.comments.get(self.next).filter(|c| c.span.start < end)
    }

    /// The next comment, if it starts before `end` and only spaces (no line break,
    /// no token) separate it from `pos`.
    fn take_trailing(&mut self, pos: usize, end: usize) -> Option<&'a Comment> {
        let c = self.peek_before(end)?;
        let gap = self.src.get(pos..c.span.start)?;
        if gap.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\x0c')) {
            self.next += 1;
            Some(c)
        } else {
            None
        }
    }

    /// Prints a sequence of nodes (a file's or a block's contents) and the comments
    /// among them, up to `end` (the block's `}` or the end of the file).
    fn seq(&mut self, nodes: &[Node], end: usize, indent: usize) {
        // End of the previous element (line) in the source; `None` at the start of
        // the sequence, where no blank line is printed.
        let mut prev_end: Option<usize> = None;
        for node in nodes {
            let start = node.span().start;
            while let Some(c) = self.peek_before(start) {
                self.next += 1;
                let blank = prev_end.is_some_and(|p| self.blank_between(p, c.span.start));
                self.line(indent, blank, comment_text(c));
                prev_end = Some(c.span.end);
            }
            let blank = prev_end.is_some_and(|p| self.blank_between(p, start));
            prev_end = Some(self.node(node, indent, blank));
        }
        while let Some(c) = self.peek_before(end) {
            self.next += 1;
            let blank = prev_end.is_some_and(|p| self.blank_between(p, c.span.start));
            self.line(indent, blank, comment_text(c));
            prev_end = Some(c.span.end);
        }
    }

    /// Prints one node with its comments; returns where its last line ends in the source.
    fn node(&mut self, node: &Node, indent: usize, blank: bool) -> usize {
        match node {
            Node::Leaf { span, text } => {
                let mut inner: Vec<&Comment> = Vec::new();
                while let Some(c) = self.peek_before(span.end) {
                    self.next += 1;
                    inner.push(c);
                }
                let trailing = self.take_trailing(span.end, usize::MAX);
                let end = trailing.map_or(span.end, |c| c.span.end.max(span.end));
                let eol = match trailing {
                    Some(c) => Some(c),
                    None => inner.pop(),
                };
                let mut blank = blank;
                for c in inner {
                    self.line(indent, blank, comment_text(c));
                    blank = false;
                }
                match eol {
                    Some(c) => self.line(indent, blank, &format!("{text} {}", comment_text(c))),
                    None => self.line(indent, blank, text),
                }
                end
            }
            Node::Block { span, header, open, children } => {
                // Comments inside the header go on their own lines before it.
                let mut blank = blank;
                while let Some(c) = self.peek_before(open.start) {
                    self.next += 1;
                    self.line(indent, blank, comment_text(c));
                    blank = false;
                }
                let close = span.end.saturating_sub(1).max(open.end);
                let after_open = self.take_trailing(open.end, close);
                if after_open.is_none() && children.is_empty() && self.peek_before(close).is_none() {
                    self.line(indent, blank, &format!("{header} {{}}"));
                } else {
                    match after_open {
                        Some(c) => self.line(indent, blank, &format!("{header} {{ {}", comment_text(c))),
                        None => self.line(indent, blank, &format!("{header} {{")),
                    }
                    self.seq(children, close, indent + 1);
                    self.line(indent, false, "}");
                }
                match self.take_trailing(span.end, usize::MAX) {
                    Some(c) => {
                        // Append to the `}` line just printed.
                        self.out.pop();
                        self.out.push(' ');
                        self.out.push_str(comment_text(c));
                        self.out.push('\n');
                        c.span.end.max(span.end)
                    }
                    None => span.end,
                }
            }
        }
    }
}

fn comment_text(c: &Comment) -> &str {
    c.text.trim_end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::parse;

    fn fmt(src: &str) -> String {
        match format_source(src) {
            Ok(s) => s,
            Err(d) => panic!("refused {src:?}: {d:?}"),
        }
    }

    /// The formatter's three promises, checked on one input.
    fn check_invariants(src: &str) -> String {
        let once = fmt(src);
        let twice = fmt(&once);
        assert_eq!(once, twice, "not idempotent for {src:?}");
        assert_eq!(ast_key(&parse(src).file), ast_key(&parse(&once).file), "tree changed for {src:?}:\n{once}");
        let mut a: Vec<String> = parse(src).comments.iter().map(|c| c.text.trim_end().to_string()).collect();
        let mut b: Vec<String> = parse(&once).comments.iter().map(|c| c.text.trim_end().to_string()).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "comments changed for {src:?}:\n{once}");
        once
    }

    #[test]
    fn canonical_declarations() {
        let src = "range   O=20;range V = 80 ;\nindex i,j,k : O ;\n\
                   input tensor T2[ a , b,i,j ]:f64 antisymmetric(a,b)(i j);\n\
                   tensor X[a,i];output tensor E:f32;\ntemporary tensor S[] symmetric(p q r);\n";
        assert_eq!(
            check_invariants(src),
            "range O = 20;\nrange V = 80;\nindex i, j, k : O;\n\
             input tensor T2[a,b,i,j] : f64 antisymmetric(a b)(i j);\n\
             tensor X[a,i];\noutput tensor E : f32;\ntemporary tensor S[] symmetric(p q r);\n"
        );
    }

    #[test]
    fn canonical_statements() {
        let src = "R[a,b,i,j]+=0.5*T2[a,b,k,l]*W[k,l,i,j]-F[a,c]*T2[c,b,i,j];\n\
                   E = + 0.25*V[i,j,a,b]*T2[a,b,i,j] ;\nY[t,n]=-relu( H[t,m]*W1[m,f] )*W2[f,n]/2;\n\
                   R[i,j]=A[i,k]*(B[k,j]+C[k,j]-(-D[k,j])) ;\nZ = 1e-3 * .5 * 2. * 007;\n";
        assert_eq!(
            check_invariants(src),
            "R[a,b,i,j] += 0.5 * T2[a,b,k,l] * W[k,l,i,j] - F[a,c] * T2[c,b,i,j];\n\
             E = 0.25 * V[i,j,a,b] * T2[a,b,i,j];\n\
             Y[t,n] = -relu(H[t,m] * W1[m,f]) * W2[f,n] / 2;\n\
             R[i,j] = A[i,k] * (B[k,j] + C[k,j] - (-D[k,j]));\n\
             Z = 1e-3 * .5 * 2. * 007;\n"
        );
    }

    #[test]
    fn canonical_parallelism_and_blocks() {
        let src = "grid G[4,4 ,2];distribute T2[a,b,i,j] over G as [a:0,b:1,];\n\
                   grid H[-2];program energy{E=V[i];}program empty{}\n\
                   model mlp {\n dims  tokens = 8, hidden = 16;\n  index t : tokens;  index m, n : hidden;\n\
                   param tensor W1[m,f] : f32;\n  layer ffn { Y[t,n] = relu(X[t,m] * W1[m,f]) * W2[f,n]; }\n\
                   parallel { data = 2; tensor = 2 on ffn; sequence=ulysses(4); x = ring; zero = - 1; }\n}\n";
        assert_eq!(
            check_invariants(src),
            "grid G[4, 4, 2];\ndistribute T2[a,b,i,j] over G as [a:0, b:1];\ngrid H[-2];\n\
             program energy {\n  E = V[i];\n}\nprogram empty {}\n\
             model mlp {\n  dims tokens = 8, hidden = 16;\n  index t : tokens;\n  index m, n : hidden;\n\
             \x20 param tensor W1[m,f] : f32;\n  layer ffn {\n    Y[t,n] = relu(X[t,m] * W1[m,f]) * W2[f,n];\n  }\n\
             \x20 parallel {\n    data = 2;\n    tensor = 2 on ffn;\n    sequence = ulysses(4);\n    x = ring;\n    zero = -1;\n  }\n}\n"
        );
    }

    #[test]
    fn comments_stay_in_place() {
        let src = "// header\n\n\n// about O\nrange O = 20;   // twenty   \nrange V = 80;\n\n\n\
                   program p { // opening\n  // before A\n  A = B;\n\n  // end of p\n} // after p\n\
                   // end of file\n";
        assert_eq!(
            check_invariants(src),
            "// header\n\n// about O\nrange O = 20; // twenty\nrange V = 80;\n\n\
             program p { // opening\n  // before A\n  A = B;\n\n  // end of p\n} // after p\n// end of file\n"
        );
    }

    #[test]
    fn comments_inside_statements_move_to_the_end() {
        assert_eq!(check_invariants("A = B // inner\n + C;\n"), "A = B + C; // inner\n");
        assert_eq!(
            check_invariants("A = B // one\n + C // two\n;  // three\nD = E;"),
            "// one\n// two\nA = B + C; // three\nD = E;\n"
        );
        assert_eq!(
            check_invariants("model // m\n m { layer // l\n l { } parallel // p\n { } }"),
            "// m\nmodel m {\n  // l\n  layer l {}\n  // p\n  parallel {}\n}\n"
        );
        assert_eq!(check_invariants("program p { // c\n}"), "program p { // c\n}\n");
        assert_eq!(check_invariants("program p {\n// c\n}"), "program p {\n  // c\n}\n");
    }

    #[test]
    fn trailing_comment_after_closing_brace_of_inner_block() {
        let src = "model m {\n  layer l { A = B; } // after l\n  parallel { data = 2; // two\n  }\n}\n";
        assert_eq!(
            check_invariants(src),
            "model m {\n  layer l {\n    A = B;\n  } // after l\n  parallel {\n    data = 2; // two\n  }\n}\n"
        );
    }

    #[test]
    fn empty_and_comment_only_files() {
        assert_eq!(check_invariants(""), "");
        assert_eq!(check_invariants("  \n\n "), "");
        assert_eq!(check_invariants("\n\n// only\n\n"), "// only\n");
        assert_eq!(check_invariants("// a\r\n\r\n// b\r\n"), "// a\n\n// b\n");
    }

    #[test]
    fn syntax_errors_are_refused_with_the_diagnostics() {
        let err = format_source("range N = ;\nindex i : N;").unwrap_err();
        assert!(!err.is_empty());
        assert!(err.iter().all(|d| d.code.starts_with("E000")));
        assert!(format_source("A[i] = B[i] $;").is_err());
    }

    #[test]
    fn spans_are_stripped_from_keys() {
        assert_eq!(
            strip_spans("Ident { name: \"a1\", span: 10..12 } Error(3..4) \"1.\""),
            "Ident { name: \"a1\", span: _ } Error(_) \"1.\""
        );
        assert_eq!(ast_key(&parse("A = B;").file), ast_key(&parse("  A=B ;").file));
        assert_ne!(ast_key(&parse("A = B;").file), ast_key(&parse("A = C;").file));
    }
}
