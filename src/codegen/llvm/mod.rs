//! The CPU back end: LIR loop nests → LLVM IR (inkwell, LLVM 14) → optimized native
//! code, run in process (JIT) or written as an object file for a shared library.
//!
//! Per unit (program or model) the module holds
//!
//! * `tcc_NAME__body(T* noalias, ...)` — one pointer argument per input then per
//!   output (in [`super::cabi::abi_args`] order: declaration order); allocates the
//!   unit's temporaries (sliced as the fusion decided), runs the loop nest, frees
//!   them; returns 0, or 1 if an allocation failed;
//! * `tcc_NAME__argv(T** argv)` — the same with the pointers in an array (the JIT's
//!   entry point);
//! * with the C ABI of a library `LIB` ([`write_object`]): `int tcc_LIB_NAME(const
//!   T* A, size_t A_len, ..., T* C, size_t C_len)`, which validates every pointer and
//!   length first (see `book/src/abi.md`), `const char* tcc_LIB_last_error(void)`
//!   (reading a thread-local of this module only) and `const char*
//!   tcc_LIB_version(void)`. The `__body`/`__argv` functions are then hidden.
//!
//! Statements become loops over the indices their enclosing LIR loops leave free.
//! A binary contraction big enough to pay for packing becomes a call of the
//! runtime's GETT ([`tcc_runtime::kernels`]) with the index groups, strides and
//! cache blocking chosen here, and a register-blocked micro-kernel generated here
//! with LLVM vector types sized for the target (`MR = 2 × lanes`, `NR` from the
//! register count). Everything else is plain loops ordered so the innermost one
//! runs along the written tensor's contiguous dimension, for LLVM's vectorizer.
//! The module is optimized with LLVM's `default<O3>` pipeline for the target CPU
//! (the host's by default).

use super::lower::unit_flops;
use crate::lir::fusion::fusible;
use crate::lir::{Buffer, LoopNest, Node};
use crate::pipeline::PipelineOptions;
use crate::sema::hir::{ElemType, Func, Hir, IndexId, RangeId, Role, Stmt, TensorId, UnitId};
use crate::tensor::Dense;
use inkwell::attributes::AttributeLoc;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, FloatType};
use inkwell::values::{BasicMetadataValueEnum, BasicValue, FloatValue, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, FloatPredicate, GlobalVisibility, IntPredicate, OptimizationLevel};
use std::collections::HashMap;
use std::path::Path;

/// A failure of the back end (LLVM refused something, linking failed, ...).
mod epilogue;
mod gett;
pub mod jit_lib;
mod tile_kernel;
pub use tile_kernel::{tile_kernel, TileKernel};
mod loops;
pub mod rates;
mod sizes;
mod slices;
mod tasks;

use gett::GettPlan;
use sizes::Poly;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CodegenError(pub String);

impl From<BuilderError> for CodegenError {
    fn from(e: BuilderError) -> Self {
        CodegenError(format!("LLVM builder: {e:?}"))
    }
}

/// [`crate::tensor::try_vec`] for the JIT's buffers: a [`CodegenError`] whose
/// message starts with "cannot allocate" ([`CodegenError::is_out_of_memory`]).
fn try_vec<T>(what: &str, n: usize) -> Result<Vec<T>, CodegenError> {
    crate::tensor::try_vec(&format!("tensor `{what}`"), n).map_err(|e| err(e.to_string()))
}

impl CodegenError {
    /// Memory for a buffer could not be allocated (the run's fault, not the code's).
    pub fn is_out_of_memory(&self) -> bool {
        self.0.starts_with("cannot allocate ")
    }
}

fn err(s: impl Into<String>) -> CodegenError {
    CodegenError(s.into())
}

/// How to generate code.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// LLVM CPU name (`skylake-avx512`, `x86-64`, ...); `None` or `native`: the host.
    pub target_cpu: Option<String>,
    /// Also emit the validated C-ABI entry points, `tcc_LIB_last_error` and
    /// `tcc_LIB_version`, for the library named `tcc` ([`write_object`] names it).
    pub c_abi: bool,
    /// Bytes of temporaries the fused nests may keep live at once: the least fused
    /// nest that fits is compiled (whole contractions map to large GEMMs). `None`:
    /// [`DEFAULT_MEM_LIMIT`].
    pub mem_limit: Option<u64>,
    /// What fusion optimizes (`--fuse`); `auto` prices nests with `rates`.
    pub fuse: crate::lir::fusion::FuseMode,
    /// The machine's kernel rates for the time model (`tcc tune --cpu`).
    pub rates: crate::lir::cost::CpuRates,
    /// Map a binary contraction to the GETT kernel when `m·n·k` reaches this;
    /// `None`: when `m, n ≥ 8`, `k ≥ 4` and `m·n·k ≥ 32768` (tests lower it to
    /// exercise the kernel on small, odd shapes).
    pub gemm_min: Option<f64>,
    /// Loop nests of at least this many iterations run on the thread pool; `None`:
    /// [`PARALLEL_MIN_ITERATIONS`] (tests lower it).
    pub parallel_min: Option<f64>,
    /// Ranges whose sizes the generated functions take as arguments (in this
    /// order, before the tensors): their sizes in the HIR are only assumptions,
    /// used for choices that do not change values (loop order, threads, GETT or
    /// loops, blocking). Empty: every size is a compile-time constant.
    pub runtime_ranges: Vec<RangeId>,
    /// The contraction-order search (`--objective`, `--search-time`).
    pub order: crate::tir::opmin::Options,
}

/// The default temporary-memory budget of compiled code: 2 GiB.
pub const DEFAULT_MEM_LIMIT: u64 = 2 << 30;

/// One compiled unit.
#[derive(Debug, Clone)]
pub struct UnitCode {
    pub unit: UnitId,
    pub name: String,
    /// Inputs then outputs: the pointer arguments, in order.
    pub args: Vec<TensorId>,
    pub n_inputs: usize,
    /// Floating-point operations of one run (see [`unit_flops`]); with run-time
    /// sizes, at the assumed sizes.
    pub flops: f64,
    /// The run-time ranges the unit uses ([`Options::runtime_ranges`] it touches):
    /// the size arguments, first, in this order.
    pub sizes: Vec<RangeId>,
}

/// The run-time ranges among the dimensions of the tensors unit `u` of the
/// prepared program touches (temporaries included), in `runtime`'s order.
fn unit_sizes(prepared: &Hir, u: UnitId, runtime: &[RangeId]) -> Vec<RangeId> {
    let used = prepared.unit_ranges(u);
    runtime.iter().copied().filter(|r| used.contains(r)).collect()
}

/// A module with its target machine and the program it was generated from.
pub struct Compiled<'ctx> {
    pub module: Module<'ctx>,
    pub machine: TargetMachine,
    /// The prepared program the code implements (tensor ids of inputs and outputs
    /// are those of the original).
    pub hir: Hir,
    pub units: Vec<UnitCode>,
}

/// The CPU name and feature string for `opts` (the host's by default).
pub fn target_cpu(opts: &Options) -> (String, String) {
    match opts.target_cpu.as_deref() {
        None | Some("native") => {
            (TargetMachine::get_host_cpu_name().to_string(), TargetMachine::get_host_cpu_features().to_string())
        }
        Some(c) => (c.to_string(), String::new()),
    }
}

/// The x86 CPUs LLVM 14 can generate 64-bit code for (`llc -mcpu=help`, less the
/// 32-bit-only ones, on which LLVM aborts instead of returning an error).
#[cfg(target_arch = "x86_64")]
const KNOWN_CPUS: &[&str] = &[
    "alderlake",
    "amdfam10",
    "athlon-fx",
    "athlon64",
    "athlon64-sse3",
    "atom",
    "barcelona",
    "bdver1",
    "bdver2",
    "bdver3",
    "bdver4",
    "bonnell",
    "broadwell",
    "btver1",
    "btver2",
    "cannonlake",
    "cascadelake",
    "cooperlake",
    "core-avx-i",
    "core-avx2",
    "core2",
    "corei7",
    "corei7-avx",
    "generic",
    "goldmont",
    "goldmont-plus",
    "haswell",
    "icelake-client",
    "icelake-server",
    "ivybridge",
    "k8",
    "k8-sse3",
    "knl",
    "knm",
    "nehalem",
    "nocona",
    "opteron",
    "opteron-sse3",
    "penryn",
    "rocketlake",
    "sandybridge",
    "sapphirerapids",
    "silvermont",
    "skx",
    "skylake",
    "skylake-avx512",
    "slm",
    "tigerlake",
    "tremont",
    "westmere",
    "x86-64",
    "x86-64-v2",
    "x86-64-v3",
    "x86-64-v4",
    "znver1",
    "znver2",
    "znver3",
];

