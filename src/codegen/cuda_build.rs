//! `tcc build --target cuda`: the PTX of every selected unit and its launch plan.
//!
//! `tcc build FILE.tc --target cuda -o NAME.ptx` writes `NAME.ptx` (one module,
//! every kernel an `.entry`) and `NAME.plan.json` beside it: the host side — the
//! buffers of each unit, the steps in order (host loops, memsets, kernel launches
//! with their grids, cuBLAS calls with sizes, transposes and strides) — and the C
//! host shim `NAME.c` + `NAME.h` that runs the plan's choices ([`super::cuda_shim`]). The runner
//! `tcc-gpu` (built with `--features cuda`; it needs neither LLVM nor CUDA at build
//! time) executes the pair, as `tcc run --target cuda` does in process.
//!
//! A program with complex tensors is planned as its lowering to real parts
//! ([`crate::tir::complex::lower`]): the PTX and the plan are the lowered
//! program's (`X` is `X_re`, `X_im`), and the shim takes interleaved complex
//! arrays ([`super::cuda_shim::write_shim_complex`]).

use super::nvptx::{self, Epilogue, GpuOptions, GpuPlan, TileCfg};
use crate::error::CommandError;
use crate::run::fail;
use crate::sema::hir::Hir;
use std::path::{Path, PathBuf};

/// The plan file beside a PTX file: `NAME.ptx` → `NAME.plan.json`.
pub fn plan_path(ptx: &Path) -> PathBuf {
    ptx.with_extension("plan.json")
}

/// Writes the PTX, the plan and the C shim (whose steps run on up to `streams`
/// CUDA streams); returns a short report for stderr.
/// Every implementation of each binary contraction stays in the plan (and its
/// kernels in the PTX), so that `tcc-gpu --gpu-gemm` can force one.
pub fn build_ptx(
    hir: &Hir,
    program: Option<&str>,
    output: &Path,
    opts: &GpuOptions,
    source_name: &str,
    streams: usize,
) -> Result<String, CommandError> {
    let units = hir.select_units(program)?;
    // TCC_GPU_TILE=bm,bn,bk,tm,tn[,mma][,sN] (benchmarks): one tile shape for every
    // tiled kernel; `mma` for f64 tensor cores (tm × tn is then a warp's tile).
    let tile = match std::env::var("TCC_GPU_TILE") {
        Ok(v) => {
            let mut parts: Vec<&str> = v.split(',').map(str::trim).collect();
            // A trailing `sN`: N operand buffers (N >= 3: filled by cp.async).
            let stages = match parts.last().and_then(|x| x.strip_prefix('s')) {
                Some(n) => {
                    let n = n.parse().ok().filter(|n| TileCfg::STAGES.contains(n));
                    parts.pop();
                    match n {
                        Some(n) => n,
                        None => return Err(fail("E0732", format!("TCC_GPU_TILE=`{v}`: sN needs 2 <= N <= 8"), None)),
                    }
                }
                None => 2,
            };
            let mma = parts.last() == Some(&"mma");
            if mma {
                parts.pop();
            }
            let x: Vec<Option<u64>> = parts.iter().map(|x| x.parse().ok()).collect();
            match x[..] {
                [Some(bm), Some(bn), Some(bk), Some(tm), Some(tn)] => Some(TileCfg { bm, bn, bk, tm, tn, mma, stages }),
                _ => return Err(fail("E0732", format!("TCC_GPU_TILE=`{v}` is not bm,bn,bk,tm,tn[,mma][,sN]"), None)),
            }
        }
        Err(_) => opts.tile,
    };
    // TCC_GPU_IN_PLACE=1|0 (benchmarks): cuBLAS writes permuted outputs in place
    // always / never (default: the cost model decides).
    let in_place = switch("TCC_GPU_IN_PLACE")?.or(opts.in_place);
    // TCC_GPU_MMA=1|0 (benchmarks): f64 tiled kernels on tensor cores always /
    // never (default: the cost model decides among the tile shapes).
    let mma = switch("TCC_GPU_MMA")?.or(opts.mma);
    // TCC_GPU_EPILOGUE=direct|staged|whole (benchmarks): how tiled kernels store
    // their C tile (default: nvptx::default_epilogue of the tile shape).
    let epilogue = match std::env::var("TCC_GPU_EPILOGUE") {
        Ok(v) => match Epilogue::from_name(&v) {
            Some(e) => Some(e),
            None => return Err(fail("E0732", format!("TCC_GPU_EPILOGUE=`{v}` is not direct, staged or whole"), None)),
        },
        Err(_) => opts.epilogue,
    };
    // TCC_GPU_PLAIN_COPIES=1|0 (benchmarks): permuting copies one thread per
    // element instead of through a shared-memory tile.
    let plain_copies = switch("TCC_GPU_PLAIN_COPIES")?.unwrap_or(opts.plain_copies);
    // TCC_GPU_STAGES=N (benchmarks): N operand buffers in the tile shapes the
    // cost model chooses (N >= 3: a ring filled by cp.async).
    // A forced tile shape carries its own count (`,sN`), which this would not change.
    let stages = match std::env::var("TCC_GPU_STAGES") {
        Ok(v) if tile.is_some() => {
            let hint = "give the tile shape its buffers instead: TCC_GPU_TILE=...,sN";
            return Err(fail("E0732", format!("TCC_GPU_STAGES=`{v}` beside a forced tile shape; {hint}"), None));
        }
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if TileCfg::STAGES.contains(&n) => Some(n),
            _ => return Err(fail("E0732", format!("TCC_GPU_STAGES=`{v}` is not 2 to 8"), None)),
        },
        Err(_) => opts.stages,
    };
    // TCC_GPU_MIN_BLOCKS=N (benchmarks): tiled kernels sized for N resident
    // blocks per multiprocessor (ptxas caps their registers).
    let min_blocks = match std::env::var("TCC_GPU_MIN_BLOCKS") {
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if (1..=32).contains(&n) => Some(n),
            _ => return Err(fail("E0732", format!("TCC_GPU_MIN_BLOCKS=`{v}` is not 1 to 32"), None)),
        },
        Err(_) => opts.min_blocks,
    };
    // TCC_GPU_STORE_CS=1|0 (benchmarks): staged epilogues store C evict-first
    // always / never (default: where C is larger than L2).
    let stream_stores = switch("TCC_GPU_STORE_CS")?.or(opts.stream_stores);
    let opts = GpuOptions {
        keep_alternatives: true,
        tile,
        in_place,
        mma,
        epilogue,
        plain_copies,
        stages,
        min_blocks,
        stream_stores,
        ..opts.clone()
    };
    // A complex program: the plan and PTX of its lowering to real parts (which
    // `tcc-gpu` and `tcc run --target cuda` run), a shim taking complex arrays.
    let complex = crate::sema::complex::has_complex(hir).then(|| crate::tir::complex::lower(hir));
    let planned = complex.as_ref().map_or(hir, |(low, _)| low);
    let (plan, ptx) = nvptx::ptx_for(planned, &units, &opts).map_err(|e| fail("E0712", e.0, None))?;
    let write = |p: &Path, s: &str| {
        std::fs::write(p, s).map_err(|e| fail("E0714", format!("cannot write `{}`: {e}", p.display()), None))
    };
    write(output, &ptx)?;
    let pp = plan_path(output);
    write(&pp, &serde_json::to_string_pretty(&plan).expect("plans serialize"))?;
    let shim = match &complex {
        Some((low, map)) => {
            super::cuda_shim::write_shim_complex(hir, (low, map), &plan, &ptx, output, source_name, streams)
        }
        None => super::cuda_shim::write_shim(hir, &plan, &ptx, output, source_name, streams),
    };
    let (c, h) =
        shim.map_err(|e| fail("E0714", format!("cannot write the C shim beside `{}`: {e}", output.display()), None))?;
    Ok(format!(
        "wrote {} ({} kernels, {}), {}, and the C shim {} + {}\n{}",
        output.display(),
        plan.kernels.len(),
        plan.target,
        pp.display(),
        c.display(),
        h.display(),
        nvptx::describe(&plan)
    ))
}

