//! The cost model that picks an implementation for each binary contraction
//! (cuBLAS, a tiled kernel, the one-thread-per-output kernel): the predicted
//! seconds of a planned step list on an NVIDIA H200 SXM, from its flops, bytes
//! and launches. Each kernel's time is `launch + max(compute, memory)`, compute
//! at a measured rate for the implementation with its tile and wave
//! quantization, memory at HBM bandwidth over the unique bytes it touches.
//!
//! The constants are the H200's (datasheet, and `bench/gpu/results.md` where
//! measured); on another GPU the choice may be off but the plans stay correct.

use super::*;

/// Streaming multiprocessors of the H200 SXM.
pub const SMS: u64 = 132;
/// HBM3e bandwidth that streaming kernels reach (datasheet 4.8 TB/s), bytes/s.
pub const HBM_BPS: f64 = 4.0e12;
/// A kernel launch on the stream, back to back with others, s.
pub const LAUNCH_S: f64 = 3e-6;
/// Extra host time of a cuBLAS call (argument checks, kernel selection), s.
pub const CUBLAS_CALL_S: f64 = 4e-6;
/// cuBLAS DGEMM on large squares (FP64 tensor cores, DMMA): the datasheet's 67
/// TFLOP/s peak; 56.5 to 61.6 measured with torch.matmul at 8192³.
pub const CUBLAS_F64: f64 = 56e12;
/// cuBLAS SGEMM (plain FP32, no TF32): 50.1 to 50.7 TFLOP/s measured.
pub const CUBLAS_F32: f64 = 50e12;
/// cuBLAS SGEMM on TF32 tensor cores (`--tf32`): about 60 % of the H200's
/// dense TF32 peak of 495 TFLOP/s (a guess until measured).
pub const CUBLAS_TF32: f64 = 300e12;
/// cuBLAS on bf16/f16 A and B (tensor cores, f32 accumulation): about 70 % of
/// the H200's dense 16-bit peak.
pub const CUBLAS_HALF: f64 = 650e12;
/// cuBLAS's output tile, for tile and wave quantization.
const CUBLAS_TILE: u64 = 128;
/// Reductions at least this long let a short side have a narrower tile.
const NARROW_TILE_K: u64 = 128;
/// Reduction length at which a GEMM reaches half its peak rate (prologue and
/// epilogue of every tile).
const K_HALF: f64 = 32.0;
/// Share of HBM bandwidth that cuBLAS reaches on skinny, bandwidth-bound
/// products: 57–65 % on the AO→MO steps at N = 80 (656 MB in 0.253–0.286 ms)
/// and 77 % on `abik,kj->abij` at n = k = 40 (H200, 2026-12-06 suite and
/// sweep; 44–53 % in an earlier, smaller sample); matrix-vector products reach
/// about 90 %, dot products 50 %.
const CUBLAS_MEM_EFF: f64 = 0.6;
const DOT_MEM_EFF: f64 = 0.5;
const GEMV_MEM_EFF: f64 = 0.9;
/// The one-thread-per-output kernel of a contraction: each thread streams its
/// operands through L1/L2 with no reuse in registers (measured 2.5 to 3 TFLOP/s
/// f64, 4.7 f32, when the threads of a warp read consecutive or equal elements;
/// a quarter of that when an operand is read with a stride across threads).
pub const NAIVE_F64: f64 = 2.5e12;
pub const NAIVE_F32: f64 = 4.5e12;
const NAIVE_STRIDED: f64 = 0.25;
/// Share of HBM bandwidth of naive reductions (each thread walks its own stretch
/// of the summed indices: measured 27 to 42 %, 47 % on `akic,ck->ai` at
/// 100 × 40 × 40 × 100 on an H100, 2026-12-06), and of those whose few outputs
/// collect split partial sums with atomics (16 %).
const NAIVE_MEM_EFF: f64 = 0.4;
const NAIVE_ATOMIC_MEM_EFF: f64 = 0.15;
/// Element copies with strided reads or writes (transposes) reach this share of
/// a plain copy's bandwidth; moved through a shared-memory tile
/// ([`Kernel::transpose`]), this one. Measured on an H100 (2026-12-06,
/// bench/gpu/results.md, seven permutations of 2 to 6 indices, 64 MB to
/// 1.5 GB): tiled 0.86–0.99 of a contiguous copy's rate (median 0.95), plain
/// 0.16–0.56 (0.5 where the stride-1 index is long, 0.16 where it is 24).
const STRIDED_COPY: f64 = 0.5;
const TILED_COPY: f64 = 0.9;

