//! Execution of checked programs on the runtime: `tcc run --ranks N` (in-process
//! ranks) and `mpirun -np N tcc run --backend mpi`. The report is the one of
//! `tcc run --interp` ([`crate::run`]), printed by rank 0, so the two compare line
//! by line; `--stats` appends each rank's words and messages sent.

pub mod distributed;
pub mod launch;
pub mod model;
pub mod planned;
pub mod sliced;

use crate::error::CommandError;
use crate::run::{check_options, run_report, RunOptions};
use crate::sema::hir::{Hir, TensorId, UnitId};
use crate::tensor::Dense;
use distributed::{ExecOptions, TaskStats};
use launch::OnError;
use std::collections::HashMap;
use std::io::Write;
use tcc_runtime::comm::mixed::Mixed;
use tcc_runtime::comm::{Backend, Communicator, World};
use tcc_runtime::task::Schedule;
use tcc_runtime::tune::KernelRate;
use tcc_runtime::tune::TuningTable;

/// How `tcc run` distributes.
#[derive(Debug, Clone)]
pub struct DistOptions {
    /// In-process ranks (threads world); ignored for MPI.
    pub ranks: usize,
    pub schedule: Schedule,
    pub stats: bool,
    /// The tuning table (`--tuning`), else the built-in defaults.
    pub tuning: Option<TuningTable>,
    /// Optimize (binary contractions) before distributing (default); without it the
    /// results are bitwise those of the interpreter.
    pub optimize: bool,
    /// Compiled code with sliced terms whose slices the ranks share (`--max-intermediate`,
    /// `--mem-limit`: [`sliced`]) instead of the interpreter's tiles.
    pub compiled: Option<crate::codegen::llvm::Options>,
}

impl Default for DistOptions {
    fn default() -> Self {
        DistOptions {
            ranks: 2,
            schedule: Schedule::Dynamic,
            stats: false,
            tuning: None,
            optimize: true,
            compiled: None,
        }
    }
}

fn fail(message: String) -> CommandError {
    CommandError { code: "E0720", message, hint: None }
}

/// What one rank returns: its report (rank 0) and its error, if any.
fn rank_body(
    hir: &Hir,
    exec_hir: &Hir,
    ropts: &RunOptions,
    dopts: &DistOptions,
    comm: &dyn Communicator,
    backends: &str,
) -> (Vec<u8>, Result<(), CommandError>) {
    let me = comm.rank();
    let mut ropts = ropts.clone();
    if me != 0 {
        ropts.output_dir = None;
        ropts.save_inputs = false;
    }
    let eopts = ExecOptions { schedule: dopts.schedule, ..ExecOptions::default() };
    let mut tstats = TaskStats::default();
    let mut buf: Vec<u8> = Vec::new();
    let r = match &dopts.compiled {
        Some(codegen) => sliced::rank_run(hir, &ropts, codegen, comm, &mut buf).map(|s| {
            tstats.tasks = s.slices;
        }),
        None => {
            let mut exec = |u: UnitId, inputs: &HashMap<TensorId, Dense>| {
                distributed::run_unit(exec_hir, u, inputs, comm, &eopts, &mut tstats).map(|outs| (outs, Vec::new()))
            };
            run_report(hir, &ropts, &mut buf, &mut exec)
        }
    };
    if r.is_err() {
        return (buf, r);
    }
    if dopts.stats {
        let s = comm.stats();
        let row =
            [s.words_sent, s.messages_sent, s.words_received, s.messages_received, tstats.tasks, tstats.counter_ops]
                .map(|x| x as f64);
        let p = comm.size();
        let mut all = vec![0.0; row.len() * p];
        comm.allgather(&row, &mut all);
        if me == 0 {
            // Sliced terms deal their slices in blocks (`tasks`: slices run).
            let schedule = if dopts.compiled.is_some() { "slices in blocks" } else { dopts.schedule.name() };
            let _ = write!(buf, "{}", stats_text(&all, p, backends, schedule));
        }
    }
    (if me == 0 { buf } else { Vec::new() }, Ok(()))
}

