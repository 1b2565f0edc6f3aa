//! The analysis functions never panic, whatever the text and the position: random
//! edits of the examples (tokens, brackets, non-ASCII, line breaks inserted;
//! stretches deleted), then every feature at random positions, with the
//! invariants an editor relies on (ranges inside the text and ordered; semantic
//! tokens decoding to places inside it).

use super::analysis::Analysis;
use lsp_types::Position;
use proptest::prelude::*;

const EXAMPLES: [&str; 4] = [
    include_str!("../../examples/four_index.tc"),
    include_str!("../../examples/ccsd_terms.tc"),
    include_str!("../../examples/model_mlp.tc"),
    include_str!("../../examples/attention.tc"),
];

const PIECES: [&str; 24] = [
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ";",
    ",",
    ":",
    "=",
    "+=",
    "*",
    "relu(",
    "é",
    "𝔸",
    "🙂",
    "\n",
    "\r\n",
    "model m {",
    "layer l {",
    "index ",
    "tensor ",
    "A[i,j]",
    "// c ",
];

#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, &'static str),
    Delete(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0..PIECES.len()).prop_map(|(at, p)| Edit::Insert(at, PIECES[p])),
        (any::<usize>(), 0usize..12).prop_map(|(at, n)| Edit::Delete(at, n)),
    ]
}

fn apply(text: &mut String, e: &Edit) {
    let boundary = |t: &str, at: usize| {
        let mut a = at % (t.len() + 1);
        while !t.is_char_boundary(a) {
            a -= 1;
        }
        a
    };
    match e {
        Edit::Insert(at, s) => {
            let a = boundary(text, *at);
            text.insert_str(a, s);
        }
        Edit::Delete(at, n) => {
            let a = boundary(text, *at);
            let b = boundary(text, (a + n).min(text.len()));
            text.replace_range(a..b.max(a), "");
        }
    }
}

fn check_range(a: &Analysis, r: &lsp_types::Range) {
    assert!((r.start.line, r.start.character) <= (r.end.line, r.end.character), "{r:?}");
    let end = a.lines.end(&a.text);
    assert!((r.end.line, r.end.character) <= (end.line, end.character), "{r:?} past {end:?}");
}

fn exercise(a: &Analysis, positions: &[(u32, u32)]) {
    let uri: lsp_types::Uri = "file:///t/x.tc".parse().unwrap();
    for d in a.lsp_diagnostics(&uri) {
        check_range(a, &d.range);
    }
    for &(line, character) in positions {
        let p = Position { line, character };
        if let Some(h) = a.hover(p) {
            if let Some(r) = &h.range {
                check_range(a, r);
            }
        }
        if let Some(span) = a.definition(p) {
            assert!(span.end <= a.text.len() && a.text.is_char_boundary(span.start));
        }
        for span in a.references(p, true) {
            assert!(span.end <= a.text.len());
        }
        let _ = a.completion(p);
    }
    for s in a.document_symbols() {
        check_range(a, &s.range);
        check_range(a, &s.selection_range);
    }
    let _ = a.formatting();
    let (mut line, mut col) = (0u32, 0u32);
    let lines: Vec<&str> = a.text.split('\n').collect();
    for t in a.semantic_tokens() {
        line += t.delta_line;
        col = if t.delta_line == 0 { col + t.delta_start } else { t.delta_start };
        let len = lines.get(line as usize).map_or(0, |l| l.encode_utf16().count() as u32);
        assert!(col + t.length <= len, "token at {line}:{col}+{} past the line ({len})", t.length);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_edits_never_crash_the_analysis(
        which in 0..EXAMPLES.len(),
        edits in proptest::collection::vec(edit(), 1..8),
        positions in proptest::collection::vec((0u32..40, 0u32..90), 1..6),
    ) {
        let mut text = EXAMPLES[which].to_string();
        for e in &edits {
            apply(&mut text, e);
        }
        let a = Analysis::new(text, "x");
        exercise(&a, &positions);
    }
}

#[test]
fn every_example_position_is_safe() {
    for src in EXAMPLES {
        let a = Analysis::new(src.to_string(), "x");
        let mut positions = Vec::new();
        for (l, line) in src.lines().enumerate() {
            for c in 0..=line.encode_utf16().count() as u32 + 1 {
                positions.push((l as u32, c));
            }
        }
        exercise(&a, &positions);
    }
}

#[test]
fn hover_on_a_runtime_range_says_its_size_is_given_at_run_time() {
    let text = "range O;\nrange V = 4;\nindex i : O;\ninput tensor A[i];\noutput tensor s;\ns = A[i];\n";
    let a = Analysis::new(text.to_string(), "t");
    let hover = |line: u32, character: u32| match a.hover(Position { line, character }).map(|h| h.contents) {
        Some(lsp_types::HoverContents::Markup(m)) => m.value,
        other => panic!("{other:?}"),
    };
    let o = hover(0, 6);
    assert!(o.contains("range O;") && o.contains("size given at run time"), "{o}");
    assert!(hover(1, 6).contains("of size 4"));
    let i = hover(2, 6);
    assert!(i.contains("size given at run time"), "{i}");
}

#[test]
fn hover_on_an_affine_subscript_names_its_index_and_tensor() {
    let text = "range X = 4; range R = 2; range H = 5;\nindex x : X; index r : R; index h : H;\ninput tensor I[h];\noutput tensor O[x];\nO[x] = I[2*x+r-3];\n";
    let a = Analysis::new(text.to_string(), "t");
    let hover = |line: u32, character: u32| match a.hover(Position { line, character }).map(|h| h.contents) {
        Some(lsp_types::HoverContents::Markup(m)) => m.value,
        other => panic!("{other:?}"),
    };
    assert!(hover(4, 7).contains("tensor I"), "{}", hover(4, 7));
    assert!(hover(4, 11).contains("index x"), "{}", hover(4, 11));
    assert!(hover(4, 13).contains("index r"), "{}", hover(4, 13));
    // The out-of-bounds subscript (2*3+1-3 = 4 < 5 holds; -3 at x = r = 0 does not)
    // is a diagnostic, and every position of the line answers without panicking.
    assert!(a.diagnostics.iter().any(|d| d.code == "E0314"));
    for c in 0..20 {
        let _ = a.hover(Position { line: 4, character: c });
    }
}
