//! `tcc-gpu`: runs PTX and launch plans written by `tcc build --target cuda` on the
//! GPU. It links neither LLVM nor CUDA (the driver and cuBLAS are loaded at run
//! time), so it can be carried to a GPU machine that has neither a Rust toolchain
//! nor LLVM. The report is `tcc run`'s.
//!
//! ```text
//! tcc-gpu FILE.tc... [--ptx-dir DIR] [--check] [--repeat N] [--seed S] [--tiled [--tile N]]
//!                    [--output-dir D [--save-inputs]] [--keep-going]
//!                    [--gpu-gemm auto|cublas|tiled|naive] [--variants KIND,...] [--streams N]
//! ```
//! `--streams N` runs a unit's independent steps on N CUDA streams (default 4,
//! as `tcc run --target cuda`; 1: every step in order on one stream); not with
//! `--tiled`, whose rounds run on one stream.
//! `--tiled [--tile N]` runs each program on symmetry-packed, block-sparse tiles
//! (`tcc run --tiled`'s task sets as batched GEMMs and tile moves on the GPU;
//! ranges without a declared tile are cut in tiles of N, default 50), reading the
//! move kernel from `DIR/FILE.ptx` as `tcc build FILE.tc --target cuda --tiled`
//! writes it.
//! `--gpu-gemm` runs that implementation of every binary contraction where the
//! plan kept it (`tcc build --target cuda` keeps all that apply), instead of
//! the cost model's choice. `--variants cublas,tiled,naive` also runs each of
//! those (timed like the plan, outputs compared with the plan's) and prints a
//! `variant KIND: time = ...` line for each, skipping those predicted to take
//! more than `--variant-limit` seconds (default 1).
//! For `FILE.tc` it reads `DIR/FILE.ptx` and `DIR/FILE.plan.json` (DIR: the
//! file's folder by default). With several files and `--keep-going`, each prints
//! `PASS FILE` or `FAIL FILE: why`, and a final count. Exit 1 on any failure.
//! A program with complex tensors runs the plan of its lowering to real parts
//! (what `tcc build --target cuda` writes for it; with `--tiled`, its parts on
//! tiles) on the inputs' parts, and `--check` compares the joined outputs with
//! the complex interpreter.

use std::collections::HashMap;

use std::path::{Path, PathBuf};
use tcc::codegen::cuda;
use tcc::codegen::cuda_build::read_plan;
use tcc::codegen::nvptx::GemmKind;
use tcc::error::CommandError;
use tcc::run::{fail, run_report, RunOptions};
use tcc::tiled::device::GPU_TILE;

/// How to run each file.
struct Mode {
    check: bool,
    repeat: usize,
    /// `--tiled`: the tile size of ranges that declare none (`--tile`).
    tiled: Option<usize>,
    force: Option<GemmKind>,
    variants: Vec<GemmKind>,
    variant_limit_s: f64,
    /// `--streams N`: streams for independent steps (1: one stream).
    streams: usize,
}

