//! `tcc fmt`: the formatter's promises on the book's examples and on random valid
//! programs written with random white space and comments — idempotent, same syntax
//! tree (up to spans), every comment kept — and the command line's behaviour.

use assert_cmd::Command;
use proptest::prelude::*;
use tcc::fmt::{ast_key, format_source};
use tcc::syntax::parse;

fn comment_texts(src: &str) -> Vec<String> {
    let mut v: Vec<String> = parse(src).comments.iter().map(|c| c.text.trim_end().to_string()).collect();
    v.sort();
    v
}

/// Formats `src` and checks the three promises; returns the formatted text.
fn check(src: &str) -> Result<String, String> {
    let once = format_source(src).map_err(|d| format!("refused: {d:?}"))?;
    let twice = format_source(&once).map_err(|d| format!("output refused: {d:?}\n{once}"))?;
    if once != twice {
        return Err(format!("not idempotent:\n--- once\n{once}\n--- twice\n{twice}"));
    }
    if ast_key(&parse(src).file) != ast_key(&parse(&once).file) {
        return Err(format!("tree changed:\n{once}"));
    }
    if comment_texts(src) != comment_texts(&once) {
        return Err(format!("comments changed:\n{once}"));
    }
    if !(once.is_empty() || once.ends_with('\n') && !once.ends_with("\n\n")) {
        return Err(format!("must end with exactly one newline: {once:?}"));
    }
    Ok(once)
}

const BOOK: &str = r#"range O = 20;            // an index space of 20 values (occupied orbitals)
range V = 80;
index i, j, k, l : O;    // index names ranging over O
index a, b, c, d : V;

input     tensor T2[a,b,i,j] : f64 antisymmetric(a b)(i j);
input     tensor A[p,q,r,s]  : f64 symmetric(p q)(r s);
output    tensor R[a,b,i,j]  : f64;
temporary tensor X[a,i]      : f64;    // `temporary` may be omitted
output    tensor E           : f64;    // a scalar: no brackets
R[a,b,i,j]  = T2[a,b,k,l] * V[k,l,i,j];
R[a,b,i,j] += 0.5 * T2[a,b,k,l] * W[k,l,i,j] - F[a,c] * T2[c,b,i,j];
E = 0.25 * V[i,j,a,b] * T2[a,b,i,j];
program energy { E = 0.25 * V[i,j,a,b] * T2[a,b,i,j]; }
grid G[4, 4, 2];                               // 32 processes as a 4×4×2 grid
distribute T2[a,b,i,j] over G as [a:0, b:1];   // a over grid dim 0, b over dim 1
model mlp {
  dims  tokens = 8, hidden = 16, ffn = 32;
  index t : tokens;  index m, n : hidden;  index f : ffn;
  input tensor X[t,m] : f32;
  param tensor W1[m,f] : f32;
  output tensor Y[t,n] : f32;
  layer ffn { Y[t,n] = relu(X[t,m] * W1[m,f]) * W2[f,n]; }
  parallel { data = 2; tensor = 2 on ffn; zero = 1; }
}
"#;

const BOOK_FORMATTED: &str = r#"range O = 20; // an index space of 20 values (occupied orbitals)
range V = 80;
index i, j, k, l : O; // index names ranging over O
index a, b, c, d : V;

input tensor T2[a,b,i,j] : f64 antisymmetric(a b)(i j);
input tensor A[p,q,r,s] : f64 symmetric(p q)(r s);
output tensor R[a,b,i,j] : f64;
temporary tensor X[a,i] : f64; // `temporary` may be omitted
output tensor E : f64; // a scalar: no brackets
R[a,b,i,j] = T2[a,b,k,l] * V[k,l,i,j];
R[a,b,i,j] += 0.5 * T2[a,b,k,l] * W[k,l,i,j] - F[a,c] * T2[c,b,i,j];
E = 0.25 * V[i,j,a,b] * T2[a,b,i,j];
program energy {
  E = 0.25 * V[i,j,a,b] * T2[a,b,i,j];
}
grid G[4, 4, 2]; // 32 processes as a 4×4×2 grid
distribute T2[a,b,i,j] over G as [a:0, b:1]; // a over grid dim 0, b over dim 1
model mlp {
  dims tokens = 8, hidden = 16, ffn = 32;
  index t : tokens;
  index m, n : hidden;
  index f : ffn;
  input tensor X[t,m] : f32;
  param tensor W1[m,f] : f32;
  output tensor Y[t,n] : f32;
  layer ffn {
    Y[t,n] = relu(X[t,m] * W1[m,f]) * W2[f,n];
  }
  parallel {
    data = 2;
    tensor = 2 on ffn;
    zero = 1;
  }
}
"#;

