//! The CPU time model fusion chooses by.
//!
//! Fusion shrinks temporaries, but a statement inside fused loops computes one
//! slice per iteration: a contraction that unfused is one large GETT call becomes
//! many small ones, or plain loops once the slice is too small for the kernel
//! (the back end's rule, [`gemm_worth`]). The model prices each term by the kernel
//! the back end will pick for it under the candidate's loops:
//!
//! * GETT: per call `max(flops / gett_flops, bytes / bandwidth) + gett_call`;
//! * loops: `max(flops / loop_flops, bytes / bandwidth)`;
//!
//! where `bytes` is each operand once per call (per enclosing iteration), read at
//! `cache_bandwidth` when the operand's buffer fits in `cache_bytes` (a fused
//! temporary's slice), else at `mem_bandwidth`. The rates are measured per machine
//! by `tcc tune --cpu`; [`CpuRates::default`] is what a 2-core AVX-512 machine
//! measured (bench/programs/results.md).

use crate::sema::hir::{Factor, Hir, IndexId, Stmt, TensorId, Term};
use serde::{Deserialize, Serialize};

/// Rates of the CPU back end's kernels on one machine, at the thread count runs use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuRates {
    /// FLOP/s of a large binary contraction through the GETT kernel.
    pub gett_flops: f64,
    /// FLOP/s of a contraction computed by generated loops (no GETT).
    pub loop_flops: f64,
    /// Bytes/s streamed from memory.
    pub mem_bandwidth: f64,
    /// Bytes/s for operands whose buffer fits in `cache_bytes`.
    pub cache_bandwidth: f64,
    /// Buffers up to this many bytes are read at `cache_bandwidth`.
    pub cache_bytes: f64,
    /// Seconds per GETT call beyond its flops (packing set-up, thread hand-off).
    pub gett_call: f64,
}

impl Default for CpuRates {
    /// Measured by `tcc tune --cpu` on the 2-core development machine (Xeon,
    /// AVX-512, 2 threads; GETT 52–98 GFLOP/s over runs, loops 2.0 GFLOP/s on
    /// strided dot products, memory 19–28 GB/s, cache 53–70 GB/s, GETT call
    /// 1.3–2.3 µs); see bench/programs/results.md.
    fn default() -> Self {
        CpuRates {
            gett_flops: 80e9,
            loop_flops: 2.5e9,
            mem_bandwidth: 20e9,
            cache_bandwidth: 55e9,
            cache_bytes: 1024.0 * 1024.0,
            gett_call: 2e-6,
        }
    }
}

impl CpuRates {
    /// Refuses rates that would make the model meaningless (zero, negative, NaN).
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("gett_flops", self.gett_flops),
            ("loop_flops", self.loop_flops),
            ("mem_bandwidth", self.mem_bandwidth),
            ("cache_bandwidth", self.cache_bandwidth),
            ("cache_bytes", self.cache_bytes),
        ];
        for (name, v) in fields {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("`{name}` must be a positive number, not {v}"));
            }
        }
        if !(self.gett_call.is_finite() && self.gett_call >= 0.0) {
            return Err(format!("`gett_call` must be a number of seconds ≥ 0, not {}", self.gett_call));
        }
        Ok(())
    }
}

impl CpuRates {
    /// The file `tcc tune --cpu` writes: its header says what it is.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("CPU rates serialize");
        format!("# tcc CPU kernel rates (written by `tcc tune --cpu`; read by --fuse auto)\n{body}")
    }

    /// Parses and checks a rates file; every field is required.
    pub fn from_toml(text: &str) -> Result<CpuRates, String> {
        let r: CpuRates = toml::from_str(text).map_err(|e| format!("not a CPU rates file: {e}"))?;
        r.validate()?;
        Ok(r)
    }

    /// Where `tcc tune --cpu` writes by default: `cpu.toml` next to the tuning table
    /// (`~/.config/tcc/cpu.toml`).
    pub fn default_path() -> Option<std::path::PathBuf> {
        tcc_runtime::tune::default_path().map(|p| p.with_file_name("cpu.toml"))
    }

    /// The rates compiled code is modelled with: `path`, else the default file if it
    /// exists, else the built-in rates. A file that exists but is unreadable or
    /// invalid is an error, not a silent fallback.
    pub fn load(path: Option<&std::path::Path>) -> Result<CpuRates, String> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match Self::default_path().filter(|p| p.exists()) {
                Some(p) => p,
                None => return Ok(CpuRates::default()),
            },
        };
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        Self::from_toml(&text).map_err(|e| format!("`{}`: {e}", path.display()))
    }
}

