//! The reference interpreter: runs a checked unit in f64 with plain nested loops.
//! It is the oracle every optimization and back end is tested against, so it is
//! written to be obviously correct rather than fast:
//!
//! * a statement's right-hand side is evaluated completely into a dense tensor over
//!   the left-hand side's indices, then assigned (`=`) or added (`+=`) to the target,
//!   so a statement that reads its own target sees the old value (as numpy would);
//! * each term is one odometer over the term's result indices followed by its summed
//!   indices (those in no result), multiplying `coef` and one element per factor;
//! * a `Call` or `Sum` factor is first evaluated into a dense temporary over its
//!   `free` indices (recursively, with the same rule) and then read like a tensor;
//! * outputs and temporaries start at zero; every value is an `f64`, whatever the
//!   declared element type.
//!
//! Sizes are guarded: a tensor of more than [`crate::tensor::MAX_TENSOR_ELEMENTS`] elements or a
//! term of more than [`MAX_TERM_ITERATIONS`] loop iterations is refused with an
//! [`InterpError`] instead of exhausting memory or running for days.

use crate::sema::hir::{
    expr_indices, AffineRef, CmpOp, ElemType, Expr, Extremum, Factor, Hir, IndexId, PairGroup, Role, Stmt, SymGroup,
    SymKind, Tensor, TensorId, Term, UnitId,
};
use crate::symmetry::{block_allowed, PermGroup};
use crate::tensor::{
    checked_len, for_each_index, linear, strides, try_vec, AllocError, Dense, DenseRef, OutOfMemory, TooLarge,
};
use std::collections::HashMap;

/// The most loop iterations one term may take: 2^40.
pub const MAX_TERM_ITERATIONS: u128 = 1 << 40;

/// Why the interpreter refused to run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    #[error("{what} would have {count} elements (shape {shape:?}), more than the limit of 2^31 for a dense tensor of `tcc run` (interpreter and JIT; tiled storage, `--tiled`, has none)")]
    TensorTooLarge { what: String, shape: Vec<usize>, count: String },
    #[error("{what} would take {iterations} loop iterations, more than the interpreter's limit of 2^40")]
    LoopTooLarge { what: String, iterations: String },
    #[error(transparent)]
    OutOfMemory(#[from] OutOfMemory),
    #[error("no value was given for input `{name}`")]
    MissingInput { name: String },
    #[error("input `{name}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch { name: String, expected: Vec<usize>, found: Vec<usize> },
    /// Never for a checked program with bound sizes (`sema` and `bind_sizes`
    /// prove the bounds); a guard instead of an out-of-bounds read.
    #[error("subscript `{sub}` of `{tensor}` is {value}, outside 0..{extent}")]
    SubscriptOutOfBounds { tensor: String, sub: String, value: i64, extent: usize },
    /// What the complex interpreter ([`crate::interp_complex`]) does not evaluate.
    #[error("{0}")]
    Unsupported(String),
}

impl From<TooLarge> for InterpError {
    fn from(e: TooLarge) -> Self {
        InterpError::TensorTooLarge { what: e.what, shape: e.shape, count: e.count }
    }
}

impl From<AllocError> for InterpError {
    fn from(e: AllocError) -> Self {
        match e {
            AllocError::TooLarge(e) => e.into(),
            AllocError::OutOfMemory(e) => e.into(),
        }
    }
}

// ---------------------------------------------------------------------------------
// Random fill
// ---------------------------------------------------------------------------------

/// The splitmix64 finaliser: a stateless 64-bit mixer.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a, 64 bits, of a tensor's name.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The random value of element `linear` (row-major) of the tensor named `name`:
/// uniform in [-1, 1), a pure function of (seed, name, linear).
pub fn random_value(seed: u64, name: &str, linear: u64) -> f64 {
    random_value_keyed(random_key(seed, name), linear)
}

/// The per-tensor part of [`random_value`], for callers that fill many elements.
pub fn random_key(seed: u64, name: &str) -> u64 {
    splitmix64(seed ^ splitmix64(name_hash(name)))
}

/// [`random_value`] of element `linear` from the tensor's [`random_key`].
pub fn random_value_keyed(key: u64, linear: u64) -> f64 {
    let h = splitmix64(key ^ splitmix64(linear));
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// Maps a multi-index to its symmetry representative (each group's indices sorted
/// ascending) and the sign of the element relative to it: `0` for an antisymmetric
/// group with two equal indices, else ±1 (the parity of the sorting permutation for
/// antisymmetric groups, +1 for symmetric ones).
pub fn canonical_index(index: &[usize], groups: &[SymGroup]) -> (Vec<usize>, i32) {
    let mut canon = index.to_vec();
    let mut sign = 1;
    for g in groups {
        let mut vals: Vec<usize> = g.positions.iter().map(|&p| index[p]).collect();
        if g.kind == SymKind::Antisymmetric {
            let mut inversions = 0;
            for a in 0..vals.len() {
                for b in a + 1..vals.len() {
                    if vals[a] == vals[b] {
                        return (canon, 0);
                    }
                    if vals[a] > vals[b] {
                        inversions += 1;
                    }
                }
            }
            if inversions % 2 == 1 {
                sign = -sign;
            }
        }
        vals.sort_unstable();
        for (&p, v) in g.positions.iter().zip(vals) {
            canon[p] = v;
        }
    }
    (canon, sign)
}

/// The random fill of tensor `t`: element `x` is `sign · random_value(seed, name,
/// linear(rep))` where `(rep, sign)` is `x`'s representative under the tensor's
/// symmetry group ([`PermGroup::canonical`]: the lexicographically smallest image
/// under the group generated by `symmetry` and `pair_symmetry`; for `symmetry` alone
/// that is [`canonical_index`], each group sorted), so a symmetric group's values
/// are exactly symmetric and an antisymmetric group's exactly antisymmetric (exact
/// zeros where the index is its own image with sign −1). Elements outside the
/// tensor's block rules ([`block_allowed`]; a `tiles` rule counts tiles of the
/// declared `tile` size, or of the whole range) are exactly 0. Values of an `f32`
/// tensor are rounded to `f32`, so that saving them as `<f4` loses nothing.
pub fn fill_random(hir: &Hir, t: TensorId, seed: u64) -> Result<Dense, InterpError> {
    let tensor = &hir.tensors[t];
    let shape = hir.shape(t);
    let what = format!("tensor `{}`", tensor.name);
    let mut data = try_vec(&what, checked_len(&what, &shape)?)?;
    // Sorting each group is the same as the group's lexicographic minimum, and fast.
    let group = (!tensor.pair_symmetry.is_empty()).then(|| PermGroup::of(tensor));
    for_each_index(&shape, |idx| {
        let (canon, sign) = match &group {
            Some(g) => g.canonical(idx),
            None => canonical_index(idx, &tensor.symmetry),
        };
        let v = if sign == 0 || !block_allowed(hir, t, idx) {
            0.0
        } else {
            sign as f64 * random_value(seed, &tensor.name, linear(&shape, &canon) as u64)
        };
        data.push(round_to(tensor.elem, v));
    });
    Ok(Dense { shape, data })
}

/// A value as the element type stores it (`f32` rounds, `f64` is exact).
pub fn round_to(elem: ElemType, x: f64) -> f64 {
    match elem {
        // A complex type rounds each part as its real part type does.
        ElemType::F32 | ElemType::C64 => x as f32 as f64,
        ElemType::F64 | ElemType::C128 => x,
        // Computed in f32, then rounded to 16 bits (both to nearest even).
        ElemType::BF16 => crate::half::round_bf16(x),
        ElemType::F16 => crate::half::round_f16(x),
    }
}

/// Random values (see [`fill_random`]) for every input of a unit.
pub fn random_inputs(hir: &Hir, unit: UnitId, seed: u64) -> Result<HashMap<TensorId, Dense>, InterpError> {
    hir.unit_inputs(unit).into_iter().map(|t| Ok((t, fill_random(hir, t, seed)?))).collect()
}

/// The first element at which `x` breaks its declared symmetry, described for a
/// person, or `None`. Two elements related by a swap within a group must agree (up
/// to the sign) within `rtol` times the largest magnitude in `x`.
pub fn symmetry_violation<'a>(x: impl Into<DenseRef<'a>>, groups: &[SymGroup], rtol: f64) -> Option<String> {
    let x = x.into();
    let mut swaps = Vec::new();
    for g in groups {
        for w in g.positions.windows(2) {
            let mut perm: Vec<usize> = (0..x.shape.len()).collect();
            perm.swap(w[0], w[1]);
            swaps.push((perm, g.kind, format!("in dimensions {:?}", g.positions)));
        }
    }
    first_swap_violation(x, &swaps, rtol)
}

