//! Large-network path benchmark driver: reads cases as JSON lines on stdin,
//! `{"id":..,"inputs":[[0,1],[1,2]],"output":[0,2],"sizes":[4,5,6],"search_time":1.0}`
//! (integer index ids), and prints per case tcc's greedy path (`--search-time 0`)
//! and hyper-optimized path (the given budget) as SSA pairs, with tcc's flops,
//! largest intermediate and search time. Run by `bench/paths/large.py`.

use std::io::{BufRead, Write};
use std::time::Instant;

use tcc::tir::opmin::{optimize_path, Objective, Options, Path, Problem};

#[derive(serde::Deserialize)]
struct Case {
    id: String,
    inputs: Vec<Vec<usize>>,
    output: Vec<usize>,
    sizes: Vec<usize>,
    search_time: f64,
    #[serde(default)]
    objective: Option<String>,
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
            summary(&path, t0.elapsed().as_secs_f64())
        };
        let greedy = run(0.0);
        let hyper = run(case.search_time);
        let v = serde_json::json!({ "id": case.id, "greedy": greedy, "hyper": hyper });
        writeln!(out, "{v}").unwrap();
        out.flush().unwrap();
    }
}
