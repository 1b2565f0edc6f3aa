//! The tile size of ranges that declare none, chosen by the time model (`--tile
//! auto`, the default of `tcc run --tiled`, `tcc plan --tiled` and `tcc build
//! --mpi` libraries).
//!
//! Why: one fixed size cannot serve every rank count. Large tiles run the GETT
//! kernel near its peak but leave too few tasks to balance many ranks (CCD with
//! o = 40, v = 400 at tile 40 on 256 ranks: the busiest rank has 1.42× the mean
//! flops); small tiles balance but run slower kernels, move more words and cost
//! more to plan. Each candidate is planned exactly as the run will plan it and
//! priced by the same model `--stats` compares against ([`super::dist::forecast`]
//! on ranks, [`Program::predicted_seconds`] in one process); the least predicted
//! time wins. The choice is made from the plan alone — no clock, no measurement —
//! so every rank that plans the same program with the same model chooses alike;
//! distributed callers still agree on it ([`agree_on_tile`]) because a rank's
//! tuning table or thread count may differ from its peers'.

use super::dist::forecast;
use super::exec::{Program, TiledOptions};
use super::space::{TiledRange, DEFAULT_TILE};
use crate::error::CommandError;
use crate::ids::{RangeId, UnitId};
use crate::sema::hir::{Factor, Hir};
use std::collections::BTreeSet;
use tcc_runtime::comm::{Communicator, ReduceOp};

/// Tile sizes tried. Below 12 the kernel's rate falls steeply and the plan grows
/// with the cube of the tile count; above 80 a tile of four indices is 327 MB.
pub const CANDIDATES: [usize; 9] = [12, 16, 20, 24, 32, 40, 48, 64, 80];

/// Candidates whose terms would visit more tile tuples than this are not planned
/// (planning them alone would take seconds).
const MAX_TUPLES: f64 = 2e7;

/// The default is kept unless another candidate is predicted this much faster:
/// differences below the model's accuracy are not worth other tiles.
const KEEP_DEFAULT_WITHIN: f64 = 0.03;

/// What the run will be: one process with threads, or ranks (each with the
/// threads and kernel rates in the options), optionally with the bytes of tiles
/// a rank may hold (`tcc plan --tiled --mem-per-rank`): a candidate over it is
/// chosen only when none fits.
#[derive(Debug, Clone, Copy)]
pub enum Executor {
    OneProcess,
    Ranks(usize),
    RanksWithin(usize, u64),
}

/// The tile size chosen, its predicted time, and every candidate's.
#[derive(Debug, Clone, PartialEq)]
pub struct TileChoice {
    pub tile: usize,
    pub model_s: f64,
    /// (tile, predicted seconds) of each candidate planned, in size order.
    pub tried: Vec<(usize, f64)>,
    /// Candidates whose tiles exceed the memory a rank may hold.
    pub over_limit: Vec<usize>,
}

impl TileChoice {
    /// "tile 20 (auto: the time model predicts 0.212 s; 16 → 0.215 s, 40 → 0.227 s;
    /// --tile N fixes it)".
    pub fn describe(&self) -> String {
        let others: Vec<String> = self
            .tried
            .iter()
            .filter(|(t, _)| *t != self.tile)
            .map(|(t, s)| {
                let over = if self.over_limit.contains(t) { " (over the memory per rank)" } else { "" };
                format!("{t} → {} s{over}", three_digits(*s))
            })
            .collect();
        format!(
            "tile {} (auto: the time model predicts {} s; {}; --tile N fixes it)",
            self.tile,
            three_digits(self.model_s),
            if others.is_empty() {
                "no other candidate cuts the ranges differently".to_string()
            } else {
                others.join(", ")
            }
        )
    }
}

