//! `tcc run --ranks N` (in-process ranks) and, with the `mpi` feature,
//! `mpirun -np N tcc run --backend mpi`: the report must be the interpreter's (line
//! by line; bitwise with `--no-opt`, within 1e-10 relative after optimization), and
//! a failing rank must make the run exit non-zero, not hang.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

fn tcc_bin() -> &'static str {
    env!("CARGO_BIN_EXE_tcc")
}

/// Runs a command, killing it after `limit`; `None` if it had to be killed.
fn run_limited(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("command starts");
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stdout_of(args: &[&str], file: &Path) -> String {
    let out = run_limited(Command::new(tcc_bin()).args(args).arg(file), Duration::from_secs(120)).expect("finishes");
    assert!(out.status.success(), "tcc {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The numbers of a report, line by line (the text around them must be equal).
fn same_report(a: &str, b: &str, rtol: f64) -> Result<(), String> {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    if la.len() != lb.len() {
        return Err(format!("{} lines vs {}:\n{a}\n{b}", la.len(), lb.len()));
    }
    for (x, y) in la.iter().zip(&lb) {
        let (wx, wy): (Vec<&str>, Vec<&str>) = (x.split_whitespace().collect(), y.split_whitespace().collect());
        if wx.len() != wy.len() {
            return Err(format!("`{x}` vs `{y}`"));
        }
        for (u, v) in wx.iter().zip(&wy) {
            let differ = match (u.parse::<f64>(), v.parse::<f64>()) {
                (Ok(p), Ok(q)) if u.contains('e') => {
                    (p - q).abs() > rtol * p.abs().max(q.abs()).max(1e-300) && (p - q).abs() > 1e-12
                }
                _ => u != v,
            };
            if differ {
                return Err(format!("`{x}` vs `{y}`"));
            }
        }
    }
    Ok(())
}

const EXAMPLES: [&str; 5] = ["four_index.tc", "ccsd_terms.tc", "mps.tc", "attention.tc", "model_mlp.tc"];

#[test]
fn ranks_give_the_interpreters_report() {
    for ex in EXAMPLES {
        let file = example(ex);
        let want = stdout_of(&["run", "--interp", "--seed", "5"], &file);
        for ranks in ["1", "3", "4"] {
            let exact = stdout_of(&["run", "--seed", "5", "--no-opt", "--ranks", ranks], &file);
            assert_eq!(exact, want, "{ex} on {ranks} ranks (--no-opt)");
            let st = stdout_of(&["run", "--seed", "5", "--ranks", ranks, "--schedule", "static"], &file);
            same_report(&st, &want, 1e-10).unwrap_or_else(|e| panic!("{ex} on {ranks} ranks: {e}"));
        }
    }
}

#[test]
fn stats_count_words_and_messages_per_rank() {
    let text = stdout_of(&["run", "--ranks", "3", "--stats"], &example("four_index.tc"));
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("stats: 3 ranks")).unwrap_or_else(|| panic!("{text}"));
    let num = |line: &str, key: &str| -> u64 {
        let k = line.find(&format!("{key} = ")).unwrap_or_else(|| panic!("{key} in {line}"));
        line[k + key.len() + 3..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let mut sent = 0;
    let mut tasks = 0;
    for r in 0..3 {
        let l = lines[at + 1 + r];
        assert!(l.starts_with(&format!("  rank {r}  ")), "{l}");
        sent += num(l, "words_sent");
        tasks += num(l, "tasks");
        assert!(num(l, "messages_sent") > 0, "{l}");
    }
    let total = lines[at + 4];
    assert_eq!(num(total, "words_sent"), sent);
    assert_eq!(num(total, "words_sent"), num(total, "words_received"));
    assert_eq!(num(total, "tasks"), tasks);
    // four_index is 4 binary contractions, each cut in ≤ 4·3 tiles (extent 6 → 6 tiles).
    assert_eq!(tasks, 24);
    // Each rank gathers B (6^4 words) and the three temporaries (6^4 each): every
    // word computed is sent to the 2 other ranks, plus per-tile headers.
    assert!(sent >= 2 * 4 * 1296, "{sent}");
}

#[test]
fn a_failing_rank_fails_the_run() {
    // Replicate-and-tile runs and plan runs (`--plan` ignored the injection).
    for extra in [&[][..], &["--plan"][..]] {
        let out = run_limited(
            Command::new(tcc_bin())
                .args(["run", "--ranks", "3"])
                .args(extra)
                .arg(example("four_index.tc"))
                .env("TCC_INJECT_FAILURE", "1:panic"),
            Duration::from_secs(60),
        )
        .expect("exits instead of hanging");
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("rank 1 failed") && !err.contains("internal compiler error"), "{extra:?}: {err}");
    }
}

#[test]
fn tune_writes_a_table_that_run_reads() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.toml");
    let out = Command::new(tcc_bin())
        .args(["tune", "--ranks", "2", "--max-bytes", "2KiB", "--out"])
        .arg(&table)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&table).unwrap();
    let t = tcc_runtime::tune::TuningTable::from_toml(&text).unwrap();
    assert_eq!(t.ranks, 2);
    for op in tcc_runtime::comm::Collective::ALL {
        assert!(t.choose(op, 8).is_some(), "{op:?} missing in\n{text}");
    }
    let file = example("ccsd_terms.tc");
    let want = stdout_of(&["run", "--interp"], &file);
    let tuning = table.to_str().unwrap();
    assert_eq!(stdout_of(&["run", "--no-opt", "--ranks", "2", "--tuning", tuning], &file), want);
    // A table of the wrong world is refused.
    std::fs::write(&table, text.replace("world = \"threads\"", "world = \"mpi\"")).unwrap();
    let out = Command::new(tcc_bin()).args(["run", "--ranks", "2", "--tuning", tuning]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;

    fn mpirun(np: usize, args: &[&str], file: &Path, env: Option<&str>) -> Option<Output> {
        let mut cmd = Command::new("mpirun");
        cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string(), tcc_bin()]).args(args).arg(file);
        if let Some(e) = env {
            cmd.env("TCC_INJECT_FAILURE", e);
        }
        run_limited(&mut cmd, Duration::from_secs(90))
    }

    #[test]
    fn mpi_ranks_give_the_interpreters_report() {
        for ex in ["four_index.tc", "ccsd_terms.tc", "mps.tc"] {
            let file = example(ex);
            let want = stdout_of(&["run", "--interp"], &file);
            for np in [2, 3, 4] {
                let out = mpirun(np, &["run", "--backend", "mpi", "--no-opt"], &file, None).expect("finishes");
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                assert_eq!(String::from_utf8(out.stdout).unwrap(), want, "{ex} on {np} MPI ranks");
            }
            let out = mpirun(3, &["run", "--backend", "mpi", "--schedule", "static", "--stats"], &file, None)
                .expect("finishes");
            assert!(out.status.success());
            let text = String::from_utf8(out.stdout).unwrap();
            let report: String =
                text.lines().take_while(|l| !l.starts_with("stats:")).map(|l| format!("{l}\n")).collect();
            same_report(&report, &want, 1e-10).unwrap();
            assert!(text.contains("stats: 3 ranks, back ends mpi+mpi-p2p, schedule static"), "{text}");
        }
    }

    #[test]
    fn ranks_started_differently_refuse_to_run() {
        // Each rank its own seed (a shell expands the rank number), or its own
        // input file at one path: the ranks would compute a wrong answer or hang.
        let file = example("four_index.tc");
        let script = format!("exec {} run {} --backend mpi --seed $OMPI_COMM_WORLD_RANK", tcc_bin(), file.display());
        let mut cmd = Command::new("mpirun");
        cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "3", "sh", "-c", &script]);
        let t0 = Instant::now();
        let out = run_limited(&mut cmd, Duration::from_secs(90)).expect("the job ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "ranks with different seeds ran: {err}");
        assert!(err.contains("E0763"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(60));
        // The same command line on every rank still runs.
        let out = mpirun(3, &["run", "--backend", "mpi", "--seed", "7"], &file, None).expect("finishes");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn a_failing_mpi_rank_fails_the_job() {
        for mode in ["panic", "exit"] {
            let t0 = Instant::now();
            let out = mpirun(3, &["run", "--backend", "mpi"], &example("four_index.tc"), Some(&format!("1:{mode}")))
                .unwrap_or_else(|| panic!("{mode}: the job hung"));
            assert!(!out.status.success(), "{mode}: the job succeeded");
            assert!(t0.elapsed() < Duration::from_secs(60));
        }
    }
}
