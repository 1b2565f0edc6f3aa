//! The one launcher of ranks: in-process threads (`--ranks N`) or this process as
//! one rank of an MPI job (`--backend mpi`), for `tcc run --ranks`, `tcc run
//! --plan` and `tcc plan-model --execute`.

use crate::error::CommandError;
use tcc_runtime::comm::{Backend, Communicator};

/// What a rank whose body fails does.
pub enum OnError<'a> {
    /// Stops every rank: in-process ranks abort with this message (when there are
    /// several); an MPI rank prints the error and aborts the job (when there are
    /// several); a panic aborts the MPI job with code 2.
    Abort(&'a (dyn Fn(&CommandError) -> String + Sync)),
    /// Returns the error (rank 0's for in-process ranks).
    Return,
}

/// The most in-process ranks (`--ranks`): each is a thread of this process.
pub const MAX_RANKS: usize = tcc_runtime::comm::threads::MAX_RANKS;

/// Checks an in-process rank count (`--ranks N`) before anything is allocated for
/// it: E0720 for 0, E0750 above [`MAX_RANKS`].
pub fn check_ranks(ranks: usize) -> Result<(), CommandError> {
    if ranks == 0 {
        return Err(CommandError::new("E0720", "--ranks must be at least 1", None));
    }
    if ranks > MAX_RANKS {
        return Err(CommandError::new(
            "E0750",
            format!("--ranks {ranks} is more in-process ranks than the maximum, {MAX_RANKS}"),
            Some(format!(
                "in-process ranks are threads of one process; use at most {MAX_RANKS}, or run more ranks as MPI processes (`mpirun -np N tcc run --backend mpi`)"
            )),
        ));
    }
    Ok(())
}

/// The error of in-process ranks that failed: E0751 when they could not be
/// started (a rank's thread not created), else `code`.
pub fn rank_failure(f: &tcc_runtime::comm::threads::RankFailure, code: &'static str) -> CommandError {
    if f.not_started {
        CommandError::new(
            "E0751",
            f.to_string(),
            Some("a process or memory limit (`ulimit -u`, cgroups) stopped tcc from creating a thread per rank; use fewer --ranks or raise the limit".into()),
        )
    } else {
        CommandError::new(code, f.to_string(), None)
    }
}

/// Runs `f` on every rank with the communicator that `comm` builds from the rank's
/// back ends: `ranks` in-process threads, or (with `mpi`) this MPI process.
/// `precheck` (given the number of ranks) runs first, for errors every rank would
/// meet alike: under MPI only rank 0 reports it. Returns rank 0's result for
/// in-process ranks, this rank's under MPI (`None` where a precheck failed on
/// another rank than 0).
pub fn launch<T: Send>(
    ranks: usize,
    mpi: bool,
    comm: impl Fn(&dyn Fn(Backend) -> Box<dyn Communicator>) -> Box<dyn Communicator> + Sync,
    precheck: impl FnOnce(usize) -> Result<(), CommandError>,
    on_error: OnError<'_>,
    f: impl Fn(&dyn Communicator) -> Result<T, CommandError> + Sync,
) -> Result<Option<T>, CommandError> {
    if mpi {
        return launch_mpi(comm, precheck, on_error, f);
    }
    check_ranks(ranks)?;
    precheck(ranks)?;
    // The first rank error, kept whole (code and hint) for the report.
    let first: std::sync::Mutex<Option<(usize, CommandError)>> = std::sync::Mutex::new(None);
    let res = tcc_runtime::comm::threads::run(ranks, |rank| {
        let c = comm(&|b| rank.comm(b));
        let r = f(c.as_ref());
        if let (Err(e), OnError::Abort(message)) = (&r, &on_error) {
            if ranks > 1 {
                // Record and abort under one lock, so that the recorded error is
                // the one of the rank whose abort the runtime reports first
                // (`abort` unwinds with the guard held: the lock is poisoned,
                // later ranks skip recording, and the record is still read).
                let mut g = first.lock().unwrap_or_else(|p| p.into_inner());
                g.get_or_insert_with(|| (rank.rank(), e.clone()));
                rank.abort(&message(e));
            }
        }
        r
    });
    match res {
        Ok(mut v) => v.swap_remove(0).map(Some),
        Err(f) => match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some((r, e)) if !f.not_started && r == f.rank => {
                Err(CommandError { message: format!("rank {r}: {}", e.message), ..e })
            }
            _ => Err(rank_failure(&f, "E0720")),
        },
    }
}

