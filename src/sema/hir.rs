//! HIR: the checked program. Every name is resolved to an id, every range has a
//! size, every tensor a shape and element type, and every statement is known to be
//! well-formed — later passes (interpreter, optimizer, planner, code generators)
//! may rely on that without re-checking.
//!
//! Einstein convention, scoped: in a term, an index that is not in the term's result
//! (the left-hand side, or the `free` list of a sub-expression) is summed over. A
//! function call or a parenthesised sum is a factor whose value is a tensor over its
//! `free` indices; indices used only inside it are summed inside it.

pub use crate::ids::{GridId, IdVec, IndexId, ModelId, RangeId, TensorId, UnitId};
pub use crate::syntax::ast::CmpOp;
use crate::syntax::Span;

/// A range of index values. `size` is the size every pass uses; for a range whose
/// size is given at run time (`range O;`) it is an *assumed* size, good for costs,
/// plans and the choice of fast paths but never for values: a command that computes
/// values first fixes every such range with `sema::sizes::bind_sizes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    pub name: String,
    pub size: usize,
    pub span: Span,
    /// `Some` for a `dims` entry of a model (visible only inside it).
    pub model: Option<ModelId>,
    /// Whether `size` is the range's size or an assumption about a run-time size.
    pub size_kind: SizeKind,
    /// How tiled storage cuts the range (`tile 40`, `spin(100, 100)`, `irreps(…)`).
    pub tiling: Tiling,
    /// `range P = O + V;`: the ranges `P` is the union of, in order (`O`'s values
    /// first, then `V`'s); empty for a plain range. An index over a part may index
    /// a dimension over the union: it then names a slice ([`Hir::offset_in`]).
    pub parts: Vec<RangeId>,
}

/// How a range is cut into tiles for tiled storage and execution: `range V = 200
/// tile 40 spin(100, 100);`. Tiles never straddle two sub-spaces.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tiling {
    /// The tile size the user asked for; `None`: the compiler chooses.
    pub tile: Option<usize>,
    /// Labelled sub-spaces: consecutive blocks of the range, sizes summing to its size.
    pub subspaces: Option<Subspaces>,
}

/// A range split into consecutive labelled blocks (label = position in `sizes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subspaces {
    pub kind: SubspaceKind,
    pub sizes: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubspaceKind {
    /// `spin(nα, nβ)`: label 0 is α, 1 is β (spin-orbital codes, TCE's spin blocks).
    Spin,
    /// `irreps(n0, n1, …)`: up to 8 irreducible representations of an abelian point
    /// group (D2h and its subgroups), whose product is the XOR of the labels.
    Irrep,
}

impl Range {
    /// `range O;` not yet bound: its size is a run-time parameter.
    pub fn is_runtime(&self) -> bool {
        matches!(self.size_kind, SizeKind::Runtime(_))
    }
}

/// Whether a range's size is part of the program or a parameter given when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SizeKind {
    /// `range O = 40;`, a model's `dims` entry, or a run-time range bound to a size
    /// by `sema::sizes::bind_sizes`: `Range::size` is the size.
    #[default]
    Fixed,
    /// `range O;`: the size is given at run time; `Range::size` is an assumption.
    Runtime(Assumed),
}

/// Where the assumed size of a run-time range comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Assumed {
    /// Nobody said: `sema::sizes::DEFAULT_ASSUMED_SIZE`.
    Default,
    /// `--assume NAME=SIZE` (`sema::sizes::assume_sizes`).
    Given,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    pub name: String,
    pub range: RangeId,
    pub span: Span,
    pub model: Option<ModelId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Input,
    Output,
    Temporary,
    /// Model weights: inputs as far as the interpreter is concerned.
    Param,
}

