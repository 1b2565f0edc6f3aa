//! The forecast of sliced programs on ranks (`tcc plan --max-intermediate B`): what
//! `tcc run --ranks P --max-intermediate B` does, priced by the α-β-γ model.
//!
//! Each sliced term's slices are dealt to the ranks in blocks, so a rank computes
//! at most `⌈n/P⌉` of the `n` slices (γ · their flops); its target is then made
//! whole on every rank — an all-reduce when a sliced index is summed, an
//! all-gather when all are kept. Both are priced as the bandwidth-optimal ring
//! (Thakur et al. 2005): an all-reduce of `E` words is `2(P−1)` messages and
//! `2(P−1)/P · E` words sent per rank, an all-gather `P−1` messages and
//! `(P−1)/P · E` words. Statements outside sliced terms run on every rank (the
//! inputs are replicated). The runtime may pick other algorithms for small
//! messages (its tuning table), so measured words (`tcc run --stats`) can differ
//! from these by the algorithm, not by the data.

use super::network::{fmt_time, Network};
use crate::error::CommandError;
use crate::sema::hir::{Hir, UnitId};
use serde::Serialize;

/// One sliced term on `procs` ranks.
#[derive(Debug, Clone, Serialize)]
pub struct TermForecast {
    /// `Z over a,h: 64 slices, …` ([`crate::sema::hir::SliceGroup::describe`]).
    pub term: String,
    pub slices: u64,
    /// The most slices a rank runs.
    pub slices_per_rank: u64,
    /// Flops of all slices, and of the busiest rank's.
    pub flops: f64,
    pub flops_per_rank: f64,
    /// `all-reduce` (a sliced index is summed) or `all-gather`.
    pub combine: &'static str,
    /// Elements of the target the collective moves.
    pub target_elements: u64,
    pub words_per_rank: f64,
    pub messages_per_rank: u64,
    pub seconds: f64,
}

/// One unit on `procs` ranks.
#[derive(Debug, Clone, Serialize)]
pub struct UnitForecast {
    pub unit: String,
    pub procs: usize,
    pub terms: Vec<TermForecast>,
    /// Flops of the statements outside sliced terms (every rank runs them).
    pub replicated_flops: f64,
    /// γ · flops per rank, the collectives' α-β time, and their sum.
    pub compute_seconds: f64,
    pub comm_seconds: f64,
    pub seconds: f64,
    /// The same program in one process (γ · all flops).
    pub one_rank_seconds: f64,
}

/// The forecast of the sliced units of `prepared` (optimized with the slicing the
/// run compiles) on each of `procs` rank counts.
pub fn forecast(prepared: &Hir, units: &[UnitId], procs: &[usize], net: &Network) -> Vec<UnitForecast> {
    let mut out = Vec::new();
    for &p in procs {
        for &u in units {
            let groups = crate::lir::slice::groups(prepared, u);
            if groups.is_empty() {
                continue;
            }
            let stmts = &prepared.units[u].stmts;
            let all = crate::codegen::lower::unit_flops(prepared, u);
            let whole: f64 = groups
                .iter()
                .flat_map(|g| g.stmts.clone())
                .map(|k| crate::codegen::lower::stmt_flops(prepared, &stmts[k]))
                .sum();
            let replicated = (all - whole).max(0.0);
            let mut terms = Vec::new();
            for g in &groups {
                let last = &stmts[g.stmts.end - 1];
                let summed = g.indices.iter().any(|i| !last.lhs.indices.contains(i));
                let n: u64 = g.indices.iter().map(|&i| prepared.index_size(i) as u64).product();
                let per = n.div_ceil(p as u64);
                let e = prepared.num_elements(last.lhs.tensor).unwrap_or(0) as u64;
                let q = p as f64;
                let (combine, words, msgs) = match (p, summed) {
                    (1, _) => (if summed { "all-reduce" } else { "all-gather" }, 0.0, 0),
                    (_, true) => ("all-reduce", 2.0 * (q - 1.0) / q * e as f64, 2 * (p as u64 - 1)),
                    (_, false) => ("all-gather", (q - 1.0) / q * e as f64, p as u64 - 1),
                };
                let flops_per_rank = g.flops * per as f64 / n.max(1) as f64;
                let elem = prepared.tensors[last.lhs.tensor].elem.size_bytes() as f64;
                let comm = net.alpha * msgs as f64 + net.beta * elem * words;
                let description =
                    prepared.units[u].sliced.iter().find(|s| s.target == last.lhs.tensor && s.indices == g.indices);
                terms.push(TermForecast {
                    term: description.map_or_else(String::new, |s| s.describe(prepared)),
                    slices: n,
                    slices_per_rank: per,
                    flops: g.flops,
                    flops_per_rank,
                    combine,
                    target_elements: e,
                    words_per_rank: words,
                    messages_per_rank: msgs,
                    seconds: net.gamma * flops_per_rank + comm,
                });
            }
            let compute = net.gamma * (replicated + terms.iter().map(|t| t.flops_per_rank).sum::<f64>());
            let comm: f64 = terms.iter().map(|t| t.seconds).sum::<f64>()
                - net.gamma * terms.iter().map(|t| t.flops_per_rank).sum::<f64>();
            let one = net.gamma * (replicated + terms.iter().map(|t| t.flops).sum::<f64>());
            out.push(UnitForecast {
                unit: prepared.units[u].name.clone(),
                procs: p,
                terms,
                replicated_flops: replicated,
                compute_seconds: compute,
                comm_seconds: comm.max(0.0),
                seconds: compute + comm.max(0.0),
                one_rank_seconds: one,
            });
        }
    }
    out
}

