//! What the tensors of a tiled run stand for in the program the user wrote.
//!
//! A tiled run executes the program [`crate::pipeline::prepare`] makes: a complex
//! tensor `X` is lowered to two real ones (`X_re`, which keeps `X`'s id, and
//! `X_im`; [`crate::tir::complex`]), a 16-bit one is widened to `f32` (same id;
//! [`crate::tir::half`]). Inputs are read and rounded, and outputs summarized and
//! written, as the source tensors: a complex `.npy` file feeds both parts (one
//! component each) and is written back by both, a bf16 file is read and written
//! as bf16, and the report prints the source tensor's line.

use crate::sema::hir::{ElemType, Hir, TensorId};
use std::collections::HashMap;

/// One executed tensor that is part of a source tensor of another type.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// The source tensor (its id is the real part's or the widened tensor's).
    pub source: TensorId,
    /// Its name, the `--input NAME=` and `--output-dir` file name.
    pub name: String,
    /// Its element type: the type values are rounded to and files hold.
    pub elem: ElemType,
    /// Which component of a complex element: 0 real, 1 imaginary (0 otherwise).
    pub component: usize,
}

/// The executed tensors that are parts of source tensors of another type; all
/// others stand for themselves.
#[derive(Debug, Clone, Default)]
pub struct SourceView {
    parts: HashMap<TensorId, Part>,
}

impl SourceView {
    /// The view of `hir` (the source program) as `prepare` executes it.
    pub fn of(hir: &Hir) -> SourceView {
        let mut parts = HashMap::new();
        let im =
            if crate::sema::complex::has_complex(hir) { crate::tir::complex::lower(hir).1.im } else { HashMap::new() };
        for t in hir.tensors.ids() {
            let tensor = &hir.tensors[t];
            if !tensor.elem.is_complex() && !tensor.elem.is_half() {
                continue;
            }
            let part = |component| Part { source: t, name: tensor.name.clone(), elem: tensor.elem, component };
            parts.insert(t, part(0));
            if let Some(&i) = im.get(&t) {
                parts.insert(i, part(1));
            }
        }
        SourceView { parts }
    }

    /// The source tensor `t` (executed) is a part of, if it is one.
    pub fn part(&self, t: TensorId) -> Option<&Part> {
        self.parts.get(&t)
    }

    /// The executed tensors that hold source tensor `t`: itself, then its
    /// imaginary part if it is complex.
    pub fn executed(&self, t: TensorId) -> Vec<TensorId> {
        let mut v = vec![t];
        v.extend(self.parts.iter().filter(|(_, p)| p.source == t && p.component == 1).map(|(&i, _)| i));
        v
    }

    /// The type the values of executed tensor `t` are rounded to: its source's
    /// (a complex type rounds each part as its part type).
    pub fn round_as(&self, t: TensorId, executed: ElemType) -> ElemType {
        self.parts.get(&t).map_or(executed, |p| p.elem)
    }

    /// Whether a `.npy` file of `file` may feed executed tensor `t` of type
    /// `executed`: complex files only complex tensors, a 16-bit file only its own
    /// type. The error is `(code, why)`: E0325 or E0328.
    pub fn check_file(&self, t: TensorId, executed: ElemType, file: ElemType) -> Result<(), (&'static str, String)> {
        let want = self.round_as(t, executed);
        if want.is_complex() != file.is_complex() {
            let (w, g) = if want.is_complex() { ("complex", "real") } else { ("real", "complex") };
            return Err((
                "E0325",
                format!("the tensor is {w} ({}) but the file holds a {g} array ({})", want.name(), file.name()),
            ));
        }
        if (want.is_half() || file.is_half()) && want != file {
            return Err(("E0328", format!("the tensor is {} but the file holds {}", want.name(), file.name())));
        }
        Ok(())
    }
}
