//! Text, JSON and Graphviz renderings of plans.

use std::fmt::Write;

use super::network::fmt_time;
use super::{CommOp, GridDim, Layout, OperandPlan, Plan, PlanNames, PlanStep};
use serde_json::{json, Value};

/// `123456`, `1.23e9`.
pub fn num(x: f64) -> String {
    if x.is_finite() && x.abs() < 1e6 && x.fract() == 0.0 {
        format!("{x:.0}")
    } else if x.is_finite() && x.abs() < 1e6 {
        format!("{x:.1}")
    } else {
        format!("{x:.3e}")
    }
}

pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut k = 0;
    while v >= 1024.0 && k + 1 < UNITS.len() {
        v /= 1024.0;
        k += 1;
    }
    if k == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[k])
    }
}

fn ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.3}")).unwrap_or_else(|| "n/a (bound 0)".into())
}

fn grid_text(names: &PlanNames, s: &PlanStep) -> String {
    if s.grid.is_empty() {
        return "1 rank (no grid)".into();
    }
    let dims: Vec<String> = s.grid.iter().map(|g| g.to_string()).collect();
    let map: Vec<String> = s
        .mapping
        .iter()
        .enumerate()
        .map(|(g, m)| match m.index {
            Some(i) => format!("g{g}={} ({})", names.index_name(i), m.class.name()),
            None => format!("g{g}=idle"),
        })
        .collect();
    format!("{}: {}", dims.join("x"), map.join(", "))
}

fn layout_text(names: &PlanNames, l: &Layout, o: &OperandPlan) -> String {
    l.describe(&names.indices(&o.indices))
}