impl Role {
    /// Inputs and parameters are read, never written.
    pub fn is_read_only(self) -> bool {
        matches!(self, Role::Input | Role::Param)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    F32,
    F64,
    /// Complex of two `f32` (numpy `complex64`); lowered to pairs of `f32` tensors
    /// by [`crate::tir::complex`] before the optimizer.
    C64,
    /// Complex of two `f64` (numpy `complex128`, C `double _Complex`).
    C128,
    /// bfloat16 storage (see [`crate::half`]): read as `f32`, computed in `f32`,
    /// rounded to nearest even when stored.
    BF16,
    /// IEEE half storage (numpy `float16`), computed in `f32` like [`ElemType::BF16`].
    F16,
}

impl ElemType {
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
            ElemType::C64 => "c64",
            ElemType::C128 => "c128",
            ElemType::BF16 => "bf16",
            ElemType::F16 => "f16",
        }
    }
    pub fn size_bytes(self) -> usize {
        match self {
            ElemType::F32 => 4,
            ElemType::F64 => 8,
            ElemType::C64 => 8,
            ElemType::C128 => 16,
            ElemType::BF16 | ElemType::F16 => 2,
        }
    }
    /// Whether this is a 16-bit storage type (`bf16`, `f16`).
    pub fn is_half(self) -> bool {
        matches!(self, ElemType::BF16 | ElemType::F16)
    }
    /// The type a value of this type is computed in: `f32` for the 16-bit storage
    /// types, the type itself (its real part for complex) otherwise.
    pub fn compute(self) -> ElemType {
        match self {
            ElemType::BF16 | ElemType::F16 => ElemType::F32,
            e => e.real_part(),
        }
    }
    pub fn is_complex(self) -> bool {
        matches!(self, ElemType::C64 | ElemType::C128)
    }
    /// The type of each of a complex element's two parts (a real type itself).
    pub fn real_part(self) -> ElemType {
        match self {
            ElemType::F32 | ElemType::C64 => ElemType::F32,
            ElemType::F64 | ElemType::C128 => ElemType::F64,
            // Not complex: a 16-bit type is its own (real) part.
            ElemType::BF16 | ElemType::F16 => self,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymKind {
    Symmetric,
    Antisymmetric,
}

/// A group of tensor dimensions (by position, ≥ 2, all of one range) under which the
/// tensor is symmetric (value unchanged by permuting them) or antisymmetric (sign of
/// the permutation; zero when two of them are equal).
#[derive(Debug, Clone, PartialEq)]
pub struct SymGroup {
    pub kind: SymKind,
    pub positions: Vec<usize>,
}

/// A symmetry exchanging `members` (each a list of dimension positions, all of one
/// length, with the same ranges in the same order) as wholes; the sign of an
/// antisymmetric one is the parity of the permutation of members.
#[derive(Debug, Clone, PartialEq)]
pub struct PairGroup {
    pub kind: SymKind,
    pub members: Vec<Vec<usize>>,
}

/// A rule saying which elements of a tensor may be nonzero; elsewhere the tensor is
/// zero by declaration (and tiled storage keeps nothing).
#[derive(Debug, Clone, PartialEq)]
pub enum BlockRule {
    /// `spin(a b | c d)`: as many α indices among `upper` as among `lower` (every
    /// position must be over a range with `spin` sub-spaces).
    Spin { upper: Vec<usize>, lower: Vec<usize> },
    /// `irrep(p q r s)`: the product of the irreps of `positions` is totally
    /// symmetric (XOR of the labels is 0).
    Irrep { positions: Vec<usize> },
    /// `tiles[[0,1], [1,0]]`: only these tiles (tile coordinates per dimension under
    /// the ranges' tilings) are nonzero.
    Tiles(Vec<Vec<usize>>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub role: Role,
    pub elem: ElemType,
    /// The range of each dimension (empty for a scalar).
    pub dims: Vec<RangeId>,
    /// Disjoint groups; positions index into `dims`.
    pub symmetry: Vec<SymGroup>,
    /// Symmetries that exchange groups of dimensions as wholes:
    /// `symmetric((p q)(r s))`. May overlap `symmetry` (the 8-fold symmetry of
    /// two-electron integrals is `symmetric(p q)(r s)((p q)(r s))`).
    pub pair_symmetry: Vec<PairGroup>,
    /// Which blocks may be nonzero (`spin(a b | c d)`, `irrep(p q r s)`,
    /// `tiles[[0,1], …]`); all rules hold at once. Empty: dense.
    pub blocks: Vec<BlockRule>,
    /// The declaration, or for a tensor implied by its first assignment in a model
    /// layer, that statement's left-hand side.
    pub span: Span,
    pub model: Option<ModelId>,
}

/// A tensor with one index per dimension: `A[p,q]`. Indices may repeat (a diagonal).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRef {
    pub tensor: TensorId,
    pub indices: Vec<IndexId>,
    pub span: Span,
}

/// A tensor read at affine subscripts: `I[n,c,y+r,x+s]`, `X[2*t+1]`, `X[t-1]`.
/// Its value is a tensor over `free` (the distinct indices of `subs`, in order of
/// appearance); `sema` has proven (or, for run-time sizes, `sizes::bind_sizes`
/// checks) that every subscript stays within its dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct AffineRef {
    pub tensor: TensorId,
    pub subs: Vec<Subscript>,
    pub free: Vec<IndexId>,
    pub span: Span,
}

/// `Σ coef·index + constant`, one per dimension; a plain index is `1·i + 0`, an
/// index over a part of a union `1·i + offset`.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscript {
    pub terms: Vec<(i64, IndexId)>,
    pub constant: i64,
    pub span: Span,
}