/// The back end's rule for mapping a binary contraction to the GETT kernel: every
/// group large enough to fill the micro-kernel (`m, n ≥ 8`, `k ≥ 4`) and enough
/// work to amortise packing (`m·n·k ≥ 32768`); `min` overrides the work threshold
/// (tests lower it).
pub fn gemm_worth(m: f64, n: f64, k: f64, min: Option<f64>) -> bool {
    match min {
        Some(min) => m * n * k >= min,
        None => m >= 8.0 && n >= 8.0 && k >= 4.0 && m * n * k >= 32768.0,
    }
}

/// How the back end computes one term inside its enclosing loops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Kernel {
    /// A GETT call: `C[m,n] += A[m,k]·B[k,n]`, `batch` times (indices in all three).
    Gett { m: f64, n: f64, k: f64, batch: f64 },
    /// Generated loops over this many iterations.
    Loops { iterations: f64 },
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Kernel::Gett { m, n, k, batch } if batch > 1.0 => write!(f, "gett {m}x{n}x{k} batch {batch}"),
            Kernel::Gett { m, n, k, .. } => write!(f, "gett {m}x{n}x{k}"),
            Kernel::Loops { .. } => f.write_str("loops"),
        }
    }
}

/// The variables of a term not bound by enclosing loops (the target's, then the
/// factors', each once).
fn free_vars(lhs: &[IndexId], term: &Term, bound: &dyn Fn(IndexId) -> bool) -> Vec<IndexId> {
    let mut vars: Vec<IndexId> = Vec::new();
    for &i in lhs.iter().chain(term.factors.iter().flat_map(|f| f.indices().iter())) {
        if !bound(i) && !vars.contains(&i) {
            vars.push(i);
        }
    }
    vars
}

/// The kernel of term `term` of `st` when the indices `bound` are fixed by loops
/// around it; the same choice as the back end's (two tensor factors of the
/// target's element type, groups as [`gemm_worth`] wants).
pub fn term_kernel(
    hir: &Hir,
    st: &Stmt,
    term: &Term,
    bound: &dyn Fn(IndexId) -> bool,
    gemm_min: Option<f64>,
) -> Kernel {
    let vars = free_vars(&st.lhs.indices, term, bound);
    let size = |v: IndexId| hir.index_size(v) as f64;
    let iterations: f64 = vars.iter().map(|&v| size(v)).product();
    let loops = Kernel::Loops { iterations };
    let refs: Vec<&crate::sema::hir::TensorRef> = term
        .factors
        .iter()
        .filter_map(|f| match f {
            Factor::Tensor(r) => Some(r),
            _ => None,
        })
        .collect();
    let elem = hir.tensors[st.lhs.tensor].elem;
    if refs.len() != 2 || term.factors.len() != 2 || refs.iter().any(|r| hir.tensors[r.tensor].elem != elem) {
        return loops;
    }
    if vars.iter().any(|&v| hir.index_size(v) == 0) {
        return loops;
    }
    let (a, b) = (&refs[0].indices, &refs[1].indices);
    let (mut m, mut n, mut k, mut batch) = (1.0, 1.0, 1.0, 1.0);
    for &v in &vars {
        match (st.lhs.indices.contains(&v), a.contains(&v), b.contains(&v)) {
            (true, true, false) => m *= size(v),
            (true, false, true) => n *= size(v),
            (false, _, _) => k *= size(v),
            _ => batch *= size(v),
        }
    }
    if gemm_worth(m, n, k, gemm_min) {
        Kernel::Gett { m, n, k, batch }
    } else {
        loops
    }
}

