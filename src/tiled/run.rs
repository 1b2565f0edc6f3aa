//! `tcc run --tiled`: each unit planned on tiles, its inputs made tile by tile (or
//! packed from `--input` arrays, after checking they have the declared structure),
//! run as task sets, and reported like every other executor.

use super::exec::{ExchangeMode, TiledOptions, TiledStats};
use super::profile::secs;
use super::tensor::TiledTensor;
use crate::error::CommandError;
use crate::interp;
use crate::pipeline::PipelineOptions;
use crate::run::compare::check_against_interpreter;
use crate::run::{fail, interp_error, run_report_summarized, run_report_with, OutputRow, RunOptions, Summary};
use crate::sema::hir::Hir;
use crate::symmetry::PermGroup;
use crate::tensor::Dense;
use std::collections::HashMap;
use std::io::Write;

/// Settings of `tcc run --tiled`.
#[derive(Debug, Clone, Default)]
pub struct TiledRun {
    pub tiled: TiledOptions,
    /// Also run the dense interpreter and compare (`--check`).
    pub check: bool,
    /// Print storage per tensor and time per worker (`--stats`).
    pub stats: bool,
    /// Run on the GPU instead of the CPU's threads (`tcc-gpu --tiled`).
    pub gpu: Option<GpuTiled>,
}

/// A tiled run on the GPU ([`super::device`]).
#[derive(Debug, Clone, Default)]
pub struct GpuTiled {
    /// The move kernel's PTX (`tcc build --target cuda --tiled`).
    pub ptx: String,
    /// Runs timed; the report gives the fastest.
    pub repeat: usize,
}

/// Runs every selected unit of `hir` on tiles and writes the report to `out`.
pub fn run_tiled(hir: &Hir, opts: &RunOptions, r: &TiledRun, out: &mut dyn Write) -> Result<(), CommandError> {
    let prepared = crate::pipeline::prepare(hir, &PipelineOptions::default());
    let known = crate::run::KnownSymmetry::default();
    run_report_with(hir, opts, out, false, Some(&known), &mut |u, loaded| {
        let (dense, mut extra, symmetry) = run_unit_with_symmetry(hir, &prepared, u, loaded, opts.seed, r)?;
        known.borrow_mut().extend(symmetry);
        if r.check {
            let mut want_inputs = HashMap::new();
            for t in hir.unit_inputs(u) {
                let v = match loaded.get(&t) {
                    Some(v) => v.clone(),
                    None => interp::fill_random(hir, t, opts.seed).map_err(interp_error)?,
                };
                want_inputs.insert(t, v);
            }
            extra.push(check_against_interpreter(hir, u, &dense, &want_inputs)?);
        }
        Ok((dense, extra))
    })
}

/// Runs unit `u` of `prepared` (what [`crate::pipeline::prepare`] made of `hir`)
/// on tiles: inputs packed from `given` arrays (keyed by `prepared`'s tensors,
/// after checking their structure) or filled at random from `seed` as `hir`'s
/// tensors are, outputs made dense. Also the report lines. `tcc run --tiled`
/// of a complex program runs its (re, im) parts so ([`crate::run::complex`]).
pub fn run_unit(
    hir: &Hir,
    prepared: &Hir,
    u: crate::sema::hir::UnitId,
    given: &HashMap<crate::ids::TensorId, Dense>,
    seed: u64,
    r: &TiledRun,
) -> Result<(HashMap<crate::ids::TensorId, Dense>, Vec<String>), CommandError> {
    run_unit_with_symmetry(hir, prepared, u, given, seed, r).map(|(dense, extra, _)| (dense, extra))
}

/// Per output, how it breaks its declared symmetry (W0701), found where only it
/// can: the dense image of a tile that is not its own image under the group is
/// a copy of a stored tile (with the sign), so only stored tiles that are their
/// own images are checked ([`super::outputs::symmetry_violation`]) — the dense
/// walk over every element took a quarter of `tcc run --tiled`'s time on the
/// four-index transform.
type SymmetryFound = HashMap<crate::ids::TensorId, Option<String>>;