impl Subscript {
    /// The subscript's value at the index values `value`.
    pub fn eval(&self, value: impl Fn(IndexId) -> usize) -> i64 {
        self.terms.iter().fold(self.constant, |acc, &(a, i)| acc + a * value(i) as i64)
    }

    /// Least and greatest value over the indices' ranges (`None` if a range is
    /// empty, or on overflow).
    pub fn bounds(&self, hir: &Hir) -> Option<(i64, i64)> {
        let (mut lo, mut hi) = (self.constant, self.constant);
        for &(a, i) in &self.terms {
            let n = i64::try_from(hir.index_size(i)).ok()?.checked_sub(1).filter(|&n| n >= 0)?;
            let v = a.checked_mul(n)?;
            if v < 0 {
                lo = lo.checked_add(v)?;
            } else {
                hi = hi.checked_add(v)?;
            }
        }
        Some((lo, hi))
    }

    /// As written in source: `2*x+r-1`.
    pub fn display(&self, hir: &Hir) -> String {
        let mut s = String::new();
        for &(a, i) in &self.terms {
            let name = &hir.indices[i].name;
            match (a, s.is_empty()) {
                (1, true) => s.push_str(name),
                (1, false) => s += &format!("+{name}"),
                (-1, _) => s += &format!("-{name}"),
                (a, true) => s += &format!("{a}*{name}"),
                (a, false) if a < 0 => s += &format!("-{}*{name}", -a),
                (a, false) => s += &format!("+{a}*{name}"),
            }
        }
        match (self.constant, s.is_empty()) {
            (c, true) => s += &c.to_string(),
            (0, false) => {}
            (c, false) if c < 0 => s += &c.to_string(),
            (c, false) => s += &format!("+{c}"),
        }
        s
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Func {
    Exp,
    Log,
    Sqrt,
    Recip,
    Abs,
    Relu,
    Tanh,
    Sigmoid,
    Gelu,
    Silu,
    /// Complex conjugate; the identity on real values.
    Conj,
}

impl Func {
    pub const ALL: [Func; 11] = [
        Func::Exp,
        Func::Log,
        Func::Sqrt,
        Func::Recip,
        Func::Abs,
        Func::Relu,
        Func::Tanh,
        Func::Sigmoid,
        Func::Gelu,
        Func::Silu,
        Func::Conj,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Func::Exp => "exp",
            Func::Log => "log",
            Func::Sqrt => "sqrt",
            Func::Recip => "recip",
            Func::Abs => "abs",
            Func::Relu => "relu",
            Func::Tanh => "tanh",
            Func::Sigmoid => "sigmoid",
            Func::Gelu => "gelu",
            Func::Silu => "silu",
            Func::Conj => "conj",
        }
    }

    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The element-wise function itself (`gelu` is the tanh approximation).
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Func::Exp => x.exp(),
            Func::Log => x.ln(),
            Func::Sqrt => x.sqrt(),
            Func::Recip => 1.0 / x,
            Func::Abs => x.abs(),
            Func::Relu => x.max(0.0),
            Func::Tanh => x.tanh(),
            Func::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Func::Gelu => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
            Func::Silu => x / (1.0 + (-x).exp()),
            Func::Conj => x,
        }
    }
}

