//! Tiled kernels for binary contractions `C[b,m,n] += coef · Σ_k A[b,m,k] · B[b,k,n]`
//! in GETT style: each of the four index groups (batch, m, n, k) is a list of
//! dimensions with arbitrary strides in each tensor, so no operand is transposed
//! or copied first.
//!
//! One thread block computes a `bm × bn` tile of C for one batch element
//! (grid: x over n tiles, y over m tiles, z over the batch). The reduction runs
//! in steps of `bk`: each step's A and B tiles are staged in shared memory
//! (double-buffered: while the block multiplies one buffer, every thread holds
//! its part of the next step's tiles in registers and writes them to the other
//! buffer, so one barrier per step suffices; or, with [`TileCfg::stages`] ≥ 3
//! — the default for the 64×64 tensor-core tiles — a ring of shared buffers
//! filled by `cp.async` with `stages − 1` steps in flight). Each thread accumulates a
//! `tm × tn` register tile: rows `ty·tm + i` (contiguous: the block's threads
//! read them as broadcasts), columns `tx + j·(bn/tn)` (strided, so a warp reads
//! consecutive shared words and stores consecutive elements of C). Elements
//! outside the sizes are loaded as 0 and never stored. The tile goes to C
//! directly from the accumulators or staged through shared memory
//! ([`Epilogue`]).
//!
//! On the host ([`super::emulate`]) the same function runs one whole block per
//! call: every stretch between barriers becomes a loop over the block's thread
//! ids, and the per-thread state that lives across a barrier (accumulators,
//! the loads' row offsets) becomes an array indexed by thread id.

use super::gen::{Gen, Mode};
use super::plan::{Operand, Planner};
use super::*;
use crate::sema::hir::Stmt;
use inkwell::module::Linkage;
use inkwell::types::{BasicType, BasicTypeEnum};
use inkwell::values::{BasicValue, FloatValue, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

/// One dimension of an index group: its extent and its stride in C, A and B
/// (0 where it does not index that tensor). The last dimension of a group varies
/// fastest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dim {
    pub size: u64,
    pub c: u64,
    pub a: u64,
    pub b: u64,
}

/// Block tile `bm × bn`, reduction step `bk`, and either a thread tile `tm × tn`
/// (FMA: the block has `(bm/tm)·(bn/tn)` threads) or, with `mma`, a warp tile
/// `tm × tn` computed by f64 tensor-core instructions (`mma.sync` m8n8k4: the
/// block has `(bm/tm)·(bn/tn)` warps of 32 threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileCfg {
    pub bm: u64,
    pub bn: u64,
    pub bk: u64,
    pub tm: u64,
    pub tn: u64,
    /// f64 tensor cores (DMMA); `tm × tn` is then a warp's tile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mma: bool,
    /// Shared buffers of the operand tiles. 2: each thread holds the next
    /// step's loads in registers while the block multiplies (one step of
    /// latency hidden). `s >= 3`: a ring filled by `cp.async` (global to shared
    /// without registers), `s - 1` steps in flight, for reductions of many
    /// short steps whose load latency the one step does not cover.
    #[serde(default = "two_u64", skip_serializing_if = "is_two_u64")]
    pub stages: u64,
}

fn two_u64() -> u64 {
    2
}

fn is_two_u64(x: &u64) -> bool {
    *x == 2
}

/// Shape of one `mma.sync.m8n8k4` f64 instruction: `M × N` outputs, `K` summed.
pub const MMA_M: u64 = 8;
pub const MMA_N: u64 = 8;
pub const MMA_K: u64 = 4;
const WARP: u64 = 32;
/// Whether the cost model may choose tensor-core tiles without `TCC_GPU_MMA=1`.
/// Their fragments were checked on a device (H100, 2026-12-05: 120 random
/// programs and the examples against the interpreter, bench/gpu/runs/
/// mma-I1-checks.txt). With the direct epilogue they ran at 0.68–0.92 of the FMA
/// tiles' speed on the CCSD(T) triples; with their C tile staged through shared
/// memory ([`default_epilogue`]) the 64×64×8 shape ran 1.44–1.48× faster than the
/// FMA tile on all six n = 24 triples (H100, 2026-12-05, bench/gpu/runs/
/// epi-H100-2026-12-05/), so the cost model chooses among them.
pub const MMA_BY_DEFAULT: bool = true;

impl TileCfg {
    /// The shapes the planner chooses from (by predicted time, [`cost`]); the
    /// tensor-core shapes are valid for f64 only. The 64×64 tensor-core tiles
    /// load through a ring of 4 `cp.async` buffers: on an H200 (2026-12-07,
    /// bench/gpu/results.md) it took the n = 24 CCSD(T) triples (64×64×4) from
    /// 0.536–0.583 ms to 0.478–0.524, `ki,abkj->abij` (64×64×8, k = 32) from
    /// 0.117 to 0.090, with the double buffer's times at n = 16 and 20 within
    /// noise; checked on the 120 random programs and the small triples against
    /// the interpreter.
    pub const CANDIDATES: [TileCfg; 6] = [
        TileCfg { bm: 128, bn: 128, bk: 8, tm: 8, tn: 8, mma: false, stages: 2 },
        TileCfg { bm: 128, bn: 64, bk: 8, tm: 8, tn: 4, mma: false, stages: 2 },
        TileCfg { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4, mma: false, stages: 2 },
        TileCfg { bm: 128, bn: 128, bk: 8, tm: 64, tn: 32, mma: true, stages: 2 },
        TileCfg { bm: 64, bn: 64, bk: 8, tm: 32, tn: 32, mma: true, stages: 4 },
        TileCfg { bm: 64, bn: 64, bk: 4, tm: 32, tn: 32, mma: true, stages: 4 },
    ];
    /// The operand buffer counts a shape may have ([`TileCfg::stages`]).
    pub const STAGES: std::ops::RangeInclusive<u64> = 2..=8;
    pub fn threads(&self) -> u64 {
        let tiles = (self.bm / self.tm) * (self.bn / self.tn);
        if self.mma {
            tiles * WARP
        } else {
            tiles
        }
    }
    /// Accumulators per thread: the thread tile, or with `mma` two outputs of
    /// each 8 × 8 piece of the warp tile.
    pub fn per_thread(&self) -> u64 {
        if self.mma {
            2 * (self.tm / MMA_M) * (self.tn / MMA_N)
        } else {
            self.tm * self.tn
        }
    }
    /// Whether the generator supports it: whole thread (warp) tiles, every
    /// thread loads the same number of elements of each tile, at most 1024
    /// threads, 48 KiB of shared memory; tensor cores only for f64, with warp
    /// tiles of whole 8 × 8 pieces and steps of whole k = 4 slices.
    pub fn valid(&self, e: Elem) -> bool {
        let nt = self.threads();
        [self.bm, self.bn, self.bk, self.tm, self.tn].iter().all(|&x| x > 0)
            && self.bm.is_multiple_of(self.tm)
            && self.bn.is_multiple_of(self.tn)
            && nt <= 1024
            && (self.bm * self.bk).is_multiple_of(nt)
            && (self.bn * self.bk).is_multiple_of(nt)
            && self.per_thread() <= 256
            && Self::STAGES.contains(&self.stages)
            && self.shared_bytes(e) <= 48 << 10
            && (!self.mma
                || (e == Elem::F64
                    && self.tm.is_multiple_of(MMA_M)
                    && self.tn.is_multiple_of(MMA_N)
                    && self.bk.is_multiple_of(MMA_K)))
    }
    /// Row padding of the shared tiles: 16 bytes (fewer bank conflicts when
    /// threads store along k, rows stay 16-byte aligned); 4 f64 for tensor
    /// cores, so that the four k rows of a fragment load fall in distinct banks.
    fn pad(&self, e: Elem) -> u64 {
        if self.mma {
            4
        } else {
            16 / e.bytes() as u64
        }
    }
    pub fn shared_bytes(&self, e: Elem) -> u64 {
        self.operand_elems(e) * e.bytes() as u64
    }
    /// Elements of the operand tiles' [`TileCfg::stages`] buffers in the
    /// block's one shared array: A's at 0, B's from [`TileCfg::b_offset`].
    fn operand_elems(&self, e: Elem) -> u64 {
        self.b_offset(e) + self.stages * self.bk * (self.bn + self.pad(e))
    }
    /// Where B's tiles start: after A's, rounded up to 16 bytes.
    fn b_offset(&self, e: Elem) -> u64 {
        let q = 16 / e.bytes() as u64;
        (self.stages * self.bk * (self.bm + self.pad(e))).div_ceil(q) * q
    }
    /// Accumulator rows per thread and columns per accumulator row
    /// ([`Gen::thread_outputs`]).
    fn slots(&self) -> (u64, u64) {
        if self.mma {
            (self.tm / MMA_M, 2 * self.tn / MMA_N)
        } else {
            (self.tm, self.tn)
        }
    }
    /// The staged epilogue's geometry for arithmetic type `e`: row length of
    /// the staging area (`bn` plus 64 bytes, so that the 8 rows of a
    /// tensor-core fragment store fall in distinct banks), rows per accumulator
    /// row (`bm / slots`), accumulator rows per pass (as many as fit where the
    /// operand tiles were) and the elements of the shared array.
    pub fn stage(&self, e: Elem) -> Stage {
        self.stage_for(e, Epilogue::Staged)
    }
    /// [`TileCfg::stage`] of epilogue `epi`: [`Epilogue::Whole`] takes every
    /// accumulator row in one pass, the shared array grown to hold the tile.
    pub fn stage_for(&self, e: Elem, epi: Epilogue) -> Stage {
        let ld = self.bn + 64 / e.bytes() as u64;
        let (slots, _) = self.slots();
        let rows = self.bm / slots;
        let ops = self.operand_elems(e);
        let per_pass = if epi == Epilogue::Whole { slots } else { (ops / (rows * ld)).clamp(1, slots) };
        Stage { ld, rows, per_pass, elems: ops.max(per_pass * rows * ld) }
    }
    /// Shared memory of a kernel with this epilogue (the staged ones reuse the
    /// operand tiles' space, plus their offset tables).
    pub fn shared_bytes_with(&self, e: Elem, epi: Epilogue) -> u64 {
        match epi {
            Epilogue::Direct => self.shared_bytes(e),
            Epilogue::Staged | Epilogue::Whole => self.stage_for(e, epi).elems * e.bytes() as u64 + table_bytes(self),
        }
    }
}

