//! IR snapshot tests, in the manner of naga's snapshot driver and Cranelift's
//! filetests: every `tests/ir/*.tc` (sorted by name) is checked with `tcc check`,
//! then each textual IR the built `tcc` prints is pinned with insta under
//! `tests/ir/snapshots/{stem}.{dump}.snap`:
//!
//! | dump      | command                                                        |
//! |-----------|----------------------------------------------------------------|
//! | `hir`     | `tcc opt FILE --emit=hir [--mem-limit M]`                      |
//! | `tir`     | `tcc opt FILE --emit=tir [--mem-limit M]`                      |
//! | `opt`     | `tcc opt FILE --emit=opt [--mem-limit M]`                      |
//! | `lir`     | `tcc opt FILE --emit=lir [--mem-limit M]`                      |
//! | `plan`    | `tcc plan FILE --procs P [--network N] [--mem-per-rank S]`     |
//! | `gpuplan` | `tcc opt FILE --emit=ptx [--gpu-gemm K]`, only                |
//! |           | the launch plan: the `//` comment lines before the PTX itself  |
//!
//! The GPU plan needs no GPU: `--emit=ptx` prints it (as comments) from the cost
//! model's predictions. The PTX body is not pinned (it is LLVM's, and
//! `tests/gpu.rs` already snapshots one kernel). `--mem-limit` is not passed to
//! it: `tcc opt --emit=ptx` currently ignores that flag (the GPU plan lowers with
//! its own 16 GiB budget), and this driver passes no flag that is ignored.
//!
//! # Header
//!
//! A file may start with comment lines of the form
//!
//! ```text
//! // tcc-test: mem-limit=64KiB procs=4,64 network=torus:4x4x4
//! // tcc-test: skip=plan,gpuplan
//! ```
//!
//! anywhere in its leading block of `//` comments (a `tcc-test:` line after the
//! first line of code is an error). Keys, `key=value` separated by spaces; each key
//! at most once per file:
//!
//! * `mem-limit=SIZE`    — `--mem-limit SIZE` for the hir, tir, opt, lir dumps (default: none)
//! * `procs=P[,P...]`    — `--procs` of the `plan` dump (default `4,64`)
//! * `network=NET`       — `--network NET` of the `plan` dump (default: tcc's, fat-tree)
//! * `mem-per-rank=SIZE` — `--mem-per-rank SIZE` of the `plan` dump
//! * `gpu-gemm=KIND`     — `--gpu-gemm KIND` of the `gpuplan` dump (default: auto)
//! * `skip=DUMP[,DUMP]`  — dumps not taken for this file (every skip is explicit)
//!
//! An unknown key, an unknown dump name in `skip`, a repeated key or a malformed
//! entry fails the test: no option is silently ignored.
//!
//! A snapshot that no file and dump produce fails the test (stale: delete it).
//!
//! Update after an intentional IR change: `INSTA_UPDATE=always cargo test --test ir`,
//! then review the diff of `tests/ir/snapshots/` (see `tests/ir/README.md`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every dump, in the order they are taken.
const DUMPS: [&str; 6] = ["hir", "tir", "opt", "lir", "plan", "gpuplan"];

#[derive(Debug, Default, PartialEq)]
struct Header {
    mem_limit: Option<String>,
    procs: Option<String>,
    network: Option<String>,
    mem_per_rank: Option<String>,
    gpu_gemm: Option<String>,
    skip: BTreeSet<String>,
}

const PREFIX: &str = "// tcc-test:";