/// The readable report of one plan.
pub fn plan_text(p: &Plan) -> String {
    let mut s = String::new();
    let mem = p.mem_per_rank.map(bytes).unwrap_or_else(|| "unlimited".into());
    let _ = writeln!(
        s,
        "plan `{}` on {} ranks ({:?}) — {}; memory per rank {}",
        p.unit,
        p.procs,
        p.strategy,
        p.network.describe(),
        mem
    );
    let _ = writeln!(
        s,
        "  (words are array elements; \"words\" of a rank = received by gathers and all-to-alls + sent by reductions)"
    );
    let names = &p.names;
    for (n, l) in &p.initial {
        let _ = writeln!(s, "  input {} starts as {}", names.tensors[*n], l.describe(&[]));
    }
    for (k, st) in p.steps.iter().enumerate() {
        let _ = writeln!(s, "step {} (stmt {}, term {}): {}", k + 1, st.stmt, st.term, names.step_text(st));
        let _ = writeln!(s, "  grid {}", grid_text(names, st));
        for o in std::iter::once(&st.a).chain(st.b.as_ref()) {
            if o.opaque() {
                let _ = writeln!(s, "  {:<18} opaque: computed in place", names.operand(o));
            } else {
                let _ = writeln!(
                    s,
                    "  {:<18} stationary {}  →  computes on {}",
                    names.operand(o),
                    layout_text(names, &o.stationary, o),
                    layout_text(names, &o.gathered, o)
                );
            }
        }
        let _ = writeln!(
            s,
            "  {:<18} computed as {}  →  stored as {}",
            names.operand(&st.c),
            layout_text(names, &st.c.stationary, &st.c),
            layout_text(names, &st.c.gathered, &st.c)
        );
        for op in &st.ops {
            let along = if op.kind == super::OpKind::AllToAll {
                "all ranks".to_string()
            } else {
                format!("along {}", op.along.iter().map(|g| format!("g{g}")).collect::<Vec<_>>().join(","))
            };
            let panels = if op.panels > 1 { format!(" in {} panels", op.panels) } else { String::new() };
            let _ = writeln!(
                s,
                "    {:<6} {:<14} {:<14} {along}{panels}: recv {} sent {} words/rank (max), {} msgs, {}",
                format!("{:?}", op.phase).to_lowercase(),
                op.kind.name(),
                names.op_tensor(op),
                num(op.recv_max as f64),
                num(op.sent_max as f64),
                op.msgs_max,
                fmt_time(op.time)
            );
        }
        if st.ops.is_empty() {
            let _ = writeln!(s, "    no communication");
        }
        let c = &st.cost;
        let _ = writeln!(
            s,
            "  per rank (max): flops {}, words {} (step collectives {}), msgs {}, memory {}, time {} (compute {}, comm {})",
            num(c.flops_max),
            num(c.words_max as f64),
            num(c.step_words_max as f64),
            c.msgs_max,
            bytes(c.mem_bytes),
            fmt_time(c.time),
            fmt_time(c.time_compute),
            fmt_time(c.time_comm)
        );
        let b = &st.bound;
        let md = b.mem_dependent.map(num).unwrap_or_else(|| "—".into());
        let _ = writeln!(
            s,
            "  lower bound {} words/rank (memory-independent {} [{}], memory-dependent {}) → words/bound {}",
            num(b.words),
            num(b.mem_independent.max(0.0)),
            b.case,
            md,
            ratio(st.ratio)
        );
        for n in &st.notes {
            let _ = writeln!(s, "  note: {n}");
        }
    }
    let t = &p.totals;
    let _ = writeln!(
        s,
        "total: flops/rank {}, words/rank {} (step collectives {}), msgs {}, peak memory {}, time {}; Σ bounds {} → words/bound {}",
        num(t.flops),
        num(t.words_max as f64),
        num(t.step_words_max as f64),
        t.msgs_max,
        bytes(t.mem_peak_bytes),
        fmt_time(t.time),
        num(t.bound_words),
        ratio(t.ratio)
    );
    for n in &p.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// One line per plan: the sweep table.
pub fn sweep_text(plans: &[Plan]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "sweep:");
    let _ = writeln!(
        s,
        "  {:<16} {:>7} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12}",
        "unit", "P", "time", "flops/rank", "words/rank", "bound", "ratio", "memory"
    );
    for p in plans {
        let _ = writeln!(
            s,
            "  {:<16} {:>7} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12}",
            p.unit,
            p.procs,
            fmt_time(p.totals.time),
            num(p.totals.flops),
            num(p.totals.words_max as f64),
            num(p.totals.bound_words),
            p.totals.ratio.map(|r| format!("{r:.3}")).unwrap_or_else(|| "n/a".into()),
            bytes(p.totals.mem_peak_bytes)
        );
    }
    s
}

/// JSON: `{"plans": [...], "sweep": [...]}`.
pub fn plans_json(plans: &[Plan]) -> serde_json::Value {
    let sweep: Vec<serde_json::Value> = plans
        .iter()
        .map(|p| {
            serde_json::json!({"unit": p.unit, "procs": p.procs, "time": p.totals.time, "flops": p.totals.flops,
                "words_max": p.totals.words_max, "bound_words": p.totals.bound_words, "ratio": p.totals.ratio,
                "mem_peak_bytes": p.totals.mem_peak_bytes})
        })
        .collect();
    let plans: Vec<Value> = plans.iter().map(plan_json).collect();
    json!({ "plans": plans, "sweep": sweep })
}

/// One plan as JSON, tensors and indices by name (keys come out sorted).
fn plan_json(p: &Plan) -> Value {
    let n = &p.names;
    let mut v = serde_json::to_value(p).unwrap_or_default();
    v["initial"] = json!(p.initial.iter().map(|(t, l)| json!([n.tensors[*t], l])).collect::<Vec<_>>());
    v["steps"] = json!(p.steps.iter().map(|s| step_json(n, s)).collect::<Vec<_>>());
    v
}

