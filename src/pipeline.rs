//! The pass sequence, in one place.
//!
//! ```text
//! source ─check─▶ HIR ─materialize─▶ HIR ─optimize─▶ HIR ─rematerialize─▶ HIR ─fuse─▶ LIR ─▶ back end
//! ```
//!
//! * `check`: parse and analyse ([`crate::compile`]); the checked HIR.
//! * `materialize`: calls, parenthesised sums and self-reads become temporaries
//!   ([`crate::tir::materialize::materialize`]), so that terms are products of elements.
//! * `optimize`: contraction order, common sub-expressions, factorization
//!   ([`crate::tir::optimize`]).
//! * `rematerialize`: materialize again, and split sums of more than
//!   [`crate::tir::materialize::MAX_TERMS`] terms into `+=` statements (the optimizer may leave calls in terms it did
//!   not reorder).
//! * `fuse`: loop nests with FuseT-style fusion under a memory limit ([`crate::lir`]).
//!
//! Every command, the language server and the tests reach these passes through this
//! module: `tcc opt` runs check → optimize → fuse (its report and `--emit` forms), the
//! back ends run [`prepare`] then [`fuse`], the planners and executors [`optimize`].
//! One [`PipelineOptions`] says what to run and what to show:
//!
//! * `validate`: run [`crate::valid`] after each pass (default: in debug builds and
//!   tests); a failure is a compiler bug and panics with the pass and the violation;
//! * `log_passes`: print the IR after every pass to stderr (`TCC_LOG=passes`);
//!   [`ir_after`] is the IR after one pass (`tcc opt --emit-after PASS`).

use crate::diag::Diagnostic;
use crate::lir::fusion::{lower_unit, FusionOptions};
use crate::lir::LoopNest;
use crate::sema::hir::{Hir, UnitId};
use crate::tir::OptReport;
use std::fmt;

/// A pass of the pipeline, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pass {
    Check,
    Materialize,
    Optimize,
    Rematerialize,
    Fuse,
}

impl Pass {
    pub const ALL: [Pass; 5] = [Pass::Check, Pass::Materialize, Pass::Optimize, Pass::Rematerialize, Pass::Fuse];

    pub fn name(self) -> &'static str {
        match self {
            Pass::Check => "check",
            Pass::Materialize => "materialize",
            Pass::Optimize => "optimize",
            Pass::Rematerialize => "rematerialize",
            Pass::Fuse => "fuse",
        }
    }

    pub fn from_name(name: &str) -> Option<Pass> {
        Pass::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Pass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `TCC_LOG=passes` (or a comma list containing `passes`).
fn log_passes_from_env() -> bool {
    std::env::var("TCC_LOG").is_ok_and(|v| v.split(',').any(|s| s.trim() == "passes"))
}

/// What the pipeline runs and shows; one struct for every caller.
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    /// Run the optimizer (`false`: `tcc run --no-opt`, statements as written).
    pub optimize: bool,
    /// Loop fusion: the memory limit for temporaries and the search budget.
    pub fusion: FusionOptions,
    /// The contraction-order search: objective, time budget beyond the exact DP
    /// (`--objective`, `--search-time`).
    pub order: crate::tir::opmin::Options,
    /// Run the validators after each pass.
    pub validate: bool,
    /// Print the IR after every pass to stderr, headed `;; after PASS`.
    pub log_passes: bool,
}

impl Default for PipelineOptions {
    /// Optimize, fuse to least memory, validate in debug builds, dump as `TCC_LOG` says.
    fn default() -> Self {
        PipelineOptions {
            optimize: true,
            fusion: FusionOptions::default(),
            order: crate::tir::opmin::Options::default(),
            validate: cfg!(debug_assertions),
            log_passes: log_passes_from_env(),
        }
    }
}

impl PipelineOptions {
    /// The defaults with a memory limit for fused temporaries.
    pub fn with_mem_limit(mem_limit: Option<u64>) -> Self {
        let mut o = PipelineOptions::default();
        o.fusion.mem_limit = mem_limit;
        o
    }

    fn after_hir(&self, pass: Pass, hir: &Hir) {
        if self.validate {
            if let Err(e) = crate::valid::hir::validate(hir) {
                panic!("internal error: the HIR after pass `{pass}` is invalid: {e}");
            }
        }
        self.show(pass, || hir_text(hir, &hir.units.ids().collect::<Vec<_>>()));
    }

    fn after_lir(&self, hir: &Hir, nests: &[LoopNest]) {
        if self.validate {
            for n in nests {
                if let Err(e) = crate::valid::lir::validate(hir, n) {
                    panic!("internal error: the LIR after pass `fuse` is invalid: {e}");
                }
            }
        }
        self.show(Pass::Fuse, || nests.iter().map(|n| n.dump(hir)).collect());
    }

    fn show(&self, pass: Pass, text: impl FnOnce() -> String) {
        if self.log_passes {
            eprint!(";; after {pass}\n{}", text());
        }
    }
}