/// Parses the `// tcc-test:` lines of a file. Errors name the line.
fn parse_header(src: &str) -> Result<Header, String> {
    let mut h = Header::default();
    let mut seen = BTreeSet::new();
    let mut in_header = true;
    for (n, line) in src.lines().enumerate() {
        let n = n + 1;
        let t = line.trim();
        if in_header && !(t.is_empty() || t.starts_with("//")) {
            in_header = false;
        }
        let Some(rest) = t.strip_prefix(PREFIX) else {
            if t.contains("tcc-test") {
                return Err(format!("line {n}: malformed header line (expected `{PREFIX} key=value ...`)"));
            }
            continue;
        };
        if !in_header {
            return Err(format!("line {n}: `{PREFIX}` after the first line of code"));
        }
        let entries: Vec<&str> = rest.split_whitespace().collect();
        if entries.is_empty() {
            return Err(format!("line {n}: empty `{PREFIX}` line"));
        }
        for entry in entries {
            let Some((key, value)) = entry.split_once('=') else {
                return Err(format!("line {n}: `{entry}` is not key=value"));
            };
            if value.is_empty() {
                return Err(format!("line {n}: `{key}` has an empty value"));
            }
            if !seen.insert(key.to_string()) {
                return Err(format!("line {n}: key `{key}` given twice"));
            }
            let v = Some(value.to_string());
            match key {
                "mem-limit" => h.mem_limit = v,
                "procs" => h.procs = v,
                "network" => h.network = v,
                "mem-per-rank" => h.mem_per_rank = v,
                "gpu-gemm" => h.gpu_gemm = v,
                "skip" => {
                    for d in value.split(',') {
                        if !DUMPS.contains(&d) {
                            return Err(format!("line {n}: unknown dump `{d}` in skip (known: {})", DUMPS.join(", ")));
                        }
                        h.skip.insert(d.to_string());
                    }
                }
                _ => {
                    return Err(format!(
                        "line {n}: unknown key `{key}` (known: mem-limit, procs, network, mem-per-rank, gpu-gemm, skip)"
                    ))
                }
            }
        }
    }
    Ok(h)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn corpus() -> Vec<PathBuf> {
    let dir = root().join("tests/ir");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tc"))
        .collect();
    files.sort();
    files
}

/// The arguments of `tcc` for one dump of `rel` (a path relative to the root).
fn args(dump: &str, rel: &str, h: &Header) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let push = |flag: &str, v: &Option<String>, a: &mut Vec<String>| {
        if let Some(v) = v {
            a.push(flag.into());
            a.push(v.clone());
        }
    };
    match dump {
        "plan" => {
            a.extend(["plan".into(), rel.into(), "--color".into(), "never".into()]);
            a.extend(["--procs".into(), h.procs.clone().unwrap_or_else(|| "4,64".into())]);
            push("--network", &h.network, &mut a);
            push("--mem-per-rank", &h.mem_per_rank, &mut a);
        }
        _ => {
            let emit = if dump == "gpuplan" { "ptx" } else { dump };
            a.extend(["opt".into(), rel.into(), "--color".into(), "never".into(), format!("--emit={emit}")]);
            if dump == "gpuplan" {
                push("--gpu-gemm", &h.gpu_gemm, &mut a);
            } else {
                push("--mem-limit", &h.mem_limit, &mut a);
            }
        }
    }
    a
}

