//! The time a tiled run should take, predicted before it runs (α-β-γ): every
//! contribution costs its flops at the tile kernel's rate for its shape, every
//! exchange round `α + β · bytes` for the rank that moves the most in it. The
//! numbers come from `tcc tune` (the `[calibration]` of its table), else from
//! built-in values measured on a 2-core machine. `tcc run --tiled --stats` prints
//! the prediction next to the wall time, so the model is checked on every run.

use std::time::Instant;
use tcc_runtime::tune::{Calibration, KernelRate};

/// The α-β-γ parameters of tiled runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeModel {
    /// Seconds per exchange round.
    pub alpha: f64,
    /// Seconds per byte a rank moves in an exchange round.
    pub beta: f64,
    /// One thread's tile kernel rate by square-tile edge (operands from memory),
    /// increasing edges: what [`Self::call`] is fitted to.
    pub kernels: Vec<KernelRate>,
    /// A kernel call costs `overhead + per_flop · flops + per_byte · bytes of its
    /// three tiles`: fitted to `kernels` (least relative squares, no negative
    /// term), so that thin products (a summed extent of 4) pay for their C tile.
    pub call: CallCost,
    /// Where the numbers come from, for reports.
    pub source: String,
}

/// The cost of one tile kernel call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallCost {
    pub overhead: f64,
    pub per_flop: f64,
    pub per_byte: f64,
}

impl CallCost {
    fn seconds(&self, flops: f64, bytes: f64) -> f64 {
        self.overhead + self.per_flop * flops + self.per_byte * bytes
    }

    /// The fit to square-tile rates: each point is a call of edge `e` doing
    /// `2e³` flops on `3e²` elements. Every subset of the three terms is fitted
    /// by least squares of relative error and the best one without a negative
    /// coefficient kept.
    pub fn fit(kernels: &[KernelRate]) -> CallCost {
        let rows: Vec<([f64; 3], f64)> = kernels
            .iter()
            .map(|k| {
                let e = k.edge as f64;
                let flops = 2.0 * e * e * e;
                ([1.0, flops, 24.0 * e * e], flops / k.flops_per_s)
            })
            .collect();
        let mut best: Option<(f64, [f64; 3])> = None;
        for mask in 1u32..8 {
            let cols: Vec<usize> = (0..3).filter(|c| mask & (1 << c) != 0).collect();
            let Some(x) = least_squares(&rows, &cols) else { continue };
            if x.iter().any(|&v| v < 0.0 || !v.is_finite()) {
                continue;
            }
            let mut coef = [0.0; 3];
            for (&c, &v) in cols.iter().zip(&x) {
                coef[c] = v;
            }
            let err: f64 = rows
                .iter()
                .map(|(a, t)| {
                    let p: f64 = a.iter().zip(&coef).map(|(x, y)| x * y).sum();
                    ((p - t) / t).powi(2)
                })
                .sum();
            if best.is_none_or(|b| err < b.0) {
                best = Some((err, coef));
            }
        }
        let c = best.map_or([0.0, 1e-10, 0.0], |b| b.1);
        CallCost { overhead: c[0], per_flop: c[1], per_byte: c[2] }
    }
}

/// Least squares of relative error over the columns `cols` of `rows` (normal
/// equations, Gaussian elimination): `None` when singular.
fn least_squares(rows: &[([f64; 3], f64)], cols: &[usize]) -> Option<Vec<f64>> {
    let n = cols.len();
    // Columns scaled to unit size, so the normal equations stay well conditioned.
    let scale: Vec<f64> =
        cols.iter().map(|&c| rows.iter().map(|(a, t)| (a[c] / t).abs()).fold(0.0, f64::max).max(1e-300)).collect();
    let mut m = vec![vec![0.0; n + 1]; n];
    for (a, t) in rows {
        let x: Vec<f64> = cols.iter().zip(&scale).map(|(&c, s)| a[c] / t / s).collect();
        for i in 0..n {
            for j in 0..n {
                m[i][j] += x[i] * x[j];
            }
            m[i][n] += x[i];
        }
    }
    for i in 0..n {
        let piv = (i..n).max_by(|&x, &y| m[x][i].abs().total_cmp(&m[y][i].abs()))?;
        m.swap(i, piv);
        if m[i][i].abs() < 1e-12 {
            return None;
        }
        let pivot = m[i].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != i {
                let f = row[i] / pivot[i];
                for (x, p) in row.iter_mut().zip(&pivot).skip(i) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| m[i][n] / m[i][i] / scale[i]).collect())
}

impl Default for TimeModel {
    fn default() -> Self {
        TimeModel::builtin()
    }
}

impl TimeModel {
    /// Values measured with `tcc tune --ranks 2` on the 2-core development VM
    /// (shm all-to-all; kernel rates with both cores busy, operands from memory).
    pub fn builtin() -> TimeModel {
        let rate = |edge, gflops: f64| KernelRate { edge, flops_per_s: gflops * 1e9 };
        let kernels = vec![
            rate(4, 0.37),
            rate(8, 2.0),
            rate(12, 5.1),
            rate(16, 9.2),
            rate(24, 10.2),
            rate(32, 15.8),
            rate(48, 21.8),
            rate(64, 22.0),
            rate(96, 30.4),
        ];
        TimeModel {
            alpha: 1e-4,
            beta: 6e-10,
            call: CallCost::fit(&kernels),
            kernels,
            source: "built-in values (run `tcc tune` to measure this machine)".into(),
        }
    }

