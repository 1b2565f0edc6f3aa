//! The reference interpreter for complex programs: runs the *unlowered* HIR with
//! its own complex arithmetic, so that the lowering to real pairs
//! ([`crate::tir::complex`]) and every back end behind it are checked against an
//! independent oracle. Like [`crate::interp`], it is plain nested loops in f64 (a
//! `c64` value is computed in f64 and rounded when reported); real tensors are
//! complex values with a zero imaginary part. Only what `sema` lets complex
//! programs use is evaluated: sums of products, sub-expressions, affine reads,
//! `conj`, and element-wise functions of real arguments.

use crate::interp::{InterpError, MAX_TERM_ITERATIONS};
use crate::sema::hir::{Expr, Factor, Func, Hir, IndexId, Stmt, TensorId, Term, UnitId};
use crate::tensor::{checked_len, for_each_index, strides};
use std::collections::HashMap;
use std::ops::{Add, Mul, Neg, Sub};

/// A complex number in f64.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct C {
    pub re: f64,
    pub im: f64,
}

impl C {
    pub fn new(re: f64, im: f64) -> C {
        C { re, im }
    }
    pub fn conj(self) -> C {
        C { re: self.re, im: -self.im }
    }
    pub fn abs2(self) -> f64 {
        self.re * self.re + self.im * self.im
    }
}

impl Add for C {
    type Output = C;
    fn add(self, o: C) -> C {
        C::new(self.re + o.re, self.im + o.im)
    }
}
impl Sub for C {
    type Output = C;
    fn sub(self, o: C) -> C {
        C::new(self.re - o.re, self.im - o.im)
    }
}
impl Mul for C {
    type Output = C;
    fn mul(self, o: C) -> C {
        C::new(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)
    }
}
impl Neg for C {
    type Output = C;
    fn neg(self) -> C {
        C::new(-self.re, -self.im)
    }
}

/// A dense complex tensor, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct CDense {
    pub shape: Vec<usize>,
    pub data: Vec<C>,
}

impl CDense {
    pub fn zeros(what: &str, shape: Vec<usize>) -> Result<CDense, InterpError> {
        let n = checked_len(what, &shape)?;
        Ok(CDense { shape, data: vec![C::default(); n] })
    }
}

/// Runs unit `unit` of a (complex) program on `inputs` (every input the unit
/// reads, real ones with zero imaginary parts) and returns every output written.
pub fn run_unit(
    hir: &Hir,
    unit: UnitId,
    inputs: &HashMap<TensorId, CDense>,
) -> Result<HashMap<TensorId, CDense>, InterpError> {
    crate::interp::run_unit_with(hir, unit, inputs, exec_stmt)
}

impl crate::interp::UnitValue for CDense {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn len(&self) -> usize {
        self.data.len()
    }
}

fn exec_stmt(hir: &Hir, stmt: &Stmt, values: &mut HashMap<TensorId, CDense>, what: &str) -> Result<(), InterpError> {
    let target = stmt.lhs.tensor;
    let tname = &hir.tensors[target].name;
    if let std::collections::hash_map::Entry::Vacant(e) = values.entry(target) {
        e.insert(CDense::zeros(&format!("tensor `{tname}`"), hir.shape(target))?);
    }
    let ev = Eval { hir, values, stmt: format!("{what} (assigning `{tname}`)") };
    let rhs = ev.expr(&stmt.rhs, &stmt.lhs.indices)?;
    let dst = values.get_mut(&target).expect("initialised above");
    let st = strides(&dst.shape);
    let base: usize = hir.ref_offsets(&stmt.lhs).iter().zip(&st).map(|(o, s)| o * s).sum();
    let mut k = 0;
    for_each_index(&rhs.shape, |idx| {
        let d = base + idx.iter().zip(&st).map(|(i, s)| i * s).sum::<usize>();
        dst.data[d] = if stmt.accumulate { dst.data[d] + rhs.data[k] } else { rhs.data[k] };
        k += 1;
    });
    Ok(())
}

struct Eval<'a> {
    hir: &'a Hir,
    values: &'a HashMap<TensorId, CDense>,
    stmt: String,
}