#[test]
fn formats_the_book_examples() {
    assert_eq!(check(BOOK).unwrap(), BOOK_FORMATTED);
    assert_eq!(check(BOOK_FORMATTED).unwrap(), BOOK_FORMATTED);
}

#[test]
fn refuses_syntax_errors_with_their_diagnostics() {
    for bad in ["range N = ;", "A[i] = B[i] +;", "tensor A[i : f64;", "model m { layer l { A = B; }", "A = B; @"] {
        let diags = format_source(bad).unwrap_err();
        assert!(diags.iter().any(|d| d.is_error()), "{bad:?}: {diags:?}");
        assert!(diags.iter().all(|d| d.primary.span.end <= bad.len()), "{bad:?}: {diags:?}");
    }
}

#[test]
fn keeps_what_was_written() {
    // Optional parts stay as written; numbers keep their text.
    let src = "tensor S[];\ntensor E;\ntemporary tensor T[i] : f32;\nA = 007 * 1.e5 * .5;\nparallel_x[i] = y;\n";
    assert_eq!(check(src).unwrap(), src);
}

#[test]
fn affine_subscripts_round_trip() {
    let src = "O[n,k,y,x] = I[n,c,y+r,x+s] * F[k,c,r,s] + X[2*(t+1)+r,x-1,-0+3];\n";
    assert_eq!(check(src).unwrap(), src);
    assert_eq!(check("O[x] = I[ 2 * x + r - 1 ];").unwrap(), "O[x] = I[2*x+r-1];\n");
}

#[test]
fn runtime_ranges_round_trip() {
    let src = "range O;\nrange V = 4; // fixed\nrange W; // given at run time\n";
    assert_eq!(check(src).unwrap(), src);
    assert_eq!(check("range   O ;").unwrap(), "range O;\n");
}

#[test]
fn tiled_storage_round_trips() {
    let src = "range  O = 20 spin( 10,10 ) ;\nrange V=200 tile 32 spin(100 ,100);\nrange N tile 16;\n\
        range P = 8 irreps(2,2,2,2);\nindex p, q, r, s : P;\n\
        input tensor G[p,q,r,s] : f64 symmetric(p q)(r s)( (p q) , (r s) ) irrep(p,q r s);\n\
        input tensor T[a,b,i,j] antisymmetric(a b)(i j) spin(a b|i j) tiles[ [0,1],[1,0], ];\n";
    let once = check(src).unwrap();
    assert_eq!(
        once,
        "range O = 20 spin(10, 10);\nrange V = 200 tile 32 spin(100, 100);\nrange N tile 16;\n\
         range P = 8 irreps(2, 2, 2, 2);\nindex p, q, r, s : P;\n\
         input tensor G[p,q,r,s] : f64 symmetric(p q)(r s)((p q)(r s)) irrep(p q r s);\n\
         input tensor T[a,b,i,j] antisymmetric(a b)(i j) spin(a b | i j) tiles[[0,1], [1,0]];\n"
    );
}