/// The functions that are not [`Func`]s (reductions, selections, softmax): name,
/// how it is called, what it computes (for hints and the language server).
pub const SPECIAL_FUNCS: [(&str, &str, &str); 4] = [
    ("max", "max(x) / max(x, y)", "maximum over the indices the statement does not keep, or of two values"),
    ("min", "min(x) / min(x, y)", "minimum over the indices the statement does not keep, or of two values"),
    ("where", "where(a > b, x, y)", "x where the comparison holds, else y (element-wise)"),
    ("softmax", "softmax(x, v)", "exp(x - max_v x) / sum_v exp(x - max_v x), normalized over index v"),
];

/// The reduction of `max(…)` / `min(…)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extremum {
    Max,
    Min,
}

impl Extremum {
    pub fn name(self) -> &'static str {
        match self {
            Extremum::Max => "max",
            Extremum::Min => "min",
        }
    }
    /// The value of an empty reduction, where every reduction starts.
    pub fn identity(self) -> f64 {
        match self {
            Extremum::Max => f64::NEG_INFINITY,
            Extremum::Min => f64::INFINITY,
        }
    }
    /// `a` combined with `b`; a NaN loses (`f64::max`, LLVM's `maxnum`).
    pub fn combine(self, a: f64, b: f64) -> f64 {
        match self {
            Extremum::Max => a.max(b),
            Extremum::Min => a.min(b),
        }
    }
}

/// A sum of terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub terms: Vec<Term>,
    pub span: Span,
}

/// `coef * f1 * f2 * ...`: signs and numeric factors (and divisions by numbers)
/// are folded into `coef`. `factors` may be empty (a constant term).
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub coef: f64,
    pub factors: Vec<Factor>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Factor {
    Tensor(TensorRef),
    /// `I[n,c,y+r,x+s]`: read at affine subscripts (a tensor over its `free`).
    Affine(AffineRef),
    /// `func(arg)`, a tensor over `free` (in order of first appearance in `arg`).
    Call {
        func: Func,
        arg: Box<Expr>,
        free: Vec<IndexId>,
        span: Span,
    },
    /// `(arg)`, a tensor over `free`.
    Sum {
        arg: Box<Expr>,
        free: Vec<IndexId>,
        span: Span,
    },
    /// `max(arg)` / `min(arg)`, a tensor over `free`: `arg` is evaluated for every
    /// combination of its indices (nothing is summed inside), and the indices not in
    /// `free` are reduced by maximum or minimum ([`expr_indices`] lists them all).
    Reduce {
        op: Extremum,
        arg: Box<Expr>,
        free: Vec<IndexId>,
        span: Span,
    },
    /// `where(a cmp b, x, y)`, element by element over `free`: `args` is
    /// `[a, b, x, y]`, each a tensor over some of `free` (broadcast over the rest).
    Select {
        cmp: CmpOp,
        args: Vec<Factor>,
        free: Vec<IndexId>,
        span: Span,
    },
}

impl Factor {
    /// The indices this factor contributes to its term.
    pub fn indices(&self) -> &[IndexId] {
        match self {
            Factor::Tensor(r) => &r.indices,
            Factor::Affine(a) => &a.free,
            Factor::Call { free, .. }
            | Factor::Sum { free, .. }
            | Factor::Reduce { free, .. }
            | Factor::Select { free, .. } => free,
        }
    }
    pub fn span(&self) -> &Span {
        match self {
            Factor::Tensor(r) => &r.span,
            Factor::Affine(a) => &a.span,
            Factor::Call { span, .. }
            | Factor::Sum { span, .. }
            | Factor::Reduce { span, .. }
            | Factor::Select { span, .. } => span,
        }
    }
}

impl Factor {
    /// This factor as a one-factor expression (how walkers over expressions reach
    /// the arguments of `where`, which are factors).
    pub fn as_expr(&self) -> Expr {
        Expr { terms: vec![Term { coef: 1.0, factors: vec![self.clone()], span: self.span().clone() }], span: 0..0 }
    }

    /// Runs `f` on this factor as a one-factor expression, then takes it back.
    pub fn with_expr_mut(&mut self, f: impl FnOnce(&mut Expr)) {
        let empty = Factor::Sum { arg: Box::new(Expr { terms: Vec::new(), span: 0..0 }), free: Vec::new(), span: 0..0 };
        let factor = std::mem::replace(self, empty);
        let mut e = Expr { terms: vec![Term { coef: 1.0, factors: vec![factor], span: 0..0 }], span: 0..0 };
        f(&mut e);
        if let Some(back) = e.terms.pop().and_then(|mut t| t.factors.pop()) {
            *self = back;
        }
    }
}

