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

use super::lower::{prepare, unit_flops};
use crate::interp::Dense;
use crate::lir::fusion::{fusible, lower_unit, FusionOptions};
use crate::lir::{Buffer, LoopNest, Node};
use crate::sema::hir::{ElemType, Func, Hir, IndexId, Role, Stmt, TensorId, UnitId};
use inkwell::attributes::AttributeLoc;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple};
use inkwell::types::{BasicMetadataTypeEnum, FloatType};
use inkwell::values::{BasicMetadataValueEnum, FloatValue, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate, OptimizationLevel};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub use super::llvm::CodegenError;

/// NVPTX CPU: the newest LLVM 14 supports (its PTX runs on sm_90 through the
/// driver's JIT).
pub const SM: &str = "sm_86";
/// PTX ISA 7.5, the newest LLVM 14 writes.
pub const PTX_FEATURES: &str = "+ptx75";
pub const TRIPLE: &str = "nvptx64-nvidia-cuda";
/// Threads per block of every kernel.
pub const BLOCK: u32 = 256;

fn err(s: impl Into<String>) -> CodegenError {
    CodegenError(s.into())
}

/// Element type as the plan stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Elem {
    F32,
    F64,
}

impl Elem {
    pub fn of(e: ElemType) -> Elem {
        match e {
            ElemType::F32 => Elem::F32,
            ElemType::F64 => Elem::F64,
        }
    }
    pub fn bytes(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F64 => 8,
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
}

impl Kernel {
    pub fn threads(&self) -> u64 {
        self.par.iter().product::<u64>() * self.split
    }
}

/// A buffer argument: buffer `buf` of the unit plus `Σ value(index) · stride`
/// elements for indices bound by host loops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arg {
    pub buf: usize,
    pub base: Vec<(IndexId, u64)>,
}

/// `C = alpha · op(A) · op(B) + C` in cuBLAS's column-major terms, strided batched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmCall {
    pub elem: Elem,
    pub transa: bool,
    pub transb: bool,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub alpha: f64,
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
    Loop { index: IndexId, extent: u64, body: Vec<Step> },
    /// Clears a whole buffer.
    Memset { buf: usize },
    /// Kernel `kernel` of the plan with the output first, then each operand.
    Launch { kernel: usize, args: Vec<Arg> },
    Gemm(GemmCall),
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
}