/// Tiled kernels: (tile shape, element, registers per thread from `ptxas -v`
/// for sm_90, FLOP/s of the whole GPU when every multiprocessor holds as many
/// blocks as fit), measured on the H200 (bench/gpu/results.md). The plain FP64
/// peak is 33.5 TFLOP/s, FP32 67.
const MEASURED: [(TileCfg, Elem, u64, f64); 6] = [
    (TileCfg { bm: 128, bn: 128, bk: 8, tm: 8, tn: 8, mma: false, stages: 2 }, Elem::F64, 246, 16.7e12),
    (TileCfg { bm: 128, bn: 128, bk: 8, tm: 8, tn: 8, mma: false, stages: 2 }, Elem::F32, 153, 20.2e12),
    (TileCfg { bm: 128, bn: 64, bk: 8, tm: 8, tn: 4, mma: false, stages: 2 }, Elem::F64, 128, 10.5e12),
    (TileCfg { bm: 128, bn: 64, bk: 8, tm: 8, tn: 4, mma: false, stages: 2 }, Elem::F32, 113, 24.1e12),
    (TileCfg { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4, mma: false, stages: 2 }, Elem::F64, 126, 16.6e12),
    (TileCfg { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4, mma: false, stages: 2 }, Elem::F32, 80, 28.0e12),
];
/// f64 tensor-core tiles (`mma.sync` m8n8k4): (tile shape, registers from
/// `ptxas -v` for sm_90, FLOP/s). Measured on an H100 (2026-12-05,
/// bench/gpu/runs/mma-I1-tiles.txt) on CCSD(T) triples at n = 20 and 24 against
/// the FMA tile in the same run: 128×128×8/64×32 0.68 of its speed, 64×64×8/32×32
/// 0.92, 64×64×4/32×32 0.87, expressed as rates relative to the FMA tile's
/// 16.6 TFLOP/s. Slower than the FMA tiles: the loads, address arithmetic and
/// stores around the mma.sync bound these kernels, not the multiplications.
const MEASURED_MMA: [(TileCfg, u64, f64); 3] = [
    (TileCfg { bm: 128, bn: 128, bk: 8, tm: 64, tn: 32, mma: true, stages: 2 }, 222, 11.3e12),
    (TileCfg { bm: 64, bn: 64, bk: 8, tm: 32, tn: 32, mma: true, stages: 2 }, 128, 15.3e12),
    (TileCfg { bm: 64, bn: 64, bk: 4, tm: 32, tn: 32, mma: true, stages: 2 }, 128, 14.4e12),
];
/// f64 tensor-core tiles with their C tile staged through shared memory
/// ([`Epilogue::Staged`], the default for them): (tile shape, FLOP/s of their
/// reduction steps in this model's terms). Fitted on the H200 (2026-12-06,
/// bench/gpu/results.md, the suite run and the tile sweep): on the CCSD(T)
/// triples (k = n = 16, 20, 24) 64×64×8 took 6.6–7.2 µs per round of resident
/// blocks (2–3 steps) and 64×64×4 5.5–6.2 µs (4–6 steps), 0.87× the time of
/// 64×64×8. On a ring of 4 `cp.async` buffers ([`TileCfg::stages`]) 64×64×4
/// took 0.82–0.96 of its time on the n = 24 triples and 0.96–1.05 at n = 20
/// (H200, 2026-12-07, the suite with `TCC_GPU_STAGES=4` against the previous
/// run): 0.88, a rate of 32e12. Other tensor-core shapes staged are unmeasured:
/// their direct rate.
const MEASURED_MMA_STAGED: [(TileCfg, f64); 3] = [
    (TileCfg { bm: 64, bn: 64, bk: 8, tm: 32, tn: 32, mma: true, stages: 2 }, 34e12),
    (TileCfg { bm: 64, bn: 64, bk: 4, tm: 32, tn: 32, mma: true, stages: 2 }, 28e12),
    (TileCfg { bm: 64, bn: 64, bk: 4, tm: 32, tn: 32, mma: true, stages: 4 }, 32e12),
];
/// What a staged tile's memory traffic costs (H200, 2026-12-06 suite and
/// sweep): C is written at about 3.1 TB/s (the triples' n⁶ outputs: 64×64×4
/// 3.0–3.1 TB/s), but operands streamed from HBM come in at only about
/// 1 TB/s: each block waits on its next k slice with few loads in flight
/// (`abik,kj->abij` with a 288 MB operand took 0.336 ms where its output alone
/// needs 0.09; `pqrs,pa->aqrs` at N = 80, 0.597 ms). Reads and writes add up:
/// a block's stores and the next block's loads share the round. Unmeasured: C
/// read where a kernel accumulates (counted at the write rate, as the epilogue
/// reads it just before its stores).
const STAGED_WRITE_BPS: f64 = 3.1e12;
const STAGED_READ_BPS: f64 = 1.0e12;
/// Each block's prologue (first tiles) and epilogue (stores of C) cost about
/// as much as this many reduction steps (fitted to k = 40 … 2000).
const TILE_OVERHEAD_STEPS: f64 = 4.0;

