//! The GPU back end: LIR loop nests → a host-side launch plan ([`GpuPlan`]) plus
//! LLVM IR for the NVPTX target → PTX text.
//!
//! * Planning ([`plan`]) is plain Rust (no LLVM): every `Compute` term becomes a
//!   kernel launch ([`Kernel`]: one thread per element of the written slice, times
//!   a split of the reduction space when there are few outputs, accumulated with
//!   atomics), or a cuBLAS call ([`GemmCall`]) when it is a binary contraction
//!   large enough, with operands copied to a canonical layout only when their
//!   index groups cannot be expressed as strided matrices. `Zero` nodes become
//!   `cuMemset` (whole buffer) or a store kernel; enclosing LIR loops stay on the
//!   host ([`Step::Loop`]) and only move the buffers' base pointers.
//! * Code generation ([`emit_ptx`]) turns the kernels into one LLVM module for
//!   `nvptx64-nvidia-cuda`, CPU [`SM`] with [`PTX_FEATURES`] — the newest LLVM 14
//!   knows (sm_86, PTX ISA 7.5); the driver JIT-compiles that PTX for the H200
//!   (sm_90). `exp`/`log`/`tanh` have no PTX instruction of full precision and no
//!   libdevice here, so they are generated ([`Gen::exp64`], [`Gen::log64`]).
//! * The same kernels can be generated for the host CPU and run thread by thread
//!   ([`emulate`]): tests check plans and kernels against the interpreter on
//!   machines without a GPU.
//!
//! The executor on a real GPU is [`super::cuda`] (cargo feature `cuda`).

pub mod cost;
mod emulate;
mod gen;
mod math;
mod plan;
pub mod streams;
pub mod tile_moves;
mod tiled;
mod transpose;
mod widen;

pub use emulate::emulate;
pub use gen::{emit_nvptx_ir, emit_ptx, ptx_for};
pub use plan::plan;
pub use tiled::{default_epilogue, Dim, Epilogue, Stage, TileCfg, Tiled};
pub use transpose::Transpose;

use crate::sema::hir::{ElemType, IndexId, TensorId, UnitId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub use super::llvm::CodegenError;

/// NVPTX CPU: the newest LLVM 14 supports (its PTX runs on sm_90 through the
/// driver's JIT).
pub const SM: &str = "sm_86";
/// PTX ISA 7.5, the newest LLVM 14 writes.
pub const PTX_FEATURES: &str = "+ptx75";
pub const TRIPLE: &str = "nvptx64-nvidia-cuda";
/// Threads per block of every one-thread-per-output kernel.
pub const BLOCK: u32 = 256;

pub(super) fn err(s: impl Into<String>) -> CodegenError {
    CodegenError(s.into())
}

/// Element type as the plan stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Elem {
    F32,
    F64,
    /// 16-bit storage (inputs and outputs of `bf16`/`f16` programs): loaded as
    /// f32, stored rounded to nearest even; arithmetic is f32 ([`Elem::compute`]).
    Bf16,
    F16,
}

impl Elem {
    pub fn of(e: ElemType) -> Elem {
        match e {
            ElemType::F32 | ElemType::C64 | ElemType::BF16 | ElemType::F16 => Elem::F32,
            ElemType::F64 | ElemType::C128 => Elem::F64,
        }
    }
    /// How a tensor of type `e` is stored on the device when it crosses the
    /// interface: 16-bit types as 16 bits, the others as [`Elem::of`].
    pub fn storage(e: ElemType) -> Elem {
        match e {
            ElemType::BF16 => Elem::Bf16,
            ElemType::F16 => Elem::F16,
            e => Elem::of(e),
        }
    }
    pub fn bytes(self) -> usize {
        match self {
            Elem::Bf16 | Elem::F16 => 2,
            Elem::F32 => 4,
            Elem::F64 => 8,
        }
    }
    pub fn is_half(self) -> bool {
        matches!(self, Elem::Bf16 | Elem::F16)
    }
    /// The type arithmetic on stored values runs in: f32 for 16-bit storage.
    pub fn compute(self) -> Elem {
        if self.is_half() {
            Elem::F32
        } else {
            self
        }
    }
}

