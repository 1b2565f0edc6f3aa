//! `--search-time` and `--objective` through the command line: the hyper-optimizer
//! on a network beyond the exact search, checked against the interpreter, and bad
//! values as coded errors.

use assert_cmd::Command;

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

/// A closed ring of 18 tensors with three chords (21 indices of size 2): beyond the
/// exact DP (16 tensors), small enough for the interpreter to check.
fn ring_with_chords(dir: &std::path::Path) -> std::path::PathBuf {
    let n = 18;
    let mut edges: Vec<(usize, usize)> = (0..n).map(|k| (k, (k + 1) % n)).collect();
    edges.extend([(0, 9), (3, 14), (6, 12)]);
    let mut idx = vec![Vec::new(); n];
    for (i, &(a, b)) in edges.iter().enumerate() {
        idx[a].push(format!("i{i}"));
        idx[b].push(format!("i{i}"));
    }
    let names: Vec<String> = (0..edges.len()).map(|i| format!("i{i}")).collect();
    let mut src = format!("range D = 2;\nindex {} : D;\n", names.join(", "));
    for (t, ix) in idx.iter().enumerate() {
        src += &format!("input tensor T{t}[{}] : f64;\n", ix.join(","));
    }
    src += "output tensor Z : f64;\nZ = ";
    src += &idx.iter().enumerate().map(|(t, ix)| format!("T{t}[{}]", ix.join(","))).collect::<Vec<_>>().join(" * ");
    src += ";\n";
    let path = dir.join("ring18.tc");
    std::fs::write(&path, src).unwrap();
    path
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tcc-order-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stdout(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8(a.get_output().stdout.clone()).unwrap()
}

#[test]
fn hyper_beyond_the_exact_search_greedy_with_zero_time() {
    let f = ring_with_chords(&tmp("opt"));
    let hyper = tcc().args(["opt", "--search-time", "0.3"]).arg(&f).assert().success();
    assert!(stdout(&hyper).contains("order [hyper]"), "{}", stdout(&hyper));
    let greedy = tcc().args(["opt", "--search-time", "0"]).arg(&f).assert().success();
    assert!(stdout(&greedy).contains("order [greedy]"), "{}", stdout(&greedy));
    for obj in ["flops", "size", "combined"] {
        tcc().args(["opt", "--search-time", "0.2", "--objective", obj]).arg(&f).assert().success();
    }
}

#[test]
fn run_check_and_build_take_the_options() {
    let d = tmp("run");
    let f = ring_with_chords(&d);
    for obj in ["flops", "combined"] {
        tcc().args(["run", "--check", "--search-time", "0.3", "--objective", obj]).arg(&f).assert().success();
    }
    tcc()
        .args(["build", "--search-time", "0.2", "--objective", "size", "-o"])
        .arg(d.join("libring.so"))
        .arg(&f)
        .assert()
        .success();
}

#[test]
fn bad_values_are_coded_errors() {
    let d = tmp("bad");
    let f = ring_with_chords(&d);
    for t in ["-1", "soon", "inf", "NaN", "1e9"] {
        let a = tcc().args(["opt", "--search-time", t]).arg(&f).assert().code(1);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(err.contains("error[E0728]") && err.contains(t), "{t}: {err}");
    }
    for (cmd, o) in [("opt", "time"), ("run", "FLOPS"), ("build", "")] {
        let mut c = tcc();
        c.args([cmd, "--objective", o]).arg(&f);
        if cmd == "build" {
            c.arg("-o").arg(d.join("libbad.so"));
        }
        let a = c.assert().code(1);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(err.contains("error[E0729]") && err.contains("flops, size"), "{o}: {err}");
    }
}