/// A unit's outputs, its report lines and how each output breaks its symmetry.
type UnitResult = (HashMap<crate::ids::TensorId, Dense>, Vec<String>, SymmetryFound);

/// [`run_unit`], and how each output breaks its declared symmetry.
fn run_unit_with_symmetry(
    hir: &Hir,
    prepared: &Hir,
    u: crate::sema::hir::UnitId,
    given: &HashMap<crate::ids::TensorId, Dense>,
    seed: u64,
    r: &TiledRun,
) -> Result<UnitResult, CommandError> {
    let (program, tile) = super::autotile::plan(prepared, u, &r.tiled, super::autotile::Executor::OneProcess)?;
    let source = super::source::SourceView::of(hir);
    let mut inputs = HashMap::new();
    for t in prepared.unit_inputs(u) {
        let tensor = &prepared.tensors[t];
        let layout = program.layouts[&t].clone();
        let v = match given.get(&t) {
            Some(dense) => {
                structure_check(prepared, t, dense)?;
                TiledTensor::from_dense(layout, dense)
            }
            None => {
                // A widened 16-bit input holds 16-bit values, as the interpreter's.
                let elem = source.round_as(t, tensor.elem);
                TiledTensor::fill_random(layout, &PermGroup::of(tensor), seed, |x| interp::round_to(elem, x))
            }
        }
        .map_err(|e| crate::run::out_of_memory(format!("cannot allocate {} elements for `{}`", e.elements, e.name)))?;
        inputs.insert(t, v);
    }
    if let Some(gpu) = &r.gpu {
        let plan = super::device::plan(&program, super::device::scratch_limit()?)?;
        let mut machine = crate::codegen::cuda_tiled::open(&gpu.ptx)
            .map_err(|why| fail("E0730", crate::codegen::cuda::NO_DEVICE, Some(why)))?;
        let (outputs, stats) = super::device::run_on(&program, &plan, &inputs, machine.as_mut(), gpu.repeat)?;
        drop(inputs);
        let dense: HashMap<_, Dense> = outputs.iter().map(|(&t, v)| (t, v.to_dense())).collect();
        let mut extra = device_report_lines(&program, &stats, gpu.repeat);
        extra.extend(tile.map(|c| c.describe()));
        return Ok((dense, extra, HashMap::new()));
    }
    let (outputs, stats) = program.run(inputs, &TiledOptions { profile: r.stats, ..r.tiled.clone() })?;
    let dense: HashMap<_, Dense> = outputs.iter().map(|(&t, v)| (t, v.to_dense())).collect();
    let solo = tcc_runtime::comm::threads::solo(tcc_runtime::comm::Backend::Threads);
    let symmetry = outputs
        .iter()
        .map(|(&t, v)| {
            let l = &v.layout;
            let tile = |slot: usize| {
                let at = l.offset(slot);
                Some(&v.data[at..at + l.tile_len(&l.tiles()[slot])])
            };
            (t, super::outputs::symmetry_violation(l, &tile, crate::run::SYMMETRY_RTOL, &*solo))
        })
        .collect();
    let mut extra = report_lines(&stats, &r.tiled, r.stats);
    extra.extend(tile.map(|c| c.describe()));
    if r.stats {
        let model = program.predicted_seconds(&r.tiled.model.at_concurrency(r.tiled.threads), r.tiled.threads);
        extra.push(format!(
            "model: {} s, wall / model = {:.2}; {}",
            secs(model),
            if model > 0.0 { stats.run_s / model } else { 0.0 },
            r.tiled.model.source
        ));
        extra.extend(stats.profile.report(PROFILE_CLASSES));
    }
    Ok((dense, extra, symmetry))
}

