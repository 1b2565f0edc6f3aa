//! The `nccl` back end (cargo feature `nccl`): NVIDIA NCCL collectives through
//! cudarc, one CUDA device per rank.
//!
//! The [`Communicator`](super::Communicator) trait works on host `f64` slices, so
//! every operation stages its buffers into device scratch buffers (kept and grown
//! per communicator), runs the NCCL operation on the communicator's stream, waits
//! for it and copies the result back. The CUDA driver and `libnccl` are loaded at
//! run time, so building needs no CUDA; a machine without a GPU, a driver or
//! `libnccl` gets an `Err` from the constructors, never a panic. cudarc looks for
//! `libnccl.so` (not `libnccl.so.2`): put a folder with a `libnccl.so` link on
//! `LD_LIBRARY_PATH`.
//!
//! Without the feature, [`NcclComm`] and [`UniqueId::new`] still exist, and their
//! constructors return [`NOT_BUILT`], so code that chooses `nccl` by name compiles
//! either way and reports a clear error.
//!
//! **Operations.**
//!
//! | operation | NCCL |
//! |---|---|
//! | broadcast, reduce, all-reduce | `ncclBroadcast`, `ncclReduce`, `ncclAllReduce` (in place) |
//! | all-gather(v) | `ncclAllGather` for equal blocks, else one `ncclBroadcast` per rank in a group |
//! | reduce-scatter | `ncclReduceScatter` for equal blocks, else one `ncclReduce` per rank in a group |
//! | all-to-all(v) | `ncclSend`/`ncclRecv` to and from every rank (itself too) in a group |
//! | send/recv | a 2-word header (tag, length), then the data, each `ncclSend`/`ncclRecv` |
//! | barrier | a 1-word all-reduce |
//! | shared counter | an atomic shared by the ranks of this process (see below) |
//!
//! **Send/recv.** NCCL has no tags and no buffering: a send waits until the receiver
//! takes it (MPI's synchronous mode), so ranks must order sends and receives so that
//! every send's receive gets posted, as tcc's planned executor does (even positions
//! of a ring send first, odd ones receive first). A receive for one tag keeps the
//! earlier messages of other tags from the same sender for later receives. Messages
//! to the rank itself go through a host queue and never wait; receiving from itself
//! with no such message sent panics instead of hanging. Counts cover the data
//! words, not the header.
//!
//! **Shared counter.** NCCL has no one-sided operations, so the counter is an
//! atomic found by the communicator's unique id in a registry of this process. Its
//! creation all-gathers a token of each rank's process; when ranks live in several
//! processes it panics with a message (a silent per-process counter would hand out
//! tasks twice). Multi-process runs get their counter from the primary back end of
//! a [`Mixed`](super::mixed::Mixed) communicator (`mpi`).
//!
//! **Counting** is the flat model of `shm` and native `mpi` (see [`super`]); barriers
//! and the counter's setup are not counted.
//!
//! **Determinism.** NCCL does not use the runtime's fixed combination order: its
//! ring and tree algorithms combine in an order set by the algorithm, protocol and
//! channel count it picks for the size and topology. So sums agree with the other
//! back ends to rounding only. For one communicator configuration (ranks, GPUs,
//! NCCL version and `NCCL_*` settings) NCCL repeats its choices, so results repeat
//! run to run, and every rank of an all-reduce gets the same bits (each block is
//! reduced once and then copied); NCCL documents neither across versions or
//! settings. Max and min are exact; on one rank every reduction is a copy.
//!
//! **Failure.** Constructors return `Err`. An NCCL or CUDA error inside an operation
//! panics with the call and NCCL's message, as the other back ends panic on a
//! failed rank (the trait's operations return nothing).

#[cfg(feature = "nccl")]
mod gpu;
#[cfg(feature = "nccl")]
pub use gpu::NcclComm;

/// The error of every constructor in a build without the `nccl` feature.
pub const NOT_BUILT: &str = "this build has no NCCL support (rebuild tcc-runtime with `--features nccl`)";

/// The id that all ranks of one NCCL communicator share: rank 0 makes it with
/// [`UniqueId::new`] and sends it to the others (e.g. as [`UniqueId::to_words`]
/// through an MPI or in-process communicator).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct UniqueId(pub [u8; 128]);

impl UniqueId {
    /// A fresh id (`ncclGetUniqueId`; needs `libnccl`).
    pub fn new() -> Result<UniqueId, String> {
        #[cfg(feature = "nccl")]
        return gpu::unique_id();
        #[cfg(not(feature = "nccl"))]
        Err(NOT_BUILT.into())
    }
    /// 32 words, 4 bytes each (exact in `f64`), for sending through a communicator.
    pub fn to_words(&self) -> Vec<f64> {
        self.0.chunks(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).collect()
    }
    /// The inverse of [`UniqueId::to_words`].
    pub fn from_words(w: &[f64]) -> Result<UniqueId, String> {
        if w.len() != 32 {
            return Err(format!("an NCCL unique id is 32 words, not {}", w.len()));
        }
        let mut id = [0u8; 128];
        for (i, &x) in w.iter().enumerate() {
            if !(0.0..=u32::MAX as f64).contains(&x) || x.fract() != 0.0 {
                return Err(format!("word {i} of an NCCL unique id is {x}, not a 32-bit integer"));
            }
            id[4 * i..4 * i + 4].copy_from_slice(&(x as u32).to_le_bytes());
        }
        Ok(UniqueId(id))
    }
}

