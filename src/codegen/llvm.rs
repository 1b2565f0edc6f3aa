//! The CPU back end: LIR loop nests → LLVM IR (inkwell, LLVM 14) → optimized native
//! code, run in process (JIT) or written as an object file for a shared library.
//!
//! Per unit (program or model) the module holds
//!
//! * `tcc_NAME__body(T* noalias, ...)` — one pointer argument per input then per
//!   output (in [`Hir::unit_inputs`] / [`Hir::unit_outputs`] order); allocates the
//!   unit's temporaries (sliced as the fusion decided), runs the loop nest, frees
//!   them; returns 0, or 1 if an allocation failed;
//! * `tcc_NAME__argv(T** argv)` — the same with the pointers in an array (the JIT's
//!   entry point);
//! * with the C ABI ([`Options::c_abi`]): `int tcc_NAME(const T* A, size_t A_len,
//!   ..., T* C, size_t C_len)`, which validates every pointer and length first (see
//!   `book/src/abi.md`), and `const char* tcc_last_error(void)`.
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

use super::lower::{prepare, unit_flops};
use crate::interp::Dense;
use crate::lir::fusion::{fusible, lower_unit, FusionOptions};
use crate::lir::{Buffer, LoopNest, Node};
use crate::sema::hir::{ElemType, Func, Hir, IndexId, Role, Stmt, TensorId, UnitId};
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
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CodegenError(pub String);

