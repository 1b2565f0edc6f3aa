//! Network descriptions and their α-β-γ parameters.
//!
//! * `fat-tree[:bw=25GB/s,lat=2us,flops=100GF/s]` — full bisection; every message
//!   costs `α = lat`, every byte `β = 1/bw`, every flop `γ = 1/flops`.
//! * `torus:8x8x16[,bw=10GB/s,lat=1us,hop=100ns,flops=100GF/s]` — a k-ary torus of
//!   `A·B·C` nodes (at least P). A message costs `α = lat + hop · diameter/2`; a
//!   collective along a grid dimension runs on a ring with no contention; an
//!   all-to-all is bisection-limited: its words cost `β · max(1, k_max/8)` (half of
//!   all data crosses a bisection of `2P/k_max` bidirectional links).
//! * any of them may add `pcie=` (a device's host link) and `cpu-adam=` (host
//!   Adam updates per second for one device's partition), which only plans that
//!   offload the optimizer use, and `hbm=` (device memory bandwidth), which
//!   ZeRO++'s quantization kernels use.
//! * a TOML file (`*.toml`) with `topology = "torus"|"fat-tree"`, `dims = [..]`,
//!   and either `alpha` (s), `beta` (s/byte), `gamma` (s/flop) or `bw`, `lat`,
//!   `hop`, `flops` as strings with units.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Topology {
    FatTree,
    Torus { dims: Vec<usize> },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    /// The description as given.
    pub spec: String,
    pub topology: Topology,
    /// Seconds per message (start-up latency).
    pub alpha: f64,
    /// Seconds per byte on a link.
    pub beta: f64,
    /// Seconds per flop on a rank.
    pub gamma: f64,
    /// With `peak=`: the device's peak flop rate and the fraction of it the
    /// model's flops run at (`mfu=`, else [`DEFAULT_MFU`], said so), whose
    /// product sets γ; `None` when γ came from `flops=` or `gamma`.
    pub peak: Option<f64>,
    pub mfu: Option<(f64, bool)>,
    /// Bytes/s between a device and its host (ZeRO-Offload moves gradients down
    /// and updated weights up): `pcie=`, else [`PCIE_BW`].
    pub pcie: f64,
    /// Adam updates per second the host runs for one device's partition
    /// (ZeRO-Offload's CPU-Adam): `cpu-adam=`, else [`CPU_ADAM`].
    pub cpu_adam: f64,
    /// Bytes/s a device's kernels move through its memory (ZeRO++'s quantization
    /// kernels read and write every weight and gradient they compress): `hbm=`,
    /// else [`HBM_BW`].
    pub hbm: f64,
    /// ZeRO-Infinity's NVMe tier: bytes/s a device reads or writes its NVMe share
    /// (`nvme=`); `None`: no NVMe tier, not searched.
    pub nvme: Option<f64>,
    /// Host memory per device (`host-mem=`): offloaded states beyond it do not fit;
    /// `None`: not limited.
    pub host_mem: Option<f64>,
    /// The keys given that only model-parallel plans use (`pcie`, `cpu-adam`,
    /// `hbm`): the program planner refuses them ([`Network::for_programs`]).
    #[serde(skip)]
    pub model_keys: Vec<String>,
}

/// The parameters a network description takes.
const KNOWN_KEYS: &str = "bw, lat, hop, flops, peak, mfu, alpha, beta, gamma, pcie, cpu-adam, hbm, nvme, host-mem";

/// Memory bandwidth a device's element-wise kernels reach: about 75% of an
/// H100 SXM's 3.35 TB/s.
pub const HBM_BW: f64 = 2.5e12;

/// A PCIe 4.0 ×16 link's achieved bandwidth per direction.
pub const PCIE_BW: f64 = 25e9;
/// CPU-Adam updates per second for one device's share of a host (DeepSpeed's
/// CPU-Adam: about 1e9 parameters/s on one socket's cores, Ren et al. 2021).
pub const CPU_ADAM: f64 = 1e9;