impl UnitPlan {
    pub fn buf_of(&self, t: TensorId) -> Option<usize> {
        self.buffers.iter().position(|b| b.tensor == Some(t))
    }
    /// Number of kernel launches and cuBLAS calls of one run (host loops unrolled).
    pub fn launches(&self) -> (u64, u64) {
        fn walk(steps: &[Step], mult: u64, acc: &mut (u64, u64)) {
            for s in steps {
                match s {
                    Step::Loop { extent, body, .. } => walk(body, mult * extent, acc),
                    Step::Launch { .. } => acc.0 += mult,
                    Step::Gemm(_) => acc.1 += mult,
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

/// How to plan.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Bytes of temporaries the fused nests may keep live (default 16 GiB: the
    /// GPU has plenty, and whole contractions make large cuBLAS calls).
    pub mem_limit: Option<u64>,
    /// A binary contraction goes to cuBLAS when `m·n·k` reaches this (default
    /// 32768; `f64::INFINITY`: never).
    pub gemm_min: Option<f64>,
    /// Threads a kernel should have before the reduction is split (default 2^18).
    pub target_threads: Option<u64>,
}

pub const DEFAULT_GPU_MEM_LIMIT: u64 = 16 << 30;

// ---------------------------------------------------------------------------------
// Planning
// ---------------------------------------------------------------------------------

fn position_strides(hir: &Hir, b: &Buffer) -> Vec<u64> {
    b.position_strides(hir).into_iter().map(|s| s as u64).collect()
}

struct Planner<'a> {
    hir: &'a Hir,
    opts: &'a GpuOptions,
    kernels: &'a mut Vec<Kernel>,
    buffers: Vec<Buf>,
    strides: HashMap<TensorId, Vec<u64>>,
    bound: Vec<IndexId>,
}

/// One factor of a term.
use super::lower::Operand;

/// A group of variables of a GEMM as one tensor sees it: total size and the
/// stride of the merged group (`None`: not mergeable).
#[derive(Clone, Copy, Debug)]
struct Grp {
    size: u64,
    stride: Option<u64>,
}

fn merged(vars: &[IndexId], sizes: &dyn Fn(IndexId) -> u64, stride: &dyn Fn(IndexId) -> u64) -> Grp {
    let vs: Vec<IndexId> = vars.iter().copied().filter(|&v| sizes(v) > 1).collect();
    let size = vs.iter().map(|&v| sizes(v)).product::<u64>();
    if vs.is_empty() {
        return Grp { size: 1, stride: Some(0) };
    }
    for w in vs.windows(2) {
        if stride(w[0]) != stride(w[1]) * sizes(w[1]) {
            return Grp { size, stride: None };
        }
    }
    Grp { size, stride: Some(stride(*vs.last().expect("non-empty"))) }
}

/// A column-major view of a matrix with `rows × cols` groups: `(transposed, ld)`.
fn view(rows: Grp, cols: Grp) -> Option<(bool, u64)> {
    let (rs, cs) = (rows.stride?, cols.stride?);
    if rows.size == 1 || rs == 1 {
        let ld = if cols.size == 1 { rows.size.max(1) } else { cs };
        if ld >= rows.size.max(1) {
            return Some((false, ld));
        }
    }
    if cols.size == 1 || cs == 1 {
        let ld = if rows.size == 1 { cols.size.max(1) } else { rs };
        if ld >= cols.size.max(1) {
            return Some((true, ld));
        }
    }
    None
}

impl Planner<'_> {
    fn kernel(&mut self, mut k: Kernel) -> usize {
        if let Some(i) = self.kernels.iter().position(|x| Kernel { name: String::new(), ..x.clone() } == Kernel { name: String::new(), ..k.clone() }) {
            return i;
        }
        k.name = format!("tcc_k{}", self.kernels.len());
        self.kernels.push(k);
        self.kernels.len() - 1
    }

    fn arg(&self, t: TensorId, idx: &[IndexId]) -> Arg {
        let st = &self.strides[&t];
        let base = idx.iter().enumerate().filter(|(p, i)| st[*p] > 0 && self.bound.contains(i)).map(|(p, &i)| (i, st[p])).collect();
        Arg { buf: self.buf(t), base }
    }

    fn buf(&self, t: TensorId) -> usize {
        self.buffers.iter().position(|b| b.tensor == Some(t)).expect("every tensor has a buffer")
    }

    fn stride_in(&self, t: TensorId, idx: &[IndexId], v: IndexId) -> u64 {
        idx.iter().zip(&self.strides[&t]).filter(|(i, _)| **i == v).map(|(_, s)| *s).sum()
    }

    fn nodes(&mut self, nodes: &[Node], unit: UnitId) -> Result<Vec<Step>, CodegenError> {
        let mut out = Vec::new();
        for n in nodes {
            match n {
                Node::Loop { index, extent, body } => {
                    if *extent == 0 {
                        continue;
                    }
                    self.bound.push(*index);
                    let body = self.nodes(body, unit)?;
                    self.bound.pop();
                    out.push(Step::Loop { index: *index, extent: *extent as u64, body });
                }
                Node::Zero { tensor, stmt } => {
                    let idx = self.hir.units[unit].stmts[*stmt].lhs.indices.clone();
                    self.zero(*tensor, &idx, &mut out);
                }
                Node::Compute { stmt } => {
                    let st = self.hir.units[unit].stmts[*stmt].clone();
                    if !fusible(&st) && !st.accumulate {
                        out.push(Step::Memset { buf: self.buf(st.lhs.tensor) });
                    }
                    for k in 0..st.rhs.terms.len() {
                        self.term(&st, k, &mut out)?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Clears the region of `t` that `t[idx]` covers under the bound loops, as
    /// [`crate::lir::exec`] does: stored positions whose index is bound are
    /// pinned, the others cleared in full.
    fn zero(&mut self, t: TensorId, idx: &[IndexId], out: &mut Vec<Step>) {
        let st = self.strides[&t].clone();
        let shape = self.hir.shape(t);
        let mut par = Vec::new();
        let mut strides = Vec::new();
        let mut any_bound = false;
        for (p, &s) in st.iter().enumerate() {
            if s == 0 {
                continue;
            }
            if idx.get(p).is_some_and(|i| self.bound.contains(i)) {
                any_bound = true;
            } else {
                par.push(shape[p] as u64);
                strides.push(s);
            }
        }
        if !any_bound {
            out.push(Step::Memset { buf: self.buf(t) });
            return;
        }
        if par.contains(&0) {
            return;
        }
        let k = self.kernel(Kernel {
            name: String::new(),
            elem: Elem::of(self.hir.tensors[t].elem),
            par,
            out_strides: strides,
            red: vec![],
            split_vars: 0,
            split: 1,
            chunk: 1,
            ops: vec![],
            coef: 0.0,
            store: true,
        });
        out.push(Step::Launch { kernel: k, args: vec![self.arg(t, idx)] });
    }

    fn term(&mut self, st: &Stmt, k: usize, out: &mut Vec<Step>) -> Result<(), CodegenError> {
        let hir = self.hir;
        let term = &st.rhs.terms[k];
        let ops = super::lower::term_operands(term).map_err(err)?;
        let c = st.lhs.tensor;
        let vars = super::lower::term_vars(&st.lhs.indices, &ops, |i| self.bound.contains(&i));
        if vars.iter().any(|&v| hir.index_size(v) == 0) {
            return Ok(());
        }
        let celem = hir.tensors[c].elem;
        if ops.len() == 2 && ops.iter().all(|o| o.func.is_none() && hir.tensors[o.tensor].elem == celem) && self.gemm(st, term.coef, &ops, &vars, out) {
            return Ok(());
        }
        // Parallel: the written indices, ordered by decreasing stride in the output
        // (the contiguous one fastest across threads); reduction: the rest, by
        // decreasing stride in the first operand.
        let mut par: Vec<IndexId> = vars.iter().copied().filter(|v| st.lhs.indices.contains(v)).collect();
        par.sort_by_key(|&v| std::cmp::Reverse(self.stride_in(c, &st.lhs.indices, v)));
        let mut red: Vec<IndexId> = vars.iter().copied().filter(|v| !st.lhs.indices.contains(v)).collect();
        if let Some(o) = ops.first() {
            red.sort_by_key(|&v| std::cmp::Reverse(self.stride_in(o.tensor, &o.indices, v)));
        }
        let size = |v: IndexId| hir.index_size(v) as u64;
        let p_total: u64 = par.iter().map(|&v| size(v)).product();
        let r_sizes: Vec<u64> = red.iter().map(|&v| size(v)).collect();
        let target = self.opts.target_threads.unwrap_or(1 << 18);
        let (mut split_vars, mut split, mut chunk) = (0usize, 1u64, 1u64);
        let r_total: u64 = r_sizes.iter().product();
        if p_total < target && r_total >= 64 {
            let want = (target / p_total.max(1)).min(r_total / 32).max(1);
            if want > 1 {
                let mut l = 1u64;
                while split_vars < r_sizes.len() && l < want {
                    l *= r_sizes[split_vars];
                    split_vars += 1;
                }
                chunk = l.div_ceil(want.min(l));
                split = l.div_ceil(chunk);
                if split <= 1 {
                    split_vars = 0;
                    split = 1;
                    chunk = 1;
                }
            }
        }
        let kops: Vec<KOperand> = ops
            .iter()
            .map(|o| KOperand {
                elem: Elem::of(hir.tensors[o.tensor].elem),
                func: o.func.map(|f| f.name().to_string()),
                par_strides: par.iter().map(|&v| self.stride_in(o.tensor, &o.indices, v)).collect(),
                red_strides: red.iter().map(|&v| self.stride_in(o.tensor, &o.indices, v)).collect(),
            })
            .collect();
        let kid = self.kernel(Kernel {
            name: String::new(),
            elem: Elem::of(celem),
            par: par.iter().map(|&v| size(v)).collect(),
            out_strides: par.iter().map(|&v| self.stride_in(c, &st.lhs.indices, v)).collect(),
            red: r_sizes,
            split_vars,
            split,
            chunk,
            ops: kops,
            coef: term.coef,
            store: false,
        });
        let mut args = vec![self.arg(c, &st.lhs.indices)];
        args.extend(ops.iter().map(|o| self.arg(o.tensor, &o.indices)));
        out.push(Step::Launch { kernel: kid, args });
        Ok(())
    }

    fn scratch(&mut self, name: &str, elem: Elem, elements: u64) -> usize {
        self.buffers.push(Buf { name: format!("_{name}{}", self.buffers.len()), tensor: None, elem, elements: elements.max(1), input: false, shape: vec![] });
        self.buffers.len() - 1
    }

    /// A binary contraction as a cuBLAS call; false when it is not GEMM-shaped or
    /// too small.
    fn gemm(&mut self, st: &Stmt, coef: f64, ops: &[Operand], vars: &[IndexId], out: &mut Vec<Step>) -> bool {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let (a, b) = (&ops[0], &ops[1]);
        let count = |idx: &[IndexId], v: IndexId| idx.iter().filter(|&&i| i == v).count();
        let mut groups: [Vec<IndexId>; 4] = Default::default(); // batch, m, n, k
        for &v in vars {
            let (ic, ia, ib) = (count(&st.lhs.indices, v), count(&a.indices, v), count(&b.indices, v));
            if ic > 1 || ia > 1 || ib > 1 {
                return false;
            }
            let g = match (ic, ia, ib) {
                (1, 1, 1) => 0,
                (1, 1, 0) => 1,
                (1, 0, 1) => 2,
                (0, 1, 1) => 3,
                _ => return false,
            };
            groups[g].push(v);
        }
        // A variable bound on the host but still indexing a tensor is fine (base offset).
        let size = |v: IndexId| hir.index_size(v) as u64;
        let tot = |g: &[IndexId]| g.iter().map(|&v| size(v)).product::<u64>();
        let (nb, m, n, k) = (tot(&groups[0]), tot(&groups[1]), tot(&groups[2]), tot(&groups[3]));
        let min = self.opts.gemm_min.unwrap_or(32768.0);
        if ((m * n * k) as f64) < min || m * n * k == 0 {
            return false;
        }
        let lim = i32::MAX as u64;
        if [nb, m, n, k].iter().any(|&x| x > lim) {
            return false;
        }
        // Orders within groups: the output's for batch, m, n; A's for k.
        let c_strides: HashMap<IndexId, u64> = vars.iter().map(|&v| (v, self.stride_in(c, &st.lhs.indices, v))).collect();
        let sc = |v: IndexId| c_strides[&v];
        for g in 0..3 {
            groups[g].sort_by_key(|&v| std::cmp::Reverse(sc(v)));
        }
        groups[3].sort_by_key(|&v| std::cmp::Reverse(self.stride_in(a.tensor, &a.indices, v)));
        let elem = Elem::of(hir.tensors[c].elem);
        let sizef = |v: IndexId| size(v);
        // Operand i (0 = A over batch, m, k; 1 = B over batch, k, n): its groups.
        let op_groups = |pl: &Planner, o: &Operand, g: [usize; 3]| -> [Grp; 3] {
            let s = |v: IndexId| pl.stride_in(o.tensor, &o.indices, v);
            [merged(&groups[g[0]], &sizef, &s), merged(&groups[g[1]], &sizef, &s), merged(&groups[g[2]], &sizef, &s)]
        };
        let mut steps = Vec::new();
        // Copies an operand into a contiguous scratch buffer laid out as the groups.
        let canon = |pl: &mut Planner, o: &Operand, g: [usize; 3], steps: &mut Vec<Step>| -> (Arg, [Grp; 3]) {
            let order: Vec<IndexId> = g.iter().flat_map(|&gi| groups[gi].iter().copied()).collect();
            let total: u64 = order.iter().map(|&v| size(v)).product();
            let buf = pl.scratch("perm", elem, total);
            let mut strides = vec![0u64; order.len()];
            let mut s = 1;
            for j in (0..order.len()).rev() {
                strides[j] = s;
                s *= size(order[j]);
            }
            let kid = pl.kernel(Kernel {
                name: String::new(),
                elem,
                par: order.iter().map(|&v| size(v)).collect(),
                out_strides: strides,
                red: vec![],
                split_vars: 0,
                split: 1,
                chunk: 1,
                ops: vec![KOperand { elem, func: None, par_strides: order.iter().map(|&v| pl.stride_in(o.tensor, &o.indices, v)).collect(), red_strides: vec![] }],
                coef: 1.0,
                store: true,
            });
            steps.push(Step::Launch { kernel: kid, args: vec![Arg { buf, base: vec![] }, pl.arg(o.tensor, &o.indices)] });
            let t = [tot(&groups[g[0]]), tot(&groups[g[1]]), tot(&groups[g[2]])];
            (Arg { buf, base: vec![] }, [Grp { size: t[0], stride: Some(t[1] * t[2]) }, Grp { size: t[1], stride: Some(t[2]) }, Grp { size: t[2], stride: Some(1) }])
        };
        let (mut arg_a, mut ga) = (self.arg(a.tensor, &a.indices), op_groups(self, a, [0, 1, 3]));
        let (mut arg_b, mut gb) = (self.arg(b.tensor, &b.indices), op_groups(self, b, [0, 3, 2]));
        let (mut arg_c, mut gc) = (self.arg(c, &st.lhs.indices), {
            let s = |v: IndexId| sc(v);
            [merged(&groups[0], &sizef, &s), merged(&groups[1], &sizef, &s), merged(&groups[2], &sizef, &s)]
        });
        // Output orientation: n contiguous (C^T = B^T A^T) or m contiguous (C = A B).
        let c_ok = |g: &[Grp; 3]| -> Option<(bool, u64)> {
            g[0].stride?;
            if let Some((false, ld)) = view(g[2], g[1]) {
                return Some((true, ld));
            }
            if let Some((false, ld)) = view(g[1], g[2]) {
                return Some((false, ld));
            }
            None
        };
        let mut c_scratch = None;
        let (n_inner, ldc) = match c_ok(&gc) {
            Some(x) => x,
            None => {
                let buf = self.scratch("out", elem, nb * m * n);
                c_scratch = Some((buf, arg_c.clone()));
                arg_c = Arg { buf, base: vec![] };
                gc = [Grp { size: nb, stride: Some(m * n) }, Grp { size: m, stride: Some(n) }, Grp { size: n, stride: Some(1) }];
                steps.push(Step::Memset { buf });
                (true, n.max(1))
            }
        };
        // (Y, Z) = (B, A) over (n×k, k×m) when n is inner, else (A, B) over (m×k, k×n).
        let ok_a = |g: &[Grp; 3]| g[0].stride.is_some() && if n_inner { view(g[2], g[1]).is_some() } else { view(g[1], g[2]).is_some() };
        let ok_b = |g: &[Grp; 3]| g[0].stride.is_some() && if n_inner { view(g[2], g[1]).is_some() } else { view(g[1], g[2]).is_some() };
        if !ok_a(&ga) {
            let (x, g) = canon(self, a, [0, 1, 3], &mut steps);
            arg_a = x;
            ga = g;
        }
        if !ok_b(&gb) {
            let (x, g) = canon(self, b, [0, 3, 2], &mut steps);
            arg_b = x;
            gb = g;
        }
        let bs = |g: &Grp| if nb == 1 { 0 } else { g.stride.unwrap_or(0) };
        let call = if n_inner {
            // C^T (n × m) = op(B^T) (n × k) · op(A^T) (k × m)
            let (tb, ldb) = view(gb[2], gb[1]).expect("checked");
            let (ta, lda) = view(ga[2], ga[1]).expect("checked");
            GemmCall { elem, transa: tb, transb: ta, m: n, n: m, k, batch: nb, alpha: coef, a: arg_b, lda: ldb, stride_a: bs(&gb[0]), b: arg_a, ldb: lda, stride_b: bs(&ga[0]), c: arg_c, ldc, stride_c: bs(&gc[0]) }
        } else {
            let (ta, lda) = view(ga[1], ga[2]).expect("checked");
            let (tb, ldb) = view(gb[1], gb[2]).expect("checked");
            GemmCall { elem, transa: ta, transb: tb, m, n, k, batch: nb, alpha: coef, a: arg_a, lda, stride_a: bs(&ga[0]), b: arg_b, ldb, stride_b: bs(&gb[0]), c: arg_c, ldc, stride_c: bs(&gc[0]) }
        };
        if [call.lda, call.ldb, call.ldc].iter().any(|&x| x > lim) {
            return false;
        }
        steps.push(Step::Gemm(call));
        if let Some((buf, real_c)) = c_scratch {
            // C += scratch, scratch laid out [batch][m][n].
            let order: Vec<IndexId> = [0, 1, 2].iter().flat_map(|&g| groups[g].iter().copied()).collect();
            let mut strides = vec![0u64; order.len()];
            let mut s = 1;
            for j in (0..order.len()).rev() {
                strides[j] = s;
                s *= size(order[j]);
            }
            let kid = self.kernel(Kernel {
                name: String::new(),
                elem,
                par: order.iter().map(|&v| size(v)).collect(),
                out_strides: order.iter().map(|&v| sc(v)).collect(),
                red: vec![],
                split_vars: 0,
                split: 1,
                chunk: 1,
                ops: vec![KOperand { elem, func: None, par_strides: strides, red_strides: vec![] }],
                coef: 1.0,
                store: false,
            });
            steps.push(Step::Launch { kernel: kid, args: vec![real_c, Arg { buf, base: vec![] }] });
        }
        out.extend(steps);
        true
    }
}

/// Plans `units` of `hir` for the GPU (no LLVM involved).
pub fn plan(hir: &Hir, units: &[UnitId], opts: &GpuOptions) -> Result<GpuPlan, CodegenError> {
    let prepared = prepare(hir);
    let mut kernels = Vec::new();
    let mut plans = Vec::new();
    for &u in units {
        let nest: LoopNest = lower_unit(&prepared, u, FusionOptions { mem_limit: Some(opts.mem_limit.unwrap_or(DEFAULT_GPU_MEM_LIMIT)), ..FusionOptions::default() });
        let inputs = hir.unit_inputs(u);
        let outputs = hir.unit_outputs(u);
        let mut args = inputs.clone();
        args.extend(outputs.iter().copied());
        let mut buffers = Vec::new();
        let mut strides = HashMap::new();
        for (&t, b) in &nest.buffers {
            let tensor = &prepared.tensors[t];
            if tensor.role != Role::Temporary && b.stored.len() != tensor.dims.len() {
                return Err(err(format!("internal: `{}` is sliced", tensor.name)));
            }
            buffers.push(Buf { name: tensor.name.clone(), tensor: Some(t), elem: Elem::of(tensor.elem), elements: b.elements as u64, input: tensor.role.is_read_only(), shape: prepared.shape(t) });
            strides.insert(t, position_strides(&prepared, b));
        }
        let mut p = Planner { hir: &prepared, opts, kernels: &mut kernels, buffers, strides, bound: Vec::new() };
        let steps = p.nodes(&nest.body, u)?;
        let buffers = p.buffers;
        plans.push(UnitPlan { unit: u, name: prepared.units[u].name.clone(), args, n_inputs: inputs.len(), buffers, steps, flops: unit_flops(&prepared, u) });
    }
    Ok(GpuPlan { target: format!("{TRIPLE} {SM} {}", PTX_FEATURES.trim_start_matches('+')), kernels, units: plans })
}

/// The base offset (elements) of an argument under the host loop values.
pub fn arg_offset(a: &Arg, bound: &HashMap<IndexId, u64>) -> u64 {
    a.base.iter().map(|(i, s)| bound.get(i).copied().unwrap_or(0) * s).sum()
}

// ---------------------------------------------------------------------------------
// Kernels → LLVM IR
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// NVPTX kernel: thread id from the special registers, global pointers.
    Device,
    /// Host function `void k(i64 tid, T*...)`, for [`emulate`].
    Host,
}

struct Gen<'a, 'ctx> {
    ctx: &'ctx Context,
    module: &'a Module<'ctx>,
    b: Builder<'ctx>,
    mode: Mode,
    func: Option<FunctionValue<'ctx>>,
}

impl<'a, 'ctx> Gen<'a, 'ctx> {
    fn ft(&self, e: Elem) -> FloatType<'ctx> {
        match e {
            Elem::F64 => self.ctx.f64_type(),
            Elem::F32 => self.ctx.f32_type(),
        }
    }
    fn i64c(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v, false)
    }
    fn addr_space(&self) -> AddressSpace {
        match self.mode {
            Mode::Device => AddressSpace::from(1u16),
            Mode::Host => AddressSpace::default(),
        }
    }
    fn intrinsic(&self, name: &str, tys: &[inkwell::types::BasicTypeEnum<'ctx>]) -> Result<FunctionValue<'ctx>, CodegenError> {
        Intrinsic::find(name).and_then(|i| i.get_declaration(self.module, tys)).ok_or_else(|| err(format!("LLVM intrinsic {name} not found")))
    }
    fn call(&self, f: FunctionValue<'ctx>, args: &[BasicMetadataValueEnum<'ctx>]) -> Result<inkwell::values::BasicValueEnum<'ctx>, CodegenError> {
        Ok(self.b.build_call(f, args, "c")?.try_as_basic_value().left().expect("value"))
    }
    fn fcall(&self, name: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let f = self.intrinsic(name, &[x.get_type().into()])?;
        Ok(self.call(f, &[x.into()])?.into_float_value())
    }

    /// `for i in lo..hi { body(i) }` (skipped when `lo >= hi`).
    fn for_range(&mut self, lo: IntValue<'ctx>, hi: IntValue<'ctx>, body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), CodegenError>) -> Result<(), CodegenError> {
        let f = self.func.expect("in a function");
        let pre = self.b.get_insert_block().expect("positioned");
        let head = self.ctx.append_basic_block(f, "loop");
        let exit = self.ctx.append_basic_block(f, "loop.exit");
        let any = self.b.build_int_compare(IntPredicate::ULT, lo, hi, "any")?;
        self.b.build_conditional_branch(any, head, exit)?;
        self.b.position_at_end(head);
        let phi = self.b.build_phi(self.ctx.i64_type(), "i")?;
        phi.add_incoming(&[(&lo, pre)]);
        let i = phi.as_basic_value().into_int_value();
        body(self, i)?;
        let next = self.b.build_int_add(i, self.i64c(1), "i.next")?;
        let latch = self.b.get_insert_block().expect("positioned");
        phi.add_incoming(&[(&next, latch)]);
        let cond = self.b.build_int_compare(IntPredicate::ULT, next, hi, "i.cond")?;
        self.b.build_conditional_branch(cond, head, exit)?;
        self.b.position_at_end(exit);
        Ok(())
    }

    fn sreg(&self, name: &str) -> Result<IntValue<'ctx>, CodegenError> {
        let f = self.intrinsic(name, &[])?;
        let v = self.call(f, &[])?.into_int_value();
        Ok(self.b.build_int_z_extend(v, self.ctx.i64_type(), "sreg")?)
    }

    fn kernel(&mut self, k: &Kernel) -> Result<(), CodegenError> {
        let i64t = self.ctx.i64_type();
        let mut params: Vec<BasicMetadataTypeEnum> = Vec::new();
        if self.mode == Mode::Host {
            params.push(i64t.into());
        }
        params.push(self.ft(k.elem).ptr_type(self.addr_space()).into());
        for o in &k.ops {
            params.push(self.ft(o.elem).ptr_type(self.addr_space()).into());
        }
        let f = self.module.add_function(&k.name, self.ctx.void_type().fn_type(&params, false), None);
        let first_ptr = if self.mode == Mode::Host { 1 } else { 0 };
        let noalias = inkwell::attributes::Attribute::get_named_enum_kind_id("noalias");
        for j in 0..=k.ops.len() {
            f.add_attribute(AttributeLoc::Param((first_ptr + j) as u32), self.ctx.create_enum_attribute(noalias, 0));
        }
        self.func = Some(f);
        let entry = self.ctx.append_basic_block(f, "entry");
        let body = self.ctx.append_basic_block(f, "body");
        let done = self.ctx.append_basic_block(f, "done");
        self.b.position_at_end(entry);
        let lt = self.ft(k.elem);
        let acc = self.b.build_alloca(lt, "acc")?;
        let tid = match self.mode {
            Mode::Host => f.get_nth_param(0).expect("tid").into_int_value(),
            Mode::Device => {
                let ctaid = self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.x")?;
                let ntid = self.sreg("llvm.nvvm.read.ptx.sreg.ntid.x")?;
                let t = self.sreg("llvm.nvvm.read.ptx.sreg.tid.x")?;
                self.b.build_int_add(self.b.build_int_mul(ctaid, ntid, "base")?, t, "tid")?
            }
        };
        let ptr = |j: usize| f.get_nth_param((first_ptr + j) as u32).expect("ptr").into_pointer_value();
        let inside = self.b.build_int_compare(IntPredicate::ULT, tid, self.i64c(k.threads()), "inside")?;
        self.b.build_conditional_branch(inside, body, done)?;
        self.b.position_at_end(body);
        let p_total: u64 = k.par.iter().product();
        let p = self.b.build_int_unsigned_rem(tid, self.i64c(p_total.max(1)), "p")?;
        let s = self.b.build_int_unsigned_div(tid, self.i64c(p_total.max(1)), "s")?;
        let mut out_off = self.i64c(0);
        let mut op_off: Vec<IntValue> = vec![self.i64c(0); k.ops.len()];
        let mut rem = p;
        for j in (0..k.par.len()).rev() {
            let (v, r) = if j == 0 {
                (rem, rem)
            } else {
                (self.b.build_int_unsigned_rem(rem, self.i64c(k.par[j]), "v")?, self.b.build_int_unsigned_div(rem, self.i64c(k.par[j]), "r")?)
            };
            rem = r;
            out_off = self.add_scaled(out_off, v, k.out_strides[j])?;
            for (o, off) in k.ops.iter().zip(op_off.iter_mut()) {
                *off = self.add_scaled(*off, v, o.par_strides[j])?;
            }
        }
        self.b.build_store(acc, lt.const_zero())?;
        let ptrs: Vec<PointerValue> = (0..k.ops.len()).map(|j| ptr(j + 1)).collect();
        if k.split_vars > 0 {
            let l: u64 = k.red[..k.split_vars].iter().product();
            let lo = self.b.build_int_mul(s, self.i64c(k.chunk), "lo")?;
            let hi0 = self.b.build_int_add(lo, self.i64c(k.chunk), "hi0")?;
            let lim = self.i64c(l);
            let lt_ = self.b.build_int_compare(IntPredicate::ULT, hi0, lim, "lt")?;
            let hi = self.b.build_select(lt_, hi0, lim, "hi")?.into_int_value();
            let base = op_off.clone();
            self.for_range(lo, hi, &mut |g, li| {
                let mut offs = base.clone();
                let mut rem = li;
                for j in (0..k.split_vars).rev() {
                    let (v, r) = if j == 0 {
                        (rem, rem)
                    } else {
                        (g.b.build_int_unsigned_rem(rem, g.i64c(k.red[j]), "v")?, g.b.build_int_unsigned_div(rem, g.i64c(k.red[j]), "r")?)
                    };
                    rem = r;
                    for (o, off) in k.ops.iter().zip(offs.iter_mut()) {
                        *off = g.add_scaled(*off, v, o.red_strides[j])?;
                    }
                }
                g.reduce(k, k.split_vars, offs, &ptrs, acc)
            })?;
        } else {
            self.reduce(k, 0, op_off, &ptrs, acc)?;
        }
        let sum = self.b.build_load(acc, "sum")?.into_float_value();
        let val = if k.coef == 1.0 { sum } else { self.b.build_float_mul(sum, lt.const_float(k.coef), "val")? };
        let outp = unsafe { self.b.build_in_bounds_gep(ptr(0), &[out_off], "outp")? };
        if k.store {
            self.b.build_store(outp, val)?;
        } else if k.split > 1 {
            use inkwell::values::AsValueRef;
            // SAFETY: a plain LLVM C API call on live values of this context
            // (inkwell's atomicrmw only takes integers).
            unsafe {
                llvm_sys::core::LLVMBuildAtomicRMW(
                    self.b.as_mut_ptr(),
                    llvm_sys::LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFAdd,
                    outp.as_value_ref(),
                    val.as_value_ref(),
                    llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic,
                    0,
                );
            }
        } else {
            let old = self.b.build_load(outp, "old")?.into_float_value();
            let new = self.b.build_float_add(old, val, "new")?;
            self.b.build_store(outp, new)?;
        }
        self.b.build_unconditional_branch(done)?;
        self.b.position_at_end(done);
        self.b.build_return(None)?;
        if self.mode == Mode::Device {
            let md = self.ctx.metadata_node(&[
                f.as_global_value().as_pointer_value().into(),
                self.ctx.metadata_string("kernel").into(),
                self.ctx.i32_type().const_int(1, false).into(),
            ]);
            self.module.add_global_metadata("nvvm.annotations", &md).map_err(|e| err(format!("LLVM metadata: {e}")))?;
        }
        self.func = None;
        Ok(())
    }

    fn add_scaled(&self, acc: IntValue<'ctx>, v: IntValue<'ctx>, stride: u64) -> Result<IntValue<'ctx>, CodegenError> {
        Ok(match stride {
            0 => acc,
            1 => self.b.build_int_add(acc, v, "o")?,
            s => self.b.build_int_add(acc, self.b.build_int_mul(v, self.i64c(s), "o")?, "o")?,
        })
    }

    /// Nested loops over reduction variables `from..`, then `acc += Π operands`.
    fn reduce(&mut self, k: &Kernel, from: usize, offs: Vec<IntValue<'ctx>>, ptrs: &[PointerValue<'ctx>], acc: PointerValue<'ctx>) -> Result<(), CodegenError> {
        if from == k.red.len() {
            let lt = self.ft(k.elem);
            let mut prod: Option<FloatValue> = None;
            for (j, o) in k.ops.iter().enumerate() {
                let p = unsafe { self.b.build_in_bounds_gep(ptrs[j], &[offs[j]], "p")? };
                let mut v = self.b.build_load(p, "x")?.into_float_value();
                let ot = self.ft(o.elem);
                if ot != lt {
                    v = self.b.build_float_cast(v, lt, "cvt")?;
                }
                if let Some(name) = &o.func {
                    let func = Func::from_name(name).ok_or_else(|| err(format!("unknown function {name}")))?;
                    v = self.apply(func, v)?;
                }
                prod = Some(match prod {
                    None => v,
                    Some(q) => self.b.build_float_mul(q, v, "m")?,
                });
            }
            let prod = prod.unwrap_or_else(|| lt.const_float(1.0));
            let old = self.b.build_load(acc, "a")?.into_float_value();
            let new = self.b.build_float_add(old, prod, "a.new")?;
            self.b.build_store(acc, new)?;
            return Ok(());
        }
        let extent = k.red[from];
        self.for_range(self.i64c(0), self.i64c(extent), &mut |g, i| {
            let mut o2 = offs.clone();
            for (o, off) in k.ops.iter().zip(o2.iter_mut()) {
                *off = g.add_scaled(*off, i, o.red_strides[from])?;
            }
            g.reduce(k, from + 1, o2, ptrs, acc)
        })
    }