#[cfg(not(feature = "nccl"))]
pub use off::NcclComm;

/// The stand-in without the feature: it cannot be constructed.
#[cfg(not(feature = "nccl"))]
mod off {
    use super::super::{Backend, CommStats, Communicator, ReduceOp, SharedCounter};
    use super::{UniqueId, NOT_BUILT};
    use std::convert::Infallible;

    /// An NCCL communicator (this build has none: the constructors return errors).
    #[derive(Debug)]
    pub struct NcclComm {
        never: Infallible,
    }

    impl NcclComm {
        /// A one-rank communicator on device 0.
        pub fn single() -> Result<NcclComm, String> {
            Err(NOT_BUILT.into())
        }
        /// Rank `rank` of `size`, on CUDA device `device`.
        pub fn from_rank(_rank: usize, _size: usize, _id: &UniqueId, _device: usize) -> Result<NcclComm, String> {
            Err(NOT_BUILT.into())
        }
        /// Whether uneven all-gathers and reduce-scatters are forced (tests).
        pub fn set_grouped(&self, _on: bool) {
            match self.never {}
        }
        /// The CUDA device's name.
        pub fn device_name(&self) -> String {
            match self.never {}
        }
    }

    impl Communicator for NcclComm {
        fn rank(&self) -> usize {
            match self.never {}
        }
        fn size(&self) -> usize {
            match self.never {}
        }
        fn backend(&self) -> Backend {
            Backend::Nccl
        }
        fn stats(&self) -> CommStats {
            match self.never {}
        }
        fn barrier(&self) {
            match self.never {}
        }
        fn send(&self, _: usize, _: u32, _: &[f64]) {
            match self.never {}
        }
        fn recv(&self, _: usize, _: u32) -> Vec<f64> {
            match self.never {}
        }
        fn broadcast(&self, _: &mut [f64], _: usize) {
            match self.never {}
        }
        fn reduce(&self, _: &[f64], _: &mut [f64], _: ReduceOp, _: usize) {
            match self.never {}
        }
        fn allreduce(&self, _: &mut [f64], _: ReduceOp) {
            match self.never {}
        }
        fn allgatherv(&self, _: &[f64], _: &[usize], _: &mut [f64]) {
            match self.never {}
        }
        fn reduce_scatter(&self, _: &[f64], _: &[usize], _: &mut [f64], _: ReduceOp) {
            match self.never {}
        }
        fn alltoallv(&self, _: &[f64], _: &[usize], _: &mut [f64], _: &[usize]) {
            match self.never {}
        }
        fn counter(&self) -> Box<dyn SharedCounter> {
            match self.never {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::Communicator;

    #[test]
    fn unique_ids_travel_as_words() {
        let mut b = [0u8; 128];
        b.iter_mut().enumerate().for_each(|(i, x)| *x = (i * 37 % 256) as u8);
        let id = UniqueId(b);
        let w = id.to_words();
        assert_eq!(w.len(), 32);
        assert_eq!(UniqueId::from_words(&w), Ok(id));
        assert!(UniqueId::from_words(&w[..31]).unwrap_err().contains("32 words"));
        let mut bad = w.clone();
        bad[3] = 0.5;
        assert!(UniqueId::from_words(&bad).unwrap_err().contains("word 3"));
    }

    /// On a machine without a GPU (or without the feature) the constructors say why.
    #[test]
    fn without_a_gpu_constructors_return_errors() {
        match NcclComm::single() {
            Err(e) => {
                assert!(!e.is_empty());
                let known = ["NCCL", "libnccl", "CUDA", "libcuda", "device"];
                assert!(known.iter().any(|k| e.contains(k)), "unclear error: {e}");
                if cfg!(not(feature = "nccl")) {
                    assert_eq!(e, NOT_BUILT);
                }
            }
            // A machine with a GPU and libnccl: then it must work.
            Ok(c) => {
                assert_eq!((c.rank(), c.size()), (0, 1));
                let mut b = vec![1.5, -2.0];
                c.allreduce(&mut b, crate::comm::ReduceOp::Sum);
                assert_eq!(b, vec![1.5, -2.0]);
            }
        }
        // Bad arguments are refused before anything is loaded.
        let id = UniqueId([0; 128]);
        for (rank, size, what) in [(2, 2, "rank 2 of 2"), (0, 0, "rank 0 of 0")] {
            let e = NcclComm::from_rank(rank, size, &id, 0).unwrap_err();
            if cfg!(feature = "nccl") {
                assert!(e.contains(what), "{e}");
            } else {
                assert_eq!(e, NOT_BUILT);
            }
        }
    }
}