/// Refuses a `--target-cpu` LLVM cannot generate code for (LLVM would abort).
fn check_cpu(cpu: &str) -> Result<(), CodegenError> {
    #[cfg(target_arch = "x86_64")]
    if !KNOWN_CPUS.contains(&cpu) {
        return Err(err(format!(
            "unknown or 32-bit-only CPU `{cpu}` for --target-cpu; use `native` or one of: {}",
            KNOWN_CPUS.join(", ")
        )));
    }
    let _ = cpu;
    Ok(())
}

/// Widest vector register in bits for a CPU and feature string.
fn vector_bits(cpu: &str, features: &str) -> u32 {
    let has = |f: &str| features.split(',').any(|x| x == f);
    if !features.is_empty() {
        return if has("+avx512f") {
            512
        } else if has("+avx2") && has("+fma") {
            256
        } else {
            128
        };
    }
    let c = cpu.to_ascii_lowercase();
    let wide = [
        "avx512",
        "skylake-avx512",
        "cascadelake",
        "cooperlake",
        "icelake",
        "tigerlake",
        "sapphirerapids",
        "rocketlake",
        "znver4",
        "x86-64-v4",
        "graniterapids",
        "emeraldrapids",
    ];
    let mid = [
        "haswell",
        "broadwell",
        "skylake",
        "alderlake",
        "raptorlake",
        "meteorlake",
        "znver1",
        "znver2",
        "znver3",
        "x86-64-v3",
        "cannonlake",
        "kabylake",
        "coffeelake",
    ];
    if wide.iter().any(|w| c.contains(w)) {
        512
    } else if mid.iter().any(|w| c.contains(w)) {
        256
    } else {
        128
    }
}

fn machine(opts: &Options) -> Result<(TargetMachine, String, String), CodegenError> {
    Target::initialize_native(&InitializationConfig::default()).map_err(|e| err(format!("LLVM: {e}")))?;
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(|e| err(format!("LLVM: {e}")))?;
    let (cpu, features) = target_cpu(opts);
    if opts.target_cpu.as_deref().is_some_and(|c| c != "native") {
        check_cpu(&cpu)?;
    }
    let tm = target
        .create_target_machine(
            &triple,
            &cpu,
            &features,
            OptimizationLevel::Aggressive,
            RelocMode::PIC,
            CodeModel::Default,
        )
        .ok_or_else(|| err(format!("LLVM cannot generate code for CPU `{cpu}`")))?;
    Ok((tm, cpu, features))
}

/// Generates and optimizes the code of `units` of `hir`.
pub fn compile<'ctx>(
    ctx: &'ctx Context,
    hir: &Hir,
    units: &[UnitId],
    opts: &Options,
) -> Result<Compiled<'ctx>, CodegenError> {
    compile_lib(ctx, hir, units, opts, opts.c_abi.then_some("tcc"))
}

/// [`compile`], with the C ABI of library `lib` when it is `Some`.
fn compile_lib<'ctx>(
    ctx: &'ctx Context,
    hir: &Hir,
    units: &[UnitId],
    opts: &Options,
    lib: Option<&str>,
) -> Result<Compiled<'ctx>, CodegenError> {
    let mut popts = PipelineOptions::with_mem_limit(Some(opts.mem_limit.unwrap_or(DEFAULT_MEM_LIMIT)));
    popts.fusion.mode = opts.fuse;
    popts.fusion.rates = opts.rates;
    popts.order = opts.order.clone();
    let (prepared, nests) = crate::pipeline::prepare_fused(hir, units, &popts);
    let (tm, cpu, features) = machine(opts)?;
    // LLVM's remarks and warnings (e.g. a loop it was asked to vectorize but did
    // not) are not the user's business: drop them.
    extern "C" fn quiet(_: llvm_sys::prelude::LLVMDiagnosticInfoRef, _: *mut std::ffi::c_void) {}
    // SAFETY: installs a handler that ignores its arguments on a live context.
    unsafe { llvm_sys::core::LLVMContextSetDiagnosticHandler(ctx.raw(), Some(quiet), std::ptr::null_mut()) };
    let module = ctx.create_module("tcc");
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let bits = vector_bits(&cpu, &features);
    let mut g = Gen {
        ctx,
        module: &module,
        b: ctx.create_builder(),
        hir: &prepared,
        cpu,
        features,
        bits,
        uk: HashMap::new(),
        bufs: HashMap::new(),
        strides: HashMap::new(),
        runtime: opts.runtime_ranges.clone(),
        size_vals: HashMap::new(),
        bound: HashMap::new(),
        func: None,
        counter: 0,
        c_abi: lib.is_some(),
        gemm_min: opts.gemm_min,
        parallel_min: opts.parallel_min.unwrap_or(PARALLEL_MIN_ITERATIONS),
        extents: HashMap::new(),
        acc_slot: None,
        mem_limit: opts.mem_limit.unwrap_or(DEFAULT_MEM_LIMIT),
        nest_peak: 0,
        rates: opts.rates,
        epilogues: HashMap::new(),
        epilogue_done: std::collections::HashSet::new(),
    };
    let mut codes = Vec::new();
    for (&u, nest) in units.iter().zip(&nests) {
        // The ABI's argument order, from the source program (the optimizer may
        // reorder reads): declaration order, not order of use.
        let (args, n_inputs) = super::cabi::abi_args(hir, u);
        let code = UnitCode {
            unit: u,
            name: prepared.units[u].name.clone(),
            args,
            n_inputs,
            flops: unit_flops(&prepared, u),
            sizes: unit_sizes(&prepared, u, &opts.runtime_ranges),
        };
        g.unit(nest, &code)?;
        codes.push(code);
    }
    if let Some(lib) = lib {
        g.c_abi(&codes, lib)?;
    }
    module.verify().map_err(|e| err(format!("LLVM rejected the generated module: {}", e.to_string())))?;
    let pbo = PassBuilderOptions::create();
    pbo.set_loop_vectorization(true);
    pbo.set_loop_slp_vectorization(true);
    pbo.set_loop_interleaving(true);
    pbo.set_loop_unrolling(true);
    module.run_passes("default<O3>", &tm, pbo).map_err(|e| err(format!("LLVM passes: {}", e.to_string())))?;
    drop(g);
    Ok(Compiled { module, machine: tm, hir: prepared, units: codes })
}

/// The optimized LLVM IR of `units` (what `tcc opt --emit=llvm` prints).
pub fn emit_llvm(hir: &Hir, units: &[UnitId], opts: &Options) -> Result<String, CodegenError> {
    let ctx = Context::create();
    let c = compile(&ctx, hir, units, opts)?;
    Ok(c.module.print_to_string().to_string())
}

/// Writes the object file of `units` with the C ABI of library `lib` (symbols
/// `tcc_LIB_...`, see [`super::cabi`]).
pub fn write_object(
    hir: &Hir,
    units: &[UnitId],
    opts: &Options,
    lib: &str,
    path: &Path,
) -> Result<Vec<UnitCode>, CodegenError> {
    let ctx = Context::create();
    let opts = Options { c_abi: true, ..opts.clone() };
    let c = compile_lib(&ctx, hir, units, &opts, Some(lib))?;
    c.machine.write_to_file(&c.module, FileType::Object, path).map_err(|e| err(format!("LLVM: {}", e.to_string())))?;
    Ok(c.units)
}

/// The result of a JIT run.
#[derive(Debug, Clone)]
pub struct JitRun {
    pub outputs: HashMap<TensorId, Dense>,
    /// Seconds spent generating, optimizing and JIT-compiling.
    pub compile_s: f64,
    /// Seconds of the fastest of the runs.
    pub run_s: f64,
    pub flops: f64,
    /// The unit's sliced terms ([`crate::sema::hir::SliceGroup::describe`]).
    pub slicing: Vec<String>,
}

enum Storage {
    F64(Vec<f64>),
    F32(Vec<f32>),
}