/// See [`TileCfg::stage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    pub ld: u64,
    pub rows: u64,
    pub per_pass: u64,
    pub elems: u64,
}

/// How a block writes its C tile after the reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Epilogue {
    /// Each thread stores its own accumulators where they belong in C (for the
    /// FMA tile a half-warp writes 16 consecutive columns; for tensor-core
    /// tiles 8 rows of 4 elements, every other one).
    #[default]
    Direct,
    /// Through shared memory: the block writes its tile there in passes of a
    /// few accumulator rows, then consecutive threads store consecutive
    /// columns of C (16-byte vector stores where [`Tiled::vec`] > 1).
    Staged,
    /// As [`Epilogue::Staged`], in one pass: the shared array holds the whole
    /// tile (more shared memory, one barrier, every store of the tile in flight
    /// at once).
    Whole,
}

impl Epilogue {
    pub const ALL: [Epilogue; 3] = [Epilogue::Direct, Epilogue::Staged, Epilogue::Whole];
    pub fn name(self) -> &'static str {
        match self {
            Epilogue::Direct => "direct",
            Epilogue::Staged => "staged",
            Epilogue::Whole => "whole",
        }
    }
    pub fn from_name(s: &str) -> Option<Epilogue> {
        Self::ALL.into_iter().find(|e| e.name() == s)
    }
    fn is_direct(&self) -> bool {
        *self == Epilogue::Direct
    }
    /// Through shared memory (in passes or whole).
    pub fn is_staged(self) -> bool {
        !self.is_direct()
    }
}

/// How the planner stores a tile shape's C tile when not told (`TCC_GPU_EPILOGUE`,
/// [`GpuOptions::epilogue`]). Measured on the 18 CCSD(T) triples (H100,
/// 2026-12-05, bench/gpu/results.md, "store epilogue through shared memory"):
/// staging the FMA tiles' stores changed nothing on the cost model's tile
/// (median 1.02× the direct time) and slowed the 128×64 one on the d2 triples
/// (1.5×), while a tensor-core tile's direct stores (8 rows of 4 elements, every
/// other one) made it slower than the FMA tile and staging them made it the
/// fastest (0.64–0.70 ms against 0.88–1.11 direct at n = 24).
pub fn default_epilogue(cfg: &TileCfg) -> Epilogue {
    if cfg.mma {
        Epilogue::Staged
    } else {
        Epilogue::Direct
    }
}

/// Bytes of the offset tables of a staged epilogue (one i64 per row and column).
fn table_bytes(cfg: &TileCfg) -> u64 {
    8 * (cfg.bm + cfg.bn)
}

/// A tiled kernel: the groups and how the operand tiles are read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tiled {
    pub cfg: TileCfg,
    pub batch: Vec<Dim>,
    pub m: Vec<Dim>,
    pub n: Vec<Dim>,
    pub k: Vec<Dim>,
    /// Consecutive threads load A's tile along k (else along m): whichever is
    /// contiguous in A. Likewise for B (along k, else along n).
    pub a_kfast: bool,
    pub b_kfast: bool,
    #[serde(default, skip_serializing_if = "Epilogue::is_direct")]
    pub epilogue: Epilogue,
    /// Elements per store of a staged epilogue: 16 bytes' worth where the
    /// planner proved every run of that many columns contiguous in C and
    /// 16-byte aligned ([`Tiled::vector_width`]), else 1.
    #[serde(default = "one_u64", skip_serializing_if = "is_one_u64")]
    pub vec: u64,
    /// Resident blocks per multiprocessor ptxas must make room for
    /// ([`GpuOptions::min_blocks`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_blocks: Option<u64>,
    /// Evict-first vector stores of C ([`GpuOptions::stream_stores`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream_stores: bool,
}

fn total(d: &[Dim]) -> u64 {
    d.iter().map(|x| x.size).product()
}