/// The report of a GPU run: time, rate, and what ran.
fn device_report_lines(program: &super::Program, s: &super::device::DeviceStats, repeat: usize) -> Vec<String> {
    let stored: f64 = program.storage().iter().map(|(_, st, _)| st).sum();
    let dense: f64 = program.storage().iter().map(|(_, _, d)| d).sum();
    vec![
        format!(
            "gpu: {} s (fastest of {}), {:.1} GFLOP/s; {:.3e} flops ({:.3e} dense)",
            secs(s.run_s),
            repeat.max(1),
            if s.run_s > 0.0 { s.flops / s.run_s / 1e9 } else { 0.0 },
            s.flops,
            program.dense_flops
        ),
        format!(
            "gpu: {} rounds, {} batched GEMM calls, {} tile moves ({} s of the run encoding them on the host, {:.3e} words uploaded)",
            s.rounds,
            s.gemm_calls,
            s.moves,
            secs(s.encode_s),
            s.move_words as f64
        ),
        format!(
            "gpu: operand matrices {} read in place ({} transposed), {} packed; {} GEMM calls through pointer arrays",
            s.operands.in_place, s.operands.transposed, s.operands.packed, s.operands.pointer_gemms
        ),
        format!("stored: {stored:.0} of {dense:.0} dense elements"),
    ]
}

/// The tile size a program was planned at: the auto choice, else the options'.
fn program_tile(choice: &Option<super::autotile::TileChoice>, opts: &TiledOptions) -> usize {
    choice.as_ref().map_or(opts.tile, |c| c.tile)
}

/// An `--input` array must have the symmetry and blocks its tensor declares:
/// tiled storage keeps one tile per symmetry orbit, only the allowed blocks, and
/// would silently drop the rest.
fn structure_check(hir: &Hir, t: crate::ids::TensorId, dense: &Dense) -> Result<(), CommandError> {
    if let Some(v) = super::session::structure_violation(hir, t, dense.into()) {
        return Err(fail(
            "E0761",
            format!("input `{}` does not have its declared structure: {v}", hir.tensors[t].name),
            Some(
                "tiled storage keeps one tile per symmetry orbit and only the allowed blocks; fix the array or the \
                 declaration"
                    .into(),
            ),
        ));
    }
    Ok(())
}

/// Shape classes `--stats` lists (those that took the most kernel time).
const PROFILE_CLASSES: usize = 6;

/// A count in 4 significant digits: `1.024e9`.
fn si(x: f64) -> String {
    format!("{x:.3e}")
}

/// The report lines of a tiled run.
pub fn report_lines(s: &TiledStats, o: &TiledOptions, per_tensor: bool) -> Vec<String> {
    let stored: f64 = s.storage.iter().map(|x| x.1).sum();
    let dense: f64 = s.storage.iter().map(|x| x.2).sum();
    let makespan = s.busy_s.iter().cloned().fold(0.0, f64::max);
    let mut v = vec![
        format!(
            "tiled: {} tasks in {} task sets on {} threads ({}), time = {:.3} s ({:.2} GFLOP/s)",
            s.tasks,
            s.task_sets,
            s.busy_s.len(),
            o.schedule.name(),
            s.run_s,
            if s.run_s > 0.0 { s.executed_flops / s.run_s / 1e9 } else { 0.0 }
        ),
        format!(
            "flops: executed {} (planned {}), dense {} ({:.2}x fewer)",
            si(s.executed_flops),
            si(s.planned_flops),
            si(s.dense_flops),
            if s.executed_flops > 0.0 { s.dense_flops / s.executed_flops } else { 1.0 }
        ),
        format!(
            "storage: {} of {} elements ({:.1}%)",
            si(stored),
            si(dense),
            if dense > 0.0 { 100.0 * stored / dense } else { 100.0 }
        ),
    ];
    if per_tensor {
        for (name, st, de) in &s.storage {
            v.push(format!("  {name}: {} of {} elements", si(*st), si(*de)));
        }
        let busy: Vec<String> = s.busy_s.iter().map(|b| format!("{b:.3}")).collect();
        v.push(format!("worker busy seconds: [{}], makespan {makespan:.3} s", busy.join(", ")));
        v.push(format!("GETT calls: {}", s.gett_calls));
    }
    v
}