/// The model-flops utilization `peak=` assumes without `mfu=`: large-model
/// training reaches 0.35–0.55 of bf16 peak (Megatron-LM, PaLM and Llama reports).
pub const DEFAULT_MFU: f64 = 0.4;

pub const FAT_TREE_BW: f64 = 25e9;
pub const FAT_TREE_LAT: f64 = 2e-6;
pub const TORUS_BW: f64 = 10e9;
pub const TORUS_LAT: f64 = 1e-6;
pub const TORUS_HOP: f64 = 100e-9;
pub const FLOPS: f64 = 100e9;

impl Network {
    pub fn fat_tree() -> Network {
        Network {
            spec: "fat-tree".into(),
            topology: Topology::FatTree,
            alpha: FAT_TREE_LAT,
            beta: 1.0 / FAT_TREE_BW,
            gamma: 1.0 / FLOPS,
            peak: None,
            mfu: None,
            pcie: PCIE_BW,
            cpu_adam: CPU_ADAM,
            hbm: HBM_BW,
            nvme: None,
            host_mem: None,
            model_keys: Vec::new(),
        }
    }

    /// Parses a description, or reads a TOML file when `spec` names one.
    pub fn parse(spec: &str) -> Result<Network, String> {
        let s = spec.trim();
        if s.ends_with(".toml") || std::path::Path::new(s).is_file() {
            let text = std::fs::read_to_string(s).map_err(|e| format!("cannot read network file `{s}`: {e}"))?;
            return Network::from_toml(&text, s);
        }
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        if !matches!(kind, "fat-tree" | "fattree" | "torus") {
            return Err(format!(
                "unknown network kind `{kind}` (use torus:AxBxC, fat-tree:bw=..,lat=.. or a .toml file)"
            ));
        }
        let mut kv: Vec<(String, String)> = Vec::new();
        let mut dims: Option<Vec<usize>> = None;
        for (k, part) in rest.split(',').map(str::trim).filter(|p| !p.is_empty()).enumerate() {
            match part.split_once('=') {
                Some((key, v)) => kv.push((key.trim().to_ascii_lowercase(), v.trim().to_string())),
                None if k == 0 && kind == "torus" => dims = Some(parse_dims(part)?),
                None => return Err(format!("`{part}` in network `{s}` is not KEY=VALUE")),
            }
        }
        let topology = match kind {
            "fat-tree" | "fattree" => Topology::FatTree,
            "torus" => Topology::Torus {
                dims: dims.ok_or_else(|| format!("torus network `{s}` needs its dimensions, e.g. torus:8x8x16"))?,
            },
            other => {
                return Err(format!(
                    "unknown network kind `{other}` (use torus:AxBxC, fat-tree:bw=..,lat=.. or a .toml file)"
                ))
            }
        };
        Network::build(s, topology, &kv)
    }