/// The `--stats` block: one line per rank and a total.
fn stats_text(all: &[f64], p: usize, backends: &str, schedule: &str) -> String {
    let mut s = format!("stats: {p} ranks, back ends {backends}, schedule {schedule}\n");
    let head = ["words_sent", "messages_sent", "words_received", "messages_received", "tasks", "task_claims"];
    let mut tot = [0u64; 6];
    for r in 0..p {
        s.push_str(&format!("  rank {r}"));
        for (k, h) in head.iter().enumerate() {
            let v = all[r * 6 + k] as u64;
            tot[k] += v;
            s.push_str(&format!("  {h} = {v}"));
        }
        s.push('\n');
    }
    s.push_str("  total");
    for (k, h) in head.iter().enumerate() {
        s.push_str(&format!("  {h} = {}", tot[k]));
    }
    s.push('\n');
    s
}

fn exec_hir(hir: &Hir, dopts: &DistOptions) -> Hir {
    let popts = crate::pipeline::PipelineOptions { optimize: dopts.optimize, ..Default::default() };
    crate::pipeline::optimize(hir, &popts).0
}

/// `tcc run FILE --ranks N`: in-process ranks (`threads` and `shm` back ends mixed
/// by the tuning table).
pub fn run_threads(
    hir: &Hir,
    ropts: &RunOptions,
    dopts: &DistOptions,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    if dopts.ranks == 0 {
        return Err(fail("--ranks must be at least 1".into()));
    }
    let table = match &dopts.tuning {
        Some(t) if t.world != World::Threads => {
            return Err(fail(format!("the tuning table is for the `{:?}` world, not in-process ranks", t.world)))
        }
        Some(t) => t.clone(),
        None => TuningTable::default_for(World::Threads),
    };
    run_ranks(hir, ropts, dopts, out, false, table)
}

/// `mpirun -np N tcc run FILE --backend mpi`: this process is one rank (`mpi` and
/// `mpi-p2p` back ends mixed by the tuning table). A failing rank aborts the job.
#[cfg(feature = "mpi")]
pub fn run_mpi(hir: &Hir, ropts: &RunOptions, dopts: &DistOptions, out: &mut dyn Write) -> Result<(), CommandError> {
    let table = match &dopts.tuning {
        Some(t) if t.world != World::Mpi => {
            return Err(fail(format!("the tuning table is for the `{:?}` world, not MPI", t.world)))
        }
        Some(t) => t.clone(),
        None => TuningTable::default_for(World::Mpi),
    };
    run_ranks(hir, ropts, dopts, out, true, table)
}

/// Runs on the ranks of [`launch::launch`] (two back ends mixed by `table`); rank 0
/// writes the report.
fn run_ranks(
    hir: &Hir,
    ropts: &RunOptions,
    dopts: &DistOptions,
    out: &mut dyn Write,
    mpi: bool,
    table: TuningTable,
) -> Result<(), CommandError> {
    let (backends, names) = if mpi {
        ([Backend::Mpi, Backend::MpiP2p], "mpi+mpi-p2p")
    } else {
        ([Backend::Threads, Backend::Shm], "threads+shm")
    };
    // A sliced run compiles (every rank the same code); others interpret tiles of
    // the optimized program.
    let dopts = &DistOptions { compiled: dopts.compiled.as_ref().map(sliced::deterministic), ..dopts.clone() };
    let eh = match &dopts.compiled {
        Some(c) => {
            sliced::check_sliced(hir, ropts, c)?;
            hir.clone()
        }
        None => exec_hir(hir, dopts),
    };
    let report = launch::launch(
        dopts.ranks,
        mpi,
        |make| Box::new(Mixed::new(backends.iter().map(|&b| make(b)).collect(), table.clone())),
        |_| check_options(hir, ropts),
        OnError::Abort(&|e| e.to_string()),
        |comm| {
            let (buf, r) = rank_body(hir, &eh, ropts, dopts, comm, names);
            r.map(|()| buf)
        },
    )?;
    if let Some(buf) = report {
        out.write_all(&buf).map_err(|e| CommandError {
            code: "E0711",
            message: format!("cannot write the report: {e}"),
            hint: None,
        })?;
        let _ = out.flush();
    }
    Ok(())
}