fn step_json(n: &PlanNames, s: &PlanStep) -> Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    v["text"] = json!(n.step_text(s));
    v["mapping"] = json!(s.mapping.iter().map(|m| grid_dim_json(n, m)).collect::<Vec<_>>());
    v["a"] = operand_json(n, &s.a);
    v["b"] = s.b.as_ref().map(|b| operand_json(n, b)).unwrap_or(Value::Null);
    v["c"] = operand_json(n, &s.c);
    v["ops"] = json!(s.ops.iter().map(|o| op_json(n, o)).collect::<Vec<_>>());
    v
}

fn grid_dim_json(n: &PlanNames, m: &GridDim) -> Value {
    json!({"size": m.size, "index": m.index.map(|i| n.index_name(i)), "class": m.class.name()})
}

fn operand_json(n: &PlanNames, o: &OperandPlan) -> Value {
    json!({"name": n.operand(o), "indices": n.indices(&o.indices), "shape": o.shape,
        "stationary": o.stationary, "gathered": o.gathered, "opaque": o.opaque()})
}

fn op_json(n: &PlanNames, op: &CommOp) -> Value {
    let mut v = serde_json::to_value(op).unwrap_or_default();
    v["tensor"] = json!(n.op_tensor(op));
    v
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Graphviz: one digraph per plan; a box per input, an ellipse per step labelled
/// with its grid, mapping and costs, edges from producers to consumers.
pub fn plan_dot(p: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph \"{}\" {{", esc(&format!("plan_{}_P{}", p.unit, p.procs)));
    let _ = writeln!(s, "  rankdir=BT;");
    let _ = writeln!(s, "  node [fontname=\"monospace\", fontsize=10];");
    let _ = writeln!(
        s,
        "  label=\"{}\";",
        esc(&format!("{} on {} ranks, {} — time {}", p.unit, p.procs, p.network.spec, fmt_time(p.totals.time)))
    );
    let mut producer: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut inputs = 0;
    let names = &p.names;
    for (k, st) in p.steps.iter().enumerate() {
        let id = format!("s{}", k + 1);
        let label = format!(
            "step {}: {}\\ngrid {}\\nwords/rank {}  bound {}  ratio {}\\ntime {}",
            k + 1,
            esc(&names.step_text(st)),
            esc(&grid_text(names, st)),
            num(st.cost.words_max as f64),
            num(st.bound.words),
            ratio(st.ratio),
            fmt_time(st.cost.time)
        );
        let _ = writeln!(s, "  {id} [shape=ellipse, label=\"{label}\"];");
        for o in std::iter::once(&st.a).chain(st.b.as_ref()) {
            let name = names.operand(o);
            let key = name.split('[').next().unwrap_or(&name).to_string();
            let src = match producer.get(&key) {
                Some(src) => src.clone(),
                None => {
                    inputs += 1;
                    let nid = format!("t{inputs}");
                    let shape = if o.opaque() { "diamond" } else { "box" };
                    let _ = writeln!(
                        s,
                        "  {nid} [shape={shape}, label=\"{}\\n{}\"];",
                        esc(&name),
                        esc(&layout_text(names, &o.stationary, o))
                    );
                    producer.insert(key.clone(), nid.clone());
                    nid
                }
            };
            let gathered = st.ops.iter().any(|op| op.kind == super::OpKind::AllGather && names.op_tensor(op) == key);
            let moved = st.ops.iter().any(|op| op.kind == super::OpKind::AllToAll && names.op_tensor(op) == key);
            let elabel = match (moved, gathered) {
                (true, true) => "all-to-all + all-gather",
                (true, false) => "all-to-all",
                (false, true) => "all-gather",
                (false, false) => "",
            };
            let _ = writeln!(s, "  {src} -> {id} [label=\"{elabel}\"];");
        }
        let cname = names.operand(&st.c);
        let ckey = cname.split('[').next().unwrap_or(&cname).to_string();
        if st.accumulate {
            if let Some(prev) = producer.get(&ckey) {
                let _ = writeln!(s, "  {prev} -> {id} [style=dashed, label=\"+=\"];");
            }
        }
        producer.insert(ckey, id);
    }
    let _ = writeln!(s, "}}");
    s
}
