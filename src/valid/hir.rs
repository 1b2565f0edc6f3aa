//! The HIR validator: the facts that [`crate::sema`] establishes and every HIR → HIR
//! pass (materialize, optimize) must keep.
//!
//! * every id (range, index, tensor, grid, unit, model) is in range;
//! * ranges have a size ≥ 1; symmetry groups have ≥ 2 distinct positions of one range
//!   and do not overlap;
//! * a tensor reference has one index per dimension, each over that dimension's range;
//! * a left-hand side has distinct indices and is not an input or parameter;
//! * the `free` list of a call or parenthesised sum is distinct (a term need not use
//!   every result index: the language requires it, but a term over fewer indices is
//!   broadcast, which every pass and back end supports, and random-program tests use);
//! * a temporary is written earlier in its unit before a statement reads it;
//! * distributions map distinct tensor positions to distinct grid dimensions;
//! * a model's unit is a model unit of that model, its layers lie within the unit.

use super::{ensure, ValidationError};
use crate::sema::hir::{Expr, Factor, Hir, IndexId, Role, Stmt, TensorId, TensorRef, UnitKind};
use std::collections::HashSet;

type Res = Result<(), ValidationError>;

/// Checks the whole program; the first violation is returned.
pub fn validate(hir: &Hir) -> Res {
    declarations(hir)?;
    for unit in &hir.units {
        if let UnitKind::Model(m) = unit.kind {
            ensure(
                hir.models.get(m).is_some(),
                || format!("hir unit `{}`", unit.name),
                || format!("model id {m:?} out of range"),
            )?;
        }
        let mut written: HashSet<TensorId> = HashSet::new();
        for (k, s) in unit.stmts.iter().enumerate() {
            let place = || format!("hir unit `{}` statement {k} (`{}`)", unit.name, crate::sema::display::stmt(hir, s));
            stmt(hir, s, &written).map_err(|message| ValidationError { place: place(), message })?;
            written.insert(s.lhs.tensor);
        }
    }
    Ok(())
}

fn declarations(hir: &Hir) -> Res {
    for r in &hir.ranges {
        let place = || format!("hir range `{}`", r.name);
        ensure(r.size >= 1, place, || format!("size {} (must be at least 1)", r.size))?;
        if let Some(m) = r.model {
            ensure(hir.models.get(m).is_some(), place, || format!("model id {m:?} out of range"))?;
        }
    }
    for x in &hir.indices {
        ensure(
            hir.ranges.get(x.range).is_some(),
            || format!("hir index `{}`", x.name),
            || format!("range id {:?} out of range", x.range),
        )?;
    }
    for t in &hir.tensors {
        let place = || format!("hir tensor `{}`", t.name);
        for &r in &t.dims {
            ensure(hir.ranges.get(r).is_some(), place, || format!("range id {r:?} out of range"))?;
        }
        let mut seen = HashSet::new();
        for g in &t.symmetry {
            ensure(g.positions.len() >= 2, place, || "a symmetry group of fewer than 2 dimensions".into())?;
            for &p in &g.positions {
                ensure(p < t.dims.len(), place, || {
                    format!("symmetry position {p} beyond {} dimensions", t.dims.len())
                })?;
                ensure(seen.insert(p), place, || format!("dimension {p} is in two symmetry groups (or twice in one)"))?;
                ensure(t.dims[p] == t.dims[g.positions[0]], place, || "a symmetry group mixes ranges".into())?;
            }
        }
    }
    for g in &hir.grids {
        ensure(
            !g.dims.is_empty() && g.dims.iter().all(|&d| d >= 1),
            || format!("hir grid `{}`", g.name),
            || format!("dimensions {:?} (need at least one, each ≥ 1)", g.dims),
        )?;
    }
    for d in &hir.distributions {
        let place = || format!("hir distribution of tensor id {:?}", d.tensor);
        ensure(hir.tensors.get(d.tensor).is_some() && hir.grids.get(d.grid).is_some(), place, || {
            "tensor or grid id out of range".into()
        })?;
        let (rank, ndims) = (hir.tensors[d.tensor].dims.len(), hir.grids[d.grid].dims.len());
        let mut pos = HashSet::new();
        let mut dims = HashSet::new();
        for &(p, g) in &d.mapping {
            ensure(p < rank && g < ndims, place, || format!("mapping {p}:{g} out of range"))?;
            ensure(pos.insert(p) && dims.insert(g), place, || "a position or grid dimension is mapped twice".into())?;
        }
    }
    for (m, model) in hir.models.iter_enumerated() {
        let place = || format!("hir model `{}`", model.name);
        ensure(hir.units.get(model.unit).is_some(), place, || format!("unit id {:?} out of range", model.unit))?;
        let unit = &hir.units[model.unit];
        ensure(unit.kind == UnitKind::Model(m), place, || format!("its unit `{}` is not this model's", unit.name))?;
        for &r in &model.dims {
            ensure(hir.ranges.get(r).is_some(), place, || format!("range id {r:?} out of range"))?;
        }
        for l in &model.layers {
            ensure(l.stmts.start <= l.stmts.end && l.stmts.end <= unit.stmts.len(), place, || {
                format!("layer `{}` covers statements {:?} of {}", l.name, l.stmts, unit.stmts.len())
            })?;
        }
    }
    Ok(())
}