/// Without the `mpi` feature: a clear error.
#[cfg(not(feature = "mpi"))]
pub fn run_mpi(
    _hir: &Hir,
    _ropts: &RunOptions,
    _dopts: &DistOptions,
    _out: &mut dyn Write,
) -> Result<(), CommandError> {
    Err(CommandError {
        code: "E0721",
        message: "this tcc was built without MPI support".into(),
        hint: Some("rebuild with `cargo build --features mpi` (needs an MPI library and libclang)".into()),
    })
}

/// `tcc tune`: measures every back end of a world and returns the table; an error
/// when the ranks cannot be started or a rank cannot allocate its buffers.
pub fn tune_threads(
    ranks: usize,
    opts: &tcc_runtime::tune::TuneOptions,
    progress: bool,
) -> Result<TuningTable, CommandError> {
    launch::check_ranks(ranks)?;
    let ms = tcc_runtime::comm::threads::run(ranks, |rank| {
        let comms: Vec<Box<dyn Communicator>> = World::Threads.backends().iter().map(|&b| rank.comm(b)).collect();
        let refs: Vec<&dyn Communicator> = comms.iter().map(|c| c.as_ref()).collect();
        let r = tcc_runtime::tune::try_measure(&refs, opts, &mut |m| {
            if progress {
                eprintln!("tune: {:<15} {:>10} B  {:<8} {:.3e} s", m.op.name(), m.bytes, m.backend.name(), m.seconds)
            }
        });
        // A rank without memory stops the others, which would wait for it.
        let ms = r.unwrap_or_else(|e| rank.abort(&e));
        let gets = tcc_runtime::tune::measure_gets(comms[1].as_ref(), get_words(opts));
        // In-process ranks have no window memory: their tiles are private memory.
        (ms, gets, tcc_runtime::tune::measure_touch(comms[1].as_ref(), 4 * get_words(opts), true))
    })
    .map_err(|f| {
        let mut e = launch::rank_failure(&f, "E0752");
        if e.code == "E0752" {
            e.hint = Some(format!("use a smaller --max-bytes (at most {}) or fewer --ranks", MAX_TUNE_BYTES_TEXT));
        }
        e
    })?;
    let (ms, gets, touch) = &ms[0];
    let touch = *touch;
    let mut table = tcc_runtime::tune::table_from(World::Threads, ranks, ms);
    table.calibration =
        calibration(ms, tcc_runtime::comm::Backend::Shm, ranks, kernel_rates(ranks), *gets, (touch, touch), progress);
    Ok(table)
}

/// Words of the large get `tcc tune` times: 8 MiB (larger than most caches),
/// or the largest measured message if smaller.
fn get_words(opts: &tcc_runtime::tune::TuneOptions) -> usize {
    let largest = opts.sizes.iter().copied().max().unwrap_or(0) as usize / 8;
    largest.clamp(1024, 1 << 20)
}

