//! Streams for independent steps: which CUDA stream each top-level step of a
//! unit runs on, and which earlier steps it must wait for.
//!
//! Steps of one statement chain through buffers, but the statements of a
//! program (the terms of a CC residual, the projections of an attention
//! block) are often independent: on one stream each small kernel runs alone
//! and leaves most of the GPU idle. Two steps conflict when one writes a
//! buffer the other reads or writes; a step runs on the stream of its latest
//! conflicting predecessor (else on the next stream in turn) and waits,
//! through an event, for the latest conflicting step of each other stream.
//! Streams run their steps in order, so every conflicting pair runs in program
//! order. A step large enough to fill the GPU alone ([`is_large`]) runs alone:
//! on stream 0, after every earlier step and before every later one, as if it
//! conflicted with all of them.
//!
//! The schedule is computed when a plan runs (not stored in it), so a plan
//! whose alternatives a runner forces ([`GpuPlan::force`]) is scheduled on the
//! steps that actually run.

use super::*;
use std::collections::BTreeSet;

/// Streams a run uses unless told otherwise (`--streams`).
pub const DEFAULT_STREAMS: usize = 4;

/// Where one top-level step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    /// Index of the stream, below the schedule's stream count.
    pub stream: usize,
    /// Earlier steps (indices) whose events this step's stream waits for first.
    pub waits: Vec<usize>,
    /// Whether an event is recorded after this step (a later step waits for it).
    pub record: bool,
}

/// The buffers a step reads and those it writes (the chosen alternatives').
#[derive(Debug, Default, Clone)]
pub struct Access {
    pub reads: BTreeSet<usize>,
    pub writes: BTreeSet<usize>,
}

impl Access {
    /// Of `step` (and everything inside it).
    pub fn of(step: &Step) -> Access {
        let mut a = Access::default();
        a.add(step);
        a
    }

    fn add(&mut self, step: &Step) {
        match step {
            Step::Loop { body, .. } => body.iter().for_each(|s| self.add(s)),
            Step::Choice(c) => c.steps().iter().for_each(|s| self.add(s)),
            Step::Memset { buf } => {
                self.writes.insert(*buf);
            }
            Step::Launch { args, .. } => {
                // The output first, then the operands.
                if let Some((out, ops)) = args.split_first() {
                    self.writes.insert(out.buf);
                    self.reads.extend(ops.iter().map(|a| a.buf));
                }
            }
            Step::Gemm(g) => {
                self.writes.insert(g.c.buf);
                self.reads.extend([g.a.buf, g.b.buf]);
            }
        }
    }

    /// Whether the two steps must run in program order.
    pub fn conflicts(&self, other: &Access) -> bool {
        let meets = |x: &BTreeSet<usize>, y: &BTreeSet<usize>| x.intersection(y).next().is_some();
        meets(&self.writes, &other.writes) || meets(&self.writes, &other.reads) || meets(&self.reads, &other.writes)
    }
}

/// Predicted seconds ([`cost`]) from which a step alone keeps the GPU busy.
/// Such a step runs alone: beside others it only competes for bandwidth and
/// multiprocessors. Measured on the H100, CCSD at o = 32, v = 128 ran 5 %
/// slower with its large steps spread over 4 streams and still 9 % slower when
/// only independent large steps stayed on stream 0 (large steps that followed
/// a small one onto another stream still overlapped); the small programs ran
/// 10–22 % faster.
pub const LARGE_STEP_S: f64 = 50e-6;

/// Whether `step` of `up` is predicted to take at least [`LARGE_STEP_S`].
pub fn is_large(up: &UnitPlan, step: &Step, kernels: &[Kernel]) -> bool {
    cost::steps_time(std::slice::from_ref(step), kernels, &up.buffers) >= LARGE_STEP_S
}

/// The schedule of unit `up`'s steps on at most `streams` streams (one per
/// step, in order). With one stream, every step on stream 0 and no events.
pub fn schedule(up: &UnitPlan, kernels: &[Kernel], streams: usize) -> Vec<Scheduled> {
    let steps = &up.steps;
    let streams = streams.max(1);
    let access: Vec<Access> = steps.iter().map(Access::of).collect();
    // With one stream nothing overlaps, so there is nothing to keep apart.
    let large: Vec<bool> = steps.iter().map(|s| streams > 1 && is_large(up, s, kernels)).collect();
    let mut out: Vec<Scheduled> = Vec::with_capacity(steps.len());
    let mut next_stream = 0;
    for j in 0..steps.len() {
        let conflict: Vec<bool> = (0..j).map(|i| access[i].conflicts(&access[j])).collect();
        // What must finish first: the conflicting steps, and every step
        // before a large one and every large one before this.
        let deps: Vec<usize> = (0..j).filter(|&i| conflict[i] || large[i] || large[j]).collect();
        // A step follows its data, not a large step it merely waits for, so
        // independent small steps after a large one spread again.
        let stream = match (0..j).rev().find(|&i| conflict[i]) {
            _ if large[j] => 0,
            Some(d) => out[d].stream,
            None => {
                let s = next_stream;
                next_stream = (next_stream + 1) % streams;
                s
            }
        };
        // The latest conflicting step of each other stream.
        let waits: Vec<usize> = (0..streams)
            .filter(|&t| t != stream)
            .filter_map(|t| deps.iter().rev().find(|&&i| out[i].stream == t).copied())
            .collect();
        for &w in &waits {
            out[w].record = true;
        }
        out.push(Scheduled { stream, waits, record: false });
    }
    out
}

/// Streams a schedule uses.
pub fn streams_used(s: &[Scheduled]) -> usize {
    s.iter().map(|x| x.stream + 1).max().unwrap_or(0)
}