#[test]
fn cli_check_stdout_and_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("book.tc");
    std::fs::write(&path, BOOK).unwrap();

    Command::cargo_bin("tcc").unwrap().args(["fmt", "--check"]).arg(&path).assert().code(1);
    let out = Command::cargo_bin("tcc").unwrap().args(["fmt", "--stdout"]).arg(&path).assert().code(0);
    assert_eq!(String::from_utf8_lossy(&out.get_output().stdout), BOOK_FORMATTED);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), BOOK, "--stdout must not rewrite");

    Command::cargo_bin("tcc").unwrap().arg("fmt").arg(&path).assert().code(0);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), BOOK_FORMATTED);
    Command::cargo_bin("tcc").unwrap().args(["fmt", "--check"]).arg(&path).assert().code(0);

    std::fs::write(&path, "range N = ;\n").unwrap();
    Command::cargo_bin("tcc").unwrap().arg("fmt").arg(&path).assert().code(1);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "range N = ;\n", "a refused file is left alone");
}

// ---------------------------------------------------------------------------
// Random valid programs, as token lists, rendered with random white space and comments.

type Toks = Vec<String>;

const NAMES: &[&str] =
    &["i", "j", "k", "a", "b", "p", "A", "B", "T2", "W1", "x_1", "_t", "Rr", "ranges", "f3", "tensors"];
const FUNCS: &[&str] = &["exp", "relu", "sqrt", "f", "g_1"];
const INTS: &[&str] = &["0", "1", "2", "4", "007", "64", "99999999999999999999999"];
const REALS: &[&str] = &["0.5", "1e-3", ".25", "2.", "3.5E+4", "1.e5", "0.0"];

fn t(s: &str) -> String {
    s.to_string()
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES).prop_map(t)
}

fn int_lit() -> impl Strategy<Value = Toks> {
    (prop::bool::weighted(0.2), prop::sample::select(INTS))
        .prop_map(|(neg, i)| if neg { vec![t("-"), t(i)] } else { vec![t(i)] })
}

/// `x, y, z` with an optional trailing comma (allowed where the grammar allows it).
fn comma_list(items: Vec<Toks>, trailing: bool) -> Toks {
    let mut v = Toks::new();
    let n = items.len();
    for (k, item) in items.into_iter().enumerate() {
        v.extend(item);
        if k + 1 < n || (trailing && n > 0) {
            v.push(t(","));
        }
    }
    v
}

fn bracket_names(min: usize) -> impl Strategy<Value = Toks> {
    (prop::collection::vec(name(), min..4), any::<bool>()).prop_map(|(ns, trailing)| {
        let mut v = vec![t("[")];
        v.extend(comma_list(ns.into_iter().map(|n| vec![n]).collect(), trailing));
        v.push(t("]"));
        v
    })
}

fn tensor_ref() -> impl Strategy<Value = Toks> {
    (name(), prop::option::of(bracket_names(0))).prop_map(|(n, ix)| {
        let mut v = vec![n];
        v.extend(ix.unwrap_or_default());
        v
    })
}

fn number() -> impl Strategy<Value = Toks> {
    prop_oneof![prop::sample::select(INTS), prop::sample::select(REALS)].prop_map(|s| vec![t(s)])
}

fn expr_of(factor: BoxedStrategy<Toks>) -> BoxedStrategy<Toks> {
    let term = prop::collection::vec((any::<bool>(), factor), 1..4).prop_map(|fs| {
        let mut v = Toks::new();
        for (k, (div, f)) in fs.into_iter().enumerate() {
            if k > 0 {
                v.push(t(if div { "/" } else { "*" }));
            }
            v.extend(f);
        }
        v
    });
    (0..3u8, term.clone(), prop::collection::vec((any::<bool>(), term), 0..3))
        .prop_map(|(first_sign, first, rest)| {
            let mut v = Toks::new();
            match first_sign {
                1 => v.push(t("-")),
                2 => v.push(t("+")),
                _ => {}
            }
            v.extend(first);
            for (minus, term) in rest {
                v.push(t(if minus { "-" } else { "+" }));
                v.extend(term);
            }
            v
        })
        .boxed()
}