    /// `f(x)` as [`Func::apply`] defines it; `f32` through `f64`.
    fn apply(&mut self, func: Func, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let t = x.get_type();
        let f64t = self.ctx.f64_type();
        let x = if t != f64t { self.b.build_float_ext(x, f64t, "ext")? } else { x };
        let one = f64t.const_float(1.0);
        let r = match func {
            Func::Exp => self.math("tcc_exp", x)?,
            Func::Log => self.math("tcc_log", x)?,
            Func::Sqrt => self.fcall("llvm.sqrt", x)?,
            Func::Abs => self.fcall("llvm.fabs", x)?,
            Func::Recip => self.b.build_float_div(one, x, "recip")?,
            Func::Relu => {
                let f = self.intrinsic("llvm.maxnum", &[f64t.into()])?;
                self.call(f, &[x.into(), f64t.const_zero().into()])?.into_float_value()
            }
            Func::Tanh => self.math("tcc_tanh", x)?,
            Func::Sigmoid | Func::Silu => {
                let neg = self.b.build_float_neg(x, "neg")?;
                let e = self.math("tcc_exp", neg)?;
                let d = self.b.build_float_add(one, e, "den")?;
                let num = if func == Func::Sigmoid { one } else { x };
                self.b.build_float_div(num, d, "sig")?
            }
            Func::Gelu => {
                let x3 = self.b.build_float_mul(self.b.build_float_mul(x, x, "x2")?, x, "x3")?;
                let inner = self.b.build_float_add(x, self.b.build_float_mul(f64t.const_float(0.044715), x3, "a")?, "in")?;
                let kk = (2.0 / std::f64::consts::PI).sqrt();
                let arg = self.b.build_float_mul(f64t.const_float(kk), inner, "s")?;
                let th = self.math("tcc_tanh", arg)?;
                let h = self.b.build_float_mul(f64t.const_float(0.5), x, "h")?;
                self.b.build_float_mul(h, self.b.build_float_add(one, th, "1p")?, "gelu")?
            }
        };
        Ok(if t != f64t { self.b.build_float_trunc(r, t, "trunc")? } else { r })
    }

