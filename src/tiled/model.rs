//! The time a tiled run should take, predicted before it runs (α-β-γ): every
//! contribution costs its flops at the tile kernel's rate for its shape, every
//! exchange round `α + β · bytes` for the rank that moves the most in it. The
//! numbers come from `tcc tune` (the `[calibration]` of its table), else from
//! built-in values measured on a 2-core machine. `tcc run --tiled --stats` prints
//! the prediction next to the wall time, so the model is checked on every run.

use std::time::Instant;
use tcc_runtime::tune::{Calibration, KernelRate};

/// One-sided gets on the 2-core development VM (`tcc tune --ranks 2`, shm).
const GET_ALPHA: f64 = 3.0e-7;
const GET_BETA: f64 = 1.5e-10;
/// Fresh memory first written on the 2-core development VM (`tcc tune --ranks 2`).
const TOUCH_PER_BYTE: f64 = 2.0e-9;

/// The α-β-γ parameters of tiled runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeModel {
    /// Seconds per exchange round.
    pub alpha: f64,
    /// Seconds per byte a rank moves in an exchange round.
    pub beta: f64,
    /// Seconds per one-sided get, and per byte read, with every rank reading at
    /// once ([`tcc_runtime::tune::measure_gets`]).
    pub get_alpha: f64,
    pub get_beta: f64,
    /// One thread's tile kernel rate on the shapes of [`SHAPES`] (operands from
    /// memory): what [`Self::call`] is fitted to.
    pub kernels: Vec<KernelRate>,
    /// A kernel call costs `overhead + per_flop · flops + per_byte · bytes of its
    /// three tiles`, fitted to `kernels` (least relative squares, no negative
    /// term) so that thin products (a summed extent of 4) pay for their C tile,
    /// and corrected to the nearest measured shape ([`CallModel`]).
    pub call: CallModel,
    /// The same for rates measured with one thread alone (a core to itself
    /// runs faster: turbo, the whole memory bandwidth).
    pub call_alone: CallModel,
    /// Calls as the executor makes them (strided views of a calibration
    /// program, [`measure_executor`]): per measured shape (ln m, ln n, ln k), its
    /// measured time over what `call_alone` gives it. A call within
    /// [`EXEC_RADIUS`] of one is scaled by the nearest one's factor.
    pub exec: Vec<([f64; 3], f64)>,
    /// Seconds per kernel call the executor spends around it (enumerating a
    /// task's contributions, tile views, strides), measured by [`measure_call_overhead`].
    pub call_overhead: f64,
    /// Seconds per byte of fresh tile memory first written (page faults and
    /// zeroing; [`tcc_runtime::tune::measure_touch`]): every tensor a run
    /// allocates, and every buffer of received or partial tiles.
    pub touch_per_byte: f64,
    /// The same with one rank alone (interpolated by [`Self::concurrency`] as
    /// the kernel rates are).
    pub touch_alone_per_byte: f64,
    /// The same for private memory, which one process's tensors are (window
    /// memory under MPI faults in smaller pages).
    pub private_touch_per_byte: f64,
    pub private_touch_alone_per_byte: f64,
    /// Threads computing at once when `kernels` were measured.
    pub busy: usize,
    /// Threads computing at once in the run being predicted (set by the run):
    /// the cost of a call is interpolated between `call_alone` (1) and `call` (`busy`).
    pub concurrency: usize,
    /// Where the numbers come from, for reports.
    pub source: String,
}

/// The cost of one tile kernel call: the fitted [`CallCost`], corrected by the
/// ratio of measured to fitted time at the measured shape nearest to the call's
/// (in log m, log n, log k), so that it is exact where it was measured and
/// keeps the fit's form in between.
#[derive(Debug, Clone, PartialEq)]
pub struct CallModel {
    pub fit: CallCost,
    /// Per measured shape: (ln m, ln n, ln k), measured / fitted time.
    points: Vec<([f64; 3], f64)>,
}

