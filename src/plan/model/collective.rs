//! The α-β time of one collective, as NCCL prices it (`src/graph/tuning.cc`):
//! a launch latency per collective, a latency per step of the algorithm (inside
//! a node and across nodes apart), and the bytes at the link's β. Small
//! messages (decode's all-reduces, pipeline sends of one token) are then
//! latency-bound, and an all-reduce takes the cheaper of a ring (2(q − 1) steps,
//! 2(q − 1)/q of the buffer) and NCCL's tree (a chain inside each node, a binary
//! tree across nodes: 2((q/k − 1) + ⌈log₂ k⌉) steps over k nodes, the buffer
//! up and down: 2n).

use super::Coll;
use serde::Serialize;

/// Latency of launching one collective (NCCL's base latency: 3.6–6.6 µs by
/// version and protocol, rounded).
pub const COLL_LAT: f64 = 4e-6;
/// Latency of one step inside a node (NCCL's LL protocol on NVLink: 0.47–0.6 µs
/// per ring step by version, rounded).
pub const INTRA_LAT: f64 = 0.5e-6;

/// The algorithm a collective's time assumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Algo {
    #[default]
    Ring,
    Tree,
    /// All-to-all and point-to-point: every pair directly.
    Direct,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ring => "ring",
            Algo::Tree => "tree",
            Algo::Direct => "direct",
        }
    }
}

/// Where a collective runs: its group size, the nodes it spans, and the link's
/// per-byte time and per-step latencies.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub q: usize,
    pub nodes: usize,
    /// Seconds per byte (the slowest link the group uses).
    pub beta: f64,
    /// Launch latency per collective.
    pub base: f64,
    /// Latency per step inside a node and across nodes.
    pub intra: f64,
    pub inter: f64,
}

/// One occurrence: seconds, bytes one rank sends, and the algorithm.
pub fn cost(kind: Coll, link: &Link, buffer_bytes: f64) -> (f64, f64, Algo) {
    let q = link.q;
    if q <= 1 || buffer_bytes <= 0.0 {
        return (0.0, 0.0, Algo::Ring);
    }
    let qf = q as f64;
    let k = link.nodes.clamp(1, q);
    let inter_hops = (k - 1) as f64;
    // A ring of q ranks over k nodes crosses nodes k − 1 times per pass.
    let ring_lat = |passes: f64| link.base + passes * ((qf - 1.0 - inter_hops) * link.intra + inter_hops * link.inter);
    let f = (qf - 1.0) / qf;
    match kind {
        Coll::AllReduce => {
            let ring = (ring_lat(2.0) + link.beta * 2.0 * f * buffer_bytes, 2.0 * f * buffer_bytes, Algo::Ring);
            let per_node = (q / k).max(1) as f64;
            let log_k = (k as f64).log2().ceil();
            let tree_lat = link.base + 2.0 * ((per_node - 1.0) * link.intra + log_k * link.inter);
            let tree = (tree_lat + link.beta * 2.0 * buffer_bytes, 2.0 * buffer_bytes, Algo::Tree);
            if tree.0 < ring.0 {
                tree
            } else {
                ring
            }
        }
        Coll::AllGather | Coll::ReduceScatter => {
            (ring_lat(1.0) + link.beta * f * buffer_bytes, f * buffer_bytes, Algo::Ring)
        }
        Coll::AllToAll => {
            let lat = if k > 1 { link.inter } else { link.intra };
            (link.base + (qf - 1.0) * lat + link.beta * f * buffer_bytes, f * buffer_bytes, Algo::Direct)
        }
        Coll::RingPass => {
            (ring_lat(1.0) + link.beta * (qf - 1.0) * buffer_bytes, (qf - 1.0) * buffer_bytes, Algo::Ring)
        }
        Coll::SendRecv => {
            let lat = if k > 1 { link.inter } else { link.intra };
            (link.base + lat + link.beta * buffer_bytes, buffer_bytes, Algo::Direct)
        }
    }
}

/// The latencies in the plan's header: per step inside a node, per collective.
pub fn describe(o: &super::ModelOptions) -> String {
    use crate::plan::network::fmt_time;
    format!("{} per collective step, {} per collective launch", fmt_time(o.intra_lat), fmt_time(o.coll_lat))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvlink(q: usize) -> Link {
        Link { q, nodes: 1, beta: 1.0 / 300e9, base: COLL_LAT, intra: INTRA_LAT, inter: 5e-6 }
    }

    #[test]
    fn small_all_reduces_are_latency_bound_and_large_ones_bandwidth_bound() {
        // 8 bytes on 8 NVLink ranks: 4 µs + 14 × 0.5 µs = 11 µs (ring), the bytes
        // a few picoseconds.
        let (t, _, a) = cost(Coll::AllReduce, &nvlink(8), 8.0);
        assert_eq!(a, Algo::Ring);
        assert!((t - 11e-6).abs() < 1e-9, "{t}");
        // 1 GB: the bytes dominate, 2·7/8 GB at 300 GB/s = 5.83 ms.
        let (t, _, _) = cost(Coll::AllReduce, &nvlink(8), 1e9);
        assert!((t - (11e-6 + 1.75e9 / 300e9)).abs() < 1e-9, "{t}");
        // Across 16 nodes of 8: the tree's 2(7·0.5 + 4·5) µs beats the ring's
        // 2(112·0.5 + 15·5) µs for small buffers, not for large ones.
        let l = Link { q: 128, nodes: 16, beta: 1.0 / 25e9, ..nvlink(128) };
        let (small, _, a) = cost(Coll::AllReduce, &l, 1024.0);
        assert_eq!(a, Algo::Tree);
        assert!((small - (4e-6 + 2.0 * (3.5e-6 + 20e-6) + 2048.0 / 25e9)).abs() < 1e-12, "{small}");
        assert_eq!(cost(Coll::AllReduce, &l, 1e9).2, Algo::Ring);
    }
}
