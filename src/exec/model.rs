//! Executing a model layer the way a model plan says: each statement computes the
//! block of its result along one split dimension (the sequence or the heads for
//! Ulysses, the token groups or the experts for expert parallelism), and a tensor
//! whose split differs from what the next statement needs is moved by an
//! all-to-all. Blocks are computed with the same HIR statements as the interpreter
//! ([`crate::exec::distributed::eval_tile`]), so results equal the interpreter's.
//!
//! The schedule is static, so the words each rank sends are predicted before the
//! run ([`predicted_words`]) and compared with the communicator's counters.

use crate::error::CommandError;
use crate::interp;
use crate::plan::model::analysis::{attention_region, expert_region, BATCH_NAMES, EXPERT_NAMES, HEAD_NAMES, SEQ_NAMES};
use crate::plan::model::CliArgs;
use crate::sema::hir::{Expr, Factor, Hir, IndexId, ModelId, RangeId, Role, TensorId, UnitId};
use crate::tensor::Dense;
use std::collections::HashMap;
use tcc_runtime::comm::Communicator;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Sequence-split outside attention, heads-split inside (DeepSpeed-Ulysses).
    Ulysses,
    /// Token-group-split outside the expert statements, experts-split inside.
    Expert,
}

impl Style {
    pub fn parse(s: &str) -> Result<Style, String> {
        match s {
            "ulysses" | "sequence" => Ok(Style::Ulysses),
            "expert" | "moe" => Ok(Style::Expert),
            _ => Err(format!("unknown execution style `{s}` (ulysses or expert)")),
        }
    }
}