/// [`symmetry_violation`] for the pair groups of a tensor: two elements related by
/// a swap of adjacent members must agree (up to the sign) within `rtol` times the
/// largest magnitude in `x`.
pub fn pair_symmetry_violation<'a>(x: impl Into<DenseRef<'a>>, pairs: &[PairGroup], rtol: f64) -> Option<String> {
    let x = x.into();
    let mut swaps = Vec::new();
    for g in pairs {
        for w in g.members.windows(2) {
            let mut perm: Vec<usize> = (0..x.shape.len()).collect();
            for (&p, &q) in w[0].iter().zip(&w[1]) {
                perm.swap(p, q);
            }
            swaps.push((perm, g.kind, format!("under exchanging dimensions {:?} with {:?}", w[0], w[1])));
        }
    }
    first_swap_violation(x, &swaps, rtol)
}

/// The first element (row-major, then in the order of `swaps`) whose partner under
/// one of `swaps` (a permutation of dimensions: the partner of `idx` is
/// `idx[perm[d]]` along `d`, the swap's kind, and how to name it) differs from the
/// element, up to the sign, by more than `rtol` times the largest magnitude.
///
/// Walks the data once with the partner's offset updated by strides, with no
/// allocation per element: outputs of symmetric tiled runs (10⁸ elements and more)
/// are checked in about a second, where an index vector per element took minutes.
fn first_swap_violation(x: DenseRef<'_>, swaps: &[(Vec<usize>, SymKind, String)], rtol: f64) -> Option<String> {
    if swaps.is_empty() || x.shape.contains(&0) {
        return None;
    }
    let max_abs = x.data.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = rtol * max_abs;
    let n = x.shape.len();
    let strides = crate::tensor::strides(x.shape);
    // The partner's stride along each dimension of `idx`, per swap.
    let partner: Vec<Vec<usize>> = swaps
        .iter()
        .map(|(perm, _, _)| {
            let mut ps = vec![0usize; n];
            for d in 0..n {
                ps[perm[d]] = strides[d];
            }
            ps
        })
        .collect();
    let mut idx = vec![0usize; n];
    let mut offs = vec![0usize; swaps.len()];
    for (off, &a) in x.data.iter().enumerate() {
        for (s, (_, kind, what)) in swaps.iter().enumerate() {
            let b = x.data[offs[s]];
            let expect = if *kind == SymKind::Antisymmetric { -b } else { b };
            // Written so that a NaN counts as a violation.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let bad = !((a - expect).abs() <= tol);
            if bad {
                let other: Vec<usize> = (0..n).map(|d| idx[swaps[s].0[d]]).collect();
                let kind = if *kind == SymKind::Antisymmetric { "antisymmetric" } else { "symmetric" };
                return Some(format!("not {kind} {what}: element {idx:?} = {a:e} but element {other:?} = {b:e}"));
            }
        }
        debug_assert_eq!(off, idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>());
        // Next multi-index, the partners' offsets following.
        let mut d = n;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for (o, ps) in offs.iter_mut().zip(&partner) {
                *o += ps[d];
            }
            if idx[d] < x.shape[d] {
                break;
            }
            for (o, ps) in offs.iter_mut().zip(&partner) {
                *o -= ps[d] * x.shape[d];
            }
            idx[d] = 0;
        }
    }
    None
}

/// Every declared symmetry of a tensor (`symmetry`, then `pair_symmetry`) checked on
/// `x`: the first violation found, or `None`.
pub fn tensor_symmetry_violation<'a>(x: impl Into<DenseRef<'a>>, tensor: &Tensor, rtol: f64) -> Option<String> {
    let x = x.into();
    symmetry_violation(x, &tensor.symmetry, rtol).or_else(|| pair_symmetry_violation(x, &tensor.pair_symmetry, rtol))
}

/// The first nonzero element of `x` (a value of tensor `t`) outside the blocks its
/// rules allow, described for a person, or `None`. Zero means exactly zero here:
/// block sparsity is structural, and the interpreter's fill and every correct
/// computation keep those elements exactly 0 (a NaN counts as nonzero).
pub fn block_violation<'a>(hir: &Hir, t: TensorId, x: impl Into<DenseRef<'a>>) -> Option<String> {
    let x = x.into();
    let tensor = &hir.tensors[t];
    if tensor.blocks.is_empty() {
        return None;
    }
    let ranges: Vec<&crate::sema::hir::Range> = tensor.dims.iter().map(|&r| &hir.ranges[r]).collect();
    let mut found = None;
    for_each_index(x.shape, |idx| {
        if found.is_some() {
            return;
        }
        let v = x.get(idx);
        if v == 0.0 {
            return;
        }
        if let Some(rule) = tensor.blocks.iter().find(|r| !crate::symmetry::rule_allows(r, &ranges, idx)) {
            let names: Vec<String> = (0..tensor.dims.len()).map(|k| format!("#{k}")).collect();
            found = Some(format!(
                "element {idx:?} = {v:e} is outside the blocks allowed by {} (dimensions by position)",
                crate::symmetry::rule_text(rule, &names)
            ));
        }
    });
    found
}

// ---------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------

/// Runs unit `unit` on the given inputs (every tensor of `hir.unit_inputs(unit)`,
/// with its declared shape) and returns the value of every output it writes.
/// Temporaries stay internal.
pub fn run_unit(
    hir: &Hir,
    unit: UnitId,
    inputs: &HashMap<TensorId, Dense>,
) -> Result<HashMap<TensorId, Dense>, InterpError> {
    if let Some(t) = hir.tensors.iter().find(|t| t.elem.is_complex()) {
        // Never the real parts alone: complex programs go to `interp_complex`.
        return Err(InterpError::Unsupported(format!(
            "`{}` is {}: the real interpreter does not run complex programs (the complex one, `tcc run --interp`, does)",
            t.name,
            t.elem.name()
        )));
    }
    run_unit_with(hir, unit, inputs, exec_stmt)
}

/// A tensor value the interpreters hold (real [`Dense`], complex
/// [`crate::interp_complex::CDense`]): what [`run_unit_with`] checks of inputs.
pub(crate) trait UnitValue: Clone {
    fn shape(&self) -> &[usize];
    fn len(&self) -> usize;
}

