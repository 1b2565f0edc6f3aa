//! ZeRO-Infinity (Rajbhandari et al. 2021): with ZeRO stage 3, a rank's partition
//! of the fp16 weights, the fp16 gradients and the optimizer states (fp32 master
//! weights, momentum, variance) lives in a slower tier — host memory or NVMe —
//! and moves to the device when used. The device keeps only the weights gathered
//! for the layers in use (ZeRO-3's gather buffers) and the activations.
//!
//! Per step and rank, with P parameters in the rank's partition and m
//! micro-batches (no overlap with compute is assumed: an upper bound, as for
//! ZeRO-Offload): the fp16 partition is fetched for every forward and every
//! backward pass (2·m·2P bytes at the tier's rate: `pcie=` from the host,
//! min(`nvme=`, `pcie=`) from NVMe), the reduced fp16 gradients go down to the
//! host per micro-batch (m·2P at `pcie=`), the host runs Adam on P parameters
//! (`cpu-adam=`), and on NVMe the optimizer states are read and written back and
//! the updated fp16 weights written (12P + 12P + 2P at `nvme=`).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Cpu,
    Nvme,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Cpu => "cpu",
            Tier::Nvme => "nvme",
        }
    }
}

/// Bytes per parameter a tier holds: fp16 weights, fp16 gradients, fp32 master
/// weights, momentum and variance.
pub const BYTES_PER_PARAM: f64 = 2.0 + 2.0 + super::formulas::K_ADAM;

/// Seconds per step that moving and updating `part` parameters through `tier` costs.
pub fn step_time(tier: Tier, part: f64, micro_batches: f64, net: &crate::plan::Network) -> f64 {
    let fetch_bw = match tier {
        Tier::Cpu => net.pcie,
        Tier::Nvme => net.pcie.min(net.nvme.unwrap_or(net.pcie)),
    };
    let fetch = 2.0 * micro_batches * 2.0 * part / fetch_bw;
    let grads = micro_batches * 2.0 * part / net.pcie;
    let adam = part / net.cpu_adam;
    let nvme = match (tier, net.nvme) {
        (Tier::Nvme, Some(bw)) => (12.0 + 12.0 + 2.0) * part / bw,
        _ => 0.0,
    };
    fetch + grads + adam + nvme
}