/// A `1|0` benchmark switch of `tcc build --target cuda`: `Some(on)` when set,
/// `None` when not; any other value is E0732.
fn switch(name: &str) -> Result<Option<bool>, CommandError> {
    match std::env::var(name).as_deref() {
        Ok("1") => Ok(Some(true)),
        Ok("0") => Ok(Some(false)),
        Ok(v) => Err(fail("E0732", format!("{name}=`{v}` is not 1 or 0"), None)),
        Err(_) => Ok(None),
    }
}

/// Reads a plan written by [`build_ptx`].
pub fn read_plan(path: &Path) -> Result<GpuPlan, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    serde_json::from_str(&s).map_err(|e| format!("`{}` is not a tcc GPU plan: {e}", path.display()))
}

/// `tcc build --target cuda --tiled`: checks that every selected unit runs tiled
/// on the GPU (planned at the default tile size: no move over more dimensions
/// than the move kernels take) and writes the move kernels'
/// PTX to `output`, which `tcc-gpu --tiled` runs the program with. Returns a
/// short report for stderr.
pub fn build_tiled_ptx(hir: &Hir, program: Option<&str>, output: &Path) -> Result<String, CommandError> {
    let units = hir.select_units(program)?;
    // A complex program is planned as its lowering to (re, im) parts.
    let prepared = crate::pipeline::prepare(hir, &crate::pipeline::PipelineOptions::default());
    let opts = crate::tiled::TiledOptions { threads: 1, ..Default::default() };
    for &u in &units {
        let p = crate::tiled::Program::plan(&prepared, u, &opts)?;
        crate::tiled::device::plan(&p, crate::tiled::device::SCRATCH_LIMIT)?;
    }
    let ptx = nvptx::tile_moves::ptx().map_err(|e| fail("E0712", e.0, None))?;
    std::fs::write(output, ptx)
        .map_err(|e| fail("E0010", format!("cannot write `{}`: {e}", output.display()), None))?;
    Ok(format!(
        "wrote {} (the tile-move kernels; run with `tcc-gpu FILE.tc --tiled --ptx-dir DIR`)\n",
        output.display()
    ))
}
