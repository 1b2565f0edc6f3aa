//! Sliced contractions (`--max-intermediate`, and `--mem-limit` when no fusion
//! fits) run and compute what the interpreter computes: random networks with
//! hyperedges, sliced indices summed and kept, every `--fuse` mode, slices in
//! place and as parallel tasks; the intermediates respect the limit; impossible
//! limits are coded errors.

use assert_cmd::Command;
use tcc::codegen::llvm::{jit_run, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;
use tcc::pipeline::PipelineOptions;

/// A tiny deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random network: 3–6 tensors over 5–8 indices of sizes 2–4, each index in
/// one to three tensors (hyperedges), zero to two of them kept in the output;
/// sometimes a second term (the output's shape) or `+=`.
fn network(seed: u64) -> String {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let nt = 3 + r.below(4);
    let ni = 5 + r.below(4);
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); nt];
    for i in 0..ni {
        let k = 1 + r.below(3).min(nt - 1);
        let mut ts: Vec<usize> = Vec::new();
        while ts.len() < k {
            let t = r.below(nt);
            if !ts.contains(&t) {
                ts.push(t);
            }
        }
        for t in ts {
            holders[t].push(i);
        }
    }
    for (t, h) in holders.iter_mut().enumerate() {
        if h.is_empty() {
            h.push(t % ni);
        }
    }
    let kept: Vec<usize> =
        (0..r.below(3)).map(|_| r.below(ni)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let mut src = String::new();
    for i in 0..ni {
        src += &format!("range R{i} = {};\nindex i{i} : R{i};\n", 2 + r.below(3));
    }
    let ix = |v: &[usize]| v.iter().map(|i| format!("i{i}")).collect::<Vec<_>>().join(",");
    for (t, h) in holders.iter().enumerate() {
        src += &format!("input tensor T{t}[{}] : f64;\n", ix(h));
    }
    let out = if kept.is_empty() { String::new() } else { format!("[{}]", ix(&kept)) };
    let second = r.below(3) == 0;
    if second {
        src += &format!("input tensor X{out} : f64;\n");
    }
    src += &format!("output tensor Z{out} : f64;\n");
    let op = if r.below(3) == 0 { "+=" } else { "=" };
    let product: Vec<String> = holders.iter().enumerate().map(|(t, h)| format!("T{t}[{}]", ix(h))).collect();
    src += &format!("Z{out} {op} {}", product.join(" * "));
    if second {
        src += &format!(" + 0.5 * X{out}");
    }
    src += ";\n";
    src
}

/// What slicing did to one program: (sliced terms, one with a kept sliced index,
/// one with a summed one).
fn slicing_of(src: &str, bytes: u64) -> (usize, bool, bool) {
    let (hir, diags) = tcc::compile(src, "main");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}\n{src}"));
    let mut o = PipelineOptions::default();
    o.order.slice_bytes = Some(bytes);
    o.order.search_time = 0.0;
    let prepared = tcc::pipeline::prepare(&hir, &o);
    let units: Vec<_> = prepared.units.ids().collect();
    let nests = tcc::pipeline::fuse(&prepared, &units, &o);
    let (mut n, mut kept, mut summed) = (0, false, false);
    for (u, nest) in units.iter().zip(&nests) {
        // Every intermediate of a slice fits.
        let largest = tcc::lir::slice::largest_sliced_bytes(&prepared, nest);
        assert!(largest <= bytes, "largest sliced intermediate {largest} B over {bytes} B\n{src}");
        for g in tcc::lir::slice::groups(&prepared, *u) {
            n += 1;
            let last = &prepared.units[*u].stmts[g.stmts.end - 1];
            kept |= g.indices.iter().any(|i| last.lhs.indices.contains(i));
            summed |= g.indices.iter().any(|i| !last.lhs.indices.contains(i));
        }
    }
    (n, kept, summed)
}