    /// The calibration of a tuning table.
    pub fn from_calibration(c: &Calibration, path: &str) -> TimeModel {
        let mut kernels = c.kernels.clone();
        kernels.retain(|k| k.edge > 0 && k.flops_per_s.is_finite() && k.flops_per_s > 0.0);
        kernels.sort_by_key(|k| k.edge);
        if kernels.is_empty() {
            kernels = TimeModel::builtin().kernels;
        }
        TimeModel {
            alpha: c.alpha.max(0.0),
            beta: c.beta.max(0.0),
            call: CallCost::fit(&kernels),
            kernels,
            source: format!("measured by `tcc tune` with {} ranks ({path})", c.ranks),
        }
    }

    /// Seconds of one kernel call of `flops` multiplying an `m×k` by a `k×n`
    /// tile, `batch` times.
    pub fn kernel_seconds(&self, flops: f64, m: f64, n: f64, k: f64, batch: f64) -> f64 {
        self.call.seconds(flops, 8.0 * batch * (m * k + k * n + m * n))
    }

    /// Seconds of one exchange round in which the busiest rank moves `words`.
    pub fn round_seconds(&self, words: usize) -> f64 {
        self.alpha + self.beta * 8.0 * words as f64
    }
}

/// The tile kernel's rate per thread on square tiles `C += A·B` of each edge,
/// measured with `concurrent` threads computing at once (each on its own tiles,
/// as ranks do), operand tiles read from memory, best of three.
pub fn measure_kernel_rates(concurrent: usize) -> Result<Vec<KernelRate>, String> {
    use tcc_runtime::kernels::{gett_tile, GettDim};
    let kernel = crate::codegen::llvm::tile_kernel().map_err(|e| format!("no tile kernel: {e}"))?;
    let mut out = Vec::new();
    for edge in [4usize, 8, 12, 16, 24, 32, 48, 64, 96] {
        let flops = 2.0 * (edge * edge * edge) as f64;
        let calls = ((2e8 / flops) as usize).max(1);
        // Operand tiles stream from memory as in a run (a task's tiles are read
        // once): each thread cycles through 16 MiB of A and of B tiles.
        let count = ((2usize << 20) / (edge * edge)).max(1);
        let mut best = f64::MAX;
        for _ in 0..3 {
            let times: Vec<f64> = std::thread::scope(|sc| {
                let handles: Vec<_> = (0..concurrent.max(1))
                    .map(|_| {
                        let kernel = &kernel;
                        sc.spawn(move || {
                            let len = edge * edge;
                            let a: Vec<f64> = (0..len * count).map(|x| (x % 7) as f64 * 0.1).collect();
                            let b: Vec<f64> = (0..len * count).map(|x| (x % 5) as f64 * 0.1).collect();
                            let mut c = vec![0.0; len];
                            let s = edge as i64;
                            let dims = [
                                GettDim { kind: 1, size: s, sa: s, sb: 0, sc: s },
                                GettDim { kind: 2, size: s, sa: 0, sb: 1, sc: 1 },
                                GettDim { kind: 3, size: s, sa: 1, sb: s, sc: 0 },
                            ];
                            let t0 = Instant::now();
                            for i in 0..calls {
                                let at = (i % count) * len;
                                // SAFETY: the dims address edge×edge tiles inside the buffers.
                                unsafe {
                                    gett_tile(
                                        a[at..].as_ptr(),
                                        b[at..].as_ptr(),
                                        c.as_mut_ptr(),
                                        1.0,
                                        &dims,
                                        kernel.params,
                                        kernel.uk,
                                        kernel.uks,
                                        false,
                                    )
                                }
                            }
                            std::hint::black_box(&c);
                            t0.elapsed().as_secs_f64()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap_or(f64::MAX)).collect()
            });
            best = best.min(times.into_iter().fold(0.0, f64::max));
        }
        out.push(KernelRate { edge, flops_per_s: calls as f64 * flops / best.max(1e-9) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_cost_fit_recovers_a_known_cost() {
        let truth = CallCost { overhead: 2e-7, per_flop: 2e-11, per_byte: 1e-10 };
        let kernels: Vec<KernelRate> = [4usize, 8, 16, 32, 64, 128]
            .iter()
            .map(|&e| {
                let (flops, bytes) = (2.0 * (e * e * e) as f64, 24.0 * (e * e) as f64);
                KernelRate { edge: e, flops_per_s: flops / truth.seconds(flops, bytes) }
            })
            .collect();
        let fit = CallCost::fit(&kernels);
        for (a, b) in [(fit.overhead, truth.overhead), (fit.per_flop, truth.per_flop), (fit.per_byte, truth.per_byte)] {
            assert!((a - b).abs() <= 1e-6 * b, "{fit:?}");
        }
        // A product with a summed extent of 4 costs more per flop than a square one.
        let m = TimeModel::builtin();
        let thin = m.kernel_seconds(2.0 * 64.0 * 64.0 * 4.0, 64.0, 64.0, 4.0, 1.0) / (64.0 * 64.0 * 4.0);
        let square = m.kernel_seconds(2.0 * 32.0 * 32.0 * 16.0, 32.0, 32.0, 16.0, 1.0) / (32.0 * 32.0 * 16.0);
        assert!(thin > square, "{thin} {square}");
        assert!((m.round_seconds(1000) - (m.alpha + m.beta * 8000.0)).abs() < 1e-15);
    }

    #[test]
    fn measured_rates_are_positive_and_grow_from_tiny_tiles() {
        let r = measure_kernel_rates(1).unwrap();
        assert_eq!(r.len(), 9);
        assert!(r.iter().all(|k| k.flops_per_s > 0.0 && k.flops_per_s.is_finite()));
        // Edge 4 pays a call per 128 flops; edge 64 is kernel-bound.
        assert!(r[7].flops_per_s > r[0].flops_per_s, "{r:?}");
    }
}