/// Every index of `e`'s factors, each once: `first` (those of it that occur),
/// then the others in order of appearance.
pub fn expr_indices(e: &Expr, first: &[IndexId]) -> Vec<IndexId> {
    let mut seen: Vec<IndexId> = Vec::new();
    for t in &e.terms {
        for f in &t.factors {
            for &i in f.indices() {
                if !seen.contains(&i) {
                    seen.push(i);
                }
            }
        }
    }
    let mut out: Vec<IndexId> = first.iter().copied().filter(|i| seen.contains(i)).collect();
    out.extend(seen.into_iter().filter(|i| !first.contains(i)));
    out
}

/// `lhs = rhs;` or `lhs += rhs;` — the left-hand side's indices are distinct.
#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub lhs: TensorRef,
    pub accumulate: bool,
    pub rhs: Expr,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitKind {
    /// The file's top-level statements (named after the file) or a `program` block.
    Program,
    Model(ModelId),
}

/// A sequence of statements run together: what `tcc run` executes and what a
/// generated library exports as one function.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    pub name: String,
    pub kind: UnitKind,
    pub stmts: Vec<Stmt>,
    pub span: Span,
    /// Terms the optimizer sliced (`--max-intermediate`): a note for the loop
    /// nests, which every other consumer may ignore (the statements alone have
    /// the unsliced values).
    pub sliced: Vec<SliceGroup>,
}

/// One sliced term: the statements writing `temps` (consecutive, in order) and
/// the statement right after them, which writes `target` from them, run once per
/// value of `indices` — each slice with intermediates that lack the sliced
/// dimensions, its result added into (a sliced summed index) or written beside
/// (a kept one) the others'.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceGroup {
    pub indices: Vec<IndexId>,
    pub temps: Vec<TensorId>,
    pub target: TensorId,
    /// Slice count, flops of all slices, largest intermediate of a slice (elements),
    /// flops over the unsliced order's.
    pub slices: f64,
    pub flops: f64,
    pub largest: f64,
    pub overhead: f64,
}

impl SliceGroup {
    /// One line for reports: `Z over a,b: 32 slices, largest intermediate 64
    /// elements, flops overhead 1.00x`.
    pub fn describe(&self, hir: &Hir) -> String {
        let names: Vec<&str> = self.indices.iter().map(|&i| hir.indices[i].name.as_str()).collect();
        format!(
            "{} over {}: {} slices, largest intermediate {} elements, flops overhead {:.2}x",
            hir.tensors[self.target].name,
            names.join(","),
            self.slices,
            self.largest,
            self.overhead
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    pub name: String,
    /// Every entry ≥ 1.
    pub dims: Vec<usize>,
    pub span: Span,
}

impl Grid {
    pub fn procs(&self) -> usize {
        self.dims.iter().product()
    }
}

/// `distribute T[a,b,i,j] over G as [a:0, b:1];`
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    pub tensor: TensorId,
    pub grid: GridId,
    /// (tensor dimension position, grid dimension); both sides distinct.
    pub mapping: Vec<(usize, usize)>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceStyle {
    Ulysses,
    Ring,
}

/// A model's `parallel { ... }` hints; `None` leaves the choice to the planner.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParallelHints {
    pub data: Option<usize>,
    /// Degree and, if given, the model dimension split.
    pub tensor: Option<(usize, Option<RangeId>)>,
    pub sequence: Option<(SequenceStyle, usize)>,
    pub expert: Option<usize>,
    pub pipeline: Option<usize>,
    /// ZeRO stage 0–3.
    pub zero: Option<u8>,
    pub span: Option<Span>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    /// The layer's statements: `unit.stmts[stmts]`.
    pub stmts: std::ops::Range<usize>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub dims: Vec<RangeId>,
    pub layers: Vec<Layer>,
    pub parallel: ParallelHints,
    pub unit: UnitId,
    pub span: Span,
}

/// The whole checked file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hir {
    pub ranges: IdVec<RangeId, Range>,
    pub indices: IdVec<IndexId, Index>,
    pub tensors: IdVec<TensorId, Tensor>,
    pub grids: IdVec<GridId, Grid>,
    pub distributions: Vec<Distribution>,
    pub units: IdVec<UnitId, Unit>,
    pub models: IdVec<ModelId, Model>,
}