/// One operand of a kernel: element `Σ v·stride` of its buffer (already offset by
/// the host), converted to the kernel's type, maybe through an element-wise function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KOperand {
    pub elem: Elem,
    pub func: Option<String>,
    pub par_strides: Vec<u64>,
    pub red_strides: Vec<u64>,
}

/// A generated kernel. Thread `t < Π par · split` owns output element
/// `p = t mod Π par` (the last parallel variable varies fastest) and the
/// reduction chunk `s = t div Π par`: the first `split_vars` reduction variables,
/// linearized, are cut into chunks of `chunk`; the rest run whole. The thread sums
/// `Π operands` over its chunk, multiplies by `coef` and stores (`store`), adds,
/// or — when `split > 1` — adds atomically.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    pub elem: Elem,
    pub par: Vec<u64>,
    pub out_strides: Vec<u64>,
    pub red: Vec<u64>,
    pub split_vars: usize,
    pub split: u64,
    pub chunk: u64,
    pub ops: Vec<KOperand>,
    pub coef: f64,
    pub store: bool,
    /// A tiled contraction kernel instead ([`Tiled`]): `ops` are then A and B
    /// (types and functions only), `par`/`red` are empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiled: Option<Tiled>,
    /// A copy that permutes, moved through a shared-memory tile
    /// ([`transpose`]): its blocks are tiles, not runs of output elements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transpose: Option<Transpose>,
    /// How the operands combine: summed products, or `max`/`min`/`where`.
    #[serde(default, skip_serializing_if = "Combine::is_sum")]
    pub combine: Combine,
    /// How the output is stored when that differs from `elem` (a 16-bit
    /// output: the f32 result rounded once as it is stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<Elem>,
    /// Consecutive output elements per thread, loaded and stored as one vector
    /// each (16 bytes at most): element-wise kernels whose every launch the
    /// planner proved aligned ([`widen`]); 1 otherwise.
    #[serde(default = "one_u64", skip_serializing_if = "is_one_u64")]
    pub lanes: u64,
}

pub(super) fn one_u64() -> u64 {
    1
}

pub(super) fn is_one_u64(x: &u64) -> bool {
    *x == 1
}

/// What a one-thread-per-output kernel computes per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Combine {
    /// `Σ Π operands` over the reduction (every kernel but the two below).
    #[default]
    Sum,
    /// `max` / `min` of the one operand over the reduction (never split).
    Max,
    Min,
    /// `where(a cmp b, x, y)` of four operands, no reduction: the comparison is
    /// `<`, `<=`, `>`, `>=`, `==` or `!=`.
    Select(SelectCmp),
}

/// [`crate::sema::hir::CmpOp`] in a plan file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectCmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Combine {
    fn is_sum(&self) -> bool {
        *self == Combine::Sum
    }
}

impl SelectCmp {
    pub fn of(c: crate::sema::hir::CmpOp) -> SelectCmp {
        use crate::sema::hir::CmpOp;
        match c {
            CmpOp::Lt => SelectCmp::Lt,
            CmpOp::Le => SelectCmp::Le,
            CmpOp::Gt => SelectCmp::Gt,
            CmpOp::Ge => SelectCmp::Ge,
            CmpOp::Eq => SelectCmp::Eq,
            CmpOp::Ne => SelectCmp::Ne,
        }
    }
}

