//! Where the time model is off: tile kernel calls of a run grouped by shape
//! (powers of two of m, n, k and batch), each class with its calls, flops, the
//! seconds the model gives them and the seconds they took. `--stats` prints the
//! classes that took the most time, so a model that misses a run's wall time
//! says which kernels it misjudges (and `tcc tune` which shapes to measure).

use std::collections::BTreeMap;

/// A class of calls: a product (GETT) or an element-wise add, and the binary
/// logarithm (floor) of m, n, k and batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShapeClass {
    pub product: bool,
    pub log2: [u8; 4],
}

impl ShapeClass {
    pub fn of(product: bool, mnkb: [f64; 4]) -> ShapeClass {
        ShapeClass { product, log2: mnkb.map(|x| x.max(1.0).log2().floor().min(63.0) as u8) }
    }

    fn name(&self) -> String {
        let [m, n, k, b] = self.log2.map(|e| 1u64 << e);
        if !self.product {
            return format!("adds of {m}+ elements");
        }
        let batch = if b > 1 { format!(" batch {b}+") } else { String::new() };
        format!("GETT m {m}+ n {n}+ k {k}+{batch}")
    }
}

/// What calls of one class did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClassTimes {
    pub calls: u64,
    pub flops: f64,
    pub model_s: f64,
    pub wall_s: f64,
    /// Sums of ln m, ln n, ln k over the calls (their geometric mean shape).
    pub ln_mnk: [f64; 3],
}

impl ClassTimes {
    fn add(&mut self, o: &ClassTimes) {
        self.calls += o.calls;
        self.flops += o.flops;
        self.model_s += o.model_s;
        self.wall_s += o.wall_s;
        for (a, b) in self.ln_mnk.iter_mut().zip(o.ln_mnk) {
            *a += b;
        }
    }

    /// The geometric mean m, n, k of the calls.
    pub fn mean_shape(&self) -> [f64; 3] {
        self.ln_mnk.map(|x| (x / self.calls.max(1) as f64).exp())
    }
}

/// Calls of a run (or one worker's part of it) by shape class.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelProfile {
    pub classes: BTreeMap<ShapeClass, ClassTimes>,
}

impl KernelProfile {
    /// One call: a product or an add on tiles of `mnkb` (m, n, k, batch).
    pub fn record(&mut self, product: bool, mnkb: [f64; 4], flops: f64, model_s: f64, wall_s: f64) {
        let [m, n, k, _] = mnkb.map(|x| x.max(1.0).ln());
        let one = ClassTimes { calls: 1, flops, model_s, wall_s, ln_mnk: [m, n, k] };
        self.classes.entry(ShapeClass::of(product, mnkb)).or_default().add(&one);
    }

    pub fn merge(&mut self, other: &KernelProfile) {
        for (k, v) in &other.classes {
            self.classes.entry(*k).or_default().add(v);
        }
    }

    /// Summed over every class.
    pub fn total(&self) -> ClassTimes {
        let mut t = ClassTimes::default();
        for v in self.classes.values() {
            t.add(v);
        }
        t
    }

    /// Report lines: the total, then the `top` classes that took the most time.
    pub fn report(&self, top: usize) -> Vec<String> {
        let t = self.total();
        if t.calls == 0 {
            return Vec::new();
        }
        let ratio = |c: &ClassTimes| if c.model_s > 0.0 { c.wall_s / c.model_s } else { 0.0 };
        let mut v = vec![format!(
            "kernels: {} calls, {} s in kernels against {} s modelled (kernel wall / model = {:.2}); by shape, most \
             time first:",
            t.calls,
            secs(t.wall_s),
            secs(t.model_s),
            ratio(&t)
        )];
        let mut classes: Vec<_> = self.classes.iter().collect();
        classes.sort_by(|a, b| b.1.wall_s.total_cmp(&a.1.wall_s));
        for (k, c) in classes.into_iter().take(top) {
            v.push(format!(
                "  {}: {} calls, {:.1}% of kernel time, {:.2} GFLOP/s, wall / model = {:.2}",
                k.name(),
                c.calls,
                100.0 * c.wall_s / t.wall_s.max(1e-300),
                if c.wall_s > 0.0 { c.flops / c.wall_s / 1e9 } else { 0.0 },
                ratio(c)
            ));
        }
        v
    }
}

/// Seconds to three significant digits at least: `12.345`, `0.123`, `0.0123`,
/// `0.00123`, or `1.23e-5` below a millisecond.
pub(crate) fn secs(x: f64) -> String {
    if x >= 0.1 || x == 0.0 {
        format!("{x:.3}")
    } else if x >= 0.01 {
        format!("{x:.4}")
    } else if x >= 1e-3 {
        format!("{x:.5}")
    } else {
        format!("{x:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_keep_three_significant_digits() {
        for (x, want) in [(12.3456, "12.346"), (0.1234, "0.123"), (0.01234, "0.0123"), (0.001234, "0.00123")] {
            assert_eq!(secs(x), want);
        }
        assert_eq!(secs(1.234e-5), "1.23e-5");
        assert_eq!(secs(0.0), "0.000");
    }

    #[test]
    fn classes_group_by_power_of_two_and_sum() {
        let a = ShapeClass::of(true, [64.0, 100.0, 127.0, 1.0]);
        assert_eq!(a.log2, [6, 6, 6, 0]);
        assert_eq!(a, ShapeClass::of(true, [127.0, 64.0, 64.0, 1.5]));
        assert_ne!(a, ShapeClass::of(false, [64.0, 100.0, 127.0, 1.0]));
        let mut p = KernelProfile::default();
        p.record(true, [64.0, 100.0, 64.0, 1.0], 10.0, 1.0, 2.0);
        p.record(true, [64.0, 64.0, 100.0, 1.0], 10.0, 1.0, 2.0);
        let mean = p.classes[&a].mean_shape();
        assert!((mean[0] - 64.0).abs() < 1e-9 && (mean[1] - 80.0).abs() < 1e-9, "{mean:?}");
        let mut q = KernelProfile::default();
        q.record(false, [8.0, 1.0, 1.0, 1.0], 8.0, 0.5, 0.25);
        p.merge(&q);
        let t = p.total();
        assert_eq!((t.calls, t.flops, t.model_s, t.wall_s), (3, 28.0, 2.5, 4.25));
        let r = p.report(5);
        assert!(r[0].contains("3 calls") && r[0].contains("= 1.70"), "{r:?}");
        assert!(r[1].contains("GETT m 64+ n 64+ k 64+: 2 calls") && r[1].contains("wall / model = 2.00"), "{r:?}");
        assert!(r[2].contains("adds of 8+ elements"), "{r:?}");
        assert!(KernelProfile::default().report(3).is_empty());
    }
}