/// Random networks sliced to 2–8 elements: run by the LIR executor and
/// JIT-compiled under every fusion mode, slices in place (too little work for
/// threads) and as parallel tasks (any work, on this process's threads), equal to
/// the interpreter.
#[test]
fn random_sliced_networks_match_the_interpreter() {
    let (mut sliced, mut kept, mut summed) = (0, false, false);
    for seed in 1..=40u64 {
        let src = network(seed);
        let bytes = 16 << (seed % 3);
        let (n, k, s) = slicing_of(&src, bytes);
        sliced += n;
        kept |= k;
        summed |= s;
        let (hir, diags) = tcc::compile(&src, "main");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
        let u = hir.units.ids().next().unwrap();
        let inputs = random_inputs(&hir, u, seed).unwrap();
        let want = run_unit(&hir, u, &inputs).unwrap();
        for fuse in [FuseMode::Auto, FuseMode::None, FuseMode::Max] {
            // The LIR executor runs the sliced nest too.
            let mut o = PipelineOptions::default();
            o.fusion.mode = fuse;
            o.order.slice_bytes = Some(bytes);
            o.order.search_time = 0.0;
            let prepared = tcc::pipeline::prepare(&hir, &o);
            let nest = &tcc::pipeline::fuse(&prepared, &[u], &o)[0];
            let got = tcc::lir::exec::execute(&prepared, nest, &inputs).unwrap();
            for (t, w) in &want {
                let d = tcc::run::compare::rel_diff(&got[t].data, &w.data);
                assert!(d.rel <= 1e-12, "seed {seed} {fuse:?} LIR executor: rel {}\n{src}", d.rel);
            }
            for parallel_min in [None, Some(1.0)] {
                let mut opts = Options { fuse, parallel_min, ..Options::default() };
                opts.order.slice_bytes = Some(bytes);
                opts.order.search_time = 0.0;
                let got = jit_run(&hir, u, &inputs, &opts, 1).unwrap().outputs;
                for (t, w) in &want {
                    let d = tcc::run::compare::rel_diff(&got[t].data, &w.data);
                    assert!(d.rel <= 1e-12, "seed {seed} {fuse:?} {parallel_min:?}: rel {}\n{src}", d.rel);
                }
            }
        }
    }
    assert!(sliced >= 20, "only {sliced} sliced terms");
    assert!(kept && summed, "kept {kept} summed {summed}");
}

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tcc-slicing-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stdout(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(a.get_output().stdout.clone()).unwrap()
}

fn stderr(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(a.get_output().stderr.clone()).unwrap()
}

/// Two products over 32 × 32 × 2 tensors with a summed hyperedge `h` (in three
/// factors): `Z[a,b]`, whose slicing keeps its sliced index, and the closed `Y`,
/// whose slicing sums it. Each has over 10^5 flops, enough for parallel tasks.
fn ring(dir: &std::path::Path) -> std::path::PathBuf {
    let src = "range N = 32;\nrange H = 2;\nindex a, b, c, d : N;\nindex h : H;\n\
               input tensor A[a,c,h] : f64;\ninput tensor B[c,d] : f64;\ninput tensor C[d,b,h] : f64;\n\
               input tensor E[h] : f64;\noutput tensor Z[a,b] : f64;\noutput tensor Y : f64;\n\
               Z[a,b] = A[a,c,h] * B[c,d] * C[d,b,h] * E[h];\n\
               Y = A[a,c,h] * B[c,d] * C[d,a,h] * E[h];\n";
    let p = dir.join("ring.tc");
    std::fs::write(&p, src).unwrap();
    p
}

/// `tcc run --max-intermediate --check` on 1 and 2 threads under every fusion mode.
#[test]
fn cli_sliced_runs_match_the_interpreter_on_one_and_two_threads() {
    let d = tmp("run");
    let f = ring(&d);
    for threads in ["1", "2"] {
        for fuse in ["auto", "none", "max"] {
            let a = tcc()
                .env("TCC_NUM_THREADS", threads)
                .args(["run", "--check", "--max-intermediate", "1KiB", "--fuse", fuse])
                .arg(&f)
                .assert()
                .success();
            assert!(stdout(&a).contains("check: matches the interpreter"), "{}", stdout(&a));
        }
    }
}