impl Kernel {
    /// The element type of the output buffer.
    pub fn out_elem(&self) -> Elem {
        self.out.unwrap_or(self.elem)
    }
    /// Threads of a one-thread-per-output kernel (unused for tiled ones).
    pub fn threads(&self) -> u64 {
        self.par.iter().product::<u64>() * self.split / self.lanes
    }
    /// Grid and block size of a launch: `(grid x, y, z)`, threads per block.
    pub fn launch_dims(&self) -> ([u64; 3], u32) {
        match (&self.tiled, &self.transpose) {
            (Some(t), _) => (t.grid(), t.cfg.threads() as u32),
            (None, Some(t)) => (t.grid(&self.par), (transpose::TILE * transpose::ROWS) as u32),
            (None, None) => ([self.threads().div_ceil(BLOCK as u64), 1, 1], BLOCK),
        }
    }
    /// Whether its function runs one whole block per call on the host (tiled
    /// kernels and tiled copies), rather than one thread.
    pub fn by_blocks(&self) -> bool {
        self.tiled.is_some() || self.transpose.is_some()
    }
}

/// A buffer argument: buffer `buf` of the unit plus `Σ value(index) · stride`
/// elements for indices bound by host loops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arg {
    pub buf: usize,
    pub base: Vec<(IndexId, u64)>,
    /// Elements before a slice of a union (`F[o,v]` of `F[p,q]`, `P = O + V`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn one() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

/// `C = alpha · op(A) · op(B) + beta · C` in cuBLAS's column-major terms, strided
/// batched; `beta` is 1 (accumulate) or 0 (the call writes every element of C
/// it covers, so no `Memset` needs to come first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmCall {
    pub elem: Elem,
    /// An f32 call on TF32 tensor cores (`--tf32`: cuBLAS math mode
    /// CUBLAS_TF32_TENSOR_OP_MATH for this call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tf32: bool,
    /// A and B stored in this 16-bit type (`cublasGemmStridedBatchedEx`, f32
    /// compute on tensor cores; C in the same type or f32, as its buffer is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half: Option<Elem>,
    pub transa: bool,
    pub transb: bool,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub alpha: f64,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub beta: f64,
    pub a: Arg,
    pub lda: u64,
    pub stride_a: u64,
    pub b: Arg,
    pub ldb: u64,
    pub stride_b: u64,
    pub c: Arg,
    pub ldc: u64,
    pub stride_c: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Step {
    Loop {
        index: IndexId,
        extent: u64,
        body: Vec<Step>,
    },
    /// Clears a whole buffer.
    Memset {
        buf: usize,
    },
    /// Kernel `kernel` of the plan with the output first, then each operand.
    Launch {
        kernel: usize,
        args: Vec<Arg>,
    },
    Gemm(GemmCall),
    /// A binary contraction that has several implementations: `alts[chosen]`
    /// runs; the others stay for a runner that forces a kind ([`GpuPlan::force`]),
    /// or are empty (`steps` empty, `kept` false) when the plan keeps no alternatives.
    Choice(Choice),
}

/// How a binary contraction is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GemmKind {
    /// cuBLAS strided-batched GEMM (after copies of operands to a canonical layout
    /// where their index groups are not strided matrices).
    Cublas,
    /// A generated tiled kernel ([`Tiled`]).
    Tiled,
    /// The generated one-thread-per-output kernel.
    Naive,
}