/// Seconds to three significant digits: candidates of small programs differ in
/// the third digit of milliseconds.
fn three_digits(x: f64) -> String {
    if x >= 0.1 || x == 0.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

/// Plans unit `unit` of `prepared` for `exec`: at `opts.tile` when
/// `opts.auto_tile` is off or every range of the unit declares its tile size,
/// else at the candidate with the least predicted time (`Some` choice).
pub fn plan(
    prepared: &Hir,
    unit: UnitId,
    opts: &TiledOptions,
    exec: Executor,
) -> Result<(Program, Option<TileChoice>), CommandError> {
    let free = untiled_ranges(prepared, unit);
    if !opts.auto_tile || free.is_empty() {
        return Ok((Program::plan(prepared, unit, opts)?, None));
    }
    let mut seen: Vec<Vec<TiledRange>> = Vec::new();
    // Best by (over the limit, predicted seconds): a fitting candidate first.
    let mut best: Option<(Program, usize, f64, bool)> = None;
    let mut over_limit = Vec::new();
    let mut default_program = None;
    let mut tried = Vec::new();
    let mut first_error = None;
    // The default first: a candidate that cuts like it is reported as it.
    let order = std::iter::once(DEFAULT_TILE).chain(CANDIDATES.into_iter().filter(|&t| t != DEFAULT_TILE));
    for tile in order {
        // Candidates that cut every free range alike are one plan.
        let tilings: Vec<TiledRange> = free.iter().map(|&r| TiledRange::of(prepared, r, tile)).collect();
        if seen.contains(&tilings) {
            continue;
        }
        seen.push(tilings);
        if tile != DEFAULT_TILE && tuples(prepared, unit, tile) > MAX_TUPLES {
            continue;
        }
        let o = TiledOptions { tile, ..opts.clone() };
        let program = match Program::plan(prepared, unit, &o) {
            Ok(p) => p,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        let (s, over) = predicted(&program, &o, exec);
        tried.push((tile, s));
        if over {
            over_limit.push(tile);
        }
        if best.as_ref().is_none_or(|b| (over, s) < (b.3, b.2)) {
            // The default is planned first: kept aside in case it is kept below.
            if let Some(b) = best.take().filter(|b| b.1 == DEFAULT_TILE) {
                default_program = Some(b.0);
            }
            best = Some((program, tile, s, over));
        }
    }
    tried.sort_by_key(|c| c.0);
    let Some((mut program, mut tile, mut model_s, over)) = best else {
        return Err(first_error.unwrap_or_else(|| {
            CommandError::new("E0760", "no tile size could be planned", Some("give one with --tile N".into()))
        }));
    };
    if let Some(&(_, s)) = tried.iter().find(|(t, _)| *t == DEFAULT_TILE) {
        let default_fits = !over_limit.contains(&DEFAULT_TILE) || over;
        if tile != DEFAULT_TILE && default_fits && s <= model_s * (1.0 + KEEP_DEFAULT_WITHIN) {
            program = match default_program {
                Some(p) => p,
                None => Program::plan(prepared, unit, &TiledOptions { tile: DEFAULT_TILE, ..opts.clone() })?,
            };
            (tile, model_s) = (DEFAULT_TILE, s);
        }
    }
    Ok((program, Some(TileChoice { tile, model_s, tried, over_limit })))
}

/// `TCC_TILE` (how `tcc build --mpi` libraries are told a tile size): unset or
/// `auto` is `None` (the model chooses), a size ≥ 1 is `Some`; `Err` names a
/// value that is neither.
pub fn tile_from_env() -> Result<Option<usize>, String> {
    match std::env::var_os("TCC_TILE") {
        None => Ok(None),
        Some(v) => match v.to_str().map(str::trim) {
            Some("auto") => Ok(None),
            Some(n) => n.parse::<usize>().ok().filter(|&n| n >= 1).map(Some).ok_or(()),
            None => Err(()),
        }
        .map_err(|_| format!("TCC_TILE={} is neither auto nor a tile size ≥ 1", v.to_string_lossy())),
    }
}

/// Makes every rank use the same tile size: the smallest any rank chose (one
/// all-reduce); a rank that chose another re-plans at it. `None` (no choice was
/// made) is the same on every rank, as it depends on the program alone.
pub fn agree_on_tile(
    comm: &dyn Communicator,
    prepared: &Hir,
    unit: UnitId,
    opts: &TiledOptions,
    planned: (Program, Option<TileChoice>),
) -> Result<(Program, Option<TileChoice>), CommandError> {
    let (program, Some(mut choice)) = planned else { return Ok(planned) };
    let mut t = [-(choice.tile as f64)];
    comm.allreduce(&mut t, ReduceOp::Max);
    let agreed = (-t[0]) as usize;
    if agreed == choice.tile {
        return Ok((program, Some(choice)));
    }
    choice.model_s = choice.tried.iter().find(|(x, _)| *x == agreed).map_or(f64::NAN, |c| c.1);
    choice.tile = agreed;
    Ok((Program::plan(prepared, unit, &TiledOptions { tile: agreed, ..opts.clone() })?, Some(choice)))
}

/// The unit's ranges whose tile size the compiler chooses (no `tile` in the source).
fn untiled_ranges(hir: &Hir, unit: UnitId) -> Vec<RangeId> {
    let used = hir.unit_ranges(unit);
    let mut out: Vec<RangeId> = used.into_iter().filter(|&r| hir.ranges[r].tiling.tile.is_none()).collect();
    out.sort();
    out
}

/// Tile tuples the plan of `unit` at `tile` visits, at most: per term, the
/// product of the tile counts of its indices.
fn tuples(hir: &Hir, unit: UnitId, tile: usize) -> f64 {
    let count = |r: RangeId| TiledRange::of(hir, r, tile).count() as f64;
    let mut total = 0.0;
    for st in &hir.units[unit].stmts {
        for term in &st.rhs.terms {
            let mut idx: BTreeSet<_> = st.lhs.indices.iter().copied().collect();
            for f in &term.factors {
                if let Factor::Tensor(r) = f {
                    idx.extend(r.indices.iter().copied());
                }
            }
            total += idx.iter().map(|&i| count(hir.indices[i].range)).product::<f64>();
        }
    }
    total
}

/// The model's time of `program` run as `exec`, and whether a rank's tiles
/// exceed the memory `exec` allows.
fn predicted(program: &Program, opts: &TiledOptions, exec: Executor) -> (f64, bool) {
    match exec {
        Executor::OneProcess => {
            (program.predicted_seconds(&opts.model.at_concurrency(opts.threads), opts.threads), false)
        }
        Executor::Ranks(ranks) => (forecast(program, ranks, opts).model_s, false),
        Executor::RanksWithin(ranks, limit) => {
            let f = forecast(program, ranks, opts);
            let peak = f.ranks.iter().map(|r| r.peak_bytes()).fold(0.0, f64::max);
            (f.model_s, peak > limit as f64)
        }
    }
}
