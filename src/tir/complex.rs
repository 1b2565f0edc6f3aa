//! Complex lowering: a HIR with `c64`/`c128` tensors → an equivalent HIR of real
//! tensors only, so that the optimizer and every back end (CPU JIT, libraries, GPU
//! plans) run complex programs unchanged.
//!
//! * Each complex tensor `X` becomes two real tensors of its part type (`f32` for
//!   `c64`, `f64` for `c128`): `X_re`, which keeps `X`'s id (so real tensors keep
//!   theirs), and `X_im`, appended ([`ComplexMap::im`]). A name already taken gets
//!   a numeric suffix.
//! * A term with one complex factor `a` gives `re: … a_re`, `im: … a_im`; with two,
//!   `re: a_re b_re − a_im b_im`, `im: a_re b_im + a_im b_re` (real factors and the
//!   coefficient are carried along). A term with three or more complex factors is
//!   first cut into binary products through complex temporaries `_cN` (over the
//!   indices the rest of the term still needs), so it grows 4× rather than 2^k.
//! * `conj(e)` is `(re e, −im e)`; on a real value it is the identity.
//! * A statement `X (+)= e` becomes `X_re (+)= re e; X_im (+)= im e` (`X_im = 0`
//!   when `e` is real); one that reads `X` itself is computed into temporaries
//!   first, so that the imaginary part does not read the new real part.
//!
//! [`crate::sema::complex`] has refused everything else (complex arguments of
//! `exp`, `max`, `where`, …, complex tensors with symmetries), so the lowering is
//! exact: the same sums of products, up to rounding order.

use crate::sema::complex::{expr_is_complex, has_complex};
use crate::sema::hir::{
    collect_reads, Expr, Factor, Func, Hir, IndexId, Role, Stmt, Tensor, TensorId, TensorRef, Term,
};
use std::collections::{HashMap, HashSet};

/// Where the parts of each complex tensor of the source program are in the
/// lowered one: the real part keeps the tensor's id, the imaginary part is `im[&t]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ComplexMap {
    pub im: HashMap<TensorId, TensorId>,
}

impl ComplexMap {
    /// The (re, im) ids of a source tensor; `None` for a real one.
    pub fn parts(&self, t: TensorId) -> Option<(TensorId, TensorId)> {
        self.im.get(&t).map(|&im| (t, im))
    }

    /// Complex values as the lowered program takes them: each real part under the
    /// source tensor's id, each imaginary part (of a complex tensor) under its own.
    pub fn split(
        &self,
        values: &HashMap<TensorId, crate::interp_complex::CDense>,
    ) -> HashMap<TensorId, crate::tensor::Dense> {
        use crate::tensor::Dense;
        let mut parts = HashMap::new();
        for (&t, v) in values {
            parts.insert(t, Dense { shape: v.shape.clone(), data: v.data.iter().map(|z| z.re).collect() });
            if let Some((_, im)) = self.parts(t) {
                parts.insert(im, Dense { shape: v.shape.clone(), data: v.data.iter().map(|z| z.im).collect() });
            }
        }
        parts
    }

    /// Source tensor `t`'s complex value from the lowered program's `parts`;
    /// `None` when one of them is missing.
    pub fn join(
        &self,
        t: TensorId,
        parts: &HashMap<TensorId, crate::tensor::Dense>,
    ) -> Option<crate::interp_complex::CDense> {
        let re = parts.get(&t)?;
        let im = match self.parts(t) {
            Some((_, im)) => Some(parts.get(&im)?),
            None => None,
        };
        Some(join_parts(re, im))
    }
}

/// Complex values from their parts (`im` absent: a real tensor, imaginary part 0).
pub fn join_parts(re: &crate::tensor::Dense, im: Option<&crate::tensor::Dense>) -> crate::interp_complex::CDense {
    use crate::interp_complex::{CDense, C};
    let data = match im {
        Some(im) => re.data.iter().zip(&im.data).map(|(&r, &i)| C::new(r, i)).collect(),
        None => re.data.iter().map(|&r| C::new(r, 0.0)).collect(),
    };
    CDense { shape: re.shape.clone(), data }
}