fn measured(e: Elem, cfg: &TileCfg) -> Option<(u64, f64)> {
    let cfg = &same_shape(cfg);
    MEASURED
        .iter()
        .find(|m| m.0 == *cfg && m.1 == e)
        .map(|m| (m.2, m.3))
        .or_else(|| MEASURED_MMA.iter().find(|m| m.0 == *cfg && e == Elem::F64).map(|m| (m.1, m.2)))
}

/// The shape with the register double buffer, under which the tables above
/// were measured: a ring of buffers ([`TileCfg::stages`]) without a row of its
/// own is priced as its shape.
fn same_shape(cfg: &TileCfg) -> TileCfg {
    TileCfg { stages: 2, ..*cfg }
}

/// The staged tensor-core rate of `cfg`: its own row, else its shape's.
fn staged_mma_rate(cfg: &TileCfg) -> Option<f64> {
    let row = |c: TileCfg| MEASURED_MMA_STAGED.iter().find(|m| m.0 == c).map(|m| m.1);
    row(*cfg).or_else(|| row(same_shape(cfg)))
}

/// Tiled kernels on a multiprocessor that holds as many blocks as fit: FLOP/s
/// of the whole GPU; unmeasured shapes get a guess from shared-memory loads per
/// FMA, below the measured ones.
pub fn tiled_rate(e: Elem, cfg: &TileCfg, epi: Epilogue) -> f64 {
    if let Some(r) = staged_mma_rate(cfg).filter(|_| e == Elem::F64 && epi.is_staged()) {
        return r;
    }
    if let Some((_, r)) = measured(e, cfg) {
        return r;
    }
    if cfg.mma {
        // Unmeasured tensor-core shapes: the slowest measured one's rate.
        return MEASURED_MMA.iter().map(|m| m.2).fold(f64::INFINITY, f64::min);
    }
    let per_thread = (cfg.tm * cfg.tn) as f64;
    let eff = per_thread / (per_thread + 2.0 * (cfg.tm + cfg.tn) as f64);
    match e {
        Elem::F64 => 25e12 * eff,
        Elem::F32 | Elem::Bf16 | Elem::F16 => 45e12 * eff,
    }
}

/// Blocks of a tile shape that fit on one multiprocessor: 64K registers (the
/// measured count, else the accumulators, one step's A and B values and the
/// staged loads, plus 40 for addresses), 228 KiB shared memory, 2048 threads.
pub fn blocks_per_sm(e: Elem, cfg: &TileCfg) -> u64 {
    let w = (e.bytes() / 4) as u64;
    let nt = cfg.threads();
    let staged = (cfg.bm + cfg.bn) * cfg.bk / nt;
    let fragments = if cfg.mma { cfg.tm / super::tiled::MMA_M + cfg.tn / super::tiled::MMA_N } else { cfg.tm + cfg.tn };
    let regs = measured(e, cfg).map(|m| m.0).unwrap_or(((cfg.per_thread() + fragments + staged) * w + 40).min(255));
    let by_regs = 65536 / (regs * nt);
    let by_shared = (228 << 10) / cfg.shared_bytes(e).max(1);
    by_regs.min(by_shared).min(2048 / nt).clamp(1, 32)
}

