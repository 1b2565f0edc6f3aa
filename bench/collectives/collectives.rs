//! Collective benchmark: latency and bandwidth of each operation per back end, and
//! the tuned mix (a table chosen from these measurements, MCR-DL style) against the
//! best single back end, measured again in a second pass.
//!
//!     cargo run --release --example collectives -- [RANKS] [MAX_BYTES]
//!     mpirun -np 4 target/release/examples/collectives mpi [MAX_BYTES]   (--features mpi)
//!
//! Prints a Markdown report on stdout (see README.md for results on this machine).

use std::collections::BTreeMap;
use tcc_runtime::comm::mixed::Mixed;
use tcc_runtime::comm::{Backend, Collective, Communicator, World};
use tcc_runtime::tune::{measure, sizes_up_to, table_from, Measurement, TuneOptions, TuningTable};

/// Measures singles, derives the table, measures the mix; on rank 0 returns
/// (single-back-end measurements, mix measurements, table).
fn bench(
    singles: &[&dyn Communicator],
    mixed: &dyn Communicator,
    world: World,
    opts: &TuneOptions,
) -> (Vec<Measurement>, Vec<Measurement>) {
    let ms = measure(singles, opts, &mut |m| {
        eprintln!("{:<15} {:>10} B  {:<8} {:.3e} s", m.op.name(), m.bytes, m.backend.name(), m.seconds)
    });
    let _ = world;
    let mix = measure(&[mixed], opts, &mut |m| {
        eprintln!("{:<15} {:>10} B  mix      {:.3e} s", m.op.name(), m.bytes, m.seconds)
    });
    (ms, mix)
}

fn human(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn report(world: World, ranks: usize, ms: &[Measurement], mix: &[Measurement], table: &TuningTable) -> String {
    let backends: Vec<Backend> = world.backends().to_vec();
    let mut s = format!("## {ranks} ranks, world `{world:?}`\n\n");
    s.push_str("Time per call in µs (slowest rank); bandwidth = message bytes / time.\n\n");
    s.push_str("| op | size |");
    for b in &backends {
        s.push_str(&format!(" {b} µs |"));
    }
    s.push_str(" mix µs | table picks | best GB/s |\n|---|---|");
    for _ in &backends {
        s.push_str("---|");
    }
    s.push_str("---|---|---|\n");
    let mut pts: BTreeMap<(Collective, u64), BTreeMap<Backend, f64>> = BTreeMap::new();
    for m in ms {
        pts.entry((m.op, m.bytes)).or_default().insert(m.backend, m.seconds);
    }
    let mixt: BTreeMap<(Collective, u64), f64> = mix.iter().map(|m| ((m.op, m.bytes), m.seconds)).collect();
    let mut tot: BTreeMap<Backend, f64> = BTreeMap::new();
    let mut tot_mix = 0.0;
    let mut logsum: BTreeMap<Backend, f64> = BTreeMap::new();
    for ((op, bytes), t) in &pts {
        s.push_str(&format!("| {} | {} |", op.name(), human(*bytes)));
        for b in &backends {
            s.push_str(&format!(" {:.1} |", t[b] * 1e6));
            *tot.entry(*b).or_default() += t[b];
            *logsum.entry(*b).or_default() += (t[b] / mixt[&(*op, *bytes)]).ln();
        }
        let best = t.values().cloned().fold(f64::MAX, f64::min);
        tot_mix += mixt[&(*op, *bytes)];
        s.push_str(&format!(
            " {:.1} | {} | {:.2} |\n",
            mixt[&(*op, *bytes)] * 1e6,
            table.choose(*op, *bytes).map_or("-", |b| b.name()),
            *bytes as f64 / best / 1e9
        ));
    }
    let n = pts.len() as f64;
    s.push_str("\nWhole sweep (one call per op and size), second pass:\n\n| back end | total ms | mix speed-up (total) | mix speed-up (geometric mean per point) |\n|---|---|---|---|\n");
    for b in &backends {
        s.push_str(&format!(
            "| {b} | {:.2} | {:.2}× | {:.2}× |\n",
            tot[b] * 1e3,
            tot[b] / tot_mix,
            (logsum[b] / n).exp()
        ));
    }
    s.push_str(&format!("| tuned mix | {:.2} | 1.00× | 1.00× |\n", tot_mix * 1e3));
    s
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mpi = args.first().map(|a| a == "mpi").unwrap_or(false);
    let max_bytes: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64 << 20);
    let opts = TuneOptions { sizes: sizes_up_to(max_bytes), ..Default::default() };
    if mpi {
        #[cfg(feature = "mpi")]
        {
            let world = tcc_runtime::comm::mpi::MpiWorld::init().unwrap();
            let singles: Vec<Box<dyn Communicator>> = World::Mpi.backends().iter().map(|&b| world.comm(b)).collect();
            let refs: Vec<&dyn Communicator> = singles.iter().map(|c| c.as_ref()).collect();
            let first = measure(&refs, &opts, &mut |_| {});
            let table = table_from(World::Mpi, world.size(), &first);
            let mixed = Mixed::new(World::Mpi.backends().iter().map(|&b| world.comm(b)).collect(), table.clone());
            let (ms, mix) = bench(&refs, &mixed, World::Mpi, &opts);
            if world.rank() == 0 {
                print!("{}", report(World::Mpi, world.size(), &ms, &mix, &table));
            }
            return;
        }
        #[cfg(not(feature = "mpi"))]
        panic!("built without the `mpi` feature");
    }
    let ranks: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(4);
    let out = tcc_runtime::comm::threads::run(ranks, |rank| {
        let singles: Vec<Box<dyn Communicator>> = World::Threads.backends().iter().map(|&b| rank.comm(b)).collect();
        let refs: Vec<&dyn Communicator> = singles.iter().map(|c| c.as_ref()).collect();
        // First pass: the table. Second pass: singles and the mix, measured alike.
        let first = measure(&refs, &opts, &mut |_| {});
        let table = table_from(World::Threads, ranks, &first);
        let mixed = Mixed::new(World::Threads.backends().iter().map(|&b| rank.comm(b)).collect(), table.clone());
        let (ms, mix) = bench(&refs, &mixed, World::Threads, &opts);
        (ms, mix, table)
    })
    .unwrap();
    let (ms, mix, table) = &out[0];
    print!("{}", report(World::Threads, ranks, ms, mix, table));
}
