//! Vector accesses for element-wise kernels: a pass over a finished plan that
//! gives each kernel it can prove safe `lanes > 1` ([`Kernel::lanes`]), so that
//! a thread loads and stores 16 bytes at a time instead of one element (a
//! bf16 SwiGLU moved one 2-byte element per thread at 40 % of the bandwidth).
//!
//! It runs on the whole plan, not on each kernel as it is made, because a
//! kernel is shared by every launch of the same shape and whether its vectors
//! are aligned depends on each launch's arguments (host-loop offsets, slices
//! of unions), in every alternative a runner may force.

use super::*;

/// The most bytes one vector access moves (`ld.global.v4.f32`, `v2.f64`,
/// eight 16-bit elements).
const VECTOR_BYTES: u64 = 16;

/// Gives every kernel of `plan` the lanes its shape and all its launches allow.
pub(super) fn widen(plan: &mut GpuPlan) {
    let mut lanes: Vec<u64> = plan.kernels.iter().map(shape_lanes).collect();
    for u in &plan.units {
        narrow_by_launches(&u.steps, &plan.kernels, &mut lanes);
    }
    for (k, l) in plan.kernels.iter_mut().zip(lanes) {
        k.lanes = l;
    }
}

/// Whether operand `o` moves as vectors: stride 1 along the last parallel
/// variable (stride 0 is one element every lane shares).
pub(super) fn is_vector_operand(o: &KOperand) -> bool {
    o.par_strides.last() == Some(&1)
}

/// The lanes kernel `k`'s shape allows: a summing kernel with no reduction
/// whose output and operands have stride 1 or 0 along the last parallel
/// variable; as many lanes as fit 16 bytes of its widest vector, when they
/// divide that variable's extent and every other stride of the vectors (each
/// vector then lies in one row, aligned relative to its buffer's start). 1
/// otherwise.
fn shape_lanes(k: &Kernel) -> u64 {
    let elementwise =
        k.tiled.is_none() && k.transpose.is_none() && k.combine == Combine::Sum && k.red.is_empty() && k.split == 1;
    let (Some(&last), Some(&1)) = (k.par.last(), k.out_strides.last()) else { return 1 };
    if !elementwise || k.ops.iter().any(|o| o.par_strides.last().is_some_and(|&s| s > 1)) {
        return 1;
    }
    let vectors: Vec<&KOperand> = k.ops.iter().filter(|o| is_vector_operand(o)).collect();
    let widest = vectors.iter().map(|o| o.elem.bytes()).chain([k.out_elem().bytes()]).max().unwrap_or(8) as u64;
    let lanes = VECTOR_BYTES / widest;
    let n = k.par.len();
    let rows_aligned = k.out_strides[..n - 1].iter().chain(vectors.iter().flat_map(|o| &o.par_strides[..n - 1]));
    if lanes > 1 && last.is_multiple_of(lanes) && rows_aligned.clone().all(|s| s.is_multiple_of(lanes)) {
        lanes
    } else {
        1
    }
}

/// Sets `lanes[k]` to 1 for every kernel launched, in `steps` or any
/// alternative, with an output or vector operand whose offset from its
/// buffer's start (256-byte aligned, as `cuMemAlloc`'s) can be no multiple of
/// the lanes.
fn narrow_by_launches(steps: &[Step], kernels: &[Kernel], lanes: &mut [u64]) {
    for s in steps {
        match s {
            Step::Loop { body, .. } => narrow_by_launches(body, kernels, lanes),
            Step::Choice(c) => c.alts.iter().for_each(|a| narrow_by_launches(&a.steps, kernels, lanes)),
            Step::Launch { kernel, args } => {
                let l = lanes[*kernel];
                let k = &kernels[*kernel];
                let vector_args = args.iter().enumerate().filter(|(j, _)| *j == 0 || is_vector_operand(&k.ops[j - 1]));
                let aligned = |a: &Arg| a.offset.is_multiple_of(l) && a.base.iter().all(|&(_, s)| s.is_multiple_of(l));
                if !vector_args.map(|(_, a)| a).all(aligned) {
                    lanes[*kernel] = 1;
                }
            }
            Step::Memset { .. } | Step::Gemm(_) => {}
        }
    }
}
