//! Hostile use of the `tcc` command (issue 23): absurd options, process and memory
//! limits, malformed protocol frames. Each answer is a clear error (exit 1 with an
//! `error[E....]` line), never a panic (exit 2), an abort (a signal) or a hang (the
//! timeouts below). The catalogue is in book/src/reliability.md.

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn tcc() -> Command {
    let mut c = Command::cargo_bin("tcc").unwrap();
    c.timeout(Duration::from_secs(60));
    c
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

fn hostile(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("hostile").join(name)
}

/// Runs `cmd` and asserts exit 1 with `error[CODE]` on stderr; returns stderr.
fn fails_with(cmd: &mut Command, code: &str) -> String {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "expected exit 1 with {code}, got {:?}:\n{err}", out.status);
    assert!(err.contains(&format!("error[{code}]")), "expected {code}:\n{err}");
    assert!(!err.contains("internal compiler error"), "{err}");
    err
}

/// Whether `prlimit` (util-linux) can run here.
fn have_prlimit() -> bool {
    std::process::Command::new("prlimit").arg("--version").output().is_ok_and(|o| o.status.success())
}

// ---- 1. rank counts -------------------------------------------------------------

#[test]
fn absurd_rank_counts_are_errors_before_allocating() {
    for ranks in ["18446744073709551615", "1000000000", "4097"] {
        let err = fails_with(tcc().arg("run").arg(example("matmul.tc")).args(["--ranks", ranks]), "E0750");
        assert!(err.contains("4096"), "{err}");
        fails_with(tcc().args(["tune", "--out", "-", "--ranks", ranks]), "E0750");
        fails_with(
            tcc().args(["plan-model"]).arg(example("long_seq.tc")).args(["--execute", "ulysses", "--ranks", ranks]),
            "E0750",
        );
        fails_with(tcc().arg("run").arg(example("matmul.tc")).args(["--plan", "--ranks", ranks]), "E0750");
    }
}

/// A rank thread that cannot be created is an error, and the ranks already started
/// stop instead of waiting forever for it. Thread stacks of 1 GiB
/// (`RUST_MIN_STACK`) under a 16 GiB address-space limit make the 16th thread fail
/// (a process-count limit, `prlimit --nproc`, does not bind root).
#[test]
fn rank_thread_creation_failure_is_an_error_not_a_hang() {
    if !have_prlimit() {
        eprintln!("skipped: no prlimit");
        return;
    }
    let tcc_bin = assert_cmd::cargo::cargo_bin("tcc");
    let mut c = Command::new("prlimit");
    c.arg("--as=17179869184").arg(&tcc_bin).arg("run").arg(example("matmul.tc")).args(["--ranks", "300"]);
    c.env("RUST_MIN_STACK", "1073741824").timeout(Duration::from_secs(60));
    let err = fails_with(&mut c, "E0751");
    assert!(err.contains("cannot create the thread of rank"), "{err}");
    assert_eq!(err.matches("error[").count(), 1, "one error, not one per rank:\n{err}");
}

// ---- 2. sizes and bytes -----------------------------------------------------------

#[test]
fn tune_max_bytes_is_bounded() {
    for b in ["64GiB", "18446744073709551615", "2GiB"] {
        let err = fails_with(tcc().args(["tune", "--out", "-", "--max-bytes", b]), "E0753");
        assert!(err.contains("1GiB"), "{err}");
    }
}

/// `range N = 2147483647` under a 4 GiB address-space limit: the 16 GiB input
/// cannot be allocated, which is E0754 on every path, not an abort (SIGABRT).
#[test]
fn tensors_beyond_a_memory_limit_are_an_error_not_an_abort() {
    if !have_prlimit() {
        eprintln!("skipped: no prlimit");
        return;
    }
    let tcc_bin = assert_cmd::cargo::cargo_bin("tcc");
    for mode in [&["--interp"][..], &[], &["--check"], &["--ranks", "2"], &["--ranks", "2", "--plan"]] {
        let mut c = Command::new("prlimit");
        c.arg("--as=4294967296").arg(&tcc_bin).arg("run").arg(hostile("huge_range.tc")).args(mode);
        c.timeout(Duration::from_secs(60));
        let err = fails_with(&mut c, "E0754");
        assert!(err.contains("cannot allocate"), "{mode:?}: {err}");
    }
}