/// Runs `tcc ARGS` from the repository root; stdout on success.
fn tcc(args: &[String]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_tcc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("TCC_NUM_THREADS", "1")
        .output()
        .map_err(|e| format!("cannot run tcc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`tcc {}` exited with {}\n--- stdout\n{}--- stderr\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("`tcc {}`: output not UTF-8: {e}", args.join(" ")))
}

/// The launch plan at the top of `--emit=ptx`: its `//` lines before LLVM's banner.
fn gpu_plan(ptx: &str) -> Result<String, String> {
    const BANNER: &str = "// Generated by LLVM NVPTX Back-End";
    let mut lines = Vec::new();
    for line in ptx.lines() {
        if line == BANNER {
            while lines.last().is_some_and(|l: &&str| l.trim() == "//") {
                lines.pop();
            }
            if lines.is_empty() {
                return Err("no launch plan before the PTX".into());
            }
            return Ok(lines.join("\n") + "\n");
        }
        if !line.starts_with("//") {
            return Err(format!("line before `{BANNER}` is not a comment: {line:?}"));
        }
        lines.push(line);
    }
    Err(format!("no `{BANNER}` in the --emit=ptx output"))
}

#[test]
fn ir_snapshots() {
    let files = corpus();
    assert!(files.len() >= 14, "only {} files in tests/ir", files.len());
    let root_str = root().display().to_string();
    let mut failures: Vec<String> = Vec::new();
    let mut taken = 0;
    let mut names = BTreeSet::new();
    for path in &files {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let rel = format!("tests/ir/{}", path.file_name().unwrap().to_string_lossy());
        let src = std::fs::read_to_string(path).unwrap();
        let header = match parse_header(&src) {
            Ok(h) => h,
            Err(e) => {
                failures.push(format!("{rel}: header: {e}"));
                continue;
            }
        };
        if let Err(e) = tcc(&["check".into(), rel.clone(), "--color".into(), "never".into()]) {
            failures.push(format!("{rel}: check: {e}"));
            continue;
        }
        for dump in DUMPS {
            if header.skip.contains(dump) {
                continue;
            }
            let a = args(dump, &rel, &header);
            let out = tcc(&a).and_then(|o| if dump == "gpuplan" { gpu_plan(&o) } else { Ok(o) });
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    failures.push(format!("{rel} [{dump}]: {e}"));
                    continue;
                }
            };
            // No dump should print an absolute path; if one does, keep the snapshot
            // independent of where the repository lives.
            let out = out.replace(&root_str, "[ROOT]");
            let name = format!("{stem}.{dump}");
            names.insert(format!("{name}.snap"));
            let description = format!("tcc {}", a.join(" "));
            let r = std::panic::catch_unwind(|| {
                insta::with_settings!({
                    snapshot_path => root().join("tests/ir/snapshots"),
                    prepend_module_to_snapshot => false,
                    description => description,
                    omit_expression => true,
                }, {
                    insta::assert_snapshot!(name.as_str(), out);
                });
            });
            taken += 1;
            if r.is_err() {
                failures.push(format!("{rel} [{dump}]: snapshot {name} is missing or differs (see above)"));
            }
        }
    }
    // A snapshot no dump produced (a deleted or renamed file, a newly skipped dump)
    // is stale: remove it.
    if failures.is_empty() {
        for e in std::fs::read_dir(root().join("tests/ir/snapshots")).unwrap() {
            let f = e.unwrap().file_name().to_string_lossy().into_owned();
            if f.ends_with(".snap") && !names.contains(&f) {
                failures.push(format!("tests/ir/snapshots/{f}: no file and dump produce it (stale: delete it)"));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {taken} IR snapshots failed:\n  {}", failures.len(), failures.join("\n  "));
    assert!(taken >= 80, "only {taken} snapshots taken");
}

/// The corpus holds a copy of every example, byte for byte, so that a change to an
/// example shows up here too.
#[test]
fn corpus_has_every_example() {
    let dir = root().join("examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "tc") {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let copy = root().join("tests/ir").join(&name);
            let want = std::fs::read(&p).unwrap();
            let got =
                std::fs::read(&copy).unwrap_or_else(|e| panic!("tests/ir/{name}: {e} (copy examples/{name} there)"));
            assert!(got == want, "tests/ir/{name} differs from examples/{name}: copy it again");
            n += 1;
        }
    }
    assert!(n > 0, "no examples found");
}

#[test]
fn header_parsing() {
    let h = parse_header(
        "// tcc-test: mem-limit=64KiB procs=4,64 network=torus:4x4x4\n// a comment\n// tcc-test: skip=plan,gpuplan gpu-gemm=tiled mem-per-rank=1MiB\nrange N = 2;\n",
    )
    .unwrap();
    assert_eq!(h.mem_limit.as_deref(), Some("64KiB"));
    assert_eq!(h.procs.as_deref(), Some("4,64"));
    assert_eq!(h.network.as_deref(), Some("torus:4x4x4"));
    assert_eq!(h.mem_per_rank.as_deref(), Some("1MiB"));
    assert_eq!(h.gpu_gemm.as_deref(), Some("tiled"));
    assert_eq!(h.skip, ["gpuplan", "plan"].iter().map(|s| s.to_string()).collect());
    assert_eq!(parse_header("range N = 2;\n// ordinary comment\n").unwrap(), Header::default());
    for bad in [
        "// tcc-test: memlimit=1KiB\n",                 // unknown key
        "// tcc-test: skip=lir,llvm\n",                 // unknown dump
        "// tcc-test: procs=4 procs=8\n",               // repeated key
        "// tcc-test: procs=4\n// tcc-test: procs=8\n", // repeated across lines
        "// tcc-test: procs\n",                         // not key=value
        "// tcc-test: procs=\n",                        // empty value
        "// tcc-test:\n",                               // empty line
        "//tcc-test: procs=4\n",                        // malformed prefix
        "range N = 2;\n// tcc-test: procs=4\n",         // after code
    ] {
        assert!(parse_header(bad).is_err(), "accepted: {bad:?}");
    }
}