impl GemmKind {
    pub const ALL: [GemmKind; 3] = [GemmKind::Cublas, GemmKind::Tiled, GemmKind::Naive];
    pub fn name(self) -> &'static str {
        match self {
            GemmKind::Cublas => "cublas",
            GemmKind::Tiled => "tiled",
            GemmKind::Naive => "naive",
        }
    }
    pub fn from_name(s: &str) -> Option<GemmKind> {
        GemmKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// What is contracted, for reports: `C[..] += A[..]·B[..]` with group sizes.
    pub what: String,
    pub chosen: usize,
    pub alts: Vec<Alt>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alt {
    pub kind: GemmKind,
    /// Predicted seconds on the H200 ([`cost`]).
    pub predicted_s: f64,
    pub kept: bool,
    pub steps: Vec<Step>,
}

impl Choice {
    pub fn steps(&self) -> &[Step] {
        &self.alts[self.chosen].steps
    }
    /// `cublas 0.31 ms, tiled 0.52 ms, naive 12.0 ms → cublas`.
    pub fn why(&self) -> String {
        let alts: Vec<String> =
            self.alts.iter().map(|a| format!("{} {}", a.kind.name(), seconds(a.predicted_s))).collect();
        format!("{}: {} → {}", self.what, alts.join(", "), self.alts[self.chosen].kind.name())
    }
}

fn seconds(s: f64) -> String {
    if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Buf {
    pub name: String,
    /// The tensor it stores (`None`: a scratch buffer of a cuBLAS step).
    pub tensor: Option<TensorId>,
    pub elem: Elem,
    pub elements: u64,
    pub input: bool,
    /// The tensor's shape (empty for scratch buffers).
    #[serde(default)]
    pub shape: Vec<usize>,
}

/// The host side of one unit: buffers (zeroed before each run, inputs excepted),
/// then steps in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitPlan {
    pub unit: UnitId,
    pub name: String,
    /// Inputs then outputs, as tensor ids (the caller's argument order).
    pub args: Vec<TensorId>,
    pub n_inputs: usize,
    pub buffers: Vec<Buf>,
    pub steps: Vec<Step>,
    pub flops: f64,
    /// Buffers whose first use writes every element (scratch buffers, targets
    /// of statements written whole: cuBLAS with beta 0, storing kernels): a
    /// runner need not clear them before a run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_clear: Vec<usize>,
}

/// Whether any step (any alternative) reads or writes buffer `buf`.
pub fn touches(steps: &[Step], buf: usize) -> bool {
    steps.iter().any(|s| match s {
        Step::Loop { body, .. } => touches(body, buf),
        Step::Memset { buf: b } => *b == buf,
        Step::Launch { args, .. } => args.iter().any(|a| a.buf == buf),
        Step::Gemm(g) => [g.a.buf, g.b.buf, g.c.buf].contains(&buf),
        Step::Choice(c) => c.alts.iter().any(|a| touches(&a.steps, buf)),
    })
}

impl UnitPlan {
    pub fn buf_of(&self, t: TensorId) -> Option<usize> {
        self.buffers.iter().position(|b| b.tensor == Some(t))
    }
    /// Which buffers a run needs: every tensor's, and the scratch buffers of the
    /// chosen steps (not those of alternatives that do not run).
    pub fn used_buffers(&self) -> Vec<bool> {
        fn walk(steps: &[Step], used: &mut [bool]) {
            for s in steps {
                match s {
                    Step::Loop { body, .. } => walk(body, used),
                    Step::Memset { buf } => used[*buf] = true,
                    Step::Launch { args, .. } => args.iter().for_each(|a| used[a.buf] = true),
                    Step::Gemm(g) => [&g.a, &g.b, &g.c].iter().for_each(|a| used[a.buf] = true),
                    Step::Choice(c) => walk(c.steps(), used),
                }
            }
        }
        let mut used: Vec<bool> = self.buffers.iter().map(|b| b.tensor.is_some()).collect();
        walk(&self.steps, &mut used);
        used
    }
    /// Number of kernel launches and cuBLAS calls of one run (host loops unrolled).
    pub fn launches(&self) -> (u64, u64) {
        fn walk(steps: &[Step], mult: u64, acc: &mut (u64, u64)) {
            for s in steps {
                match s {
                    Step::Loop { extent, body, .. } => walk(body, mult * extent, acc),
                    Step::Launch { .. } => acc.0 += mult,
                    Step::Gemm(_) => acc.1 += mult,
                    Step::Choice(c) => walk(c.steps(), mult, acc),
                    Step::Memset { .. } => {}
                }
            }
        }
        let mut acc = (0, 0);
        walk(&self.steps, 1, &mut acc);
        acc
    }
}

/// Every unit of a file planned for the GPU, with the kernels its PTX holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPlan {
    pub target: String,
    pub kernels: Vec<Kernel>,
    pub units: Vec<UnitPlan>,
}

