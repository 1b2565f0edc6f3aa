//! Code generation: preparing the program ([`lower`]), the CPU back end through
//! LLVM ([`llvm`]) and the C header / Fortran module of generated libraries
//! ([`cabi`]). Running compiled code is [`crate::run::compiled`].

pub mod cabi;
pub mod cabi_complex;
pub mod cabi_half;
pub mod cuda;
pub mod cuda_build;
pub mod cuda_shim;
pub mod cuda_tiled;
pub mod llvm;
pub mod lower;
pub mod mpi_lib;
pub mod nvptx;

#[cfg(test)]
mod tests;

/// The LLVM comparison of `where(a cmp b, …)`: ordered (false when either
/// side is NaN), except `!=`, as [`crate::sema::hir::CmpOp::holds`].
pub(crate) fn float_predicate(cmp: crate::sema::hir::CmpOp) -> inkwell::FloatPredicate {
    use crate::sema::hir::CmpOp;
    use inkwell::FloatPredicate;
    match cmp {
        CmpOp::Lt => FloatPredicate::OLT,
        CmpOp::Le => FloatPredicate::OLE,
        CmpOp::Gt => FloatPredicate::OGT,
        CmpOp::Ge => FloatPredicate::OGE,
        CmpOp::Eq => FloatPredicate::OEQ,
        CmpOp::Ne => FloatPredicate::UNE,
    }
}