impl Hir {
    /// The extent of each dimension of a tensor.
    pub fn shape(&self, t: TensorId) -> Vec<usize> {
        self.tensors[t].dims.iter().map(|&r| self.ranges[r].size).collect()
    }

    /// Number of elements, `None` on overflow.
    pub fn num_elements(&self, t: TensorId) -> Option<usize> {
        self.shape(t).into_iter().try_fold(1usize, |acc, n| acc.checked_mul(n))
    }

    /// The ranges whose size is a run-time parameter (`range O;` not yet bound), in
    /// declaration order.
    pub fn runtime_ranges(&self) -> Vec<RangeId> {
        self.ranges.ids().filter(|&r| self.ranges[r].is_runtime()).collect()
    }

    /// The run-time ranges that unit `u`'s tensors have dimensions over, in
    /// declaration order: the sizes a library function of `u` takes.
    pub fn unit_runtime_ranges(&self, u: UnitId) -> Vec<RangeId> {
        let used = self.unit_ranges(u);
        self.runtime_ranges().into_iter().filter(|r| used.contains(r)).collect()
    }

    /// The ranges that unit `u`'s tensors (written or read) have dimensions over.
    pub fn unit_ranges(&self, u: UnitId) -> std::collections::HashSet<RangeId> {
        let mut used = std::collections::HashSet::new();
        for s in &self.units[u].stmts {
            used.extend(self.tensors[s.lhs.tensor].dims.iter().copied());
            collect_reads(&s.rhs, &mut |t| used.extend(self.tensors[t].dims.iter().copied()));
        }
        used
    }

    /// Where the values of range `sub` start among those of `sup`: 0 when they
    /// are one range, the sizes of the parts before it when `sub` is a part
    /// (at any depth) of the union `sup`, `None` when it is not.
    pub fn offset_in(&self, sub: RangeId, sup: RangeId) -> Option<usize> {
        if sub == sup {
            return Some(0);
        }
        let mut off = 0;
        for &p in &self.ranges[sup].parts {
            if let Some(o) = self.offset_in(sub, p) {
                return Some(off + o);
            }
            off += self.ranges[p].size;
        }
        None
    }

    /// Per dimension of `r`, where its index's values start in the dimension's
    /// range (0 unless the index is over a sub-range of it).
    pub fn ref_offsets(&self, r: &TensorRef) -> Vec<usize> {
        let dims = &self.tensors[r.tensor].dims;
        r.indices.iter().zip(dims).map(|(&i, &d)| self.offset_in(self.indices[i].range, d).unwrap_or(0)).collect()
    }

    /// Whether some index of `r` is over a sub-range of its dimension's range.
    pub fn is_slice(&self, r: &TensorRef) -> bool {
        let dims = &self.tensors[r.tensor].dims;
        r.indices.iter().zip(dims).any(|(&i, &d)| self.indices[i].range != d)
    }

    /// Whether a statement reads or writes a slice of a tensor (`F[o,v]` with `F`
    /// over `P = O + V`).
    pub fn stmt_has_slice(&self, s: &Stmt) -> bool {
        let mut found = self.is_slice(&s.lhs);
        visit_refs(&s.rhs, &mut |r| found |= self.is_slice(r));
        found
    }

    /// Whether any statement of the program reads or writes a slice.
    pub fn has_slices(&self) -> bool {
        self.units.iter().any(|u| u.stmts.iter().any(|s| self.stmt_has_slice(s)))
    }

    /// Whether any statement reads a tensor at affine subscripts (`I[y+r]`).
    pub fn has_affine(&self) -> bool {
        let mut found = false;
        for u in &self.units {
            for s in &u.stmts {
                visit_affine(&s.rhs, &mut |_| found = true);
            }
        }
        found
    }