impl Eval<'_> {
    /// `e` over `result` (in that order); other indices of each term are summed.
    fn expr(&self, e: &Expr, result: &[IndexId]) -> Result<CDense, InterpError> {
        let shape: Vec<usize> = result.iter().map(|&i| self.hir.index_size(i)).collect();
        let mut out = CDense::zeros(&format!("a sub-expression of {}", self.stmt), shape)?;
        for t in &e.terms {
            self.term(t, result, &mut out)?;
        }
        Ok(out)
    }

    /// A factor other than a plain tensor, as a dense tensor over its indices.
    fn sub(&self, f: &Factor) -> Result<CDense, InterpError> {
        match f {
            Factor::Tensor(r) => Ok(self.values.get(&r.tensor).expect("sema: read after write").clone()),
            Factor::Affine(a) => {
                let src = self.values.get(&a.tensor).expect("sema: read after write");
                let shape: Vec<usize> = a.free.iter().map(|&i| self.hir.index_size(i)).collect();
                let mut out = CDense::zeros(&format!("an affine read of {}", self.stmt), shape)?;
                for (o, at) in out.data.iter_mut().zip(crate::interp::affine_offsets(self.hir, a, &src.shape)?) {
                    *o = src.data[at];
                }
                Ok(out)
            }
            Factor::Sum { arg, free, .. } => self.expr(arg, free),
            Factor::Call { func: Func::Conj, arg, free, .. } => {
                let mut v = self.expr(arg, free)?;
                v.data.iter_mut().for_each(|x| *x = x.conj());
                Ok(v)
            }
            // `sema` lets only real arguments reach other functions: the real
            // function of the real part (a NaN if an imaginary part got here).
            Factor::Call { func, arg, free, .. } => {
                let mut v = self.expr(arg, free)?;
                for x in &mut v.data {
                    *x = if x.im == 0.0 { C::new(func.apply(x.re), 0.0) } else { C::new(f64::NAN, f64::NAN) };
                }
                Ok(v)
            }
            Factor::Reduce { .. } | Factor::Select { .. } => Err(InterpError::Unsupported(format!(
                "`max`, `min` and `where` in a complex program ({}): the complex interpreter does not evaluate them",
                self.stmt
            ))),
        }
    }

    fn term(&self, t: &Term, result: &[IndexId], out: &mut CDense) -> Result<(), InterpError> {
        let mut operands: Vec<(CDense, Vec<usize>)> = Vec::with_capacity(t.factors.len());
        // Loop variables: the result's indices, then the summed ones.
        let mut vars: Vec<IndexId> = result.to_vec();
        for f in &t.factors {
            for &i in f.indices() {
                if !vars.contains(&i) {
                    vars.push(i);
                }
            }
        }
        for f in &t.factors {
            let (d, base) = match f {
                Factor::Tensor(r) => {
                    let d = self.values.get(&r.tensor).expect("sema: read after write");
                    let off: Vec<usize> = self.hir.ref_offsets(r);
                    let base = off.iter().zip(strides(&d.shape)).map(|(o, s)| o * s).sum();
                    // Borrowed tensors are cloned: the oracle favours plainness over speed.
                    (d.clone(), base)
                }
                _ => (self.sub(f)?, 0),
            };
            let st = strides(&d.shape);
            // Per loop variable: how far this operand's offset moves (a repeated
            // index, a diagonal, moves by the sum of its strides).
            let mv: Vec<usize> = vars
                .iter()
                .map(|v| f.indices().iter().zip(&st).filter(|(i, _)| *i == v).map(|(_, s)| s).sum())
                .collect();
            operands.push((d, std::iter::once(base).chain(mv).collect()));
        }
        let sizes: Vec<usize> = vars.iter().map(|&i| self.hir.index_size(i)).collect();
        let iterations = sizes.iter().try_fold(1u128, |a, &n| a.checked_mul(n as u128));
        if iterations.is_none_or(|n| n > MAX_TERM_ITERATIONS) {
            return Err(InterpError::LoopTooLarge {
                what: format!("a term of {}", self.stmt),
                iterations: iterations.map_or_else(|| "more than 2^128".to_string(), |n| n.to_string()),
            });
        }
        let ost = strides(&out.shape);
        let coef = C::new(t.coef, 0.0);
        for_each_index(&sizes, |idx| {
            let mut p = coef;
            for (d, mv) in &operands {
                let off = mv[0] + idx.iter().zip(&mv[1..]).map(|(i, s)| i * s).sum::<usize>();
                p = p * d.data[off];
            }
            let o: usize = idx[..result.len()].iter().zip(&ost).map(|(i, s)| i * s).sum();
            out.data[o] = out.data[o] + p;
        });
        Ok(())
    }
}