// ---- 5. silent misuse -------------------------------------------------------------

#[test]
fn meaningless_run_options_are_errors() {
    let m = example("matmul.tc");
    fails_with(tcc().arg("run").arg(&m).args(["--repeat", "0"]), "E0755");
    for extra in [&["--check"][..], &["--interp"], &["--repeat", "3"], &["--target-cpu", "generic"]] {
        let err = fails_with(tcc().arg("run").arg(&m).args(["--ranks", "2"]).args(extra), "E0756");
        assert!(err.contains(extra[0]), "{err}");
    }
    fails_with(tcc().arg("run").arg(&m).args(["--plan", "--check"]), "E0756");
    // --schedule says how ranks or tiled runs claim tasks: elsewhere it did nothing.
    for extra in [
        &["--schedule", "static"][..],
        &["--schedule", "dynamic", "--plan", "--ranks", "2"],
        &["--schedule", "static", "--interp"],
    ] {
        let err = fails_with(tcc().arg("run").arg(&m).args(extra), "E0756");
        assert!(err.contains("--schedule"), "{err}");
    }
    for extra in [&["--schedule", "static", "--tiled"][..], &["--schedule", "static", "--ranks", "2"]] {
        tcc().arg("run").arg(&m).args(extra).assert().success();
    }
    for bad in ["garbage", "0", "-1", ""] {
        let err = fails_with(tcc().arg("run").arg(&m).env("TCC_NUM_THREADS", bad), "E0757");
        assert!(err.contains("TCC_NUM_THREADS"), "{err}");
    }
    tcc().arg("run").arg(&m).env("TCC_NUM_THREADS", "2").assert().success();
    for bad in ["yes", "2", ""] {
        let err = fails_with(tcc().arg("run").arg(&m).env("TCC_TASK_SETS", bad), "E0660");
        assert!(err.contains("TCC_TASK_SETS"), "{err}");
    }
    for good in ["0", "off", "1", "on"] {
        tcc().arg("run").arg(&m).env("TCC_TASK_SETS", good).assert().success();
    }
    for bad in ["on", "2", ""] {
        let err = fails_with(tcc().arg("run").arg(&m).env("TCC_GETT_COLUMNS", bad), "E0767");
        assert!(err.contains("TCC_GETT_COLUMNS"), "{err}");
    }
    for good in ["0", "1"] {
        tcc().arg("run").arg(&m).env("TCC_GETT_COLUMNS", good).assert().success();
    }
    for bad in ["off", "2", ""] {
        let err = fails_with(tcc().arg("run").arg(&m).env("TCC_GETT_EPILOGUE", bad), "E0329");
        assert!(err.contains("TCC_GETT_EPILOGUE"), "{err}");
    }
    for good in ["0", "1"] {
        tcc().arg("run").arg(&m).env("TCC_GETT_EPILOGUE", good).assert().success();
    }
    for bad in ["no", "2", ""] {
        let err = fails_with(tcc().arg("run").arg(&m).env("TCC_GETT_INIT", bad), "E0768");
        assert!(err.contains("TCC_GETT_INIT"), "{err}");
    }
    for good in ["0", "1"] {
        tcc().arg("run").arg(&m).env("TCC_GETT_INIT", good).assert().success();
    }
}

