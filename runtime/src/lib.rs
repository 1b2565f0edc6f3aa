//! tcc-runtime: the library that generated code links against (Rust API and C ABI).
//!
//! * [`task`]: DLTC-style tile tasks — tile spaces described by iterators, task sets
//!   of several independent contractions, static or dynamic (shared-counter)
//!   scheduling, a thread pool;
//! * [`comm`]: the [`comm::Communicator`] trait and its back ends (`threads`, `shm`,
//!   `mpi`, `mpi-p2p`, `nccl`), with exact word and message counts, and
//!   [`comm::mixed::Mixed`], which picks a back end per operation and size;
//! * [`dist`]: block-distributed and replicated tensors over a processor grid, tile
//!   get/accumulate and redistribution;
//! * [`tune`]: the tuner and its TOML table;
//! * [`alloc`]: zeroed temporaries of generated code (huge pages for large ones);
//! * [`slices`]: sliced terms of generated code shared among ranks;
//! * [`capi`]: the `extern "C"` surface declared in `include/tcc_runtime.h`.
//!
//! The runtime does not depend on the compiler; the compiler depends on it.

pub mod alloc;
pub mod capi;
pub mod comm;
pub mod dist;
pub mod slices;
pub mod task;
pub mod tune;

pub mod kernels;

/// The runtime's version, as recorded by Cargo.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_semver() {
        let v = super::version();
        assert_eq!(v.split('.').count(), 3, "{v}");
    }
}
