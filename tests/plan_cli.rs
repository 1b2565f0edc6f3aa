//! `tcc plan` as a user runs it: report, JSON, Graphviz, sweeps, networks, errors.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn tcc() -> Command {
    Command::cargo_bin("tcc").unwrap()
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

const MM: &str = "range M = 1024; range K = 1024; range N = 1024; index i : M; index k : K; index j : N;
input tensor A[i,k] : f64; input tensor B[k,j] : f64; output tensor C[i,j] : f64;
C[i,j] = A[i,k] * B[k,j];\n";

fn mm(dir: &Path) -> PathBuf {
    let p = dir.join("mm.tc");
    std::fs::write(&p, MM).unwrap();
    p
}

#[test]
fn report_shows_grid_ops_costs_and_bound() {
    let d = tempfile::tempdir().unwrap();
    tcc()
        .arg("plan")
        .arg(mm(d.path()))
        .args(["--procs", "64", "--network", "torus:4x4x4"])
        .assert()
        .success()
        .stdout(predicate::str::contains("grid 4x4x4: g0=i (free-left), g1=j (free-right), g2=k (contracted)"))
        .stdout(predicate::str::contains("all-gather"))
        .stdout(predicate::str::contains("reduce-scatter"))
        .stdout(predicate::str::contains("words/bound 1.000"));
}

#[test]
fn json_has_steps_ops_and_exact_counts() {
    let d = tempfile::tempdir().unwrap();
    let out = tcc().arg("plan").arg(mm(d.path())).args(["--procs", "16", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &v["plans"][0];
    assert_eq!(plan["procs"], 16);
    let step = &plan["steps"][0];
    assert_eq!(step["grid"].as_array().unwrap().iter().map(|g| g.as_u64().unwrap()).product::<u64>(), 16);
    assert!(step["ops"].as_array().unwrap().iter().all(|o| o["from"]["grid"].is_array() && o["recv_max"].is_u64()));
    assert!(step["ratio"].as_f64().unwrap() >= 1.0);
    assert!(step["bound"]["words"].as_f64().unwrap() > 0.0);
}

#[test]
fn dot_is_a_graph_with_declared_nodes() {
    let out = tcc().arg("plan").arg(example("four_index.tc")).args(["--procs", "8", "--dot"]).output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.starts_with("digraph "));
    assert_eq!(s.matches('{').count(), s.matches('}').count());
    let mut declared = std::collections::HashSet::new();
    for line in s.lines().map(str::trim) {
        if let Some((id, rest)) = line.split_once(" [") {
            if !id.contains("->") && rest.contains("label=") {
                declared.insert(id.to_string());
            }
        }
    }
    let edges: Vec<&str> = s.lines().filter(|l| l.contains(" -> ")).collect();
    assert!(edges.len() >= 8, "{s}");
    for e in edges {
        let (a, rest) = e.trim().split_once(" -> ").unwrap();
        let b = rest.split_whitespace().next().unwrap();
        assert!(declared.contains(a) && declared.contains(b), "edge {e} uses undeclared nodes");
    }
    assert_eq!(s.matches("step ").count(), 4, "{s}");
}

#[test]
fn sweep_prints_one_row_per_p() {
    let d = tempfile::tempdir().unwrap();
    tcc()
        .arg("plan")
        .arg(mm(d.path()))
        .args(["--procs", "4,64,1024,4096"])
        .assert()
        .success()
        .stdout(predicate::str::contains("sweep:"))
        .stdout(predicate::str::is_match(r"(?m)^  mm +4096 ").unwrap())
        .stdout(predicate::str::is_match(r"(?m)^  mm +4 ").unwrap());
}

#[test]
fn sweep_reports_what_does_not_fit() {
    let d = tempfile::tempdir().unwrap();
    tcc()
        .arg("plan")
        .arg(mm(d.path()))
        .args(["--procs", "1,64", "--mem-per-rank", "4MiB"])
        .assert()
        .success()
        .stdout(predicate::str::contains("P = 1: does not fit"));
    tcc()
        .arg("plan")
        .arg(mm(d.path()))
        .args(["--procs", "1", "--mem-per-rank", "4MiB"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("E0803"));
}

#[test]
fn toml_network_file() {
    let d = tempfile::tempdir().unwrap();
    let net = d.path().join("net.toml");
    std::fs::write(&net, "# a small torus\ntopology = \"torus\"\ndims = [4, 4, 4]\nbw = \"10GB/s\"\nlat = \"1us\"\n")
        .unwrap();
    tcc()
        .arg("plan")
        .arg(mm(d.path()))
        .args(["--procs", "64", "--network"])
        .arg(&net)
        .assert()
        .success()
        .stdout(predicate::str::contains("torus 4x4x4"));
}

#[test]
fn bad_networks_and_procs_are_user_errors() {
    let d = tempfile::tempdir().unwrap();
    let f = mm(d.path());
    for (args, msg) in [
        (vec!["--procs", "4", "--network", "hypercube:4"], "unknown network kind"),
        (vec!["--procs", "4", "--network", "fat-tree:bw=fast"], "does not start with a number"),
        (vec!["--procs", "4", "--network", "torus:4xZ"], "torus dimensions"),
        (vec!["--procs", "128", "--network", "torus:4x4x4"], "do not fit on network"),
        (vec!["--procs", "0"], "--procs must be"),
        (vec!["--procs", "4", "--network", "/nonexistent/net.toml"], "cannot read network file"),
        // Keys only model-parallel plans use are refused, not ignored.
        (vec!["--procs", "4", "--network", "fat-tree:bw=25GB/s,hbm=3TB/s"], "`hbm=` describes"),
        (vec!["--procs", "4", "--network", "fat-tree:cpu-adam=1e9"], "does not use it"),
    ] {
        tcc().arg("plan").arg(&f).args(&args).assert().code(1).stderr(predicate::str::contains(msg));
    }
}

#[test]
fn every_example_plans() {
    for ex in ["matmul.tc", "ccsd_terms.tc", "four_index.tc", "attention.tc", "model_mlp.tc", "chain4.tc", "mps.tc"] {
        tcc().arg("plan").arg(example(ex)).args(["--procs", "4,16"]).assert().success();
    }
}