/// The GPU tile benchmark switches refuse what they cannot mean: a ring of
/// fewer than 2 or more than 8 operand buffers, a count that is no number, or
/// a count for every shape beside one forced shape.
#[test]
fn bad_gpu_tile_switches_are_errors() {
    let m = example("matmul.tc");
    let out = tempfile::tempdir().unwrap();
    let build = || {
        let mut c = tcc();
        c.args(["build", "--target", "cuda"]).arg(&m).arg("-o").arg(out.path().join("m.ptx"));
        c
    };
    for bad in ["1", "9", "four", ""] {
        let err = fails_with(build().env("TCC_GPU_STAGES", bad), "E0732");
        assert!(err.contains("TCC_GPU_STAGES"), "{err}");
    }
    for bad in ["64,64,4,32,32,mma,s1", "64,64,4,32,32,mma,s9", "64,64,4,32,32,mma,sx"] {
        let err = fails_with(build().env("TCC_GPU_TILE", bad), "E0732");
        assert!(err.contains("TCC_GPU_TILE"), "{err}");
    }
    // Beside a forced tile shape it would change nothing: refused, not ignored.
    let err = fails_with(build().env("TCC_GPU_STAGES", "4").env("TCC_GPU_TILE", "64,64,4,32,32,mma"), "E0732");
    assert!(err.contains("TCC_GPU_STAGES") && err.contains(",sN"), "{err}");
    build().env("TCC_GPU_STAGES", "4").assert().success();
    build().env("TCC_GPU_TILE", "64,64,4,32,32,mma,s4").assert().success();
    for (var, bad) in [
        ("TCC_GPU_EPILOGUE", "all"),
        ("TCC_GPU_STORE_CS", "yes"),
        ("TCC_GPU_MIN_BLOCKS", "0"),
        ("TCC_GPU_MIN_BLOCKS", "33"),
        ("TCC_GPU_MIN_BLOCKS", "many"),
    ] {
        let err = fails_with(build().env(var, bad), "E0732");
        assert!(err.contains(var), "{err}");
    }
    build()
        .env("TCC_GPU_EPILOGUE", "whole")
        .env("TCC_GPU_STORE_CS", "1")
        .env("TCC_GPU_MIN_BLOCKS", "4")
        .assert()
        .success();
}

#[test]
fn meaningless_plan_model_options_are_errors() {
    let m = example("long_seq.tc");
    let plan = || {
        let mut c = tcc();
        c.arg("plan-model").arg(&m).args(["--devices", "4"]);
        c
    };
    for opt in ["--layers", "--gpus-per-node", "--top"] {
        let err = fails_with(plan().args([opt, "0"]), "E0815");
        assert!(err.contains(opt), "{err}");
    }
    fails_with(tcc().arg("plan-model").arg(&m).args(["--devices", "0"]), "E0815");
    fails_with(tcc().arg("plan-model").arg(&m).args(["--execute", "ulysses", "--layers", "0"]), "E0815");
    let err = fails_with(plan().args(["--dim", "seq=4096", "--dim", "seq=8192"]), "E0816");
    assert!(err.contains("seq=4096") && err.contains("seq=8192"), "{err}");
    plan().args(["--dim", "seq=4096"]).assert().success();
}

// ---- 4. fork() ---------------------------------------------------------------------