    /// Calls (generating once) one of the module's `f64 → f64` math functions.
    fn math(&mut self, name: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let f = match self.module.get_function(name) {
            Some(f) => f,
            None => {
                let f64t = self.ctx.f64_type();
                let f = self.module.add_function(name, f64t.fn_type(&[f64t.into()], false), Some(Linkage::Internal));
                let saved_block = self.b.get_insert_block();
                let saved_fn = self.func;
                self.func = Some(f);
                let e = self.ctx.append_basic_block(f, "entry");
                self.b.position_at_end(e);
                let a = f.get_nth_param(0).expect("x").into_float_value();
                let r = match name {
                    "tcc_exp" => self.exp64(a)?,
                    "tcc_log" => self.log64(a)?,
                    _ => self.tanh64(a)?,
                };
                self.b.build_return(Some(&r))?;
                self.func = saved_fn;
                if let Some(bb) = saved_block {
                    self.b.position_at_end(bb);
                }
                f
            }
        };
        Ok(self.call(f, &[x.into()])?.into_float_value())
    }

    fn fc(&self, v: f64) -> FloatValue<'ctx> {
        self.ctx.f64_type().const_float(v)
    }

    fn fma(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>, c: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let f = self.intrinsic("llvm.fma", &[self.ctx.f64_type().into()])?;
        Ok(self.call(f, &[a.into(), b.into(), c.into()])?.into_float_value())
    }

    /// `2^k` for `k` in `[-1022, 1023]` (an i64), built from its bits.
    fn pow2(&self, k: IntValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let e = self.b.build_int_add(k, self.i64c(1023), "e")?;
        let bits = self.b.build_left_shift(e, self.i64c(52), "bits")?;
        Ok(self.b.build_bit_cast(bits, self.ctx.f64_type(), "p2")?.into_float_value())
    }

    /// `exp(x)`: `x = k ln2 + r`, `|r| ≤ ln2/2`, Taylor to degree 13 (error
    /// below 1e-17 relative), times `2^k` in two steps (subnormals, overflow).
    fn exp64(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let b = &self.b;
        let f64t = self.ctx.f64_type();
        let maxf = self.intrinsic("llvm.maxnum", &[f64t.into()])?;
        let minf = self.intrinsic("llvm.minnum", &[f64t.into()])?;
        let xc = self.call(maxf, &[x.into(), self.fc(-746.0).into()])?.into_float_value();
        let xc = self.call(minf, &[xc.into(), self.fc(710.0).into()])?.into_float_value();
        let kf = self.fcall("llvm.rint", b.build_float_mul(xc, self.fc(std::f64::consts::LOG2_E), "t")?)?;
        let nk = b.build_float_neg(kf, "nk")?;
        let r = self.fma(nk, self.fc(6.931_471_803_691_238_164_90e-01), xc)?;
        let r = self.fma(nk, self.fc(1.908_214_929_270_587_700_02e-10), r)?;
        // Horner: Σ r^n / n!, n = 0..=13
        let mut p = self.fc(1.0 / 6_227_020_800.0);
        let mut fact = 6_227_020_800.0f64;
        for n in (0..13).rev() {
            fact /= (n + 1) as f64;
            p = self.fma(p, r, self.fc(1.0 / fact))?;
        }
        let ki = b.build_float_to_signed_int(kf, self.ctx.i64_type(), "ki")?;
        let k1 = b.build_int_signed_div(ki, self.i64c(2), "k1")?;
        let k2 = b.build_int_sub(ki, k1, "k2")?;
        let y = b.build_float_mul(b.build_float_mul(p, self.pow2(k1)?, "y1")?, self.pow2(k2)?, "y")?;
        let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "nan")?;
        Ok(b.build_select(nan, x, y, "exp")?.into_float_value())
    }

    /// `log(x)`: `x = m 2^e`, `m ∈ [√½, √2)`, `log m = 2 atanh((m-1)/(m+1))`
    /// by its series to `f^25`; special values as IEEE `log`.
    fn log64(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let b = &self.b;
        let i64t = self.ctx.i64_type();
        let f64t = self.ctx.f64_type();
        // Subnormals: scale by 2^54 first.
        let tiny = b.build_float_compare(FloatPredicate::OLT, self.fcall("llvm.fabs", x)?, self.fc(f64::MIN_POSITIVE), "tiny")?;
        let xs = b.build_select(tiny, b.build_float_mul(x, self.fc(18014398509481984.0), "xs")?, x, "xs")?.into_float_value();
        let adj = b.build_select(tiny, i64t.const_int((-54i64) as u64, true), self.i64c(0), "adj")?.into_int_value();
        let bits = b.build_bit_cast(xs, i64t, "bits")?.into_int_value();
        let ebits = b.build_and(b.build_right_shift(bits, self.i64c(52), false, "eb")?, self.i64c(0x7ff), "eb")?;
        let e = b.build_int_add(b.build_int_sub(ebits, self.i64c(1023), "e")?, adj, "e")?;
        let mbits = b.build_or(b.build_and(bits, self.i64c(0x000f_ffff_ffff_ffff), "mb")?, self.i64c(0x3ff0_0000_0000_0000), "mb")?;
        let m = b.build_bit_cast(mbits, f64t, "m")?.into_float_value();
        let big = b.build_float_compare(FloatPredicate::OGT, m, self.fc(std::f64::consts::SQRT_2), "big")?;
        let m = b.build_select(big, b.build_float_mul(m, self.fc(0.5), "mh")?, m, "m")?.into_float_value();
        let e = b.build_select(big, b.build_int_add(e, self.i64c(1), "e1")?, e, "e")?.into_int_value();
        let f = b.build_float_div(b.build_float_sub(m, self.fc(1.0), "n")?, b.build_float_add(m, self.fc(1.0), "d")?, "f")?;
        let s = b.build_float_mul(f, f, "s")?;
        let mut p = self.fc(1.0 / 25.0);
        for n in (0..12).rev() {
            p = self.fma(p, s, self.fc(1.0 / (2 * n + 1) as f64))?;
        }
        let logm = b.build_float_mul(b.build_float_mul(f, p, "fp")?, self.fc(2.0), "logm")?;
        let ef = b.build_signed_int_to_float(e, f64t, "ef")?;
        let lo = self.fma(ef, self.fc(1.908_214_929_270_587_700_02e-10), logm)?;
        let y = self.fma(ef, self.fc(6.931_471_803_691_238_164_90e-01), lo)?;
        // x < 0 or NaN → NaN; 0 → -inf; +inf → +inf.
        let y = b.build_select(b.build_float_compare(FloatPredicate::OEQ, x, self.fc(f64::INFINITY), "inf")?, x, y, "y")?.into_float_value();
        let y = b.build_select(b.build_float_compare(FloatPredicate::OEQ, x, self.fc(0.0), "zero")?, self.fc(f64::NEG_INFINITY), y, "y")?.into_float_value();
        let bad = b.build_float_compare(FloatPredicate::ULT, x, self.fc(0.0), "bad")?;
        Ok(b.build_select(bad, self.fc(f64::NAN), y, "log")?.into_float_value())
    }

    /// `tanh(x) = sign(x) (1 - e) / (1 + e)`, `e = exp(-2|x|)`.
    fn tanh64(&mut self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let ax = self.fcall("llvm.fabs", x)?;
        let m2 = self.b.build_float_mul(ax, self.fc(-2.0), "m2")?;
        let e = self.exp64(m2)?;
        let t = self.b.build_float_div(self.b.build_float_sub(self.fc(1.0), e, "n")?, self.b.build_float_add(self.fc(1.0), e, "d")?, "t")?;
        let f = self.intrinsic("llvm.copysign", &[self.ctx.f64_type().into()])?;
        Ok(self.call(f, &[t.into(), x.into()])?.into_float_value())
    }
}