fn run_file(file: &Path, dir: Option<&Path>, opts: &RunOptions, mode: &Mode) -> Result<(), CommandError> {
    let (check, repeat, force) = (mode.check, mode.repeat, mode.force);
    let src = std::fs::read_to_string(file)
        .map_err(|e| fail("E0010", format!("cannot read `{}`: {e}", file.display()), None))?;
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let (hir, diags) = tcc::compile(&src, &stem);
    let hir = hir.ok_or_else(|| {
        fail("E0001", format!("`{}` does not compile: {} diagnostics", file.display(), diags.len()), None)
    })?;
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| file.parent().map(Path::to_path_buf).unwrap_or_default());
    let ptx_path = dir.join(format!("{stem}.ptx"));
    let ptx = std::fs::read_to_string(&ptx_path).map_err(|e| {
        fail(
            "E0010",
            format!("cannot read `{}`: {e}", ptx_path.display()),
            Some(format!(
                "write it with `tcc build FILE.tc --target cuda{} -o FILE.ptx`",
                if mode.tiled.is_some() { " --tiled" } else { "" }
            )),
        )
    })?;
    if let Some(tile) = mode.tiled {
        let r = tcc::tiled::run::TiledRun {
            tiled: tcc::tiled::TiledOptions { tile, auto_tile: false, threads: 1, ..Default::default() },
            check,
            stats: false,
            gpu: Some(tcc::tiled::run::GpuTiled { ptx, repeat }),
        };
        let stdout = std::io::stdout();
        if tcc::sema::complex::has_complex(&hir) {
            // The lowered program's (re, im) parts on tiles; `--check` against
            // the complex interpreter.
            let exec = tcc::run::complex::ComplexExec::Tiled(&r);
            return tcc::run::complex::run_complex(&hir, opts, exec, &mut stdout.lock());
        }
        return tcc::tiled::run::run_tiled(&hir, opts, &r, &mut stdout.lock());
    }
    let mut plan = read_plan(&dir.join(format!("{stem}.plan.json"))).map_err(|e| fail("E0010", e, None))?;
    if let Some(kind) = force {
        let (_, without) = plan.force(kind);
        if without > 0 {
            eprintln!(
                "note: {}: {without} contractions have no {} implementation and keep the planned one",
                file.display(),
                kind.name()
            );
        }
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    // A complex program: the plan is its lowering's (`tcc build --target cuda`),
    // run on the inputs' parts; `--check` compares with the complex interpreter.
    if tcc::sema::complex::has_complex(&hir) {
        if !mode.variants.is_empty() {
            eprintln!("note: {}: --variants is not run for complex programs", file.display());
        }
        let (low, _) = tcc::tir::complex::lower(&hir);
        let mut exec = |u: tcc::sema::hir::UnitId, parts: &HashMap<tcc::sema::hir::TensorId, tcc::tensor::Dense>| {
            let one = unit_plan(&plan, &hir, u)?;
            let r = cuda::run_plan(&low, &one, &ptx, 0, parts, repeat, mode.streams)?;
            let extra = cuda::report_lines(&low, u, &one, &r, 0.0, false, parts)?;
            Ok((r.outputs, extra))
        };
        let exec = tcc::run::complex::ComplexExec::Parts { check, exec: &mut exec };
        return tcc::run::complex::run_complex(&hir, opts, exec, &mut lock);
    }
    run_report(&hir, opts, &mut lock, &mut |u, inputs| {
        let one = unit_plan(&plan, &hir, u)?;
        let r = cuda::run_plan(&hir, &one, &ptx, 0, inputs, repeat, mode.streams)?;
        let mut extra = cuda::report_lines(&hir, u, &one, &r, 0.0, check, inputs)?;
        for &kind in &mode.variants {
            let mut v = one.clone();
            if v.force(kind).0 == 0 {
                extra.push(format!("variant {}: not applicable", kind.name()));
                continue;
            }
            // A benchmark guard: some forced kinds are hopeless (a tiled kernel
            // for a full contraction runs one block).
            let predicted = tcc::codegen::nvptx::cost::steps_time(&v.units[0].steps, &v.kernels, &v.units[0].buffers);
            if predicted > mode.variant_limit_s {
                extra.push(format!("variant {}: skipped (predicted {predicted:.3} s)", kind.name()));
                continue;
            }
            let rv = cuda::run_plan(&hir, &v, &ptx, 0, inputs, repeat, mode.streams)?;
            let (l, g) = v.units[0].launches();
            let tflops = if rv.run_s > 0.0 { rv.flops / rv.run_s / 1e12 } else { 0.0 };
            let min_tol = if v.uses_tf32() || one.uses_tf32() { tcc::run::compare::TOL_TF32 } else { 0.0 };
            let rel = tcc::run::compare::compare_outputs_within(&hir, u, &rv.outputs, &r.outputs, min_tol)
                .map_err(|e| fail("E0713", format!("variant {}: {e}", kind.name()), None))?;
            extra.push(format!(
                "variant {}: time = {:.3} ms  ({tflops:.3} TFLOP/s; {l} kernel launches, {g} cuBLAS calls; max relative difference to the plan's outputs {rel:.2e})",
                kind.name(),
                rv.run_s * 1e3
            ));
        }
        Ok((r.outputs, extra))
    })
}