/// A change of split dimension of a tensor (dimension positions).
#[derive(Debug, Clone, PartialEq)]
pub struct Redist {
    pub tensor: TensorId,
    pub from: usize,
    pub to: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExecStep {
    pub stmt: usize,
    /// The left-hand-side index whose range is split over the ranks.
    pub split: IndexId,
    /// Its position on the left-hand side.
    pub lhs_pos: usize,
    /// All-to-alls before the statement.
    pub redists: Vec<Redist>,
}

fn model_range(hir: &Hir, model: ModelId, names: &[&str]) -> Option<RangeId> {
    hir.models[model].dims.iter().copied().find(|&r| names.contains(&hir.ranges[r].name.as_str()))
}

fn refs(e: &Expr, out: &mut Vec<(TensorId, Vec<IndexId>)>) {
    for t in &e.terms {
        for f in &t.factors {
            match f {
                Factor::Tensor(r) => out.push((r.tensor, r.indices.clone())),
                // `sema` refuses affine subscripts inside models.
                Factor::Affine(_) => {}
                Factor::Call { arg, .. } | Factor::Sum { arg, .. } | Factor::Reduce { arg, .. } => refs(arg, out),
                Factor::Select { args, .. } => args.iter().for_each(|a| refs(&a.as_expr(), out)),
            }
        }
    }
}

/// The static schedule of a model's unit for `style`.
pub fn schedule(hir: &Hir, model: ModelId, style: Style) -> Result<Vec<ExecStep>, String> {
    let (outside, inside) = match style {
        Style::Ulysses => (
            model_range(hir, model, &SEQ_NAMES).ok_or("ulysses needs a `seq` dim")?,
            model_range(hir, model, &HEAD_NAMES)
                .ok_or("ulysses needs a `heads` dim (or `kvheads` with grouped-query attention)")?,
        ),
        Style::Expert => (
            model_range(hir, model, &BATCH_NAMES)
                .ok_or("expert execution needs a `groups` (or `batch`/`tokens`) dim")?,
            model_range(hir, model, &EXPERT_NAMES).ok_or("expert execution needs an `experts` dim")?,
        ),
    };
    let unit = &hir.units[hir.models[model].unit];
    let mut layout: HashMap<TensorId, usize> = HashMap::new();
    let mut steps = Vec::new();
    // The same regions the planner predicts from.
    let region = match style {
        Style::Ulysses => attention_region(hir, &unit.stmts),
        Style::Expert => expert_region(hir, &unit.stmts),
    };
    for (k, s) in unit.stmts.iter().enumerate() {
        let special = region[k];
        let r = if special { inside } else { outside };
        let Some(lhs_pos) = s.lhs.indices.iter().position(|&i| hir.indices[i].range == r) else {
            return Err(format!(
                "statement {} (`{}`) has no `{}` index on its left-hand side to split",
                k + 1,
                hir.tensors[s.lhs.tensor].name,
                hir.ranges[r].name
            ));
        };
        let x = s.lhs.indices[lhs_pos];
        let mut rs = Vec::new();
        refs(&s.rhs, &mut rs);
        let mut redists: Vec<Redist> = Vec::new();
        for (t, idx) in rs {
            let Some(&cur) = layout.get(&t) else { continue };
            let Some(need) = idx.iter().position(|&i| i == x) else {
                return Err(format!(
                    "statement {} reads `{}` without the split index: it would need an all-gather",
                    k + 1,
                    hir.tensors[t].name
                ));
            };
            if cur != need {
                if redists.iter().any(|d| d.tensor == t) {
                    return Err(format!("statement {} reads `{}` split two ways", k + 1, hir.tensors[t].name));
                }
                redists.push(Redist { tensor: t, from: cur, to: need });
                layout.insert(t, need);
            }
        }
        if s.accumulate && layout.get(&s.lhs.tensor).is_some_and(|&p| p != lhs_pos) {
            return Err(format!(
                "statement {} accumulates into `{}` split another way",
                k + 1,
                hir.tensors[s.lhs.tensor].name
            ));
        }
        layout.insert(s.lhs.tensor, lhs_pos);
        steps.push(ExecStep { stmt: k, split: x, lhs_pos, redists });
    }
    Ok(steps)
}

/// Rank `r`'s block of `0..n` over `p` ranks.
pub fn block(n: usize, p: usize, r: usize) -> std::ops::Range<usize> {
    r * n / p..(r + 1) * n / p
}

/// Words `rank` sends in the all-to-alls of `steps` on `p` ranks.
pub fn predicted_words(hir: &Hir, steps: &[ExecStep], p: usize, rank: usize) -> u64 {
    let mut w = 0u64;
    for d in steps.iter().flat_map(|s| &s.redists) {
        let shape = hir.shape(d.tensor);
        let rest: usize =
            shape.iter().enumerate().filter(|&(k, _)| k != d.from && k != d.to).map(|(_, &n)| n).product();
        let mine = block(shape[d.from], p, rank).len();
        for r in (0..p).filter(|&r| r != rank) {
            w += (mine * block(shape[d.to], p, r).len() * rest) as u64;
        }
    }
    w
}

/// Offsets (row-major in `shape`) of the region `ranges`, in row-major order.
fn region(shape: &[usize], ranges: &[std::ops::Range<usize>], mut f: impl FnMut(usize)) {
    let ext: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
    let strides = crate::tensor::strides(shape);
    crate::tensor::for_each_index(&ext, |idx| {
        f(idx.iter().enumerate().map(|(k, &i)| (i + ranges[k].start) * strides[k]).sum())
    });
}

fn ranges_with(shape: &[usize], fixed: &[(usize, std::ops::Range<usize>)]) -> Vec<std::ops::Range<usize>> {
    let mut v: Vec<std::ops::Range<usize>> = shape.iter().map(|&n| 0..n).collect();
    for (k, r) in fixed {
        v[*k] = r.clone();
    }
    v
}

fn redistribute(d: &mut Dense, from: usize, to: usize, comm: &dyn Communicator) {
    let (p, me) = (comm.size(), comm.rank());
    let shape = d.shape.clone();
    let mut send = Vec::new();
    let mut scounts = Vec::with_capacity(p);
    for r in 0..p {
        let before = send.len();
        region(&shape, &ranges_with(&shape, &[(from, block(shape[from], p, me)), (to, block(shape[to], p, r))]), |o| {
            send.push(d.data[o])
        });
        scounts.push(send.len() - before);
    }
    let rcounts: Vec<usize> = (0..p)
        .map(|r| {
            ranges_with(&shape, &[(from, block(shape[from], p, r)), (to, block(shape[to], p, me))])
                .iter()
                .map(|x| x.len())
                .product()
        })
        .collect();
    let mut recv = vec![0.0; rcounts.iter().sum()];
    comm.alltoallv(&send, &scounts, &mut recv, &rcounts);
    let mut k = 0;
    for r in 0..p {
        region(&shape, &ranges_with(&shape, &[(from, block(shape[from], p, r)), (to, block(shape[to], p, me))]), |o| {
            d.data[o] = recv[k];
            k += 1;
        });
    }
}

/// What a sharded run returns on every rank.
#[derive(Debug, Clone)]
pub struct ShardedRun {
    /// Every output, whole (all-gathered after the layer; not counted).
    pub outputs: HashMap<TensorId, Dense>,
    /// Words this rank sent in the layer's all-to-alls (communicator counters).
    pub words_sent: u64,
}

/// Runs the model's unit on this rank following `steps`; `inputs` are whole (each
/// rank reads the blocks it needs).
pub fn run_sharded(
    hir: &Hir,
    model: ModelId,
    steps: &[ExecStep],
    inputs: &HashMap<TensorId, Dense>,
    comm: &dyn Communicator,
) -> Result<ShardedRun, String> {
    let (p, me) = (comm.size(), comm.rank());
    let unit: UnitId = hir.models[model].unit;
    let stmts = &hir.units[unit].stmts;
    let mut values = inputs.clone();
    let mut layout: HashMap<TensorId, usize> = HashMap::new();
    let w0 = comm.stats().words_sent;
    for st in steps {
        for d in &st.redists {
            let v = values.get_mut(&d.tensor).expect("a split tensor has a value");
            redistribute(v, d.from, d.to, comm);
            layout.insert(d.tensor, d.to);
        }
        let s = &stmts[st.stmt];
        let n = hir.index_size(st.split);
        let blk = block(n, p, me);
        let tile =
            super::distributed::eval_tile(hir, s, Some(st.split), blk.clone(), &mut values).map_err(|e| e.message)?;
        let target = s.lhs.tensor;
        let shape = hir.shape(target);
        let dst = match values.entry(target) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Dense::zeros("a result", shape.clone()).map_err(|e| e.to_string())?)
            }
        };
        let mut k = 0;
        region(&shape, &ranges_with(&shape, &[(st.lhs_pos, blk)]), |o| {
            if s.accumulate {
                dst.data[o] += tile[k];
            } else {
                dst.data[o] = tile[k];
            }
            k += 1;
        });
        layout.insert(target, st.lhs_pos);
    }
    let words_sent = comm.stats().words_sent - w0;
    // Assemble the outputs everywhere.
    let mut outputs = HashMap::new();
    for t in hir.unit_outputs(unit).into_iter().filter(|&t| hir.tensors[t].role == Role::Output) {
        let mut d = values.remove(&t).expect("an output was written");
        if let Some(&pos) = layout.get(&t) {
            let shape = d.shape.clone();
            let counts: Vec<usize> = (0..p)
                .map(|r| ranges_with(&shape, &[(pos, block(shape[pos], p, r))]).iter().map(|x| x.len()).product())
                .collect();
            let mut mine = Vec::new();
            region(&shape, &ranges_with(&shape, &[(pos, block(shape[pos], p, me))]), |o| mine.push(d.data[o]));
            let mut all = vec![0.0; counts.iter().sum()];
            comm.allgatherv(&mine, &counts, &mut all);
            let mut k = 0;
            for r in 0..p {
                region(&shape, &ranges_with(&shape, &[(pos, block(shape[pos], p, r))]), |o| {
                    d.data[o] = all[k];
                    k += 1;
                });
            }
        }
        outputs.insert(t, d);
    }
    Ok(ShardedRun { outputs, words_sent })
}