fn build_module<'ctx>(ctx: &'ctx Context, kernels: &[Kernel], mode: Mode, tm: &TargetMachine) -> Result<Module<'ctx>, CodegenError> {
    let module = ctx.create_module("tcc_gpu");
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    let mut g = Gen { ctx, module: &module, b: ctx.create_builder(), mode, func: None };
    for k in kernels {
        g.kernel(k)?;
    }
    drop(g);
    module.verify().map_err(|e| err(format!("LLVM rejected the generated GPU module: {}", e.to_string())))?;
    module.run_passes("default<O3>", tm, PassBuilderOptions::create()).map_err(|e| err(format!("LLVM passes: {}", e.to_string())))?;
    Ok(module)
}

fn nvptx_machine() -> Result<TargetMachine, CodegenError> {
    Target::initialize_nvptx(&InitializationConfig::default());
    let triple = TargetTriple::create(TRIPLE);
    let target = Target::from_triple(&triple).map_err(|e| err(format!("LLVM: {e}")))?;
    target
        .create_target_machine(&triple, SM, PTX_FEATURES, OptimizationLevel::Aggressive, RelocMode::Default, CodeModel::Default)
        .ok_or_else(|| err(format!("LLVM cannot generate code for {TRIPLE} {SM}")))
}

/// The PTX of a plan's kernels (one module).
pub fn emit_ptx(plan: &GpuPlan) -> Result<String, CodegenError> {
    let ctx = Context::create();
    let tm = nvptx_machine()?;
    let module = build_module(&ctx, &plan.kernels, Mode::Device, &tm)?;
    let buf = tm.write_to_memory_buffer(&module, FileType::Assembly).map_err(|e| err(format!("LLVM: {}", e.to_string())))?;
    Ok(String::from_utf8_lossy(buf.as_slice()).trim_end_matches('\0').to_string())
}