/// The α-β-γ calibration of tiled runs: α and β fitted to the all-to-all of the
/// back end tiled runs exchange with, and the tile kernel's rates (measured by
/// the caller: with `ranks` threads at once, and alone). `None` when the
/// all-to-all was not measured at two sizes.
fn calibration(
    ms: &[tcc_runtime::tune::Measurement],
    backend: tcc_runtime::comm::Backend,
    ranks: usize,
    (kernels, kernels_alone): (Vec<KernelRate>, Vec<KernelRate>),
    gets: Option<(f64, f64)>,
    ((touch_per_byte, touch_alone_per_byte), (private_touch_per_byte, private_touch_alone_per_byte)): (
        (f64, f64),
        (f64, f64),
    ),
    progress: bool,
) -> Option<tcc_runtime::tune::Calibration> {
    let (alpha, beta) = tcc_runtime::tune::fit_alpha_beta(ms, backend)?;
    if progress {
        eprintln!("tune: all-to-all ({backend}): alpha {alpha:.2e} s, beta {beta:.2e} s/byte");
        for (k, a) in kernels.iter().zip(&kernels_alone) {
            eprintln!(
                "tune: tile kernel {:>3}x{:<3}x{:>2}: {:.2} GFLOP/s per thread with {ranks} at once, {:.2} alone",
                k.m,
                k.n,
                k.k,
                k.flops_per_s / 1e9,
                a.flops_per_s / 1e9
            );
        }
    }
    // Only where the rates alone were measured (rank 0 under MPI: the others wait).
    let (call_overhead, kernels_exec) = if kernels_alone.is_empty() {
        (0.0, Vec::new())
    } else {
        crate::tiled::model::measure_executor(&kernels_alone).unwrap_or((0.0, Vec::new()))
    };
    if progress {
        eprintln!(
            "tune: tiled executor: {:.2e} s per kernel call around the kernel; {} shapes of calls timed through it",
            call_overhead,
            kernels_exec.len()
        );
    }
    let (get_alpha, get_beta) = gets.unwrap_or((0.0, 0.0));
    if progress && gets.is_some() {
        eprintln!("tune: one-sided gets ({backend}): alpha {get_alpha:.2e} s, beta {get_beta:.2e} s/byte");
    }
    if progress {
        eprintln!(
            "tune: fresh tile memory first written: {touch_per_byte:.2e} s/byte every rank at once ({:.2} GB/s per \
             rank), {touch_alone_per_byte:.2e} alone ({:.2} GB/s)",
            1e-9 / touch_per_byte.max(1e-15),
            1e-9 / touch_alone_per_byte.max(1e-15)
        );
        eprintln!(
            "tune: fresh private memory first written: {private_touch_per_byte:.2e} s/byte every rank at once ({:.2} \
             GB/s per rank), {private_touch_alone_per_byte:.2e} alone ({:.2} GB/s)",
            1e-9 / private_touch_per_byte.max(1e-15),
            1e-9 / private_touch_alone_per_byte.max(1e-15)
        );
    }
    Some(tcc_runtime::tune::Calibration {
        backend,
        ranks,
        alpha,
        beta,
        kernels,
        kernels_alone,
        call_overhead,
        kernels_exec,
        get_alpha,
        get_beta,
        touch_per_byte,
        touch_alone_per_byte,
        private_touch_per_byte,
        private_touch_alone_per_byte,
    })
}

/// Tile kernel rates with `ranks` threads at once, then alone (empty lists when
/// this CPU has no tile kernel).
fn kernel_rates(ranks: usize) -> (Vec<KernelRate>, Vec<KernelRate>) {
    use crate::tiled::model::measure_kernel_rates;
    (measure_kernel_rates(ranks).unwrap_or_default(), measure_kernel_rates(1).unwrap_or_default())
}

/// `mpirun -np N tcc tune --backend mpi`: the table on rank 0 (`None` elsewhere).
#[cfg(feature = "mpi")]
pub fn tune_mpi(opts: &tcc_runtime::tune::TuneOptions, progress: bool) -> Option<TuningTable> {
    use tcc_runtime::comm::mpi::MpiWorld;
    let world = MpiWorld::init()?;
    let comms: Vec<Box<dyn Communicator>> = World::Mpi.backends().iter().map(|&b| world.comm(b)).collect();
    let refs: Vec<&dyn Communicator> = comms.iter().map(|c| c.as_ref()).collect();
    let ms = tcc_runtime::tune::measure(&refs, opts, &mut |m| {
        if progress {
            eprintln!("tune: {:<15} {:>10} B  {:<8} {:.3e} s", m.op.name(), m.bytes, m.backend.name(), m.seconds)
        }
    });
    let mut t = tcc_runtime::tune::table_from(World::Mpi, world.size(), &ms);
    // Every rank measures the tile kernel at once (as they compute in a run),
    // then rank 0 alone while the others wait.
    let comm = world.comm(tcc_runtime::comm::Backend::Mpi);
    comm.barrier();
    let busy = crate::tiled::model::measure_kernel_rates(1).unwrap_or_default();
    comm.barrier();
    let alone =
        if world.rank() == 0 { crate::tiled::model::measure_kernel_rates(1).unwrap_or_default() } else { Vec::new() };
    comm.barrier();
    let gets = tcc_runtime::tune::measure_gets(comm.as_ref(), get_words(opts));
    // Window memory (the tiles of ranks), then private (one process's tensors).
    let touch = tcc_runtime::tune::measure_touch(comm.as_ref(), 4 * get_words(opts), false);
    let private = tcc_runtime::tune::measure_touch(comm.as_ref(), 4 * get_words(opts), true);
    drop(comm);
    let p = world.size();
    t.calibration = calibration(
        &ms,
        tcc_runtime::comm::Backend::Mpi,
        p,
        (busy, alone),
        gets,
        (touch, private),
        progress && world.rank() == 0,
    );
    drop(refs);
    drop(comms);
    (world.rank() == 0).then_some(t)
}