    /// The first affine subscript that leaves its dimension with the sizes now in
    /// the program (subscripts over run-time ranges not yet bound are skipped): the
    /// reference, the dimension and the subscript's least and greatest values.
    pub fn affine_out_of_bounds(&self) -> Option<(AffineRef, usize, i64, i64)> {
        let mut bad = None;
        for u in &self.units {
            for s in &u.stmts {
                visit_affine(&s.rhs, &mut |a| {
                    for (k, sub) in a.subs.iter().enumerate() {
                        let dim = self.tensors[a.tensor].dims[k];
                        let runtime = |r: RangeId| self.ranges[r].is_runtime();
                        if runtime(dim) || sub.terms.iter().any(|&(_, i)| runtime(self.indices[i].range)) {
                            continue;
                        }
                        let extent = self.ranges[self.tensors[a.tensor].dims[k]].size as i64;
                        let bounds = sub.bounds(self);
                        let ok = bounds.is_some_and(|(lo, hi)| lo >= 0 && hi < extent);
                        if !ok && bad.is_none() {
                            let (lo, hi) = bounds.unwrap_or((i64::MIN, i64::MAX));
                            bad = Some((a.clone(), k, lo, hi));
                        }
                    }
                });
            }
        }
        bad
    }

    pub fn index_size(&self, i: IndexId) -> usize {
        self.ranges[self.indices[i].range].size
    }

    pub fn tensor_by_name(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .position(|t| t.name == name && t.model.is_none())
            .or_else(|| self.tensors.position(|t| t.name == name))
    }

    pub fn unit_by_name(&self, name: &str) -> Option<UnitId> {
        self.units.position(|u| u.name == name)
    }

    /// The units `--program NAME` selects (all without it); E0702 naming the
    /// file's units for an unknown name.
    pub fn select_units(&self, program: Option<&str>) -> Result<Vec<UnitId>, crate::error::CommandError> {
        match program {
            None => Ok(self.units.ids().collect()),
            Some(name) => self.unit_by_name(name).map(|u| vec![u]).ok_or_else(|| {
                let names: Vec<String> = self.units.iter().map(|u| format!("`{}`", u.name)).collect();
                crate::error::CommandError::new(
                    "E0702",
                    format!("there is no program or model named `{name}`"),
                    Some(format!("the file defines: {}", names.join(", "))),
                )
            }),
        }
    }

    /// Tensors a unit reads without writing first: what a caller must supply.
    pub fn unit_inputs(&self, u: UnitId) -> Vec<TensorId> {
        let mut seen = Vec::new();
        for s in &self.units[u].stmts {
            collect_reads(&s.rhs, &mut |t| {
                if self.tensors[t].role.is_read_only() && !seen.contains(&t) {
                    seen.push(t);
                }
            });
        }
        seen
    }

    /// Output tensors a unit writes, in order of first write.
    pub fn unit_outputs(&self, u: UnitId) -> Vec<TensorId> {
        let mut out = Vec::new();
        for s in &self.units[u].stmts {
            let t = s.lhs.tensor;
            if self.tensors[t].role == Role::Output && !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }
}

/// Calls `f` on every tensor reference in an expression.
pub fn visit_refs(e: &Expr, f: &mut impl FnMut(&TensorRef)) {
    for term in &e.terms {
        for factor in &term.factors {
            match factor {
                Factor::Tensor(r) => f(r),
                // Not a plain reference: see [`visit_affine`].
                Factor::Affine(_) => {}
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => visit_refs(arg, f),
                Factor::Select { args, .. } => args.iter().for_each(|a| visit_refs(&a.as_expr(), f)),
            }
        }
    }
}

/// Calls `f` on every affine reference (`I[y+r]`) in an expression.
pub fn visit_affine(e: &Expr, f: &mut impl FnMut(&AffineRef)) {
    for term in &e.terms {
        for factor in &term.factors {
            match factor {
                Factor::Affine(a) => f(a),
                Factor::Tensor(_) => {}
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => visit_affine(arg, f),
                Factor::Select { args, .. } => args.iter().for_each(|a| visit_affine(&a.as_expr(), f)),
            }
        }
    }
}

/// Calls `f` on every tensor an expression reads.
pub fn collect_reads(e: &Expr, f: &mut impl FnMut(TensorId)) {
    for term in &e.terms {
        for factor in &term.factors {
            match factor {
                Factor::Tensor(r) => f(r.tensor),
                Factor::Affine(a) => f(a.tensor),
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => {
                    collect_reads(arg, f)
                }
                Factor::Select { args, .. } => {
                    for a in args {
                        collect_reads(&a.as_expr(), f);
                    }
                }
            }
        }
    }
}