impl UnitValue for Dense {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn len(&self) -> usize {
        self.data.len()
    }
}

/// The frame both interpreters run a unit in: every input the unit reads must be
/// in `inputs` with its declared shape (MissingInput, ShapeMismatch); each
/// statement runs through `exec` (its description for errors); the outputs
/// written are returned.
pub(crate) fn run_unit_with<V: UnitValue>(
    hir: &Hir,
    unit: UnitId,
    inputs: &HashMap<TensorId, V>,
    mut exec: impl FnMut(&Hir, &Stmt, &mut HashMap<TensorId, V>, &str) -> Result<(), InterpError>,
) -> Result<HashMap<TensorId, V>, InterpError> {
    let u = &hir.units[unit];
    let mut values: HashMap<TensorId, V> = HashMap::new();
    for t in hir.unit_inputs(unit) {
        let name = &hir.tensors[t].name;
        let v = inputs.get(&t).ok_or_else(|| InterpError::MissingInput { name: name.clone() })?;
        let expected = hir.shape(t);
        if v.shape() != expected || v.len() != checked_len(&format!("input `{name}`"), &expected)? {
            return Err(InterpError::ShapeMismatch { name: name.clone(), expected, found: v.shape().to_vec() });
        }
        values.insert(t, v.clone());
    }
    for (k, stmt) in u.stmts.iter().enumerate() {
        exec(hir, stmt, &mut values, &format!("statement {} of `{}`", k + 1, u.name))?;
    }
    Ok(hir
        .unit_outputs(unit)
        .into_iter()
        .filter(|&t| hir.tensors[t].role == Role::Output)
        .map(|t| (t, values.remove(&t).expect("an output of the unit was written")))
        .collect())
}

/// Runs one statement on full tensors: the right-hand side is evaluated completely,
/// then assigned or added to the target (allocated as zeros when first written).
/// `what` names the statement in errors. Every tensor the statement reads must be in
/// `values`.
pub fn exec_stmt(hir: &Hir, stmt: &Stmt, values: &mut HashMap<TensorId, Dense>, what: &str) -> Result<(), InterpError> {
    let target = stmt.lhs.tensor;
    let tname = &hir.tensors[target].name;
    if let std::collections::hash_map::Entry::Vacant(e) = values.entry(target) {
        e.insert(Dense::zeros(&format!("tensor `{tname}`"), hir.shape(target))?);
    }
    let ev = Evaluator { hir, values, stmt: format!("{what} (assigning `{tname}`)") };
    let rhs = ev.eval_expr(&stmt.rhs, &stmt.lhs.indices)?;
    let dst = values.get_mut(&target).expect("target initialised above");
    // A 16-bit target stores each statement's result rounded once (f32 and f64
    // targets keep the f64 value; they are compared after rounding).
    let elem = hir.tensors[target].elem;
    let store = |e: ElemType, x: f64| if e.is_half() { round_to(e, x) } else { x };
    if hir.is_slice(&stmt.lhs) {
        // A slice (`F[o,v]` of `F[p,q]`, `P = O + V`): only its elements change.
        let st = strides(&dst.shape);
        let base: usize = hir.ref_offsets(&stmt.lhs).iter().zip(&st).map(|(o, s)| o * s).sum();
        let mut k = 0;
        for_each_index(&rhs.shape, |idx| {
            let d = base + idx.iter().zip(&st).map(|(i, s)| i * s).sum::<usize>();
            let v = if stmt.accumulate { dst.data[d] + rhs.data[k] } else { rhs.data[k] };
            dst.data[d] = store(elem, v);
            k += 1;
        });
        return Ok(());
    }
    debug_assert_eq!(dst.shape, rhs.shape);
    if stmt.accumulate {
        for (d, r) in dst.data.iter_mut().zip(&rhs.data) {
            *d = store(elem, *d + r);
        }
    } else {
        *dst = rhs;
        if elem.is_half() {
            dst.data.iter_mut().for_each(|x| *x = round_to(elem, *x));
        }
    }
    Ok(())
}

struct Evaluator<'a> {
    hir: &'a Hir,
    values: &'a HashMap<TensorId, Dense>,
    /// Which statement, for error messages.
    stmt: String,
}

