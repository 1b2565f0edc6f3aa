//! The compiled tile kernel of tiled execution ([`crate::tiled`]): the back end's
//! register-blocked GETT micro-kernel for `f64`, generated for the host CPU once per
//! process and kept loaded, with the cache blocking the back end uses for its own
//! GETT calls. Tile tasks call the runtime's GETT with it, one task per thread.

use super::*;
use std::sync::OnceLock;
use tcc_runtime::kernels::{GettParams, Ukernel, UkernelStrided};

/// A loaded micro-kernel and the GETT blocking that goes with it.
#[derive(Clone, Copy)]
pub struct TileKernel {
    pub uk: Ukernel<f64>,
    /// The same kernel reading unpacked operands (tiles that sit in cache), one
    /// per width: `uks[w - 1]` multiplies slivers of `w` columns, the last is
    /// as wide as `uk`.
    pub uks: &'static [UkernelStrided<f64>],
    pub params: GettParams,
    /// The CPU it was generated for.
    pub cpu: &'static str,
}

impl std::fmt::Debug for TileKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileKernel").field("params", &self.params).field("cpu", &self.cpu).finish()
    }
}

/// The host's `f64` tile kernel, generated on first use.
pub fn tile_kernel() -> Result<TileKernel, CodegenError> {
    static KERNEL: OnceLock<Result<TileKernel, String>> = OnceLock::new();
    KERNEL.get_or_init(|| generate().map_err(|e| e.0)).clone().map_err(CodegenError)
}

fn generate() -> Result<TileKernel, CodegenError> {
    // The context, module and engine live as long as the process: the kernel is
    // called through a plain function pointer from any thread.
    let ctx: &'static Context = Box::leak(Box::new(Context::create()));
    let (tm, cpu, features) = machine(&Options::default())?;
    let module = ctx.create_module("tcc_tile_kernel");
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let bits = vector_bits(&cpu, &features);
    let empty = Hir::default();
    let mut g = Gen {
        ctx,
        module: &module,
        b: ctx.create_builder(),
        hir: &empty,
        cpu: cpu.clone(),
        features,
        bits,
        uk: HashMap::new(),
        bufs: HashMap::new(),
        strides: HashMap::new(),
        runtime: Vec::new(),
        size_vals: HashMap::new(),
        bound: HashMap::new(),
        func: None,
        counter: 0,
        c_abi: false,
        gemm_min: None,
        parallel_min: PARALLEL_MIN_ITERATIONS,
        extents: HashMap::new(),
        acc_slot: None,
        mem_limit: 0,
        nest_peak: 0,
        rates: crate::lir::cost::CpuRates::default(),
        epilogues: HashMap::new(),
        epilogue_done: std::collections::HashSet::new(),
    };
    let uk = g.ukernel(ElemType::F64)?;
    let widths = (1..=uk.nr).map(|w| g.ukernel_strided(ElemType::F64, Some(w))).collect::<Result<Vec<_>, _>>()?;
    let name_of = |f: FunctionValue| -> Result<String, CodegenError> {
        f.set_linkage(Linkage::External);
        Ok(f.get_name().to_str().map_err(|e| err(format!("LLVM: {e}")))?.to_string())
    };
    let name = name_of(uk.f)?;
    let names_s = widths.iter().map(|w| name_of(w.f)).collect::<Result<Vec<_>, _>>()?;
    drop(g);
    // Unrolled, the strided kernel's k loop spills an accumulator (its walking
    // pointers take the registers): measured 1.5-2x slower; the packed kernel
    // is as fast either way at tile sizes.
    let no_unrolling = PassBuilderOptions::create();
    no_unrolling.set_loop_unrolling(false);
    module.verify().map_err(|e| err(format!("LLVM rejected the tile kernel: {}", e.to_string())))?;
    module.run_passes("default<O3>", &tm, no_unrolling).map_err(|e| err(format!("LLVM passes: {}", e.to_string())))?;
    let engine = module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| err(format!("LLVM JIT: {}", e.to_string())))?;
    let addr = |name: &str| engine.get_function_address(name).map_err(|e| err(format!("LLVM JIT: {e:?}")));
    // SAFETY: the micro-kernels have the `Ukernel<f64>` and `UkernelStrided<f64>`
    // signatures (see `gett.rs`).
    let f: Ukernel<f64> = unsafe { std::mem::transmute::<usize, Ukernel<f64>>(addr(&name)?) };
    let mut fs = Vec::with_capacity(names_s.len());
    for name_s in &names_s {
        fs.push(unsafe { std::mem::transmute::<usize, UkernelStrided<f64>>(addr(name_s)?) });
    }
    std::mem::forget(engine);
    std::mem::forget(module);
    let (kc, mc, nc) = super::gett::cache_blocks(ElemType::F64);
    let params = GettParams { mr: uk.mr as i64, nr: uk.nr as i64, mc, nc, kc };
    Ok(TileKernel { uk: f, uks: Box::leak(fs.into_boxed_slice()), params, cpu: Box::leak(cpu.into_boxed_str()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcc_runtime::kernels::{gett_serial, gett_tile, GettDim};

    #[test]
    fn the_unpacked_kernel_equals_the_packed_one_on_edges_and_orientations() {
        let k = tile_kernel().expect("tile kernel");
        let (mr, nr) = (k.params.mr as usize, k.params.nr as usize);
        let sizes = [1, mr - 1, mr, mr + 1, 2 * nr + 1, 37];
        for &m in &sizes {
            for &n in &sizes {
                for &kk in &[1usize, 5, 33] {
                    // A[m,k] with k fastest or m fastest; B[k,n] with n fastest
                    // or k fastest; C[m,n] row-major: every orientation.
                    for (a_mfast, b_nfast) in [(false, true), (true, false), (true, true), (false, false)] {
                        let (sam, sak) = if a_mfast { (1, m as i64) } else { (kk as i64, 1) };
                        let (sbn, sbk) = if b_nfast { (1, n as i64) } else { (kk as i64, 1) };
                        let dims = [
                            GettDim { kind: 1, size: m as i64, sa: sam, sb: 0, sc: n as i64 },
                            GettDim { kind: 2, size: n as i64, sa: 0, sb: sbn, sc: 1 },
                            GettDim { kind: 3, size: kk as i64, sa: sak, sb: sbk, sc: 0 },
                        ];
                        let a: Vec<f64> = (0..m * kk).map(|x| (x as f64 * 0.7).sin()).collect();
                        let b: Vec<f64> = (0..kk * n).map(|x| (x as f64 * 0.3).cos()).collect();
                        let mut want = vec![0.5; m * n];
                        let mut got = want.clone();
                        unsafe {
                            gett_serial(a.as_ptr(), b.as_ptr(), want.as_mut_ptr(), -2.0, &dims, k.params, k.uk, false);
                            gett_tile(
                                a.as_ptr(),
                                b.as_ptr(),
                                got.as_mut_ptr(),
                                -2.0,
                                &dims,
                                k.params,
                                k.uk,
                                k.uks,
                                false,
                            );
                        }
                        for (x, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
                                "{m}x{n}x{kk} {a_mfast} {b_nfast} at {x}: {g} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}
