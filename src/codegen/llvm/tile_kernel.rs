//! The compiled tile kernel of tiled execution ([`crate::tiled`]): the back end's
//! register-blocked GETT micro-kernel for `f64`, generated for the host CPU once per
//! process and kept loaded, with the cache blocking the back end uses for its own
//! GETT calls. Tile tasks call the runtime's GETT with it, one task per thread.

use super::*;
use std::sync::OnceLock;
use tcc_runtime::kernels::{GettParams, Ukernel};

/// A loaded micro-kernel and the GETT blocking that goes with it.
#[derive(Clone, Copy)]
pub struct TileKernel {
    pub uk: Ukernel<f64>,
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
    };
    let uk = g.ukernel(ElemType::F64)?;
    let name = uk.f.get_name().to_str().map_err(|e| err(format!("LLVM: {e}")))?.to_string();
    uk.f.set_linkage(Linkage::External);
    drop(g);
    module.verify().map_err(|e| err(format!("LLVM rejected the tile kernel: {}", e.to_string())))?;
    module
        .run_passes("default<O3>", &tm, PassBuilderOptions::create())
        .map_err(|e| err(format!("LLVM passes: {}", e.to_string())))?;
    let engine = module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| err(format!("LLVM JIT: {}", e.to_string())))?;
    let addr = engine.get_function_address(&name).map_err(|e| err(format!("LLVM JIT: {e:?}")))?;
    // SAFETY: the micro-kernel has the `Ukernel<f64>` signature (see `gett.rs`).
    let f: Ukernel<f64> = unsafe { std::mem::transmute::<usize, Ukernel<f64>>(addr) };
    std::mem::forget(engine);
    std::mem::forget(module);
    let (kc, mc, nc) = super::gett::cache_blocks(ElemType::F64);
    let params = GettParams { mr: uk.mr as i64, nr: uk.nr as i64, mc, nc, kc };
    Ok(TileKernel { uk: f, params, cpu: Box::leak(cpu.into_boxed_str()) })
}
