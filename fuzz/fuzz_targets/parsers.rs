//! Arbitrary UTF-8 through the parsers of command-line values: the network
//! description of `--network` (`tcc::plan::network::Network::parse`, and the same
//! text as a network TOML file through `Network::from_toml`), its bandwidth, time
//! and flop-rate values, and the byte sizes of `--mem-limit`, `--max-bytes` and
//! `--memory` (`parse_size` of `src/main.rs`, included verbatim by `build.rs`).
//! Nothing panics; an accepted bandwidth, time or flop rate is finite and positive;
//! an accepted network has finite non-negative α, β, γ and, for a torus, at least
//! one node; an accepted size prints as a number of bytes that parses back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcc::plan::network::{parse_bandwidth, parse_flops, parse_time, Network};

mod cli {
    include!(concat!(env!("OUT_DIR"), "/parse_size.rs"));
}

fn check_network(net: &Network, text: &str) {
    for (name, v) in [("alpha", net.alpha), ("beta", net.beta), ("gamma", net.gamma)] {
        assert!(v.is_finite() && v >= 0.0, "`{text}`: {name} = {v}");
    }
    if let Some(n) = net.nodes() {
        assert!(n > 0, "`{text}`: a torus of no nodes");
    }
    assert!(net.check_procs(1).is_ok(), "`{text}`: one process does not fit");
    let c = net.alltoall_congestion();
    assert!(c.is_finite() && c >= 1.0, "`{text}`: congestion {c}");
    let _ = net.describe();
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    for (what, r) in [("bandwidth", parse_bandwidth(s)), ("time", parse_time(s)), ("flop rate", parse_flops(s))] {
        if let Ok(v) = r {
            assert!(v.is_finite() && v > 0.0, "{what} `{s}` accepted as {v}");
        }
    }
    // `Network::parse` reads a file when its argument names one: not here.
    let t = s.trim();
    if !t.ends_with(".toml") && !t.contains(['/', '\\']) && !std::path::Path::new(t).exists() {
        if let Ok(net) = Network::parse(s) {
            check_network(&net, s);
        }
    }
    if let Ok(net) = Network::from_toml(s, "fuzz.toml") {
        check_network(&net, s);
    }
    if let Ok(n) = cli::parse_size(s) {
        assert_eq!(cli::parse_size(&n.to_string()), Ok(n), "size `{s}` accepted as {n}");
    }
});
