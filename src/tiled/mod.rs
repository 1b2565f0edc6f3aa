//! Tiled tensors and their execution (`tcc run --tiled`).
//!
//! The data model of NWChem's TCE, TAMM and CTF: every range is cut into tiles
//! ([`space`]); a tensor stores only the tiles that are canonical under its
//! symmetry and nonzero under its block rules ([`layout`], [`tensor`]); a unit runs
//! as DLTC task sets of compiled tile kernels over threads ([`exec`]). The
//! interpreter stays dense and is the oracle: `tcc run --tiled --check` compares.

mod arena;
pub mod autotile;
mod binarize;
pub mod buffer;
pub mod cost;
pub mod device;
pub mod dist;
pub mod exec;
pub mod gather;
pub mod layout;
pub mod model;
pub mod outputs;
pub mod placement;
pub mod plan;
pub mod profile;
pub mod run;
pub mod session;
pub mod source;
pub mod space;
pub mod steal;
pub mod tensor;
#[cfg(test)]
mod tests;

pub use exec::{ExchangeMode, Program, TiledOptions, TiledStats};

/// A buffer pointer that task closures share across threads: every task writes a
/// disjoint tile, which the callers' safety comments argue.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr(pub(crate) *mut f64);
unsafe impl Send for SyncPtr {}
unsafe impl Sync for SyncPtr {}
impl SyncPtr {
    /// The pointer (a method, so that closures capture the `Sync` wrapper).
    pub(crate) fn get(self) -> *mut f64 {
        self.0
    }
}