/// Where `tcc run` reads its tuning table: `--tuning FILE`, else the default path
/// if the file exists, else `None` (built-in choices).
pub fn tuning_path(path: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    match path {
        Some(p) => Some(p.to_path_buf()),
        None => tcc_runtime::tune::default_path().filter(|p| p.exists()),
    }
}

/// The tuning table for `tcc run` (see [`tuning_path`]).
pub fn read_tuning(path: Option<&std::path::Path>) -> Result<Option<TuningTable>, String> {
    match tuning_path(path) {
        Some(p) => TuningTable::read(&p).map(Some).map_err(|e| e.0),
        None => Ok(None),
    }
}

/// The largest message `tcc tune --max-bytes` measures: every rank holds two
/// buffers of this size, and messages in flight copy them.
pub const MAX_TUNE_BYTES: u64 = 1 << 30;
const MAX_TUNE_BYTES_TEXT: &str = "1GiB";

/// `tcc tune`: measures (in-process ranks, or this MPI job) and writes the table to
/// `out` (`-`: stdout; default: [`tcc_runtime::tune::default_path`]). Returns a line
/// for stderr.
pub fn tune(ranks: usize, mpi: bool, max_bytes: u64, out: Option<&std::path::Path>) -> Result<String, CommandError> {
    if max_bytes > MAX_TUNE_BYTES {
        return Err(CommandError::new(
            "E0753",
            format!("--max-bytes {max_bytes} is larger than the largest message tcc tune measures, {MAX_TUNE_BYTES_TEXT}"),
            Some(format!(
                "every rank holds two buffers of the largest size; use --max-bytes {MAX_TUNE_BYTES_TEXT} or less (larger messages use the table's last entry)"
            )),
        ));
    }
    let opts =
        tcc_runtime::tune::TuneOptions { sizes: tcc_runtime::tune::sizes_up_to(max_bytes), ..Default::default() };
    let e0723 = |m: String| CommandError::new("E0723", m, None);
    let table = if mpi {
        #[cfg(feature = "mpi")]
        {
            match tune_mpi(&opts, true) {
                Some(t) => t,
                None => return Ok(String::new()), // not rank 0
            }
        }
        #[cfg(not(feature = "mpi"))]
        return Err(e0723("this tcc was built without MPI support (rebuild with `--features mpi`)".into()));
    } else {
        tune_threads(ranks, &opts, true)?
    };
    let text = table.to_toml();
    let path = match out {
        Some(p) if p.as_os_str() == "-" => {
            print!("{text}");
            return Ok(String::new());
        }
        Some(p) => p.to_path_buf(),
        None => tcc_runtime::tune::default_path().ok_or_else(|| e0723("no home directory: pass --out FILE".into()))?,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| e0723(format!("cannot create `{}`: {e}", dir.display())))?;
    }
    std::fs::write(&path, text).map_err(|e| e0723(format!("cannot write `{}`: {e}", path.display())))?;
    Ok(format!("tune: wrote {}", path.display()))
}
