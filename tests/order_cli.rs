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

/// `tcc opt --max-intermediate` smaller than the order's largest intermediate: the
/// report gives the slicing that fits (indices, slice count, flops overhead), in
/// text and JSON; without it, or with room to spare, there is none.
#[test]
fn opt_reports_a_slicing_under_a_small_max_intermediate() {
    let d = tmp("slice");
    let f = ring_with_chords(&d);
    let plain = tcc().args(["opt", "--search-time", "0"]).arg(&f).assert().success();
    assert!(!stdout(&plain).contains("slicing"), "{}", stdout(&plain));
    let roomy = tcc().args(["opt", "--search-time", "0", "--max-intermediate", "1MiB"]).arg(&f).assert().success();
    assert!(!stdout(&roomy).contains("  slicing"), "{}", stdout(&roomy));
    let a = tcc().args(["opt", "--search-time", "0", "--max-intermediate", "32B"]).arg(&f).assert().success();
    let text = stdout(&a);
    let line = text.lines().find(|l| l.trim_start().starts_with("slicing ")).unwrap_or_else(|| panic!("{text}"));
    // 32 bytes: 4 f64 elements; indices of size 2, so 2^k slices.
    assert!(line.contains("slices keep every intermediate within 32 bytes"), "{line}");
    let slices: f64 = line.split(": ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(slices >= 2.0 && slices.log2().fract() == 0.0, "{line}");
    let largest = line.split(" -> ").nth(1).unwrap().split(' ').next().unwrap();
    assert!(largest.parse::<f64>().unwrap() <= 4.0, "{line}");
    let a = tcc().args(["opt", "--search-time", "0", "--max-intermediate", "32B", "--json"]).arg(&f).assert().success();
    let json: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    let s = json["statements"][0]["slicing"].as_array().unwrap_or_else(|| panic!("{json}"));
    assert_eq!(s.len(), 1, "{json}");
}
