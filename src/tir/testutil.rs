//! Test helpers: a compact HIR builder, and the reference interpreter run statement
//! by statement so that the symmetry the optimizer declares for its temporaries is
//! checked as well as the outputs.

use std::collections::HashMap;

use crate::interp::{block_violation, exec_stmt, fill_random, tensor_symmetry_violation};
use crate::sema::hir::*;
use crate::tensor::Dense;

/// Random choices for random-program tests: `rnd(k)` is in `0..k` (0 for
/// `k = 0`), from an xorshift generator started at `seed · φ ⊕ salt` (the salt
/// keeps generators of different tests apart on the same seeds).
pub fn picker(seed: u64, salt: u64) -> impl FnMut(usize) -> usize {
    let mut st = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    move |k: usize| -> usize {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        (st % k.max(1) as u64) as usize
    }
}

/// Builds HIR by hand: a range per distinct size (`N<size>`), an index per letter.
pub struct Builder {
    pub hir: Hir,
    letters: HashMap<char, IndexId>,
}

impl Builder {
    /// `sizes`: (letter, size) for every index letter used.
    pub fn new(sizes: &[(char, usize)]) -> Builder {
        let mut hir = Hir::default();
        let mut letters = HashMap::new();
        for &(c, n) in sizes {
            let r = match hir.ranges.position(|r| r.size == n) {
                Some(r) => r,
                None => hir.ranges.push(Range {
                    name: format!("N{n}"),
                    size: n,
                    span: 0..0,
                    model: None,
                    size_kind: SizeKind::Fixed,
                    tiling: Default::default(),
                    parts: Vec::new(),
                }),
            };
            letters.insert(c, hir.indices.push(Index { name: c.to_string(), range: r, span: 0..0, model: None }));
        }
        hir.units.push(Unit {
            name: "main".into(),
            kind: UnitKind::Program,
            stmts: Vec::new(),
            span: 0..0,
            sliced: Vec::new(),
        });
        Builder { hir, letters }
    }

    pub fn idx(&self, s: &str) -> Vec<IndexId> {
        s.chars().map(|c| self.letters[&c]).collect()
    }

    /// Declares a tensor whose dimensions are the ranges of the letters of `dims`;
    /// `sym`: groups of dimension positions (symmetric).
    pub fn tensor(&mut self, name: &str, role: Role, dims: &str, sym: &[&[usize]]) -> TensorId {
        let dims = self.idx(dims).into_iter().map(|i| self.hir.indices[i].range).collect();
        let symmetry = sym.iter().map(|g| SymGroup { kind: SymKind::Symmetric, positions: g.to_vec() }).collect();
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

    pub fn r(&self, t: TensorId, idx: &str) -> Factor {
        Factor::Tensor(TensorRef { tensor: t, indices: self.idx(idx), span: 0..0 })
    }

    /// `func(inner)`, over `inner`'s distinct indices (as the checker gives them).
    pub fn call(&self, func: crate::sema::hir::Func, inner: Factor) -> Factor {
        let mut free: Vec<IndexId> = Vec::new();
        for &i in inner.indices() {
            if !free.contains(&i) {
                free.push(i);
            }
        }
        let arg = Expr { terms: vec![self.term(1.0, vec![inner])], span: 0..0 };
        Factor::Call { func, arg: Box::new(arg), free, span: 0..0 }
    }

    pub fn term(&self, coef: f64, factors: Vec<Factor>) -> Term {
        Term { coef, factors, span: 0..0 }
    }

    pub fn stmt(&mut self, lhs: TensorId, idx: &str, accumulate: bool, terms: Vec<Term>) {
        let lhs = TensorRef { tensor: lhs, indices: self.idx(idx), span: 0..0 };
        self.hir.units[UnitId::new(0)].stmts.push(Stmt {
            lhs,
            accumulate,
            rhs: Expr { terms, span: 0..0 },
            span: 0..0,
        });
    }

    /// One statement `out = in1 * in2 * ...` from an einsum spec like "ik,kj->ij".
    pub fn einsum(spec: &str, sizes: &[(char, usize)]) -> Hir {
        let mut b = Builder::new(sizes);
        let (ins, out) = spec.split_once("->").unwrap();
        let mut factors = Vec::new();
        for (k, s) in ins.split(',').enumerate() {
            let t = b.tensor(&format!("X{k}"), Role::Input, s, &[]);
            factors.push(b.r(t, s));
        }
        let o = b.tensor("Out", Role::Output, out, &[]);
        let term = b.term(1.0, factors);
        b.stmt(o, out, false, vec![term]);
        b.hir
    }
}

/// The interpreter's deterministic fill of every input of a unit (symmetric groups
/// filled symmetrically, antisymmetric ones antisymmetrically).
pub fn random_inputs(hir: &Hir, u: UnitId, seed: u64) -> HashMap<TensorId, Dense> {
    hir.unit_inputs(u).into_iter().map(|t| (t, fill_random(hir, t, seed).expect("test tensors are small"))).collect()
}

/// Runs a unit with the reference interpreter. Errors if a written tensor violates
/// its declared symmetry (checks the optimizer's propagated symmetry of temporaries).
pub fn run_unit(hir: &Hir, u: UnitId, inputs: &HashMap<TensorId, Dense>) -> Result<HashMap<TensorId, Dense>, String> {
    let mut env: HashMap<TensorId, Dense> = inputs.clone();
    for (k, s) in hir.units[u].stmts.iter().enumerate() {
        exec_stmt(hir, s, &mut env, &format!("statement {}", k + 1)).map_err(|e| e.to_string())?;
        let t = s.lhs.tensor;
        if let Some(v) =
            tensor_symmetry_violation(&env[&t], &hir.tensors[t], 1e-9).or_else(|| block_violation(hir, t, &env[&t]))
        {
            return Err(format!("{} violates its declared symmetry: {v}", hir.tensors[t].name));
        }
    }
    Ok(env.into_iter().filter(|(t, _)| hir.tensors[*t].role == Role::Output).collect())
}

/// max |a - b| ≤ tol × max(1, max |a|) over every output.
pub fn assert_close(a: &HashMap<TensorId, Dense>, b: &HashMap<TensorId, Dense>, tol: f64) -> Result<(), String> {
    for (t, x) in a {
        let y = b.get(t).ok_or_else(|| format!("output {t:?} missing"))?;
        let scale = x.data.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (u, v) in x.data.iter().zip(&y.data) {
            if (u - v).abs() > tol * scale {
                return Err(format!("output {t:?}: {u} vs {v}"));
            }
        }
    }
    Ok(())
}