impl CallModel {
    pub fn new(rates: &[KernelRate]) -> CallModel {
        let fit = CallCost::fit(rates);
        let points = rates
            .iter()
            .map(|r| {
                let (m, n, k) = (r.m as f64, r.n as f64, r.k as f64);
                let flops = 2.0 * m * n * k;
                let measured = flops / r.flops_per_s;
                (log_shape(m, n, k), measured / fit.seconds(flops, call_bytes(m, n, k, 1.0)).max(1e-300))
            })
            .collect();
        CallModel { fit, points }
    }

    /// Seconds of a call of `flops` on tiles of `m, n, k` (`batch` times).
    pub fn seconds(&self, flops: f64, m: f64, n: f64, k: f64, batch: f64) -> f64 {
        let x = log_shape(m, n, k);
        let near =
            self.points.iter().map(|(p, c)| (dist2(p, &x), *c)).min_by(|a, b| a.0.total_cmp(&b.0)).map_or(1.0, |b| b.1);
        near * self.fit.seconds(flops, call_bytes(m, n, k, batch))
    }
}

/// (ln m, ln n, ln k), extents below 1 taken as 1: where shapes are compared.
fn log_shape(m: f64, n: f64, k: f64) -> [f64; 3] {
    [m.max(1.0).ln(), n.max(1.0).ln(), k.max(1.0).ln()]
}