impl Storage {
    fn ptr(&mut self) -> *mut u8 {
        match self {
            Storage::F64(v) => v.as_mut_ptr() as *mut u8,
            Storage::F32(v) => v.as_mut_ptr() as *mut u8,
        }
    }
    fn to_f64(&self) -> Vec<f64> {
        match self {
            Storage::F64(v) => v.clone(),
            Storage::F32(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
}

/// JIT-compiles unit `unit` and runs it `repeat` times (≥ 1) on `inputs` (every
/// input of the unit, declared shape; `f32` tensors are rounded to `f32`).
pub fn jit_run(
    hir: &Hir,
    unit: UnitId,
    inputs: &HashMap<TensorId, Dense>,
    opts: &Options,
    repeat: usize,
) -> Result<JitRun, CodegenError> {
    jit_run_sized(hir, unit, &std::collections::BTreeMap::new(), inputs, opts, repeat)
}

/// [`jit_run`] with the ranges of `sizes` compiled as runtime ranges (their sizes
/// in `hir` are the assumptions) and run at the given sizes (each ≥ 1): inputs and
/// outputs have the shapes those sizes give.
pub fn jit_run_sized(
    hir: &Hir,
    unit: UnitId,
    sizes: &std::collections::BTreeMap<RangeId, usize>,
    inputs: &HashMap<TensorId, Dense>,
    opts: &Options,
    repeat: usize,
) -> Result<JitRun, CodegenError> {
    if let Some((r, _)) = sizes.iter().find(|(_, &n)| n == 0) {
        return Err(err(format!("size of range `{}` must be at least 1", hir.ranges[*r].name)));
    }
    require_bound(hir, &sizes.keys().copied().collect::<Vec<_>>())?;
    // Affine subscripts over these ranges must stay within their dimensions at
    // these sizes (the C ABI checks the same at its entry).
    if hir.has_affine() {
        let mut at = hir.clone();
        for (&r, &n) in sizes {
            at.ranges[r].size = n;
            at.ranges[r].size_kind = crate::sema::hir::SizeKind::Fixed;
        }
        if let Some((a, k, _, hi)) = at.affine_out_of_bounds() {
            let t = &hir.tensors[a.tensor];
            return Err(err(format!(
                "with these sizes subscript `{}` of `{}` reaches {hi}, past dimension {} of {} values",
                a.subs[k].display(hir),
                t.name,
                k + 1,
                at.ranges[t.dims[k]].size
            )));
        }
    }
    let shape = |t: TensorId| -> Vec<usize> {
        hir.tensors[t].dims.iter().map(|r| sizes.get(r).copied().unwrap_or(hir.ranges[*r].size)).collect()
    };
    let t0 = std::time::Instant::now();
    let ctx = Context::create();
    let opts = Options { c_abi: false, runtime_ranges: sizes.keys().copied().collect(), ..opts.clone() };
    let c = compile(&ctx, hir, &[unit], &opts)?;
    let code = c.units[0].clone();
    let ee = jit_engine(&c)?;
    let addr =
        ee.get_function_address(&format!("tcc_{}__argv", code.name)).map_err(|e| err(format!("LLVM JIT: {e:?}")))?;
    let compile_s = t0.elapsed().as_secs_f64();
    // SAFETY: the generated function takes an array of one pointer per argument
    // and one of the runtime sizes.
    let f: unsafe extern "C" fn(*const *mut u8, *const i64) -> i32 = unsafe { std::mem::transmute(addr) };
    let size_args: Vec<i64> = code.sizes.iter().map(|r| sizes[r] as i64).collect();

    let mut storage = Vec::new();
    for (k, &t) in code.args.iter().enumerate() {
        let n = crate::tensor::checked_len(&hir.tensors[t].name, &shape(t)).map_err(|e| err(e.to_string()))?;
        let elem = hir.tensors[t].elem;
        let data: Vec<f64> = if k < code.n_inputs {
            let d = inputs.get(&t).ok_or_else(|| err(format!("no value for input `{}`", hir.tensors[t].name)))?;
            if d.data.len() != n {
                return Err(err(format!(
                    "input `{}` has {} elements, expected {n}",
                    hir.tensors[t].name,
                    d.data.len()
                )));
            }
            let mut v = try_vec(&hir.tensors[t].name, n)?;
            v.extend_from_slice(&d.data);
            v
        } else {
            let mut v = try_vec(&hir.tensors[t].name, n)?;
            v.resize(n, 0.0);
            v
        };
        storage.push(match elem {
            ElemType::F64 | ElemType::C128 => Storage::F64(data),
            ElemType::F32 | ElemType::C64 | ElemType::BF16 | ElemType::F16 => {
                // A 16-bit tensor runs in f32 storage: its values widened exactly.
                let mut v = try_vec(&hir.tensors[t].name, n)?;
                v.extend(data.iter().map(|&x| crate::interp::round_to(elem, x) as f32));
                Storage::F32(v)
            }
        });
    }
    let ptrs: Vec<*mut u8> = storage.iter_mut().map(|s| s.ptr()).collect();
    let mut best = f64::INFINITY;
    for _ in 0..repeat.max(1) {
        let t = std::time::Instant::now();
        // SAFETY: every buffer has its tensor's declared number of elements.
        let rc = unsafe { f(ptrs.as_ptr(), size_args.as_ptr()) };
        best = best.min(t.elapsed().as_secs_f64());
        if rc != 0 {
            return Err(err("the generated code could not allocate its temporaries"));
        }
    }
    let mut outputs = HashMap::new();
    for (k, &t) in code.args.iter().enumerate().skip(code.n_inputs) {
        // A 16-bit output is rounded once, as it leaves the program.
        let elem = hir.tensors[t].elem;
        let mut data = storage[k].to_f64();
        if elem.is_half() {
            data.iter_mut().for_each(|x| *x = crate::interp::round_to(elem, *x));
        }
        outputs.insert(t, Dense::from_vec(shape(t), data));
    }
    drop(ee);
    let slicing = c.hir.units[unit].sliced.iter().map(|g| g.describe(&c.hir)).collect();
    Ok(JitRun { outputs, compile_s, run_s: best, flops: code.flops, slicing })
}

/// Refuses a program whose run-time ranges (`range O;`) are neither fixed nor in
/// `given`: running it would silently use the assumed sizes.
pub(crate) fn require_bound(hir: &Hir, given: &[RangeId]) -> Result<(), CodegenError> {
    match hir.runtime_ranges().into_iter().find(|r| !given.contains(r)) {
        Some(r) => Err(err(format!(
            "the size of run-time range `{}` was not given (bind sizes before running)",
            hir.ranges[r].name
        ))),
        None => Ok(()),
    }
}

/// A JIT engine for the compiled module, with the runtime's functions mapped to
/// their addresses in this process.
pub(crate) fn jit_engine<'ctx>(c: &Compiled<'ctx>) -> Result<ExecutionEngine<'ctx>, CodegenError> {
    let ee = c
        .module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| err(format!("LLVM JIT: {}", e.to_string())))?;
    for (name, addr) in runtime_symbols() {
        if let Some(f) = c.module.get_function(name) {
            ee.add_global_mapping(&f, addr);
        }
    }
    Ok(ee)
}

/// Runtime functions the generated code calls, with their addresses in this process.
fn runtime_symbols() -> Vec<(&'static str, usize)> {
    use tcc_runtime::alloc::{tcc_rt_alloc_temp, tcc_rt_alloc_zeroed, tcc_rt_free, tcc_rt_free_temp};
    use tcc_runtime::kernels::{
        tcc_rt_gett_epi_f32, tcc_rt_gett_epi_f64, tcc_rt_gett_f32, tcc_rt_gett_f64, tcc_rt_gett_init_f32,
        tcc_rt_gett_init_f64, tcc_rt_num_threads, tcc_rt_parallel_range, tcc_rt_parallel_sum, tcc_rt_task_set,
    };
    vec![
        ("tcc_rt_alloc_zeroed", tcc_rt_alloc_zeroed as *const () as usize),
        ("tcc_rt_free", tcc_rt_free as *const () as usize),
        ("tcc_rt_alloc_temp", tcc_rt_alloc_temp as *const () as usize),
        ("tcc_rt_free_temp", tcc_rt_free_temp as *const () as usize),
        ("tcc_rt_parallel_range", tcc_rt_parallel_range as *const () as usize),
        ("tcc_rt_parallel_sum", tcc_rt_parallel_sum as *const () as usize),
        ("tcc_rt_task_set", tcc_rt_task_set as *const () as usize),
        ("tcc_rt_num_threads", tcc_rt_num_threads as *const () as usize),
        ("tcc_rt_gett_f64", tcc_rt_gett_f64 as *const () as usize),
        ("tcc_rt_gett_f32", tcc_rt_gett_f32 as *const () as usize),
        ("tcc_rt_gett_epi_f64", tcc_rt_gett_epi_f64 as *const () as usize),
        ("tcc_rt_gett_epi_f32", tcc_rt_gett_epi_f32 as *const () as usize),
        ("tcc_rt_gett_init_f64", tcc_rt_gett_init_f64 as *const () as usize),
        ("tcc_rt_gett_init_f32", tcc_rt_gett_init_f32 as *const () as usize),
        ("tcc_rt_slice_begin", tcc_runtime::slices::tcc_rt_slice_begin as *const () as usize),
        ("tcc_rt_slice_end", tcc_runtime::slices::tcc_rt_slice_end as *const () as usize),
    ]
}

// ---------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------

/// A micro-kernel: its function and register tile.
/// Every tensor the nodes read or write.
fn node_tensors(hir: &Hir, unit: UnitId, nodes: &[Node], out: &mut std::collections::BTreeSet<TensorId>) {
    fn expr(e: &crate::sema::hir::Expr, out: &mut std::collections::BTreeSet<TensorId>) {
        for f in e.terms.iter().flat_map(|t| &t.factors) {
            match f {
                crate::sema::hir::Factor::Tensor(r) => {
                    out.insert(r.tensor);
                }
                crate::sema::hir::Factor::Affine(a) => {
                    out.insert(a.tensor);
                }
                crate::sema::hir::Factor::Call { arg, .. }
                | crate::sema::hir::Factor::Sum { arg, .. }
                | crate::sema::hir::Factor::Reduce { arg, .. } => expr(arg, out),
                crate::sema::hir::Factor::Select { args, .. } => args.iter().for_each(|a| expr(&a.as_expr(), out)),
            }
        }
    }
    for n in nodes {
        match n {
            Node::Loop { body, .. } => node_tensors(hir, unit, body, out),
            Node::Zero { tensor, .. } => {
                out.insert(*tensor);
            }
            Node::Compute { stmt } => {
                let st = &hir.units[unit].stmts[*stmt];
                out.insert(st.lhs.tensor);
                expr(&st.rhs, out);
            }
        }
    }
}

