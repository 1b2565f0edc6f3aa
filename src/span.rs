//! Source positions: below both [`crate::syntax`] and [`crate::diag`], so that
//! diagnostics can point into the source without depending on the parser.

/// A byte range in the source text.
pub type Span = std::ops::Range<usize>;