/// One statement; `written` holds the tensors written by earlier statements of the unit.
fn stmt(hir: &Hir, s: &Stmt, written: &HashSet<TensorId>) -> Result<(), String> {
    tensor_ref(hir, &s.lhs)?;
    let lhs = &hir.tensors[s.lhs.tensor];
    if lhs.role.is_read_only() {
        return Err(format!("writes `{}`, which is read-only", lhs.name));
    }
    if !distinct(&s.lhs.indices) {
        return Err("the left-hand side repeats an index".into());
    }
    expr(hir, &s.rhs, written)
}

fn tensor_ref(hir: &Hir, r: &TensorRef) -> Result<(), String> {
    let t = hir.tensors.get(r.tensor).ok_or_else(|| format!("tensor id {:?} out of range", r.tensor))?;
    if r.indices.len() != t.dims.len() {
        return Err(format!(
            "`{}` has {} dimensions but is used with {} indices",
            t.name,
            t.dims.len(),
            r.indices.len()
        ));
    }
    for (p, (&i, &range)) in r.indices.iter().zip(&t.dims).enumerate() {
        let x = hir.indices.get(i).ok_or_else(|| format!("index id {i:?} out of range"))?;
        if hir.offset_in(x.range, range).is_none() {
            let (want, got) = (&hir.ranges[range].name, &hir.ranges[x.range].name);
            return Err(format!(
                "dimension {p} of `{}` is over `{want}`, indexed by `{}` over `{got}`",
                t.name, x.name
            ));
        }
    }
    Ok(())
}

