//! TEMPORARY (replaced by the language branch's module at merge).
use crate::sema::hir::{SymKind, Tensor};

#[derive(Debug, Clone, PartialEq)]
pub struct PermGroup {
    elems: Vec<(Vec<usize>, i32)>,
}

impl PermGroup {
    pub fn of(t: &Tensor) -> PermGroup {
        let n = t.dims.len();
        let mut gens: Vec<(Vec<usize>, i32)> = Vec::new();
        let sign = |k: SymKind| if k == SymKind::Antisymmetric { -1 } else { 1 };
        for g in &t.symmetry {
            for w in g.positions.windows(2) {
                let mut p: Vec<usize> = (0..n).collect();
                p.swap(w[0], w[1]);
                gens.push((p, sign(g.kind)));
            }
        }
        for g in &t.pair_symmetry {
            for w in g.members.windows(2) {
                let mut p: Vec<usize> = (0..n).collect();
                for (&x, &y) in w[0].iter().zip(&w[1]) {
                    p.swap(x, y);
                }
                gens.push((p, sign(g.kind)));
            }
        }
        let mut elems = vec![((0..n).collect::<Vec<usize>>(), 1)];
        let mut k = 0;
        while k < elems.len() {
            let (p, s) = elems[k].clone();
            for (g, gs) in &gens {
                let q: Vec<usize> = (0..n).map(|i| p[g[i]]).collect();
                if !elems.iter().any(|(e, _)| *e == q) {
                    elems.push((q, s * gs));
                }
            }
            k += 1;
        }
        PermGroup { elems }
    }
    pub fn elements(&self) -> &[(Vec<usize>, i32)] {
        &self.elems
    }
    pub fn order(&self) -> usize {
        self.elems.len()
    }
    pub fn canonical(&self, idx: &[usize]) -> (Vec<usize>, i32) {
        let mut best: Vec<usize> = idx.to_vec();
        let mut sign = 1;
        let mut img = vec![0; idx.len()];
        for (p, s) in &self.elems {
            for (i, &q) in p.iter().enumerate() {
                img[i] = idx[q];
            }
            if img < best {
                best.copy_from_slice(&img);
                sign = *s;
            }
        }
        for (p, s) in &self.elems {
            if *s == -1 && p.iter().enumerate().all(|(i, &q)| idx[q] == idx[i]) {
                return (best, 0);
            }
        }
        (best, sign)
    }
}
