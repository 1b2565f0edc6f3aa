//! `tcc plan --tiled`: what distributed tiled runs (`tcc run --tiled --ranks P`,
//! `mpirun -np P tcc run --tiled --backend mpi`, `tcc build --mpi` libraries)
//! will store, compute and send per rank, and their predicted time — from the
//! same plan the ranks compute when they run ([`super::dist::forecast`]), so the
//! numbers are those `--stats` then measures, not a dense estimate.

use super::autotile::{self, Executor, TileChoice};
use super::dist::{forecast, Forecast};
use super::exec::{Program, TiledOptions};
use super::profile::secs;
use crate::error::CommandError;
use crate::ids::UnitId;
use crate::pipeline::PipelineOptions;
use crate::sema::hir::Hir;

/// Settings of `tcc plan --tiled`.
#[derive(Debug, Clone)]
pub struct TiledPlan {
    pub tiled: TiledOptions,
    /// Worker threads of each rank (the model's kernel rates are taken at
    /// `threads × ranks` cores busy at once).
    pub threads_per_rank: usize,
    /// Rank counts whose tiles need more bytes per rank are marked, and an error
    /// when none fits.
    pub mem_per_rank: Option<u64>,
    pub json: bool,
}

/// One unit on one rank count, planned at `tile` (chosen by the model when
/// `choice` is given).
struct Row {
    procs: usize,
    fc: Forecast,
    tile: usize,
    choice: Option<TileChoice>,
}

impl Row {
    fn max(&self, f: impl Fn(&super::dist::RankForecast) -> f64) -> f64 {
        self.fc.ranks.iter().map(f).fold(0.0, f64::max)
    }
    fn mean(&self, f: impl Fn(&super::dist::RankForecast) -> f64) -> f64 {
        self.fc.ranks.iter().map(f).sum::<f64>() / self.fc.ranks.len().max(1) as f64
    }
    fn fits(&self, limit: Option<u64>) -> bool {
        limit.is_none_or(|l| self.max(|r| r.peak_bytes()) <= l as f64)
    }
}

/// Plans `units` for every P in `procs` and renders the forecast.
pub fn plan_tiled(hir: &Hir, units: &[UnitId], procs: &[usize], p: &TiledPlan) -> Result<String, CommandError> {
    let prepared = crate::pipeline::prepare(hir, &PipelineOptions::default());
    let mut out = String::new();
    let mut json_units = Vec::new();
    let mut any_fits = false;
    for &u in units {
        // Each rank count is planned as its run would be: with `--tile` absent,
        // at the tile size the model chooses for that count.
        let mut program = None;
        let mut rows: Vec<Row> = Vec::new();
        for &procs in procs {
            let model = p.tiled.model.at_concurrency(p.threads_per_rank * procs);
            let opts = TiledOptions { threads: p.threads_per_rank, model, ..p.tiled.clone() };
            let exec = match p.mem_per_rank {
                Some(limit) => Executor::RanksWithin(procs, limit),
                None => Executor::Ranks(procs),
            };
            let (prog, choice) = autotile::plan(&prepared, u, &opts, exec)?;
            let tile = choice.as_ref().map_or(p.tiled.tile, |c| c.tile);
            rows.push(Row { procs, fc: forecast(&prog, procs, &opts), tile, choice });
            program.get_or_insert(prog);
        }
        let program = program.expect("--procs is not empty");
        any_fits |= rows.iter().any(|r| r.fits(p.mem_per_rank));
        let stored: f64 = program.storage().iter().map(|s| s.1).sum();
        let dense: f64 = program.storage().iter().map(|s| s.2).sum();
        if p.json {
            json_units.push(unit_json(&hir.units[u].name, &program, stored, dense, &rows, p));
        } else {
            out += &unit_text(&hir.units[u].name, &program, stored, dense, &rows, p);
        }
    }
    if p.json {
        let v = serde_json::json!({
            "tiled": true,
            "tile": (!p.tiled.auto_tile).then_some(p.tiled.tile),
            "threads_per_rank": p.threads_per_rank,
            "mem_per_rank_bytes": p.mem_per_rank,
            "model_source": p.tiled.model.source,
            "units": json_units,
        });
        out = serde_json::to_string_pretty(&v).expect("plain JSON") + "\n";
    }
    if let (Some(limit), false) = (p.mem_per_rank, any_fits) {
        return Err(CommandError::new(
            "E0803",
            format!("no rank count given fits {} per rank:\n{out}", bytes(limit as f64)),
            Some("try more ranks (--procs), a smaller --tile, or more memory per rank".into()),
        ));
    }
    Ok(out)
}