/// The real program equivalent to `hir` (a clone when it has no complex tensor).
pub fn lower(hir: &Hir) -> (Hir, ComplexMap) {
    if !has_complex(hir) {
        return (hir.clone(), ComplexMap::default());
    }
    let mut names: HashSet<String> = hir.tensors.iter().map(|t| t.name.clone()).collect();
    let mut out = hir.clone();
    let mut map = ComplexMap::default();
    for t in hir.tensors.ids() {
        let src = &hir.tensors[t];
        if !src.elem.is_complex() {
            continue;
        }
        let part = src.elem.real_part();
        let re_name = fresh(&mut names, &format!("{}_re", src.name));
        let im_name = fresh(&mut names, &format!("{}_im", src.name));
        out.tensors[t].elem = part;
        out.tensors[t].name = re_name;
        let im = out.tensors.push(Tensor { name: im_name, elem: part, ..out.tensors[t].clone() });
        map.im.insert(t, im);
    }
    let mut l = Lower { src: hir, out, map, names, counter: 0 };
    for u in hir.units.ids() {
        let mut stmts = Vec::new();
        for s in &hir.units[u].stmts {
            l.stmt(s, &mut stmts);
        }
        l.out.units[u].stmts = stmts;
    }
    (l.out, l.map)
}

/// `base`, or `base_2`, `base_3`, … : a tensor name not taken yet.
fn fresh(names: &mut HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while names.contains(&name) {
        k += 1;
        name = format!("{base}_{k}");
    }
    names.insert(name.clone());
    name
}

struct Lower<'a> {
    /// The source program: element types are read here.
    src: &'a Hir,
    out: Hir,
    map: ComplexMap,
    names: HashSet<String>,
    counter: usize,
}

/// The value of an expression split in parts; `im` is `None` for a real one.
type Parts<T> = (T, Option<T>);

/// A factor split in parts: the imaginary part is `sign · im` (so that `conj` of a
/// tensor is a sign, not a copy).
type FactorParts = (Factor, Option<(f64, Factor)>);

/// `Sum { e }` over `free`, or `e`'s single factor itself when the sum is that
/// factor alone over exactly its own (distinct) indices; with the coefficient of
/// a single-factor term taken out as a sign where it is ±1.
fn sum_or_factor(e: Expr, free: &[IndexId], span: &crate::span::Span) -> (f64, Factor) {
    if let [t] = &e.terms[..] {
        if let [f] = &t.factors[..] {
            let idx = f.indices();
            let distinct = idx.iter().enumerate().all(|(k, i)| !idx[..k].contains(i));
            let same = idx.len() == free.len() && free.iter().all(|i| idx.contains(i));
            if distinct && same && (t.coef == 1.0 || t.coef == -1.0) {
                return (t.coef, f.clone());
            }
        }
    }
    (1.0, Factor::Sum { arg: Box::new(e), free: free.to_vec(), span: span.clone() })
}

fn expr_of(terms: Vec<Term>, span: &crate::span::Span) -> Expr {
    Expr { terms, span: span.clone() }
}