/// Whether the first step of `nodes` (in execution order) to touch temporary `t`
/// is a `Zero` of everything its statement writes (not a slice of `t`): then
/// every element is written before it is read, and `t` need not start zeroed.
/// A temporary first touched by `+=`, or written in part, must.
fn first_touch_clears(hir: &Hir, unit: UnitId, nodes: &[Node], t: TensorId) -> bool {
    fn first(hir: &Hir, unit: UnitId, nodes: &[Node], t: TensorId) -> Option<bool> {
        for n in nodes {
            match n {
                Node::Loop { body, .. } => {
                    if let Some(r) = first(hir, unit, body, t) {
                        return Some(r);
                    }
                }
                Node::Zero { tensor, stmt } => {
                    if *tensor == t {
                        let st = &hir.units[unit].stmts[*stmt];
                        return Some(st.lhs.tensor == t && !hir.is_slice(&st.lhs));
                    }
                }
                Node::Compute { stmt } => {
                    let mut seen = std::collections::BTreeSet::new();
                    node_tensors(hir, unit, std::slice::from_ref(n), &mut seen);
                    if seen.contains(&t) {
                        // An `=` that fusion leaves alone clears or stores its
                        // whole target itself (see `Gen::nodes`).
                        let st = &hir.units[unit].stmts[*stmt];
                        let clears = st.lhs.tensor == t
                            && !st.accumulate
                            && !fusible(hir, st)
                            && !hir.is_slice(&st.lhs)
                            && !matches!(
                                crate::tir::materialize::special_stmt(st),
                                Some(crate::tir::materialize::Special::Gather { .. })
                            );
                        return Some(clears);
                    }
                }
            }
        }
        None
    }
    first(hir, unit, nodes, t).unwrap_or(false)
}

/// Whether an `=` statement may store its value instead of clearing its target
/// and adding: its target and operands whole (no slices), not a special
/// statement, and its target not read on the right.
fn stores_whole(hir: &Hir, st: &Stmt) -> bool {
    !st.accumulate
        && !hir.stmt_has_slice(st)
        && crate::tir::materialize::special_stmt(st).is_none()
        && crate::codegen::lower::term_operands_ok(st)
}

/// Units with more terms than this are compiled one top-level statement per
/// LLVM function ([`Gen::top_nodes`]).
const OUTLINE_MIN_TERMS: usize = 64;

#[derive(Clone, Copy)]
struct Uk<'ctx> {
    f: FunctionValue<'ctx>,
    mr: usize,
    nr: usize,
}