fn unit_text(name: &str, program: &Program, stored: f64, dense: f64, rows: &[Row], p: &TiledPlan) -> String {
    let mut s = format!(
        "tiled plan of `{name}` ({}, {} thread{} per rank; model: {}):\n  stored {:.3e} of {:.3e} \
         elements ({:.1}%), {:.3e} flops on tiles (dense order {:.3e}){}\n",
        match rows.iter().any(|r| r.choice.is_some()) {
            true => "tile chosen per rank count by the model".to_string(),
            false => format!("tile {}", p.tiled.tile),
        },
        p.threads_per_rank,
        if p.threads_per_rank == 1 { "" } else { "s" },
        p.tiled.model.source,
        stored,
        dense,
        100.0 * stored / dense.max(1.0),
        program.planned_flops(),
        program.dense_flops,
        match rows.first() {
            Some(r) if r.choice.is_some() => {
                format!(" at tile {} ({} rank{})", r.tile, r.procs, if r.procs == 1 { "" } else { "s" })
            }
            _ => String::new(),
        }
    );
    s += "  ranks  tiles/rank (max)  received (max)  memory/rank (max)  flops/rank max/mean  moved/rank (max)  model (exchange)  tile\n";
    for r in rows {
        let mark = match p.mem_per_rank {
            Some(l) if !r.fits(Some(l)) => format!("  exceeds {}", bytes(l as f64)),
            _ => String::new(),
        };
        let mean = r.mean(|x| x.flops);
        s += &format!(
            "  {:>5}  {:>16.3e}  {:>14.3e}  {:>17}  {:>9.3e} {:>8.2}  {:>16.3e}  {} s ({} s)  {:>4}{mark}\n",
            r.procs,
            r.max(|x| x.owned_peak),
            r.max(|x| x.fetched_peak),
            bytes(r.max(|x| x.peak_bytes())),
            r.max(|x| x.flops),
            if mean > 0.0 { r.max(|x| x.flops) / mean } else { 1.0 },
            r.max(|x| x.words_sent),
            secs(r.fc.model_s),
            secs(r.fc.model_exchange_s),
            r.tile,
        );
    }
    for r in rows {
        if let Some(c) = &r.choice {
            s += &format!("  {} rank{}: {}\n", r.procs, if r.procs == 1 { "" } else { "s" }, c.describe());
        }
    }
    s += "  (elements of f64; memory = owned tiles at their peak + one task set's received and partial tiles;\n   moved = words sent in all-to-all rounds or read by one-sided gets (--exchange);\n   the same numbers `tcc run --tiled --ranks P --stats` reports as measured)\n";
    s
}

fn unit_json(name: &str, program: &Program, stored: f64, dense: f64, rows: &[Row], p: &TiledPlan) -> serde_json::Value {
    serde_json::json!({
        "unit": name,
        "stored_elements": stored,
        "dense_elements": dense,
        "flops": program.planned_flops(),
        "dense_flops": program.dense_flops,
        "plans": rows.iter().map(|r| serde_json::json!({
            "procs": r.procs,
            "tile": r.tile,
            "tile_chosen_by_model": r.choice.is_some(),
            "fits": r.fits(p.mem_per_rank),
            "model_seconds": r.fc.model_s,
            "model_exchange_seconds": r.fc.model_exchange_s,
            "plan_seconds": r.fc.plan_s,
            "ranks": r.fc.ranks.iter().map(|x| serde_json::json!({
                "owned_peak_elements": x.owned_peak,
                "received_peak_elements": x.fetched_peak,
                "peak_bytes": x.peak_bytes(),
                "flops": x.flops,
                "words_sent": x.words_sent,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// `12.3 MiB`.
fn bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b;
    let mut k = 0;
    while x >= 1024.0 && k + 1 < UNITS.len() {
        x /= 1024.0;
        k += 1;
    }
    format!("{x:.1} {}", UNITS[k])
}
