//! Sliced programs on ranks: `tcc run --ranks N --max-intermediate B` (or
//! `--mem-limit`, and `--backend mpi` under mpirun).
//!
//! Every rank JIT-compiles the program as `tcc run` does and runs it with a
//! [`SliceShare`] of its communicator installed: each sliced term runs only the
//! rank's block of its slices (on the rank's threads), then its target is made
//! whole on every rank by the runtime's collectives — an all-reduce of the partial
//! sums when a sliced index is summed, an all-gather of the ranks' slices when all
//! are kept (`tcc_runtime::slices`). Statements outside sliced terms run on every
//! rank, as the inputs are replicated; so a program must have a sliced term to run
//! this way (else every rank would compute everything: E0733).
//!
//! Ranks must compile the same slicing: the order search is the deterministic one
//! (exact search and seeded greedy restarts, `--search-time 0`), since a
//! time-budgeted search could differ between processes.

use crate::codegen::llvm::{jit_run, Options};
use crate::error::CommandError;
use crate::run::{run_report, RunOptions};
use crate::sema::hir::{Hir, UnitId};
use tcc_runtime::comm::Communicator;
use tcc_runtime::slices::{with_share, SliceShare};

/// The pipeline options `codegen` compiles with (as `codegen::llvm::compile`).
fn pipeline_options(codegen: &Options) -> crate::pipeline::PipelineOptions {
    let mut p = crate::pipeline::PipelineOptions::with_mem_limit(Some(
        codegen.mem_limit.unwrap_or(crate::codegen::llvm::DEFAULT_MEM_LIMIT),
    ));
    p.fusion.mode = codegen.fuse;
    p.fusion.rates = codegen.rates;
    p.order = codegen.order.clone();
    p
}

/// `codegen` made reproducible across processes (see the module documentation).
pub fn deterministic(codegen: &Options) -> Options {
    let mut c = codegen.clone();
    c.order.search_time = 0.0;
    c.order.progress = false;
    c
}

/// E0733 unless one of the units run has a sliced term (the units, prepared).
pub fn check_sliced(hir: &Hir, ropts: &RunOptions, codegen: &Options) -> Result<(), CommandError> {
    let units = hir.select_units(ropts.program.as_deref())?;
    let prepared = crate::pipeline::prepare(hir, &pipeline_options(codegen));
    if units.iter().any(|&u| !crate::lir::slice::groups(&prepared, u).is_empty()) {
        return Ok(());
    }
    Err(CommandError::new(
        "E0733",
        "nothing is sliced: a run on ranks with --max-intermediate or --mem-limit splits the slices of sliced terms \
         among the ranks, and at this limit no term needs slicing (every rank would compute everything)",
        Some(
            "give a smaller --max-intermediate, or run without it: `--ranks N` alone distributes the statements by tiles"
                .into(),
        ),
    ))
}

/// What one rank did: slices run and sliced terms combined.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlicedStats {
    pub slices: u64,
    pub terms: u64,
}

/// One rank's run: the report (as `tcc run`'s, without its timing line) into `buf`.
pub fn rank_run(
    hir: &Hir,
    ropts: &RunOptions,
    codegen: &Options,
    comm: &dyn Communicator,
    buf: &mut Vec<u8>,
) -> Result<SlicedStats, CommandError> {
    let share = SliceShare::new(comm);
    let p = comm.size();
    run_report(hir, ropts, buf, &mut |u: UnitId, inputs| {
        let r = with_share(&share, || jit_run(hir, u, inputs, codegen, 1)).map_err(|e| {
            if e.is_out_of_memory() {
                crate::run::out_of_memory(e.0)
            } else {
                CommandError::new("E0712", e.0, None)
            }
        })?;
        let extra = r.slicing.iter().map(|s| format!("sliced: {s}; slices split among {p} ranks")).collect();
        Ok((r.outputs, extra))
    })?;
    Ok(SlicedStats { slices: share.slices(), terms: share.terms() })
}