impl Tiled {
    pub fn sizes(&self) -> [u64; 4] {
        [total(&self.batch), total(&self.m), total(&self.n), total(&self.k)]
    }
    pub fn grid(&self) -> [u64; 3] {
        let [nb, m, n, _] = self.sizes();
        [n.div_ceil(self.cfg.bn), m.div_ceil(self.cfg.bm), nb]
    }
    /// Elements per store of a staged epilogue writing C as `out`, with the
    /// kernel's C pointer offset by a multiple of `base_mult` elements from a
    /// 256-byte aligned allocation: 16 bytes' worth (2 f64, 4 f32) when C's
    /// innermost column dimension has stride 1 and a length that many divide,
    /// every other stride of C and the block's first column are multiples of
    /// it (then each run of that many columns is contiguous, inside the
    /// sizes or wholly outside, and 16-byte aligned); 1 otherwise and for
    /// 16-bit outputs.
    pub fn vector_width(&self, out: Elem, base_mult: u64) -> u64 {
        if out.is_half() {
            return 1;
        }
        let v = 16 / out.bytes() as u64;
        let Some(last) = self.n.last() else { return 1 };
        let others = self.batch.iter().chain(&self.m).chain(&self.n[..self.n.len() - 1]);
        let ok = last.c == 1
            && last.size.is_multiple_of(v)
            && self.cfg.bn.is_multiple_of(v)
            && base_mult.is_multiple_of(v)
            && others.clone().all(|d| d.c.is_multiple_of(v));
        if ok {
            v
        } else {
            1
        }
    }
    /// Whether the launch fits CUDA's grid limits.
    pub fn launchable(&self) -> bool {
        let g = self.grid();
        g[0] <= i32::MAX as u64 && g[1] <= 65535 && g[2] <= 65535
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Merges neighbouring dimensions that form one strided run in every tensor,
/// after dropping those of size 1.
pub(super) fn merge(dims: Vec<Dim>) -> Vec<Dim> {
    let mut out: Vec<Dim> = Vec::new();
    for d in dims.into_iter().filter(|d| d.size > 1) {
        if let Some(p) = out.last_mut() {
            if p.c == d.c * d.size && p.a == d.a * d.size && p.b == d.b * d.size {
                *p = Dim { size: p.size * d.size, ..d };
                continue;
            }
        }
        out.push(d);
    }
    out
}

impl Planner<'_> {
    /// A binary contraction as a tiled kernel; false when its grid exceeds
    /// CUDA's limits. The operands are swapped when that puts C's contiguous
    /// index into the column group (coalesced stores).
    pub(super) fn tiled(
        &mut self,
        st: &Stmt,
        coef: f64,
        ops: &[Operand],
        groups: &[Vec<IndexId>; 4],
        out: &mut Vec<Step>,
    ) -> bool {
        let hir = self.hir;
        let c = st.lhs.tensor;
        let (mut a, mut b) = (&ops[0], &ops[1]);
        let mut g = groups.clone();
        let size = |v: IndexId| hir.index_size(v) as u64;
        let sc = |v: IndexId| self.stride_in(c, &st.lhs.indices, v);
        let inner = |vs: &[IndexId]| vs.iter().filter(|&&v| size(v) > 1).map(|&v| sc(v)).min().unwrap_or(u64::MAX);
        if inner(&g[1]) < inner(&g[2]) {
            std::mem::swap(&mut a, &mut b);
            g.swap(1, 2);
        }
        let dim = |v: IndexId| Dim {
            size: size(v),
            c: sc(v),
            a: self.stride_in(a.tensor, &a.indices, v),
            b: self.stride_in(b.tensor, &b.indices, v),
        };
        let group = |vs: &[IndexId], key: &dyn Fn(&Dim) -> (u64, u64)| {
            let mut d: Vec<Dim> = vs.iter().map(|&v| dim(v)).collect();
            d.sort_by_key(|x| std::cmp::Reverse(key(x)));
            merge(d)
        };
        let (batch, m, n, k) = (
            group(&g[0], &|d| (d.c, d.a)),
            group(&g[1], &|d| (d.c, d.a)),
            group(&g[2], &|d| (d.c, d.b)),
            group(&g[3], &|d| (d.a, d.b)),
        );
        let last = |d: &[Dim], f: &dyn Fn(&Dim) -> u64| d.last().map(f).unwrap_or(u64::MAX);
        let a_kfast = last(&k, &|d| d.a) < last(&m, &|d| d.a);
        let b_kfast = last(&k, &|d| d.b) < last(&n, &|d| d.b);
        let elem = Elem::of(hir.tensors[c].elem);
        let mut t = Tiled {
            cfg: TileCfg::CANDIDATES[0],
            batch,
            m,
            n,
            k,
            a_kfast,
            b_kfast,
            epilogue: Epilogue::Direct,
            vec: 1,
            min_blocks: self.opts.min_blocks,
            stream_stores: false,
        };
        t.cfg = match self.opts.tile {
            Some(cfg) if cfg.valid(elem) => cfg,
            Some(_) => return false,
            None => {
                let sizes = t.sizes();
                let best = TileCfg::CANDIDATES
                    .into_iter()
                    .filter(|x| {
                        x.valid(elem)
                            && match self.opts.mma {
                                Some(true) => x.mma || elem != Elem::F64,
                                Some(false) => !x.mma,
                                // Direct stores made every tensor-core tile slower
                                // than the FMA tiles (measured): only staged ones.
                                None => {
                                    !x.mma
                                        || (MMA_BY_DEFAULT
                                            && self.opts.epilogue.unwrap_or(default_epilogue(x)).is_staged())
                                }
                            }
                    })
                    .map(|x| {
                        let epi = self.opts.epilogue.unwrap_or(default_epilogue(&x));
                        (x, cost::tiled_time_c(elem, &x, epi, sizes, if self.fresh { 1 } else { 2 }))
                    })
                    .min_by(|x, y| x.1.total_cmp(&y.1))
                    .map(|x| x.0);
                match best {
                    Some(x) => match self.opts.stages {
                        Some(stages) if TileCfg { stages, ..x }.valid(elem) => TileCfg { stages, ..x },
                        _ => x,
                    },
                    None => return false,
                }
            }
        };
        if !t.launchable() {
            return false;
        }
        self.written(c, self.fresh);
        let c_arg = self.arg(c, &st.lhs.indices);
        let mut staged = self.opts.epilogue.unwrap_or(default_epilogue(&t.cfg));
        if staged == Epilogue::Whole && t.cfg.shared_bytes_with(elem, staged) > 48 << 10 {
            // The whole tile does not fit: in passes through the operands' space.
            staged = Epilogue::Staged;
        }
        if staged.is_staged() && t.cfg.shared_bytes_with(elem, staged) <= 48 << 10 {
            t.epilogue = staged;
            // The C pointer's offset from its allocation: a multiple of every
            // host-loop stride and of the slice's start.
            let base_mult = c_arg.base.iter().fold(c_arg.offset, |g, &(_, s)| gcd(g, s));
            let out_elem = self.half_of(c).unwrap_or(elem);
            t.vec = t.vector_width(out_elem, base_mult);
            let [nb, m, n, _] = t.sizes();
            let c_bytes = nb * m * n * out_elem.bytes() as u64;
            t.stream_stores = self.opts.stream_stores.unwrap_or(c_bytes > EVICT_FIRST_BYTES) && t.vec > 1 && self.fresh;
        }
        let kop = |o: &Operand| KOperand {
            elem: self.selem(o.tensor),
            func: o.func.map(|f| f.name().to_string()),
            par_strides: vec![],
            red_strides: vec![],
        };
        let kid = self.kernel(Kernel {
            name: String::new(),
            elem,
            par: vec![],
            out_strides: vec![],
            red: vec![],
            split_vars: 0,
            split: 1,
            chunk: 1,
            ops: vec![kop(a), kop(b)],
            coef,
            store: self.fresh,
            tiled: Some(t),
            transpose: None,
            combine: Combine::Sum,
            out: self.half_of(c),
            lanes: 1,
        });
        out.push(Step::Launch {
            kernel: kid,
            args: vec![c_arg, self.arg(a.tensor, &a.indices), self.arg(b.tensor, &b.indices)],
        });
        true
    }
}

impl<'ctx> Gen<'_, 'ctx> {
    /// Offsets in C, A and B of element `i` of a group.
    fn group_offsets(&self, dims: &[Dim], i: IntValue<'ctx>) -> Result<[IntValue<'ctx>; 3], CodegenError> {
        let mut offs = [self.i64c(0); 3];
        let mut rem = i;
        for (j, d) in dims.iter().enumerate().rev() {
            let (v, r) = if j == 0 {
                (rem, rem)
            } else {
                (
                    self.b.build_int_unsigned_rem(rem, self.i64c(d.size), "v")?,
                    self.b.build_int_unsigned_div(rem, self.i64c(d.size), "r")?,
                )
            };
            rem = r;
            offs[0] = self.add_scaled(offs[0], v, d.c)?;
            offs[1] = self.add_scaled(offs[1], v, d.a)?;
            offs[2] = self.add_scaled(offs[2], v, d.b)?;
        }
        Ok(offs)
    }

    /// A module-level array of `len` elements: in shared memory on the device,
    /// a plain global on the host.
    pub(super) fn block_array(&self, name: &str, t: BasicTypeEnum<'ctx>, len: u64) -> PointerValue<'ctx> {
        let at = t.array_type(len as u32);
        let g = match self.mode {
            Mode::Device => {
                let g = self.module.add_global(at, Some(AddressSpace::from(3u16)), name);
                g.set_initializer(&at.get_undef());
                g
            }
            Mode::Host => {
                let g = self.module.add_global(at, None, name);
                g.set_initializer(&at.const_zero());
                g
            }
        };
        g.set_linkage(Linkage::Internal);
        g.set_alignment(16);
        g.as_pointer_value()
    }

    pub(super) fn at(&self, array: PointerValue<'ctx>, i: IntValue<'ctx>) -> Result<PointerValue<'ctx>, CodegenError> {
        // SAFETY: indices stay inside the array by construction.
        Ok(unsafe { self.b.build_in_bounds_gep(array, &[self.i64c(0), i], "at")? })
    }

    /// `body(tid)` for this thread (device) or for every thread of the block (host).
    pub(super) fn per_thread(
        &mut self,
        tid: IntValue<'ctx>,
        nt: u64,
        body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        match self.mode {
            Mode::Device => body(self, tid),
            Mode::Host => self.for_range(self.i64c(0), self.i64c(nt), body),
        }
    }

    pub(super) fn barrier(&self) -> Result<(), CodegenError> {
        if self.mode == Mode::Device {
            let f = self.intrinsic("llvm.nvvm.barrier0", &[])?;
            self.b.build_call(f, &[], "")?;
        }
        Ok(())
    }

