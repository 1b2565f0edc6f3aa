//! Large-network path benchmark driver: reads cases as JSON lines on stdin,
//! `{"id":..,"inputs":[[0,1],[1,2]],"output":[0,2],"sizes":[4,5,6],"search_time":1.0}`
//! (integer index ids), and prints per case tcc's greedy path (`--search-time 0`)
//! and hyper-optimized path (the given budget) as SSA pairs, with tcc's flops,
//! largest intermediate and search time; with `"max_intermediate": ELEMENTS`, also
//! the slicing of the hyper-optimized order which fits (sliced index ids, slice
//! count, one slice's path, the slicing's seconds), and with `"more_targets"` the
//! slicings of the same order to those sizes. Run by `bench/paths/large.py`.

use std::io::{BufRead, Write};
use std::time::Instant;

use tcc::tir::opmin::{optimize_path, Objective, Options, Path, Problem};
use tcc::tir::slice::slice_path;

#[derive(serde::Deserialize)]
struct Case {
    id: String,
    inputs: Vec<Vec<usize>>,
    output: Vec<usize>,
    sizes: Vec<usize>,
    search_time: f64,
    #[serde(default)]
    objective: Option<String>,
    /// Largest intermediate wanted, in elements: also slice the hyper-optimized
    /// order to fit it (`tir::slice`).
    #[serde(default)]
    max_intermediate: Option<f64>,
    /// Smaller targets the same order is also sliced to (`"more"` in the output):
    /// the benchmark's comparison at equal slice counts.
    #[serde(default)]
    more_targets: Vec<f64>,
}

fn summary(p: &Path, t: f64) -> serde_json::Value {
    let pairs: Vec<[usize; 2]> = p.steps.iter().map(|s| [s.a, s.b]).collect();
    let largest = p.steps.iter().map(|s| s.size).fold(0.0, f64::max);
    serde_json::json!({ "flops": p.flops, "largest": largest, "seconds": t, "ssa": pairs,
                        "method": format!("{:?}", p.method).to_lowercase() })
}

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = serde_json::from_str(&line).expect("a case");
        let p = Problem { inputs: case.inputs, output: case.output, sizes: case.sizes, sym: Vec::new() };
        let objective = case.objective.as_deref().and_then(Objective::from_name).unwrap_or_default();
        let run = |search_time: f64| {
            let opts = Options { search_time, objective, ..Options::default() };
            let t0 = Instant::now();
            let path = optimize_path(&p, &opts).expect("path");
            let t = t0.elapsed().as_secs_f64();
            (summary(&path, t), path)
        };
        let (greedy, _) = run(0.0);
        let (hyper, found) = run(case.search_time);
        let mut v = serde_json::json!({ "id": case.id, "greedy": greedy, "hyper": hyper });
        if let Some(target) = case.max_intermediate {
            // The order just found is sliced (as `tcc opt --max-intermediate` slices
            // the order it found, and as cotengra's `slice_and_reconfigure` slices
            // its tree): the seconds are the slicing's alone.
            let opts = Options { search_time: case.search_time, objective, ..Options::default() };
            let found_again = found.clone();
            let t0 = Instant::now();
            let s = slice_path(&p, found, target, &opts).expect("slicing");
            let mut one = summary(&s.path, t0.elapsed().as_secs_f64());
            one["sliced"] = serde_json::json!(s.indices);
            one["slices"] = serde_json::json!(s.slices);
            v["sliced"] = one;
            let more: Vec<serde_json::Value> = case
                .more_targets
                .iter()
                .map(|&t| {
                    let s = slice_path(&p, found_again.clone(), t, &opts).expect("slicing");
                    let mut one = summary(&s.path, 0.0);
                    one["sliced"] = serde_json::json!(s.indices);
                    one["slices"] = serde_json::json!(s.slices);
                    one["target"] = serde_json::json!(t);
                    one
                })
                .collect();
            v["more"] = serde_json::json!(more);
        }
        writeln!(out, "{v}").unwrap();
        out.flush().unwrap();
    }
}