impl From<BuilderError> for CodegenError {
    fn from(e: BuilderError) -> Self {
        CodegenError(format!("LLVM builder: {e:?}"))
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
    /// Also emit the validated C-ABI entry points and `tcc_last_error`.
    pub c_abi: bool,
    /// Bytes of temporaries the fused nests may keep live at once: the least fused
    /// nest that fits is compiled (whole contractions map to large GEMMs). `None`:
    /// [`DEFAULT_MEM_LIMIT`].
    pub mem_limit: Option<u64>,
    /// Map a binary contraction to the GETT kernel when `m·n·k` reaches this;
    /// `None`: when `m, n ≥ 8`, `k ≥ 4` and `m·n·k ≥ 32768` (tests lower it to
    /// exercise the kernel on small, odd shapes).
    pub gemm_min: Option<f64>,
    /// Loop nests of at least this many iterations run on the thread pool; `None`:
    /// [`PARALLEL_MIN_ITERATIONS`] (tests lower it).
    pub parallel_min: Option<f64>,
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
    /// Floating-point operations of one run (see [`unit_flops`]).
    pub flops: f64,
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
    "alderlake", "amdfam10", "athlon-fx", "athlon64", "athlon64-sse3", "atom", "barcelona", "bdver1", "bdver2", "bdver3",
    "bdver4", "bonnell", "broadwell", "btver1", "btver2", "cannonlake", "cascadelake", "cooperlake", "core-avx-i",
    "core-avx2", "core2", "corei7", "corei7-avx", "generic", "goldmont", "goldmont-plus", "haswell", "icelake-client",
    "icelake-server", "ivybridge", "k8", "k8-sse3", "knl", "knm", "nehalem", "nocona", "opteron", "opteron-sse3",
    "penryn", "rocketlake", "sandybridge", "sapphirerapids", "silvermont", "skx", "skylake", "skylake-avx512", "slm",
    "tigerlake", "tremont", "westmere", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "znver1", "znver2", "znver3",
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
    let wide = ["avx512", "skylake-avx512", "cascadelake", "cooperlake", "icelake", "tigerlake", "sapphirerapids", "rocketlake", "znver4", "x86-64-v4", "graniterapids", "emeraldrapids"];
    let mid = ["haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "znver1", "znver2", "znver3", "x86-64-v3", "cannonlake", "kabylake", "coffeelake"];
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
        .create_target_machine(&triple, &cpu, &features, OptimizationLevel::Aggressive, RelocMode::PIC, CodeModel::Default)
        .ok_or_else(|| err(format!("LLVM cannot generate code for CPU `{cpu}`")))?;
    Ok((tm, cpu, features))
}

/// Generates and optimizes the code of `units` of `hir`.
pub fn compile<'ctx>(ctx: &'ctx Context, hir: &Hir, units: &[UnitId], opts: &Options) -> Result<Compiled<'ctx>, CodegenError> {
    let prepared = prepare(hir);
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
        bound: HashMap::new(),
        func: None,
        counter: 0,
        c_abi: opts.c_abi,
        gemm_min: opts.gemm_min,
        parallel_min: opts.parallel_min.unwrap_or(PARALLEL_MIN_ITERATIONS),
        extents: HashMap::new(),
        acc_slot: None,
    };
    let mut codes = Vec::new();
    for &u in units {
        let nest = lower_unit(&prepared, u, FusionOptions { mem_limit: Some(opts.mem_limit.unwrap_or(DEFAULT_MEM_LIMIT)), ..FusionOptions::default() });
        // The argument order is the source program's (the optimizer may reorder reads).
        let inputs = hir.unit_inputs(u);
        let outputs = hir.unit_outputs(u);
        let mut args = inputs.clone();
        args.extend(outputs.iter().copied());
        let code = UnitCode { unit: u, name: prepared.units[u].name.clone(), args, n_inputs: inputs.len(), flops: unit_flops(&prepared, u) };
        g.unit(&nest, &code)?;
        codes.push(code);
    }
    if opts.c_abi {
        g.c_abi(&codes)?;
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

/// Writes the object file of `units` with the C ABI.
pub fn write_object(hir: &Hir, units: &[UnitId], opts: &Options, path: &Path) -> Result<Vec<UnitCode>, CodegenError> {
    let ctx = Context::create();
    let opts = Options { c_abi: true, ..opts.clone() };
    let c = compile(&ctx, hir, units, &opts)?;
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
pub fn jit_run(hir: &Hir, unit: UnitId, inputs: &HashMap<TensorId, Dense>, opts: &Options, repeat: usize) -> Result<JitRun, CodegenError> {
    let t0 = std::time::Instant::now();
    let ctx = Context::create();
    let opts = Options { c_abi: false, ..opts.clone() };
    let c = compile(&ctx, hir, &[unit], &opts)?;
    let code = c.units[0].clone();
    let ee: ExecutionEngine = c
        .module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| err(format!("LLVM JIT: {}", e.to_string())))?;
    for (name, addr) in runtime_symbols() {
        if let Some(f) = c.module.get_function(name) {
            ee.add_global_mapping(&f, addr);
        }
    }
    let addr = ee.get_function_address(&format!("tcc_{}__argv", code.name)).map_err(|e| err(format!("LLVM JIT: {e:?}")))?;
    let compile_s = t0.elapsed().as_secs_f64();
    // SAFETY: the generated function takes an array of one pointer per argument.
    let f: unsafe extern "C" fn(*const *mut u8) -> i32 = unsafe { std::mem::transmute(addr) };

    let mut storage = Vec::new();
    for (k, &t) in code.args.iter().enumerate() {
        let n = hir.num_elements(t).ok_or_else(|| err("tensor too large"))?;
        let elem = hir.tensors[t].elem;
        let data: Vec<f64> = if k < code.n_inputs {
            let d = inputs.get(&t).ok_or_else(|| err(format!("no value for input `{}`", hir.tensors[t].name)))?;
            if d.data.len() != n {
                return Err(err(format!("input `{}` has {} elements, expected {n}", hir.tensors[t].name, d.data.len())));
            }
            d.data.clone()
        } else {
            vec![0.0; n]
        };
        storage.push(match elem {
            ElemType::F64 => Storage::F64(data),
            ElemType::F32 => Storage::F32(data.iter().map(|&x| x as f32).collect()),
        });
    }
    let ptrs: Vec<*mut u8> = storage.iter_mut().map(|s| s.ptr()).collect();
    let mut best = f64::INFINITY;
    for _ in 0..repeat.max(1) {
        let t = std::time::Instant::now();
        // SAFETY: every buffer has its tensor's declared number of elements.
        let rc = unsafe { f(ptrs.as_ptr()) };
        best = best.min(t.elapsed().as_secs_f64());
        if rc != 0 {
            return Err(err("the generated code could not allocate its temporaries"));
        }
    }
    let mut outputs = HashMap::new();
    for (k, &t) in code.args.iter().enumerate().skip(code.n_inputs) {
        outputs.insert(t, Dense::from_vec(hir.shape(t), storage[k].to_f64()));
    }
    drop(ee);
    Ok(JitRun { outputs, compile_s, run_s: best, flops: code.flops })
}

/// Runtime functions the generated code calls, with their addresses in this process.
fn runtime_symbols() -> Vec<(&'static str, usize)> {
    use tcc_runtime::kernels::{tcc_rt_gett_f32, tcc_rt_gett_f64, tcc_rt_parallel_range, tcc_rt_parallel_sum};
    vec![
        ("tcc_rt_parallel_range", tcc_rt_parallel_range as *const () as usize),
        ("tcc_rt_parallel_sum", tcc_rt_parallel_sum as *const () as usize),("tcc_rt_gett_f64", tcc_rt_gett_f64 as *const () as usize), ("tcc_rt_gett_f32", tcc_rt_gett_f32 as *const () as usize)]
}

// ---------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------

/// A micro-kernel: its function and register tile.
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
    uk: HashMap<ElemType, Uk<'ctx>>,
    /// Buffer pointer of each tensor in the current unit.
    bufs: HashMap<TensorId, PointerValue<'ctx>>,
    /// Stride of each position of each tensor's buffer (0 where fixed by a loop).
    strides: HashMap<TensorId, Vec<u64>>,
    bound: HashMap<IndexId, IntValue<'ctx>>,
    func: Option<FunctionValue<'ctx>>,
    counter: usize,
    c_abi: bool,
    gemm_min: Option<f64>,
    parallel_min: f64,
    /// Extents of loops that stand for several collapsed indices (see `collapse`).
    extents: HashMap<IndexId, u64>,
    /// Inside a parallel sum's chunk: the written tensor and the chunk's private
    /// accumulator that replaces its (single) element.
    acc_slot: Option<(TensorId, PointerValue<'ctx>)>,
}

use super::lower::Operand;

fn position_strides(hir: &Hir, b: &Buffer) -> Vec<u64> {
    b.position_strides(hir).into_iter().map(|s| s as u64).collect()
}

impl<'a, 'ctx> Gen<'a, 'ctx> {
    fn ft(&self, e: ElemType) -> FloatType<'ctx> {
        match e {
            ElemType::F64 => self.ctx.f64_type(),
            ElemType::F32 => self.ctx.f32_type(),
        }
    }
    fn i64c(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v, false)
    }
    fn name(&mut self, base: &str) -> String {
        self.counter += 1;
        format!("{base}.{}", self.counter)
    }
    fn set_target_attrs(&self, f: FunctionValue<'ctx>) {
        f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("target-cpu", &self.cpu));
        if !self.features.is_empty() {
            f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("target-features", &self.features));
        }
        let nounwind = inkwell::attributes::Attribute::get_named_enum_kind_id("nounwind");
        f.add_attribute(AttributeLoc::Function, self.ctx.create_enum_attribute(nounwind, 0));
    }
    fn current_fn(&self) -> FunctionValue<'ctx> {
        self.func.expect("inside a function")
    }

    /// `for i in 0..extent { body(i) }` (extent ≥ 1).
    fn build_loop(&mut self, extent: u64, body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), CodegenError>) -> Result<(), CodegenError> {
        self.build_loop_hinted(extent, false, body)
    }

    /// [`Self::build_loop`]; with `vectorize`, the loop carries
    /// `llvm.loop.vectorize.enable`, which lets LLVM reassociate a sum (a reduction
    /// loop is then vectorized like `-ffast-math` would).
    fn build_loop_hinted(
        &mut self,
        extent: u64,
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
        let cond = self.b.build_int_compare(IntPredicate::ULT, next, self.i64c(extent), "i.cond")?;
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
            LLVMConstInt, LLVMGetMDKindIDInContext, LLVMInt1TypeInContext, LLVMMDNodeInContext2, LLVMMDStringInContext2,
            LLVMMetadataAsValue, LLVMSetMetadata, LLVMValueAsMetadata,
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

    /// Offset of `t[indices]` with every index bound.
    fn offset(&self, t: TensorId, indices: &[IndexId]) -> Result<IntValue<'ctx>, CodegenError> {
        let st = &self.strides[&t];
        let mut off = self.i64c(0);
        for (p, &i) in indices.iter().enumerate() {
            if st[p] == 0 {
                continue;
            }
            let v = self.bound[&i];
            let term = if st[p] == 1 { v } else { self.b.build_int_mul(v, self.i64c(st[p]), "o")? };
            off = self.b.build_int_add(off, term, "o")?;
        }
        Ok(off)
    }

    /// Offset of `t[indices]` counting only the indices bound now.
    fn partial_offset(&self, t: TensorId, indices: &[IndexId]) -> Result<IntValue<'ctx>, CodegenError> {
        let st = &self.strides[&t];
        let mut off = self.i64c(0);
        for (p, &i) in indices.iter().enumerate() {
            if st[p] == 0 {
                continue;
            }
            if let Some(&v) = self.bound.get(&i) {
                let term = self.b.build_int_mul(v, self.i64c(st[p]), "o")?;
                off = self.b.build_int_add(off, term, "o")?;
            }
        }
        Ok(off)
    }

    fn declare(&self, name: &str, ret: Option<BasicTypeEnum<'ctx>>, params: &[BasicMetadataTypeEnum<'ctx>]) -> FunctionValue<'ctx> {
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
        let params: Vec<BasicMetadataTypeEnum> =
            code.args.iter().map(|&t| self.ft(hir.tensors[t].elem).ptr_type(AddressSpace::default()).into()).collect();
        let body = self.module.add_function(&format!("tcc_{}__body", code.name), i32t.fn_type(&params, false), None);
        self.set_target_attrs(body);
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for k in 0..code.args.len() {
            body.add_attribute(AttributeLoc::Param(k as u32), self.ctx.create_enum_attribute(noalias, 0));
        }
        self.func = Some(body);
        self.bufs.clear();
        self.strides.clear();
        self.bound.clear();
        let entry = self.ctx.append_basic_block(body, "entry");
        self.b.position_at_end(entry);
        for (k, &t) in code.args.iter().enumerate() {
            let p = body.get_nth_param(k as u32).expect("param").into_pointer_value();
            self.bufs.insert(t, p);
        }
        for (&t, buf) in &nest.buffers {
            if !hir.tensors[t].role.is_read_only() && hir.tensors[t].role != Role::Temporary && buf.stored.len() != hir.tensors[t].dims.len() {
                return Err(err(format!("internal: output `{}` is sliced", hir.tensors[t].name)));
            }
            self.strides.insert(t, position_strides(hir, buf));
        }
        // Temporaries: calloc'd (zero, as the interpreter's), freed at the end.
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let calloc = self.declare("calloc", Some(i8p.into()), &[self.ctx.i64_type().into(), self.ctx.i64_type().into()]);
        let free = self.declare("free", None, &[i8p.into()]);
        let mut temps = Vec::new();
        for (&t, buf) in &nest.buffers {
            if hir.tensors[t].role != Role::Temporary || self.bufs.contains_key(&t) {
                continue;
            }
            let elem = hir.tensors[t].elem;
            let n = self.i64c(buf.elements.max(1) as u64);
            let sz = self.i64c(elem.size_bytes() as u64);
            let raw = self.b.build_call(calloc, &[n.into(), sz.into()], "tmp")?.try_as_basic_value().left().expect("ptr").into_pointer_value();
            temps.push(raw);
            let p = self.b.build_pointer_cast(raw, self.ft(elem).ptr_type(AddressSpace::default()), "tmpT")?;
            self.bufs.insert(t, p);
        }
        if !temps.is_empty() {
            let mut any_null = self.ctx.bool_type().const_zero();
            for &p in &temps {
                let isn = self.b.build_is_null(p, "isnull")?;
                any_null = self.b.build_or(any_null, isn, "anynull")?;
            }
            let fail = self.ctx.append_basic_block(body, "oom");
            let ok = self.ctx.append_basic_block(body, "run");
            self.b.build_conditional_branch(any_null, fail, ok)?;
            self.b.position_at_end(fail);
            for &p in &temps {
                self.b.build_call(free, &[p.into()], "")?;
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
        self.nodes(&nest.body, code.unit)?;
        for &p in &temps {
            self.b.build_call(free, &[p.into()], "")?;
        }
        self.b.build_return(Some(&i32t.const_int(0, false)))?;

        // The argv entry point.
        let pp = i8p.ptr_type(AddressSpace::default());
        let argv = self.module.add_function(&format!("tcc_{}__argv", code.name), i32t.fn_type(&[pp.into()], false), None);
        self.set_target_attrs(argv);
        let e = self.ctx.append_basic_block(argv, "entry");
        self.b.position_at_end(e);
        let base = argv.get_nth_param(0).expect("argv").into_pointer_value();
        let mut args: Vec<BasicMetadataValueEnum> = Vec::new();
        for (k, &t) in code.args.iter().enumerate() {
            let slot = unsafe { self.b.build_in_bounds_gep(base, &[self.i64c(k as u64)], "slot")? };
            let raw = self.b.build_load(slot, "arg")?.into_pointer_value();
            let p = self.b.build_pointer_cast(raw, self.ft(hir.tensors[t].elem).ptr_type(AddressSpace::default()), "argT")?;
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

    fn nodes(&mut self, nodes: &[Node], unit: UnitId) -> Result<(), CodegenError> {
        let mut skip_zero = None;
        for (pos, n) in nodes.iter().enumerate() {
            // `Zero` right before its statement's `Compute`, whose first term is a
            // GETT: the GETT overwrites instead (no separate pass over the output).
            if let (Node::Zero { stmt, .. }, Some(Node::Compute { stmt: next })) = (n, nodes.get(pos + 1)) {
                if stmt == next && self.overwrite_gett(&self.hir.units[unit].stmts[*stmt]) {
                    skip_zero = Some(*stmt);
                    continue;
                }
            }
            match n {
                Node::Loop { index, extent, body } => {
                    if *extent == 0 {
                        continue;
                    }
                    let index = *index;
                    self.build_loop(*extent as u64, &mut |g, i| {
                        g.bound.insert(index, i);
                        g.nodes(body, unit)?;
                        g.bound.remove(&index);
                        Ok(())
                    })?;
                }
                Node::Zero { tensor, stmt } => {
                    let idx = self.hir.units[unit].stmts[*stmt].lhs.indices.clone();
                    self.zero_region(*tensor, &idx)?;
                }
                Node::Compute { stmt } => {
                    let st = self.hir.units[unit].stmts[*stmt].clone();
                    if !fusible(&st) && !st.accumulate {
                        self.zero_all(st.lhs.tensor)?;
                    }
                    let overwrite = skip_zero.take() == Some(*stmt);
                    for term in 0..st.rhs.terms.len() {
                        self.term(&st, term, overwrite && term == 0)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn zero_all(&mut self, t: TensorId) -> Result<(), CodegenError> {
        let n: u64 = {
            let st = &self.strides[&t];
            let shape = self.hir.shape(t);
            st.iter().zip(&shape).filter(|(s, _)| **s > 0).map(|(_, &n)| n as u64).product()
        };
        if n == 0 {
            return Ok(());
        }
        let zero = self.ft(self.hir.tensors[t].elem).const_zero();
        self.build_loop(n, &mut |g, i| {
            let p = g.elem_ptr(t, i)?;
            g.b.build_store(p, zero)?;
            Ok(())
        })
    }

    /// Zeroes what `t[idx]` covers with the loops bound now.
    fn zero_region(&mut self, t: TensorId, idx: &[IndexId]) -> Result<(), CodegenError> {
        let free: Vec<IndexId> =
            idx.iter().enumerate().filter(|(p, i)| self.strides[&t][*p] > 0 && !self.bound.contains_key(i)).map(|(_, &i)| i).collect();
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

    /// Loops over `vars` (outermost first) binding each, then `inner`.
    fn nest(&mut self, vars: &[IndexId], inner: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>) -> Result<(), CodegenError> {
        self.nest_hinted(vars, false, inner)
    }

    /// [`Self::nest_hinted`]; with `parallel`, the outermost loop is outlined into a
    /// function `void (i8* ctx, i64 lo, i64 hi)` run on the runtime's pool through
    /// `tcc_rt_parallel_range` (its index must be one of the written tensor's, so
    /// that chunks write disjoint slices). The buffers and bound indices the body
    /// uses travel in an `i64` array.
    ///
    /// With `sum = Some(c)` the loop is a reduction into the single element of `c`
    /// the bound indices select: each chunk sums into a private accumulator and
    /// returns it, `tcc_rt_parallel_sum` adds the chunks' sums in chunk order (the
    /// result depends on the thread count only), and the total is added to `c`.
    fn nest_parallel(
        &mut self,
        vars: &[IndexId],
        parallel: bool,
        hint: bool,
        sum: Option<(TensorId, &[IndexId])>,
        inner: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        if !parallel || vars.is_empty() {
            return self.nest_hinted(vars, hint, inner);
        }
        let (pv, rest) = (vars[0], &vars[1..]);
        let i64t = self.ctx.i64_type();
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let mut bufs: Vec<(TensorId, PointerValue<'ctx>)> = self.bufs.iter().map(|(&t, &p)| (t, p)).collect();
        bufs.sort_by_key(|x| x.0);
        let mut bound: Vec<(IndexId, IntValue<'ctx>)> = self.bound.iter().map(|(&i, &v)| (i, v)).collect();
        bound.sort_by_key(|x| x.0);
        let n = (bufs.len() + bound.len()).max(1) as u32;
        // The context array lives in the caller's entry block (not in a loop).
        let caller = self.current_fn();
        let entry = caller.get_first_basic_block().expect("entry");
        let eb = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => eb.position_before(&i),
            None => eb.position_at_end(entry),
        }
        let arr = eb.build_alloca(i64t.array_type(n), "ctx")?;
        let slot = |g: &Self, k: u64| -> Result<PointerValue<'ctx>, CodegenError> {
            Ok(unsafe { g.b.build_in_bounds_gep(arr, &[g.i64c(0), g.i64c(k)], "slot")? })
        };
        let mut k = 0u64;
        for (_, p) in &bufs {
            let v = self.b.build_ptr_to_int(*p, i64t, "pv")?;
            self.b.build_store(slot(self, k)?, v)?;
            k += 1;
        }
        for (_, v) in &bound {
            self.b.build_store(slot(self, k)?, *v)?;
            k += 1;
        }
        let name = self.name(&format!("{}.par", caller.get_name().to_string_lossy()));
        let f64t = self.ctx.f64_type();
        let fty = match sum {
            None => self.ctx.void_type().fn_type(&[i8p.into(), i64t.into(), i64t.into()], false),
            Some(_) => f64t.fn_type(&[i8p.into(), i64t.into(), i64t.into()], false),
        };
        let f = self.module.add_function(&name, fty, Some(Linkage::Internal));
        self.set_target_attrs(f);
        let fp = self.b.build_pointer_cast(f.as_global_value().as_pointer_value(), i8p, "fp")?;
        let ctxp = self.b.build_pointer_cast(slot(self, 0)?, i8p, "ctxp")?;
        let n_iter = self.i64c(self.extent(pv));
        match sum {
            None => {
                let rt = self.declare("tcc_rt_parallel_range", None, &[i64t.into(), i8p.into(), i8p.into()]);
                self.b.build_call(rt, &[n_iter.into(), fp.into(), ctxp.into()], "")?;
            }
            Some((c, lhs_idx)) => {
                let rt = self.declare("tcc_rt_parallel_sum", Some(f64t.into()), &[i64t.into(), i8p.into(), i8p.into()]);
                let total = self.b.build_call(rt, &[n_iter.into(), fp.into(), ctxp.into()], "total")?;
                let total = total.try_as_basic_value().left().expect("f64").into_float_value();
                let ct = self.ft(self.hir.tensors[c].elem);
                let total = self.b.build_float_cast(total, ct, "total.t")?;
                let off = self.offset(c, lhs_idx)?;
                let p = self.elem_ptr(c, off)?;
                let old = self.b.build_load(p, "c")?.into_float_value();
                let new = self.b.build_float_add(old, total, "c.new")?;
                self.b.build_store(p, new)?;
            }
        }

        // The outlined wrapper loads the captures and calls the chunk function,
        // whose buffer parameters are `noalias` (as in the unit's body).
        let saved_block = self.b.get_insert_block().expect("positioned");
        let saved = (self.func, std::mem::take(&mut self.bufs), std::mem::take(&mut self.bound));
        let mut params: Vec<BasicMetadataTypeEnum> = bufs.iter().map(|(_, p)| p.get_type().into()).collect();
        params.extend(std::iter::repeat_n(BasicMetadataTypeEnum::from(i64t), bound.len() + 2));
        let chunk_ty = match sum {
            None => self.ctx.void_type().fn_type(&params, false),
            Some(_) => f64t.fn_type(&params, false),
        };
        let chunk = self.module.add_function(&format!("{name}.chunk"), chunk_ty, Some(Linkage::Internal));
        self.set_target_attrs(chunk);
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for k in 0..bufs.len() {
            chunk.add_attribute(AttributeLoc::Param(k as u32), self.ctx.create_enum_attribute(noalias, 0));
        }
        self.func = Some(f);
        let fe = self.ctx.append_basic_block(f, "entry");
        self.b.position_at_end(fe);
        let cp = self.b.build_pointer_cast(f.get_nth_param(0).expect("ctx").into_pointer_value(), i64t.ptr_type(AddressSpace::default()), "c")?;
        let mut args: Vec<BasicMetadataValueEnum> = Vec::new();
        for (k, (_, p)) in bufs.iter().enumerate() {
            let sp = unsafe { self.b.build_in_bounds_gep(cp, &[self.i64c(k as u64)], "s")? };
            let v = self.b.build_load(sp, "v")?.into_int_value();
            args.push(self.b.build_int_to_ptr(v, p.get_type(), "buf")?.into());
        }
        for k in 0..bound.len() {
            let sp = unsafe { self.b.build_in_bounds_gep(cp, &[self.i64c((bufs.len() + k) as u64)], "s")? };
            args.push(self.b.build_load(sp, "v")?.into());
        }
        args.push(f.get_nth_param(1).expect("lo").into());
        args.push(f.get_nth_param(2).expect("hi").into());
        let part = self.b.build_call(chunk, &args, "part")?;
        match sum {
            None => self.b.build_return(None)?,
            Some(_) => self.b.build_return(Some(&part.try_as_basic_value().left().expect("f64")))?,
        };

        self.func = Some(chunk);
        let fe = self.ctx.append_basic_block(chunk, "entry");
        self.b.position_at_end(fe);
        for (k, (t, _)) in bufs.iter().enumerate() {
            self.bufs.insert(*t, chunk.get_nth_param(k as u32).expect("buf").into_pointer_value());
        }
        for (k, (i, _)) in bound.iter().enumerate() {
            self.bound.insert(*i, chunk.get_nth_param((bufs.len() + k) as u32).expect("index").into_int_value());
        }
        let lo = chunk.get_nth_param((bufs.len() + bound.len()) as u32).expect("lo").into_int_value();
        let hi = chunk.get_nth_param((bufs.len() + bound.len() + 1) as u32).expect("hi").into_int_value();
        let saved_acc = self.acc_slot.take();
        if let Some((c, _)) = sum {
            let ct = self.ft(self.hir.tensors[c].elem);
            let acc = self.b.build_alloca(ct, "acc")?;
            self.b.build_store(acc, ct.const_zero())?;
            self.acc_slot = Some((c, acc));
        }
        let head = self.ctx.append_basic_block(chunk, "ploop");
        let exit = self.ctx.append_basic_block(chunk, "ploop.exit");
        let any = self.b.build_int_compare(IntPredicate::SLT, lo, hi, "any")?;
        self.b.build_conditional_branch(any, head, exit)?;
        self.b.position_at_end(head);
        let phi = self.b.build_phi(i64t, "pi")?;
        phi.add_incoming(&[(&lo, fe)]);
        let iv = phi.as_basic_value().into_int_value();
        self.bound.insert(pv, iv);
        self.nest_hinted(rest, hint, inner)?;
        let next = self.b.build_int_add(iv, self.i64c(1), "pn")?;
        let latch = self.b.get_insert_block().expect("positioned");
        phi.add_incoming(&[(&next, latch)]);
        let more = self.b.build_int_compare(IntPredicate::SLT, next, hi, "more")?;
        let br = self.b.build_conditional_branch(more, head, exit)?;
        if hint && rest.is_empty() {
            self.mark_vectorize(br);
        }
        self.b.position_at_end(exit);
        match self.acc_slot.take() {
            Some((_, acc)) => {
                let v = self.b.build_load(acc, "acc.v")?.into_float_value();
                let v = self.b.build_float_ext(v, f64t, "acc.d")?;
                self.b.build_return(Some(&v))?;
            }
            None => {
                self.b.build_return(None)?;
            }
        }
        self.acc_slot = saved_acc;
        self.func = saved.0;
        self.bufs = saved.1;
        self.bound = saved.2;
        self.b.position_at_end(saved_block);
        Ok(())
    }

    /// The trip count of `v`'s loop: its size, or that of the indices collapsed into it.
    fn extent(&self, v: IndexId) -> u64 {
        self.extents.get(&v).copied().unwrap_or(self.hir.index_size(v) as u64)
    }

    /// [`Self::nest`], the innermost loop marked for vectorization when `hint`.
    fn nest_hinted(&mut self, vars: &[IndexId], hint: bool, inner: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>) -> Result<(), CodegenError> {
        match vars.split_first() {
            None => inner(self),
            Some((&v, rest)) => {
                let extent = self.extent(v);
                self.build_loop_hinted(extent, hint && rest.is_empty(), &mut |g, i| {
                    g.bound.insert(v, i);
                    g.nest_hinted(rest, hint, inner)?;
                    g.bound.remove(&v);
                    Ok(())
                })
            }
        }
    }

    /// The GETT plan of term `k` of `st` under the loops bound now, if it is one.
    fn term_gett(&self, st: &Stmt, k: usize) -> Result<Option<(Vec<Operand>, GettPlan)>, CodegenError> {
        let hir = self.hir;
        let ops = super::lower::term_operands(&st.rhs.terms[k]).map_err(err)?;
        let c = st.lhs.tensor;
        let vars = super::lower::term_vars(&st.lhs.indices, &ops, |i| self.bound.contains_key(&i));
        if vars.iter().any(|&v| hir.index_size(v) == 0) {
            return Ok(None);
        }
        if ops.len() != 2 || !ops.iter().all(|o| o.func.is_none() && hir.tensors[o.tensor].elem == hir.tensors[c].elem) {
            return Ok(None);
        }
        let stride_in = |t: TensorId, idx: &[IndexId], v: IndexId| -> u64 {
            idx.iter().zip(&self.strides[&t]).filter(|(i, _)| **i == v).map(|(_, s)| *s).sum()
        };
        Ok(self.gett_plan(st, &ops, &vars, &stride_in).map(|p| (ops, p)))
    }

    /// Whether `st`'s first term is a GETT that may overwrite its output (nothing
    /// it reads is the output, every index has a size).
    fn overwrite_gett(&self, st: &Stmt) -> bool {
        let reads_self = super::lower::term_operands(&st.rhs.terms[0]).map(|ops| ops.iter().any(|o| o.tensor == st.lhs.tensor)).unwrap_or(true);
        !st.rhs.terms.is_empty() && !reads_self && matches!(self.term_gett(st, 0), Ok(Some(_)))
    }

    fn term(&mut self, st: &Stmt, k: usize, overwrite: bool) -> Result<(), CodegenError> {
        let hir = self.hir;
        let term = &st.rhs.terms[k];
        if let Some((ops, plan)) = self.term_gett(st, k)? {
            return self.gett(st, term.coef, &ops, plan, overwrite);
        }
        debug_assert!(!overwrite, "overwrite is only planned for GETT terms");
        let ops = super::lower::term_operands(term).map_err(err)?;
        let c = st.lhs.tensor;
        let vars = super::lower::term_vars(&st.lhs.indices, &ops, |i| self.bound.contains_key(&i));
        if vars.iter().any(|&v| hir.index_size(v) == 0) {
            return Ok(());
        }
        // Stride of each var in each reference (lhs first).
        let stride_in = |t: TensorId, idx: &[IndexId], v: IndexId| -> u64 {
            idx.iter().zip(&self.strides[&t]).filter(|(i, _)| **i == v).map(|(_, s)| *s).sum()
        };
        // Loop order: larger strides outside; innermost the index whose accesses
        // are the most contiguous — a strided read costs 2, a strided write 3, a
        // sum (the written element fixed) 1, as it needs a reassociated reduction;
        // ties go to the larger extent.
        let mut refs: Vec<(TensorId, &[IndexId])> = vec![(c, st.lhs.indices.as_slice())];
        refs.extend(ops.iter().map(|o| (o.tensor, o.indices.as_slice())));
        let score = |v: IndexId| -> u64 {
            refs.iter().map(|(t, idx)| stride_in(*t, idx, v)).filter(|&s| s > 0).min().unwrap_or(u64::MAX)
        };
        let inner_cost = |v: IndexId| -> (u64, std::cmp::Reverse<usize>) {
            let mut cost = match stride_in(c, &st.lhs.indices, v) {
                0 => 1,
                1 => 0,
                _ => 3,
            };
            for o in &ops {
                cost += match stride_in(o.tensor, &o.indices, v) {
                    0 | 1 => 0,
                    _ => 2,
                };
            }
            (cost, std::cmp::Reverse(hir.index_size(v)))
        };
        // Outer to inner by stride in the largest tensor (it moves the most
        // memory), then in the next largest, …; `score` breaks ties.
        let mut by_size: Vec<(TensorId, &[IndexId])> = refs.clone();
        by_size.sort_by_key(|(t, _)| std::cmp::Reverse(hir.shape(*t).iter().map(|&n| n as u64).product::<u64>()));
        let mut order = vars.clone();
        order.sort_by_key(|&v| std::cmp::Reverse((by_size.iter().map(|(t, idx)| stride_in(*t, idx, v)).collect::<Vec<_>>(), score(v))));
        let mut reduction_inner = false;
        if let Some(&inner) = order.iter().min_by_key(|&&v| inner_cost(v)) {
            order.retain(|&v| v != inner);
            order.push(inner);
            reduction_inner = !st.lhs.indices.contains(&inner);
        }
        let lt = self.ft(hir.tensors[c].elem);
        let coef = term.coef;
        let lhs_idx = st.lhs.indices.clone();
        // Threads: the outermost loop over a written index, when there is enough work.
        let work: f64 = order.iter().map(|&v| hir.index_size(v) as f64).product();
        let par = if work >= self.parallel_min && order.len() >= 2 {
            order[..order.len() - 1].iter().position(|v| st.lhs.indices.contains(v) && hir.index_size(*v) >= 2)
        } else {
            None
        };
        if let Some(p) = par {
            let v = order.remove(p);
            order.insert(0, v);
        }
        let (order, zeroed) = collapse(&order, &refs, &|t, idx, v| stride_in(t, idx, v), &|v| hir.index_size(v) as u64);
        // Nothing written is left to split: a (long) sum into one element is
        // split instead, each thread summing a range.
        let one_element = !order.iter().any(|v| st.lhs.indices.contains(v));
        let sum_par = par.is_none() && one_element && work >= self.parallel_min && order.first().is_some_and(|&v| hir.index_size(v) >= 2);
        let zero = self.i64c(0);
        for &(v, n) in &zeroed {
            self.bound.insert(v, zero);
            self.extents.insert(n.0, n.1);
        }
        let sum = sum_par.then_some((c, st.lhs.indices.as_slice()));
        let result = self.nest_parallel(&order, par.is_some() || sum_par, reduction_inner, sum, &mut |g| {
            let mut prod: Option<FloatValue> = if coef == 1.0 { None } else { Some(lt.const_float(coef)) };
            for o in &ops {
                let off = g.offset(o.tensor, &o.indices)?;
                let p = g.elem_ptr(o.tensor, off)?;
                let mut v = g.b.build_load(p, "x")?.into_float_value();
                let ot = g.ft(hir.tensors[o.tensor].elem);
                if ot != lt {
                    v = g.b.build_float_cast(v, lt, "cvt")?;
                }
                if let Some(func) = o.func {
                    v = g.apply(func, v, lt)?;
                }
                prod = Some(match prod {
                    None => v,
                    Some(p) => g.b.build_float_mul(p, v, "m")?,
                });
            }
            let prod = prod.unwrap_or_else(|| lt.const_float(coef));
            let p = match g.acc_slot {
                Some((t, acc)) if t == c => acc,
                _ => {
                    let off = g.offset(c, &lhs_idx)?;
                    g.elem_ptr(c, off)?
                }
            };
            let old = g.b.build_load(p, "c")?.into_float_value();
            let new = g.b.build_float_add(old, prod, "c.new")?;
            g.b.build_store(p, new)?;
            Ok(())
        });
        for &(v, n) in &zeroed {
            self.bound.remove(&v);
            self.extents.remove(&n.0);
        }
        result
    }

    fn intrinsic(&self, name: &str, t: FloatType<'ctx>) -> Result<FunctionValue<'ctx>, CodegenError> {
        Intrinsic::find(name)
            .and_then(|i| i.get_declaration(self.module, &[t.into()]))
            .ok_or_else(|| err(format!("LLVM intrinsic {name} not found")))
    }

    fn call1(&self, f: FunctionValue<'ctx>, args: &[FloatValue<'ctx>]) -> Result<FloatValue<'ctx>, CodegenError> {
        let a: Vec<BasicMetadataValueEnum> = args.iter().map(|&x| x.into()).collect();
        Ok(self.b.build_call(f, &a, "f")?.try_as_basic_value().left().expect("value").into_float_value())
    }

    fn libm(&self, name: &str, t: FloatType<'ctx>) -> FunctionValue<'ctx> {
        let n = if t == self.ctx.f32_type() { format!("{name}f") } else { name.to_string() };
        self.declare(&n, Some(t.into()), &[t.into()])
    }

    /// The element-wise function, as [`Func::apply`] defines it.
    fn apply(&self, func: Func, x: FloatValue<'ctx>, t: FloatType<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let one = t.const_float(1.0);
        let b = &self.b;
        Ok(match func {
            Func::Exp => self.call1(self.intrinsic("llvm.exp", t)?, &[x])?,
            Func::Log => self.call1(self.intrinsic("llvm.log", t)?, &[x])?,
            Func::Sqrt => self.call1(self.intrinsic("llvm.sqrt", t)?, &[x])?,
            Func::Abs => self.call1(self.intrinsic("llvm.fabs", t)?, &[x])?,
            Func::Recip => b.build_float_div(one, x, "recip")?,
            Func::Relu => self.call1(self.intrinsic("llvm.maxnum", t)?, &[x, t.const_zero()])?,
            Func::Tanh => self.call1(self.libm("tanh", t), &[x])?,
            Func::Sigmoid | Func::Silu => {
                let neg = b.build_float_neg(x, "neg")?;
                let e = self.call1(self.intrinsic("llvm.exp", t)?, &[neg])?;
                let d = b.build_float_add(one, e, "den")?;
                let num = if func == Func::Sigmoid { one } else { x };
                b.build_float_div(num, d, "sig")?
            }
            Func::Gelu => {
                let x3 = b.build_float_mul(b.build_float_mul(x, x, "x2")?, x, "x3")?;
                let inner = b.build_float_add(x, b.build_float_mul(t.const_float(0.044715), x3, "a")?, "in")?;
                let k = (2.0 / std::f64::consts::PI).sqrt();
                let th = self.call1(self.libm("tanh", t), &[b.build_float_mul(t.const_float(k), inner, "s")?])?;
                let h = b.build_float_mul(t.const_float(0.5), x, "h")?;
                b.build_float_mul(h, b.build_float_add(one, th, "1p")?, "gelu")?
            }
        })
    }

    // --------------------------------------------------------------------------
    // GETT
    // --------------------------------------------------------------------------

    /// Index groups of a binary contraction, or `None` when plain loops are better.
    fn gett_plan(
        &self,
        st: &Stmt,
        ops: &[Operand],
        vars: &[IndexId],
        stride_in: &dyn Fn(TensorId, &[IndexId], IndexId) -> u64,
    ) -> Option<GettPlan> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let build = |a: &Operand, b: &Operand| -> Vec<[i64; 5]> {
            vars.iter()
                .map(|&v| {
                    let (sa, sb, sc) = (stride_in(a.tensor, &a.indices, v), stride_in(b.tensor, &b.indices, v), stride_in(c, &st.lhs.indices, v));
                    let (ia, ib, ic) = (a.indices.contains(&v), b.indices.contains(&v), st.lhs.indices.contains(&v));
                    let kind = match (ic, ia, ib) {
                        (true, true, true) => 0,
                        (true, true, false) => 1,
                        (true, false, true) => 2,
                        (false, _, _) => 3,
                        (true, false, false) => 0,
                    };
                    [kind, hir.index_size(v) as i64, sa as i64, sb as i64, sc as i64]
                })
                .collect()
        };
        let mut swap = false;
        let mut dims = build(&ops[0], &ops[1]);
        // The written tensor's most contiguous index should be a row (m) index.
        if let Some(d) = dims.iter().filter(|d| d[0] == 1 || d[0] == 2).min_by_key(|d| d[4]) {
            if d[0] == 2 {
                swap = true;
                dims = build(&ops[1], &ops[0]);
            }
        }
        let size = |k: i64| -> f64 { dims.iter().filter(|d| d[0] == k).map(|d| d[1] as f64).product() };
        let (m, n, k) = (size(1), size(2), size(3));
        let worth = match self.gemm_min {
            Some(min) => m * n * k >= min,
            None => m >= 8.0 && n >= 8.0 && k >= 4.0 && m * n * k >= 32768.0,
        };
        if !worth {
            return None;
        }
        // Within a group: larger strides first (the last index varies fastest).
        dims.sort_by_key(|d| {
            let s = match d[0] {
                1 | 2 | 0 => d[4],
                _ => d[2].max(d[3]),
            };
            (d[0], std::cmp::Reverse(s))
        });
        Some(GettPlan { dims, swap })
    }

    fn gett(&mut self, st: &Stmt, coef: f64, ops: &[Operand], plan: GettPlan, overwrite: bool) -> Result<(), CodegenError> {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let elem = hir.tensors[c].elem;
        let uk = self.ukernel(elem)?;
        let (a, b) = if plan.swap { (&ops[1], &ops[0]) } else { (&ops[0], &ops[1]) };
        let i64t = self.ctx.i64_type();
        let row = |d: &[i64; 5]| i64t.const_array(&d.iter().map(|&x| i64t.const_int(x as u64, true)).collect::<Vec<_>>());
        let rows: Vec<_> = plan.dims.iter().map(row).collect();
        let arr_t = i64t.array_type(5);
        let dims_val = arr_t.const_array(&rows);
        let name = self.name("gett.dims");
        let g_dims = self.module.add_global(arr_t.array_type(rows.len() as u32), None, &name);
        g_dims.set_initializer(&dims_val);
        g_dims.set_constant(true);
        g_dims.set_linkage(Linkage::Private);
        // Cache blocks: kc·nr of B in L1, mc·kc of A in L2 (mc = 192 measured best
        // for f64 on a 2 MB-L2 core), kc·nc of B in L3.
        let (kc, mc, nc) = match elem {
            ElemType::F64 => (256, 192, 4096),
            ElemType::F32 => (512, 384, 4096),
        };
        let params = [uk.mr as i64, uk.nr as i64, mc, nc, kc];
        let name = self.name("gett.params");
        let g_par = self.module.add_global(arr_t, None, &name);
        g_par.set_initializer(&row(&params));
        g_par.set_constant(true);
        g_par.set_linkage(Linkage::Private);
        let zero = self.i64c(0);
        let dims_ptr = unsafe { self.b.build_in_bounds_gep(g_dims.as_pointer_value(), &[zero, zero, zero], "dims")? };
        let par_ptr = unsafe { self.b.build_in_bounds_gep(g_par.as_pointer_value(), &[zero, zero], "params")? };
        let pa = self.elem_ptr(a.tensor, self.partial_offset(a.tensor, &a.indices)?)?;
        let pb = self.elem_ptr(b.tensor, self.partial_offset(b.tensor, &b.indices)?)?;
        let pc = self.elem_ptr(c, self.partial_offset(c, &st.lhs.indices)?)?;
        let ft = self.ft(elem);
        let tp = ft.ptr_type(AddressSpace::default());
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let i64p = i64t.ptr_type(AddressSpace::default());
        let fname = match elem {
            ElemType::F64 => "tcc_rt_gett_f64",
            ElemType::F32 => "tcc_rt_gett_f32",
        };
        let f = self.declare(fname, None, &[tp.into(), tp.into(), tp.into(), ft.into(), i64p.into(), i64t.into(), i64p.into(), i8p.into(), i64t.into()]);
        let ukp = self.b.build_pointer_cast(uk.f.as_global_value().as_pointer_value(), i8p, "uk")?;
        self.b.build_call(
            f,
            &[
                pa.into(),
                pb.into(),
                pc.into(),
                ft.const_float(coef).into(),
                dims_ptr.into(),
                self.i64c(plan.dims.len() as u64).into(),
                par_ptr.into(),
                ukp.into(),
                self.i64c(overwrite as u64).into(),
            ],
            "",
        )?;
        Ok(())
    }

    /// The register-blocked micro-kernel for `elem`, generated once per module:
    /// `void uk(i64 kc, T* Ap, T* Bp, T* C, i64 rs, i64 cs, T alpha)` computing
    /// `C[i*rs + j*cs] += alpha Σ_p Ap[p*MR + i] Bp[p*NR + j]` over an `MR × NR` tile,
    /// with `MR/lanes` vectors per column and `NR` broadcasts per step.
    fn ukernel(&mut self, elem: ElemType) -> Result<Uk<'ctx>, CodegenError> {
        if let Some(u) = self.uk.get(&elem) {
            return Ok(*u);
        }
        let lanes = (self.bits / (8 * elem.size_bytes() as u32)) as usize;
        let nv = 2usize;
        let mr = lanes * nv;
        let nr = match self.bits {
            512 => 12,
            256 => 6,
            _ => 4,
        };
        let ft = self.ft(elem);
        let vt = ft.vec_type(lanes as u32);
        let i64t = self.ctx.i64_type();
        let tp = ft.ptr_type(AddressSpace::default());
        let vp = vt.ptr_type(AddressSpace::default());
        let fty = self.ctx.void_type().fn_type(&[i64t.into(), tp.into(), tp.into(), tp.into(), i64t.into(), i64t.into(), ft.into(), i64t.into(), i64t.into()], false);
        let name = format!("tcc_uk_{}_{}x{}", elem.name(), mr, nr);
        let f = self.module.add_function(&name, fty, Some(Linkage::Internal));
        self.set_target_attrs(f);
        if self.bits == 512 {
            f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("min-legal-vector-width", "512"));
            f.add_attribute(AttributeLoc::Function, self.ctx.create_string_attribute("prefer-vector-width", "512"));
        }
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for k in 1..4 {
            f.add_attribute(AttributeLoc::Param(k), self.ctx.create_enum_attribute(noalias, 0));
        }
        let saved = self.b.get_insert_block();
        let p = |k: u32| f.get_nth_param(k).expect("param");
        let (mrows, ncols) = (p(7).into_int_value(), p(8).into_int_value());
        let (kc, ap, bp, cp, rs, cs, alpha) = (
            p(0).into_int_value(),
            p(1).into_pointer_value(),
            p(2).into_pointer_value(),
            p(3).into_pointer_value(),
            p(4).into_int_value(),
            p(5).into_int_value(),
            p(6).into_float_value(),
        );
        let entry = self.ctx.append_basic_block(f, "entry");
        let lp = self.ctx.append_basic_block(f, "k");
        let done = self.ctx.append_basic_block(f, "store");
        let b = &self.b;
        b.position_at_end(entry);
        let fma = Intrinsic::find("llvm.fma").and_then(|i| i.get_declaration(self.module, &[vt.into()])).ok_or_else(|| err("llvm.fma"))?;
        // Prefetch the C tile (for writing) while the k loop runs: one line per
        // 64 bytes of each column.
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let i32t = self.ctx.i32_type();
        let prefetch = self.declare("llvm.prefetch.p0i8", None, &[i8p.into(), i32t.into(), i32t.into(), i32t.into()]);
        let col_bytes = mr * elem.size_bytes();
        for j in 0..nr {
            let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "pcol")?;
            for off in (0..col_bytes).step_by(64) {
                let o = b.build_int_add(col, i64t.const_int((off / elem.size_bytes()) as u64, false), "po")?;
                let ptr = unsafe { b.build_gep(cp, &[o], "pp")? };
                let ptr = b.build_pointer_cast(ptr, i8p, "pp8")?;
                b.build_call(prefetch, &[ptr.into(), i32t.const_int(1, false).into(), i32t.const_int(3, false).into(), i32t.const_int(1, false).into()], "")?;
            }
        }
        let has_k = b.build_int_compare(IntPredicate::SGT, kc, i64t.const_zero(), "hask")?;
        b.build_conditional_branch(has_k, lp, done)?;
        b.position_at_end(lp);
        let pk = b.build_phi(i64t, "p")?;
        pk.add_incoming(&[(&i64t.const_zero(), entry)]);
        let mut accs = Vec::new();
        for _ in 0..nv * nr {
            let phi = b.build_phi(vt, "acc")?;
            phi.add_incoming(&[(&vt.const_zero(), entry)]);
            accs.push(phi);
        }
        let pkv = pk.as_basic_value().into_int_value();
        let abase = b.build_int_mul(pkv, i64t.const_int(mr as u64, false), "ab")?;
        let bbase = b.build_int_mul(pkv, i64t.const_int(nr as u64, false), "bb")?;
        let mut avs = Vec::new();
        for v in 0..nv {
            let off = b.build_int_add(abase, i64t.const_int((v * lanes) as u64, false), "ao")?;
            let ptr = unsafe { b.build_in_bounds_gep(ap, &[off], "ap")? };
            let ptr = b.build_pointer_cast(ptr, vp, "apv")?;
            let ld = b.build_load(ptr, "a")?;
            if let Some(i) = ld.as_instruction_value() {
                let _ = i.set_alignment(elem.size_bytes() as u32);
            }
            avs.push(ld.into_vector_value());
        }
        let undef = vt.get_undef();
        let mask = self.ctx.i32_type().vec_type(lanes as u32).const_zero();
        let mut next = Vec::new();
        for j in 0..nr {
            let off = b.build_int_add(bbase, i64t.const_int(j as u64, false), "bo")?;
            let ptr = unsafe { b.build_in_bounds_gep(bp, &[off], "bp")? };
            let s = b.build_load(ptr, "b")?.into_float_value();
            let ins = b.build_insert_element(undef, s, self.ctx.i32_type().const_zero(), "bi")?;
            let splat = b.build_shuffle_vector(ins, undef, mask, "bs")?;
            for v in 0..nv {
                let acc = accs[j * nv + v].as_basic_value();
                let r = b.build_call(fma, &[avs[v].into(), splat.into(), acc.into()], "fma")?;
                next.push(r.try_as_basic_value().left().expect("vec"));
            }
        }
        let pnext = b.build_int_add(pkv, i64t.const_int(1, false), "pn")?;
        let lp_end = b.get_insert_block().expect("block");
        pk.add_incoming(&[(&pnext, lp_end)]);
        for (phi, v) in accs.iter().zip(&next) {
            phi.add_incoming(&[(v, lp_end)]);
        }
        let cont = b.build_int_compare(IntPredicate::SLT, pnext, kc, "more")?;
        b.build_conditional_branch(cont, lp, done)?;

        // Store: C += alpha * acc.
        b.position_at_end(done);
        let mut fin = Vec::new();
        for (k, phi) in accs.iter().enumerate() {
            let ph = b.build_phi(vt, "accf")?;
            ph.add_incoming(&[(&vt.const_zero(), entry), (&next[k], lp_end)]);
            fin.push(ph.as_basic_value().into_vector_value());
            let _ = phi;
        }
        let ins = b.build_insert_element(undef, alpha, self.ctx.i32_type().const_zero(), "al")?;
        let alpha_v = b.build_shuffle_vector(ins, undef, mask, "alv")?;
        let unit_rs = b.build_int_compare(IntPredicate::EQ, rs, i64t.const_int(1, false), "rs1")?;
        let vec_bb = self.ctx.append_basic_block(f, "store.vec");
        let sc_bb = self.ctx.append_basic_block(f, "store.scalar");
        let ret_bb = self.ctx.append_basic_block(f, "ret");
        let check_bb = self.ctx.append_basic_block(f, "store.check");
        let mask_bb = self.ctx.append_basic_block(f, "store.masked");
        b.build_conditional_branch(unit_rs, check_bb, sc_bb)?;
        b.position_at_end(check_bb);
        let full_m = b.build_int_compare(IntPredicate::EQ, mrows, i64t.const_int(mr as u64, false), "fullm")?;
        let full_n = b.build_int_compare(IntPredicate::EQ, ncols, i64t.const_int(nr as u64, false), "fulln")?;
        let full = b.build_and(full_m, full_n, "full")?;
        b.build_conditional_branch(full, vec_bb, mask_bb)?;
        // A partial tile (rows < MR or columns < NR, unit row stride): masked
        // loads and stores touch only the tile's elements.
        b.position_at_end(mask_bb);
        {
            let mload = Intrinsic::find("llvm.masked.load")
                .and_then(|i| i.get_declaration(self.module, &[vt.into(), vp.into()]))
                .ok_or_else(|| err("llvm.masked.load"))?;
            let mstore = Intrinsic::find("llvm.masked.store")
                .and_then(|i| i.get_declaration(self.module, &[vt.into(), vp.into()]))
                .ok_or_else(|| err("llvm.masked.store"))?;
            let iv = i64t.vec_type(lanes as u32);
            let iota = inkwell::types::VectorType::const_vector(&(0..lanes).map(|l| i64t.const_int(l as u64, false)).collect::<Vec<_>>());
            let iundef = iv.get_undef();
            let align = i32t.const_int(elem.size_bytes() as u64, false);
            for j in 0..nr {
                let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "col")?;
                let jok = b.build_int_compare(IntPredicate::SLT, i64t.const_int(j as u64, false), ncols, "jok")?;
                for v in 0..nv {
                    let left = b.build_int_sub(mrows, i64t.const_int((v * lanes) as u64, false), "left")?;
                    let lins = b.build_insert_element(iundef, left, i32t.const_zero(), "li")?;
                    let lsplat = b.build_shuffle_vector(lins, iundef, mask, "ls")?;
                    let lanes_ok = b.build_int_compare(IntPredicate::SLT, iota, lsplat, "lok")?;
                    let jins = b.build_insert_element(self.ctx.bool_type().vec_type(lanes as u32).get_undef(), jok, i32t.const_zero(), "ji")?;
                    let jsplat = b.build_shuffle_vector(jins, self.ctx.bool_type().vec_type(lanes as u32).get_undef(), mask, "js")?;
                    let m = b.build_and(lanes_ok, jsplat, "m")?;
                    let off = b.build_int_add(col, i64t.const_int((v * lanes) as u64, false), "co")?;
                    let ptr = unsafe { b.build_gep(cp, &[off], "cp")? };
                    let ptr = b.build_pointer_cast(ptr, vp, "cpv")?;
                    let old = b.build_call(mload, &[ptr.into(), align.into(), m.into(), vt.const_zero().into()], "c")?.try_as_basic_value().left().expect("vec");
                    let r = b.build_call(fma, &[fin[j * nv + v].into(), alpha_v.into(), old.into()], "cn")?.try_as_basic_value().left().expect("vec");
                    b.build_call(mstore, &[r.into(), ptr.into(), align.into(), m.into()], "")?;
                }
            }
            b.build_unconditional_branch(ret_bb)?;
        }
        b.position_at_end(vec_bb);
        for j in 0..nr {
            let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "col")?;
            for v in 0..nv {
                let off = b.build_int_add(col, i64t.const_int((v * lanes) as u64, false), "co")?;
                let ptr = unsafe { b.build_gep(cp, &[off], "cp")? };
                let ptr = b.build_pointer_cast(ptr, vp, "cpv")?;
                let old = b.build_load(ptr, "c")?;
                if let Some(i) = old.as_instruction_value() {
                    let _ = i.set_alignment(elem.size_bytes() as u32);
                }
                let r = b.build_call(fma, &[fin[j * nv + v].into(), alpha_v.into(), old.into()], "cn")?;
                let stv = b.build_store(ptr, r.try_as_basic_value().left().expect("vec"))?;
                let _ = stv.set_alignment(elem.size_bytes() as u32);
            }
        }
        b.build_unconditional_branch(ret_bb)?;
        b.position_at_end(sc_bb);
        for j in 0..nr {
            let col = b.build_int_mul(cs, i64t.const_int(j as u64, false), "col")?;
            for v in 0..nv {
                let scaled = b.build_float_mul(fin[j * nv + v], alpha_v, "sc")?;
                for l in 0..lanes {
                    let i = (v * lanes + l) as u64;
                    let roff = b.build_int_mul(rs, i64t.const_int(i, false), "ro")?;
                    let off = b.build_int_add(col, roff, "o")?;
                    let ptr = unsafe { b.build_gep(cp, &[off], "cp")? };
                    let x = b.build_extract_element(scaled, self.ctx.i32_type().const_int(l as u64, false), "x")?.into_float_value();
                    let old = b.build_load(ptr, "c")?.into_float_value();
                    b.build_store(ptr, b.build_float_add(old, x, "cn")?)?;
                }
            }
        }
        b.build_unconditional_branch(ret_bb)?;
        b.position_at_end(ret_bb);
        b.build_return(None)?;
        if let Some(bb) = saved {
            self.b.position_at_end(bb);
        }
        let u = Uk { f, mr, nr };
        self.uk.insert(elem, u);
        Ok(u)
    }

    // --------------------------------------------------------------------------
    // C ABI
    // --------------------------------------------------------------------------

    fn c_abi(&mut self, codes: &[UnitCode]) -> Result<(), CodegenError> {
        let hir = self.hir;
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        let err_g = self.module.add_global(i8p, None, "tcc_last_error_message");
        err_g.set_initializer(&i8p.const_null());
        err_g.set_thread_local(true);
        err_g.set_linkage(Linkage::Internal);
        let last = self.module.add_function("tcc_last_error", i8p.fn_type(&[], false), None);
        self.set_target_attrs(last);
        let e = self.ctx.append_basic_block(last, "entry");
        self.b.position_at_end(e);
        let v = self.b.build_load(err_g.as_pointer_value(), "msg")?;
        self.b.build_return(Some(&v))?;

        for code in codes {
            let mut params: Vec<BasicMetadataTypeEnum> = Vec::new();
            for &t in &code.args {
                params.push(self.ft(hir.tensors[t].elem).ptr_type(AddressSpace::default()).into());
                params.push(i64t.into());
            }
            let f = self.module.add_function(&format!("tcc_{}", code.name), i32t.fn_type(&params, false), None);
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
            let mut ptrs = Vec::new();
            for (k, &t) in code.args.iter().enumerate() {
                let p = f.get_nth_param(2 * k as u32).expect("ptr").into_pointer_value();
                let len = f.get_nth_param(2 * k as u32 + 1).expect("len").into_int_value();
                let tensor = &hir.tensors[t];
                let n = hir.num_elements(t).unwrap_or(usize::MAX) as u64;
                let shape = hir.shape(t).iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
                let isn = self.b.build_is_null(p, "null")?;
                let nonempty = self.b.build_int_compare(IntPredicate::NE, len, i64t.const_zero(), "ne")?;
                let bad_null = self.b.build_and(isn, nonempty, "badnull")?;
                let _ = n;
                fail(
                    self,
                    bad_null,
                    &format!("tcc_{}: argument `{}` is a null pointer", code.name, tensor.name),
                    1,
                )?;
                let wrong = self.b.build_int_compare(IntPredicate::NE, len, i64t.const_int(n, false), "badlen")?;
                fail(
                    self,
                    wrong,
                    &format!(
                        "tcc_{}: argument `{}` ({}[{shape}]) must have {n} elements (its `{}_len`)",
                        code.name,
                        tensor.name,
                        tensor.elem.name(),
                        tensor.name
                    ),
                    2,
                )?;
                let addr = self.b.build_ptr_to_int(p, i64t, "addr")?;
                let end = self.b.build_int_add(addr, i64t.const_int(n * tensor.elem.size_bytes() as u64, false), "end")?;
                ptrs.push((p, addr, end, k >= code.n_inputs, t, n));
            }
            // An output must not overlap any other argument.
            for (x, &(_, ax, ex, out_x, tx, nx)) in ptrs.iter().enumerate() {
                if !out_x || nx == 0 {
                    continue;
                }
                for (y, &(_, ay, ey, _, ty, ny)) in ptrs.iter().enumerate() {
                    if x == y || ny == 0 {
                        continue;
                    }
                    let c1 = self.b.build_int_compare(IntPredicate::ULT, ax, ey, "o1")?;
                    let c2 = self.b.build_int_compare(IntPredicate::ULT, ay, ex, "o2")?;
                    let ov = self.b.build_and(c1, c2, "ov")?;
                    fail(
                        self,
                        ov,
                        &format!("tcc_{}: output `{}` overlaps argument `{}`", code.name, hir.tensors[tx].name, hir.tensors[ty].name),
                        3,
                    )?;
                }
            }
            let body = self.module.get_function(&format!("tcc_{}__body", code.name)).expect("body generated");
            let args: Vec<BasicMetadataValueEnum> = ptrs.iter().map(|p| p.0.into()).collect();
            let r = self.b.build_call(body, &args, "r")?.try_as_basic_value().left().expect("i32").into_int_value();
            let oom = self.b.build_int_compare(IntPredicate::NE, r, i32t.const_zero(), "oom")?;
            fail(self, oom, &format!("tcc_{}: out of memory for temporaries", code.name), 4)?;
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

/// Merges adjacent loops of `order` (outer `u`, inner `v`) that every reference
/// walks as one: `stride(u) == stride(v) · size(v)` in each. The merged loop is
/// `v`'s, running `size(u)·size(v)` times, while `u` stays bound to 0 — so every
/// offset is unchanged. Long inner loops vectorize better (e.g. `pqrs,rs->pq`
/// becomes a 2-loop GEMV). Returns the new order and, per removed index, the
/// index it went into with the merged extent.
#[allow(clippy::type_complexity)]
fn collapse(
    order: &[IndexId],
    refs: &[(TensorId, &[IndexId])],
    stride: &dyn Fn(TensorId, &[IndexId], IndexId) -> u64,
    size: &dyn Fn(IndexId) -> u64,
) -> (Vec<IndexId>, Vec<(IndexId, (IndexId, u64))>) {
    let mut out: Vec<(IndexId, u64)> = Vec::new();
    let mut removed = Vec::new();
    for &v in order {
        let n = size(v);
        if let Some(&(u, m)) = out.last() {
            // `u`'s stride is its own (it is never a merged loop's inner index).
            let ok = refs.iter().all(|(t, idx)| stride(*t, idx, u) == stride(*t, idx, v) * n);
            if ok && n > 0 && m > 0 {
                out.pop();
                // Indices merged earlier into `u` now live in `v`'s loop too.
                for r in removed.iter_mut() {
                    let (_, (into, _)): &mut (IndexId, (IndexId, u64)) = r;
                    if *into == u {
                        *into = v;
                    }
                }
                removed.push((u, (v, m * n)));
                out.push((v, m * n));
                continue;
            }
        }
        out.push((v, n));
    }
    // Each merged loop's final extent.
    let ext: HashMap<IndexId, u64> = out.iter().copied().collect();
    let removed = removed.into_iter().map(|(u, (into, _))| (u, (into, ext[&into]))).collect();
    (out.into_iter().map(|(v, _)| v).collect(), removed)
}

struct GettPlan {
    dims: Vec<[i64; 5]>,
    swap: bool,
}