/// `tcc run --tiled --ranks N` (in-process ranks) or `mpirun -np N tcc run --tiled
/// --backend mpi`: every rank holds and computes only its tiles
/// ([`super::dist`]), outputs included: the ranks summarize them and write
/// `--output-dir` files together, and rank 0 writes the report.
pub fn run_tiled_distributed(
    hir: &Hir,
    opts: &RunOptions,
    r: &TiledRun,
    ranks: usize,
    mpi: bool,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    if r.check {
        return Err(fail(
            "E0760",
            "distributed tiled runs never make a tensor whole, so --check (the dense interpreter) is not available",
            Some("compare with `tcc run --tiled` (one process) or `tcc run --interp` on the same --seed or --input files".into()),
        ));
    }
    if opts.save_inputs {
        return Err(fail("E0760", "--save-inputs does not apply to tiled runs (inputs are never made dense)", None));
    }
    // `--input` files are read by each rank, its own tiles only: resolved here,
    // never loaded whole (the report and the launcher's checks see no inputs).
    let selected = hir.select_units(opts.program.as_deref())?;
    // Complex tensors run as (re, im) pairs and 16-bit ones widened
    // ([`super::source`]): a file feeds every executed part of its tensor.
    let source = super::source::SourceView::of(hir);
    let mut inputs = super::dist::Inputs { seed: opts.seed, files: HashMap::new(), source: source.clone() };
    for (_, path, targets) in crate::run::resolve_inputs(hir, &selected, opts)? {
        for t in targets {
            inputs.files.extend(source.executed(t).into_iter().map(|e| (e, path.clone())));
        }
    }
    let complex = crate::sema::complex::has_complex(hir);
    let opts = &RunOptions { inputs: Vec::new(), ..opts.clone() };
    let prepared = crate::pipeline::prepare(hir, &PipelineOptions::default());
    let units: Vec<_> = match &opts.program {
        Some(name) => hir.unit_by_name(name).into_iter().collect(),
        None => hir.units.ids().collect(),
    };
    let backend = if mpi { tcc_runtime::comm::Backend::Mpi } else { tcc_runtime::comm::Backend::Shm };
    // Statistics per rank: owned, received, flops, seconds, peak RSS, seconds
    // exchanging, seconds planning, words sent as planned and as counted, the
    // predicted time and its exchange part, flops overlapped with the fetch, task
    // sets moved one-sided and all, the process's peak RSS before any tile, sets
    // planned one-sided that had no windows, seconds in kernels, waiting for
    // tiles, waiting for other ranks, adding partial tiles, modelled seconds of
    // the rank's work, items of other ranks taken over and their words, seconds
    // setting up sets, idle and in items, words read in place, making new tensors.
    const W: usize = 28;
    let report = crate::exec::launch::launch(
        ranks,
        mpi,
        |make| make(backend),
        |_| crate::run::check_options(hir, opts),
        crate::exec::launch::OnError::Abort(&|e| e.to_string()),
        |comm| {
            let threads = if mpi { r.tiled.threads } else { (r.tiled.threads / comm.size()).max(1) };
            // Every rank's threads compute at once: the kernel rates of that many.
            let model = r.tiled.model.at_concurrency(threads * comm.size());
            let topts = TiledOptions { threads, model, profile: r.stats, ..r.tiled.clone() };
            let mut results = HashMap::new();
            for &u in &units {
                let planned =
                    super::autotile::plan(&prepared, u, &topts, super::autotile::Executor::Ranks(comm.size()))?;
                let (program, tile) = super::autotile::agree_on_tile(comm, &prepared, u, &topts, planned)?;
                let topts = TiledOptions { tile: program_tile(&tile, &topts), ..topts.clone() };
                let (outputs, stats) =
                    super::dist::run_rank_reported(&program, comm, &inputs, &topts, opts.output_dir.as_deref())?;
                let row = [
                    stats.owned_peak,
                    stats.fetched_peak,
                    stats.flops,
                    stats.run_s,
                    stats.peak_rss,
                    stats.exchange_s,
                    stats.plan_s,
                    stats.planned_words,
                    stats.words_sent,
                    stats.model_s,
                    stats.model_exchange_s,
                    stats.overlapped_flops,
                    stats.one_sided_sets as f64,
                    stats.sets as f64,
                    stats.base_rss,
                    stats.no_window_sets as f64,
                    stats.profile.total().wall_s,
                    stats.tiles_wait_s,
                    stats.ranks_wait_s,
                    stats.reduce_s,
                    stats.work_model_s,
                    stats.taken_items as f64,
                    stats.taken_words,
                    stats.setup_s,
                    stats.idle_s,
                    stats.items_s,
                    stats.in_place_words,
                    stats.new_tensors_s,
                ];
                let mut all = vec![0.0; row.len() * comm.size()];
                comm.allgather(&row, &mut all);
                if comm.rank() == 0 {
                    results
                        .insert(u, (outputs, all, program.planned_flops(), program.dense_flops, stats.profile, tile));
                }
            }
            let words = comm.stats();
            let row = [words.words_sent as f64, words.words_received as f64, words.words_got as f64];
            let mut all_words = vec![0.0; 3 * comm.size()];
            comm.allgather(&row, &mut all_words);
            if comm.rank() != 0 {
                return Ok(Vec::new());
            }
            let mut buf = Vec::new();
            let p = comm.size();
            run_report_summarized(hir, opts, &mut buf, &mut |u| {
                let (outputs, all, planned, dense_flops, profile, tile) = &results[&u];
                // One row per source output: a complex one's imaginary part joins
                // its real part's row, whose id is the source tensor's.
                let im = |t| {
                    outputs.iter().find(|o| source.part(o.tensor).is_some_and(|p| p.source == t && p.component == 1))
                };
                let rows: Vec<OutputRow> = outputs
                    .iter()
                    .filter(|o| source.part(o.tensor).is_none_or(|p| p.component == 0))
                    .map(|o| OutputRow {
                        tensor: o.tensor,
                        summary: o.summary,
                        summary_im: complex.then(|| im(o.tensor).map_or_else(|| Summary::of(&[]), |i| i.summary)),
                        symmetry: o.symmetry.clone(),
                        // Tiles outside the declared blocks are never stored.
                        blocks: None,
                    })
                    .collect();
                let time = (0..p).map(|q| all[W * q + 3]).fold(0.0, f64::max);
                let flops: f64 = (0..p).map(|q| all[W * q + 2]).sum();
                let mut extra = vec![
                    format!(
                        "tiled on {p} ranks × {threads} threads: time = {time:.3} s ({:.2} GFLOP/s)",
                        if time > 0.0 { flops / time / 1e9 } else { 0.0 }
                    ),
                    format!("flops: executed {} (planned {}), dense {}", si(flops), si(*planned), si(*dense_flops)),
                ];
                extra.extend(tile.as_ref().map(|c| c.describe()));
                if r.stats {
                    let (model, model_x) = (all[9], all[10]);
                    extra.push(format!(
                        "model: {} s ({} s of it exchange rounds), wall / model = {:.2}; {}",
                        secs(model),
                        secs(model_x),
                        if model > 0.0 { time / model } else { 0.0 },
                        topts.model.source
                    ));
                    extra.push(format!(
                        "exchange: {} of {} task sets by one-sided gets, the rest by all-to-all rounds (--exchange {}){}",
                        all[12] as u64,
                        all[13] as u64,
                        match topts.exchange {
                            ExchangeMode::Auto => "auto: the faster by the model",
                            ExchangeMode::Collective => "collective",
                            ExchangeMode::OneSided => "one-sided",
                        },
                        match all[15] as u64 {
                            0 => String::new(),
                            n => format!(
                                "; {n} planned one-sided ran all-to-all: this back end has no windows (MPI_Win_create failed)"
                            ),
                        }
                    ));
                    let in_place: f64 = (0..p).map(|q| all[W * q + 26]).sum();
                    if in_place > 0.0 {
                        extra.push(format!(
                            "read in place: {} words of other ranks' tiles loaded where they lie (shared memory), not copied (TCC_READ_IN_PLACE=off copies them)",
                            si(in_place)
                        ));
                    }
                    for q in 0..p {
                        let held = 8.0 * (all[W * q] + all[W * q + 1]);
                        extra.push(format!(
                            "  rank {q}: owns at most {} elements, receives at most {} per task set ({} at 8 B), {} flops{}, {:.3} s ({:.3} s exchanging; planned in {:.3} s before), moved {} words (planned {}), peak RSS {}{}",
                            si(all[W * q]),
                            si(all[W * q + 1]),
                            crate::plan::report::bytes(held as u64),
                            si(all[W * q + 2]),
                            if all[W * q + 1] > 0.0 {
                                format!(" ({:.0}% while fetching)", 100.0 * all[W * q + 11] / all[W * q + 2].max(1.0))
                            } else {
                                String::new() // nothing to fetch: no overlap to speak of
                            },
                            all[W * q + 3],
                            all[W * q + 5],
                            all[W * q + 6],
                            all[W * q + 8] as u64,
                            all[W * q + 7] as u64,
                            crate::plan::report::bytes(all[W * q + 4] as u64),
                            if !mpi {
                                " (the whole process)".to_string()
                            } else if held > 0.0 {
                                let (rss, base) = (all[W * q + 4], all[W * q + 14]);
                                format!(
                                    " = {:.2}x its tiles ({} before any tile; the {} added = {:.2}x)",
                                    rss / held,
                                    crate::plan::report::bytes(base as u64),
                                    crate::plan::report::bytes((rss - base).max(0.0) as u64),
                                    (rss - base).max(0.0) / held
                                )
                            } else {
                                String::new()
                            }
                        ));
                        if all[W * q + 12] > 0.0 {
                            // One-sided sets (the kernel profile is on with --stats): the rest
                            // of the wall time; a rank whose items were all taken ran no kernel.
                            let busy = all[W * q + 16] + all[W * q + 17] + all[W * q + 18] + all[W * q + 19];
                            extra.push(format!(
                                "    rank {q}: {:.3} s in kernels (modelled work {:.3} s), {:.3} s waiting for fetched tiles, {:.3} s for other ranks at window syncs, {:.3} s adding partial tiles, {:.3} s else ({:.3} s setting up sets, {:.3} s compute threads waiting for items, {:.3} s in items outside kernel calls); took over {} items of other ranks ({} words carried for taken-over work, its own items' included); {:.3} s making the tensors sets write first (first touch of their pages)",
                                all[W * q + 16],
                                all[W * q + 20],
                                all[W * q + 17],
                                all[W * q + 18],
                                all[W * q + 19],
                                (all[W * q + 3] - busy).max(0.0),
                                all[W * q + 23],
                                all[W * q + 24],
                                (all[W * q + 25] - all[W * q + 16]).max(0.0),
                                all[W * q + 21] as u64,
                                all[W * q + 22] as u64,
                                all[W * q + 27]
                            ));
                        }
                    }
                    let kernels = profile.report(PROFILE_CLASSES);
                    if kernels.is_empty() {
                        // Ranks take over unstarted items: rank 0 may have run none.
                        extra
                            .push("kernels of rank 0: no calls (it had no work, or other ranks took its items)".into());
                    }
                    extra.extend(kernels.into_iter().map(|l| l.replacen("kernels:", "kernels of rank 0:", 1)));
                }
                Ok((rows, extra))
            })?;
            if r.stats {
                for q in 0..p {
                    let _ = writeln!(
                        buf,
                        "rank {q}: words sent {}, received {}, read one-sided {}",
                        all_words[3 * q] as u64,
                        all_words[3 * q + 1] as u64,
                        all_words[3 * q + 2] as u64
                    );
                }
            }
            Ok(buf)
        },
    )?;
    if let Some(buf) = report {
        out.write_all(&buf).map_err(|e| fail("E0711", format!("cannot write the report: {e}"), None))?;
    }
    Ok(())
}