/// Squared distance of two log shapes.
fn dist2(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Bytes of the three tiles of a call.
fn call_bytes(m: f64, n: f64, k: f64, batch: f64) -> f64 {
    8.0 * batch * (m * k + k * n + m * n)
}

/// The cost of one tile kernel call, as fitted.
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

    /// The fit to measured rates: each point is a call doing `2mnk` flops on
    /// `mk + kn + mn` elements. Every subset of the three terms is fitted
    /// by least squares of relative error and the best one without a negative
    /// coefficient kept.
    pub fn fit(kernels: &[KernelRate]) -> CallCost {
        let rows: Vec<([f64; 3], f64)> = kernels
            .iter()
            .map(|r| {
                let (m, n, k) = (r.m as f64, r.n as f64, r.k as f64);
                let flops = 2.0 * m * n * k;
                ([1.0, flops, 8.0 * (m * k + k * n + m * n)], flops / r.flops_per_s)
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
        // Measured with `tcc tune --ranks 2` (both cores busy, a quiet machine) on
        // the first 15 of SHAPES, before the large products were added; without
        // a table those are extrapolated from 96³.
        let gflops: [f64; 15] =
            [0.39, 2.25, 4.86, 13.1, 10.8, 18.6, 24.1, 26.2, 34.3, 6.84, 7.92, 17.9, 6.5, 19.0, 9.09];
        let kernels: Vec<KernelRate> =
            SHAPES.iter().zip(gflops).map(|(&(m, n, k), g)| KernelRate { m, n, k, flops_per_s: g * 1e9 }).collect();
        let call = CallModel::new(&kernels);
        TimeModel {
            alpha: 4.3e-5,
            beta: 3.1e-10,
            get_alpha: GET_ALPHA,
            get_beta: GET_BETA,
            call_alone: call.clone(),
            exec: Vec::new(),
            call,
            call_overhead: 9.6e-7,
            touch_per_byte: TOUCH_PER_BYTE,
            touch_alone_per_byte: TOUCH_PER_BYTE,
            private_touch_per_byte: TOUCH_PER_BYTE,
            private_touch_alone_per_byte: TOUCH_PER_BYTE,
            busy: 2,
            concurrency: 2,
            kernels,
            source: "built-in values (run `tcc tune` to measure this machine)".into(),
        }
    }

    /// The calibration of a tuning table.
    pub fn from_calibration(c: &Calibration, path: &str) -> TimeModel {
        let clean = |list: &[KernelRate]| {
            let mut v: Vec<KernelRate> = list
                .iter()
                .copied()
                .filter(|r| r.m * r.n * r.k > 0 && r.flops_per_s.is_finite() && r.flops_per_s > 0.0)
                .collect();
            v.sort_by_key(|k| (k.m, k.n, k.k));
            v
        };
        let mut kernels = clean(&c.kernels);
        if kernels.is_empty() {
            kernels = TimeModel::builtin().kernels;
        }
        let call = CallModel::new(&kernels);
        let alone = clean(&c.kernels_alone);
        let call_alone = if alone.is_empty() { call.clone() } else { CallModel::new(&alone) };
        // Tables from before first touch was measured: the built-in value.
        let touch_per_byte = if c.touch_per_byte > 0.0 { c.touch_per_byte } else { TOUCH_PER_BYTE };
        let touch_alone_per_byte = if c.touch_alone_per_byte > 0.0 { c.touch_alone_per_byte } else { touch_per_byte };
        TimeModel {
            alpha: c.alpha.max(0.0),
            beta: c.beta.max(0.0),
            // Tables from before gets were measured: the built-in values.
            get_alpha: if c.get_beta > 0.0 { c.get_alpha.max(0.0) } else { GET_ALPHA },
            get_beta: if c.get_beta > 0.0 { c.get_beta } else { GET_BETA },
            exec: exec_corrections(&clean(&c.kernels_exec), &call_alone),
            call_alone,
            call,
            call_overhead: c.call_overhead.max(0.0),
            touch_per_byte,
            touch_alone_per_byte,
            // Tables from before private memory was measured: the window rates.
            private_touch_per_byte: if c.private_touch_per_byte > 0.0 {
                c.private_touch_per_byte
            } else {
                touch_per_byte
            },
            private_touch_alone_per_byte: if c.private_touch_alone_per_byte > 0.0 {
                c.private_touch_alone_per_byte
            } else {
                touch_alone_per_byte
            },
            busy: c.ranks.max(1),
            concurrency: c.ranks.max(1),
            kernels,
            source: format!("measured by `tcc tune` with {} ranks ({path})", c.ranks),
        }
    }

    /// Seconds of one kernel call of `flops` multiplying an `m×k` by a `k×n`
    /// tile, `batch` times.
    pub fn kernel_seconds(&self, flops: f64, m: f64, n: f64, k: f64, batch: f64) -> f64 {
        let alone = self.call_alone.seconds(flops, m, n, k, batch);
        let busy = self.call.seconds(flops, m, n, k, batch);
        let exec = self.exec_factor(m, n, k);
        if self.busy <= 1 {
            return exec * busy + self.call_overhead;
        }
        let f = ((self.concurrency.max(1) - 1) as f64 / (self.busy - 1) as f64).min(1.0);
        exec * (alone + f * (busy - alone)) + self.call_overhead
    }

    /// The factor of the nearest executor-timed shape within [`EXEC_RADIUS`], else 1.
    fn exec_factor(&self, m: f64, n: f64, k: f64) -> f64 {
        let x = log_shape(m, n, k);
        self.exec
            .iter()
            .map(|(p, c)| (dist2(p, &x).sqrt(), *c))
            .filter(|(d, _)| *d <= EXEC_RADIUS)
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map_or(1.0, |b| b.1)
    }

    /// This model for a run of `threads` threads computing at once (all ranks'
    /// threads on the machine).
    pub fn at_concurrency(&self, threads: usize) -> TimeModel {
        TimeModel { concurrency: threads.max(1), ..self.clone() }
    }

    /// Seconds to allocate and first write `words` of fresh tile memory.
    pub fn touch_seconds(&self, words: f64) -> f64 {
        self.interpolated(self.touch_alone_per_byte, self.touch_per_byte) * 8.0 * words
    }

    /// [`Self::touch_seconds`] for private memory (one process's tensors).
    pub fn private_touch_seconds(&self, words: f64) -> f64 {
        self.interpolated(self.private_touch_alone_per_byte, self.private_touch_per_byte) * 8.0 * words
    }

    /// A rate measured alone and with [`Self::busy`] threads at once, at
    /// [`Self::concurrency`] threads (linear in between, as kernel rates are).
    fn interpolated(&self, alone: f64, busy: f64) -> f64 {
        let f =
            if self.busy <= 1 { 1.0 } else { ((self.concurrency.max(1) - 1) as f64 / (self.busy - 1) as f64).min(1.0) };
        alone + f * (busy - alone)
    }

    /// Seconds of one one-sided get of `words`.
    pub fn get_seconds(&self, words: usize) -> f64 {
        self.get_alpha + self.get_beta * 8.0 * words as f64
    }

    /// Seconds of one exchange round in which the busiest rank moves `words`.
    pub fn round_seconds(&self, words: usize) -> f64 {
        self.alpha + self.beta * 8.0 * words as f64
    }
}

/// How far (Euclidean, in ln m, ln n, ln k) an executor-timed shape's factor
/// reaches: a factor of 4 in one dimension.
pub const EXEC_RADIUS: f64 = 1.3863;

/// Per executor-timed rate: its shape and its time over what `alone` (the
/// contiguous measurements) gives that shape.
fn exec_corrections(exec: &[KernelRate], alone: &CallModel) -> Vec<([f64; 3], f64)> {
    exec.iter()
        .map(|r| {
            let (m, n, k) = (r.m as f64, r.n as f64, r.k as f64);
            let flops = 2.0 * m * n * k;
            let factor = flops / r.flops_per_s / alone.seconds(flops, m, n, k, 1.0).max(1e-300);
            (log_shape(m, n, k), factor)
        })
        .collect()
}

/// The shapes `tcc tune` measures (m, n, k): square tiles of edge 4 to 96;
/// thin products with a short summed extent (as the four-index transform's AO
/// tiles of 4 make), whose cost is their C tile more than their flops; and the
/// large products that several tile indices make in one call (m, n or k a pair
/// or triple of tile extents: up to thousands), whose operands stream from
/// memory — a fit to small tiles alone predicted them up to 1.35× too fast.
pub const SHAPES: [(usize, usize, usize); 21] = [
    (4, 4, 4),
    (8, 8, 8),
    (12, 12, 12),
    (16, 16, 16),
    (24, 24, 24),
    (32, 32, 32),
    (48, 48, 48),
    (64, 64, 64),
    (96, 96, 96),
    (64, 12, 4),
    (576, 12, 4),
    (64, 64, 4),
    (16, 16, 4),
    (64, 64, 8),
    (256, 16, 2),
    (192, 192, 192),
    (384, 384, 384),
    (1024, 64, 1024),
    (64, 1024, 64),
    (32, 32, 2048),
    (8, 8, 8192),
];

/// The tile kernel's rate per thread on `C[m,n] += A[m,k]·B[k,n]` for each of
/// [`SHAPES`], measured with `concurrent` threads computing at once (each on its
/// own tiles, as ranks do), operand tiles read from memory, best of three.
pub fn measure_kernel_rates(concurrent: usize) -> Result<Vec<KernelRate>, String> {
    use tcc_runtime::kernels::{gett_tile, GettDim};
    let kernel = crate::codegen::llvm::tile_kernel().map_err(|e| format!("no tile kernel: {e}"))?;
    let mut out = Vec::new();
    for (m, n, k) in SHAPES {
        let flops = 2.0 * (m * n * k) as f64;
        let calls = ((1e8 / flops) as usize).max(3);
        // Operand tiles stream from memory as in a run (a task's tiles are read
        // once): each thread cycles through about 16 MiB of A and of B tiles.
        let count = ((2usize << 20) / (m * k).max(k * n)).max(1);
        let mut best = f64::MAX;
        for _ in 0..3 {
            let times: Vec<f64> = std::thread::scope(|sc| {
                let handles: Vec<_> = (0..concurrent.max(1))
                    .map(|_| {
                        let kernel = &kernel;
                        sc.spawn(move || {
                            let (la, lb) = (m * k, k * n);
                            let a: Vec<f64> = (0..la * count).map(|x| (x % 7) as f64 * 0.1).collect();
                            let b: Vec<f64> = (0..lb * count).map(|x| (x % 5) as f64 * 0.1).collect();
                            let mut c = vec![0.0; m * n];
                            let (mi, ni, ki) = (m as i64, n as i64, k as i64);
                            let dims = [
                                GettDim { kind: 1, size: mi, sa: ki, sb: 0, sc: ni },
                                GettDim { kind: 2, size: ni, sa: 0, sb: 1, sc: 1 },
                                GettDim { kind: 3, size: ki, sa: 1, sb: ni, sc: 0 },
                            ];
                            let t0 = Instant::now();
                            for i in 0..calls {
                                let at = i % count;
                                // SAFETY: the dims address an m×k, a k×n and the m×n tile
                                // inside the buffers.
                                unsafe {
                                    gett_tile(
                                        a[at * la..].as_ptr(),
                                        b[at * lb..].as_ptr(),
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
        out.push(KernelRate { m, n, k, flops_per_s: calls as f64 * flops / best.max(1e-9) });
    }
    Ok(out)
}

/// The executor measured on a calibration program: a four-index transform with
/// atomic-orbital tiles of 4 (some 80,000 small calls through symmetric tile
/// views) runs on one thread with every kernel call timed
/// ([`super::profile`]). Returns the time per call spent around the kernel
/// (the run less its kernel time), and the kernel's rate per class of calls
/// (at least [`EXEC_MIN_CALLS`] products, no batch) at the class's mean shape:
/// the thin products of strided tile views run several times slower than
/// the same shapes on contiguous tiles ([`measure_kernel_rates`]). Best of two runs.
pub fn measure_executor(kernels_alone: &[KernelRate]) -> Result<(f64, Vec<KernelRate>), String> {
    use super::exec::{Program, TiledOptions};
    use super::tensor::TiledTensor;
    const SOURCE: &str = "range P = 40 tile 4;\nrange M = 40 tile 8;\nindex p, q, r, s : P;\nindex a, b, c, d : M;\n\
        input tensor A[p,q,r,s] : f64 symmetric(p q)(r s)((p q)(r s));\ninput tensor C[p,a] : f64;\n\
        output tensor B[a,b,c,d] : f64 symmetric(a b)(c d)((a b)(c d));\n\
        B[a,b,c,d] = C[p,a] * C[q,b] * C[r,c] * C[s,d] * A[p,q,r,s];\n";
    let (hir, diags) = crate::compile(SOURCE, "calibration");
    let hir = hir.ok_or_else(|| format!("calibration program: {diags:?}"))?;
    let prepared = crate::pipeline::prepare(&hir, &crate::pipeline::PipelineOptions::default());
    let unit = crate::sema::hir::UnitId::new(0);
    let kernel_only = TimeModel {
        call: CallModel::new(kernels_alone),
        call_alone: CallModel::new(kernels_alone),
        call_overhead: 0.0,
        busy: 1,
        concurrency: 1,
        ..TimeModel::builtin()
    };
    let opts = TiledOptions { threads: 1, model: kernel_only.clone(), profile: true, ..Default::default() };
    let program = Program::plan(&prepared, unit, &opts).map_err(|e| e.message)?;
    let mut best: Option<(f64, super::profile::KernelProfile)> = None;
    for _ in 0..2 {
        let mut inputs = std::collections::HashMap::new();
        for t in prepared.unit_inputs(unit) {
            let group = crate::symmetry::PermGroup::of(&prepared.tensors[t]);
            let v = TiledTensor::fill_random(program.layouts[&t].clone(), &group, 1, |x| x)
                .map_err(|e| format!("calibration program: cannot allocate {}", e.elements))?;
            inputs.insert(t, v);
        }
        let (_, stats) = program.run(inputs, &opts).map_err(|e| e.message)?;
        if best.as_ref().is_none_or(|b| stats.run_s < b.0) {
            best = Some((stats.run_s, stats.profile));
        }
    }
    let (run_s, profile) = best.ok_or("calibration program: no run")?;
    let total = profile.total();
    let overhead = (run_s - total.wall_s).max(0.0) / total.calls.max(1) as f64;
    let rates = profile
        .classes
        .iter()
        .filter(|(class, c)| class.product && class.log2[3] == 0 && c.calls >= EXEC_MIN_CALLS && c.wall_s > 0.0)
        .map(|(_, c)| {
            let [m, n, k] = c.mean_shape().map(|x| x.round().max(1.0) as usize);
            KernelRate { m, n, k, flops_per_s: c.flops / c.wall_s }
        })
        .collect();
    Ok((overhead, rates))
}

/// Calls a class needs in the calibration run for its rate to be kept.
pub const EXEC_MIN_CALLS: u64 = 100;

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
                KernelRate { m: e, n: e, k: e, flops_per_s: flops / truth.seconds(flops, bytes) }
            })
            .collect();
        let fit = CallCost::fit(&kernels);
        for (a, b) in [(fit.overhead, truth.overhead), (fit.per_flop, truth.per_flop), (fit.per_byte, truth.per_byte)] {
            assert!((a - b).abs() <= 1e-6 * b, "{fit:?}");
        }
        // A product with a summed extent of 4 costs more per flop than a square one.
        let m = TimeModel::builtin();
        let thin = m.kernel_seconds(2.0 * 64.0 * 12.0 * 4.0, 64.0, 12.0, 4.0, 1.0) / (64.0 * 12.0 * 4.0);
        let square = m.kernel_seconds(2.0 * 32.0 * 32.0 * 32.0, 32.0, 32.0, 32.0, 1.0) / (32.0 * 32.0 * 32.0);
        assert!(thin > square, "{thin} {square}");
        assert!((m.round_seconds(1000) - (m.alpha + m.beta * 8000.0)).abs() < 1e-15);
    }

    #[test]
    fn rates_timed_through_the_executor_are_what_the_model_predicts_there() {
        let rate = |m, n, k, g: f64| KernelRate { m, n, k, flops_per_s: g * 1e9 };
        let c = Calibration {
            backend: tcc_runtime::comm::Backend::Shm,
            ranks: 4,
            alpha: 1e-5,
            beta: 1e-10,
            kernels: vec![rate(16, 16, 16, 5.0), rate(64, 64, 64, 20.0), rate(64, 12, 4, 4.0)],
            kernels_alone: vec![rate(16, 16, 16, 10.0), rate(64, 64, 64, 40.0), rate(64, 12, 4, 8.0)],
            call_overhead: 0.0,
            kernels_exec: vec![rate(8, 64, 4, 2.0)],
            get_alpha: 0.0,
            get_beta: 0.0,
            touch_per_byte: 0.0,
            touch_alone_per_byte: 0.0,
            private_touch_per_byte: 0.0,
            private_touch_alone_per_byte: 0.0,
        };
        let m = TimeModel::from_calibration(&c, "test");
        let flops = 2.0 * 8.0 * 64.0 * 4.0;
        // Alone: the executor's rate at its shape; all 4 computing: halved, as
        // the nearest contiguous shape (64x12x4) is.
        let alone = m.at_concurrency(1).kernel_seconds(flops, 8.0, 64.0, 4.0, 1.0);
        assert!((alone * 2.0e9 / flops - 1.0).abs() < 1e-9, "{alone}");
        let busy = m.at_concurrency(4).kernel_seconds(flops, 8.0, 64.0, 4.0, 1.0);
        assert!((busy * 1.0e9 / flops - 1.0).abs() < 1e-9, "{busy}");
        // Far from it, the contiguous measurements still hold.
        let square = m.at_concurrency(1).kernel_seconds(2.0 * 64.0 * 64.0 * 64.0, 64.0, 64.0, 64.0, 1.0);
        assert!((square * 40e9 / (2.0 * 64.0 * 64.0 * 64.0) - 1.0).abs() < 1e-9, "{square}");
    }

    #[test]
    fn measured_rates_are_positive_and_grow_from_tiny_tiles() {
        let r = measure_kernel_rates(1).unwrap();
        assert_eq!(r.len(), SHAPES.len());
        assert!(r.iter().all(|k| k.flops_per_s > 0.0 && k.flops_per_s.is_finite()));
        // Edge 4 pays a call per 128 flops; edge 64 is kernel-bound.
        assert!(r[7].flops_per_s > r[0].flops_per_s, "{r:?}");
        // The model is exact at measured shapes.
        let m = CallModel::new(&r);
        for x in &r {
            let (a, b, c) = (x.m as f64, x.n as f64, x.k as f64);
            let t = m.seconds(2.0 * a * b * c, a, b, c, 1.0);
            assert!((t * x.flops_per_s / (2.0 * a * b * c) - 1.0).abs() < 1e-9, "{x:?}");
        }
        let (overhead, exec) = measure_executor(&r).unwrap();
        assert!((0.0..1e-3).contains(&overhead), "{overhead}");
        // The calibration program's thin products are timed through the executor.
        assert!(!exec.is_empty() && exec.iter().all(|e| e.flops_per_s > 0.0 && e.k <= 8), "{exec:?}");
    }
}
