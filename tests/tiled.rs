//! `tcc run --tiled` through the command line: equality with the dense
//! interpreter and the dense build, what is stored, peak memory at a size whose
//! dense form does not fit, and errors.

mod common;

use assert_cmd::Command;
use common::which;
use std::path::{Path, PathBuf};

fn path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

fn stdout(args: &[&str], file: &Path) -> String {
    let out = tcc().args(["run"]).arg(file).args(args).assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

/// The numbers of the first output row: norm2, sum, checksum.
fn summary(report: &str) -> [f64; 3] {
    let line = report.lines().find(|l| l.contains("norm2 = ")).expect("an output row");
    let num = |key: &str| -> f64 {
        let rest = &line[line.find(key).unwrap() + key.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    [num("norm2 = "), num("sum = "), num("checksum = ")]
}

/// `tcc ARGS` under `mpirun -np NP` (at most 120 s) with `envs` set: whether it
/// succeeded, its stdout and its stderr.
fn mpirun_tcc(np: &str, args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let out = std::process::Command::new("timeout")
        .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np])
        .arg(assert_cmd::cargo::cargo_bin("tcc"))
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// `tcc run FILE --tiled --ranks 2` with `var=value` set fails with E0760 naming `var`.
fn refuses_env(file: &Path, var: &str, value: &str) {
    let out = tcc().args(["run"]).arg(file).args(["--tiled", "--ranks", "2"]).env(var, value).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains(var) && err.contains("E0760"), "{var}={value}: {err}");
}

#[test]
fn small_ccd_matches_the_interpreter() {
    let text = stdout(&["--tiled", "--check", "--stats", "--tile", "2"], &path("tests/tiled/ccd_small.tc"));
    assert!(text.contains("check: matches the interpreter"), "{text}");
    assert!(text.contains("executed") && text.contains("(planned"), "{text}");
}

#[test]
fn ccd_example_matches_the_dense_build() {
    let file = path("examples/tiled/ccd_spin.tc");
    let dense = summary(&stdout(&[], &file));
    let tiled_text = stdout(&["--tiled", "--stats"], &file);
    let tiled = summary(&tiled_text);
    // norm2 and checksum are sums of many terms: agree to rounding.
    for k in [0, 2] {
        assert!((dense[k] - tiled[k]).abs() <= 1e-9 * dense[k].abs(), "{dense:?} vs {tiled:?}");
    }
    // Fewer flops and elements than dense, the flops predicted exactly.
    let line = tiled_text.lines().find(|l| l.contains("flops: executed")).unwrap();
    let nums: Vec<f64> = line.split([' ', '(', ')', ',']).filter_map(|w| w.parse().ok()).collect();
    assert_eq!(nums[0], nums[1], "{line}");
    assert!(nums[0] * 5.0 < nums[2], "{line}");
    // --stats times the kernel calls by shape against the model.
    assert!(tiled_text.contains("kernels: ") && tiled_text.contains("kernel wall / model = "), "{tiled_text}");
    assert!(tiled_text.lines().any(|l| l.trim_start().starts_with("GETT m ")), "{tiled_text}");
}

/// A whole CCD iteration (residual, update through the orbital-energy
/// denominator, energy) runs tiled on one process and on ranks: element-wise
/// functions and broadcast sums included.
#[test]
fn a_ccd_iteration_with_its_denominator_runs_tiled_and_on_ranks() {
    let file = path("tests/tiled/ccd_iteration_small.tc");
    let text = stdout(&["--tiled", "--check", "--tile", "2"], &file);
    assert!(text.contains("check: matches the interpreter"), "{text}");
    let one = summary(&text);
    for ranks in ["2", "3"] {
        let got = summary(&stdout(&["--tiled", "--tile", "2", "--ranks", ranks], &file));
        for k in [0, 2] {
            assert!((one[k] - got[k]).abs() <= 1e-12 * one[k].abs(), "{ranks} ranks: {one:?} vs {got:?}");
        }
    }
    // A product of three element-wise factors (split into binary ones).
    let source = std::fs::read_to_string(&file).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let three = dir.path().join("three_factors.tc");
    // abs, not an odd function: R · f(V) must stay antisymmetric like T2new.
    std::fs::write(&three, source.replace("recip(eo[i]", "abs(Vvvoo[a,b,i,j]) * recip(eo[i]")).unwrap();
    let text = stdout(&["--tiled", "--check", "--tile", "2"], &three);
    assert!(text.contains("check: matches the interpreter"), "{text}");
    // exp(0) = 1: a function that is not zero where a tensor stores no tile is
    // refused, not computed as if those tiles were zero.
    let source = source.replace("recip(eo[i]", "exp(Vvvoo[a,b,i,j]) * recip(eo[i]");
    let bad = dir.path().join("exp_of_blocks.tc");
    std::fs::write(&bad, source).unwrap();
    let out = tcc().arg("run").arg(&bad).args(["--tiled", "--tile", "2"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("E0760") && err.contains("exp(Vvvoo)"), "{err}");
}

/// Blocks of tensors over `P = O + V` (`F[i,a]` of `F[p,q]`) are read through the
/// union's tiling — its parts' tiles one after the other — on one process and on
/// ranks, and planned (writing by blocks: tests/subranges.rs).
#[test]
fn slices_of_unions_are_read_by_tiled_runs() {
    let file = path("tests/tiled/fock_slices.tc");
    let mut first = None;
    for tile in ["2", "3", "5"] {
        let text = stdout(&["--tiled", "--check", "--tile", tile], &file);
        assert!(text.contains("check: matches the interpreter"), "tile {tile}: {text}");
        first.get_or_insert(summary(&text));
    }
    let one = first.unwrap();
    for ranks in ["2", "3"] {
        // R is antisymmetric: its sum and checksum are rounding; its norm counts.
        let got = summary(&stdout(&["--tiled", "--tile", "2", "--ranks", ranks], &file));
        assert!((one[0] - got[0]).abs() <= 1e-12 * one[0], "{ranks} ranks: {one:?} vs {got:?}");
    }
    tcc().args(["plan", "--tiled", "--procs", "2,4"]).arg(&file).assert().success();
}

#[test]
fn dynamic_and_static_schedules_agree() {
    let file = path("tests/tiled/ccd_small.tc");
    let a = stdout(&["--tiled", "--schedule", "static", "--tile", "1"], &file);
    let b = stdout(&["--tiled", "--schedule", "dynamic", "--tile", "3"], &file);
    let (x, y) = (summary(&a), summary(&b));
    assert!((x[0] - y[0]).abs() <= 1e-12 * x[0], "{x:?} vs {y:?}");
}

#[test]
fn four_index_transform_stores_one_eighth_and_reports_what_runs() {
    let out = tcc().args(["opt", "--json"]).arg(path("examples/tiled/four_index_sym.tc")).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let tiled = &v["tiled"][0];
    let a = tiled["tensors"].as_array().unwrap().iter().find(|t| t[0] == "A").unwrap();
    let (stored, dense) = (a[1].as_f64().unwrap(), a[2].as_f64().unwrap());
    assert_eq!(dense, 1e8);
    assert!(stored <= 1.1 * dense / 8.0, "A stores {stored} elements");
    // The symmetric algorithm: fewer flops than the dense order of the same steps.
    assert!(tiled["flops"].as_f64().unwrap() < 0.6 * tiled["dense_flops"].as_f64().unwrap(), "{tiled}");
}

#[test]
fn the_plan_predicts_the_flops_tiled_runs_execute() {
    // A small copy of the four-index transform: run it and compare with `tcc opt`.
    let src = std::fs::read_to_string(path("examples/tiled/four_index_sym.tc"))
        .unwrap()
        .replace("range P = 100 tile 4;", "range P = 9 tile 2;")
        .replace("range M = 100 tile 25;", "range M = 7 tile 3;");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("four.tc");
    std::fs::write(&file, src).unwrap();
    let out = tcc().args(["opt", "--json"]).arg(&file).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let planned = v["tiled"][0]["flops"].as_f64().unwrap();
    let text = stdout(&["--tiled", "--check"], &file);
    assert!(text.contains("check: matches the interpreter"), "{text}");
    assert!(text.contains(&format!("executed {planned:.3e}")), "planned {planned:.3e}:\n{text}");
}

#[test]
fn ccd_at_o20_v200_runs_within_4_gib() {
    // Dense <ab||cd> alone would be 12.8 GB; antisymmetry and spin blocks store
    // about 0.9 GB of it. Peak resident memory of the child, from getrusage.
    let out =
        tcc().args(["run"]).arg(path("tests/tiled/ccd_o20_v200.tc")).args(["--tiled", "--stats"]).assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let peak = tcc::tiled::dist::peak_rss(true);
    assert!(peak > 0.0, "getrusage gave no peak RSS");
    eprintln!("peak RSS of the tiled CCD at o=20, v=200: {:.2} GiB", peak / (1u64 << 30) as f64);
    assert!(peak < 4.0 * (1u64 << 30) as f64, "peak RSS {peak} bytes\n{text}");
    let v = text.lines().find(|l| l.trim_start().starts_with("Vvvvv:")).unwrap();
    let stored: f64 = v.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(stored < 1.6e9 / 12.0, "{v}");
}

#[test]
fn misuse_is_a_clear_error() {
    // `where` (here from `max(x, 0)`) and `exp`, an element-wise function of one
    // tensor, run (the refusals of these are in `max_where_and_softmax_…`).
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f.tc");
    let program = |rhs: &str| {
        format!("range N = 4;\nindex i : N;\ninput tensor X[i] : f64;\noutput tensor Y[i] : f64;\nY[i] = {rhs};\n")
    };
    for rhs in ["max(X[i], 0)", "exp(X[i])"] {
        std::fs::write(&f, program(rhs)).unwrap();
        tcc()
            .args(["run"])
            .arg(&f)
            .args(["--tiled", "--check"])
            .assert()
            .success()
            .stdout(predicates::str::contains("matches the interpreter"));
    }
    // One process moves no tiles: --exchange is an error there, not ignored.
    tcc()
        .args(["run"])
        .arg(path("tests/tiled/ccd_small.tc"))
        .args(["--tiled", "--exchange", "one-sided"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--exchange applies to distributed tiled runs"));
    tcc()
        .args(["run"])
        .arg(&f)
        .args(["--tiled", "--tile", "0"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--tile"));
    tcc().args(["run"]).arg(&f).args(["--tile", "4"]).assert().code(1);
    // Options of other executors are refused, not ignored.
    tcc().args(["run"]).arg(&f).args(["--tiled", "--no-opt"]).assert().code(1);
    // A tuning table named but missing is an error, not the built-in model.
    tcc()
        .args(["run"])
        .arg(&f)
        .args(["--tiled", "--stats", "--tuning", "t.toml"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("E0722"));
    // Where no table is read, --tuning is refused rather than ignored.
    for args in [&["--tiled", "--tuning", "t.toml"][..], &["--tuning", "t.toml"], &["--plan", "--tuning", "t.toml"]] {
        tcc().args(["run"]).arg(&f).args(args).assert().code(1).stderr(predicates::str::contains("E0756"));
    }
    // An --input array without the declared symmetry would be silently packed.
    let s = dir.path().join("s.tc");
    std::fs::write(&s, "range N = 3;\nindex i, j : N;\ninput tensor S[i,j] : f64 symmetric(i j);\noutput tensor Y[i] : f64;\nY[i] = S[i,j];\n").unwrap();
    let npy = dir.path().join("s.npy");
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 3), }";
    let pad = 64 - (10 + header.len() + 1) % 64;
    let header = format!("{header}{}\n", " ".repeat(pad));
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for k in 0..9 {
        bytes.extend((k as f64).to_le_bytes());
    }
    std::fs::write(&npy, bytes).unwrap();
    tcc()
        .args(["run"])
        .arg(&s)
        .arg("--tiled")
        .arg("--input")
        .arg(format!("S={}", npy.display()))
        .assert()
        .code(1)
        .stderr(predicates::str::contains("E0761"));
}

#[test]
fn in_process_ranks_give_the_single_process_numbers() {
    let file = path("tests/tiled/ccd_small.tc");
    let one = summary(&stdout(&["--tiled", "--tile", "2"], &file));
    for exchange in ["collective", "one-sided", "auto"] {
        for ranks in ["1", "2", "3", "4"] {
            let args = ["--tiled", "--tile", "2", "--ranks", ranks, "--stats", "--exchange", exchange];
            let text = stdout(&args, &file);
            let got = summary(&text);
            for k in [0, 2] {
                assert!(
                    (one[k] - got[k]).abs() <= 1e-12 * one[k].abs(),
                    "{ranks} ranks, {exchange}: {one:?} vs {got:?}\n{text}"
                );
            }
            assert!(text.contains(&format!("tiled on {ranks} ranks")), "{text}");
            // Every rank moves the words its exchange plan says (sent in all-to-all
            // rounds or read by gets).
            for line in text.lines().filter(|l| l.contains("  rank ") && l.contains(" moved ")) {
                let after = line.split("moved ").nth(1).unwrap();
                let moved: u64 = after.split(' ').next().unwrap().parse().unwrap();
                let planned: u64 = after.split("(planned ").nth(1).unwrap().split(')').next().unwrap().parse().unwrap();
                assert_eq!(moved, planned, "{line}");
            }
            assert!(text.contains("kernels of rank 0: "), "{text}");
            if exchange == "one-sided" && ranks != "1" {
                // Making the tensors the sets write is part of setting them up.
                let number_before = |line: &str, what: &str| -> f64 {
                    let head = line.split(what).next().unwrap();
                    head.trim_end().rsplit([' ', '(', ';']).next().unwrap().parse().unwrap()
                };
                let lines: Vec<&str> = text.lines().filter(|l| l.contains(" s in kernels (modelled")).collect();
                assert_eq!(lines.len(), ranks.parse::<usize>().unwrap(), "{text}");
                for line in lines {
                    let setup = number_before(line, " s setting up sets");
                    let made = number_before(line, " s making the tensors sets write first");
                    assert!((0.0..=setup + 1e-3).contains(&made), "{line}");
                }
            }
            let sets = text.lines().find(|l| l.contains("exchange: ")).expect("--stats names the exchange");
            match exchange {
                "collective" => assert!(sets.contains("exchange: 0 of "), "{sets}"),
                "one-sided" => assert!(!sets.contains("exchange: 0 of "), "{sets}"),
                _ => {}
            }
        }
    }
    // Inputs are generated where they live: --input and --check are refused.
    tcc().args(["run"]).arg(&file).args(["--tiled", "--ranks", "2", "--check"]).assert().code(1);
    // Switches read from the environment are checked, not ignored when misspelt.
    for (var, value) in [("TCC_BALANCE", "flop"), ("TCC_STEAL", "yes")] {
        refuses_env(&file, var, value);
    }
}

#[cfg(feature = "mpi")]
#[test]
fn mpi_ranks_give_the_single_process_numbers() {
    let file = path("tests/tiled/ccd_small.tc");
    let one = summary(&stdout(&["--tiled", "--tile", "2"], &file));
    // 4 ranks one-sided: ranks also take over each other's items (MPI counters).
    for (np, exchange, steal) in
        [("2", "one-sided", "off"), ("3", "collective", "off"), ("3", "one-sided", "off"), ("4", "one-sided", "eager")]
    {
        let out = std::process::Command::new("timeout")
            .args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np])
            .arg(assert_cmd::cargo::cargo_bin("tcc"))
            .arg("run")
            .arg(&file)
            .args(["--tiled", "--tile", "2", "--backend", "mpi", "--stats", "--exchange", exchange])
            .env("TCC_STEAL", steal)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{np} ranks, {exchange}: {}\n{text}", String::from_utf8_lossy(&out.stderr));
        let got = summary(&text);
        assert!((one[0] - got[0]).abs() <= 1e-12 * one[0].abs(), "{np} ranks, {exchange}: {one:?} vs {got:?}");
        assert!(text.contains(&format!("tiled on {np} ranks")), "{text}");
        if steal == "eager" && !text.contains("has no windows") {
            assert!(text.lines().any(|l| l.contains("took over ") && !l.contains("took over 0 ")), "{text}");
        }
        if exchange == "one-sided" {
            // Windows where the MPI library can make them (Open MPI with
            // `btl_vader_single_copy_mechanism=none`, as ./x test sets, cannot):
            // either way the run says which.
            assert!(!text.contains("exchange: 0 of ") || text.contains("has no windows"), "{text}");
            // ./x test chooses a one-sided component that can (`osc pt2pt`).
            if std::env::var_os("TCC_TEST_REQUIRE_MPI_WINDOWS").is_some() {
                assert!(!text.contains("has no windows") && !text.contains("exchange: 0 of "), "{text}");
            }
        }
    }
}

/// Work items split into slabs of rows (`TCC_SPLIT=eager`: every item that can
/// be, into up to 3 parts) give the single process's numbers on 1–5 in-process
/// ranks and under `mpirun -np 2/3`, with and without taking over; a misspelt
/// value is refused.
#[test]
fn split_items_give_the_single_process_numbers() {
    let file = path("tests/tiled/ccd_small.tc");
    let one = summary(&stdout(&["--tiled", "--tile", "3"], &file));
    let check = |text: &str, what: &str| {
        let got = summary(text);
        for k in [0, 2] {
            assert!((one[k] - got[k]).abs() <= 1e-12 * one[k].abs(), "{what}: {one:?} vs {got:?}\n{text}");
        }
    };
    for ranks in ["1", "2", "3", "4", "5"] {
        for (exchange, steal) in [("one-sided", "eager"), ("one-sided", "on"), ("collective", "off")] {
            let out = tcc()
                .arg("run")
                .arg(&file)
                .args(["--tiled", "--tile", "3", "--ranks", ranks, "--exchange", exchange])
                .env("TCC_SPLIT", "eager")
                .env("TCC_STEAL", steal)
                .assert()
                .success();
            check(&String::from_utf8_lossy(&out.get_output().stdout), &format!("{ranks} ranks, {exchange}, {steal}"));
        }
    }
    if cfg!(feature = "mpi") && which("mpirun") {
        let file = file.to_str().unwrap();
        for (np, steal) in [("2", "eager"), ("3", "on"), ("3", "off")] {
            let args = ["run", file, "--tiled", "--tile", "3", "--backend", "mpi", "--exchange", "one-sided"];
            let (ok, text, err) = mpirun_tcc(np, &args, &[("TCC_SPLIT", "eager"), ("TCC_STEAL", steal)]);
            assert!(ok, "-np {np}: {err}\n{text}");
            check(&text, &format!("mpirun -np {np}, {steal}"));
        }
    }
    for bad in ["yes", "1.5", "-0.1"] {
        refuses_env(&file, "TCC_SPLIT", bad);
    }
    refuses_env(&file, "TCC_PREFETCH_WORDS", "lots");
}

#[test]
fn a_failing_rank_stops_the_others() {
    // One of three in-process ranks panics before its first task set: the run fails
    // with a message naming it, within seconds, instead of hanging in the exchange.
    let t0 = std::time::Instant::now();
    let out = tcc()
        .args(["run"])
        .arg(path("tests/tiled/ccd_small.tc"))
        .args(["--tiled", "--ranks", "3"])
        .env("TCC_INJECT_FAILURE", "1:panic")
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("rank 1"), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(30));
}

#[cfg(feature = "mpi")]
#[test]
fn a_failing_mpi_rank_fails_the_job() {
    // One-sided sets keep the tensors in window memory, freed collectively: a rank
    // failing alone must not wait there for the others.
    for exchange in ["collective", "one-sided"] {
        for mode in ["panic", "exit"] {
            let t0 = std::time::Instant::now();
            let out = std::process::Command::new("timeout")
                .args(["90", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"])
                .arg(assert_cmd::cargo::cargo_bin("tcc"))
                .arg("run")
                .arg(path("tests/tiled/ccd_small.tc"))
                .args(["--tiled", "--backend", "mpi", "--exchange", exchange])
                .env("TCC_INJECT_FAILURE", format!("1:{mode}"))
                .output()
                .unwrap();
            assert!(!out.status.success(), "{exchange}, {mode}: the job succeeded");
            assert_ne!(out.status.code(), Some(124), "{exchange}, {mode}: the job hung");
            assert!(t0.elapsed() < std::time::Duration::from_secs(60), "{exchange}, {mode}: {:?}", t0.elapsed());
        }
    }
}

#[test]
fn tune_calibrates_the_time_model_that_stats_print() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("tuning.toml");
    tcc().args(["tune", "--ranks", "2", "--max-bytes", "64KiB", "--out"]).arg(&table).assert().success();
    let text = std::fs::read_to_string(&table).unwrap();
    for key in ["[calibration]", "alpha = ", "beta = ", "[[calibration.kernel]]", "m = 576"] {
        assert!(text.contains(key), "{key} missing in\n{text}");
    }
    let file = path("tests/tiled/ccd_small.tc");
    let table = table.to_str().unwrap();
    for args in
        [vec!["--tiled", "--stats", "--tuning", table], vec!["--tiled", "--ranks", "2", "--stats", "--tuning", table]]
    {
        let out = stdout(&args, &file);
        let line = out.lines().find(|l| l.contains("model: ")).unwrap_or_else(|| panic!("no model line:\n{out}"));
        assert!(line.contains("measured by `tcc tune` with 2 ranks"), "{line}");
        let predicted: f64 = line.split("model: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(predicted > 0.0 && predicted.is_finite(), "{line}");
    }
    // Without a table: the built-in values, said so.
    let out = tcc()
        .env("XDG_CONFIG_HOME", dir.path().join("empty"))
        .args(["run"])
        .arg(&file)
        .args(["--tiled", "--stats"])
        .assert()
        .success();
    let out = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(out.contains("model: ") && out.contains("built-in values"), "{out}");
}

#[test]
fn plan_tiled_forecasts_what_the_ranks_then_measure() {
    // `tcc plan --tiled` plans as the ranks do: per rank, the flops and words
    // sent it forecasts are those `tcc run --tiled --ranks P --stats` counts.
    use predicates::prelude::*;
    let f = path("tests/tiled/ccd_small.tc");
    for ranks in [2usize, 3] {
        let out = tcc()
            .args(["plan", "--tiled", "--tile", "2", "--json", "--procs"])
            .arg(ranks.to_string())
            .arg(&f)
            .assert()
            .success();
        let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        let plan = &v["units"][0]["plans"][0];
        assert_eq!(plan["procs"], ranks);
        let forecast: Vec<(f64, f64)> = plan["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["flops"].as_f64().unwrap(), r["words_sent"].as_f64().unwrap()))
            .collect();
        assert_eq!(forecast.len(), ranks);
        let run = tcc()
            .env("TCC_NUM_THREADS", ranks.to_string())
            .args(["run", "--tiled", "--tile", "2", "--stats", "--ranks"])
            .arg(ranks.to_string())
            .arg(&f)
            .assert()
            .success();
        let text = String::from_utf8_lossy(&run.get_output().stdout).to_string();
        for (r, (flops, words)) in forecast.iter().enumerate() {
            let line = text.lines().find(|l| l.trim_start().starts_with(&format!("rank {r}: owns"))).unwrap();
            assert!(line.contains(&format!("moved {} words (planned {})", *words as u64, *words as u64)), "{line}");
            assert!(line.contains(&format!("{flops:.3e} flops")), "{flops:.3e} in {line}");
        }
    }
    // Without --tile the model chooses per rank count; the run makes the same
    // choice and executes what the plan at that tile forecast.
    let dir = std::env::temp_dir().join(format!("tcc-autotile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bigger = dir.join("ccd_o8_v40.tc");
    let src = std::fs::read_to_string(&f)
        .unwrap()
        .replace("range O = 4 spin(2, 2);", "range O = 8 spin(4, 4);")
        .replace("range V = 6 spin(3, 3);", "range V = 40 spin(20, 20);");
    std::fs::write(&bigger, src).unwrap();
    let out = tcc().args(["plan", "--tiled", "--json", "--procs", "2"]).arg(&bigger).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let plan = &v["units"][0]["plans"][0];
    assert_eq!(plan["tile_chosen_by_model"], true, "{plan}");
    let tile = plan["tile"].as_u64().unwrap();
    let words: u64 = plan["ranks"].as_array().unwrap().iter().map(|r| r["words_sent"].as_f64().unwrap() as u64).sum();
    let run = tcc()
        .env("TCC_NUM_THREADS", "2")
        .args(["run", "--tiled", "--stats", "--ranks", "2"])
        .arg(&bigger)
        .assert()
        .success();
    let text = String::from_utf8_lossy(&run.get_output().stdout).to_string();
    assert!(text.contains(&format!("tile {tile} (auto: the time model")), "tile {tile}: {text}");
    let moved: u64 =
        text.lines().filter_map(|l| l.split("moved ").nth(1)?.split(' ').next()?.parse::<u64>().ok()).sum();
    assert_eq!(moved, words, "{text}");
    // With --mem-per-rank the choice fits it: candidates over it are marked
    // and chosen only when none fits.
    let out = tcc()
        .args(["plan", "--tiled", "--procs", "16", "--mem-per-rank", "100MiB"])
        .arg(path("tests/tiled/ccd_o20_v200.tc"))
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    let row = text.lines().find(|l| l.trim_start().starts_with("16 ")).unwrap();
    assert!(!row.contains("exceeds"), "{text}");
    assert!(text.contains("40 → ") && text.contains("(over the memory per rank)"), "{text}");
    // A fixed tile: no choice reported.
    let out = tcc().args(["plan", "--tiled", "--tile", "8", "--procs", "2"]).arg(&bigger).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(text.contains("(tile 8,") && !text.contains("auto"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
    // Text, and a limit nothing fits: E0803 with the table.
    tcc()
        .args(["plan", "--tiled", "--procs", "1,2"])
        .arg(&f)
        .assert()
        .success()
        .stdout(predicates::str::contains("tiled plan of").and(predicates::str::contains("flops on tiles")));
    tcc()
        .args(["plan", "--tiled", "--procs", "1,2", "--mem-per-rank", "1KiB"])
        .arg(&f)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("E0803").and(predicates::str::contains("exceeds 1.0 KiB")));
    // Options that mean nothing here are refused, not ignored.
    for bad in [&["--network", "torus:2x2"][..], &["--naive"], &["--dot"]] {
        tcc()
            .args(["plan", "--tiled", "--procs", "2"])
            .args(bad)
            .arg(&f)
            .assert()
            .code(1)
            .stderr(predicates::str::contains("cannot be used with"));
    }
    tcc()
        .args(["plan", "--tile", "4", "--procs", "2"])
        .arg(&f)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--tiled"));
    tcc()
        .args(["plan", "--tiled", "--procs", "5000"])
        .arg(&f)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("E0802"));
    tcc()
        .args(["plan", "--tiled", "--procs", "2", "--threads-per-rank", "0"])
        .arg(&f)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("E0760"));
}

/// Issue 17: distributed tiled runs read `--input` files tile by tile — each rank
/// only the boxes of its own tiles — and compute what the interpreter computes
/// from the same files (in-process ranks, and MPI processes when built with
/// MPI), writing `--output-dir` files and the report's summaries together, no
/// rank making the output whole; files without the declared structure, of the wrong shape or not `.npy`
/// are errors with a non-zero exit, never tiles that silently keep part of them.
#[test]
fn distributed_runs_read_their_inputs_from_files_tile_by_tile() {
    let dir = tempfile::tempdir().unwrap();
    let f = path("tests/tiled/ccd_small.tc");
    let reference = dir.path().join("ref");
    let interp = tcc()
        .args(["run", "--interp", "--save-inputs", "--seed", "5", "--output-dir"])
        .arg(&reference)
        .arg(&f)
        .assert()
        .success();
    // norm2 and checksum of R as printed: the ranks summarize R without making it whole.
    let summary = |out: &[u8]| -> Vec<f64> {
        let text = String::from_utf8_lossy(out);
        let line = text.lines().find(|l| l.trim_start().starts_with("R ")).expect("a line for R").to_string();
        ["norm2 = ", "checksum = "]
            .iter()
            .map(|k| line.split(k).nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap())
            .collect()
    };
    let want_summary = summary(&interp.get_output().stdout);
    let names = ["Vvvoo", "Fvv", "T2", "Foo", "Vvvvv", "Voooo", "Vovvo", "Voovv"];
    let inputs: Vec<String> = names
        .iter()
        .flat_map(|n| ["--input".to_string(), format!("{n}={}", reference.join(format!("{n}.npy")).display())])
        .collect();
    let want = tcc::npy::read_file(&reference.join("R.npy")).unwrap().0;
    let mut runs: Vec<Vec<String>> = vec![vec!["--ranks".into(), "3".into()]];
    if cfg!(feature = "mpi") && which("mpirun") {
        runs.push(vec!["--backend".into(), "mpi".into()]);
    }
    for (k, how) in runs.iter().enumerate() {
        let out = dir.path().join(format!("out{k}"));
        let mut cmd: Vec<String> = Vec::new();
        if how[0] == "--backend" {
            cmd.extend(
                ["timeout", "120", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"].map(String::from),
            );
        }
        cmd.push(assert_cmd::cargo::cargo_bin("tcc").display().to_string());
        cmd.extend(["run", "--tiled", "--tile", "2"].map(String::from));
        cmd.extend(how.iter().cloned());
        cmd.extend(inputs.iter().cloned());
        cmd.extend(["--output-dir".to_string(), out.display().to_string(), f.display().to_string()]);
        let run = std::process::Command::new(&cmd[0]).args(&cmd[1..]).output().unwrap();
        assert!(run.status.success(), "{how:?}: {}", String::from_utf8_lossy(&run.stderr));
        let got = tcc::npy::read_file(&out.join("R.npy")).unwrap().0;
        let err = got.data.iter().zip(&want.data).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 1e-12, "{how:?}: off by {err}");
        for (g, w) in summary(&run.stdout).iter().zip(&want_summary) {
            assert!((g - w).abs() <= 1e-10 * w.abs(), "{how:?}: printed {g} against the interpreter's {w}");
        }
    }
    // Broken files: an element whose antisymmetric image disagrees, a nonzero in
    // a block declared zero, a wrong shape, not a .npy file.
    let t2 = tcc::npy::read_file(&reference.join("T2.npy")).unwrap().0;
    let mut bad = t2.clone();
    let at = |i: [usize; 4]| ((i[0] * 6 + i[1]) * 4 + i[2]) * 4 + i[3]; // row-major in [6, 6, 4, 4]
    bad.data[at([0, 1, 0, 1])] += 0.5;
    let bad_sym = dir.path().join("bad_sym.npy");
    tcc::npy::write_file(&bad_sym, &bad, tcc::sema::hir::ElemType::F64).unwrap();
    let mut vovvo = tcc::npy::read_file(&reference.join("Vovvo.npy")).unwrap().0;
    let zero = vovvo.data.iter().position(|x| *x == 0.0).unwrap();
    vovvo.data[zero] = 1.0;
    let bad_block = dir.path().join("bad_block.npy");
    tcc::npy::write_file(&bad_block, &vovvo, tcc::sema::hir::ElemType::F64).unwrap();
    let not_npy = dir.path().join("not.npy");
    std::fs::write(&not_npy, "hello").unwrap();
    let cases = [
        (format!("T2={}", bad_sym.display()), "E0761", "as the declared symmetry requires"),
        (format!("Vovvo={}", bad_block.display()), "E0761", "blocks declare it zero"),
        (format!("T2={}", reference.join("Fvv.npy").display()), "E0707", "its shape is [6, 6]"),
        (format!("T2={}", not_npy.display()), "E0706", "not a .npy file"),
    ];
    for (input, code, text) in cases {
        let out = tcc()
            .args(["run", "--tiled", "--tile", "2", "--ranks", "3", "--input", &input])
            .arg(&f)
            .timeout(std::time::Duration::from_secs(60))
            .assert()
            .code(1);
        let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(err.contains(code) && err.contains(text), "{input}: {err}");
    }
}

/// `max`/`min` reductions, `where` and the stable softmax run tiled and on ranks
/// (issues 17 and 21): a reduction's task starts its tile at the identity and is
/// never split across ranks, so partial tiles of taken-over work add up right;
/// arguments with unstored (zero) tiles are refused, since these see zeros too.
#[test]
fn max_where_and_softmax_run_tiled_and_on_ranks() {
    let file = path("examples/masked_softmax.tc");
    let want = stdout(&["--interp"], &file);
    let rows =
        |text: &str| -> Vec<String> { text.lines().filter(|l| l.contains("norm2 = ")).map(String::from).collect() };
    for tile in ["1", "4", "40"] {
        let text = stdout(&["--tiled", "--tile", tile, "--check"], &file);
        assert!(text.contains("check: matches the interpreter"), "tile {tile}: {text}");
    }
    for (ranks, tile, steal) in [("2", "2", "off"), ("3", "3", "eager"), ("4", "1", "on")] {
        let out = tcc()
            .arg("run")
            .arg(&file)
            .args(["--tiled", "--tile", tile, "--ranks", ranks])
            .env("TCC_STEAL", steal)
            .assert()
            .success();
        let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
        // Maxima, minima and selections are exact; O, a contraction, agrees to rounding.
        for (w, g) in rows(&want).iter().zip(rows(&text)) {
            if w.trim_start().starts_with('O') {
                let (a, b) = (summary(w), summary(&g));
                assert!((a[0] - b[0]).abs() <= 1e-12 * a[0].abs(), "{ranks} ranks: {w} vs {g}");
            } else {
                assert_eq!(w, &g, "{ranks} ranks, tile {tile}, steal {steal}");
            }
        }
    }
    // An antisymmetric argument: the images' signs.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("anti.tc");
    std::fs::write(
        &src,
        "range V = 5;\nindex a, b, c : V;\ninput tensor A[a,b,c] : f64 antisymmetric(a b);\n\
         output tensor M[b] : f64;\noutput tensor W[a,b,c] : f64;\n\
         M[b] = max(A[a,b,c]);\nW[a,b,c] = where(A[a,b,c] < 0, A[b,a,c], 0.5 * A[a,b,c]);\n",
    )
    .unwrap();
    for tile in ["1", "2", "3"] {
        let text = stdout(&["--tiled", "--tile", tile, "--check"], &src);
        assert!(text.contains("check: matches the interpreter"), "tile {tile}: {text}");
    }
    // A spin-blocked argument stores only its allowed tiles: refused, with why.
    let blocked = dir.path().join("blocked.tc");
    std::fs::write(
        &blocked,
        "range O = 4 spin(2, 2);\nrange V = 6 spin(3, 3);\nindex i, j : O;\nindex a, b : V;\n\
         input tensor T2[a,b,i,j] : f64 antisymmetric(a b)(i j) spin(a b | i j);\n\
         output tensor M[a,i] : f64;\nM[a,i] = max(T2[a,b,i,j]);\n",
    )
    .unwrap();
    let out = tcc().arg("run").arg(&blocked).args(["--tiled", "--tile", "1"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("E0760") && err.contains("stores only some of its tiles"), "{err}");
    assert!(stdout(&[], &blocked).contains("M "), "the dense run computes it");
}

/// Affine subscripts run tiled and on ranks (issues 17 and 21): the gather
/// (`_m[…] = I[n,c,y+r,x+s]`) reads each element from the input tile its
/// subscripts fall in, and a distributed task fetches exactly those tiles.
/// Strided windows, offsets, `max` of a window, `x-1` over a padded union, a
/// symmetric input and spin-blocked (partly unstored) input tiles.
#[test]
fn affine_subscripts_run_tiled_and_on_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let programs = [
        ("conv", std::fs::read_to_string(path("examples/conv2d.tc")).unwrap()),
        ("strided", std::fs::read_to_string(path("tests/ir/conv2d_strided.tc")).unwrap()),
        (
            "windows",
            "range T = 7; range R = 3; range L = 20;\nindex t : T; index r : R; index l : L;\n\
             input tensor I[l]; output tensor S1[t]; output tensor S2[t]; output tensor S3[t]; output tensor M[t];\n\
             S1[t] = I[t+r];\nS2[t] = 2 * I[2*(t+1)+r] - I[t+r];\nS3[t] = exp(I[t+3]) * I[t+0];\nM[t] = max(I[t+r]);\n"
                .to_string(),
        ),
        (
            "shift",
            "range B = 1; range X = 9; range H = B + X; index x : X; index h : H;\n\
             input tensor I[h]; output tensor D[x];\nD[x] = I[x] - I[x-1];\n"
                .to_string(),
        ),
        (
            "symmetric",
            "range V = 6; range R = 2; range Y = 5;\nindex a, b : V; index r : R; index y : Y;\n\
             input tensor A[a,b] : f64 antisymmetric(a b);\noutput tensor G[y,b] : f64;\n\
             G[y,b] = A[y+r,b];\n"
                .to_string(),
        ),
        (
            "blocked",
            "range O = 4 spin(2, 2);\nrange Y = 3; range R = 2;\nindex i, j : O; index y : Y; index r : R;\n\
             input tensor F[i,j] : f64 symmetric(i j) spin(i | j);\noutput tensor G[y,j] : f64;\n\
             G[y,j] = F[y+r,j];\n"
                .to_string(),
        ),
    ];
    for (name, src) in &programs {
        let file = dir.path().join(format!("{name}.tc"));
        std::fs::write(&file, src).unwrap();
        let want = stdout(&["--interp"], &file);
        for tile in ["1", "2", "3", "40"] {
            let text = stdout(&["--tiled", "--tile", tile, "--check"], &file);
            assert!(text.contains("check: matches the interpreter"), "{name}, tile {tile}: {text}");
        }
        for (ranks, tile) in [("2", "2"), ("3", "3")] {
            let got = stdout(&["--tiled", "--tile", tile, "--ranks", ranks], &file);
            let rows =
                |t: &str| -> Vec<[f64; 3]> { t.lines().filter(|l| l.contains("norm2 = ")).map(summary).collect() };
            for (w, g) in rows(&want).iter().zip(rows(&got)) {
                assert!((w[0] - g[0]).abs() <= 1e-12 * w[0].abs(), "{name}, {ranks} ranks: {want}\n{got}");
            }
        }
    }
    // Distributed runs without --tiled still refuse them, and say where they run.
    let file = path("examples/conv2d.tc");
    let out = tcc().arg("run").arg(&file).args(["--ranks", "2"]).assert().code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("E0765") && err.contains("--tiled"), "{err}");
}

/// Ranks that share memory read each other's tiles in place: in-process ranks
/// and `mpirun` ranks of one node (shared window memory, where the MPI library
/// has a shared-memory one-sided component) give the single process's numbers
/// and say how many words they read in place; `TCC_READ_IN_PLACE=off` copies
/// them (no such line), and a misspelt value is refused. Under Open MPI's `osc
/// sm` alone, with ranks taking over each other's items, the numbers hold too.
#[test]
fn ranks_on_one_node_read_tiles_in_place() {
    let file = path("tests/tiled/ccd_small.tc");
    let one = summary(&stdout(&["--tiled", "--tile", "2"], &file));
    let same = |text: &str, what: &str| {
        let got = summary(text);
        assert!((one[0] - got[0]).abs() <= 1e-12 * one[0].abs(), "{what}: {one:?} vs {got:?}");
    };
    for (value, read) in [("on", true), ("off", false)] {
        let out = tcc()
            .arg("run")
            .arg(&file)
            .args(["--tiled", "--tile", "2", "--ranks", "3", "--exchange", "one-sided", "--stats"])
            .env("TCC_READ_IN_PLACE", value)
            .assert()
            .success();
        let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
        same(&text, &format!("3 ranks, in place {value}"));
        assert_eq!(text.contains("read in place: "), read, "{value}: {text}");
    }
    let f = file.to_str().unwrap();
    let mpi_args = ["run", f, "--tiled", "--tile", "2", "--backend", "mpi", "--exchange", "one-sided", "--stats"];
    if cfg!(feature = "mpi") && which("mpirun") {
        for value in ["on", "off"] {
            let (ok, text, err) = mpirun_tcc("3", &mpi_args, &[("TCC_READ_IN_PLACE", value)]);
            assert!(ok, "in place {value}: {err}\n{text}");
            same(&text, &format!("mpirun -np 3, in place {value}"));
            if value == "off" {
                assert!(!text.contains("read in place: "), "{text}");
            }
            // Words moved stay the plan's, read in place or copied.
            for line in text.lines().filter(|l| l.contains(" moved ")) {
                let words = |key: &str| {
                    let w = line.split(key).nth(1).and_then(|r| r.split_whitespace().next());
                    w.map(|w| w.trim_end_matches([')', ',']).to_string())
                };
                assert_eq!(words(" moved "), words("(planned "), "{line}");
            }
        }
    }
    // Open MPI's `osc sm` makes windows only over memory it allocated: the window
    // over the partial tiles then fails, and the partial tiles of taken-over items
    // went missing (a wrong sum) until they were sent collectively instead.
    if cfg!(feature = "mpi") && which("mpirun") {
        let env =
            [("OMPI_MCA_osc", "sm"), ("OMPI_MCA_btl_vader_single_copy_mechanism", "none"), ("TCC_STEAL", "eager")];
        for np in ["2", "3", "4"] {
            let (ok, text, err) = mpirun_tcc(np, &mpi_args, &env);
            assert!(ok, "osc sm, -np {np}: {err}\n{text}");
            if text.contains("has no windows") {
                continue; // this MPI has no `osc sm`: nothing taken over
            }
            same(&text, &format!("osc sm, mpirun -np {np}"));
            assert!(text.lines().any(|l| l.contains("took over ") && !l.contains("took over 0 ")), "{text}");
        }
    }
    refuses_env(&file, "TCC_READ_IN_PLACE", "maybe");
}

#[test]
fn a_tiled_run_warns_of_an_output_that_breaks_its_declared_symmetry() {
    // Only tiles that are their own images can break it (the others' dense images
    // are copies of stored tiles), and only those are checked.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("asym.tc");
    let body = "range N = 6; index i, j, k : N; input tensor A[i,k] : f64; input tensor C[k,j] : f64;\n\
                output tensor B[i,j] : f64 SYM(i j);\n";
    for (sym, stmt, warns) in [
        ("antisymmetric", "B[i,j] = A[i,k] * C[k,j];", true),
        ("antisymmetric", "B[i,j] = A[i,k] * A[j,k] - A[j,k] * A[i,k];", false),
        ("symmetric", "B[i,j] = A[i,k] * A[j,k];", false),
    ] {
        std::fs::write(&f, format!("{}{stmt}", body.replace("SYM", sym))).unwrap();
        for tile in ["2", "3", "6"] {
            let out = tcc().args(["run"]).arg(&f).args(["--tiled", "--tile", tile]).assert().success();
            let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
            assert_eq!(err.contains("warning[W0701]"), warns, "{stmt}, tile {tile}: {err}");
            if warns {
                assert!(err.contains("in a tile that is its own image"), "{err}");
            }
        }
    }
}