/// The optimized LLVM IR of a plan's kernels for the NVPTX target.
pub fn emit_nvptx_ir(plan: &GpuPlan) -> Result<String, CodegenError> {
    let ctx = Context::create();
    let tm = nvptx_machine()?;
    let m = build_module(&ctx, &plan.kernels, Mode::Device, &tm)?;
    let s = m.print_to_string().to_string();
    Ok(s)
}

/// `tcc opt --emit=ptx`: plan and compile `units`.
pub fn ptx_for(hir: &Hir, units: &[UnitId], opts: &GpuOptions) -> Result<(GpuPlan, String), CodegenError> {
    let plan = plan(hir, units, opts)?;
    let ptx = emit_ptx(&plan)?;
    Ok((plan, ptx))
}

// ---------------------------------------------------------------------------------
// Host emulation (tests on machines without a GPU)
// ---------------------------------------------------------------------------------

/// Runs a unit plan on the CPU: kernels generated for the host and run thread by
/// thread, cuBLAS calls by a plain loop with cuBLAS's semantics. Same outputs as the
/// GPU up to rounding; slow, for tests.
pub fn emulate(plan: &GpuPlan, unit: usize, inputs: &HashMap<TensorId, Dense>) -> Result<HashMap<TensorId, Dense>, CodegenError> {
    Target::initialize_native(&InitializationConfig::default()).map_err(|e| err(format!("LLVM: {e}")))?;
    let ctx = Context::create();
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(|e| err(format!("LLVM: {e}")))?;
    let tm = target
        .create_target_machine(&triple, "x86-64", "", OptimizationLevel::Default, RelocMode::Default, CodeModel::JITDefault)
        .ok_or_else(|| err("LLVM: no host target machine"))?;
    let up = &plan.units[unit];
    let module = build_module(&ctx, &plan.kernels, Mode::Host, &tm)?;
    let ee = module.create_jit_execution_engine(OptimizationLevel::Default).map_err(|e| err(e.to_string()))?;
    // Buffers as f64 or f32 vectors.
    let mut bufs: Vec<Vec<u8>> = up.buffers.iter().map(|b| vec![0u8; b.elements as usize * b.elem.bytes()]).collect();
    for (j, b) in up.buffers.iter().enumerate() {
        if let Some(t) = b.tensor {
            if b.input {
                let d = inputs.get(&t).ok_or_else(|| err(format!("no value for input `{}`", b.name)))?;
                write_elems(&mut bufs[j], b.elem, &d.data);
            }
        }
    }
    let mut bound = HashMap::new();
    emulate_steps(&up.steps, plan, up, &ee, &mut bufs, &mut bound)?;
    let mut out = HashMap::new();
    for &t in &up.args[up.n_inputs..] {
        let j = up.buf_of(t).ok_or_else(|| err("output without a buffer"))?;
        out.insert(t, Dense::from_vec(up.buffers[j].shape.clone(), read_elems(&bufs[j], up.buffers[j].elem)));
    }
    Ok(out)
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
    }
}