/// The report's slicing keeps the largest intermediate within the limit, the
/// loop nests' buffers are that small, and `--mem-limit` alone slices too: the
/// peak of temporaries the report gives fits.
#[test]
fn intermediates_and_peak_respect_the_limits() {
    let d = tmp("limits");
    let f = ring(&d);
    let a = tcc().args(["opt", "--max-intermediate", "256B"]).arg(&f).assert().success();
    let text = stdout(&a);
    let lines: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("slicing ")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in lines {
        let largest: f64 = line.split(" -> ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(largest <= 32.0, "{line}");
    }
    let a = tcc().args(["opt", "--max-intermediate", "256B", "--emit=lir"]).arg(&f).assert().success();
    let lir = stdout(&a);
    assert!(lir.contains("// sliced by"), "{lir}");
    for l in lir.lines().filter(|l| l.contains("buffer _t")) {
        let bytes: u64 = l.split('(').nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(bytes <= 256, "{l}");
    }
    // Unsliced, the temporaries need more than 1 KiB; --mem-limit 1KiB slices.
    let a = tcc().args(["opt", "--fuse", "none"]).arg(&f).assert().success();
    assert!(!stdout(&a).contains("fits in 1.0 KiB"), "{}", stdout(&a));
    let a = tcc().args(["opt", "--fuse", "none", "--mem-limit", "1KiB"]).arg(&f).assert().success();
    let text = stdout(&a);
    assert!(text.contains("  slicing ") && text.contains("fits in 1.0 KiB"), "{text}");
    tcc().args(["run", "--check", "--fuse", "none", "--mem-limit", "1KiB"]).arg(&f).assert().success();
    tcc().args(["build", "--mem-limit", "1KiB", "-o"]).arg(d.join("libring.so")).arg(&f).assert().success();
}

/// A term over part of a union range is not sliced (its statements run whole): the
/// report says so and the run is still right.
#[test]
fn union_parts_are_not_sliced() {
    let d = tmp("union");
    let f = d.join("union.tc");
    std::fs::write(
        &f,
        "range O = 3;\nrange V = 4;\nrange P = O + V;\nindex i, j, k : O;\nindex a, b : V;\nindex p, q : P;\n\
         input tensor H[p,q] : f64;\ninput tensor T[a,i] : f64;\ninput tensor U[i,j] : f64;\n\
         output tensor R[a,j] : f64;\nR[a,j] = H[a,b] * T[b,i] * U[i,k] * H[k,j];\n",
    )
    .unwrap();
    let a = tcc().args(["opt", "--max-intermediate", "8B"]).arg(&f).assert().success();
    assert!(stdout(&a).contains("not sliced: the term reads or writes part of a union range"), "{}", stdout(&a));
    let a = tcc().args(["run", "--check", "--max-intermediate", "8B"]).arg(&f).assert().success();
    assert!(stdout(&a).contains("matches the interpreter") && !stdout(&a).contains("sliced:"), "{}", stdout(&a));
}

/// A limit nothing can meet is a coded error with exit code 1.
#[test]
fn impossible_limits_are_errors() {
    let d = tmp("impossible");
    let f = ring(&d);
    let a = tcc().args(["run", "--mem-limit", "8B"]).arg(&f).assert().code(1);
    assert!(stderr(&a).contains("error[E0725]") && stderr(&a).contains("even sliced"), "{}", stderr(&a));
    let a = tcc().args(["opt", "--max-intermediate", "4B"]).arg(&f).assert().code(1);
    assert!(stderr(&a).contains("error[E0766]"), "{}", stderr(&a));
    let a = tcc().args(["run", "--interp", "--max-intermediate", "1KiB"]).arg(&f).assert().code(1);
    assert!(stderr(&a).contains("error[E0727]"), "{}", stderr(&a));
}
