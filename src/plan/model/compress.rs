//! Compressed gradient communication: 1-bit Adam (Tang et al. 2021), 1-bit LAMB
//! (Li et al. 2021) and 0/1 Adam (Lu et al. 2022), as DeepSpeed runs them.
//!
//! After a warm-up at full volume (plain fp16 all-reduce of the gradients, while
//! Adam's variance settles), the variance is frozen and each step all-reduces the
//! momentum compressed to its signs, 1 bit per element, with error compensation
//! (each rank keeps what compression lost and adds it back next step).
//! DeepSpeed's `compressed_allreduce` (runtime/comm/nccl.py) runs it in two
//! phases: each rank compresses its buffer and sends chunk j to rank j
//! (all-to-all), rank j averages and re-compresses its chunk and all-gathers it:
//! 2·(q−1)/q · n/8 bytes per rank against 2·(q−1)/q · 2n for the fp16 all-reduce,
//! 1/16 of the fp16 volume, 1/32 of fp32 (a scale per chunk aside). DeepSpeed
//! runs these optimizers without ZeRO ("1bit-Adam is not compatible with ZeRO",
//! runtime/engine.py), so they apply to ZeRO-0 plans only. 0/1 Adam also skips
//! synchronization rounds after the warm-up (1-bit sync every H steps, its local
//! steps; DeepSpeed doubles H up to `local_step_clipper`): `--local-steps H` is
//! the mean interval, and `--warmup` the share of steps before its variance
//! freezes (adaptively, in 0/1 Adam).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    OneBitAdam,
    OneBitLamb,
    ZeroOneAdam,
}

/// A compressed optimizer and the share of steps it runs at full volume first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OneBit {
    pub kind: Kind,
    pub warmup: f64,
    /// Steps between compressed synchronizations after the warm-up (0/1 Adam's
    /// local steps; 1 for the others).
    pub sync_every: f64,
}

impl OneBit {
    /// Compressed synchronizations per step, on average over training.
    pub fn compressed_share(&self) -> f64 {
        (1.0 - self.warmup) / self.sync_every.max(1.0)
    }
}

/// The warm-up share when `--warmup` is not given: 1-bit Adam's BERT-Large
/// pre-training froze the variance after 16K of 118K steps (Tang et al. 2021, §6.1).
pub const DEFAULT_WARMUP: f64 = 0.15;

/// Bytes per element of the compressed momentum: one sign bit.
pub const BYTES_PER_ELEMENT: f64 = 1.0 / 8.0;

impl Kind {
    pub fn parse(s: &str) -> Result<Kind, String> {
        match s.to_ascii_lowercase().as_str() {
            "1bit-adam" | "onebit-adam" => Ok(Kind::OneBitAdam),
            "1bit-lamb" | "onebit-lamb" => Ok(Kind::OneBitLamb),
            "01-adam" | "0/1-adam" | "zero-one-adam" => Ok(Kind::ZeroOneAdam),
            _ => Err(format!("unknown compressed optimizer `{s}` (1bit-adam, 1bit-lamb, 01-adam)")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::OneBitAdam => "1-bit Adam",
            Kind::OneBitLamb => "1-bit LAMB",
            Kind::ZeroOneAdam => "0/1 Adam",
        }
    }
    /// The optimizer `type` of a DeepSpeed config.
    pub fn deepspeed_type(self) -> &'static str {
        match self {
            Kind::OneBitAdam => "OneBitAdam",
            Kind::OneBitLamb => "OneBitLamb",
            Kind::ZeroOneAdam => "ZeroOneAdam",
        }
    }
}

/// Bytes one rank sends in a compressed all-reduce of `n` elements over `q`
/// ranks: 2·(q−1)/q · n/8.
pub fn compressed_allreduce_bytes(n: f64, q: f64) -> f64 {
    2.0 * (q - 1.0) / q * n * BYTES_PER_ELEMENT
}

/// Device memory of the error compensation: the worker's error (fp32, the whole
/// buffer) and the server's (fp32, its 1/q chunk).
pub fn error_buffer_bytes(n: f64, q: f64) -> f64 {
    4.0 * n + 4.0 * n / q
}

/// Device memory traffic of one compressed all-reduce (an estimate of its
/// kernels): the worker reads the fp32 momentum and error, writes the error and
/// the signs (12 B per element); the server does the same on its chunk.
pub fn kernel_bytes(n: f64, q: f64) -> f64 {
    12.0 * n + 12.0 * n / q
}