/// Predicted seconds of a tiled kernel for sizes `[batch, m, n, k]` with C read
/// and written (`c_passes` 2) or only stored (1): rounds of resident blocks,
/// each block's reduction steps plus its overhead at the rate its
/// multiprocessor shares among the resident blocks, or the memory traffic.
pub fn tiled_time_c(e: Elem, cfg: &TileCfg, epi: Epilogue, [nb, m, n, k]: [u64; 4], c_passes: u64) -> f64 {
    let blocks = m.div_ceil(cfg.bm) * n.div_ceil(cfg.bn) * nb;
    let per_sm = blocks_per_sm(e, cfg);
    let step_flops = 2.0 * (cfg.bm * cfg.bn * cfg.bk) as f64;
    let step_s = per_sm as f64 * step_flops / (tiled_rate(e, cfg, epi) / SMS as f64);
    let rounds = blocks.div_ceil(SMS * per_sm) as f64;
    let compute = rounds * (k.div_ceil(cfg.bk) as f64 + TILE_OVERHEAD_STEPS) * step_s;
    let eb = e.bytes() as f64;
    if epi.is_staged() && cfg.mma {
        // C's old values, where it accumulates, are read in the epilogue, as its stores go.
        let operands = (nb * (m * k + k * n)) as f64 * eb;
        let c = (c_passes * nb * m * n) as f64 * eb;
        return LAUNCH_S + compute.max(operands / STAGED_READ_BPS + c / STAGED_WRITE_BPS);
    }
    let bytes = (nb * (m * k + k * n + c_passes * m * n)) as f64 * eb;
    LAUNCH_S + compute.max(bytes / HBM_BPS)
}

/// Predicted seconds of one cuBLAS call.
pub fn gemm_time(g: &GemmCall) -> f64 {
    if let Some(h) = g.half {
        return half_gemm_time(h, [g.m, g.n, g.k, g.batch], g.beta);
    }
    gemm_rate_time(g.elem, g.tf32, [g.m, g.n, g.k, g.batch], g.beta)
}

/// A cuBLAS call on 16-bit A and B ([`CUBLAS_HALF`], 2-byte operands).
fn half_gemm_time(h: Elem, [m, n, k, nb]: [u64; 4], beta: f64) -> f64 {
    // The f32 model's shape terms, rescaled to 16-bit rates and bytes.
    let t = gemm_rate_time(Elem::F32, false, [m, n, k, nb], beta) - CUBLAS_CALL_S - LAUNCH_S;
    let bytes = (nb * (m * k + k * n + 2 * m * n)) as f64 * h.bytes() as f64;
    CUBLAS_CALL_S + LAUNCH_S + (t * CUBLAS_F32 / CUBLAS_HALF).max(bytes / (CUBLAS_MEM_EFF * HBM_BPS))
}

/// Predicted seconds of a cuBLAS call of these sizes; with `beta` 0 it reads no C.
pub fn gemm_shape_time(elem: Elem, m: u64, n: u64, k: u64, nb: u64, beta: f64) -> f64 {
    gemm_rate_time(elem, false, [m, n, k, nb], beta)
}

/// [`gemm_shape_time`], f32 on TF32 tensor cores with `tf32`.
fn gemm_rate_time(elem: Elem, tf32: bool, [m, n, k, nb]: [u64; 4], beta: f64) -> f64 {
    let c_passes = if beta == 0.0 { 1 } else { 2 };
    let bytes = (nb * (m * k + k * n + c_passes * m * n)) as f64 * elem.bytes() as f64;
    if m == 1 && n == 1 {
        return CUBLAS_CALL_S + LAUNCH_S + bytes / (DOT_MEM_EFF * HBM_BPS);
    }
    if m == 1 || n == 1 {
        return CUBLAS_CALL_S + LAUNCH_S + bytes / (GEMV_MEM_EFF * HBM_BPS);
    }
    let peak = match elem {
        Elem::F64 => CUBLAS_F64,
        Elem::F32 if tf32 => CUBLAS_TF32,
        Elem::F32 | Elem::Bf16 | Elem::F16 => CUBLAS_F32,
    };
    // With a long reduction a side shorter than the tile gets a narrower one
    // (cuBLAS's kernels for skinny products): `abcde,bdf->acef`, n = 24,
    // k = 576, took 0.055 ms against the 128-wide model's 0.092 (H200,
    // 2026-12-06 23:45). Short reductions keep the wide tile: `ki,abkj->abij`
    // (m = k = 32) ran at a third of HBM bandwidth (0.22–0.29 ms), as that
    // model has it.
    let side = |x: u64| if k >= NARROW_TILE_K { CUBLAS_TILE.min(x.next_power_of_two().max(32)) } else { CUBLAS_TILE };
    let (tm, tn) = (side(m), side(n));
    let tiles = m.div_ceil(tm) * n.div_ceil(tn) * nb;
    let waves = tiles.div_ceil(SMS);
    let padded = 2.0 * (waves * SMS * tm * tn) as f64 * k as f64;
    let k_eff = k as f64 / (k as f64 + K_HALF);
    CUBLAS_CALL_S + LAUNCH_S + (padded / (peak * k_eff)).max(bytes / (CUBLAS_MEM_EFF * HBM_BPS))
}

