//! Test helpers: a compact HIR builder and a tiny dense evaluator (naive loops),
//! standing in for the reference interpreter until it lands. `run_unit` has the
//! interpreter's intended signature so tests can switch to `crate::interp`.

use std::collections::HashMap;

use crate::sema::hir::*;

/// A dense row-major f64 tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Dense {
    pub fn zeros(shape: Vec<usize>) -> Dense {
        let n = shape.iter().product();
        Dense { shape, data: vec![0.0; n] }
    }
    fn offset(&self, at: &[usize]) -> usize {
        at.iter().zip(&self.shape).fold(0, |acc, (&i, &n)| acc * n + i)
    }
    pub fn get(&self, at: &[usize]) -> f64 {
        self.data[self.offset(at)]
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
            let r = match hir.ranges.iter().position(|r| r.size == n) {
                Some(r) => r,
                None => {
                    hir.ranges.push(Range { name: format!("N{n}"), size: n, span: 0..0, model: None });
                    hir.ranges.len() - 1
                }
            };
            hir.indices.push(Index { name: c.to_string(), range: r, span: 0..0, model: None });
            letters.insert(c, hir.indices.len() - 1);
        }
        hir.units.push(Unit { name: "main".into(), kind: UnitKind::Program, stmts: Vec::new(), span: 0..0 });
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
        self.hir.tensors.push(Tensor { name: name.into(), role, elem: ElemType::F64, dims, symmetry, span: 0..0, model: None });
        self.hir.tensors.len() - 1
    }

    pub fn r(&self, t: TensorId, idx: &str) -> Factor {
        Factor::Tensor(TensorRef { tensor: t, indices: self.idx(idx), span: 0..0 })
    }

    pub fn term(&self, coef: f64, factors: Vec<Factor>) -> Term {
        Term { coef, factors, span: 0..0 }
    }

    pub fn stmt(&mut self, lhs: TensorId, idx: &str, accumulate: bool, terms: Vec<Term>) {
        let lhs = TensorRef { tensor: lhs, indices: self.idx(idx), span: 0..0 };
        self.hir.units[0].stmts.push(Stmt { lhs, accumulate, rhs: Expr { terms, span: 0..0 }, span: 0..0 });
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

/// Deterministic input fill; symmetric groups filled symmetrically (antisymmetric:
/// antisymmetrically).
pub fn random_inputs(hir: &Hir, u: UnitId, seed: u64) -> HashMap<TensorId, Dense> {
    let mut state = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let mut out = HashMap::new();
    for t in hir.unit_inputs(u) {
        let mut d = Dense::zeros(hir.shape(t));
        for x in d.data.iter_mut() {
            *x = next();
        }
        for g in &hir.tensors[t].symmetry {
            d = symmetrize(&d, g);
        }
        out.insert(t, d);
    }
    out
}

fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.iter().any(|&n| n == 0) {
        return;
    }
    let mut at = vec![0; shape.len()];
    loop {
        f(&at);
        let mut k = shape.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            at[k] += 1;
            if at[k] < shape[k] {
                break;
            }
            at[k] = 0;
        }
    }
}

fn perms(n: usize) -> Vec<(Vec<usize>, f64)> {
    if n == 0 {
        return vec![(vec![], 1.0)];
    }
    let mut out = Vec::new();
    for (p, s) in perms(n - 1) {
        for k in 0..n {
            let mut q = p.clone();
            q.insert(k, n - 1);
            // inserting n-1 at k moves it past (n-1-k) elements
            let sign = if (n - 1 - k) % 2 == 0 { s } else { -s };
            out.push((q, sign));
        }
    }
    out
}

/// Averages over the group's permutations (with signs when antisymmetric).
pub fn symmetrize(d: &Dense, g: &SymGroup) -> Dense {
    let ps = perms(g.positions.len());
    let mut out = Dense::zeros(d.shape.clone());
    for_each_index(&d.shape, |at| {
        let mut acc = 0.0;
        for (p, sign) in &ps {
            let mut src = at.to_vec();
            for (k, &pk) in p.iter().enumerate() {
                src[g.positions[k]] = at[g.positions[pk]];
            }
            let s = if g.kind == SymKind::Antisymmetric { *sign } else { 1.0 };
            acc += s * d.get(&src);
        }
        let o = out.offset(at);
        out.data[o] = acc / ps.len() as f64;
    });
    out
}