#[cfg(feature = "mpi")]
fn launch_mpi<T>(
    comm: impl Fn(&dyn Fn(Backend) -> Box<dyn Communicator>) -> Box<dyn Communicator>,
    precheck: impl FnOnce(usize) -> Result<(), CommandError>,
    on_error: OnError<'_>,
    f: impl Fn(&dyn Communicator) -> Result<T, CommandError>,
) -> Result<Option<T>, CommandError> {
    use tcc_runtime::comm::mpi::{abort, MpiWorld};
    let world = MpiWorld::init().ok_or_else(|| CommandError::new("E0720", "MPI was already initialized", None))?;
    let size = world.size();
    if let Err(e) = precheck(size) {
        // Every rank fails alike here; rank 0 reports.
        if world.rank() == 0 {
            return Err(e);
        }
        return Ok(None);
    }
    let c = comm(&|b| world.comm(b));
    // Ranks that were started differently would plan differently and then hang
    // or compute a wrong answer: they compare what they were given first.
    let mine = fingerprint();
    let halves = [(mine >> 32) as f64, (mine & 0xffff_ffff) as f64];
    let mut all = vec![0.0; 2 * size];
    c.allgather(&halves, &mut all);
    if let Some(r) = all.chunks(2).position(|h| h != halves) {
        if world.rank() == 0 || r == 0 {
            // Rank 0 names the first rank unlike it; a rank unlike rank 0 names 0.
            return Err(disagreement(world.rank(), r));
        }
        return Ok(None);
    }
    if let OnError::Return = on_error {
        let r = f(c.as_ref());
        drop(c);
        drop(world);
        return r.map(Some);
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c.as_ref()))) {
        Ok(Ok(v)) => {
            drop(c);
            drop(world);
            Ok(Some(v))
        }
        Ok(Err(e)) => {
            if size > 1 {
                eprintln!("{e}");
                abort(1);
            }
            Err(e)
        }
        Err(_) => abort(2),
    }
}

/// E0763: rank `me` and rank `other` were started with different command lines,
/// input files, settings or tcc builds.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn disagreement(me: usize, other: usize) -> CommandError {
    CommandError::new(
        "E0763",
        format!(
            "MPI ranks {me} and {other} were not started alike: their command lines, input files, TCC_* settings, \
             tuning tables or tcc builds differ"
        ),
        Some(
            "every rank must run the same program on the same inputs (e.g. not `--seed $OMPI_COMM_WORLD_RANK`, \
             not node-local files that differ)"
                .into(),
        ),
    )
}

/// A hash of what decides a distributed run on this rank: tcc's version, the
/// command line, the contents of every file it names (`FILE` or `NAME=FILE`),
/// the `TCC_*` environment (but `TCC_LOG`), and the default tuning table. Equal
/// on every rank of a correctly started job.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn fingerprint() -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same in every process of one build.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    let file = |path: &std::path::Path, h: &mut std::collections::hash_map::DefaultHasher| {
        if path.is_file() {
            if let Ok(bytes) = std::fs::read(path) {
                bytes.hash(h);
            }
        }
    };
    for arg in std::env::args_os().skip(1) {
        arg.hash(&mut h);
        let text = arg.to_string_lossy();
        file(std::path::Path::new(&*text), &mut h);
        if let Some((_, path)) = text.split_once('=') {
            file(std::path::Path::new(path), &mut h);
        }
    }
    let mut vars: Vec<(String, String)> =
        std::env::vars().filter(|(k, _)| k.starts_with("TCC_") && k != "TCC_LOG").collect();
    vars.sort();
    vars.hash(&mut h);
    if let Some(p) = super::tuning_path(None) {
        file(&p, &mut h);
    }
    h.finish()
}

/// Without the `mpi` feature: a clear error.
#[cfg(not(feature = "mpi"))]
fn launch_mpi<T>(
    _comm: impl Fn(&dyn Fn(Backend) -> Box<dyn Communicator>) -> Box<dyn Communicator>,
    _precheck: impl FnOnce(usize) -> Result<(), CommandError>,
    _on_error: OnError<'_>,
    _f: impl Fn(&dyn Communicator) -> Result<T, CommandError>,
) -> Result<Option<T>, CommandError> {
    Err(CommandError::new(
        "E0721",
        "this tcc was built without MPI support",
        Some("rebuild with `cargo build --features mpi` (needs an MPI library and libclang)".into()),
    ))
}