/// Largest relative difference (to the largest magnitude of each output) between a
/// sharded run's outputs and the interpreter's ([`crate::run::compare::compare`]);
/// infinite if an output is missing or has another size.
pub fn max_rel_diff(got: &HashMap<TensorId, Dense>, want: &HashMap<TensorId, Dense>) -> f64 {
    crate::run::compare::compare(got, want, f64::INFINITY, |_| String::new()).unwrap_or(f64::INFINITY)
}

/// `tcc plan-model --execute STYLE`: runs the model on this rank of `comm` with
/// inputs from `seed`, and returns (on rank 0) a report line per rank plus the
/// comparison with the interpreter; `Err` if results or words disagree.
pub fn execute_report(
    hir: &Hir,
    model: ModelId,
    style: Style,
    seed: u64,
    comm: &dyn Communicator,
) -> Result<String, String> {
    let steps = schedule(hir, model, style)?;
    let unit = hir.models[model].unit;
    let inputs = interp::random_inputs(hir, unit, seed).map_err(|e| e.to_string())?;
    let run = run_sharded(hir, model, &steps, &inputs, comm)?;
    let p = comm.size();
    let mut all = vec![0.0; p];
    comm.allgather(&[run.words_sent as f64], &mut all);
    if comm.rank() != 0 {
        return Ok(String::new());
    }
    let want = interp::run_unit(hir, unit, &inputs).map_err(|e| e.to_string())?;
    let rel = max_rel_diff(&run.outputs, &want);
    let name = &hir.models[model].name;
    let mut s = format!(
        "execute {name} ({style:?}) on {p} ranks: {} statements, {} all-to-alls\n",
        steps.len(),
        steps.iter().map(|s| s.redists.len()).sum::<usize>()
    );
    for st in &steps {
        for d in &st.redists {
            let t = &hir.tensors[d.tensor];
            let dims: Vec<&str> = t.dims.iter().map(|&r| hir.ranges[r].name.as_str()).collect();
            s.push_str(&format!(
                "  before statement {}: all-to-all {} split on {} → on {}\n",
                st.stmt + 1,
                t.name,
                dims[d.from],
                dims[d.to]
            ));
        }
    }
    let mut ok = rel <= 1e-12;
    for (r, &m) in all.iter().enumerate() {
        let pred = predicted_words(hir, &steps, p, r);
        ok &= m as u64 == pred;
        s.push_str(&format!(
            "  rank {r}: all-to-all words sent {} (predicted {pred}){}\n",
            m as u64,
            if m as u64 == pred { "" } else { "  MISMATCH" }
        ));
    }
    s.push_str(&format!("  max relative difference to the interpreter: {rel:.3e}\n"));
    if ok {
        Ok(s)
    } else {
        Err(s)
    }
}