/// Runs a unit with naive loops. Errors if a written tensor violates its declared
/// symmetry (checks the optimizer's propagated symmetry of temporaries).
pub fn run_unit(hir: &Hir, u: UnitId, inputs: &HashMap<TensorId, Dense>) -> Result<HashMap<TensorId, Dense>, String> {
    let mut env: HashMap<TensorId, Dense> = inputs.clone();
    for s in &hir.units[u].stmts {
        let t = s.lhs.tensor;
        let val = eval_expr(hir, &s.rhs, &s.lhs.indices, &env)?;
        let old = env.get(&t).cloned().unwrap_or_else(|| Dense::zeros(hir.shape(t)));
        let mut new = if s.accumulate { old } else { Dense::zeros(hir.shape(t)) };
        for (x, v) in new.data.iter_mut().zip(&val.data) {
            *x += v;
        }
        for g in &hir.tensors[t].symmetry {
            let sym = symmetrize(&new, g);
            let scale = new.data.iter().fold(1.0f64, |m, x| m.max(x.abs()));
            for (x, y) in new.data.iter().zip(&sym.data) {
                if (x - y).abs() > 1e-9 * scale {
                    return Err(format!("{} violates its declared symmetry {:?}", hir.tensors[t].name, g));
                }
            }
        }
        env.insert(t, new);
    }
    Ok(env.into_iter().filter(|(t, _)| hir.tensors[*t].role == Role::Output).collect())
}

/// Value of `e` as a tensor over `out` (distinct indices).
fn eval_expr(hir: &Hir, e: &Expr, out: &[IndexId], env: &HashMap<TensorId, Dense>) -> Result<Dense, String> {
    let oshape: Vec<usize> = out.iter().map(|&i| hir.index_size(i)).collect();
    let mut res = Dense::zeros(oshape);
    for t in &e.terms {
        // Materialise opaque factors.
        let mut vals: Vec<(Vec<IndexId>, Dense)> = Vec::new();
        for f in &t.factors {
            match f {
                Factor::Tensor(r) => {
                    let d = env.get(&r.tensor).cloned().unwrap_or_else(|| Dense::zeros(hir.shape(r.tensor)));
                    vals.push((r.indices.clone(), d));
                }
                Factor::Sum { arg, free, .. } => vals.push((free.clone(), eval_expr(hir, arg, free, env)?)),
                Factor::Call { func, arg, free, .. } => {
                    let mut d = eval_expr(hir, arg, free, env)?;
                    d.data.iter_mut().for_each(|x| *x = func.apply(*x));
                    vals.push((free.clone(), d));
                }
            }
        }
        let mut all: Vec<IndexId> = out.to_vec();
        for (ix, _) in &vals {
            for &i in ix {
                if !all.contains(&i) {
                    all.push(i);
                }
            }
        }
        let shape: Vec<usize> = all.iter().map(|&i| hir.index_size(i)).collect();
        let pos: Vec<Vec<usize>> =
            vals.iter().map(|(ix, _)| ix.iter().map(|i| all.iter().position(|x| x == i).unwrap()).collect()).collect();
        let mut buf = Vec::new();
        for_each_index(&shape, |at| {
            let mut p = t.coef;
            for ((_, d), ps) in vals.iter().zip(&pos) {
                buf.clear();
                buf.extend(ps.iter().map(|&k| at[k]));
                p *= d.get(&buf);
            }
            let o = res.offset(&at[..out.len()]);
            res.data[o] += p;
        });
    }
    Ok(res)
}

/// max |a - b| ≤ tol × max(1, max |a|) over every output.
pub fn assert_close(a: &HashMap<TensorId, Dense>, b: &HashMap<TensorId, Dense>, tol: f64) -> Result<(), String> {
    for (t, x) in a {
        let y = b.get(t).ok_or_else(|| format!("output {t} missing"))?;
        let scale = x.data.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (u, v) in x.data.iter().zip(&y.data) {
            if (u - v).abs() > tol * scale {
                return Err(format!("output {t}: {u} vs {v}"));
            }
        }
    }
    Ok(())
}
