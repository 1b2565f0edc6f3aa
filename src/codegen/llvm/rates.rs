//! `tcc tune --cpu`: measures the rates of the CPU time model
//! ([`crate::lir::cost::CpuRates`]) by compiling and timing small programs through
//! this back end, at the thread count compiled code uses (`TCC_NUM_THREADS`).

use super::{jit_run, CodegenError, Options};
use crate::lir::cost::CpuRates;

/// Best-of-`repeat` seconds of the one program in `src`, and its flops.
fn time(src: &str, opts: &Options, repeat: usize) -> Result<(f64, f64), CodegenError> {
    let (hir, diags) = crate::compile(src, "tune");
    let hir = hir.ok_or_else(|| super::err(format!("internal: a tuning program does not compile: {diags:?}")))?;
    let unit = crate::sema::hir::UnitId::new(0);
    let inputs = crate::interp::random_inputs(&hir, unit, 1).map_err(|e| super::err(e.to_string()))?;
    let r = jit_run(&hir, unit, &inputs, opts, repeat)?;
    Ok((r.run_s, r.flops))
}

fn matmul(n: usize) -> String {
    format!(
        "range N = {n}; index i, j, k : N; input tensor A[i,k] : f64; input tensor B[k,j] : f64; \
         output tensor C[i,j] : f64; C[i,j] = A[i,k] * B[k,j];"
    )
}

/// `C[i,j] = a * B[j,k]` with `a` = `A[i,k]` (contiguous dot products) or
/// `A[k,i]` (one operand strided along the reduction).
fn dots(n: usize, a: &str) -> String {
    format!(
        "range N = {n}; index i, j, k : N; input tensor A[{}] : f64; input tensor B[j,k] : f64; \
         output tensor C[i,j] : f64; C[i,j] = {a} * B[j,k];",
        &a[2..a.len() - 1]
    )
}

fn copy(n: usize) -> String {
    format!("range N = {n}; index i, j : N; input tensor A[i,j] : f64; output tensor C[i,j] : f64; C[i,j] = A[i,j];")
}

/// Measures every rate; takes a few seconds.
pub fn measure(target_cpu: Option<String>) -> Result<CpuRates, CodegenError> {
    let opts = Options { target_cpu, ..Options::default() };
    let (t, flops) = time(&matmul(1536), &opts, 3)?;
    let gett_flops = flops / t;
    // Contractions with the kernel switched off: generated loops. The slower of a
    // matrix product (vectorized along the output) and the same product as dot
    // products (a reduction innermost: what fused slices typically become), one
    // of them strided.
    let loops = Options { gemm_min: Some(f64::INFINITY), ..opts.clone() };
    let (t, flops) = time(&matmul(256), &loops, 3)?;
    let (t_dot, flops_dot) = time(&dots(256, "A[i,k]"), &loops, 3)?;
    let (t_str, flops_str) = time(&dots(256, "A[k,i]"), &loops, 3)?;
    let loop_flops = (flops / t).min(flops_dot / t_dot).min(flops_str / t_str);
    // A copy moves 16 bytes per element as the model counts it (read + write).
    let n = 4096;
    let (t, _) = time(&copy(n), &opts, 3)?;
    let mem_bandwidth = 16.0 * (n * n) as f64 / t;
    let cache_bytes = 1024.0 * 1024.0;
    let n = 180; // two 253 KiB buffers: within `cache_bytes`
    let (t, _) = time(&copy(n), &opts, 50)?;
    let cache_bandwidth = (16.0 * (n * n) as f64 / t).max(mem_bandwidth);
    // The smallest GETT the back end calls: what it costs beyond its flops.
    let (t, flops) = time(&matmul(32), &opts, 200)?;
    let gett_call = (t - flops / gett_flops).max(0.0);
    let rates = CpuRates { gett_flops, loop_flops, mem_bandwidth, cache_bandwidth, cache_bytes, gett_call };
    rates.validate().map_err(|e| super::err(format!("measured rates are not usable: {e}")))?;
    Ok(rates)
}