impl Evaluator<'_> {
    /// The value of `e` as a dense tensor over `result` (in that order); every index
    /// of a term that is not in `result` is summed.
    fn eval_expr(&self, e: &Expr, result: &[IndexId]) -> Result<Dense, InterpError> {
        let shape: Vec<usize> = result.iter().map(|&i| self.hir.index_size(i)).collect();
        let mut out = Dense::zeros(&format!("a sub-expression of {}", self.stmt), shape)?;
        for term in &e.terms {
            self.add_term(term, result, &mut out)?;
        }
        Ok(out)
    }

    /// `max(arg)` / `min(arg)` over `free`: `arg` over all its indices (nothing
    /// summed), then each element combined into its `free` coordinates.
    fn eval_reduce(&self, op: Extremum, arg: &Expr, free: &[IndexId]) -> Result<Dense, InterpError> {
        let mut all = free.to_vec();
        all.extend(expr_indices(arg, free).into_iter().filter(|i| !free.contains(i)));
        let v = self.eval_expr(arg, &all)?;
        let shape: Vec<usize> = free.iter().map(|&i| self.hir.index_size(i)).collect();
        let mut out = Dense::zeros(&format!("a reduction of {}", self.stmt), shape.clone())?;
        out.data.iter_mut().for_each(|x| *x = op.identity());
        // `all` starts with `free`, in order: an element's target is its prefix.
        let st = strides(&shape);
        let mut k = 0;
        for_each_index(&v.shape, |idx| {
            let o: usize = idx[..free.len()].iter().zip(&st).map(|(i, s)| i * s).sum();
            out.data[o] = op.combine(out.data[o], v.data[k]);
            k += 1;
        });
        Ok(out)
    }

    /// `where(a cmp b, x, y)` over `free`, each argument broadcast over the
    /// indices of `free` it lacks.
    fn eval_select(&self, cmp: CmpOp, args: &[Factor], free: &[IndexId]) -> Result<Dense, InterpError> {
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            let mut own: Vec<IndexId> = Vec::new();
            for &i in a.indices() {
                if !own.contains(&i) {
                    own.push(i);
                }
            }
            let d = self.eval_expr(&a.as_expr(), &own)?;
            let st = strides(&d.shape);
            // Per position of `free`, how far this argument's offset moves.
            let fs: Vec<usize> = free.iter().map(|f| own.iter().position(|i| i == f).map_or(0, |p| st[p])).collect();
            vals.push((d, fs));
        }
        let shape: Vec<usize> = free.iter().map(|&i| self.hir.index_size(i)).collect();
        let mut out = Dense::zeros(&format!("a `where` of {}", self.stmt), shape.clone())?;
        let mut k = 0;
        for_each_index(&shape, |idx| {
            let at = |n: usize| -> f64 {
                let (d, fs) = &vals[n];
                d.data[idx.iter().zip(fs).map(|(i, s)| i * s).sum::<usize>()]
            };
            out.data[k] = if cmp.holds(at(0), at(1)) { at(2) } else { at(3) };
            k += 1;
        });
        Ok(out)
    }

    /// `I[n,c,y+r,x+s]` as a tensor over its free indices: every element read at
    /// its subscripts' values.
    fn eval_affine(&self, a: &AffineRef) -> Result<Dense, InterpError> {
        let src = self.values.get(&a.tensor).expect("sema guarantees every tensor read has a value");
        let shape: Vec<usize> = a.free.iter().map(|&i| self.hir.index_size(i)).collect();
        let mut out = Dense::zeros(&format!("an affine read of {}", self.stmt), shape)?;
        for (o, at) in out.data.iter_mut().zip(affine_offsets(self.hir, a, &src.shape)?) {
            *o = src.data[at];
        }
        Ok(out)
    }

    /// `out[result] += coef * Σ_{summed} Π factors`.
    fn add_term(&self, term: &Term, result: &[IndexId], out: &mut Dense) -> Result<(), InterpError> {
        // Sub-expressions first, into dense temporaries over their free indices.
        let mut subs: Vec<Option<Dense>> = Vec::with_capacity(term.factors.len());
        for f in &term.factors {
            subs.push(match f {
                Factor::Tensor(_) => None,
                Factor::Affine(a) => Some(self.eval_affine(a)?),
                Factor::Sum { arg, free, .. } => Some(self.eval_expr(arg, free)?),
                Factor::Call { func, arg, free, .. } => {
                    let mut v = self.eval_expr(arg, free)?;
                    for x in &mut v.data {
                        *x = func.apply(*x);
                    }
                    Some(v)
                }
                Factor::Reduce { op, arg, free, .. } => Some(self.eval_reduce(*op, arg, free)?),
                Factor::Select { cmp, args, free, .. } => Some(self.eval_select(*cmp, args, free)?),
            });
        }
        let operands: Vec<(&Dense, &[IndexId])> = term
            .factors
            .iter()
            .zip(&subs)
            .map(|(f, sub)| match (f, sub) {
                (Factor::Tensor(r), _) => (
                    self.values.get(&r.tensor).expect("sema guarantees every tensor read has a value"),
                    r.indices.as_slice(),
                ),
                (_, Some(d)) => (d, f.indices()),
                (_, None) => unreachable!(),
            })
            .collect();

        // Loop variables: the result's indices, then the summed ones.
        let mut vars: Vec<IndexId> = result.to_vec();
        for &(_, idx) in &operands {
            for &i in idx {
                if !vars.contains(&i) {
                    vars.push(i);
                }
            }
        }
        let sizes: Vec<usize> = vars.iter().map(|&i| self.hir.index_size(i)).collect();
        let iterations = sizes.iter().try_fold(1u128, |acc, &n| acc.checked_mul(n as u128));
        match iterations {
            Some(n) if n <= MAX_TERM_ITERATIONS => {}
            _ => {
                return Err(InterpError::LoopTooLarge {
                    what: format!("a term of {}", self.stmt),
                    iterations: iterations.map_or_else(|| "more than 2^128".to_string(), |n| n.to_string()),
                })
            }
        }
        if sizes.contains(&0) {
            return Ok(());
        }

        // For each operand (and the output), how far its offset moves when a loop
        // variable moves by one: the sum of the strides of the dimensions it indexes
        // (a repeated index — a diagonal — contributes every one of its strides).
        let var_strides = |shape: &[usize], idx: &[IndexId]| -> Vec<usize> {
            let st = strides(shape);
            vars.iter().map(|v| idx.iter().zip(&st).filter(|(i, _)| *i == v).map(|(_, s)| s).sum()).collect()
        };
        let op_strides: Vec<Vec<usize>> = operands.iter().map(|(d, idx)| var_strides(&d.shape, idx)).collect();
        // Where each operand starts: past the parts before a sub-range's values.
        let bases: Vec<usize> = term
            .factors
            .iter()
            .zip(&operands)
            .map(|(f, (d, _))| match f {
                Factor::Tensor(r) => self.hir.ref_offsets(r).iter().zip(strides(&d.shape)).map(|(o, s)| o * s).sum(),
                _ => 0,
            })
            .collect();
        let out_strides = var_strides(&out.shape, result);

        let n = vars.len();
        let mut counter = vec![0usize; n];
        let mut offs = bases;
        let mut out_off = 0usize;
        loop {
            let mut p = term.coef;
            for (k, (d, _)) in operands.iter().enumerate() {
                p *= d.data[offs[k]];
            }
            out.data[out_off] += p;
            // Advance the odometer, last variable fastest.
            let mut v = n;
            loop {
                if v == 0 {
                    return Ok(());
                }
                v -= 1;
                counter[v] += 1;
                if counter[v] < sizes[v] {
                    for (o, st) in offs.iter_mut().zip(&op_strides) {
                        *o += st[v];
                    }
                    out_off += out_strides[v];
                    break;
                }
                let back = sizes[v] - 1;
                for (o, st) in offs.iter_mut().zip(&op_strides) {
                    *o -= back * st[v];
                }
                out_off -= back * out_strides[v];
                counter[v] = 0;
            }
        }
    }
}

/// Hand-made HIR for the tests of this module and of [`crate::run`].
/// Where each element of the affine read `a` (row-major over its free indices)
/// is in its tensor, of shape `src_shape`; the first subscript outside its
/// dimension is an error. Shared by the real and the complex interpreter.
pub(crate) fn affine_offsets(hir: &Hir, a: &AffineRef, src_shape: &[usize]) -> Result<Vec<usize>, InterpError> {
    let st = strides(src_shape);
    let shape: Vec<usize> = a.free.iter().map(|&i| hir.index_size(i)).collect();
    let mut offsets = Vec::with_capacity(shape.iter().product());
    let mut bad = None;
    for_each_index(&shape, |idx| {
        let value = |i: IndexId| idx[a.free.iter().position(|&f| f == i).unwrap_or(0)];
        let mut off = 0usize;
        for (p, sub) in a.subs.iter().enumerate() {
            let v = sub.eval(value);
            if v < 0 || v as usize >= src_shape[p] {
                bad.get_or_insert((p, v));
                return;
            }
            off += v as usize * st[p];
        }
        offsets.push(off);
    });
    match bad {
        Some((p, value)) => Err(InterpError::SubscriptOutOfBounds {
            tensor: hir.tensors[a.tensor].name.clone(),
            sub: a.subs[p].display(hir),
            value,
            extent: src_shape[p],
        }),
        None => Ok(offsets),
    }
}

#[cfg(test)]
pub(crate) mod test_hir {
    use crate::sema::hir::*;

    /// A tiny builder of hand-made HIR for tests.
    #[derive(Default)]
    pub(crate) struct B {
        pub(crate) hir: Hir,
    }