    /// Inline PTX `text` with operands `args` (constraints `cons`), a side
    /// effect on memory as far as LLVM knows, so that it stays where it is.
    fn asm_call(
        &self,
        text: String,
        cons: &str,
        args: &[inkwell::values::BasicValueEnum<'ctx>],
    ) -> Result<(), CodegenError> {
        let tys: Vec<inkwell::types::BasicMetadataTypeEnum> = args.iter().map(|a| a.get_type().into()).collect();
        let args: Vec<inkwell::values::BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        let fty = self.ctx.void_type().fn_type(&tys, false);
        let cons = if cons.is_empty() { "~{memory}".to_string() } else { format!("{cons},~{{memory}}") };
        let asm = self.ctx.create_inline_asm(fty, text, cons, true, false, None, false);
        let callee = inkwell::values::CallableValue::try_from(asm)
            .map_err(|_| err("internal: inline asm is not callable".to_string()))?;
        self.b.build_call(callee, &args, "")?;
        Ok(())
    }

    /// `cp.async` (sm_80+) of one element of `bytes` (4 or 8) from global
    /// `src` to shared `dst`, without a register; where `ok` is false nothing
    /// is read and the element becomes 0 (source size 0).
    fn cp_async(
        &self,
        dst: PointerValue<'ctx>,
        src: PointerValue<'ctx>,
        ok: IntValue<'ctx>,
        bytes: u64,
    ) -> Result<(), CodegenError> {
        let (i64t, i32t) = (self.ctx.i64_type(), self.ctx.i32_type());
        let d = self.b.build_ptr_to_int(dst, i64t, "d")?;
        let s = self.b.build_ptr_to_int(src, i64t, "s")?;
        let n = self.b.build_select(ok, i32t.const_int(bytes, false), i32t.const_zero(), "n")?;
        self.asm_call(format!("cp.async.ca.shared.global [$0], [$1], {bytes}, $2;"), "l,l,r", &[d.into(), s.into(), n])
    }

    /// Ends this thread's group of `cp.async` copies (device; nothing on the host,
    /// whose fills are plain stores).
    fn cp_async_commit(&self) -> Result<(), CodegenError> {
        match self.mode {
            Mode::Device => self.asm_call("cp.async.commit_group;".into(), "", &[]),
            Mode::Host => Ok(()),
        }
    }

    /// Waits until at most `pending` of this thread's latest copy groups are
    /// still in flight (device; nothing on the host).
    fn cp_async_wait(&self, pending: u64) -> Result<(), CodegenError> {
        match self.mode {
            Mode::Device => self.asm_call(format!("cp.async.wait_group {pending};"), "", &[]),
            Mode::Host => Ok(()),
        }
    }

    /// The block-relative rows and columns of C this thread accumulates;
    /// accumulator `i · cols.len() + j` holds row `i`, column `j`. FMA: rows
    /// `ty·tm + i`, columns `tx + j·(bn/tn)`. Tensor cores: the m8n8k4 output
    /// fragment of each 8 × 8 piece of the warp's tile (row `lane / 4`, columns
    /// `2·(lane % 4) + {0, 1}`, PTX ISA "matrix fragments for mma.m8n8k4").
    /// Rows are [`Gen::row_of`] the thread's [`Gen::row_class`].
    fn thread_outputs(
        &self,
        cfg: &TileCfg,
        tid: IntValue<'ctx>,
    ) -> Result<(Vec<IntValue<'ctx>>, Vec<IntValue<'ctx>>), CodegenError> {
        let (mut rows, mut cols) = (Vec::new(), Vec::new());
        let y = self.row_class(cfg, tid)?;
        for i in 0..cfg.slots().0 {
            rows.push(self.row_of(cfg, y, self.i64c(i))?);
        }
        if cfg.mma {
            let (_, wn0, _, q) = self.warp_coords(cfg, tid)?;
            let col0 = self.b.build_int_add(wn0, self.b.build_int_mul(q, self.i64c(2), "q2")?, "c0")?;
            for j in 0..cfg.tn / MMA_N {
                for r in 0..2 {
                    cols.push(self.b.build_int_add(col0, self.i64c(j * MMA_N + r), "c")?);
                }
            }
        } else {
            let tx_n = cfg.bn / cfg.tn;
            let tx = self.b.build_int_unsigned_rem(tid, self.i64c(tx_n), "tx")?;
            for j in 0..cfg.tn {
                cols.push(self.b.build_int_add(tx, self.i64c(j * tx_n), "c")?);
            }
        }
        Ok((rows, cols))
    }

    /// A thread's row class `y < bm / slots`: the threads of one class hold
    /// the same rows. FMA: `ty = tid / (bn/tn)`; tensor cores: `8·wy + lane/4`.
    fn row_class(&self, cfg: &TileCfg, tid: IntValue<'ctx>) -> Result<IntValue<'ctx>, CodegenError> {
        if cfg.mma {
            let (wm0, _, g, _) = self.warp_coords(cfg, tid)?;
            let wy8 = self.b.build_int_mul(
                self.b.build_int_unsigned_div(wm0, self.i64c(cfg.tm), "wy")?,
                self.i64c(8),
                "wy8",
            )?;
            Ok(self.b.build_int_add(wy8, g, "y")?)
        } else {
            Ok(self.b.build_int_unsigned_div(tid, self.i64c(cfg.bn / cfg.tn), "ty")?)
        }
    }

    /// The block-relative row of accumulator row `i` of class `y`: FMA
    /// `y·tm + i`; tensor cores `(y/8)·tm + y%8 + 8·i` (warp row, fragment group,
    /// 8 × 8 piece).
    fn row_of(&self, cfg: &TileCfg, y: IntValue<'ctx>, i: IntValue<'ctx>) -> Result<IntValue<'ctx>, CodegenError> {
        let b = &self.b;
        if cfg.mma {
            let wm0 = b.build_int_mul(b.build_int_unsigned_div(y, self.i64c(8), "wy")?, self.i64c(cfg.tm), "wm0")?;
            let g = b.build_int_unsigned_rem(y, self.i64c(8), "g")?;
            let r = b.build_int_add(wm0, g, "r0")?;
            Ok(b.build_int_add(r, b.build_int_mul(i, self.i64c(MMA_M), "i8")?, "r")?)
        } else {
            Ok(b.build_int_add(b.build_int_mul(y, self.i64c(cfg.tm), "r0")?, i, "r")?)
        }
    }

    /// A tensor-core thread's warp tile origin (`wm0`, `wn0`, block-relative)
    /// and its fragment coordinates: group `lane / 4` and `lane % 4`.
    #[allow(clippy::type_complexity)]
    fn warp_coords(
        &self,
        cfg: &TileCfg,
        tid: IntValue<'ctx>,
    ) -> Result<(IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>), CodegenError> {
        let warp = self.b.build_int_unsigned_div(tid, self.i64c(WARP), "warp")?;
        let lane = self.b.build_int_unsigned_rem(tid, self.i64c(WARP), "lane")?;
        let wx_n = cfg.bn / cfg.tn;
        let wx = self.b.build_int_unsigned_rem(warp, self.i64c(wx_n), "wx")?;
        let wy = self.b.build_int_unsigned_div(warp, self.i64c(wx_n), "wy")?;
        Ok((
            self.b.build_int_mul(wy, self.i64c(cfg.tm), "wm0")?,
            self.b.build_int_mul(wx, self.i64c(cfg.tn), "wn0")?,
            self.b.build_int_unsigned_div(lane, self.i64c(4), "grp")?,
            self.b.build_int_unsigned_rem(lane, self.i64c(4), "qid")?,
        ))
    }

    /// One reduction step of a tensor-core tile: for each k = 4 slice of the
    /// step, each thread loads one element of A's fragment per 8-row piece
    /// (row `lane / 4`, k `lane % 4`) and one of B's per 8-column piece (k
    /// `lane % 4`, column `lane / 4`) from the shared tiles (`[k][m]`, `[k][n]`,
    /// offsets `base` of the current buffer, row lengths `ld`), and the warp
    /// multiplies every pair with `mma.sync.m8n8k4.f64`. On the host each thread
    /// computes its own two outputs of every piece from the shared tiles: the
    /// same sums, so the emulation checks the tiling and the output layout.
    #[allow(clippy::too_many_arguments)]
    fn mma_step(
        &mut self,
        cfg: &TileCfg,
        tid: IntValue<'ctx>,
        sh: [PointerValue<'ctx>; 2],
        base: [IntValue<'ctx>; 2],
        ld: [u64; 2],
        fmuladd: inkwell::values::FunctionValue<'ctx>,
        accs: &mut [FloatValue<'ctx>],
    ) -> Result<(), CodegenError> {
        let (wm0, wn0, g, q) = self.warp_coords(cfg, tid)?;
        let (pm, pn) = (cfg.tm / MMA_M, cfg.tn / MMA_N);
        let f64t = self.ctx.f64_type();
        let a0 = self.b.build_int_add(base[0], self.b.build_int_add(wm0, g, "a0")?, "a0")?;
        let b0 = self.b.build_int_add(base[1], self.b.build_int_add(wn0, g, "b0")?, "b0")?;
        let load =
            |s: &Self, arr: PointerValue<'ctx>, i: IntValue<'ctx>, c: u64| -> Result<FloatValue<'ctx>, CodegenError> {
                let ix = s.b.build_int_add(i, s.i64c(c), "ix")?;
                Ok(s.b.build_load(s.at(arr, ix)?, "f")?.into_float_value())
            };
        for k4 in (0..cfg.bk).step_by(MMA_K as usize) {
            match self.mode {
                Mode::Device => {
                    // This thread's k row of the slice: k4 + lane % 4.
                    let (qa, qb) = (
                        self.b.build_int_add(a0, self.b.build_int_mul(q, self.i64c(ld[0]), "qa")?, "qa")?,
                        self.b.build_int_add(b0, self.b.build_int_mul(q, self.i64c(ld[1]), "qb")?, "qb")?,
                    );
                    let mut af = Vec::new();
                    for i in 0..pm {
                        af.push(load(self, sh[0], qa, k4 * ld[0] + i * MMA_M)?);
                    }
                    let mut bf = Vec::new();
                    for j in 0..pn {
                        bf.push(load(self, sh[1], qb, k4 * ld[1] + j * MMA_N)?);
                    }
                    let ret = self.ctx.struct_type(&[f64t.into(), f64t.into()], false);
                    let fty = ret.fn_type(&[f64t.into(); 4], false);
                    let asm = self.ctx.create_inline_asm(
                        fty,
                        "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {$0, $1}, {$2}, {$3}, {$4, $5};".into(),
                        "=d,=d,d,d,d,d".into(),
                        true,
                        false,
                        None,
                        false,
                    );
                    for (i, a) in af.iter().enumerate() {
                        for (j, b) in bf.iter().enumerate() {
                            let e = i * 2 * pn as usize + 2 * j;
                            let callee = inkwell::values::CallableValue::try_from(asm)
                                .map_err(|_| err("internal: inline asm is not callable".to_string()))?;
                            let r = self
                                .b
                                .build_call(
                                    callee,
                                    &[(*a).into(), (*b).into(), accs[e].into(), accs[e + 1].into()],
                                    "mma",
                                )?
                                .try_as_basic_value()
                                .left()
                                .ok_or_else(|| err("internal: mma returned nothing".to_string()))?
                                .into_struct_value();
                            accs[e] = self.b.build_extract_value(r, 0, "d0")?.into_float_value();
                            accs[e + 1] = self.b.build_extract_value(r, 1, "d1")?.into_float_value();
                        }
                    }
                }
                Mode::Host => {
                    let q2 = self.b.build_int_mul(q, self.i64c(2), "q2")?;
                    let b1 = self.b.build_int_add(base[1], self.b.build_int_add(wn0, q2, "b1")?, "b1")?;
                    for kk in k4..k4 + MMA_K {
                        for i in 0..pm {
                            let a = load(self, sh[0], a0, kk * ld[0] + i * MMA_M)?;
                            for j in 0..pn {
                                for r in 0..2 {
                                    let b = load(self, sh[1], b1, kk * ld[1] + j * MMA_N + r)?;
                                    let e = (i * 2 * pn + 2 * j + r) as usize;
                                    accs[e] =
                                        self.call(fmuladd, &[a.into(), b.into(), accs[e].into()])?.into_float_value();
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn tiled_kernel(&mut self, k: &Kernel, t: &Tiled) -> Result<(), CodegenError> {
        let cfg = t.cfg;
        if !cfg.valid(k.elem) || k.ops.len() != 2 {
            return Err(err(format!(
                "internal: tiled kernel {} with tile {cfg:?} and {} operands",
                k.name,
                k.ops.len()
            )));
        }
        let i64t = self.ctx.i64_type();
        let ct = self.ft(k.elem);
        let nt = cfg.threads();
        let (f, first_ptr) = self.kernel_fn(k, 3);
        let ptr = |j: u32| f.get_nth_param(first_ptr + j).expect("ptr").into_pointer_value();
        let (pc, pa, pb) = (ptr(0), ptr(1), ptr(2));
        let (bx, by, bz, tid) = match self.mode {
            Mode::Host => {
                let p = |j: u32| f.get_nth_param(j).expect("block id").into_int_value();
                (p(0), p(1), p(2), self.i64c(0))
            }
            Mode::Device => (
                self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.x")?,
                self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.y")?,
                self.sreg("llvm.nvvm.read.ptx.sreg.ctaid.z")?,
                self.sreg("llvm.nvvm.read.ptx.sreg.tid.x")?,
            ),
        };
        let [_, m_tot, n_tot, k_tot] = t.sizes();
        let pad = cfg.pad(k.elem);
        let (lda, ldb) = (cfg.bm + pad, cfg.bn + pad);
        let (a_len, b_len) = (cfg.bk * lda, cfg.bk * ldb);
        let b_off = cfg.b_offset(k.elem);
        let staged = t.epilogue.is_staged();
        let stage = cfg.stage_for(k.elem, t.epilogue);
        // One shared array: A's two buffers, then B's; a staged epilogue reuses it.
        let sh_len = if staged { stage.elems } else { cfg.operand_elems(k.elem) };
        let sh = self.block_array(&format!("{}_sh", k.name), ct.into(), sh_len);
        let per = cfg.per_thread();
        let slot_at = |g: &Self, arr: PointerValue<'ctx>, len: u64, tid: IntValue<'ctx>, e: u64| match g.mode {
            Mode::Device => g.at(arr, g.i64c(e)),
            Mode::Host => g.at(arr, g.b.build_int_add(g.b.build_int_mul(tid, g.i64c(len), "t")?, g.i64c(e), "e")?),
        };
        // Per-thread state that lives across barriers: registers on the device
        // (an array indexed by constants), one row per thread on the host.
        let acc = match self.mode {
            Mode::Device => self.b.build_alloca(ct.array_type(per as u32), "acc")?,
            Mode::Host => self.block_array(&format!("{}_acc", k.name), ct.into(), nt * per),
        };
        let acc_at = |g: &Self, tid: IntValue<'ctx>, e: u64| slot_at(g, acc, per, tid, e);
        // The operand offset of each row (m or n) this thread loads, computed
        // once: only the k part changes from step to step.
        let (slots_a, slots_b) = (cfg.bm * cfg.bk / nt, cfg.bn * cfg.bk / nt);
        let nslot = slots_a + slots_b;
        let ro = match self.mode {
            Mode::Device => self.b.build_alloca(i64t.array_type(nslot as u32), "ro")?,
            Mode::Host => self.block_array(&format!("{}_ro", k.name), i64t.into(), nt * nslot),
        };
        let ro_at = |g: &Self, tid: IntValue<'ctx>, e: u64| slot_at(g, ro, nslot, tid, e);
        // A staged epilogue's offsets in C of the block's rows (`off_c` included)
        // and columns: `bm + bn` entries computed once per block.
        let tab = staged.then(|| self.block_array(&format!("{}_tab", k.name), i64t.into(), cfg.bm + cfg.bn));
        let [off_c, off_a, off_b] = self.group_offsets(&t.batch, bz)?;
        let m0 = self.b.build_int_mul(by, self.i64c(cfg.bm), "m0")?;
        let n0 = self.b.build_int_mul(bx, self.i64c(cfg.bn), "n0")?;
        let zero = ct.const_zero();

        // The loads of one operand: (is A, its slots, rows per tile, first row,
        // rows in all, k fast, batch offset, pointer, operand, row group, row length).
        type Side<'s, 'c> = (bool, u64, u64, IntValue<'c>, u64, bool, IntValue<'c>, PointerValue<'c>, &'s [Dim], u64);
        let sides: [Side; 2] = [
            (true, slots_a, cfg.bm, m0, m_tot, t.a_kfast, off_a, pa, &t.m, lda),
            (false, slots_b, cfg.bn, n0, n_tot, t.b_kfast, off_b, pb, &t.n, ldb),
        ];
        // Slot `j` of a thread: element `tid + j·nt` of the tile, as (row, k).
        let rc = |g: &Self, tid: IntValue<'ctx>, j: u64, rows: u64, kfast: bool| {
            let e = g.b.build_int_add(tid, g.i64c(j * nt), "e")?;
            Ok::<_, CodegenError>(if kfast {
                (
                    g.b.build_int_unsigned_div(e, g.i64c(cfg.bk), "r")?,
                    g.b.build_int_unsigned_rem(e, g.i64c(cfg.bk), "c")?,
                )
            } else {
                (g.b.build_int_unsigned_rem(e, g.i64c(rows), "r")?, g.b.build_int_unsigned_div(e, g.i64c(rows), "c")?)
            })
        };
        // k offsets of element `k0 + c` from those of `k0` (a multiple of bk):
        // exact when the k group has one dimension, or its innermost one a
        // length that bk divides (no carry out of it within a step).
        let k_incremental = t.k.len() <= 1 || t.k.last().is_some_and(|d| d.size.is_multiple_of(cfg.bk));

        // This thread's share of the A and B tiles of the step at `k0`, slot by
        // slot: (shared index within a buffer, element address, inside the sizes).
        // Outside the sizes the address is the operand's first element.
        let addrs = |g: &mut Self,
                     tid: IntValue<'ctx>,
                     k0: IntValue<'ctx>|
         -> Result<Vec<(IntValue<'ctx>, PointerValue<'ctx>, IntValue<'ctx>)>, CodegenError> {
            let mut out = Vec::new();
            let kb = g.group_offsets(&t.k, k0)?;
            let mut slot = 0;
            for &(is_a, slots, rows, row0, rows_tot, kfast, base, src, _, ld) in &sides {
                let which = if is_a { 1 } else { 2 };
                for j in 0..slots {
                    let (r, c) = rc(g, tid, j, rows, kfast)?;
                    let row = g.b.build_int_add(row0, r, "row")?;
                    let kk = g.b.build_int_add(k0, c, "kk")?;
                    let ok_r = g.b.build_int_compare(IntPredicate::ULT, row, g.i64c(rows_tot), "okr")?;
                    let ok_k = g.b.build_int_compare(IntPredicate::ULT, kk, g.i64c(k_tot), "okk")?;
                    let ok = g.b.build_and(ok_r, ok_k, "ok")?;
                    let ko = match t.k.last() {
                        Some(d) if k_incremental => g.add_scaled(kb[which], c, [d.c, d.a, d.b][which])?,
                        _ => g.group_offsets(&t.k, kk)?[which],
                    };
                    let rov = g.b.build_load(ro_at(g, tid, slot)?, "ro")?.into_int_value();
                    slot += 1;
                    let off = g.b.build_int_add(base, g.b.build_int_add(rov, ko, "o")?, "o")?;
                    let off = g.b.build_select(ok, off, g.i64c(0), "off")?.into_int_value();
                    // SAFETY: a valid offset, or 0 (the operand's first element).
                    let p = unsafe { g.b.build_in_bounds_gep(src, &[off], "p")? };
                    let si = g.b.build_int_add(g.b.build_int_mul(c, g.i64c(ld), "s")?, r, "si")?;
                    let si = if is_a { si } else { g.b.build_int_add(si, g.i64c(b_off), "sb")? };
                    out.push((si, p, ok));
                }
            }
            Ok(out)
        };
        // Slot `s`'s operand, and its value at `p` in the arithmetic type (0 where not `ok`).
        let op_of = |s: usize| if (s as u64) < slots_a { &k.ops[0] } else { &k.ops[1] };
        let value = |g: &mut Self, s: usize, p: PointerValue<'ctx>, ok: IntValue<'ctx>| {
            let v = g.load_as(p, op_of(s).elem, ct)?;
            let v = g.apply_operand_func(op_of(s), v)?;
            Ok::<_, CodegenError>(g.b.build_select(ok, v, zero, "v")?.into_float_value())
        };
        // Loads this thread's share of the tiles of the step at `k0` into
        // registers: (shared index, value) pairs.
        let load = |g: &mut Self,
                    tid: IntValue<'ctx>,
                    k0: IntValue<'ctx>|
         -> Result<Vec<(IntValue<'ctx>, FloatValue<'ctx>)>, CodegenError> {
            let mut out = Vec::new();
            for (s, (si, p, ok)) in addrs(g, tid, k0)?.into_iter().enumerate() {
                out.push((si, value(g, s, p, ok)?));
            }
            Ok(out)
        };
        // Shared index of slot `s`'s element `si` in buffer `buf`.
        let in_buf = |g: &Self, s: usize, si: IntValue<'ctx>, buf: IntValue<'ctx>| {
            let len = if (s as u64) < slots_a { a_len } else { b_len };
            g.b.build_int_add(g.b.build_int_mul(buf, g.i64c(len), "bo")?, si, "i")
        };
        // Into buffer `buf` of the shared array (A's and B's indices apart).
        let store = |g: &Self, vals: &[(IntValue<'ctx>, FloatValue<'ctx>)], buf: IntValue<'ctx>| {
            for (s, &(si, v)) in vals.iter().enumerate() {
                g.b.build_store(g.at(sh, in_buf(g, s, si, buf)?)?, v)?;
            }
            Ok::<_, CodegenError>(())
        };
        // The ring ([`TileCfg::stages`] >= 3): this thread's share of the step
        // at `k0` straight into buffer `buf`. On the device an operand read as
        // it is stored (no conversion, no function) goes by `cp.async`, 0 where
        // outside the sizes (source size 0); others, and the host, load and store.
        let fill = |g: &mut Self, tid: IntValue<'ctx>, k0: IntValue<'ctx>, buf: IntValue<'ctx>| {
            for (s, (si, p, ok)) in addrs(g, tid, k0)?.into_iter().enumerate() {
                let dst = g.at(sh, in_buf(g, s, si, buf)?)?;
                let op = op_of(s);
                // Only f64/f32 are stored as they are computed (16-bit
                // operands widen to f32, and cp.async moves 4 bytes or more).
                let raw = op.elem == k.elem && matches!(k.elem, Elem::F64 | Elem::F32) && op.func.is_none();
                if g.mode == Mode::Device && raw {
                    g.cp_async(dst, p, ok, k.elem.bytes() as u64)?;
                } else {
                    let v = value(g, s, p, ok)?;
                    g.b.build_store(dst, v)?;
                }
            }
            Ok::<_, CodegenError>(())
        };
        let tx_n = cfg.bn / cfg.tn;
        let txy = |g: &Self, tid: IntValue<'ctx>| -> Result<(IntValue<'ctx>, IntValue<'ctx>), CodegenError> {
            Ok((
                g.b.build_int_unsigned_rem(tid, g.i64c(tx_n), "tx")?,
                g.b.build_int_unsigned_div(tid, g.i64c(tx_n), "ty")?,
            ))
        };

        // With a ring of cp.async buffers instead of the register double buffer.
        let ring = cfg.stages >= 3;
        let steps = k_tot.div_ceil(cfg.bk);
        // Accumulators to 0, the loads' row offsets, the staged epilogue's
        // offset tables, the first step's tiles into buffer 0 (the ring: the
        // first stages - 1 steps' tiles into buffers 0, 1, ...).
        self.per_thread(tid, nt, &mut |g, tid| {
            for e in 0..per {
                g.b.build_store(acc_at(g, tid, e)?, zero)?;
            }
            let mut slot = 0;
            for &(is_a, slots, rows, row0, _, kfast, _, _, group, _) in &sides {
                for j in 0..slots {
                    let (r, _) = rc(g, tid, j, rows, kfast)?;
                    let row = g.b.build_int_add(row0, r, "row")?;
                    let o = g.group_offsets(group, row)?[if is_a { 1 } else { 2 }];
                    g.b.build_store(ro_at(g, tid, slot)?, o)?;
                    slot += 1;
                }
            }
            if let Some(tab) = tab {
                let len = cfg.bm + cfg.bn;
                for u in 0..len.div_ceil(nt) {
                    let x = g.b.build_int_add(tid, g.i64c(u * nt), "x")?;
                    let inside = g.b.build_int_compare(IntPredicate::ULT, x, g.i64c(len), "in")?;
                    g.if_then(inside, (u + 1) * nt > len, &mut |g| {
                        let is_row = g.b.build_int_compare(IntPredicate::ULT, x, g.i64c(cfg.bm), "isr")?;
                        let row = g.b.build_int_add(m0, x, "row")?;
                        let ro = g.b.build_int_add(off_c, g.group_offsets(&t.m, row)?[0], "ro")?;
                        let col = g.b.build_int_sub(g.b.build_int_add(n0, x, "x")?, g.i64c(cfg.bm), "col")?;
                        let co = g.group_offsets(&t.n, col)?[0];
                        let o = g.b.build_select(is_row, ro, co, "o")?;
                        g.b.build_store(g.at(tab, x)?, o)?;
                        Ok(())
                    })?;
                }
            }
            if ring {
                // Steps 0 .. stages - 1 in flight, one copy group each (empty
                // past the last step, so that the waits below count right).
                for s in 0..cfg.stages - 1 {
                    if s < steps {
                        fill(g, tid, g.i64c(s * cfg.bk), g.i64c(s))?;
                    }
                    g.cp_async_commit()?;
                }
                Ok(())
            } else {
                let vals = load(g, tid, g.i64c(0))?;
                store(g, &vals, g.i64c(0))
            }
        })?;
        self.barrier()?;
        let fmuladd = self.intrinsic("llvm.fmuladd", &[ct.into()])?;
        self.for_range(self.i64c(0), self.i64c(steps), &mut |g, kt| {
            let (cur, next) = if ring {
                // Step kt's group has landed (this thread's copies), and after
                // the barrier everyone's; every thread is also done with step
                // kt - 1, whose buffer the fill below takes.
                g.cp_async_wait(cfg.stages - 2)?;
                g.barrier()?;
                let cur = g.b.build_int_unsigned_rem(kt, g.i64c(cfg.stages), "cur")?;
                (cur, cur)
            } else {
                let cur = g.b.build_and(kt, g.i64c(1), "cur")?;
                (cur, g.b.build_xor(cur, g.i64c(1), "next")?)
            };
            let k1 = g.b.build_int_mul(g.b.build_int_add(kt, g.i64c(1), "kt1")?, g.i64c(cfg.bk), "k1")?;
            g.per_thread(tid, nt, &mut |g, tid| {
                let vals = if ring {
                    let ahead = g.b.build_int_add(kt, g.i64c(cfg.stages - 1), "ahead")?;
                    let more = g.b.build_int_compare(IntPredicate::ULT, ahead, g.i64c(steps), "more")?;
                    g.if_then(more, true, &mut |g| {
                        let buf = g.b.build_int_unsigned_rem(ahead, g.i64c(cfg.stages), "buf")?;
                        fill(g, tid, g.b.build_int_mul(ahead, g.i64c(cfg.bk), "k0")?, buf)
                    })?;
                    g.cp_async_commit()?;
                    Vec::new()
                } else {
                    load(g, tid, k1)?
                };
                let mut accs = Vec::with_capacity(per as usize);
                for e in 0..per {
                    accs.push(g.b.build_load(acc_at(g, tid, e)?, "acc")?.into_float_value());
                }
                let ab = g.b.build_int_mul(cur, g.i64c(a_len), "ab")?;
                let bb = g.b.build_int_add(g.b.build_int_mul(cur, g.i64c(b_len), "bb")?, g.i64c(b_off), "bb")?;
                if cfg.mma {
                    g.mma_step(&cfg, tid, [sh, sh], [ab, bb], [lda, ldb], fmuladd, &mut accs)?;
                } else {
                    let (tx, ty) = txy(g, tid)?;
                    let abase = g.b.build_int_add(ab, g.b.build_int_mul(ty, g.i64c(cfg.tm), "ar")?, "ab")?;
                    let bbase = g.b.build_int_add(bb, tx, "bb")?;
                    for kk in 0..cfg.bk {
                        let mut av = Vec::new();
                        for i in 0..cfg.tm {
                            let ix = g.b.build_int_add(abase, g.i64c(kk * lda + i), "ai")?;
                            av.push(g.b.build_load(g.at(sh, ix)?, "a")?.into_float_value());
                        }
                        let mut bv = Vec::new();
                        for j in 0..cfg.tn {
                            let ix = g.b.build_int_add(bbase, g.i64c(kk * ldb + j * tx_n), "bi")?;
                            bv.push(g.b.build_load(g.at(sh, ix)?, "b")?.into_float_value());
                        }
                        for (i, a) in av.iter().enumerate() {
                            for (j, b) in bv.iter().enumerate() {
                                let e = i * bv.len() + j;
                                accs[e] =
                                    g.call(fmuladd, &[(*a).into(), (*b).into(), accs[e].into()])?.into_float_value();
                            }
                        }
                    }
                }
                for (e, v) in accs.into_iter().enumerate() {
                    g.b.build_store(acc_at(g, tid, e as u64)?, v)?;
                }
                store(g, &vals, next)
            })?;
            if ring {
                Ok(())
            } else {
                g.barrier()
            }
        })?;
        if ring {
            // No copy is left in flight (the last fills were waited for), and
            // every thread is done with the last buffer before a staged
            // epilogue reuses the space.
            self.cp_async_wait(0)?;
            self.barrier()?;
        }

        // C += coef · acc inside the sizes.
        let done = self.ctx.append_basic_block(f, "done");
        // Scales an accumulated value and adds what C holds unless storing.
        let finish = |g: &Self, v: FloatValue<'ctx>, old: Option<FloatValue<'ctx>>| {
            let v = if k.coef == 1.0 { v } else { g.b.build_float_mul(v, ct.const_float(k.coef), "v")? };
            Ok::<_, CodegenError>(match old {
                Some(o) => g.b.build_float_add(o, v, "new")?,
                None => v,
            })
        };
        if let Some(tab) = tab {
            self.staged_epilogue(k, t, tid, sh, tab, acc_at, &finish, [m0, n0], pc)?;
        } else {
            self.per_thread(tid, nt, &mut |g, tid| {
                let (rows, cols_in) = g.thread_outputs(&cfg, tid)?;
                let mut cols = Vec::new();
                for c in cols_in {
                    let col = g.b.build_int_add(n0, c, "col")?;
                    let ok = g.b.build_int_compare(IntPredicate::ULT, col, g.i64c(n_tot), "okc")?;
                    cols.push((ok, g.group_offsets(&t.n, col)?[0]));
                }
                let ncols = cols.len() as u64;
                for (i, r) in rows.into_iter().enumerate() {
                    let i = i as u64;
                    let row = g.b.build_int_add(m0, r, "row")?;
                    let ok_r = g.b.build_int_compare(IntPredicate::ULT, row, g.i64c(m_tot), "okr")?;
                    let ro = g.b.build_int_add(off_c, g.group_offsets(&t.m, row)?[0], "ro")?;
                    for (j, &(ok_c, co)) in cols.iter().enumerate() {
                        g.if_then(g.b.build_and(ok_r, ok_c, "ok")?, true, &mut |g| {
                            let v = g.b.build_load(acc_at(g, tid, i * ncols + j as u64)?, "acc")?.into_float_value();
                            // SAFETY: row and column inside the sizes.
                            let p = unsafe { g.b.build_in_bounds_gep(pc, &[g.b.build_int_add(ro, co, "o")?], "pc")? };
                            // A storing kernel's target was not cleared: every element is written once.
                            let old = if k.store { None } else { Some(g.load_as(p, k.out_elem(), ct)?) };
                            g.store_as(p, finish(g, v, old)?, k.out_elem())
                        })?;
                    }
                }
                Ok(())
            })?;
        }
        self.b.build_unconditional_branch(done)?;
        self.b.position_at_end(done);
        if let (Some(n), Mode::Device) = (t.min_blocks, self.mode) {
            self.annotate(f, "minctasm", n)?;
        }
        self.end_block_kernel(f, nt)
    }

    /// Returns from a [`Gen::kernel_fn`] function of a block kernel and marks it a kernel of
    /// `nt` threads per block (so that ptxas may give each thread up to 65536/nt
    /// registers).
    pub(super) fn end_block_kernel(&mut self, f: FunctionValue<'ctx>, nt: u64) -> Result<(), CodegenError> {
        self.b.build_return(None)?;
        if self.mode == Mode::Device {
            self.annotate(f, "kernel", 1)?;
            self.annotate(f, "maxntidx", nt)?;
        }
        self.func = None;
        Ok(())
    }

    /// `body` where `cond` holds (`guard` false: always, no branch).
    pub(super) fn if_then(
        &mut self,
        cond: IntValue<'ctx>,
        guard: bool,
        body: &mut dyn FnMut(&mut Self) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        if !guard {
            return body(self);
        }
        let fun = self.func.expect("in a function");
        let yes = self.ctx.append_basic_block(fun, "then");
        let after = self.ctx.append_basic_block(fun, "then.after");
        self.b.build_conditional_branch(cond, yes, after)?;
        self.b.position_at_end(yes);
        body(self)?;
        self.b.build_unconditional_branch(after)?;
        self.b.position_at_end(after);
        Ok(())
    }

    /// The staged epilogue ([`Epilogue::Staged`]). In passes of `per_pass`
    /// accumulator rows: every thread writes those rows of its accumulators to
    /// the shared array (stage row `(i − i0)·rows + y` for accumulator row `i`
    /// of row class `y`, [`Gen::row_of`]); after a barrier, unit `u` of the
    /// pass (`vec` consecutive columns of one stage row) goes to thread
    /// `u mod nt`, so consecutive threads store consecutive columns of C, at
    /// the offsets of the block's tables (`tab`: rows, then columns).
    #[allow(clippy::too_many_arguments)]
    fn staged_epilogue(
        &mut self,
        k: &Kernel,
        t: &Tiled,
        tid: IntValue<'ctx>,
        sh: PointerValue<'ctx>,
        tab: PointerValue<'ctx>,
        acc_at: impl Fn(&Self, IntValue<'ctx>, u64) -> Result<PointerValue<'ctx>, CodegenError>,
        finish: &Finish<'_, Self, FloatValue<'ctx>>,
        [m0, n0]: [IntValue<'ctx>; 2],
        pc: PointerValue<'ctx>,
    ) -> Result<(), CodegenError> {
        let cfg = t.cfg;
        let nt = cfg.threads();
        let [_, m_tot, n_tot, _] = t.sizes();
        let ct = self.ft(k.elem);
        let Stage { ld, rows: yn, per_pass, .. } = cfg.stage_for(k.elem, t.epilogue);
        let (slots, ncols) = cfg.slots();
        let v = t.vec;
        for p in 0..slots.div_ceil(per_pass) {
            let (i0, i1) = (p * per_pass, ((p + 1) * per_pass).min(slots));
            if p > 0 {
                // The previous pass has read the stage (the k loop ended with a barrier).
                self.barrier()?;
            }
            self.per_thread(tid, nt, &mut |g, tid| {
                let (_, cols) = g.thread_outputs(&cfg, tid)?;
                let y = g.row_class(&cfg, tid)?;
                for i in i0..i1 {
                    let sr = g.b.build_int_add(y, g.i64c((i - i0) * yn), "sr")?;
                    let base = g.b.build_int_mul(sr, g.i64c(ld), "sb")?;
                    for (j, &col) in cols.iter().enumerate() {
                        let a = g.b.build_load(acc_at(g, tid, i * ncols + j as u64)?, "acc")?;
                        g.b.build_store(g.at(sh, g.b.build_int_add(base, col, "si")?)?, a)?;
                    }
                }
                Ok(())
            })?;
            self.barrier()?;
            let units = (i1 - i0) * yn * cfg.bn / v;
            self.per_thread(tid, nt, &mut |g, tid| {
                // Where `nt · v` is a multiple of the block's width every unit
                // of this thread has the same column: its table entry is read
                // once, not once per unit (ncu: the per-unit reads were an
                // eighth of the triples kernel's shared-memory wavefronts).
                let fixed = if (nt * v).is_multiple_of(cfg.bn) {
                    let sc =
                        g.b.build_int_unsigned_rem(g.b.build_int_mul(tid, g.i64c(v), "tv")?, g.i64c(cfg.bn), "sc")?;
                    let co = g.b.build_load(g.at(tab, g.b.build_int_add(sc, g.i64c(cfg.bm), "ci")?)?, "co")?;
                    Some((sc, co.into_int_value()))
                } else {
                    None
                };
                for u in 0..units.div_ceil(nt) {
                    let e = g.b.build_int_add(tid, g.i64c(u * nt), "u")?;
                    let inside = g.b.build_int_compare(IntPredicate::ULT, e, g.i64c(units), "in")?;
                    g.if_then(inside, (u + 1) * nt > units, &mut |g| {
                        let ev = g.b.build_int_mul(e, g.i64c(v), "ev")?;
                        let sr = g.b.build_int_unsigned_div(ev, g.i64c(cfg.bn), "sr")?;
                        let sc = match fixed {
                            Some((sc, _)) => sc,
                            None => g.b.build_int_unsigned_rem(ev, g.i64c(cfg.bn), "sc")?,
                        };
                        let i =
                            g.b.build_int_add(g.i64c(i0), g.b.build_int_unsigned_div(sr, g.i64c(yn), "di")?, "i")?;
                        let y = g.b.build_int_unsigned_rem(sr, g.i64c(yn), "y")?;
                        let row = g.row_of(&cfg, y, i)?;
                        let ok_r = g.b.build_int_compare(
                            IntPredicate::ULT,
                            g.b.build_int_add(m0, row, "row")?,
                            g.i64c(m_tot),
                            "okr",
                        )?;
                        let ok_c = g.b.build_int_compare(
                            IntPredicate::ULT,
                            g.b.build_int_add(n0, sc, "col")?,
                            g.i64c(n_tot),
                            "okc",
                        )?;
                        g.if_then(g.b.build_and(ok_r, ok_c, "ok")?, true, &mut |g| {
                            let ro = g.b.build_load(g.at(tab, row)?, "ro")?.into_int_value();
                            let co = match fixed {
                                Some((_, co)) => co,
                                None => {
                                    let ci = g.b.build_int_add(sc, g.i64c(cfg.bm), "ci")?;
                                    g.b.build_load(g.at(tab, ci)?, "co")?.into_int_value()
                                }
                            };
                            let off = g.b.build_int_add(ro, co, "o")?;
                            // SAFETY: row and columns inside the sizes.
                            let p = unsafe { g.b.build_in_bounds_gep(pc, &[off], "pc")? };
                            let si = g.b.build_int_add(g.b.build_int_mul(sr, g.i64c(ld), "s")?, sc, "si")?;
                            let mut vals = Vec::new();
                            for q in 0..v {
                                let ix = g.b.build_int_add(si, g.i64c(q), "sq")?;
                                vals.push(g.b.build_load(g.at(sh, ix)?, "st")?.into_float_value());
                            }
                            if v == 1 {
                                let old = if k.store { None } else { Some(g.load_as(p, k.out_elem(), ct)?) };
                                return g.store_as(p, finish(g, vals[0], old)?, k.out_elem());
                            }
                            g.store_vector(p, ct, &vals, t.stream_stores, k.store, finish)
                        })
                    })?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// `vals` (f32/f64, the output's type) to `p`, `p[1]`, ... as one 16-byte
    /// store (plus a 16-byte load of C unless `store`; evict-first with
    /// `evict_first`, on the device). The planner proved `p`
    /// aligned; the host emulation counts any address that is not (the global
    /// [`misaligned_global`]), where its store assumes only the element's alignment.
    fn store_vector(
        &mut self,
        p: PointerValue<'ctx>,
        ct: inkwell::types::FloatType<'ctx>,
        vals: &[FloatValue<'ctx>],
        evict_first: bool,
        store: bool,
        finish: &Finish<'_, Self, FloatValue<'ctx>>,
    ) -> Result<(), CodegenError> {
        let vt = ct.vec_type(vals.len() as u32);
        let vp = self.b.build_pointer_cast(p, vt.ptr_type(self.addr_space()), "vp")?;
        let ebytes = if ct == self.ctx.f64_type() { 8 } else { 4 };
        let align = self.vector_alignment(p, 16, ebytes)?;
        let old = if store {
            None
        } else {
            let l = self.b.build_load(vp, "old")?.into_vector_value();
            l.as_instruction_value().expect("a load").set_alignment(align).map_err(|e| err(e.to_string()))?;
            Some(l)
        };
        let mut done = Vec::with_capacity(vals.len());
        for (q, &x) in vals.iter().enumerate() {
            let qi = self.ctx.i32_type().const_int(q as u64, false);
            let o = match old {
                Some(o) => Some(self.b.build_extract_element(o, qi, "o")?.into_float_value()),
                None => None,
            };
            done.push(finish(self, x, o)?);
        }
        if evict_first && self.mode == Mode::Device {
            // Evict-first: C is written once (GpuOptions::stream_stores).
            let (ty, reg) = if ebytes == 8 { ("f64", "d") } else { ("f32", "f") };
            let n = done.len();
            let regs: Vec<String> = (1..=n).map(|q| format!("${q}")).collect();
            let text = format!("st.global.cs.v{n}.{ty} [$0], {{{}}};", regs.join(","));
            let cons = std::iter::once("l").chain(std::iter::repeat_n(reg, n)).collect::<Vec<_>>().join(",");
            let p64 = self.b.build_ptr_to_int(p, self.ctx.i64_type(), "p")?;
            let args: Vec<inkwell::values::BasicValueEnum<'ctx>> =
                std::iter::once(p64.into()).chain(done.iter().map(|&x| x.into())).collect();
            return self.asm_call(text, &cons, &args);
        }
        let mut out = vt.get_undef();
        for (q, &x) in done.iter().enumerate() {
            out = self.b.build_insert_element(out, x, self.ctx.i32_type().const_int(q as u64, false), "w")?;
        }
        let st = self.b.build_store(vp, out)?;
        st.set_alignment(align).map_err(|e| err(e.to_string()))?;
        Ok(())
    }
}

/// Scales an accumulated value by the kernel's coefficient and adds C's old
/// value when given (a kernel that accumulates into C).
type Finish<'f, G, V> = dyn Fn(&G, V, Option<V>) -> Result<V, CodegenError> + 'f;

/// The host emulation's count of vector stores of kernel `kernel` whose
/// address was not 16-byte aligned (an external i64 global; it must stay 0).
pub(super) fn misaligned_global(kernel: &str) -> String {
    format!("{kernel}_misaligned")
}