fn factor() -> BoxedStrategy<Toks> {
    let leaf = prop_oneof![number(), tensor_ref()];
    leaf.prop_recursive(3, 24, 4, |inner| {
        let e = expr_of(inner.clone());
        prop_oneof![
            2 => inner,
            1 => (prop::sample::select(FUNCS), e.clone()).prop_map(|(f, e)| {
                let mut v = vec![t(f), t("(")];
                v.extend(e);
                v.push(t(")"));
                v
            }),
            1 => e.prop_map(|e| {
                let mut v = vec![t("(")];
                v.extend(e);
                v.push(t(")"));
                v
            }),
        ]
    })
    .boxed()
}

fn stmt() -> impl Strategy<Value = Toks> {
    (tensor_ref(), any::<bool>(), expr_of(factor())).prop_map(|(lhs, acc, rhs)| {
        let mut v = lhs;
        v.push(t(if acc { "+=" } else { "=" }));
        v.extend(rhs);
        v.push(t(";"));
        v
    })
}

fn index_decl() -> impl Strategy<Value = Toks> {
    (prop::collection::vec(name(), 1..4), any::<bool>(), name()).prop_map(|(ns, trailing, r)| {
        let mut v = vec![t("index")];
        v.extend(comma_list(ns.into_iter().map(|n| vec![n]).collect(), trailing));
        v.extend([t(":"), r, t(";")]);
        v
    })
}

fn sym_spec() -> impl Strategy<Value = Toks> {
    let group = prop::collection::vec((name(), any::<bool>()), 1..4).prop_map(|ns| {
        let mut v = vec![t("(")];
        for (k, (n, comma)) in ns.into_iter().enumerate() {
            if k > 0 && comma {
                v.push(t(","));
            }
            v.push(n);
        }
        v.push(t(")"));
        v
    });
    (any::<bool>(), prop::collection::vec(group, 1..3)).prop_map(|(anti, gs)| {
        let mut v = vec![t(if anti { "antisymmetric" } else { "symmetric" })];
        v.extend(gs.into_iter().flatten());
        v
    })
}

fn tensor_decl() -> impl Strategy<Value = Toks> {
    (
        prop::sample::select(vec!["", "input", "output", "temporary", "param"]),
        name(),
        prop::option::of(bracket_names(0)),
        prop::option::of(prop::sample::select(vec!["f32", "f64"])),
        prop::collection::vec(sym_spec(), 0..3),
    )
        .prop_map(|(role, n, dims, elem, syms)| {
            let mut v = Toks::new();
            if !role.is_empty() {
                v.push(t(role));
            }
            v.extend([t("tensor"), n]);
            v.extend(dims.unwrap_or_default());
            if let Some(e) = elem {
                v.extend([t(":"), t(e)]);
            }
            v.extend(syms.into_iter().flatten());
            v.push(t(";"));
            v
        })
}

fn block(header: Toks, items: Vec<Toks>) -> Toks {
    let mut v = header;
    v.push(t("{"));
    v.extend(items.into_iter().flatten());
    v.push(t("}"));
    v
}

fn model_item() -> impl Strategy<Value = Toks> {
    let dims = (prop::collection::vec((name(), int_lit()), 1..4), any::<bool>()).prop_map(|(ds, trailing)| {
        let mut v = vec![t("dims")];
        v.extend(comma_list(
            ds.into_iter()
                .map(|(n, i)| {
                    let mut d = vec![n, t("=")];
                    d.extend(i);
                    d
                })
                .collect(),
            trailing,
        ));
        v.push(t(";"));
        v
    });
    let layer = (name(), prop::collection::vec(stmt(), 0..3)).prop_map(|(n, ss)| block(vec![t("layer"), n], ss));
    let value = prop_oneof![
        int_lit(),
        (name(), int_lit()).prop_map(|(f, i)| {
            let mut v = vec![f, t("(")];
            v.extend(i);
            v.push(t(")"));
            v
        }),
        name().prop_map(|n| vec![n]),
    ];
    let entry = (prop_oneof![name(), Just(t("tensor"))], value, prop::option::of(name())).prop_map(|(k, val, on)| {
        let mut v = vec![k, t("=")];
        v.extend(val);
        if let Some(on) = on {
            v.extend([t("on"), on]);
        }
        v.push(t(";"));
        v
    });
    let parallel = prop::collection::vec(entry, 0..4).prop_map(|es| block(vec![t("parallel")], es));
    prop_oneof![dims, index_decl(), tensor_decl(), layer, parallel]
}