/// `check`: the front end ([`crate::compile`]), then the HIR validator.
pub fn check(src: &str, file_stem: &str, opts: &PipelineOptions) -> (Option<Hir>, Vec<Diagnostic>) {
    let (hir, diags) = crate::compile(src, file_stem);
    if let Some(h) = &hir {
        opts.after_hir(Pass::Check, h);
    }
    (hir, diags)
}

/// `optimize` (or nothing when `opts.optimize` is false): the program the planners
/// and executors run, and the optimizer's report; complex tensors lowered first.
pub fn optimize(hir: &Hir, opts: &PipelineOptions) -> (Hir, OptReport) {
    if crate::sema::complex::has_complex(hir) {
        return optimize(&crate::tir::complex::lower(hir).0, opts);
    }
    if !opts.optimize {
        return (hir.clone(), OptReport::default());
    }
    let (opt, report) = crate::tir::rewrite::optimize_with(hir, &opts.order);
    opts.after_hir(Pass::Optimize, &opt);
    (opt, report)
}

/// `materialize` → `optimize` → `rematerialize`: the program every back end
/// compiles (calls and sums made simple, self-reads removed, products binarized).
/// A program with complex tensors is first lowered to real pairs
/// ([`crate::tir::complex::lower`]): its callers must supply the parts' inputs;
/// one with 16-bit tensors is widened to f32 ([`crate::tir::half::widen`]).
pub fn prepare(hir: &Hir, opts: &PipelineOptions) -> Hir {
    if crate::sema::complex::has_complex(hir) {
        return prepare(&crate::tir::complex::lower(hir).0, opts);
    }
    // 16-bit tensors compile as f32 ones: their callers widen and round.
    if crate::sema::half::has_half(hir) {
        return prepare(&crate::tir::half::widen(hir), opts);
    }
    let first = crate::tir::materialize::materialize(hir);
    opts.after_hir(Pass::Materialize, &first);
    let (opt, _) = optimize(&first, opts);
    let again = crate::tir::materialize::materialize(&opt);
    // Sums of more terms than a loop body should hold are split here, after the
    // optimizer has seen them whole.
    let prepared = crate::tir::materialize::split_wide_sums(&again);
    opts.after_hir(Pass::Rematerialize, &prepared);
    prepared
}

/// `fuse`: one loop nest per unit of `units`.
pub fn fuse(hir: &Hir, units: &[UnitId], opts: &PipelineOptions) -> Vec<LoopNest> {
    let nests: Vec<LoopNest> = units.iter().map(|&u| lower_unit(hir, u, opts.fusion)).collect();
    opts.after_lir(hir, &nests);
    nests
}

/// [`prepare`] then [`fuse`]: the program and nests the CPU back end compiles.
/// Unless an objective was given (`opts.order.by_time`), products are also
/// ordered for `combined` (flops plus intermediate traffic, greedy beyond the
/// exact search) and that program is kept when the CPU time model prices its
/// nests at least 5 % faster in all: the flop-optimal order can write more
/// intermediates (MPS: `M1` and `M2` applied to a 10 MB tensor one at a time, two
/// passes over it, against `M1·M2` first and one pass; 19.1 against 18.0 ms by the
/// model).
pub fn prepare_fused(hir: &Hir, units: &[UnitId], opts: &PipelineOptions) -> (Hir, Vec<LoopNest>) {
    let prepared = prepare(hir, opts);
    let nests = fuse(&prepared, units, opts);
    if !opts.optimize
        || !opts.order.by_time
        || opts.order.objective != crate::tir::opmin::Objective::Flops
        || opts.order.slice_bytes.is_some()
    {
        return (prepared, nests);
    }
    let mut alt = opts.clone();
    alt.order = crate::tir::opmin::Options { objective: crate::tir::opmin::Objective::Combined, ..opts.order.quick() };
    let other = prepare(hir, &alt);
    let other_nests = fuse(&other, units, &alt);
    let time = |n: &[LoopNest]| n.iter().map(|n| n.time_s).sum::<f64>();
    let fits = |n: &[LoopNest]| opts.fusion.mem_limit.is_none_or(|l| n.iter().all(|n| n.peak_bytes <= l));
    if fits(&other_nests) && time(&other_nests) < 0.95 * time(&nests) {
        (other, other_nests)
    } else {
        (prepared, nests)
    }
}

/// A program whose fused temporaries cannot fit an explicit memory limit.
#[derive(Debug, Clone, PartialEq)]
pub struct OverLimit {
    pub unit: String,
    /// The peak of the nest the back ends would compile.
    pub peak_bytes: u64,
    pub limit: u64,
    /// The intermediate size slicing was tried down to ([`fit_mem_limit`]).
    pub sliced_to: Option<u64>,
}

impl fmt::Display for OverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "program `{}` needs {} of temporaries at once, over the memory limit of {}",
            self.unit,
            crate::plan::report::bytes(self.peak_bytes),
            crate::plan::report::bytes(self.limit)
        )?;
        match self.sliced_to {
            Some(_) => write!(f, ", even sliced"),
            None => Ok(()),
        }
    }
}

