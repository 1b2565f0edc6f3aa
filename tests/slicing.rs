//! Sliced contractions (`--max-intermediate`, and `--mem-limit` when no fusion
//! fits) run and compute what the interpreter computes: random networks with
//! hyperedges, sliced indices summed and kept, every `--fuse` mode, slices in
//! place and as parallel tasks, and shared among ranks (`--ranks N`, and under
//! mpirun with the `mpi` feature); the intermediates respect the limit;
//! impossible limits and combinations that do not slice are coded errors.

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

/// Every output `.npy` in `dir`, by file name.
fn outputs_in(dir: &std::path::Path) -> std::collections::BTreeMap<String, tcc::tensor::Dense> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "npy") {
            out.insert(p.file_name().unwrap().to_string_lossy().into_owned(), tcc::npy::read_file(&p).unwrap().0);
        }
    }
    out
}

/// The outputs of `tcc ARGS FILE --output-dir DIR`, and its stdout.
fn run_outputs(
    args: &[&str],
    file: &std::path::Path,
    dir: &std::path::Path,
) -> (std::collections::BTreeMap<String, tcc::tensor::Dense>, String) {
    let _ = std::fs::remove_dir_all(dir);
    let a =
        tcc().args(args).arg(file).arg("--output-dir").arg(dir).timeout(std::time::Duration::from_secs(120)).assert();
    let a = a.success();
    (outputs_in(dir), stdout(&a))
}

/// The per-rank `tasks` (slices run) and the total words sent of a `--stats` block.
fn rank_stats(text: &str) -> (Vec<u64>, u64) {
    let field = |l: &str, name: &str| -> u64 {
        l.split(&format!("{name} = ")).nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    let tasks = text.lines().filter(|l| l.trim_start().starts_with("rank ")).map(|l| field(l, "tasks")).collect();
    let total = text.lines().find(|l| l.trim_start().starts_with("total")).map(|l| field(l, "words_sent")).unwrap();
    (tasks, total)
}

fn assert_same(
    got: &std::collections::BTreeMap<String, tcc::tensor::Dense>,
    want: &std::collections::BTreeMap<String, tcc::tensor::Dense>,
    what: &str,
) {
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{what}");
    for (k, w) in want {
        assert_eq!(got[k].shape, w.shape, "{what} {k}");
        let d = tcc::run::compare::rel_diff(&got[k].data, &w.data);
        assert!(d.rel <= 1e-12, "{what} {k}: rel {}", d.rel);
    }
}

/// Sliced programs on 1, 2, 3 and 5 in-process ranks equal the interpreter: the
/// ring (a kept and summed sliced index in `Z`, summed ones in the scalar `Y`), a
/// term of two slices (ranks without a slice) and random networks (kept-only
/// slicings included, `+=` targets). Each rank runs a block of the slices (none
/// runs them all), words move only between ranks.
#[test]
fn sliced_programs_on_ranks_match_the_interpreter() {
    let d = tmp("ranks");
    // Two slices: on 3 and 5 ranks some ranks have none.
    let two = d.join("two.tc");
    std::fs::write(
        &two,
        "range N = 16;\nrange H = 2;\nindex i, j, k : N;\nindex h : H;\ninput tensor A[i,h] : f64;\n\
         input tensor B[h,k] : f64;\ninput tensor C[k,j,h] : f64;\noutput tensor Z[i,j] : f64;\n\
         Z[i,j] = A[i,h] * B[h,k] * C[k,j,h];\n",
    )
    .unwrap();
    let mut files = vec![(ring(&d), "256B".to_string()), (two, "128B".to_string())];
    for seed in [2u64, 3, 5, 7, 11, 13] {
        let f = d.join(format!("net{seed}.tc"));
        std::fs::write(&f, network(seed)).unwrap();
        files.push((f, format!("{}B", 16 << (seed % 3))));
    }
    let (mut kept_only, mut summed) = (false, false);
    for (f, limit) in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let (n, k, s) = slicing_of(&src, limit.trim_end_matches('B').parse().unwrap());
        if n == 0 {
            continue;
        }
        kept_only |= k && !s;
        summed |= s;
        let (want, _) = run_outputs(&["run", "--interp"], f, &d.join("interp"));
        assert!(!want.is_empty());
        for ranks in ["1", "2", "3", "5"] {
            let args = ["run", "--ranks", ranks, "--max-intermediate", limit, "--stats"];
            let (got, text) = run_outputs(&args, f, &d.join(format!("r{ranks}")));
            let what = format!("{} on {ranks} ranks\n{text}\n{src}", f.display());
            assert_same(&got, &want, &what);
            assert!(text.contains(&format!("slices split among {ranks} ranks")), "{what}");
            let (tasks, words) = rank_stats(&text);
            let p: usize = ranks.parse().unwrap();
            assert_eq!(tasks.len(), p, "{what}");
            let all: u64 = tasks.iter().sum();
            // Blocks of the slices: no rank runs more than its share (+1 per term).
            assert!(tasks.iter().all(|&t| t <= all / p as u64 + n as u64), "{what}");
            assert_eq!(words == 0, p == 1, "{what}");
        }
    }
    assert!(kept_only && summed, "kept-only {kept_only} summed {summed}");
}