/// Seconds the model gives statement `st` when the indices `bound` are fixed by
/// `outer` iterations of loops around it; `buffer_bytes` is the bytes stored for a
/// tensor in the candidate nest (a fused temporary stores a slice).
pub fn stmt_time(
    hir: &Hir,
    st: &Stmt,
    bound: &dyn Fn(IndexId) -> bool,
    outer: f64,
    buffer_bytes: &dyn Fn(TensorId) -> f64,
    rates: &CpuRates,
) -> f64 {
    let size = |v: IndexId| hir.index_size(v) as f64;
    let esz = |t: TensorId| hir.tensors[t].elem.size_bytes() as f64;
    let bandwidth = |t: TensorId| {
        if buffer_bytes(t) <= rates.cache_bytes {
            rates.cache_bandwidth
        } else {
            rates.mem_bandwidth
        }
    };
    // Seconds to stream a reference's free part once.
    let traffic = |t: TensorId, idx: &[IndexId]| -> f64 {
        let mut seen: Vec<IndexId> = Vec::new();
        for &i in idx {
            if !bound(i) && !seen.contains(&i) {
                seen.push(i);
            }
        }
        seen.iter().map(|&i| size(i)).product::<f64>() * esz(t) / bandwidth(t)
    };
    let mut total = 0.0;
    for term in &st.rhs.terms {
        let mut memory = traffic(st.lhs.tensor, &st.lhs.indices);
        for f in &term.factors {
            match f {
                Factor::Tensor(r) => memory += traffic(r.tensor, &r.indices),
                Factor::Affine(a) => memory += traffic(a.tensor, &a.free),
                // A call reads its argument's tensors over the call's free indices.
                Factor::Select { args, .. } => {
                    for a in args {
                        if let Factor::Tensor(r) = a {
                            memory += traffic(r.tensor, &r.indices);
                        }
                    }
                }
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => {
                    for t in &arg.terms {
                        for g in &t.factors {
                            if let Factor::Tensor(r) = g {
                                memory += traffic(r.tensor, &r.indices);
                            }
                        }
                    }
                }
            }
        }
        let per_iteration = if term.factors.len() >= 2 { 2.0 } else { 1.0 };
        total += match term_kernel(hir, st, term, bound, None) {
            Kernel::Gett { m, n, k, batch } => {
                let flops = 2.0 * m * n * k * batch;
                outer * ((flops / rates.gett_flops).max(memory) + rates.gett_call)
            }
            Kernel::Loops { iterations } => outer * (per_iteration * iterations / rates.loop_flops).max(memory),
        };
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sema::hir::UnitId;

    fn hir(src: &str) -> Hir {
        let (hir, diags) = crate::compile(src, "t");
        hir.unwrap_or_else(|| panic!("{diags:?}"))
    }

    const LADDER: &str = "
range O = 10; range V = 38;
index i, j, m, n : O; index a, b, e, f : V;
input tensor T[e,f,i,j] : f64; input tensor W[a,b,e,f] : f64;
output tensor R[a,b,i,j] : f64;
R[a,b,i,j] = T[e,f,i,j] * W[a,b,e,f];
";

    #[test]
    fn loops_around_a_contraction_shrink_its_gett_until_it_becomes_loops() {
        let h = hir(LADDER);
        let st = &h.units[UnitId::new(0)].stmts[0];
        let idx = |name: &str| h.indices.ids().find(|&i| h.indices[i].name == name).unwrap();
        let whole = term_kernel(&h, st, &st.rhs.terms[0], &|_| false, None);
        assert_eq!(whole, Kernel::Gett { m: 100.0, n: 1444.0, k: 1444.0, batch: 1.0 });
        let (i, j, b) = (idx("i"), idx("j"), idx("b"));
        // Inside `for i, j`: a matrix-vector product, below the kernel's shape.
        let inner = term_kernel(&h, st, &st.rhs.terms[0], &|v| v == i || v == j, None);
        assert_eq!(inner, Kernel::Loops { iterations: 38.0 * 38.0 * 38.0 * 38.0 });
        let bytes = |t: TensorId| h.num_elements(t).unwrap() as f64 * 8.0;
        let r = CpuRates::default();
        let t_whole = stmt_time(&h, st, &|_| false, 1.0, &bytes, &r);
        let t_fused = stmt_time(&h, st, &|v| v == i || v == j, 100.0, &bytes, &r);
        assert!(t_fused > 5.0 * t_whole, "{t_fused} vs {t_whole}");
        // Inside `for b`: still a GETT (38·100 × 38 × 1444), paying 38 calls.
        let t_b = stmt_time(&h, st, &|v| v == b, 38.0, &bytes, &r);
        assert!(t_b > t_whole && t_b < t_fused, "{t_b} {t_whole} {t_fused}");
    }

    #[test]
    fn rates_files_round_trip_and_bad_ones_are_refused() {
        let r = CpuRates { gett_flops: 1.5e11, ..CpuRates::default() };
        assert_eq!(CpuRates::from_toml(&r.to_toml()).unwrap(), r);
        assert!(CpuRates::from_toml("gett_flops = 1.0").unwrap_err().contains("missing field"));
        let negative = r.to_toml().replace("mem_bandwidth = ", "mem_bandwidth = -");
        assert!(CpuRates::from_toml(&negative).unwrap_err().contains("mem_bandwidth"));
    }

    #[test]
    fn rates_that_are_not_positive_are_refused() {
        assert!(CpuRates::default().validate().is_ok());
        let bad = CpuRates { loop_flops: 0.0, ..CpuRates::default() };
        assert!(bad.validate().unwrap_err().contains("loop_flops"));
        let nan = CpuRates { gett_call: f64::NAN, ..CpuRates::default() };
        assert!(nan.validate().is_err());
    }
}