    fn build(spec: &str, topology: Topology, kv: &[(String, String)]) -> Result<Network, String> {
        let torus = matches!(topology, Topology::Torus { .. });
        let mut bw = if torus { TORUS_BW } else { FAT_TREE_BW };
        let mut lat = if torus { TORUS_LAT } else { FAT_TREE_LAT };
        let mut hop = if torus { TORUS_HOP } else { 0.0 };
        let mut flops = None;
        let (mut alpha, mut beta, mut gamma) = (None, None, None);
        let (mut peak, mut mfu) = (None, None);
        let (mut pcie, mut cpu_adam, mut hbm) = (PCIE_BW, CPU_ADAM, HBM_BW);
        let mut model_keys = Vec::new();
        let (mut nvme, mut host_mem) = (None, None);
        for (k, v) in kv {
            if matches!(k.as_str(), "pcie" | "cpu-adam" | "cpu_adam" | "hbm" | "nvme" | "host-mem" | "host_mem") {
                model_keys.push(k.clone());
            }
            match k.as_str() {
                "bw" | "bandwidth" => bw = parse_bandwidth(v)?,
                "lat" | "latency" => lat = parse_time(v)?,
                "hop" => hop = parse_time(v)?,
                "flops" => flops = Some(parse_flops(v)?),
                "peak" => peak = Some(parse_flops(v)?),
                "mfu" => {
                    let x = parse_number(k, v)?;
                    if !(x > 0.0 && x <= 1.0) {
                        return Err(format!("mfu={v}: a fraction of peak in (0, 1], such as 0.4"));
                    }
                    mfu = Some(x);
                }
                "alpha" => alpha = Some(parse_number(k, v)?),
                "beta" => beta = Some(parse_number(k, v)?),
                "gamma" => gamma = Some(parse_number(k, v)?),
                "pcie" => pcie = parse_bandwidth(v)?,
                "hbm" => hbm = parse_bandwidth(v)?,
                "nvme" => nvme = Some(parse_bandwidth(v)?),
                "host-mem" | "host_mem" => host_mem = Some(parse_memory(v).map_err(|e| format!("host-mem={v}: {e}"))?),
                "cpu-adam" | "cpu_adam" => {
                    cpu_adam = parse_number(k, v)?;
                    if !(cpu_adam > 0.0 && cpu_adam.is_finite()) {
                        return Err(format!("cpu-adam={v}: parameters updated per second, such as 1e9"));
                    }
                }
                other => return Err(format!("unknown network parameter `{other}` (known: {KNOWN_KEYS})")),
            }
        }
        // One compute rate: achieved (`flops=`, `gamma`), or peak × MFU.
        if peak.is_some() && (flops.is_some() || gamma.is_some()) {
            return Err("give the compute rate once: flops= (achieved) or peak= with mfu=, not both".into());
        }
        if mfu.is_some() && peak.is_none() {
            return Err("mfu= is a fraction of peak=: give peak= too (or the achieved rate as flops=)".into());
        }
        let mfu = peak.map(|_| mfu.map_or((DEFAULT_MFU, true), |x| (x, false)));
        let flops = match (peak, mfu) {
            (Some(p), Some((m, _))) => p * m,
            _ => flops.unwrap_or(FLOPS),
        };
        let diameter_half = match &topology {
            Topology::Torus { dims } => dims.iter().map(|&k| k / 2).sum::<usize>() as f64 / 2.0,
            Topology::FatTree => 0.0,
        };
        let net = Network {
            spec: spec.to_string(),
            alpha: alpha.unwrap_or(lat + hop * diameter_half),
            beta: beta.unwrap_or(1.0 / bw),
            gamma: gamma.unwrap_or(1.0 / flops),
            topology,
            peak,
            mfu,
            pcie,
            cpu_adam,
            hbm,
            nvme,
            host_mem,
            model_keys,
        };
        for (name, v) in [("alpha", net.alpha), ("beta", net.beta), ("gamma", net.gamma)] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("network parameter {name} = {v} is not a finite non-negative number"));
            }
        }
        Ok(net)
    }

    /// This network for the program planner (`tcc plan`, `tcc run --plan`), which
    /// has no use for the keys of model-parallel plans: an error naming them
    /// rather than accepting and ignoring them.
    pub fn for_programs(self) -> Result<Network, String> {
        match self.model_keys.first() {
            None => Ok(self),
            Some(k) => Err(format!(
                "`{k}=` describes a device's host link, host or memory for `tcc plan-model` (offload, ZeRO-Infinity, \
                 ZeRO++); the program planner does not use it"
            )),
        }
    }

    /// A flat TOML subset: `key = value` lines, `#` comments, `[section]` headers ignored.
    pub fn from_toml(text: &str, spec: &str) -> Result<Network, String> {
        let mut topology: Option<String> = None;
        let mut dims: Option<Vec<usize>> = None;
        let mut kv = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() || line.starts_with('[') && line.ends_with(']') && !line.contains('=') {
                continue;
            }
            let (k, v) = line.split_once('=').ok_or_else(|| format!("{spec}:{}: expected `key = value`", n + 1))?;
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim();
            let unq = v.trim_matches('"').trim_matches('\'').to_string();
            match k.as_str() {
                "topology" => topology = Some(unq),
                "dims" => {
                    let inner = v.trim_start_matches('[').trim_end_matches(']');
                    // The same checks as `torus:AxB` (no 0, no wrapped node count).
                    dims = Some(parse_dims(&inner.replace(',', "x")).map_err(|e| {
                        format!("{spec}:{}: dims must be a list of positive integers, e.g. [8, 8, 16] ({e})", n + 1)
                    })?);
                }
                _ => kv.push((k, unq)),
            }
        }
        let topology = match topology.as_deref() {
            Some("torus") => Topology::Torus {
                dims: dims
                    .filter(|d| !d.is_empty() && d.iter().all(|&x| x >= 1))
                    .ok_or_else(|| format!("{spec}: a torus needs `dims = [A, B, ...]`"))?,
            },
            Some("fat-tree") | Some("fattree") | None => Topology::FatTree,
            Some(other) => return Err(format!("{spec}: unknown topology `{other}` (torus or fat-tree)")),
        };
        Network::build(spec, topology, &kv)
    }

    /// Number of nodes, if the topology fixes it.
    pub fn nodes(&self) -> Option<usize> {
        match &self.topology {
            Topology::Torus { dims } => Some(dims.iter().product()),
            Topology::FatTree => None,
        }
    }

    pub fn check_procs(&self, p: usize) -> Result<(), String> {
        match self.nodes() {
            Some(n) if p > n => Err(format!("{p} processes do not fit on network `{}` ({n} nodes)", self.spec)),
            _ => Ok(()),
        }
    }

    /// Factor on β for an all-to-all among all ranks (bisection contention).
    pub fn alltoall_congestion(&self) -> f64 {
        match &self.topology {
            Topology::Torus { dims } => (*dims.iter().max().unwrap_or(&1) as f64 / 8.0).max(1.0),
            Topology::FatTree => 1.0,
        }
    }

    pub fn describe(&self) -> String {
        let topo = match &self.topology {
            Topology::FatTree => "fat-tree".to_string(),
            Topology::Torus { dims } => {
                format!("torus {}", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"))
            }
        };
        format!(
            "{topo}: α = {} per message, β = {} per byte ({}/s), γ = {} per flop ({}/s per device{})",
            fmt_time(self.alpha),
            fmt_time(self.beta),
            fmt_rate(1.0 / self.beta, "B"),
            fmt_time(self.gamma),
            fmt_rate(1.0 / self.gamma, "FLOP"),
            match (self.peak, self.mfu) {
                (Some(p), Some((m, default))) => format!(
                    " = peak {}/s × MFU {m:.2}{}",
                    fmt_rate(p, "FLOP"),
                    if default { " (default; set mfu=)" } else { "" }
                ),
                _ => String::new(),
            }
        )
    }
}