pub fn read_elems(src: &[u8], e: Elem) -> Vec<f64> {
    match e {
        Elem::F64 => src.chunks_exact(8).map(|c| f64::from_ne_bytes(c.try_into().expect("8"))).collect(),
        Elem::F32 => src.chunks_exact(4).map(|c| f32::from_ne_bytes(c.try_into().expect("4")) as f64).collect(),
    }
}

fn emulate_steps(
    steps: &[Step],
    plan: &GpuPlan,
    up: &UnitPlan,
    ee: &inkwell::execution_engine::ExecutionEngine,
    bufs: &mut [Vec<u8>],
    bound: &mut HashMap<IndexId, u64>,
) -> Result<(), CodegenError> {
    for s in steps {
        match s {
            Step::Loop { index, extent, body } => {
                for v in 0..*extent {
                    bound.insert(*index, v);
                    emulate_steps(body, plan, up, ee, bufs, bound)?;
                }
                bound.remove(index);
            }
            Step::Memset { buf } => bufs[*buf].iter_mut().for_each(|x| *x = 0),
            Step::Launch { kernel, args } => {
                let k = &plan.kernels[*kernel];
                let addr = ee.get_function_address(&k.name).map_err(|e| err(format!("JIT: {e:?}")))?;
                let ptrs: Vec<*mut u8> = args
                    .iter()
                    .map(|a| {
                        let off = arg_offset(a, bound) as usize * up.buffers[a.buf].elem.bytes();
                        // SAFETY: offsets stay inside the buffer by construction.
                        unsafe { bufs[a.buf].as_mut_ptr().add(off) }
                    })
                    .collect();
                for t in 0..k.threads() {
                    // SAFETY: the generated function takes a thread id and one pointer per argument.
                    unsafe {
                        match ptrs.len() {
                            1 => std::mem::transmute::<usize, unsafe extern "C" fn(u64, *mut u8)>(addr)(t, ptrs[0]),
                            2 => std::mem::transmute::<usize, unsafe extern "C" fn(u64, *mut u8, *mut u8)>(addr)(t, ptrs[0], ptrs[1]),
                            3 => std::mem::transmute::<usize, unsafe extern "C" fn(u64, *mut u8, *mut u8, *mut u8)>(addr)(t, ptrs[0], ptrs[1], ptrs[2]),
                            4 => std::mem::transmute::<usize, unsafe extern "C" fn(u64, *mut u8, *mut u8, *mut u8, *mut u8)>(addr)(t, ptrs[0], ptrs[1], ptrs[2], ptrs[3]),
                            5 => std::mem::transmute::<usize, unsafe extern "C" fn(u64, *mut u8, *mut u8, *mut u8, *mut u8, *mut u8)>(addr)(t, ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4]),
                            n => return Err(err(format!("emulate: {n} arguments not supported"))),
                        }
                    }
                }
            }
            Step::Gemm(g) => {
                let rd = |j: usize| read_elems(&bufs[j], up.buffers[j].elem);
                let (a, b) = (rd(g.a.buf), rd(g.b.buf));
                let mut c = rd(g.c.buf);
                let (oa, ob, oc) = (arg_offset(&g.a, bound), arg_offset(&g.b, bound), arg_offset(&g.c, bound));
                for bt in 0..g.batch {
                    for i in 0..g.m {
                        for j in 0..g.n {
                            let mut s = 0.0;
                            for l in 0..g.k {
                                let av = if g.transa { a[(oa + bt * g.stride_a + l + i * g.lda) as usize] } else { a[(oa + bt * g.stride_a + i + l * g.lda) as usize] };
                                let bv = if g.transb { b[(ob + bt * g.stride_b + j + l * g.ldb) as usize] } else { b[(ob + bt * g.stride_b + l + j * g.ldb) as usize] };
                                s += av * bv;
                            }
                            c[(oc + bt * g.stride_c + i + j * g.ldc) as usize] += g.alpha * s;
                        }
                    }
                }
                let e = up.buffers[g.c.buf].elem;
                write_elems(&mut bufs[g.c.buf], e, &c);
            }
        }
    }
    Ok(())
}

/// A short summary of a plan for reports: kernels, launches, cuBLAS calls.
pub fn describe(plan: &GpuPlan) -> String {
    let mut s = String::new();
    for u in &plan.units {
        let (l, g) = u.launches();
        s.push_str(&format!("{}: {} kernel launches, {} cuBLAS calls per run ({:.3e} flops)\n", u.name, l, g, u.flops));
    }
    s
}