impl Lower<'_> {
    /// A complex temporary over `idx`: its (re, im) tensors.
    fn temp(&mut self, idx: &[IndexId], part: crate::sema::hir::ElemType) -> (TensorId, TensorId) {
        self.counter += 1;
        let dims: Vec<_> = idx.iter().map(|&i| self.out.indices[i].range).collect();
        let mk = |l: &mut Self, suffix: &str| {
            let name = fresh(&mut l.names, &format!("_c{}_{suffix}", l.counter));
            l.out.tensors.push(Tensor {
                name,
                role: Role::Temporary,
                elem: part,
                dims: dims.clone(),
                symmetry: Vec::new(),
                pair_symmetry: Vec::new(),
                blocks: Vec::new(),
                span: 0..0,
                model: None,
            })
        };
        let re = mk(self, "re");
        let im = mk(self, "im");
        (re, im)
    }

    fn stmt(&mut self, s: &Stmt, out: &mut Vec<Stmt>) {
        let lhs = s.lhs.tensor;
        let Some((re_t, im_t)) = self.map.parts(lhs) else {
            // A real target: its right-hand side is real (E0321), `conj` aside.
            let (re, _) = self.expr(&s.rhs, &s.lhs.indices, out);
            out.push(Stmt { rhs: re, ..s.clone() });
            return;
        };
        let (re, im) = self.expr(&s.rhs, &s.lhs.indices, out);
        let mut self_read = false;
        collect_reads(&s.rhs, &mut |t| self_read |= t == lhs);
        let part = self.src.tensors[lhs].elem.real_part();
        let (re, im) = if self_read {
            let (tr, ti) = self.temp(&s.lhs.indices, part);
            let r = |t: TensorId| TensorRef { tensor: t, indices: s.lhs.indices.clone(), span: s.lhs.span.clone() };
            out.push(Stmt { lhs: r(tr), accumulate: false, rhs: re, span: s.span.clone() });
            let im = im.map(|im| {
                out.push(Stmt { lhs: r(ti), accumulate: false, rhs: im, span: s.span.clone() });
                Factor::Tensor(r(ti)).as_expr()
            });
            (Factor::Tensor(r(tr)).as_expr(), im)
        } else {
            (re, im)
        };
        let lhs_re = TensorRef { tensor: re_t, ..s.lhs.clone() };
        let lhs_im = TensorRef { tensor: im_t, ..s.lhs.clone() };
        out.push(Stmt { lhs: lhs_re, accumulate: s.accumulate, rhs: re, span: s.span.clone() });
        match im {
            Some(im) => out.push(Stmt { lhs: lhs_im, accumulate: s.accumulate, rhs: im, span: s.span.clone() }),
            None if s.accumulate => {}
            None => {
                let zero = Term { coef: 0.0, factors: Vec::new(), span: s.span.clone() };
                out.push(Stmt {
                    lhs: lhs_im,
                    accumulate: false,
                    rhs: expr_of(vec![zero], &s.span),
                    span: s.span.clone(),
                })
            }
        }
    }

    /// `e` (a tensor over `result`) in parts.
    fn expr(&mut self, e: &Expr, result: &[IndexId], pre: &mut Vec<Stmt>) -> Parts<Expr> {
        let (mut re, mut im, mut complex) = (Vec::new(), Vec::new(), false);
        for t in &e.terms {
            let (r, i) = self.term(t, result, pre);
            re.extend(r);
            if let Some(i) = i {
                im.extend(i);
                complex = true;
            }
        }
        (expr_of(re, &e.span), complex.then(|| expr_of(im, &e.span)))
    }

    fn factor(&mut self, f: &Factor, pre: &mut Vec<Stmt>) -> FactorParts {
        // A real part with a sign other than +1 keeps it inside a sum.
        let plain = |(c, f): (f64, Factor), free: &[IndexId], span: &crate::span::Span| {
            if c == 1.0 {
                f
            } else {
                let t = Term { coef: c, factors: vec![f], span: span.clone() };
                Factor::Sum { arg: Box::new(expr_of(vec![t], span)), free: free.to_vec(), span: span.clone() }
            }
        };
        match f {
            Factor::Tensor(r) => {
                let im = self
                    .map
                    .parts(r.tensor)
                    .map(|(_, im)| (1.0, Factor::Tensor(TensorRef { tensor: im, ..r.clone() })));
                (f.clone(), im)
            }
            Factor::Affine(a) => {
                let im = self.map.parts(a.tensor).map(|(_, im)| {
                    let mut b = a.clone();
                    b.tensor = im;
                    (1.0, Factor::Affine(b))
                });
                (f.clone(), im)
            }
            Factor::Sum { arg, free, span } => {
                let (re, im) = self.expr(arg, free, pre);
                (plain(sum_or_factor(re, free, span), free, span), im.map(|im| sum_or_factor(im, free, span)))
            }
            Factor::Call { func: Func::Conj, arg, free, span } => {
                let (re, im) = self.expr(arg, free, pre);
                let im = im.map(|im| {
                    let (c, f) = sum_or_factor(im, free, span);
                    (-c, f)
                });
                (plain(sum_or_factor(re, free, span), free, span), im)
            }
            // Real by `sema::complex`: only `conj`s inside may need lowering.
            Factor::Call { func, arg, free, span } => {
                let (re, _) = self.expr(arg, free, pre);
                (Factor::Call { func: *func, arg: Box::new(re), free: free.clone(), span: span.clone() }, None)
            }
            Factor::Reduce { op, arg, free, span } => {
                let (re, _) = self.expr(arg, free, pre);
                (Factor::Reduce { op: *op, arg: Box::new(re), free: free.clone(), span: span.clone() }, None)
            }
            Factor::Select { cmp, args, free, span } => {
                let args = args.iter().map(|a| self.factor(a, pre).0).collect();
                (Factor::Select { cmp: *cmp, args, free: free.clone(), span: span.clone() }, None)
            }
        }
    }

    fn term(&mut self, t: &Term, result: &[IndexId], pre: &mut Vec<Stmt>) -> Parts<Vec<Term>> {
        let mut parts: Vec<FactorParts> = t.factors.iter().map(|f| self.factor(f, pre)).collect();
        // Three or more complex factors: multiply the first two into a temporary.
        let part_type = self.term_part_type(t);
        loop {
            let cx: Vec<usize> = (0..parts.len()).filter(|&k| parts[k].1.is_some()).collect();
            if cx.len() < 3 {
                break;
            }
            let (a, b) = (cx[0], cx[1]);
            let mut need: Vec<IndexId> = Vec::new();
            for &i in parts[a].0.indices().iter().chain(parts[b].0.indices()) {
                let elsewhere = result.contains(&i)
                    || parts.iter().enumerate().any(|(k, p)| k != a && k != b && p.0.indices().contains(&i));
                if elsewhere && !need.contains(&i) {
                    need.push(i);
                }
            }
            let (tr, ti) = self.temp(&need, part_type);
            let (pa, pb) = (parts[a].clone(), parts[b].clone());
            let (re, im) = product(1.0, &[], &pa, &pb, &t.span);
            let r = |x: TensorId| TensorRef { tensor: x, indices: need.clone(), span: t.span.clone() };
            pre.push(Stmt { lhs: r(tr), accumulate: false, rhs: expr_of(re, &t.span), span: t.span.clone() });
            pre.push(Stmt { lhs: r(ti), accumulate: false, rhs: expr_of(im, &t.span), span: t.span.clone() });
            parts[a] = (Factor::Tensor(r(tr)), Some((1.0, Factor::Tensor(r(ti)))));
            parts.remove(b);
        }
        let cx: Vec<usize> = (0..parts.len()).filter(|&k| parts[k].1.is_some()).collect();
        let real: Vec<Factor> =
            parts.iter().enumerate().filter(|(k, _)| !cx.contains(k)).map(|(_, p)| p.0.clone()).collect();
        let with = |coef: f64, extra: &[&Factor]| {
            let mut factors = real.clone();
            factors.extend(extra.iter().map(|&f| f.clone()));
            Term { coef, factors, span: t.span.clone() }
        };
        match cx[..] {
            [] => (vec![with(t.coef, &[])], None),
            [a] => {
                let (re, (si, im)) = (&parts[a].0, parts[a].1.as_ref().expect("complex"));
                (vec![with(t.coef, &[re])], Some(vec![with(si * t.coef, &[im])]))
            }
            [a, b] => {
                let (re, im) = product(t.coef, &real, &parts[a], &parts[b], &t.span);
                (re, Some(im))
            }
            _ => unreachable!("binarized above"),
        }
    }

    /// The part type of a term's complex temporaries: `f64` if any complex factor is
    /// `c128` (the wider of the two, as the statement's target would hold it).
    fn term_part_type(&self, t: &Term) -> crate::sema::hir::ElemType {
        let mut narrow = true;
        let mut see = |x: TensorId| {
            if self.src.tensors[x].elem == crate::sema::hir::ElemType::C128 {
                narrow = false
            }
        };
        for f in &t.factors {
            collect_reads(&f.as_expr(), &mut see);
        }
        if narrow && expr_is_complex(self.src, &Expr { terms: vec![t.clone()], span: 0..0 }) {
            crate::sema::hir::ElemType::F32
        } else {
            crate::sema::hir::ElemType::F64
        }
    }
}

/// `coef · real · a · b` for complex `a`, `b`: (re terms, im terms).
fn product(
    coef: f64,
    real: &[Factor],
    a: &FactorParts,
    b: &FactorParts,
    span: &crate::span::Span,
) -> (Vec<Term>, Vec<Term>) {
    let (ar, (sa, ai)) = (&a.0, a.1.as_ref().expect("complex"));
    let (br, (sb, bi)) = (&b.0, b.1.as_ref().expect("complex"));
    let mk = |c: f64, x: &Factor, y: &Factor| {
        let mut factors = real.to_vec();
        factors.push(x.clone());
        factors.push(y.clone());
        Term { coef: c, factors, span: span.clone() }
    };
    (vec![mk(coef, ar, br), mk(-coef * sa * sb, ai, bi)], vec![mk(coef * sb, ar, bi), mk(coef * sa, ai, br)])
}