/// The largest torus a plan is made for (2^40 nodes: far beyond any machine).
pub const MAX_TORUS_NODES: usize = 1 << 40;

fn parse_dims(s: &str) -> Result<Vec<usize>, String> {
    let d: Result<Vec<usize>, _> = s.split(['x', 'X', '*']).map(|x| x.trim().parse::<usize>()).collect();
    match d {
        Ok(d) if !d.is_empty() && d.iter().all(|&x| x >= 1) => {
            // The node count must exist: a product past 2^64 wrapped to 0 nodes.
            match d.iter().try_fold(1usize, |n, &x| n.checked_mul(x)) {
                Some(n) if n <= MAX_TORUS_NODES => Ok(d),
                _ => Err(format!("torus `{s}` has more than {MAX_TORUS_NODES} nodes")),
            }
        }
        _ => Err(format!("`{s}` is not a list of torus dimensions like 8x8x16")),
    }
}

fn parse_number(k: &str, v: &str) -> Result<f64, String> {
    v.parse::<f64>().map_err(|_| format!("network parameter `{k}` = `{v}` is not a number"))
}

fn split_num(v: &str) -> Result<(f64, String), String> {
    let t = v.trim();
    let at = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    // `e` may start a unit (none of ours does), so this is safe.
    let (n, u) = t.split_at(at);
    let x: f64 = n.parse().map_err(|_| format!("`{v}` does not start with a number"))?;
    if !x.is_finite() || x <= 0.0 {
        return Err(format!("`{v}` must be positive"));
    }
    Ok((x, u.trim().to_string()))
}