impl GpuPlan {
    /// Whether some cuBLAS call runs on TF32 tensor cores: outputs are then
    /// checked within [`crate::run::compare::TOL_TF32`].
    pub fn uses_tf32(&self) -> bool {
        fn walk(steps: &[Step]) -> bool {
            steps.iter().any(|s| match s {
                Step::Loop { body, .. } => walk(body),
                Step::Gemm(g) => g.tf32,
                Step::Choice(c) => c.alts.iter().any(|a| walk(&a.steps)),
                _ => false,
            })
        }
        self.units.iter().any(|u| walk(&u.steps))
    }

    /// Runs `kind` wherever a choice kept it; returns how many choices had it
    /// and how many did not (those keep their choice).
    pub fn force(&mut self, kind: GemmKind) -> (usize, usize) {
        fn walk(steps: &mut [Step], kind: GemmKind, n: &mut (usize, usize)) {
            for s in steps {
                match s {
                    Step::Loop { body, .. } => walk(body, kind, n),
                    Step::Choice(c) => match c.alts.iter().position(|a| a.kind == kind && a.kept) {
                        Some(i) => {
                            c.chosen = i;
                            n.0 += 1;
                        }
                        None => n.1 += 1,
                    },
                    _ => {}
                }
            }
        }
        let mut n = (0, 0);
        for u in &mut self.units {
            walk(&mut u.steps, kind, &mut n);
        }
        n
    }
}

/// Every choice among steps (in order, inside host loops too).
pub fn choices(steps: &[Step]) -> Vec<&Choice> {
    let mut out = Vec::new();
    for s in steps {
        match s {
            Step::Loop { body, .. } => out.extend(choices(body)),
            Step::Choice(c) => {
                out.push(c);
                out.extend(choices(c.steps()));
            }
            _ => {}
        }
    }
    out
}

/// How to plan.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Bytes of temporaries the fused nests may keep live (default 16 GiB: the
    /// GPU has plenty, and whole contractions make large cuBLAS calls).
    pub mem_limit: Option<u64>,
    /// Force one implementation of binary contractions (where it applies);
    /// `None`: the cheapest by the cost model ([`cost`]).
    pub gemm: Option<GemmKind>,
    /// Keep every implementation of each binary contraction in the plan (and its
    /// kernels in the PTX), so that a runner can force one ([`GpuPlan::force`]).
    pub keep_alternatives: bool,
    /// Tile shape of tiled kernels (default: [`TileCfg::for_shape`]).
    pub tile: Option<TileCfg>,
    /// Threads a kernel should have before the reduction is split (default 2^18).
    pub target_threads: Option<u64>,
    /// cuBLAS calls for a C that is no matrix over its m and n groups: `Some(true)`
    /// writes C in place (m and n variables moved to the batch and host loops)
    /// wherever that applies, `Some(false)` never (a scratch matrix copied into
    /// C), `None` whichever the cost model predicts faster.
    pub in_place: Option<bool>,
    /// f64 tiled kernels on tensor cores: `Some(true)` always (where a
    /// tensor-core tile shape applies), `Some(false)` never, `None` whichever
    /// tile shape the cost model predicts faster.
    pub mma: Option<bool>,
    /// f32 cuBLAS calls on TF32 tensor cores (`--tf32`).
    pub tf32: bool,
    /// How tiled kernels store their C tile; `None`: [`default_epilogue`] of the tile shape.
    pub epilogue: Option<Epilogue>,
    /// Permuting copies one thread per element, without the shared-memory tile
    /// of [`Transpose`] (`TCC_GPU_PLAIN_COPIES=1`: to measure what the tile gains).
    pub plain_copies: bool,
    /// Operand buffers of the tile shapes the cost model chooses
    /// ([`TileCfg::stages`]; `TCC_GPU_STAGES`), where they fit in shared memory;
    /// `None`: the shape's own.
    pub stages: Option<u64>,
    /// Blocks per multiprocessor tiled kernels ask ptxas to make room for
    /// (`.minnctapersm`, which caps registers per thread; `TCC_GPU_MIN_BLOCKS`);
    /// `None`: no cap.
    pub min_blocks: Option<u64>,
    /// Staged epilogues that store (not accumulate) write C with evict-first
    /// (`st.global.cs`) vector stores: C is written once and not read back by
    /// the kernel, so its lines need not push the operands out of L2.
    /// `None`: where the kernel's C is larger than L2 ([`EVICT_FIRST_BYTES`]),
    /// so that no later kernel could have found it there anyway;
    /// `Some(on)` everywhere or nowhere (`TCC_GPU_STORE_CS=1|0`).
    pub stream_stores: Option<bool>,
}