struct Gen<'a, 'ctx> {
    ctx: &'ctx Context,
    module: &'a Module<'ctx>,
    b: Builder<'ctx>,
    hir: &'a Hir,
    cpu: String,
    features: String,
    bits: u32,
    /// Packed micro-kernels by element type and register tile `(MR, NR)`.
    uk: HashMap<(ElemType, usize, usize), Uk<'ctx>>,
    /// Buffer pointer of each tensor in the current unit.
    bufs: HashMap<TensorId, PointerValue<'ctx>>,
    /// Stride of each position of each tensor's buffer (0 where fixed by a loop).
    strides: HashMap<TensorId, Vec<Poly>>,
    /// The runtime ranges (see [`Options::runtime_ranges`]) and their sizes as
    /// values of the function being generated.
    runtime: Vec<RangeId>,
    size_vals: HashMap<RangeId, IntValue<'ctx>>,
    bound: HashMap<IndexId, IntValue<'ctx>>,
    func: Option<FunctionValue<'ctx>>,
    counter: usize,
    c_abi: bool,
    gemm_min: Option<f64>,
    parallel_min: f64,
    /// Extents of loops that stand for several collapsed indices (see `collapse`).
    extents: HashMap<IndexId, Poly>,
    /// Inside a parallel sum's chunk: the written tensor and the chunk's private
    /// accumulator that replaces its (single) element.
    acc_slot: Option<(TensorId, PointerValue<'ctx>)>,
    /// Bytes temporaries may take (`--mem-limit`), and the current nest's peak:
    /// what bounds the private copies of parallel slices ([`slices`]).
    mem_limit: u64,
    nest_peak: u64,
    /// The time model's rates: the estimates task sets hand the runtime.
    rates: crate::lir::cost::CpuRates,
    /// The current unit's GETT statements whose next map runs as their
    /// epilogue ([`epilogue`]): GETT statement → map statement.
    epilogues: HashMap<usize, usize>,
    /// Map statements already run as an epilogue (their own steps emit nothing).
    epilogue_done: std::collections::HashSet<usize>,
}

use super::lower::Operand;

/// For each dimension of the buffer's tensor: its element stride (row-major over
/// the stored dimensions; zero for a dimension fixed by a loop), in runtime sizes.
fn position_strides(hir: &Hir, runtime: &[RangeId], b: &Buffer) -> Vec<Poly> {
    let dims = &hir.tensors[b.tensor].dims;
    let mut strides = vec![Poly::zero(); dims.len()];
    let mut s = Poly::constant(1);
    for &p in b.stored.iter().rev() {
        strides[p] = s.clone();
        s = s.mul(&Poly::range(hir, runtime, dims[p]));
    }
    strides
}

/// Elements of the buffer: the product of its stored extents, in runtime sizes.
fn buffer_elements(hir: &Hir, runtime: &[RangeId], b: &Buffer) -> Poly {
    let dims = &hir.tensors[b.tensor].dims;
    b.stored.iter().fold(Poly::constant(1), |acc, &p| acc.mul(&Poly::range(hir, runtime, dims[p])))
}

/// Elements of a whole tensor, in runtime sizes.
fn tensor_elements(hir: &Hir, runtime: &[RangeId], t: TensorId) -> Poly {
    hir.tensors[t].dims.iter().fold(Poly::constant(1), |acc, &r| acc.mul(&Poly::range(hir, runtime, r)))
}

impl<'a, 'ctx> Gen<'a, 'ctx> {
    fn ft(&self, e: ElemType) -> FloatType<'ctx> {
        match e {
            ElemType::F64 | ElemType::C128 => self.ctx.f64_type(),
            ElemType::F32 | ElemType::C64 | ElemType::BF16 | ElemType::F16 => self.ctx.f32_type(),
        }
    }
    fn i64c(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v, false)
    }

    /// The value of `p` with the current function's runtime sizes (a constant when
    /// `p` depends on none).
    fn poly_value(&self, p: &Poly) -> Result<IntValue<'ctx>, CodegenError> {
        if let Some(c) = p.as_const() {
            return Ok(self.i64c(c));
        }
        let mut sum: Option<IntValue<'ctx>> = None;
        for (ranges, c) in p.terms() {
            let mut m: Option<IntValue<'ctx>> = (c != 1 || ranges.is_empty()).then(|| self.i64c(c));
            for r in ranges {
                let v = *self.size_vals.get(r).ok_or_else(|| err("internal: a runtime size is not available here"))?;
                m = Some(match m {
                    None => v,
                    Some(x) => self.b.build_int_mul(x, v, "sz")?,
                });
            }
            let m = m.expect("a monomial has a factor");
            sum = Some(match sum {
                None => m,
                Some(x) => self.b.build_int_add(x, m, "sz")?,
            });
        }
        Ok(sum.expect("a non-constant polynomial has a term"))
    }

    /// The size of index `i`'s range, in runtime sizes.
    fn index_poly(&self, i: IndexId) -> Poly {
        Poly::index(self.hir, &self.runtime, i)
    }
    fn name(&mut self, base: &str) -> String {
        self.counter += 1;
        format!("{base}.{}", self.counter)
    }
    fn set_target_attrs(&self, f: FunctionValue<'ctx>) {
        f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("target-cpu", &self.cpu));
        if !self.features.is_empty() {
            f.add_attribute(
                AttributeLoc::Function,
                self.ctx.create_string_attribute("target-features", &self.features),
            );
        }
        let nounwind = inkwell::attributes::Attribute::get_named_enum_kind_id("nounwind");
        f.add_attribute(AttributeLoc::Function, self.ctx.create_enum_attribute(nounwind, 0));
    }
    fn current_fn(&self) -> FunctionValue<'ctx> {
        self.func.expect("inside a function")
    }

    /// `for i in 0..extent { body(i) }` (extent ≥ 1: runtime sizes are checked at entry).
    fn build_loop(
        &mut self,
        extent: IntValue<'ctx>,
        body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        self.build_loop_hinted(extent, false, body)
    }

    /// [`Self::build_loop`]; with `vectorize`, the loop carries
    /// `llvm.loop.vectorize.enable`, which lets LLVM reassociate a sum (a reduction
    /// loop is then vectorized like `-ffast-math` would).
    fn build_loop_hinted(
        &mut self,
        extent: IntValue<'ctx>,
        vectorize: bool,
        body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let f = self.current_fn();
        let pre = self.b.get_insert_block().expect("positioned");
        let head = self.ctx.append_basic_block(f, "loop");
        let exit = self.ctx.append_basic_block(f, "loop.exit");
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(head);
        let phi = self.b.build_phi(self.ctx.i64_type(), "i")?;
        phi.add_incoming(&[(&self.i64c(0), pre)]);
        let i = phi.as_basic_value().into_int_value();
        body(self, i)?;
        let next = self.b.build_int_add(i, self.i64c(1), "i.next")?;
        let latch = self.b.get_insert_block().expect("positioned");
        phi.add_incoming(&[(&next, latch)]);
        let cond = self.b.build_int_compare(IntPredicate::ULT, next, extent, "i.cond")?;
        let br = self.b.build_conditional_branch(cond, head, exit)?;
        if vectorize {
            self.mark_vectorize(br);
        }
        self.b.position_at_end(exit);
        Ok(())
    }

    /// Attaches `!llvm.loop !{self, !{"llvm.loop.vectorize.enable", i1 true}}` to a
    /// loop's latch branch (the C API of LLVM 14 has no fast-math flags setter).
    fn mark_vectorize(&self, br: inkwell::values::InstructionValue<'ctx>) {
        use inkwell::values::AsValueRef;
        use llvm_sys::core::{
            LLVMConstInt, LLVMGetMDKindIDInContext, LLVMInt1TypeInContext, LLVMMDNodeInContext2,
            LLVMMDStringInContext2, LLVMMetadataAsValue, LLVMSetMetadata, LLVMValueAsMetadata,
        };
        use llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
        // SAFETY: plain LLVM C API calls on live objects of this context.
        unsafe {
            let c = self.ctx.raw();
            let tmp = LLVMTemporaryMDNode(c, std::ptr::null_mut(), 0);
            let key = "llvm.loop.vectorize.enable";
            let k = LLVMMDStringInContext2(c, key.as_ptr() as *const _, key.len());
            let one = LLVMValueAsMetadata(LLVMConstInt(LLVMInt1TypeInContext(c), 1, 0));
            let mut ops = [k, one];
            let enable = LLVMMDNodeInContext2(c, ops.as_mut_ptr(), 2);
            let mut ops = [tmp, enable];
            let id = LLVMMDNodeInContext2(c, ops.as_mut_ptr(), 2);
            LLVMMetadataReplaceAllUsesWith(tmp, id);
            let kind = LLVMGetMDKindIDInContext(c, "llvm.loop".as_ptr() as *const _, 9);
            LLVMSetMetadata(br.as_value_ref(), kind, LLVMMetadataAsValue(c, id));
        }
    }

    /// Pointer to element `offset` of tensor `t`'s buffer.
    fn elem_ptr(&self, t: TensorId, offset: IntValue<'ctx>) -> Result<PointerValue<'ctx>, CodegenError> {
        // SAFETY (of the generated code): offsets stay inside the buffer by construction.
        Ok(unsafe { self.b.build_in_bounds_gep(self.bufs[&t], &[offset], "p")? })
    }

    /// Where the values of `t[indices]` start: past the parts of a union before
    /// an index's sub-range (`F[o,v]` of `F[p,q]`, `P = O + V`); 0 otherwise.
    fn slice_base(&self, t: TensorId, indices: &[IndexId]) -> Result<IntValue<'ctx>, CodegenError> {
        let st = &self.strides[&t];
        let dims = &self.hir.tensors[t].dims;
        let mut off = Poly::zero();
        for (p, &i) in indices.iter().enumerate() {
            let r = self.hir.indices[i].range;
            if r != dims[p] && !st[p].is_zero() {
                let o = self.range_offset(r, dims[p]).unwrap_or_else(Poly::zero);
                off = off.add(&st[p].mul(&o));
            }
        }
        self.poly_value(&off)
    }

    /// [`Hir::offset_in`] as a polynomial in the run-time sizes: the sizes of the
    /// parts before `sub` in `sup`.
    fn range_offset(&self, sub: RangeId, sup: RangeId) -> Option<Poly> {
        if sub == sup {
            return Some(Poly::zero());
        }
        let mut off = Poly::zero();
        for &p in &self.hir.ranges[sup].parts {
            if let Some(o) = self.range_offset(sub, p) {
                return Some(off.add(&o));
            }
            off = off.add(&Poly::range(self.hir, &self.runtime, p));
        }
        None
    }

    /// Offset of `t[indices]` with every index bound.
    fn offset(&self, t: TensorId, indices: &[IndexId]) -> Result<IntValue<'ctx>, CodegenError> {
        let st = &self.strides[&t];
        let mut off = self.slice_base(t, indices)?;
        for (p, &i) in indices.iter().enumerate() {
            if st[p].is_zero() {
                continue;
            }
            let v = self.bound[&i];
            let term =
                if st[p].as_const() == Some(1) { v } else { self.b.build_int_mul(v, self.poly_value(&st[p])?, "o")? };
            off = self.b.build_int_add(off, term, "o")?;
        }
        Ok(off)
    }

    /// Offset of `t[indices]` counting only the indices bound now.
    fn partial_offset(&self, t: TensorId, indices: &[IndexId]) -> Result<IntValue<'ctx>, CodegenError> {
        let st = &self.strides[&t];
        let mut off = self.slice_base(t, indices)?;
        for (p, &i) in indices.iter().enumerate() {
            if st[p].is_zero() {
                continue;
            }
            if let Some(&v) = self.bound.get(&i) {
                let term = self.b.build_int_mul(v, self.poly_value(&st[p])?, "o")?;
                off = self.b.build_int_add(off, term, "o")?;
            }
        }
        Ok(off)
    }

    fn declare(
        &self,
        name: &str,
        ret: Option<BasicTypeEnum<'ctx>>,
        params: &[BasicMetadataTypeEnum<'ctx>],
    ) -> FunctionValue<'ctx> {
        if let Some(f) = self.module.get_function(name) {
            return f;
        }
        let ty = match ret {
            Some(r) => r.fn_type(params, false),
            None => self.ctx.void_type().fn_type(params, false),
        };
        self.module.add_function(name, ty, Some(Linkage::External))
    }

    fn unit(&mut self, nest: &LoopNest, code: &UnitCode) -> Result<(), CodegenError> {
        let hir = self.hir;
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        // Runtime sizes first (each ≥ 1, checked by the callers), then the tensors.
        let n_sizes = code.sizes.len();
        let mut params: Vec<BasicMetadataTypeEnum> = vec![i64t.into(); n_sizes];
        params.extend(
            code.args
                .iter()
                .map(|&t| BasicMetadataTypeEnum::from(self.ft(hir.tensors[t].elem).ptr_type(AddressSpace::default()))),
        );
        let body = self.module.add_function(&format!("tcc_{}__body", code.name), i32t.fn_type(&params, false), None);
        self.set_target_attrs(body);
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for k in 0..code.args.len() {
            body.add_attribute(AttributeLoc::Param((n_sizes + k) as u32), self.ctx.create_enum_attribute(noalias, 0));
        }
        self.func = Some(body);
        self.nest_peak = nest.peak_bytes;
        self.bufs.clear();
        self.strides.clear();
        self.bound.clear();
        self.size_vals.clear();
        let entry = self.ctx.append_basic_block(body, "entry");
        self.b.position_at_end(entry);
        for (k, &r) in code.sizes.iter().enumerate() {
            self.size_vals.insert(r, body.get_nth_param(k as u32).expect("size").into_int_value());
        }
        for (k, &t) in code.args.iter().enumerate() {
            let p = body.get_nth_param((n_sizes + k) as u32).expect("param").into_pointer_value();
            self.bufs.insert(t, p);
        }
        for (&t, buf) in &nest.buffers {
            if !hir.tensors[t].role.is_read_only()
                && hir.tensors[t].role != Role::Temporary
                && buf.stored.len() != hir.tensors[t].dims.len()
            {
                return Err(err(format!("internal: output `{}` is sliced", hir.tensors[t].name)));
            }
            self.strides.insert(t, position_strides(hir, &self.runtime, buf));
        }
        // Temporaries: from the runtime's allocator (huge pages for large ones,
        // kept between calls), freed at the end; zeroed (as the interpreter's)
        // unless the first step to touch one clears all it writes.
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let alloc = self.declare("tcc_rt_alloc_temp", Some(i8p.into()), &[i64t.into(), i64t.into()]);
        let free = self.declare("tcc_rt_free_temp", None, &[i8p.into(), i64t.into()]);
        let mut temps = Vec::new();
        for (&t, buf) in &nest.buffers {
            if hir.tensors[t].role != Role::Temporary || self.bufs.contains_key(&t) {
                continue;
            }
            let elem = hir.tensors[t].elem;
            let n = self.poly_value(&buffer_elements(hir, &self.runtime, buf))?;
            // Bytes, or u64::MAX (an allocation that fails) if they overflow.
            let size = elem.size_bytes() as u64;
            let over = self.b.build_int_compare(IntPredicate::UGT, n, self.i64c(u64::MAX / size), "ovf")?;
            let prod = self.b.build_int_mul(n, self.i64c(size), "bytes")?;
            let bytes = self.b.build_select(over, self.i64c(u64::MAX), prod, "bytes")?.into_int_value();
            let zeroed = self.i64c(u64::from(!first_touch_clears(hir, code.unit, &nest.body, t)));
            let raw = self
                .b
                .build_call(alloc, &[bytes.into(), zeroed.into()], "tmp")?
                .try_as_basic_value()
                .left()
                .expect("ptr")
                .into_pointer_value();
            temps.push((raw, bytes));
            let p = self.b.build_pointer_cast(raw, self.ft(elem).ptr_type(AddressSpace::default()), "tmpT")?;
            self.bufs.insert(t, p);
        }
        if !temps.is_empty() {
            let mut any_null = self.ctx.bool_type().const_zero();
            for &(p, _) in &temps {
                let isn = self.b.build_is_null(p, "isnull")?;
                any_null = self.b.build_or(any_null, isn, "anynull")?;
            }
            let fail = self.ctx.append_basic_block(body, "oom");
            let ok = self.ctx.append_basic_block(body, "run");
            self.b.build_conditional_branch(any_null, fail, ok)?;
            self.b.position_at_end(fail);
            for &(p, bytes) in &temps {
                self.b.build_call(free, &[p.into(), bytes.into()], "")?;
            }
            self.b.build_return(Some(&i32t.const_int(1, false)))?;
            self.b.position_at_end(ok);
        }
        // Outputs first written by `+=` start at zero.
        let stmts = &hir.units[code.unit].stmts;
        for &t in &code.args[code.n_inputs..] {
            if let Some(s) = stmts.iter().find(|s| s.lhs.tensor == t) {
                if s.accumulate {
                    self.zero_all(t)?;
                }
            }
        }
        self.epilogues = crate::lir::epilogue::pairs(hir, nest).into_iter().collect();
        self.epilogue_done.clear();
        self.top_nodes(nest, code.unit)?;
        for &(p, bytes) in &temps {
            self.b.build_call(free, &[p.into(), bytes.into()], "")?;
        }
        self.b.build_return(Some(&i32t.const_int(0, false)))?;

        // The argv entry point.
        let pp = i8p.ptr_type(AddressSpace::default());
        let i64p = i64t.ptr_type(AddressSpace::default());
        let argv = self.module.add_function(
            &format!("tcc_{}__argv", code.name),
            i32t.fn_type(&[pp.into(), i64p.into()], false),
            None,
        );
        self.set_target_attrs(argv);
        let e = self.ctx.append_basic_block(argv, "entry");
        self.b.position_at_end(e);
        let base = argv.get_nth_param(0).expect("argv").into_pointer_value();
        let sizes = argv.get_nth_param(1).expect("sizes").into_pointer_value();
        let mut args: Vec<BasicMetadataValueEnum> = Vec::new();
        for k in 0..n_sizes {
            let slot = unsafe { self.b.build_in_bounds_gep(sizes, &[self.i64c(k as u64)], "szslot")? };
            args.push(self.b.build_load(slot, "size")?.into());
        }
        for (k, &t) in code.args.iter().enumerate() {
            let slot = unsafe { self.b.build_in_bounds_gep(base, &[self.i64c(k as u64)], "slot")? };
            let raw = self.b.build_load(slot, "arg")?.into_pointer_value();
            let p = self.b.build_pointer_cast(
                raw,
                self.ft(hir.tensors[t].elem).ptr_type(AddressSpace::default()),
                "argT",
            )?;
            args.push(p.into());
        }
        let r = self.b.build_call(body, &args, "r")?.try_as_basic_value().left().expect("i32");
        self.b.build_return(Some(&r))?;
        if self.c_abi {
            body.as_global_value().set_visibility(GlobalVisibility::Hidden);
            argv.as_global_value().set_visibility(GlobalVisibility::Hidden);
        }
        self.func = None;
        Ok(())
    }

    /// The unit's top-level nodes, as task sets ([`crate::lir::tasks`]): a set of
    /// two or more independent steps is one `tcc_rt_task_set` call, the others run
    /// in place. A large unit (more than [`OUTLINE_MIN_TERMS`] terms) puts each
    /// step (a top-level statement or loop, with the `Zero`s before it) in a
    /// function of its own: LLVM's passes grow faster than linearly with the size
    /// of one function (one function of 3000 terms took 30 s, issue 23), and each
    /// of these functions is small.
    fn top_nodes(&mut self, nest: &LoopNest, unit: UnitId) -> Result<(), CodegenError> {
        let sets = crate::lir::tasks::task_sets(self.hir, nest, &self.rates);
        for set in &sets {
            if set.steps.len() >= 2 {
                self.task_set(nest, set, unit)?;
            } else {
                for step in &set.steps {
                    self.step(&nest.body[step.nodes.clone()], unit)?;
                }
            }
        }
        Ok(())
    }

    /// One step in place: outlined in a large unit.
    fn step(&mut self, nodes: &[Node], unit: UnitId) -> Result<(), CodegenError> {
        let terms: usize = self.hir.units[unit].stmts.iter().map(|s| s.rhs.terms.len()).sum();
        if terms <= OUTLINE_MIN_TERMS {
            self.nodes(nodes, unit)
        } else {
            self.outlined(nodes, unit)
        }
    }

    /// `nodes` in an internal, never inlined function of the current one's
    /// buffers and runtime sizes, called here.
    fn outlined(&mut self, nodes: &[Node], unit: UnitId) -> Result<(), CodegenError> {
        // Only the buffers these nodes use: passing every buffer to every part
        // made a unit of N statements N functions of N parameters (LLVM's
        // interprocedural passes took minutes for 1000 statements).
        let mut used = std::collections::BTreeSet::new();
        node_tensors(self.hir, unit, nodes, &mut used);
        // A GETT with an epilogue writes its map's target.
        for n in nodes {
            if let Some(j) = matches!(n, Node::Compute { .. }).then_some(n).and_then(|n| match n {
                Node::Compute { stmt } => self.epilogues.get(stmt),
                _ => None,
            }) {
                used.insert(self.hir.units[unit].stmts[*j].lhs.tensor);
            }
        }
        let mut bufs: Vec<(TensorId, PointerValue<'ctx>)> =
            self.bufs.iter().filter(|(t, _)| used.contains(*t)).map(|(&t, &p)| (t, p)).collect();
        bufs.sort_by_key(|x| x.0);
        let mut sizes: Vec<(RangeId, IntValue<'ctx>)> = self.size_vals.iter().map(|(&r, &v)| (r, v)).collect();
        sizes.sort_by_key(|x| x.0);
        let i64t = self.ctx.i64_type();
        let mut params: Vec<BasicMetadataTypeEnum> = bufs.iter().map(|(_, p)| p.get_type().into()).collect();
        params.extend(std::iter::repeat_n(BasicMetadataTypeEnum::from(i64t), sizes.len()));
        let caller = self.current_fn();
        let name = self.name(&format!("{}.part", caller.get_name().to_string_lossy()));
        let f = self.module.add_function(&name, self.ctx.void_type().fn_type(&params, false), Some(Linkage::Internal));
        self.set_target_attrs(f);
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for k in 0..bufs.len() {
            f.add_attribute(AttributeLoc::Param(k as u32), self.ctx.create_enum_attribute(noalias, 0));
        }
        let noinline = inkwell::attributes::Attribute::get_named_enum_kind_id("noinline");
        f.add_attribute(AttributeLoc::Function, self.ctx.create_enum_attribute(noinline, 0));
        let args: Vec<BasicMetadataValueEnum> =
            bufs.iter().map(|(_, p)| (*p).into()).chain(sizes.iter().map(|(_, v)| (*v).into())).collect();
        self.b.build_call(f, &args, "")?;
        let saved_block = self.b.get_insert_block().expect("positioned");
        let saved = (self.func, std::mem::take(&mut self.bufs), std::mem::take(&mut self.size_vals));
        self.func = Some(f);
        let entry = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(entry);
        for (k, (t, _)) in bufs.iter().enumerate() {
            self.bufs.insert(*t, f.get_nth_param(k as u32).expect("buf").into_pointer_value());
        }
        for (k, (r, _)) in sizes.iter().enumerate() {
            self.size_vals.insert(*r, f.get_nth_param((bufs.len() + k) as u32).expect("size").into_int_value());
        }
        let r = self.nodes(nodes, unit);
        if r.is_ok() {
            self.b.build_return(None)?;
        }
        self.func = saved.0;
        self.bufs = saved.1;
        self.size_vals = saved.2;
        self.b.position_at_end(saved_block);
        r
    }

    fn nodes(&mut self, nodes: &[Node], unit: UnitId) -> Result<(), CodegenError> {
        let mut skip_zero: Option<(usize, usize)> = None;
        for (pos, n) in nodes.iter().enumerate() {
            // A map already run as a GETT's epilogue.
            if let Node::Zero { stmt, .. } | Node::Compute { stmt } = n {
                if self.epilogue_done.contains(stmt) {
                    continue;
                }
            }
            // `Zero` right before its statement's `Compute`, whose first term is a
            // GETT: the GETT overwrites instead (no separate pass over the output).
            if let (Node::Zero { stmt, .. }, Some(Node::Compute { stmt: next })) = (n, nodes.get(pos + 1)) {
                let st = &self.hir.units[unit].stmts[*stmt];
                if let (true, Some(k)) = (stmt == next, self.overwrite_gett(st)) {
                    skip_zero = Some((*stmt, k));
                    continue;
                }
                // No GETT: terms sharing one nest store into the target instead.
                if stmt == next && self.store_nest(st) {
                    skip_zero = Some((*stmt, usize::MAX));
                    continue;
                }
            }
            match n {
                Node::Loop { index, extent, body } => {
                    if *extent == 0 {
                        continue;
                    }
                    match self.slice_group_at(unit, *index, body) {
                        Some(g) => self.sliced_loops(&g, n, unit)?,
                        None => self.loop_node(*index, body, unit)?,
                    }
                }
                Node::Zero { tensor, stmt } => {
                    let idx = self.hir.units[unit].stmts[*stmt].lhs.indices.clone();
                    self.zero_region(*tensor, &idx)?;
                }
                Node::Compute { stmt } => {
                    let st = self.hir.units[unit].stmts[*stmt].clone();
                    // A gather stores every element of its whole target itself.
                    let gather = matches!(
                        crate::tir::materialize::special_stmt(&st),
                        Some(crate::tir::materialize::Special::Gather { .. })
                    ) && !self.hir.is_slice(&st.lhs)
                        && self.strides[&st.lhs.tensor].iter().all(|s| !s.is_zero());
                    if !fusible(self.hir, &st) && !st.accumulate && !gather {
                        // `P = exp(S)` and other element-wise `=` statements
                        // that fusion leaves alone: one pass storing the target
                        // (not a zeroing pass, then one reading and writing it).
                        if stores_whole(self.hir, &st) && self.store_nest(&st) {
                            self.shared_nest_terms(&st, 0..st.rhs.terms.len(), true)?;
                            continue;
                        }
                        if self.hir.is_slice(&st.lhs) {
                            self.zero_region(st.lhs.tensor, &st.lhs.indices)?;
                        } else {
                            self.zero_all(st.lhs.tensor)?;
                        }
                    }
                    let overwrite = skip_zero.take().filter(|z| z.0 == *stmt).map(|z| z.1);
                    if let Some(sp) = crate::tir::materialize::special_stmt(&st) {
                        self.special(&st, sp)?;
                        continue;
                    }
                    match overwrite {
                        Some(usize::MAX) => self.shared_nest_terms(&st, 0..st.rhs.terms.len(), true)?,
                        // The next map as this GETT's epilogue.
                        Some(0) if st.rhs.terms.len() == 1 && self.epilogues.contains_key(stmt) => {
                            let j = self.epilogues[stmt];
                            self.gett_with_epilogue(&st, &self.hir.units[unit].stmts[j].clone())?;
                            self.epilogue_done.insert(j);
                        }
                        // The overwriting GETT first (starting from a same-layout
                        // copy term where there is one), then the other terms add.
                        Some(k) => {
                            let init = self.gett_init_term(&st, k);
                            match init {
                                Some(j) => self.gett_from(&st, k, j)?,
                                None => self.term(&st, k, true)?,
                            }
                            let mut done: Vec<usize> = [Some(k), init].into_iter().flatten().collect();
                            done.sort_unstable();
                            let mut start = 0;
                            for d in done {
                                self.terms_in(&st, start..d)?;
                                start = d + 1;
                            }
                            self.terms_in(&st, start..st.rhs.terms.len())?;
                        }
                        None => self.terms_in(&st, 0..st.rhs.terms.len())?,
                    }
                }
            }
        }
        Ok(())
    }

    /// A loop node run in order.
    fn loop_node(&mut self, index: IndexId, body: &[Node], unit: UnitId) -> Result<(), CodegenError> {
        let n = self.poly_value(&self.index_poly(index))?;
        self.build_loop(n, &mut |g, i| {
            g.bound.insert(index, i);
            g.nodes(body, unit)?;
            g.bound.remove(&index);
            Ok(())
        })
    }

    fn zero_all(&mut self, t: TensorId) -> Result<(), CodegenError> {
        let n: Poly = {
            let st = &self.strides[&t];
            let dims = &self.hir.tensors[t].dims;
            st.iter()
                .zip(dims)
                .filter(|(s, _)| !s.is_zero())
                .fold(Poly::constant(1), |acc, (_, &r)| acc.mul(&Poly::range(self.hir, &self.runtime, r)))
        };
        if n.is_zero() {
            return Ok(());
        }
        let n = self.poly_value(&n)?;
        let zero = self.ft(self.hir.tensors[t].elem).const_zero();
        self.build_loop(n, &mut |g, i| {
            let p = g.elem_ptr(t, i)?;
            g.b.build_store(p, zero)?;
            Ok(())
        })
    }

    /// Zeroes what `t[idx]` covers with the loops bound now.
    fn zero_region(&mut self, t: TensorId, idx: &[IndexId]) -> Result<(), CodegenError> {
        let free: Vec<IndexId> = idx
            .iter()
            .enumerate()
            .filter(|(p, i)| !self.strides[&t][*p].is_zero() && !self.bound.contains_key(i))
            .map(|(_, &i)| i)
            .collect();
        if free.iter().any(|&i| self.hir.index_size(i) == 0) {
            return Ok(());
        }
        let zero = self.ft(self.hir.tensors[t].elem).const_zero();
        let idx = idx.to_vec();
        self.nest(&free, &mut |g| {
            let off = g.offset(t, &idx)?;
            let p = g.elem_ptr(t, off)?;
            g.b.build_store(p, zero)?;
            Ok(())
        })
    }

    // --------------------------------------------------------------------------
    // C ABI
    // --------------------------------------------------------------------------

    /// Whether the element count or byte size of tensor `t`, at the runtime sizes
    /// of the current function, exceeds `isize::MAX`.
    fn elements_overflow(&self, t: TensorId) -> Result<IntValue<'ctx>, CodegenError> {
        let i64t = self.ctx.i64_type();
        let umul = Intrinsic::find("llvm.umul.with.overflow")
            .and_then(|i| i.get_declaration(self.module, &[i64t.into()]))
            .ok_or_else(|| err("LLVM intrinsic llvm.umul.with.overflow not found"))?;
        let tensor = &self.hir.tensors[t];
        let mut n = self.i64c(tensor.elem.size_bytes() as u64);
        let mut over = self.ctx.bool_type().const_zero();
        for &r in &tensor.dims {
            let d = self.poly_value(&Poly::range(self.hir, &self.runtime, r))?;
            let res = self.b.build_call(umul, &[n.into(), d.into()], "mul")?.try_as_basic_value().left().expect("pair");
            let res = res.into_struct_value();
            n = self.b.build_extract_value(res, 0, "n")?.into_int_value();
            let o = self.b.build_extract_value(res, 1, "o")?.into_int_value();
            over = self.b.build_or(over, o, "over")?;
        }
        let big = self.b.build_int_compare(IntPredicate::UGT, n, self.i64c(isize::MAX as u64), "big")?;
        Ok(self.b.build_or(over, big, "toolarge")?)
    }

    /// For every affine subscript over a run-time range (`I[y+r]`, `range Y;`): the
    /// condition that its largest value reaches past its dimension with the sizes
    /// given, and the message (in i128: no overflow for any sizes).
    fn affine_size_checks(&self, unit: UnitId, sym: &str) -> Result<Vec<(IntValue<'ctx>, String)>, CodegenError> {
        let hir = self.hir;
        let mut refs = Vec::new();
        for s in &hir.units[unit].stmts {
            crate::sema::hir::visit_affine(&s.rhs, &mut |a| refs.push(a.clone()));
        }
        let i128t = self.ctx.i128_type();
        let size = |g: &Self, r: RangeId| -> Result<IntValue<'ctx>, CodegenError> {
            let v = g.poly_value(&Poly::range(hir, &g.runtime, r))?;
            Ok(g.b.build_int_z_extend(v, i128t, "s")?)
        };
        let mut out = Vec::new();
        for a in &refs {
            for (k, sub) in a.subs.iter().enumerate() {
                let dim = hir.tensors[a.tensor].dims[k];
                let ranges: Vec<RangeId> = sub.terms.iter().map(|&(_, i)| hir.indices[i].range).collect();
                if !self.runtime.contains(&dim) && !ranges.iter().any(|r| self.runtime.contains(r)) {
                    continue;
                }
                let mut hi = i128t.const_int(sub.constant as u64, true);
                for (&(coef, _), &r) in sub.terms.iter().zip(&ranges) {
                    let last = self.b.build_int_sub(size(self, r)?, i128t.const_int(1, false), "l")?;
                    let t = self.b.build_int_mul(last, i128t.const_int(coef as u64, true), "l")?;
                    hi = self.b.build_int_add(hi, t, "hi")?;
                }
                let extent = size(self, dim)?;
                let cond = self.b.build_int_compare(IntPredicate::SGE, hi, extent, "oob")?;
                let msg = format!(
                    "{sym}: with these sizes subscript `{}` of `{}` reaches past dimension {} (range `{}`)",
                    sub.display(hir),
                    hir.tensors[a.tensor].name,
                    k + 1,
                    hir.ranges[dim].name
                );
                out.push((cond, msg));
            }
        }
        Ok(out)
    }

    fn c_abi(&mut self, codes: &[UnitCode], lib: &str) -> Result<(), CodegenError> {
        use super::cabi::{last_error_symbol, symbol, version_string, version_symbol};
        let hir = self.hir;
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        // The last error: thread-local and internal, so private to this library.
        let err_g = self.module.add_global(i8p, None, "tcc_last_error_message");
        err_g.set_initializer(&i8p.const_null());
        err_g.set_thread_local(true);
        err_g.set_linkage(Linkage::Internal);
        let last = self.module.add_function(&last_error_symbol(lib), i8p.fn_type(&[], false), None);
        self.set_target_attrs(last);
        let e = self.ctx.append_basic_block(last, "entry");
        self.b.position_at_end(e);
        let v = self.b.build_load(err_g.as_pointer_value(), "msg")?;
        self.b.build_return(Some(&v))?;
        let ver = self.module.add_function(&version_symbol(lib), i8p.fn_type(&[], false), None);
        self.set_target_attrs(ver);
        let e = self.ctx.append_basic_block(ver, "entry");
        self.b.position_at_end(e);
        let s = self.b.build_global_string_ptr(&version_string(), "tcc_version_string")?;
        self.b.build_return(Some(&s.as_pointer_value()))?;

        for code in codes {
            let n_sizes = code.sizes.len();
            let mut params: Vec<BasicMetadataTypeEnum> = vec![i64t.into(); n_sizes];
            for &t in &code.args {
                params.push(self.ft(hir.tensors[t].elem).ptr_type(AddressSpace::default()).into());
                params.push(i64t.into());
            }
            let sym = symbol(lib, &code.name);
            let f = self.module.add_function(&sym, i32t.fn_type(&params, false), None);
            self.set_target_attrs(f);
            self.func = Some(f);
            let entry = self.ctx.append_basic_block(f, "entry");
            self.b.position_at_end(entry);
            let fail = |g: &mut Self, cond: IntValue<'ctx>, msg: &str, rc: u64| -> Result<(), CodegenError> {
                let bad = g.ctx.append_basic_block(f, "bad");
                let good = g.ctx.append_basic_block(f, "good");
                g.b.build_conditional_branch(cond, bad, good)?;
                g.b.position_at_end(bad);
                let s = g.b.build_global_string_ptr(msg, "errmsg")?;
                g.b.build_store(err_g.as_pointer_value(), s.as_pointer_value())?;
                g.b.build_return(Some(&i32t.const_int(rc, false)))?;
                g.b.position_at_end(good);
                Ok(())
            };
            // Runtime sizes: each at least 1, and no tensor of the unit (temporaries
            // included) with an element count or byte size beyond isize::MAX.
            self.size_vals.clear();
            for (k, &r) in code.sizes.iter().enumerate() {
                let v = f.get_nth_param(k as u32).expect("size").into_int_value();
                self.size_vals.insert(r, v);
                let zero = self.b.build_int_compare(IntPredicate::EQ, v, i64t.const_zero(), "zero")?;
                let name = &hir.ranges[r].name;
                fail(self, zero, &format!("{sym}: size_{name} (the size of range `{name}`) must be at least 1"), 5)?;
            }
            if !code.sizes.is_empty() {
                let mut tensors: Vec<TensorId> = Vec::new();
                for s in &hir.units[code.unit].stmts {
                    tensors.push(s.lhs.tensor);
                    crate::sema::hir::collect_reads(&s.rhs, &mut |t| tensors.push(t));
                }
                tensors.sort_unstable();
                tensors.dedup();
                for t in tensors {
                    let over = self.elements_overflow(t)?;
                    let msg = format!("{sym}: the sizes make `{}` larger than the address space", hir.tensors[t].name);
                    fail(self, over, &msg, 5)?;
                }
                for (cond, msg) in self.affine_size_checks(code.unit, &sym)? {
                    fail(self, cond, &msg, 5)?;
                }
            }
            let mut ptrs = Vec::new();
            for (k, &t) in code.args.iter().enumerate() {
                let p = f.get_nth_param((n_sizes + 2 * k) as u32).expect("ptr").into_pointer_value();
                let len = f.get_nth_param((n_sizes + 2 * k + 1) as u32).expect("len").into_int_value();
                let tensor = &hir.tensors[t];
                let elements = tensor_elements(hir, &self.runtime, t);
                let n = self.poly_value(&elements)?;
                let dims: Vec<String> = tensor
                    .dims
                    .iter()
                    .map(|&r| {
                        if self.runtime.contains(&r) {
                            hir.ranges[r].name.clone()
                        } else {
                            hir.ranges[r].size.to_string()
                        }
                    })
                    .collect();
                let count = match elements.as_const() {
                    Some(c) => c.to_string(),
                    None => format!("{} (for the sizes given)", dims.join("·")),
                };
                let isn = self.b.build_is_null(p, "null")?;
                let nonempty = self.b.build_int_compare(IntPredicate::NE, len, i64t.const_zero(), "ne")?;
                let bad_null = self.b.build_and(isn, nonempty, "badnull")?;
                fail(self, bad_null, &format!("{sym}: argument `{}` is a null pointer", tensor.name), 1)?;
                let wrong = self.b.build_int_compare(IntPredicate::NE, len, n, "badlen")?;
                fail(
                    self,
                    wrong,
                    &format!(
                        "{sym}: argument `{}` ({}[{}]) must have {count} elements (its `{}_len`)",
                        tensor.name,
                        tensor.elem.name(),
                        dims.join(", "),
                        tensor.name
                    ),
                    2,
                )?;
                let addr = self.b.build_ptr_to_int(p, i64t, "addr")?;
                let bytes = self.b.build_int_mul(n, i64t.const_int(tensor.elem.size_bytes() as u64, false), "bytes")?;
                let end = self.b.build_int_add(addr, bytes, "end")?;
                let empty = elements.as_const() == Some(0);
                ptrs.push((p, addr, end, k >= code.n_inputs, t, empty));
            }
            // An output must not overlap any other argument.
            for (x, &(_, ax, ex, out_x, tx, empty_x)) in ptrs.iter().enumerate() {
                if !out_x || empty_x {
                    continue;
                }
                for (y, &(_, ay, ey, _, ty, empty_y)) in ptrs.iter().enumerate() {
                    if x == y || empty_y {
                        continue;
                    }
                    let c1 = self.b.build_int_compare(IntPredicate::ULT, ax, ey, "o1")?;
                    let c2 = self.b.build_int_compare(IntPredicate::ULT, ay, ex, "o2")?;
                    let ov = self.b.build_and(c1, c2, "ov")?;
                    fail(
                        self,
                        ov,
                        &format!(
                            "{sym}: output `{}` overlaps argument `{}`",
                            hir.tensors[tx].name, hir.tensors[ty].name
                        ),
                        3,
                    )?;
                }
            }
            let body = self.module.get_function(&format!("tcc_{}__body", code.name)).expect("body generated");
            let mut args: Vec<BasicMetadataValueEnum> =
                (0..n_sizes).map(|k| f.get_nth_param(k as u32).expect("size").into()).collect();
            args.extend(ptrs.iter().map(|p| BasicMetadataValueEnum::from(p.0)));
            let r = self.b.build_call(body, &args, "r")?.try_as_basic_value().left().expect("i32").into_int_value();
            let oom = self.b.build_int_compare(IntPredicate::NE, r, i32t.const_zero(), "oom")?;
            fail(self, oom, &format!("{sym}: out of memory for temporaries"), 4)?;
            self.b.build_store(err_g.as_pointer_value(), i8p.const_null())?;
            self.b.build_return(Some(&i32t.const_zero()))?;
            self.func = None;
        }
        let _ = FloatPredicate::OEQ;
        Ok(())
    }
}

/// A loop nest of a term runs on several threads from this many iterations on.
pub const PARALLEL_MIN_ITERATIONS: f64 = 65536.0;