/// Predicted seconds of a one-thread-per-output kernel (copies included).
fn naive_time(k: &Kernel) -> f64 {
    let par: u64 = k.par.iter().product();
    let red: u64 = k.red.iter().product();
    let eb = k.elem.bytes() as f64;
    // Unique elements an operand touches: the extents of the variables it has.
    let touched = |o: &KOperand| -> f64 {
        let p: u64 = k.par.iter().zip(&o.par_strides).filter(|(_, &s)| s != 0).map(|(n, _)| n).product();
        let r: u64 = k.red.iter().zip(&o.red_strides).filter(|(_, &s)| s != 0).map(|(n, _)| n).product();
        (p * r) as f64 * o.elem.bytes() as f64
    };
    // C is read as well where the kernel adds to it.
    let c_passes = if k.store { 1.0 } else { 2.0 };
    let bytes = c_passes * par as f64 * eb + k.ops.iter().map(touched).sum::<f64>();
    if red == 1 {
        // A copy or an element-wise kernel.
        let strided = k.ops.iter().any(|o| o.par_strides.last().is_some_and(|&s| s > 1))
            || k.out_strides.last().is_some_and(|&s| s > 1);
        let eff = match (k.transpose.is_some(), strided) {
            (true, _) => TILED_COPY,
            (false, true) => STRIDED_COPY,
            (false, false) => 1.0,
        };
        return LAUNCH_S + bytes / (HBM_BPS * eff);
    }
    let flops = (par * red) as f64 * k.ops.len().max(1) as f64;
    let mut rate = match k.elem {
        Elem::F64 => NAIVE_F64,
        Elem::F32 | Elem::Bf16 | Elem::F16 => NAIVE_F32,
    };
    // Threads next to each other differ in the last parallel variable.
    if k.ops.iter().any(|o| o.par_strides.last().is_some_and(|&s| s > 1)) {
        rate *= NAIVE_STRIDED;
    }
    // Fewer threads than the GPU holds leave it partly idle.
    let fill = ((par * k.split) as f64 / (SMS * 2048) as f64).min(1.0);
    let mem_eff = if k.split > 1 && par < 1024 { NAIVE_ATOMIC_MEM_EFF } else { NAIVE_MEM_EFF };
    LAUNCH_S + (flops / (rate * fill.max(1e-3))).max(bytes / (HBM_BPS * mem_eff))
}

/// Predicted seconds of a kernel launch.
pub fn kernel_time(k: &Kernel) -> f64 {
    match &k.tiled {
        Some(t) => tiled_time_c(k.elem, &t.cfg, t.epilogue, t.sizes(), if k.store { 1 } else { 2 }),
        None => naive_time(k),
    }
}

/// Predicted seconds of a step list (host loops multiply their bodies).
pub fn steps_time(steps: &[Step], kernels: &[Kernel], bufs: &[Buf]) -> f64 {
    steps
        .iter()
        .map(|s| match s {
            Step::Loop { extent, body, .. } => *extent as f64 * steps_time(body, kernels, bufs),
            Step::Memset { buf } => LAUNCH_S + (bufs[*buf].elements * bufs[*buf].elem.bytes() as u64) as f64 / HBM_BPS,
            Step::Launch { kernel, .. } => kernel_time(&kernels[*kernel]),
            Step::Gemm(g) => gemm_time(g),
            Step::Choice(c) => c.alts[c.chosen].predicted_s,
        })
        .sum()
}
