//! TIR: each statement's terms as contraction graphs ([`graph`]), the search for
//! the cheapest binary contraction order ([`opmin`]) and the HIR → HIR rewrite that
//! applies it, with common sub-expressions and factorization ([`rewrite`]).
//!
//! See `book/src/optimizer.md` for the cost model.

pub(crate) mod bits;
pub mod complex;
pub mod graph;
pub mod half;
pub mod materialize;
pub mod opmin;
pub mod order;
pub mod rewrite;
pub mod slice;

#[cfg(test)]
pub(crate) mod testutil;

pub use graph::{lower, Tir};
pub use rewrite::{optimize, report_text, OptReport, StmtReport};
