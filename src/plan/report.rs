//! Text, JSON and Graphviz renderings of plans.

use std::fmt::Write;

use super::network::fmt_time;
use super::{Layout, Plan, PlanStep};

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

fn grid_text(s: &PlanStep) -> String {
    if s.grid.is_empty() {
        return "1 rank (no grid)".into();
    }
    let dims: Vec<String> = s.grid.iter().map(|g| g.to_string()).collect();
    let map: Vec<String> = s
        .mapping
        .iter()
        .enumerate()
        .map(|(g, m)| match &m.index {
            Some(i) => format!("g{g}={i} ({})", m.class),
            None => format!("g{g}=idle"),
        })
        .collect();
    format!("{}: {}", dims.join("x"), map.join(", "))
}

fn layout_text(l: &Layout, names: &[String]) -> String {
    l.describe(names)
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
    for (n, l) in &p.initial {
        let _ = writeln!(s, "  input {n} starts as {}", l.describe(&[]));
    }
    for (k, st) in p.steps.iter().enumerate() {
        let _ = writeln!(s, "step {} (stmt {}, term {}): {}", k + 1, st.stmt, st.term, st.text);
        let _ = writeln!(s, "  grid {}", grid_text(st));
        for o in std::iter::once(&st.a).chain(st.b.as_ref()) {
            if o.opaque {
                let _ = writeln!(s, "  {:<18} opaque: computed in place", o.name);
            } else {
                let _ = writeln!(
                    s,
                    "  {:<18} stationary {}  →  computes on {}",
                    o.name,
                    layout_text(&o.stationary, &o.indices),
                    layout_text(&o.gathered, &o.indices)
                );
            }
        }
        let _ = writeln!(
            s,
            "  {:<18} computed as {}  →  stored as {}",
            st.c.name,
            layout_text(&st.c.stationary, &st.c.indices),
            layout_text(&st.c.gathered, &st.c.indices)
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
                op.tensor,
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
    serde_json::json!({ "plans": plans, "sweep": sweep })
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
    for (k, st) in p.steps.iter().enumerate() {
        let id = format!("s{}", k + 1);
        let label = format!(
            "step {}: {}\\ngrid {}\\nwords/rank {}  bound {}  ratio {}\\ntime {}",
            k + 1,
            esc(&st.text),
            esc(&grid_text(st)),
            num(st.cost.words_max as f64),
            num(st.bound.words),
            ratio(st.ratio),
            fmt_time(st.cost.time)
        );
        let _ = writeln!(s, "  {id} [shape=ellipse, label=\"{label}\"];");
        for o in std::iter::once(&st.a).chain(st.b.as_ref()) {
            let key = o.name.split('[').next().unwrap_or(&o.name).to_string();
            let src = match producer.get(&key) {
                Some(src) => src.clone(),
                None => {
                    inputs += 1;
                    let nid = format!("t{inputs}");
                    let shape = if o.opaque { "diamond" } else { "box" };
                    let _ = writeln!(
                        s,
                        "  {nid} [shape={shape}, label=\"{}\\n{}\"];",
                        esc(&o.name),
                        esc(&o.stationary.describe(&o.indices))
                    );
                    producer.insert(key.clone(), nid.clone());
                    nid
                }
            };
            let gathered = st.ops.iter().any(|op| op.kind == super::OpKind::AllGather && op.tensor == key);
            let moved = st.ops.iter().any(|op| op.kind == super::OpKind::AllToAll && op.tensor == key);
            let elabel = match (moved, gathered) {
                (true, true) => "all-to-all + all-gather",
                (true, false) => "all-to-all",
                (false, true) => "all-gather",
                (false, false) => "",
            };
            let _ = writeln!(s, "  {src} -> {id} [label=\"{elabel}\"];");
        }
        let ckey = st.c.name.split('[').next().unwrap_or(&st.c.name).to_string();
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