fn item() -> impl Strategy<Value = Toks> {
    // `range N = 4;` or `range N;` (a size given at run time).
    let range = (name(), prop::option::of(int_lit())).prop_map(|(n, i)| {
        let mut v = vec![t("range"), n];
        if let Some(i) = i {
            v.push(t("="));
            v.extend(i);
        }
        v.push(t(";"));
        v
    });
    let grid = (name(), prop::collection::vec(int_lit(), 0..4), any::<bool>()).prop_map(|(n, ds, trailing)| {
        let mut v = vec![t("grid"), n, t("[")];
        v.extend(comma_list(ds, trailing));
        v.extend([t("]"), t(";")]);
        v
    });
    let distribute = (tensor_ref(), name(), prop::collection::vec((name(), int_lit()), 0..3), any::<bool>()).prop_map(
        |(r, g, map, trailing)| {
            let mut v = vec![t("distribute")];
            v.extend(r);
            v.extend([t("over"), g, t("as"), t("[")]);
            v.extend(comma_list(
                map.into_iter()
                    .map(|(n, i)| {
                        let mut m = vec![n, t(":")];
                        m.extend(i);
                        m
                    })
                    .collect(),
                trailing,
            ));
            v.extend([t("]"), t(";")]);
            v
        },
    );
    let program = (name(), prop::collection::vec(stmt(), 0..3)).prop_map(|(n, ss)| block(vec![t("program"), n], ss));
    let model = (name(), prop::collection::vec(model_item(), 0..5)).prop_map(|(n, is)| block(vec![t("model"), n], is));
    prop_oneof![
        2 => range,
        2 => index_decl(),
        3 => tensor_decl(),
        4 => stmt(),
        1 => grid,
        1 => distribute,
        1 => program,
        1 => model,
    ]
}

fn word_like(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Joins tokens with the chosen separators (random white space and comments),
/// never gluing two tokens into one.
fn render(tokens: &[String], seps: &[(u8, String)]) -> String {
    let mut out = String::new();
    for (k, (choice, text)) in seps.iter().enumerate() {
        let sep = match choice {
            0 => String::new(),
            1 => " ".to_string(),
            2 => "\n".to_string(),
            3 => "\n\n\n".to_string(),
            4 => " \t".to_string(),
            5 => format!(" //{text}\n"),
            6 => format!("\n  //{text}\n\n"),
            _ => "\r\n".to_string(),
        };
        let next = tokens.get(k);
        if sep.is_empty() && word_like(out.chars().last()) && word_like(next.and_then(|n| n.chars().next())) {
            out.push(' ');
        }
        out.push_str(&sep);
        if let Some(n) = next {
            out.push_str(n);
        }
    }
    out
}

fn program_text() -> impl Strategy<Value = String> {
    prop::collection::vec(item(), 0..8)
        .prop_map(|items| items.into_iter().flatten().collect::<Vec<_>>())
        .prop_flat_map(|tokens| {
            let n = tokens.len() + 1;
            let sep = (prop_oneof![6 => 0..5u8, 1 => 5..8u8], "[a-z !/é→\t]{0,8}");
            (Just(tokens), prop::collection::vec(sep, n))
        })
        .prop_map(|(tokens, seps)| render(&tokens, &seps))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_format_faithfully(src in program_text()) {
        let parsed = parse(&src);
        prop_assert!(parsed.diagnostics.is_empty(), "generator wrote an invalid program: {:?}\n{}", parsed.diagnostics, src);
        if let Err(e) = check(&src) {
            prop_assert!(false, "{}\n--- source\n{}", e, src);
        }
    }
}