/// Checks that the nests the back ends compile with `opts` (prepare, then fuse)
/// fit `opts.fusion.mem_limit`: the first unit that does not is returned.
pub fn check_mem_limit(hir: &Hir, units: &[UnitId], opts: &PipelineOptions) -> Result<(), OverLimit> {
    let Some(limit) = opts.fusion.mem_limit else { return Ok(()) };
    let quiet = PipelineOptions { log_passes: false, ..opts.clone() };
    let prepared = prepare(hir, &quiet);
    for n in fuse(&prepared, units, &quiet) {
        if n.peak_bytes > limit {
            let unit = prepared.units[n.unit].name.clone();
            return Err(OverLimit { unit, peak_bytes: n.peak_bytes, limit, sliced_to: opts.order.slice_bytes });
        }
    }
    Ok(())
}

/// [`check_mem_limit`], and when the program does not fit and no slicing was asked
/// for (`opts.order.slice_bytes`), slicing that makes it fit: the largest
/// intermediate allowed starts at half the limit and halves until the peak fits
/// (at most 16 tries, down to one 8-byte element) — the first that fits slices
/// least, so it costs the fewest flops; the options with that slicing, or the
/// smallest peak found over the limit.
pub fn fit_mem_limit(hir: &Hir, units: &[UnitId], opts: &PipelineOptions) -> Result<PipelineOptions, OverLimit> {
    let mut best = match check_mem_limit(hir, units, opts) {
        Ok(()) => return Ok(opts.clone()),
        Err(e) => e,
    };
    if opts.order.slice_bytes.is_some() || !opts.optimize {
        return Err(best);
    }
    let mut target = best.limit / 2;
    for _ in 0..16 {
        let last = target <= 8;
        target = target.max(8);
        let mut o = opts.clone();
        o.order.slice_bytes = Some(target);
        match check_mem_limit(hir, units, &o) {
            Ok(()) => return Ok(o),
            Err(e) => {
                if e.peak_bytes < best.peak_bytes {
                    best = OverLimit { sliced_to: Some(target), ..e };
                }
                if last {
                    break;
                }
                target /= 2;
            }
        }
    }
    Err(best)
}

/// The IR of `units` after `pass` of the back ends' sequence (check → materialize →
/// optimize → rematerialize → fuse): what `tcc opt --emit-after PASS` prints.
pub fn ir_after(hir: &Hir, units: &[UnitId], pass: Pass, opts: &PipelineOptions) -> String {
    let materialized = || {
        let m = crate::tir::materialize::materialize(hir);
        opts.after_hir(Pass::Materialize, &m);
        m
    };
    match pass {
        Pass::Check => hir_text(hir, units),
        Pass::Materialize => hir_text(&materialized(), units),
        Pass::Optimize => hir_text(&optimize(&materialized(), opts).0, units),
        Pass::Rematerialize => hir_text(&prepare(hir, opts), units),
        Pass::Fuse => {
            let prepared = prepare(hir, opts);
            fuse(&prepared, units, opts).iter().map(|n| n.dump(&prepared)).collect()
        }
    }
}

/// The textual HIR of some units (what `tcc opt --emit=hir|opt` prints).
pub fn hir_text(hir: &Hir, units: &[UnitId]) -> String {
    let mut s = String::new();
    for &u in units {
        s.push_str(&format!("{} {{\n", hir.units[u].name));
        for st in &hir.units[u].stmts {
            s.push_str(&format!("  {}\n", crate::sema::display::stmt(hir, st)));
        }
        s.push_str("}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every example and every IR corpus program goes through every pass with the
    /// validators on (they panic on a violation).
    #[test]
    fn every_example_passes_the_validators_after_every_pass() {
        let opts = PipelineOptions { validate: true, log_passes: false, ..PipelineOptions::default() };
        let mut seen = 0;
        for dir in ["examples", "tests/ir"] {
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            for e in entries {
                let path = e.unwrap().path();
                if path.extension().and_then(|x| x.to_str()) != Some("tc") {
                    continue;
                }
                let src = std::fs::read_to_string(&path).unwrap();
                let (hir, diags) = check(&src, "t", &opts);
                let hir = hir.unwrap_or_else(|| panic!("{}: {diags:?}", path.display()));
                let units: Vec<UnitId> = hir.units.ids().collect();
                let (opt, _) = optimize(&hir, &opts);
                fuse(&opt, &units, &opts);
                let prepared = prepare(&hir, &opts);
                fuse(
                    &prepared,
                    &units,
                    &PipelineOptions { fusion: FusionOptions { mem_limit: Some(1), ..opts.fusion }, ..opts.clone() },
                );
                seen += 1;
            }
        }
        assert!(seen >= 10, "only {seen} programs found");
    }

    #[test]
    fn pass_names_round_trip() {
        for p in Pass::ALL {
            assert_eq!(Pass::from_name(p.name()), Some(p));
        }
        assert_eq!(Pass::from_name("opmin"), None);
    }
}