    impl B {
        pub(crate) fn range(&mut self, name: &str, size: usize) -> RangeId {
            self.hir.ranges.push(Range {
                name: name.into(),
                size,
                span: 0..0,
                model: None,
                size_kind: SizeKind::Fixed,
                tiling: Default::default(),
                parts: Vec::new(),
            })
        }
        /// Declares indices named by the characters of `names` over range `r`.
        pub(crate) fn indices(&mut self, names: &str, r: RangeId) {
            for c in names.chars() {
                self.hir.indices.push(Index { name: c.to_string(), range: r, span: 0..0, model: None });
            }
        }
        pub(crate) fn ix(&self, name: char) -> IndexId {
            self.hir.indices.position(|i| i.name == name.to_string()).expect("index declared")
        }
        pub(crate) fn ixs(&self, names: &str) -> Vec<IndexId> {
            names.chars().map(|c| self.ix(c)).collect()
        }
        /// `dims` are index names; each gives its range.
        pub(crate) fn tensor(&mut self, name: &str, role: Role, dims: &str) -> TensorId {
            self.tensor_sym(name, role, dims, vec![])
        }
        pub(crate) fn tensor_sym(&mut self, name: &str, role: Role, dims: &str, symmetry: Vec<SymGroup>) -> TensorId {
            let dims = self.ixs(dims).into_iter().map(|i| self.hir.indices[i].range).collect();
            self.hir.tensors.push(Tensor {
                name: name.into(),
                role,
                elem: ElemType::F64,
                dims,
                symmetry,
                pair_symmetry: Vec::new(),
                blocks: Vec::new(),
                span: 0..0,
                model: None,
            })
        }
        pub(crate) fn t(&self, name: &str, idx: &str) -> Factor {
            let tensor = self.hir.tensors.position(|t| t.name == name).expect("tensor declared");
            Factor::Tensor(TensorRef { tensor, indices: self.ixs(idx), span: 0..0 })
        }
        pub(crate) fn stmt(&mut self, lhs: &str, idx: &str, accumulate: bool, terms: Vec<Term>) {
            let tensor = self.hir.tensors.position(|t| t.name == lhs).expect("tensor declared");
            let s = Stmt {
                lhs: TensorRef { tensor, indices: self.ixs(idx), span: 0..0 },
                accumulate,
                rhs: Expr { terms, span: 0..0 },
                span: 0..0,
            };
            if self.hir.units.is_empty() {
                self.unit("test", UnitKind::Program);
            }
            self.hir.units.last_mut().expect("a unit").stmts.push(s);
        }
        /// Starts a unit; later statements go into it.
        pub(crate) fn unit(&mut self, name: &str, kind: UnitKind) {
            self.hir.units.push(Unit { name: name.into(), kind, stmts: vec![], span: 0..0, sliced: Vec::new() });
        }
    }

    pub(crate) fn term(coef: f64, factors: Vec<Factor>) -> Term {
        Term { coef, factors, span: 0..0 }
    }
    pub(crate) fn sum(terms: Vec<Term>, free: Vec<IndexId>) -> Factor {
        Factor::Sum { arg: Box::new(Expr { terms, span: 0..0 }), free, span: 0..0 }
    }
    pub(crate) fn call(func: Func, terms: Vec<Term>, free: Vec<IndexId>) -> Factor {
        Factor::Call { func, arg: Box::new(Expr { terms, span: 0..0 }), free, span: 0..0 }
    }
}

#[cfg(test)]
mod tests {
    use super::test_hir::*;
    use super::*;
    use crate::sema::hir::*;

    fn dense(shape: &[usize], data: &[f64]) -> Dense {
        Dense::from_vec(shape.to_vec(), data.to_vec())
    }
    fn run(b: &B, inputs: &[(&str, Dense)]) -> HashMap<String, Dense> {
        let map = inputs.iter().map(|(n, d)| (b.hir.tensor_by_name(n).unwrap(), d.clone())).collect();
        run_unit(&b.hir, UnitId::new(0), &map)
            .unwrap()
            .into_iter()
            .map(|(t, d)| (b.hir.tensors[t].name.clone(), d))
            .collect()
    }

    /// ranges: I (size 2) with i, j, k; J (size 3) with p, q.
    fn base() -> B {
        let mut b = B::default();
        let r2 = b.range("I", 2);
        let r3 = b.range("J", 3);
        b.indices("ijk", r2);
        b.indices("pq", r3);
        b
    }