/// Combinations that cannot slice on ranks are coded errors naming why.
#[test]
fn ranks_refuse_what_they_cannot_slice() {
    let d = tmp("ranks-refused");
    let f = ring(&d);
    let a = tcc().args(["run", "--ranks", "2", "--max-intermediate", "1GiB"]).arg(&f).assert().code(1);
    assert!(stderr(&a).contains("error[E0733]") && stderr(&a).contains("nothing is sliced"), "{}", stderr(&a));
    for extra in [&["--tiled"][..], &["--plan"], &["--no-opt"], &["--schedule", "static"]] {
        let a = tcc().args(["run", "--ranks", "2", "--max-intermediate", "256B"]).args(extra).arg(&f).assert().code(1);
        assert!(stderr(&a).contains("error[E0734]"), "{extra:?}: {}", stderr(&a));
    }
    // A time-budgeted search could slice differently on different ranks.
    let a = tcc()
        .args(["run", "--ranks", "2", "--max-intermediate", "256B", "--search-time", "2"])
        .arg(&f)
        .assert()
        .code(1);
    assert!(stderr(&a).contains("error[E0734]") && stderr(&a).contains("deterministic"), "{}", stderr(&a));
}

/// Under mpirun (`--backend mpi`) on 2 and 3 processes: the interpreter's outputs.
#[cfg(feature = "mpi")]
#[test]
fn sliced_programs_under_mpirun_match_the_interpreter() {
    let d = tmp("mpi");
    let f = ring(&d);
    let (want, _) = run_outputs(&["run", "--interp"], &f, &d.join("interp"));
    for np in ["2", "3"] {
        let out_dir = d.join(format!("np{np}"));
        let _ = std::fs::remove_dir_all(&out_dir);
        let out = std::process::Command::new("timeout")
            .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np])
            .arg(env!("CARGO_BIN_EXE_tcc"))
            .args(["run", "--backend", "mpi", "--max-intermediate", "256B", "--stats"])
            .arg(&f)
            .arg("--output-dir")
            .arg(&out_dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        assert_same(&outputs_in(&out_dir), &want, &format!("{np} MPI ranks\n{text}"));
        let (tasks, words) = rank_stats(&text);
        assert_eq!(tasks.len(), np.parse::<usize>().unwrap(), "{text}");
        assert!(words > 0 && text.contains("back ends mpi+mpi-p2p"), "{text}");
    }
}

/// A chain of four 48 × 48 matrices: sliced to 512 bytes (over `i`, no
/// recomputation) and to 64 bytes (over `i,k,l`, 32× the flops).
const CHAIN: &str = "range N = 48;\nindex i, j, k, l, m : N;\ninput tensor A[i,j] : f64;\n\
                     input tensor B[j,k] : f64;\ninput tensor C[k,l] : f64;\ninput tensor D[l,m] : f64;\n\
                     output tensor Z[i,m] : f64;\nZ[i,m] = A[i,j] * B[j,k] * C[k,l] * D[l,m];\n";

/// The model time of the chain's nest sliced to `bytes` (`None`: unsliced) and
/// its slicing's flops overhead.
fn chain_time(bytes: Option<u64>) -> (f64, f64) {
    let (hir, diags) = tcc::compile(CHAIN, "main");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let mut o = PipelineOptions::default();
    o.order.slice_bytes = bytes;
    o.order.search_time = 0.0;
    let prepared = tcc::pipeline::prepare(&hir, &o);
    let u = prepared.units.ids().next().unwrap();
    let nest = &tcc::pipeline::fuse(&prepared, &[u], &o)[0];
    let overhead = prepared.units[u].sliced.iter().map(|g| g.overhead).fold(1.0, f64::max);
    assert_eq!(prepared.units[u].sliced.is_empty(), bytes.is_none());
    (nest.time_s, overhead)
}

/// The CPU time model prices a sliced term as it runs: slices that recompute
/// (flops overhead) cost more, and even slices without overhead pay per-slice
/// calls and traffic; `tcc opt` reports that time.
#[test]
fn the_time_model_counts_the_slicing_overhead() {
    let (whole, _) = chain_time(None);
    let (t512, o512) = chain_time(Some(512));
    let (t64, o64) = chain_time(Some(64));
    assert!((o512 - 1.0).abs() < 1e-9 && o64 > 10.0, "overheads {o512} {o64}");
    assert!(t512 > whole, "{t512} vs {whole}");
    assert!(t64 > t512 && t64 >= o64 * whole, "{t64} vs {t512}, {o64}x of {whole}");
    let d = tmp("model");
    let f = d.join("chain.tc");
    std::fs::write(&f, CHAIN).unwrap();
    let time_of = |args: &[&str]| -> String {
        let a = tcc().arg("opt").args(args).arg(&f).assert().success();
        stdout(&a).lines().find(|l| l.contains("model time")).unwrap().to_string()
    };
    assert_ne!(time_of(&[]), time_of(&["--max-intermediate", "64B"]));
}

/// `tcc plan --max-intermediate`: the slices per rank, the reduction's words and a
/// time that counts both; E0733 when nothing is sliced.
#[test]
fn the_planner_prices_sliced_runs_on_ranks() {
    let d = tmp("plan");
    let f = ring(&d);
    let a = tcc().args(["plan", "--procs", "1,2,4", "--max-intermediate", "256B"]).arg(&f).assert().success();
    let text = stdout(&a);
    assert!(text.contains("program ring on 2 ranks:"), "{text}");
    assert!(text.contains("per rank: 32 of 64 slices") && text.contains("per rank: 16 of 64 slices"), "{text}");
    assert!(text.contains("all-reduce of 1024 elements: 1024 words, 2 messages"), "{text}");
    let a = tcc().args(["plan", "--procs", "2", "--max-intermediate", "1GiB"]).arg(&f).assert().code(1);
    assert!(stderr(&a).contains("error[E0733]"), "{}", stderr(&a));
    let a = tcc().args(["plan", "--procs", "2", "--max-intermediate", "256B", "--json"]).arg(&f).assert().success();
    let v: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(v[0]["terms"][0]["slices_per_rank"], 32);
}