/// `x` (the value of `v` in base units) when it is finite and positive: a number
/// that `split_num` accepted can still leave that range once scaled by its unit
/// (`1e308PB/s` is infinite, `2.5e-320ps` is zero).
fn in_range(v: &str, x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("`{v}` is out of range"))
    }
}

fn prefix_scale(p: &str) -> Option<f64> {
    Some(match p {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        _ => return None,
    })
}

/// `25GB/s`, `100Gb/s` (bits), `12.5 GB/s`. A bare number is an error: it would
/// be bytes per second, never what was meant.
/// A memory size with its unit (`512GB`, `1.5TiB`; a bare number is refused).
pub fn parse_memory(v: &str) -> Result<f64, String> {
    let t = v.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num.parse().map_err(|_| format!("`{v}` is not a size"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1048576.0,
        "gib" => 1073741824.0,
        "tib" => 1099511627776.0,
        "" => return Err(format!("`{v}` has no unit: write {v}GB (a bare number would be bytes)")),
        u => return Err(format!("unknown size unit `{u}` (kB, MB, GB, TB, KiB, MiB, GiB, TiB)")),
    };
    Ok(x * scale)
}

pub fn parse_bandwidth(v: &str) -> Result<f64, String> {
    let (x, u) = split_num(v)?;
    if u.is_empty() {
        return Err(format!("bandwidth `{v}` has no unit (use B/s, MB/s, GB/s, Gb/s)"));
    }
    let u = u.trim_end_matches("/s").trim_end_matches("ps");
    let (p, bits) = if let Some(p) = u.strip_suffix("bit") {
        (p, true)
    } else if let Some(p) = u.strip_suffix('B') {
        (p, false)
    } else if let Some(p) = u.strip_suffix('b') {
        (p, true)
    } else {
        (u, false)
    };
    let s = prefix_scale(p).ok_or_else(|| format!("unknown bandwidth unit in `{v}` (use B/s, MB/s, GB/s, Gb/s)"))?;
    in_range(v, x * s / if bits { 8.0 } else { 1.0 })
}

/// `2us`, `1.5µs`, `300ns`, `1ms`, `0.001s`.
pub fn parse_time(v: &str) -> Result<f64, String> {
    let (x, u) = split_num(v)?;
    let s = match u.as_str() {
        "s" | "" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" | "μs" => 1e-6,
        "ns" => 1e-9,
        "ps" => 1e-12,
        _ => return Err(format!("unknown time unit in `{v}` (use s, ms, us, ns)")),
    };
    in_range(v, x * s)
}

/// `100GF/s`, `1TFLOP/s`, `2.5 Gflops`.
pub fn parse_flops(v: &str) -> Result<f64, String> {
    let (x, u) = split_num(v)?;
    let l = u.to_ascii_lowercase();
    let core = l.trim_end_matches("/s").trim_end_matches("flops").trim_end_matches("flop").trim_end_matches('f');
    let p = match core {
        "" => "",
        "k" => "k",
        "m" => "M",
        "g" => "G",
        "t" => "T",
        "p" => "P",
        _ => return Err(format!("unknown flop-rate unit in `{v}` (use GF/s, TF/s)")),
    };
    in_range(v, x * prefix_scale(p).unwrap_or(1.0))
}

pub fn fmt_time(t: f64) -> String {
    let a = t.abs();
    if a == 0.0 {
        "0 s".into()
    } else if a >= 1.0 {
        format!("{t:.3} s")
    } else if a >= 1e-3 {
        format!("{:.3} ms", t * 1e3)
    } else if a >= 1e-6 {
        format!("{:.3} µs", t * 1e6)
    } else if a >= 1e-9 {
        format!("{:.3} ns", t * 1e9)
    } else {
        format!("{:.3} ps", t * 1e12)
    }
}

fn fmt_rate(r: f64, unit: &str) -> String {
    for (s, p) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if r >= s {
            return format!("{:.1} {p}{unit}", r / s);
        }
    }
    format!("{r:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_and_mfu_set_the_compute_rate_and_are_checked() {
        let n = Network::parse("fat-tree:peak=1000TF/s,mfu=0.5").unwrap();
        assert!((1.0 / n.gamma - 500e12).abs() < 1.0, "{}", 1.0 / n.gamma);
        assert_eq!((n.peak, n.mfu), (Some(1000e12), Some((0.5, false))));
        // Without mfu=: the default, said so.
        let n = Network::parse("fat-tree:peak=1000TF/s").unwrap();
        assert!((1.0 / n.gamma - DEFAULT_MFU * 1000e12).abs() < 1.0);
        assert!(n.describe().contains("MFU 0.40 (default"), "{}", n.describe());
        assert!(Network::parse("fat-tree:flops=1TF/s").unwrap().peak.is_none());
        for bad in [
            "fat-tree:flops=1TF/s,peak=2TF/s",
            "fat-tree:mfu=0.5",
            "fat-tree:peak=1TF/s,mfu=0",
            "fat-tree:peak=1TF/s,mfu=2",
        ] {
            assert!(Network::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_the_three_forms() {
        let f = Network::parse("fat-tree:bw=25GB/s,lat=2us").unwrap();
        assert!((f.beta - 1.0 / 25e9).abs() < 1e-24 && (f.alpha - 2e-6).abs() < 1e-15);
        let t = Network::parse("torus:8x8x16").unwrap();
        assert_eq!(t.nodes(), Some(1024));
        assert!((t.alpha - (1e-6 + 100e-9 * 8.0)).abs() < 1e-15);
        assert_eq!(t.alltoall_congestion(), 2.0);
        assert!(t.check_procs(2048).is_err() && t.check_procs(1024).is_ok());
        let g = Network::from_toml(
            "# net\ntopology = \"torus\"\ndims = [4, 4]\nalpha = 1e-6\nbeta = 1e-10\ngamma = 1e-11\n",
            "x.toml",
        )
        .unwrap();
        assert_eq!(g.nodes(), Some(16));
        assert_eq!(g.beta, 1e-10);
        let h = Network::parse("fat-tree:bw=100Gb/s,flops=1TF/s").unwrap();
        assert!((h.beta - 8.0 / 100e9).abs() < 1e-22 && (h.gamma - 1e-12).abs() < 1e-24);
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "mesh:4x4",
            "torus",
            "torus:4xq",
            "fat-tree:bw=fast",
            "fat-tree:lat=2parsecs",
            "fat-tree:color=red",
            "fat-tree:bw",
            "torus:4294967296x4294967296",
            "torus:0x4",
            // finite and positive numbers whose unit scales them out of range
            "fat-tree:lat=2.5e-320ps",
            "fat-tree:bw=1e308PB/s",
            "fat-tree:flops=1e300PF/s",
            "torus:4x4,hop=1e-320ps",
        ] {
            assert!(Network::parse(bad).is_err(), "{bad}");
        }
        assert!(Network::from_toml("topology = \"ring\"", "x.toml").is_err());
        assert!(Network::from_toml("nonsense", "x.toml").is_err());
        for dims in ["[0, 4]", "[4294967296, 4294967296]"] {
            assert!(Network::from_toml(&format!("topology = \"torus\"\ndims = {dims}\n"), "x.toml").is_err(), "{dims}");
        }
    }
}
