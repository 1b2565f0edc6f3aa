//! The program the back ends compile for one with 16-bit tensors (`bf16`, `f16`):
//! the same program with every such tensor declared `f32`. The CPU back end runs
//! it in f32 storage; its callers widen the 16-bit inputs (exactly) and round the
//! outputs once as they leave ([`crate::codegen::llvm::jit_run`]). Temporaries of
//! the optimizer and of user-declared 16-bit intermediates are thus f32 in
//! compiled code, which is why compiled results match the interpreter (which
//! rounds every stored 16-bit value) within a tolerance, not bit for bit.

use crate::sema::hir::{ElemType, Hir};

/// `hir` with its 16-bit tensors as `f32` (ids, shapes and statements unchanged).
pub fn widen(hir: &Hir) -> Hir {
    let mut out = hir.clone();
    for t in out.tensors.iter_mut().filter(|t| t.elem.is_half()) {
        t.elem = ElemType::F32;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widens_only_half_tensors() {
        let src = "range N = 4; index i, j : N;\n\
                   input tensor A[i,j] : bf16; input tensor B[i,j] : f64;\n\
                   output tensor C[i] : f16;\nC[i] = A[i,j] * B[i,j];";
        let (hir, diags) = crate::compile(src, "t");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
        let w = widen(&hir);
        let elems: Vec<ElemType> = w.tensors.iter().map(|t| t.elem).collect();
        assert_eq!(elems, vec![ElemType::F32, ElemType::F64, ElemType::F32]);
        assert_eq!(w.units[crate::ids::UnitId::new(0)].stmts.len(), 1);
    }
}