    #[test]
    fn matmul() {
        let mut b = base();
        b.tensor("A", Role::Input, "ip");
        b.tensor("B", Role::Input, "pj");
        b.tensor("C", Role::Output, "ij");
        let f = vec![b.t("A", "ip"), b.t("B", "pj")];
        b.stmt("C", "ij", false, vec![term(1.0, f)]);
        let a = dense(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let bb = dense(&[3, 2], &[7., 8., 9., 10., 11., 12.]);
        let out = run(&b, &[("A", a), ("B", bb)]);
        assert_eq!(out["C"], dense(&[2, 2], &[58., 64., 139., 154.]));
    }

    #[test]
    fn trace_diagonal_and_scalar_output() {
        let mut b = base();
        b.tensor("A", Role::Input, "pq");
        b.tensor("t", Role::Output, "");
        b.tensor("d", Role::Output, "p");
        let f = vec![b.t("A", "pp")];
        b.stmt("t", "", false, vec![term(1.0, f)]);
        let f = vec![b.t("A", "pp")];
        b.stmt("d", "p", false, vec![term(2.0, f)]);
        let a = dense(&[3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        let out = run(&b, &[("A", a)]);
        assert_eq!(out["t"], Dense::scalar(15.0));
        assert_eq!(out["d"], dense(&[3], &[2., 10., 18.]));
    }

    #[test]
    fn transpose_outer_product_and_full_contraction() {
        let mut b = base();
        b.tensor("u", Role::Input, "p");
        b.tensor("v", Role::Input, "i");
        b.tensor("O", Role::Output, "ip");
        b.tensor("s", Role::Output, "");
        let f = vec![b.t("u", "p"), b.t("v", "i")];
        b.stmt("O", "ip", false, vec![term(1.0, f)]);
        let f = vec![b.t("O", "ip"), b.t("O", "ip")];
        b.stmt("s", "", false, vec![term(1.0, f)]);
        let out = run(&b, &[("u", dense(&[3], &[1., 2., 3.])), ("v", dense(&[2], &[-1., 2.]))]);
        assert_eq!(out["O"], dense(&[2, 3], &[-1., -2., -3., 2., 4., 6.]));
        assert_eq!(out["s"], Dense::scalar(70.0));
    }

    #[test]
    fn accumulate_and_coefficients() {
        let mut b = base();
        b.tensor("A", Role::Input, "ij");
        b.tensor("B", Role::Input, "ij");
        b.tensor("C", Role::Output, "ij");
        // C[i,j] = 2*A[i,j] - 0.5*B[j,i];  C[i,j] += A[i,k]*B[k,j] + 3;
        let t1 = vec![term(2.0, vec![b.t("A", "ij")]), term(-0.5, vec![b.t("B", "ji")])];
        b.stmt("C", "ij", false, t1);
        let t2 = vec![term(1.0, vec![b.t("A", "ik"), b.t("B", "kj")]), term(3.0, vec![])];
        b.stmt("C", "ij", true, t2);
        let a = dense(&[2, 2], &[1., 2., 3., 4.]);
        let bb = dense(&[2, 2], &[5., 6., 7., 8.]);
        let out = run(&b, &[("A", a), ("B", bb)]);
        // first: [[2-2.5, 4-3.5], [6-3, 8-4]] = [[-0.5, 0.5], [3, 4]]
        // A·B = [[19, 22], [43, 50]], +3
        assert_eq!(out["C"], dense(&[2, 2], &[-0.5 + 22., 0.5 + 25., 3. + 46., 4. + 53.]));
    }

    #[test]
    fn plus_equals_into_unwritten_output_adds_to_zero() {
        let mut b = base();
        b.tensor("A", Role::Input, "i");
        b.tensor("C", Role::Output, "i");
        let f = vec![b.t("A", "i")];
        b.stmt("C", "i", true, vec![term(1.0, f.clone())]);
        b.stmt("C", "i", true, vec![term(1.0, f)]);
        let out = run(&b, &[("A", dense(&[2], &[1.5, -2.]))]);
        assert_eq!(out["C"], dense(&[2], &[3., -4.]));
    }

    #[test]
    fn statement_reading_its_own_target_sees_the_old_value() {
        let mut b = base();
        b.tensor("A", Role::Input, "ij");
        b.tensor("C", Role::Output, "ij");
        let f = vec![b.t("A", "ij")];
        b.stmt("C", "ij", false, vec![term(1.0, f)]);
        let f = vec![b.t("C", "ji")];
        b.stmt("C", "ij", true, vec![term(1.0, f)]); // C += C^T
        let out = run(&b, &[("A", dense(&[2, 2], &[1., 2., 3., 4.]))]);
        assert_eq!(out["C"], dense(&[2, 2], &[2., 5., 5., 8.]));
    }

    #[test]
    fn function_call_with_inner_summation() {
        // Y[i] = relu(A[i,p] * x[p]) * w[i]  — p summed inside relu.
        let mut b = base();
        b.tensor("A", Role::Input, "ip");
        b.tensor("x", Role::Input, "p");
        b.tensor("w", Role::Input, "i");
        b.tensor("Y", Role::Output, "i");
        let inner = vec![term(1.0, vec![b.t("A", "ip"), b.t("x", "p")])];
        let f = vec![call(Func::Relu, inner, b.ixs("i")), b.t("w", "i")];
        b.stmt("Y", "i", false, vec![term(1.0, f)]);
        let a = dense(&[2, 3], &[1., 2., 3., -4., 5., -6.]);
        let out = run(&b, &[("A", a), ("x", dense(&[3], &[1., 1., 1.])), ("w", dense(&[2], &[10., 10.]))]);
        // A·x = [6, -5] → relu → [6, 0]
        assert_eq!(out["Y"], dense(&[2], &[60., 0.]));
    }

    #[test]
    fn call_summed_outside() {
        // s = exp(A[i,j]) * B[i,j]: the call is over (i,j), summed outside it.
        let mut b = base();
        b.tensor("A", Role::Input, "ij");
        b.tensor("B", Role::Input, "ij");
        b.tensor("s", Role::Output, "");
        let f = vec![call(Func::Exp, vec![term(1.0, vec![b.t("A", "ij")])], b.ixs("ij")), b.t("B", "ij")];
        b.stmt("s", "", false, vec![term(1.0, f)]);
        let out = run(&b, &[("A", dense(&[2, 2], &[0., 1., 2., 0.])), ("B", dense(&[2, 2], &[1., 1., 1., 1.]))]);
        let expect = 1.0 + 1f64.exp() + 2f64.exp() + 1.0;
        assert!((out["s"].data[0] - expect).abs() < 1e-14);
    }

    #[test]
    fn parenthesised_sum() {
        // R[i,j] = A[i,k] * (B[k,j] + 2*C[k,j])
        let mut b = base();
        for n in ["A", "B", "C"] {
            b.tensor(n, Role::Input, "ij");
        }
        b.tensor("R", Role::Output, "ij");
        let inner = vec![term(1.0, vec![b.t("B", "kj")]), term(2.0, vec![b.t("C", "kj")])];
        let f = vec![b.t("A", "ik"), sum(inner, b.ixs("kj"))];
        b.stmt("R", "ij", false, vec![term(1.0, f)]);
        let a = dense(&[2, 2], &[1., 2., 3., 4.]);
        let bb = dense(&[2, 2], &[1., 0., 0., 1.]);
        let c = dense(&[2, 2], &[0., 1., 1., 0.]);
        // B + 2C = [[1, 2], [2, 1]]
        let out = run(&b, &[("A", a), ("B", bb), ("C", c)]);
        assert_eq!(out["R"], dense(&[2, 2], &[5., 4., 11., 10.]));
    }

    #[test]
    fn sum_with_broadcast_term_and_inner_summed_index() {
        // r[i] = (A[i,k] * v[k] + 1) * u[i]: k summed inside the parentheses only.
        let mut b = base();
        b.tensor("A", Role::Input, "ik");
        b.tensor("v", Role::Input, "k");
        b.tensor("u", Role::Input, "i");
        b.tensor("r", Role::Output, "i");
        let inner = vec![term(1.0, vec![b.t("A", "ik"), b.t("v", "k")]), term(1.0, vec![])];
        let f = vec![sum(inner, b.ixs("i")), b.t("u", "i")];
        b.stmt("r", "i", false, vec![term(1.0, f)]);
        let out = run(
            &b,
            &[("A", dense(&[2, 2], &[1., 2., 3., 4.])), ("v", dense(&[2], &[1., 0.])), ("u", dense(&[2], &[2., 3.]))],
        );
        // A·v + 1 = [2, 4]
        assert_eq!(out["r"], dense(&[2], &[4., 12.]));
    }

    #[test]
    fn temporaries_are_not_returned() {
        let mut b = base();
        b.tensor("A", Role::Input, "i");
        b.tensor("X", Role::Temporary, "i");
        b.tensor("s", Role::Output, "");
        let f = vec![b.t("A", "i"), b.t("A", "i")];
        b.stmt("X", "i", false, vec![term(1.0, f)]);
        let f = vec![b.t("X", "i")];
        b.stmt("s", "", false, vec![term(1.0, f)]);
        let out = run(&b, &[("A", dense(&[2], &[3., 4.]))]);
        assert_eq!(out.len(), 1);
        assert_eq!(out["s"], Dense::scalar(25.0));
    }

    #[test]
    fn missing_input_and_wrong_shape_are_errors() {
        let mut b = base();
        b.tensor("A", Role::Input, "i");
        b.tensor("s", Role::Output, "");
        let f = vec![b.t("A", "i")];
        b.stmt("s", "", false, vec![term(1.0, f)]);
        let err = run_unit(&b.hir, UnitId::new(0), &HashMap::new()).unwrap_err();
        assert!(matches!(err, InterpError::MissingInput { .. }), "{err}");
        let bad = HashMap::from([(TensorId::new(0), dense(&[3], &[1., 2., 3.]))]);
        let err = run_unit(&b.hir, UnitId::new(0), &bad).unwrap_err();
        assert_eq!(err.to_string(), "input `A` has shape [3], expected [2]");
    }

    #[test]
    fn size_limits_are_errors() {
        let mut b = B::default();
        let big = b.range("N", 1 << 20);
        b.indices("abcd", big);
        b.tensor("A", Role::Input, "ab");
        b.tensor("C", Role::Output, "abc");
        let err = fill_random(&b.hir, TensorId::new(0), 1).unwrap_err();
        assert!(err.to_string().contains("limit of 2^31"), "{err}");

        let mut b = B::default();
        let r = b.range("N", 1 << 11);
        b.indices("abcd", r);
        b.tensor("A", Role::Input, "ab");
        b.tensor("s", Role::Output, "");
        // Σ A[a,b] A[b,c] A[c,d] A[d,a]: 2^44 iterations.
        let f = vec![b.t("A", "ab"), b.t("A", "bc"), b.t("A", "cd"), b.t("A", "da")];
        b.stmt("s", "", false, vec![term(1.0, f)]);
        let inputs = HashMap::from([(TensorId::new(0), Dense::zeros("A", vec![1 << 11, 1 << 11]).unwrap())]);
        let err = run_unit(&b.hir, UnitId::new(0), &inputs).unwrap_err();
        assert!(matches!(err, InterpError::LoopTooLarge { .. }), "{err}");
        assert!(err.to_string().contains("17592186044416 loop iterations"), "{err}");

        let err = Dense::zeros("x", vec![usize::MAX, usize::MAX, usize::MAX]).unwrap_err();
        assert!(err.to_string().contains("more than 2^128"), "{err}");
    }

    #[test]
    fn random_fill_is_deterministic_and_in_range() {
        let mut b = base();
        b.tensor("A", Role::Input, "ip");
        b.tensor("Z", Role::Input, "ip");
        let x = fill_random(&b.hir, TensorId::new(0), 7).unwrap();
        assert_eq!(x, fill_random(&b.hir, TensorId::new(0), 7).unwrap());
        assert_ne!(x, fill_random(&b.hir, TensorId::new(0), 8).unwrap());
        assert_ne!(x.data, fill_random(&b.hir, TensorId::new(1), 7).unwrap().data);
        assert!(x.data.iter().all(|v| (-1.0..1.0).contains(v)));
        assert_eq!(x.data[4], random_value(7, "A", 4));
    }

    #[test]
    fn random_fill_honours_symmetry_exactly() {
        let mut b = B::default();
        let r = b.range("N", 4);
        b.indices("pqrs", r);
        let sym = vec![
            SymGroup { kind: SymKind::Symmetric, positions: vec![0, 1] },
            SymGroup { kind: SymKind::Symmetric, positions: vec![2, 3] },
        ];
        b.tensor_sym("A", Role::Input, "pqrs", sym);
        let anti = vec![
            SymGroup { kind: SymKind::Antisymmetric, positions: vec![0, 1] },
            SymGroup { kind: SymKind::Antisymmetric, positions: vec![2, 3] },
        ];
        b.tensor_sym("T", Role::Input, "pqrs", anti);
        let full = vec![SymGroup { kind: SymKind::Antisymmetric, positions: vec![0, 1, 2] }];
        b.tensor_sym("U", Role::Input, "pqr", full);
        let sym3 = vec![SymGroup { kind: SymKind::Symmetric, positions: vec![0, 1, 2] }];
        b.tensor_sym("S", Role::Input, "pqr", sym3);

        let a = fill_random(&b.hir, TensorId::new(0), 3).unwrap();
        let t = fill_random(&b.hir, TensorId::new(1), 3).unwrap();
        let u = fill_random(&b.hir, TensorId::new(2), 3).unwrap();
        let s = fill_random(&b.hir, TensorId::new(3), 3).unwrap();
        let n = 4;
        for p in 0..n {
            for q in 0..n {
                for r in 0..n {
                    for s_ in 0..n {
                        let v = a.get(&[p, q, r, s_]);
                        assert_eq!(v, a.get(&[q, p, r, s_]));
                        assert_eq!(v, a.get(&[p, q, s_, r]));
                        assert_eq!(v, a.get(&[q, p, s_, r]));
                        let w = t.get(&[p, q, r, s_]);
                        assert_eq!(w, -t.get(&[q, p, r, s_]));
                        assert_eq!(w, -t.get(&[p, q, s_, r]));
                        assert_eq!(w, t.get(&[q, p, s_, r]));
                        if p == q || r == s_ {
                            assert_eq!(w.to_bits(), 0.0f64.to_bits(), "exact +0 at {p} {q} {r} {s_}");
                        } else {
                            assert_ne!(w, 0.0);
                        }
                    }
                }
                for r in 0..n {
                    let v = u.get(&[p, q, r]);
                    // every permutation with its sign
                    assert_eq!(v, -u.get(&[q, p, r]));
                    assert_eq!(v, -u.get(&[p, r, q]));
                    assert_eq!(v, -u.get(&[r, q, p]));
                    assert_eq!(v, u.get(&[q, r, p]));
                    assert_eq!(v, u.get(&[r, p, q]));
                    if p == q || q == r || p == r {
                        assert_eq!(v, 0.0);
                    }
                    let w = s.get(&[p, q, r]);
                    for perm in [[q, p, r], [p, r, q], [r, q, p], [q, r, p], [r, p, q]] {
                        assert_eq!(w, s.get(&perm));
                    }
                }
            }
        }
        assert_eq!(symmetry_violation(&a, &b.hir.tensors[TensorId::new(0)].symmetry, 1e-12), None);
        assert_eq!(symmetry_violation(&t, &b.hir.tensors[TensorId::new(1)].symmetry, 1e-12), None);
        assert_eq!(symmetry_violation(&u, &b.hir.tensors[TensorId::new(2)].symmetry, 1e-12), None);
        // An unsymmetric tensor is caught.
        let plain = dense(&[2, 2], &[1., 2., 3., 4.]);
        let g = [SymGroup { kind: SymKind::Symmetric, positions: vec![0, 1] }];
        let msg = symmetry_violation(&plain, &g, 1e-12).unwrap();
        assert!(msg.contains("not symmetric in dimensions [0, 1]: element [0, 1] = 2e0"), "{msg}");
    }

    #[test]
    fn f32_fill_is_rounded() {
        let mut b = base();
        b.tensor("A", Role::Input, "ip");
        b.hir.tensors[TensorId::new(0)].elem = ElemType::F32;
        let x = fill_random(&b.hir, TensorId::new(0), 1).unwrap();
        assert!(x.data.iter().all(|&v| v == v as f32 as f64));
        assert_eq!(x.data[2], random_value(1, "A", 2) as f32 as f64);
    }

    #[test]
    fn random_inputs_covers_unit_inputs() {
        let mut b = base();
        b.tensor("A", Role::Input, "ip");
        b.tensor("W", Role::Param, "p");
        b.tensor("Y", Role::Output, "i");
        let f = vec![b.t("A", "ip"), b.t("W", "p")];
        b.stmt("Y", "i", false, vec![term(1.0, f)]);
        let inputs = random_inputs(&b.hir, UnitId::new(0), 5).unwrap();
        assert_eq!(inputs.len(), 2);
        let out = run_unit(&b.hir, UnitId::new(0), &inputs).unwrap();
        let (a, w) = (&inputs[&TensorId::new(0)], &inputs[&TensorId::new(1)]);
        for i in 0..2 {
            let expect: f64 = (0..3).map(|p| a.get(&[i, p]) * w.get(&[p])).sum();
            assert!((out[&TensorId::new(2)].data[i] - expect).abs() < 1e-15);
        }
    }

    fn compiled(src: &str) -> Hir {
        let (hir, diags) = crate::compile(src, "t");
        hir.unwrap_or_else(|| panic!("{diags:?}"))
    }

    #[test]
    fn random_fill_honours_pair_symmetry() {
        let hir = compiled(
            "range N = 4; index p, q, r, s : N; range M = 3; index a, i, b, j : M;
             input tensor G[p,q,r,s] symmetric(p q)(r s)((p q)(r s));
             input tensor U[a,i,b,j] antisymmetric((a i)(b j));
             output tensor E; E = G[p,q,r,s] * G[p,q,r,s] + U[a,i,b,j] * U[a,i,b,j];",
        );
        let g = fill_random(&hir, TensorId::new(0), 3).unwrap();
        let u = fill_random(&hir, TensorId::new(1), 3).unwrap();
        for_each_index(&g.shape, |x| {
            let v = g.get(x);
            for y in
                [[x[1], x[0], x[2], x[3]], [x[0], x[1], x[3], x[2]], [x[2], x[3], x[0], x[1]], [x[3], x[2], x[1], x[0]]]
            {
                assert_eq!(g.get(&y), v, "{x:?} {y:?}");
            }
            assert_ne!(v, 0.0);
        });
        // The representative's value: the smallest image of [3,2,1,0] is [0,1,2,3].
        assert_eq!(g.get(&[3, 2, 1, 0]), random_value(3, "G", linear(&[4; 4], &[0, 1, 2, 3]) as u64));
        for_each_index(&u.shape, |x| {
            assert_eq!(u.get(&[x[2], x[3], x[0], x[1]]), -u.get(x), "{x:?}");
            assert_eq!(u.get(x) == 0.0, x[0] == x[2] && x[1] == x[3], "{x:?}");
        });
        assert_eq!(tensor_symmetry_violation(&g, &hir.tensors[TensorId::new(0)], 1e-12), None);
        assert_eq!(tensor_symmetry_violation(&u, &hir.tensors[TensorId::new(1)], 1e-12), None);
        let msg = tensor_symmetry_violation(&g, &hir.tensors[TensorId::new(1)], 1e-12).unwrap();
        assert!(msg.contains("not antisymmetric under exchanging dimensions [0, 1] with [2, 3]"), "{msg}");
    }

    #[test]
    fn random_fill_is_zero_outside_blocks() {
        let hir = compiled(
            "range O = 4 spin(2, 2); range V = 6 spin(3, 3); range P = 4 irreps(1, 1, 1, 1); range W = 4 tile 2;
             index i, j : O; index a, b : V; index p, q : P; index w, x : W;
             input tensor T[a,b,i,j] antisymmetric(a b)(i j) spin(a b | i j);
             input tensor F[p,q] symmetric(p q) irrep(p q);
             input tensor D[w,x] tiles[[0,1], [1,1]];
             output tensor E; E = T[a,b,i,j] * T[a,b,i,j] + F[p,q] * F[p,q] + D[w,x] * D[w,x];",
        );
        let (t, f, d) = (TensorId::new(0), TensorId::new(1), TensorId::new(2));
        let tv = fill_random(&hir, t, 7).unwrap();
        for_each_index(&tv.shape, |x| {
            let alpha = |v: usize, half: usize| usize::from(v < half);
            let allowed = alpha(x[0], 3) + alpha(x[1], 3) == alpha(x[2], 2) + alpha(x[3], 2);
            let distinct = x[0] != x[1] && x[2] != x[3];
            assert_eq!(tv.get(x) != 0.0, allowed && distinct, "{x:?}");
        });
        let fv = fill_random(&hir, f, 7).unwrap();
        for_each_index(&fv.shape, |x| assert_eq!(fv.get(x) != 0.0, x[0] == x[1], "{x:?}"));
        let dv = fill_random(&hir, d, 7).unwrap();
        for_each_index(&dv.shape, |x| assert_eq!(dv.get(x) != 0.0, x[1] >= 2, "{x:?}"));
        // Elements of an allowed block keep their dense values.
        assert_eq!(dv.get(&[1, 3]), random_value(7, "D", 7));
        for (id, v) in [(t, &tv), (f, &fv), (d, &dv)] {
            assert_eq!(block_violation(&hir, id, v), None);
        }
        let mut bad = dv.clone();
        bad.data[4] = 0.5; // [1, 0]: tile [0,0]
        let msg = block_violation(&hir, d, &bad).unwrap();
        assert!(msg.contains("element [1, 0] = 5e-1 is outside the blocks allowed by tiles[[0,1], [1,1]]"), "{msg}");
    }

    /// The first element a plain walk over index vectors finds breaking the
    /// swaps (the check as it was written before the stride walk).
    fn naive_first_violation(x: &Dense, swaps: &[(Vec<usize>, SymKind)], tol: f64) -> Option<(Vec<usize>, usize)> {
        let mut found = None;
        for_each_index(&x.shape, |idx| {
            if found.is_some() {
                return;
            }
            for (s, (perm, kind)) in swaps.iter().enumerate() {
                let other: Vec<usize> = (0..idx.len()).map(|d| idx[perm[d]]).collect();
                let b = x.get(&other);
                let expect = if *kind == SymKind::Antisymmetric { -b } else { b };
                if (x.get(idx) - expect).abs() > tol {
                    found = Some((idx.to_vec(), s));
                    return;
                }
            }
        });
        found
    }

    #[test]
    fn the_stride_walk_finds_the_first_broken_element_the_index_walk_finds() {
        use crate::sema::hir::PairGroup;
        let mut rng = 12345u64;
        let mut next = |n: usize| {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (rng >> 33) as usize % n
        };
        for case in 0..40 {
            // A (p q)(r s)((p q)(r s))-symmetric or antisymmetric tensor of shape
            // [n, n, m, m] or [n, n, n, n], made so from random values.
            let n = 2 + next(4);
            let m = if case % 2 == 0 { n } else { 2 + next(4) };
            let kind = if case % 3 == 0 { SymKind::Antisymmetric } else { SymKind::Symmetric };
            let sign = if kind == SymKind::Antisymmetric { -1.0 } else { 1.0 };
            let shape = vec![n, n, m, m];
            let len: usize = shape.iter().product();
            let r: Vec<f64> = (0..len).map(|_| next(1000) as f64 / 100.0).collect();
            // Symmetrised: the sum over the group of the signed permuted values.
            let mut x = Dense { shape: shape.clone(), data: vec![0.0; len] };
            for_each_index(&shape, |i| {
                let mut v = 0.0;
                for (a, b, w) in [(false, false, 1.0), (true, false, sign), (false, true, sign), (true, true, 1.0)] {
                    let (p, q) = if a { (i[1], i[0]) } else { (i[0], i[1]) };
                    let (u, t) = if b { (i[3], i[2]) } else { (i[2], i[3]) };
                    v += w * r[crate::tensor::linear(&shape, &[p, q, u, t])];
                    if n == m {
                        v += w * r[crate::tensor::linear(&shape, &[u, t, p, q])];
                    }
                }
                x.data[crate::tensor::linear(&shape, i)] = v;
            });
            let groups = vec![SymGroup { kind, positions: vec![0, 1] }, SymGroup { kind, positions: vec![2, 3] }];
            let pairs = if n == m {
                vec![PairGroup { kind: SymKind::Symmetric, members: vec![vec![0, 1], vec![2, 3]] }]
            } else {
                Vec::new()
            };
            assert_eq!(symmetry_violation(&x, &groups, 1e-12), None, "case {case}");
            // Break some elements (maybe none, maybe several).
            for _ in 0..next(3) {
                let at = next(x.data.len());
                x.data[at] += 0.5;
            }
            let mut swaps: Vec<(Vec<usize>, SymKind)> = vec![(vec![1, 0, 2, 3], kind), (vec![0, 1, 3, 2], kind)];
            let want = naive_first_violation(&x, &swaps, 0.0);
            let got = symmetry_violation(&x, &groups, 0.0);
            match &want {
                None => assert_eq!(got, None, "case {case}"),
                Some((idx, _)) => {
                    let msg = got.unwrap_or_else(|| panic!("case {case}: missed {idx:?}"));
                    assert!(msg.contains(&format!("element {idx:?} =")), "case {case}: {msg} (want {idx:?})");
                }
            }
            if !pairs.is_empty() {
                swaps = vec![(vec![2, 3, 0, 1], SymKind::Symmetric)];
                let want = naive_first_violation(&x, &swaps, 0.0);
                let got = pair_symmetry_violation(&x, &pairs, 0.0);
                assert_eq!(got.is_some(), want.is_some(), "case {case}");
                if let (Some(msg), Some((idx, _))) = (got, want) {
                    assert!(msg.contains(&format!("element {idx:?} =")), "case {case}: {msg} (want {idx:?})");
                }
            }
        }
    }
}
