//! The front end never panics: random bytes and random token soups through
//! `tcc::compile` and `tcc::fmt::format_source`, the inputs fuzzing found, and the
//! `tcc check` binary on hostile files. Every rejected input gets at least one error
//! whose primary span lies within the input.

use assert_cmd::Command;
use proptest::prelude::*;
use tcc::diag::Diagnostic;

fn spans_in_bounds(src: &str, diags: &[Diagnostic]) -> Result<(), String> {
    for d in diags {
        let s = &d.primary.span;
        if !(s.start <= s.end && s.end <= src.len()) {
            return Err(format!("span {s:?} outside the input ({} bytes): {d:?}", src.len()));
        }
    }
    Ok(())
}

/// Runs the front end and the formatter on `src`; `Err` describes a broken promise
/// (a panic fails the calling test by itself).
fn front_end(src: &str) -> Result<(), String> {
    let (hir, diags) = tcc::compile(src, "t");
    if hir.is_none() && !diags.iter().any(Diagnostic::is_error) {
        return Err(format!("compile rejected {src:?} without an error"));
    }
    spans_in_bounds(src, &diags)?;
    match tcc::fmt::format_source(src) {
        Ok(out) => match tcc::fmt::format_source(&out) {
            Ok(again) if again == out => Ok(()),
            Ok(again) => Err(format!("fmt not idempotent on {src:?}: {out:?} then {again:?}")),
            Err(d) => Err(format!("fmt output of {src:?} does not parse: {out:?}: {d:?}")),
        },
        Err(diags) => {
            if !diags.iter().any(Diagnostic::is_error) {
                return Err(format!("fmt refused {src:?} without an error"));
            }
            spans_in_bounds(src, &diags)
        }
    }
}

/// Inputs that once broke something (from fuzzing and review), kept as regressions.
const REGRESSIONS: &[&str] = &[
    "",
    "\u{0}",
    ";",
    "}",
    "{",
    "//",
    "// no newline at the end",
    "range N = 99999999999999999999999;",
    "range N = -0;",
    "grid G[-99999999999999999999999];",
    "A = 1.e99999999999999;",
    "A[] = B[];",
    "model m { parallel { tensor = 2 on x; } }",
    "é = 1;",
    "A = B é;",
    "\r\r\n//\r\n",
    "A = (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((B)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))));",
    "model",
    "program p { range N = 2; }",
    "layer l { A = B; }",
    "A = B; } A = B;",
    "tensor A[i] : f64 symmetric;",
    "tensor A symmetric() ;",
];

#[test]
fn regressions_do_not_panic() {
    for src in REGRESSIONS {
        front_end(src).unwrap();
    }
}

const SOUP: &[&str] = &[
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
    "relu",
    "exp",
    "ulysses",
    "ring",
    "A",
    "B",
    "i",
    "j",
    "x_1",
    "T2",
    "0",
    "1",
    "-1",
    "007",
    "99999999999999999999999",
    "0.5",
    "1e-3",
    ".5",
    "2.",
    "1e",
    ";",
    ",",
    ":",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    "+=",
    "=",
    "+",
    "-",
    "*",
    "/",
    "// c\n",
    "//",
    " ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    "@",
    "é",
    "\u{0}",
    "#",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let src = String::from_utf8_lossy(&bytes);
        if let Err(e) = front_end(&src) {
            prop_assert!(false, "{}", e);
        }
    }

    #[test]
    fn token_soups_never_panic(words in prop::collection::vec((prop::sample::select(SOUP), any::<bool>()), 0..80)) {
        let mut src = String::new();
        for (w, space) in words {
            src.push_str(w);
            if space {
                src.push(' ');
            }
        }
        if let Err(e) = front_end(&src) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// `tcc check` on a hostile file: exit 0 or 1 (never 2, the internal-error code,
/// nor a signal) and no panic message.
fn check_file(name: &str, bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    for args in [&["check"][..], &["fmt", "--check"][..]] {
        let out = Command::cargo_bin("tcc").unwrap().args(args).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0) | Some(1)),
            "tcc {args:?} {name}: status {:?}\n{stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "tcc {args:?} {name}: {stderr}");
    }
}

#[test]
fn binary_survives_hostile_files() {
    check_file("empty.tc", b"");
    check_file("deep.tc", format!("A = {}B{};\n", "(".repeat(100_000), ")".repeat(100_000)).as_bytes());
    check_file("deep_blocks.tc", "model m { layer l { ".repeat(5_000).as_bytes());
    check_file("huge_int.tc", b"range N = 99999999999999999999999;\nindex i : N;\ngrid G[99999999999999999999999];\n");
    check_file("garbage.tc", &(0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect::<Vec<u8>>());
    check_file("nul.tc", b"range N = 2;\0\0\0index i : N;\n");
    let statement = "R[a,b,i,j] += 0.5 * T2[a,b,k,l] * W[k,l,i,j] - F[a,c] * T2[c,b,i,j]; // a comment\n";
    let big = statement.repeat(1_000_000 / statement.len() + 1);
    check_file("big.tc", format!("range O = 4;\nindex a, b, c, i, j, k, l : O;\n{big}").as_bytes());
    check_file("long_line.tc", format!("A = {};", vec!["B"; 200_000].join(" + ")).as_bytes());
}
