//! The reference interpreter: runs a checked unit in f64 with plain nested loops.
//! It is the oracle every optimization and back end is tested against.