/// `--execute STYLE --ranks N`: in-process ranks (threads back end).
pub fn execute_threads(
    hir: &Hir,
    model: ModelId,
    style: Style,
    seed: u64,
    ranks: usize,
) -> Result<String, CommandError> {
    super::launch::check_ranks(ranks)?;
    execute_ranks(hir, model, style, seed, ranks, false)
}

/// `mpirun -np N tcc plan-model --execute STYLE --backend mpi`: this process is one
/// rank (MPI's own collectives); rank 0 returns the report, others an empty string.
#[cfg(feature = "mpi")]
pub fn execute_mpi(hir: &Hir, model: ModelId, style: Style, seed: u64) -> Result<String, CommandError> {
    execute_ranks(hir, model, style, seed, 1, true)
}

/// Runs [`execute_report`] on the ranks of [`super::launch::launch`]; a rank's
/// error is returned, not an abort.
fn execute_ranks(
    hir: &Hir,
    model: ModelId,
    style: Style,
    seed: u64,
    ranks: usize,
    mpi: bool,
) -> Result<String, CommandError> {
    let backend = if mpi { tcc_runtime::comm::Backend::Mpi } else { tcc_runtime::comm::Backend::Threads };
    let r = super::launch::launch(
        ranks,
        mpi,
        |make| make(backend),
        |_| Ok(()),
        super::launch::OnError::Return,
        |comm| execute_report(hir, model, style, seed, comm).map_err(|m| CommandError::new("E0814", m, None)),
    );
    r.map(Option::unwrap_or_default)
}

#[cfg(not(feature = "mpi"))]
pub fn execute_mpi(_hir: &Hir, _model: ModelId, _style: Style, _seed: u64) -> Result<String, CommandError> {
    Err(CommandError::new("E0814", "this tcc was built without MPI support (rebuild with `--features mpi`)", None))
}

/// `tcc plan-model --execute STYLE`, whole: the report to print, or an error.
pub fn cli(hir: &Hir, a: &CliArgs) -> Result<String, CommandError> {
    let err = |code, message: String, hint: Option<&str>| CommandError { code, message, hint: hint.map(String::from) };
    crate::plan::model::check_counts(a)?;
    crate::plan::model::parse_dims(&a.dims)?;
    let style = a.execute.as_deref().ok_or_else(|| err("E0813", "no --execute style".into(), None))?;
    let style = Style::parse(style).map_err(|m| err("E0813", m, None))?;
    let id = match &a.model {
        None if hir.models.len() == 1 => ModelId::new(0),
        None if hir.models.is_empty() => {
            return Err(err("E0810", "the file has no `model` block to execute".into(), None));
        }
        None => return Err(err("E0813", "--execute needs --model NAME when the file has several models".into(), None)),
        Some(n) => {
            hir.models.position(|m| &m.name == n).ok_or_else(|| err("E0702", format!("no model named `{n}`"), None))?
        }
    };
    let r = if a.mpi {
        execute_mpi(hir, id, style, a.seed)
    } else {
        execute_threads(hir, id, style, a.seed, a.ranks.unwrap_or(2))
    };
    r.map_err(|mut e| {
        if e.code == "E0814" && e.hint.is_none() {
            // E0814 is both a layer the style cannot split (the message says
            // which dim or statement) and a run that disagrees.
            let split = e.message.contains("needs") || e.message.contains("statement");
            e.hint = Some(if split {
                "the layer cannot be split this way: name its dims as the planner reads them (book/src/models.md)"
                    .into()
            } else {
                "the sharded run disagrees with the interpreter or with the predicted words".into()
            });
        }
        e
    })
}