/// The text report: per unit and rank count, each sliced term, then the total.
pub fn text(forecasts: &[UnitForecast], net: &Network, bytes: u64) -> String {
    let mut s = format!(
        "sliced runs on ranks (--max-intermediate {}), network {}\n",
        super::report::bytes(bytes),
        net.describe()
    );
    for f in forecasts {
        let ranks = if f.procs == 1 { "rank" } else { "ranks" };
        s.push_str(&format!("program {} on {} {ranks}:\n", f.unit, f.procs));
        for t in &f.terms {
            s.push_str(&format!(
                "  {}\n    per rank: {} of {} slices, {:.4e} flops; {} of {} elements: {:.0} words, {} messages; {}\n",
                t.term,
                t.slices_per_rank,
                t.slices,
                t.flops_per_rank,
                t.combine,
                t.target_elements,
                t.words_per_rank,
                t.messages_per_rank,
                fmt_time(t.seconds)
            ));
        }
        if f.replicated_flops > 0.0 {
            s.push_str(&format!(
                "  statements outside sliced terms, on every rank: {:.4e} flops\n",
                f.replicated_flops
            ));
        }
        s.push_str(&format!(
            "  predicted time {} (compute {}, collectives {}); one rank {}, speed-up {:.2}x\n",
            fmt_time(f.seconds),
            fmt_time(f.compute_seconds),
            fmt_time(f.comm_seconds),
            fmt_time(f.one_rank_seconds),
            if f.seconds > 0.0 { f.one_rank_seconds / f.seconds } else { 1.0 }
        ));
    }
    s
}

/// `tcc plan --max-intermediate B`: E0733 when nothing is sliced at that limit.
pub fn plan_command(
    hir: &Hir,
    program: Option<&str>,
    procs: &[usize],
    network: &str,
    bytes: u64,
    json: bool,
) -> Result<String, CommandError> {
    let net = super::network_and_procs(network, procs)?;
    let units = hir.select_units(program)?;
    // The slicing a run on ranks compiles (its order search is the deterministic one).
    let mut popts = crate::pipeline::PipelineOptions::default();
    popts.order.slice_bytes = Some(bytes);
    popts.order.search_time = 0.0;
    let prepared = crate::pipeline::prepare(hir, &popts);
    let forecasts = forecast(&prepared, &units, procs, &net);
    if forecasts.is_empty() {
        return Err(CommandError::new(
            "E0733",
            format!(
                "nothing is sliced at --max-intermediate {}: every intermediate fits, and ranks share only the slices of sliced terms",
                super::report::bytes(bytes)
            ),
            Some("give a smaller --max-intermediate, or plan without it (the grids of `tcc plan`)".into()),
        ));
    }
    Ok(if json {
        serde_json::to_string_pretty(&forecasts).unwrap_or_default() + "\n"
    } else {
        text(&forecasts, &net, bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring of `tests/slicing.rs`: `Z` (a kept and a summed sliced index) and
    /// the closed `Y`.
    const RING: &str = "range N = 32;\nrange H = 2;\nindex a, b, c, d : N;\nindex h : H;\n\
        input tensor A[a,c,h] : f64;\ninput tensor B[c,d] : f64;\ninput tensor C[d,b,h] : f64;\n\
        input tensor E[h] : f64;\noutput tensor Z[a,b] : f64;\noutput tensor Y : f64;\n\
        Z[a,b] = A[a,c,h] * B[c,d] * C[d,b,h] * E[h];\nY = A[a,c,h] * B[c,d] * C[d,a,h] * E[h];\n";

    #[test]
    fn compute_divides_by_ranks_and_the_reduction_is_priced() {
        let (hir, d) = crate::compile(RING, "ring");
        let hir = hir.unwrap_or_else(|| panic!("{d:?}"));
        let mut popts = crate::pipeline::PipelineOptions::default();
        popts.order.slice_bytes = Some(256);
        popts.order.search_time = 0.0;
        let prepared = crate::pipeline::prepare(&hir, &popts);
        let units: Vec<UnitId> = prepared.units.ids().collect();
        let net = Network::fat_tree();
        let f = forecast(&prepared, &units, &[1, 2, 4], &net);
        assert_eq!(f.len(), 3);
        let z = |p: usize| f[[1, 2, 4].iter().position(|&q| q == p).unwrap()].terms[0].clone();
        // Z's slicing sums a sliced index: an all-reduce of its 1024 elements.
        assert_eq!(z(1).combine, "all-reduce");
        assert_eq!((z(1).words_per_rank, z(1).messages_per_rank), (0.0, 0));
        assert_eq!(z(2).words_per_rank, 1024.0);
        assert_eq!(z(4).words_per_rank, 1536.0);
        // Compute per rank divides by the ranks (64 slices deal evenly).
        assert!((z(4).flops_per_rank * 4.0 - z(1).flops).abs() <= 1e-9 * z(1).flops);
        assert!(f[2].compute_seconds < f[1].compute_seconds && f[1].compute_seconds < f[0].compute_seconds);
        assert!(f[1].comm_seconds > 0.0 && f[0].comm_seconds == 0.0);
        assert!((f[0].seconds - f[0].one_rank_seconds).abs() <= 1e-12 * f[0].seconds);
    }
}