fn main() -> std::process::ExitCode {
    let mut files = Vec::new();
    let mut dir: Option<PathBuf> = None;
    let (mut check, mut repeat, mut keep) = (false, 1usize, false);
    let mut opts = RunOptions::default();
    let mut force = None;
    let mut variants = Vec::new();
    let mut variant_limit_s = 1.0;
    let mut tiled = None;
    let mut streams: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--tiled" => tiled = Some(tiled.unwrap_or(GPU_TILE)),
            "--tile" => match args.next().and_then(|x| x.parse::<usize>().ok()).filter(|&n| n > 0) {
                Some(n) => tiled = Some(n),
                None => {
                    eprintln!("error: --tile takes a positive tile size");
                    return std::process::ExitCode::from(2);
                }
            },
            "--streams" => match args.next().and_then(|x| x.parse::<usize>().ok()).filter(|&n| n > 0) {
                Some(n) => streams = Some(n),
                None => {
                    eprintln!("error: --streams takes a positive number of streams");
                    return std::process::ExitCode::from(2);
                }
            },
            "--keep-going" => keep = true,
            "--save-inputs" => opts.save_inputs = true,
            "--ptx-dir" => dir = args.next().map(PathBuf::from),
            "--output-dir" => opts.output_dir = args.next().map(PathBuf::from),
            "--repeat" => repeat = args.next().and_then(|x| x.parse().ok()).unwrap_or(1),
            "--seed" => opts.seed = args.next().and_then(|x| x.parse().ok()).unwrap_or(0),
            "--program" => opts.program = args.next(),
            "--variants" => {
                for k in args.next().unwrap_or_default().split(',') {
                    match GemmKind::from_name(k) {
                        Some(kind) => variants.push(kind),
                        None => {
                            eprintln!("error: --variants takes cublas, tiled or naive, comma-separated (got `{k}`)");
                            return std::process::ExitCode::from(2);
                        }
                    }
                }
            }
            "--variant-limit" => variant_limit_s = args.next().and_then(|x| x.parse().ok()).unwrap_or(1.0),
            "--gpu-gemm" => match args.next().as_deref() {
                Some("auto") => force = None,
                Some(k) if GemmKind::from_name(k).is_some() => force = GemmKind::from_name(k),
                other => {
                    eprintln!(
                        "error: --gpu-gemm takes auto, cublas, tiled or naive (got {})",
                        other.unwrap_or("nothing")
                    );
                    return std::process::ExitCode::from(2);
                }
            },
            _ => files.push(PathBuf::from(a)),
        }
    }
    if streams.is_some() && tiled.is_some() {
        eprintln!(
            "error: --streams applies to plan runs, not to --tiled (tiled runs issue their rounds on one stream)"
        );
        return std::process::ExitCode::from(2);
    }
    if let Err(why) = cuda::device() {
        eprintln!("error[E0730]: {}\n  help: {why}", cuda::NO_DEVICE);
        return std::process::ExitCode::from(1);
    }
    let streams = streams.unwrap_or(tcc::codegen::nvptx::streams::DEFAULT_STREAMS);
    let mode = Mode { check, repeat, tiled, force, variants, variant_limit_s, streams };
    let (mut pass, mut failed) = (0, 0);
    let mut seen: HashMap<String, ()> = HashMap::new();
    for f in &files {
        seen.insert(f.display().to_string(), ());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_file(f, dir.as_deref(), &opts, &mode)));
        match r {
            Ok(Ok(())) => {
                pass += 1;
                if keep {
                    println!("PASS {}", f.display());
                }
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("FAIL {}: {}", f.display(), e.message);
                if !keep {
                    break;
                }
            }
            Err(_) => {
                failed += 1;
                println!("FAIL {}: panic", f.display());
                if !keep {
                    break;
                }
            }
        }
    }
    if keep {
        println!("tcc-gpu: {pass} passed, {failed} failed");
    }
    if failed > 0 {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// The plan of unit `u` alone (its kernels and that unit's steps).
fn unit_plan(
    plan: &tcc::codegen::nvptx::GpuPlan,
    hir: &tcc::sema::hir::Hir,
    u: tcc::sema::hir::UnitId,
) -> Result<tcc::codegen::nvptx::GpuPlan, tcc::error::CommandError> {
    let k = plan
        .units
        .iter()
        .position(|p| p.unit == u)
        .ok_or_else(|| fail("E0702", format!("the plan has no unit {}", hir.units[u].name), None))?;
    Ok(tcc::codegen::nvptx::GpuPlan {
        target: plan.target.clone(),
        kernels: plan.kernels.clone(),
        units: vec![plan.units[k].clone()],
    })
}