/// A generated library called in a child of `fork()` after the parent used it: the
/// runtime's pool (threads the child does not have) must not make the child wait
/// forever; the parent's pool keeps working.
#[test]
fn generated_library_works_in_a_fork_child() {
    let have_gcc = std::process::Command::new("gcc").arg("--version").output().is_ok_and(|o| o.status.success());
    if !have_gcc {
        eprintln!("skipped: no gcc");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    tcc().arg("build").arg(hostile("fork_matmul.tc")).arg("-o").arg(dir.join("libfm.so")).assert().success();
    std::fs::copy(hostile("fork.c"), dir.join("fork.c")).unwrap();
    let out = std::process::Command::new("gcc")
        .current_dir(dir)
        .args(["-Wall", "-Werror", "-o", "fork_c", "fork.c", "-I.", "-L.", "-lfm"])
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
    for threads in ["2", "4"] {
        let out = Command::new(dir.join("fork_c"))
            .env("TCC_NUM_THREADS", threads)
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
            "TCC_NUM_THREADS={threads}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ---- 3. the language server ---------------------------------------------------------

fn frame(body: &str) -> String {
    format!("Content-Length: {}\r\n\r\n{body}", body.len())
}

/// The JSON bodies of the frames in `out`.
fn frames(out: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(out);
    let mut rest: &str = &text;
    let mut v = Vec::new();
    while let Some(at) = rest.find("Content-Length: ") {
        let after = &rest[at + 16..];
        let end = after.find("\r\n\r\n").expect("header end");
        let n: usize = after[..end].trim().parse().unwrap();
        let body = &after[end + 4..end + 4 + n];
        v.push(serde_json::from_str(body).expect("server sent invalid JSON"));
        rest = &after[end + 4 + n..];
    }
    v
}

/// One frame with a Content-Length 3 bytes short, one 3 bytes long, and requests
/// with ids 2^32, 1.5 and null: the server resynchronizes on the next header,
/// answers every request it can read (invalid ids with `null`, 2^32 as given) and
/// exits on `exit` while its input is still open.
#[test]
fn lsp_survives_bad_frames_and_answers_every_id() {
    use std::io::Write as _;
    let req = |id: &str, method: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{}}}}"#);
    let mut input = frame(&req("1", "initialize"));
    input += &frame(r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#);
    let short = req("2", "tcc/unknown");
    input += &format!("Content-Length: {}\r\n\r\n{short}", short.len() - 3);
    input += &frame(&req("3", "tcc/unknown"));
    let long = req("20", "tcc/unknown");
    input += &format!("Content-Length: {}\r\n\r\n{long}", long.len() + 3);
    input += &frame(r#"{"jsonrpc":"2.0","method":"$/lost","params":{}}"#); // eaten by the long frame
    input += &frame(&req("4294967296", "tcc/unknown"));
    input += &frame(&req("1.5", "tcc/unknown"));
    input += &frame(&req("null", "tcc/unknown"));
    input += &frame(&req("4", "shutdown"));
    input += &frame(r#"{"jsonrpc":"2.0","method":"exit"}"#);

    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tcc"))
        .arg("lsp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    stdin.flush().unwrap();
    // stdin stays open: only `exit` may end the server.
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the server did not exit after `exit`");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(status.code(), Some(0), "shutdown then exit is status 0");
    let answers: Vec<serde_json::Value> =
        frames(&out).into_iter().filter(|m| m.get("method").is_none()).map(|m| m["id"].clone()).collect();
    let want: Vec<serde_json::Value> =
        ["1", "3", "4294967296", "null", "null", "4"].iter().map(|s| serde_json::from_str(s).unwrap()).collect();
    assert_eq!(answers, want, "{}", String::from_utf8_lossy(&out));
}

#[test]
fn hostile_characters_in_a_source_reach_no_terminal_raw() {
    // Escape sequences, NUL, bidi overrides and C1 controls in a source (and in
    // its name) are shown inert in diagnostics: no byte of them reaches stderr.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("evil\u{1b}[2J.tc");
    std::fs::write(
        &f,
        "range N = 3;\u{1b}[2J\u{1b}]0;title\u{7}\0 index i : N;\ninput tensor A[i] \u{202E}: f64;\u{85}\n",
    )
    .unwrap();
    let out = tcc().args(["check"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("E0001"), "{err}");
    for bad in ['\u{1b}', '\0', '\u{7}', '\u{202E}', '\u{85}'] {
        assert!(!err.contains(bad), "{bad:?} reached stderr:\n{err:?}");
    }
    assert!(err.contains("\\u{1b}"), "the message names the character, escaped:\n{err}");
    // A byte-order mark is not an error; a lone carriage return ends a line
    // everywhere, comments included (so what an editor shows on its own line
    // after `// note\r` is code, compiled as such).
    let bom = dir.path().join("bom.tc");
    std::fs::write(&bom, "\u{FEFF}range N = 3; index i : N; input tensor A[i]; output tensor B[i]; B[i] = A[i];\n")
        .unwrap();
    tcc().args(["check"]).arg(&bom).assert().success();
    let cr = dir.path().join("cr.tc");
    std::fs::write(&cr, "range N = 3; index i : N; // note\rinput tensor A[i]; output tensor B[i]; B[i] = A[i];\n")
        .unwrap();
    tcc().args(["check"]).arg(&cr).assert().success();
}

#[test]
fn usage_errors_are_json_when_json_is_asked_for() {
    for args in [&["--error-format=json", "run", "--ranks", "x"][..], &["--error-format", "json", "run", "--bogus"]] {
        let out = tcc().args(args).arg(example("matmul.tc")).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("{e}: {err}"));
        assert_eq!(v["code"], "E0700");
        assert_eq!(v["severity"], "error");
        assert!(v["message"].as_str().unwrap().contains("--"), "{v}");
    }
    // Without it, clap's text as before.
    let out = tcc().args(["run", "--ranks", "x"]).arg(example("matmul.tc")).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: invalid value"));
}

// ---- 6. what fuzzing found (fuzz/, issue 23) ------------------------------------

/// A network value whose number is finite and positive but whose unit scales it to
/// zero or infinity (`2.5e-320ps`, `1e308PB/s`) is E0801; it gave a latency of 0 or
/// a bandwidth of infinity (found by the `parsers` fuzz target).
#[test]
fn network_values_scaled_out_of_range_are_errors() {
    for net in ["fat-tree:lat=2.5e-320ps", "fat-tree:bw=1e308PB/s", "torus:4x4,flops=1e300PF/s"] {
        let err =
            fails_with(tcc().arg("plan").arg(example("matmul.tc")).args(["--procs", "4", "--network", net]), "E0801");
        assert!(err.contains("out of range"), "{net}: {err}");
    }
    let err = fails_with(
        tcc()
            .arg("plan")
            .arg(example("matmul.tc"))
            .args(["--procs", "4", "--network"])
            .arg(hostile("network_out_of_range.toml")),
        "E0801",
    );
    assert!(err.contains("`1e308PB/s` is out of range"), "{err}");
}

/// A `.npy` header that npyz reads but tcc's shape check did not (`"shape"` in
/// double quotes, a key given twice, an escape in a key): the unchecked shape
/// 2^32 × 2^32 × 2 overflowed inside npyz. Now tcc reads the header itself (the
/// form numpy writes, either quote; any other is refused) and checks its shape
/// (found while writing the `npy` fuzz target, which fails on it).
#[test]
fn npy_headers_other_than_numpys_are_errors() {
    let input = format!("A={}", hostile("npy_shape_in_double_quotes.npy").display());
    for interp in [true, false] {
        let mut cmd = tcc();
        cmd.arg("run").arg(example("matmul.tc")).args(["--input", &input]);
        if interp {
            cmd.arg("--interp");
        }
        let err = fails_with(&mut cmd, "E0706");
        assert!(err.contains("the array's shape [4294967296, 4294967296, 2] has more elements"), "{err}");
    }
}

/// Garbage of 8190 bytes without a line break before a frame: its header was cut
/// in two where the reader's 8192-byte pieces ended, and the frame was lost. The
/// server now answers the request after it (found while writing the `lsp_transport`
/// fuzz target, which fails on it).
#[test]
fn lsp_reads_a_frame_after_a_long_garbage_line() {
    let garbage = std::fs::read(hostile("lsp_long_garbage_line.txt")).unwrap();
    let mut input = garbage;
    input.extend(frame(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#).bytes());
    input.extend(frame(r#"{"jsonrpc":"2.0","id":2,"method":"shutdown"}"#).bytes());
    input.extend(frame(r#"{"jsonrpc":"2.0","method":"exit"}"#).bytes());
    let out = tcc().arg("lsp").write_stdin(input).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let ids: Vec<serde_json::Value> =
        frames(&out.stdout).into_iter().filter(|m| m.get("method").is_none()).map(|m| m["id"].clone()).collect();
    assert_eq!(ids, [serde_json::json!(1), serde_json::json!(2)], "{}", String::from_utf8_lossy(&out.stdout));
}