pub const DEFAULT_GPU_MEM_LIMIT: u64 = 16 << 30;

/// Bytes of C above which a tiled kernel stores it evict-first by default
/// ([`GpuOptions::stream_stores`]): the L2 of an H100 or H200 (50 MiB). On an
/// H100 (2026-12-07, bench/gpu/results.md) evict-first stores took the 18
/// CCSD(T) triples (C of 134 MB to 1.5 GB) 5–12 % faster, the n = 24 ones to
/// 1.06–1.14× the write roofline.
pub const EVICT_FIRST_BYTES: u64 = 50 << 20;

/// The base offset (elements) of an argument under the host loop values.
pub fn arg_offset(a: &Arg, bound: &HashMap<IndexId, u64>) -> u64 {
    a.offset + a.base.iter().map(|(i, s)| bound.get(i).copied().unwrap_or(0) * s).sum::<u64>()
}

pub fn write_elems(dst: &mut [u8], e: Elem, src: &[f64]) {
    match e {
        Elem::F64 => {
            for (c, x) in dst.chunks_exact_mut(8).zip(src) {
                c.copy_from_slice(&x.to_ne_bytes());
            }
        }
        Elem::F32 => {
            for (c, x) in dst.chunks_exact_mut(4).zip(src) {
                c.copy_from_slice(&(*x as f32).to_ne_bytes());
            }
        }
        Elem::Bf16 => {
            for (c, x) in dst.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&crate::half::f32_to_bf16(*x as f32).to_ne_bytes());
            }
        }
        Elem::F16 => {
            for (c, x) in dst.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&crate::half::f32_to_f16(*x as f32).to_ne_bytes());
            }
        }
    }
}

pub fn read_elems(src: &[u8], e: Elem) -> Vec<f64> {
    match e {
        Elem::F64 => src.chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().expect("8"))).collect(),
        Elem::F32 => src.chunks_exact(4).map(|c| f32::from_ne_bytes(c.try_into().expect("4")) as f64).collect(),
        Elem::Bf16 => src
            .chunks_exact(2)
            .map(|c| crate::half::bf16_to_f32(u16::from_ne_bytes(c.try_into().expect("2"))) as f64)
            .collect(),
        Elem::F16 => src
            .chunks_exact(2)
            .map(|c| crate::half::f16_to_f32(u16::from_ne_bytes(c.try_into().expect("2"))) as f64)
            .collect(),
    }
}

/// A short summary of a plan for reports: kernels, launches, cuBLAS calls.
pub fn describe(plan: &GpuPlan) -> String {
    let mut s = String::new();
    for u in &plan.units {
        let (l, g) = u.launches();
        s.push_str(&format!("{}: {} kernel launches, {} cuBLAS calls per run ({:.3e} flops)\n", u.name, l, g, u.flops));
        for c in choices(&u.steps) {
            s.push_str(&format!("  {}\n", c.why()));
        }
    }
    s
}