/// An expression: every reference well-formed, temporaries written before.
fn expr(hir: &Hir, e: &Expr, written: &HashSet<TensorId>) -> Result<(), String> {
    for term in &e.terms {
        for f in &term.factors {
            match f {
                Factor::Tensor(r) => {
                    tensor_ref(hir, r)?;
                    let t = &hir.tensors[r.tensor];
                    if t.role == Role::Temporary && !written.contains(&r.tensor) {
                        return Err(format!("temporary `{}` is read before it is written", t.name));
                    }
                }
                Factor::Affine(a) => {
                    let t = hir.tensors.get(a.tensor).ok_or("an affine reference's tensor is out of range")?;
                    if a.subs.len() != t.dims.len() {
                        return Err(format!(
                            "`{}` has {} dimensions, read at {} subscripts",
                            t.name,
                            t.dims.len(),
                            a.subs.len()
                        ));
                    }
                    let mut used: Vec<IndexId> = Vec::new();
                    for s in &a.subs {
                        for &(_, i) in &s.terms {
                            if hir.indices.get(i).is_none() {
                                return Err("an affine subscript's index is out of range".into());
                            }
                            if !used.contains(&i) {
                                used.push(i);
                            }
                        }
                    }
                    if used != a.free {
                        return Err(format!(
                            "an affine read of `{}` has free indices {:?}, its subscripts {used:?}",
                            t.name, a.free
                        ));
                    }
                    if t.role == Role::Temporary && !written.contains(&a.tensor) {
                        return Err(format!("temporary `{}` is read before it is written", t.name));
                    }
                }
                Factor::Call { arg, free, .. } | Factor::Sum { arg, free, .. } => {
                    if !distinct(free) || free.iter().any(|&i| hir.indices.get(i).is_none()) {
                        return Err(format!("a sub-expression's free indices {free:?} repeat or are out of range"));
                    }
                    expr(hir, arg, written)?;
                }
                Factor::Reduce { arg, free, .. } => {
                    if !distinct(free) || free.iter().any(|&i| hir.indices.get(i).is_none()) {
                        return Err(format!("a reduction's free indices {free:?} repeat or are out of range"));
                    }
                    expr(hir, arg, written)?;
                }
                Factor::Select { args, free, .. } => {
                    if args.len() != 4 || args.iter().any(|a| a.indices().iter().any(|i| !free.contains(i))) {
                        return Err(format!("a `where` over {free:?} has arguments not over its free indices"));
                    }
                    for a in args {
                        expr(hir, &a.as_expr(), written)?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn distinct(xs: &[IndexId]) -> bool {
    let mut seen = HashSet::new();
    xs.iter().all(|x| seen.insert(*x))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(src: &str) -> Hir {
        let (hir, diags) = crate::compile(src, "t");
        hir.unwrap_or_else(|| panic!("{diags:?}"))
    }

    const SRC: &str = "range N = 3; index i, j, k : N;\n\
        input tensor A[i,j]; input tensor B[j,k]; output tensor C[i,k]; tensor T[i,k];\n\
        T[i,k] = A[i,j] * B[j,k]; C[i,k] = 2 * T[i,k];";

    #[test]
    fn checked_programs_are_valid() {
        validate(&checked(SRC)).unwrap();
    }

    #[test]
    fn catches_a_read_of_an_unwritten_temporary() {
        let mut hir = checked(SRC);
        hir.units[crate::sema::hir::UnitId::new(0)].stmts.remove(0);
        let e = validate(&hir).unwrap_err();
        assert!(e.message.contains("temporary `T` is read before it is written"), "{e}");
    }

    #[test]
    fn catches_an_index_of_the_wrong_range() {
        let mut hir = checked(
            "range N = 3; range M = 2; index i : N; index m : M;\n\
            input tensor A[i]; output tensor C[i]; C[i] = A[i];",
        );
        if let Factor::Tensor(r) = &mut hir.units[crate::sema::hir::UnitId::new(0)].stmts[0].rhs.terms[0].factors[0] {
            r.indices[0] = crate::sema::hir::IndexId::new(1);
        }
        let e = validate(&hir).unwrap_err();
        assert!(e.message.contains("indexed by `m`"), "{e}");
    }

    #[test]
    fn catches_a_repeated_lhs_index_a_write_to_an_input_and_a_misused_tensor() {
        let mut hir = checked(SRC);
        hir.units[crate::sema::hir::UnitId::new(0)].stmts[1].lhs.indices.swap(0, 1);
        hir.units[crate::sema::hir::UnitId::new(0)].stmts[1].lhs.indices[1] =
            hir.units[crate::sema::hir::UnitId::new(0)].stmts[1].lhs.indices[0];
        assert!(validate(&hir).unwrap_err().message.contains("repeats an index"));
        let mut hir = checked(SRC);
        hir.units[crate::sema::hir::UnitId::new(0)].stmts[0].lhs.tensor = crate::sema::hir::TensorId::new(0);
        assert!(validate(&hir).unwrap_err().message.contains("read-only"));
        let mut hir = checked(SRC);
        let Factor::Tensor(r) = &mut hir.units[crate::sema::hir::UnitId::new(0)].stmts[1].rhs.terms[0].factors[0]
        else {
            panic!()
        };
        r.indices.pop();
        assert!(validate(&hir).unwrap_err().message.contains("`T` has 2 dimensions but is used with 1"));
    }
}
