//! Any UTF-8 text through the front end and the formatter: nothing may panic, a
//! rejected input has an error diagnostic whose span lies in the input, and a
//! formatted file keeps its tree and comments and is a fixed point of `fmt`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let (hir, diags) = tcc::compile(src, "fuzz");
    if hir.is_none() {
        assert!(diags.iter().any(|d| d.is_error()), "rejected without an error");
    }
    for d in &diags {
        let s = &d.primary.span;
        assert!(s.start <= s.end && s.end <= src.len(), "span {s:?} outside the input ({} bytes)", src.len());
    }
    match tcc::fmt::format_source(src) {
        Ok(out) => {
            let again = tcc::fmt::format_source(&out).expect("formatted output must parse");
            assert_eq!(again, out, "fmt is not idempotent");
            let before = tcc::syntax::parse(src);
            let after = tcc::syntax::parse(&out);
            assert_eq!(tcc::fmt::ast_key(&before.file), tcc::fmt::ast_key(&after.file), "fmt changed the tree");
            let texts = |p: &tcc::syntax::Parsed| {
                let mut v: Vec<String> = p.comments.iter().map(|c| c.text.trim_end().to_string()).collect();
                v.sort();
                v
            };
            assert_eq!(texts(&before), texts(&after), "fmt lost or changed a comment");
        }
        Err(diags) => assert!(diags.iter().any(|d| d.is_error()), "fmt refused without an error"),
    }
});
