//! Device check of the `nccl` back end on one GPU (a one-rank communicator).
//!
//! Runs every operation of the `Communicator` trait through NCCL with message sizes
//! from 0 to 16 Mi words, both the direct and the grouped (uneven-block) paths,
//! against the sequential references and the flat counting model of
//! `tcc_runtime::comm::check`; then send/recv with tags, barrier, the shared
//! counter, mixing with the `threads` back end by a tuning table, and a timing
//! table (8 B … 128 MiB, `nccl` vs `threads` on one rank, plus NCCL on
//! device-resident buffers, which shows what staging through the host costs).
//! Prints one PASS/FAIL line per check and exits non-zero on any failure.
//!
//! ```sh
//! cargo build --release -p tcc-runtime --features nccl --example nccl_check
//! LD_LIBRARY_PATH=/dir/with/libnccl.so NCCL_NVLS_ENABLE=0 nccl_check [OUT_DIR]
//! ```
//! With `OUT_DIR`, writes `nccl-timing.md` and `tuning-nccl.toml` there.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use tcc_runtime::comm::mixed::Mixed;
use tcc_runtime::comm::nccl::NcclComm;
use tcc_runtime::comm::threads::{self, Rank};
use tcc_runtime::comm::{check, Backend, Collective, Communicator, ReduceOp, World};
use tcc_runtime::tune::{self, Entry, Measurement, TuneOptions, TuningTable};

const SIZES: [usize; 7] = [0, 1, 5, 1000, 65_539, 1 << 20, 1 << 24];

fn main() {
    let out_dir = std::env::args().nth(1).map(std::path::PathBuf::from);
    // Panics are caught and reported as FAIL lines; keep their default report short.
    std::panic::set_hook(Box::new(|info| eprintln!("(panic: {info})")));
    let code = match threads::run(1, |rank| body(rank, out_dir.as_deref())) {
        Ok(v) => v[0],
        Err(f) => {
            println!("FAIL the check itself stopped: {f}");
            1
        }
    };
    std::process::exit(code)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// Runs `f`; a panic is a failure with its message.
fn attempt(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(p.as_ref()))))
}

struct Report {
    failures: usize,
}

impl Report {
    fn line(&mut self, name: &str, r: Result<(), String>, note: &str) {
        match r {
            Ok(()) => println!("PASS {name:<32} {note}"),
            Err(e) => {
                self.failures += 1;
                println!("FAIL {name:<32} {note}: {e}");
            }
        }
    }
}

fn body(rank: &Rank, out_dir: Option<&std::path::Path>) -> i32 {
    let nccl = match NcclComm::single() {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL open a one-rank NCCL communicator: {e}");
            return 3;
        }
    };
    let version = NcclComm::nccl_version().map(|v| v.to_string()).unwrap_or_else(|e| e);
    println!("device: {}; NCCL version code {version}; {nccl:?}", nccl.device_name());
    let mut rep = Report { failures: 0 };
    rep.line("Backend::Nccl.available", Backend::Nccl.available(), "");

    // Every collective and send/recv at every size, on both paths, by operation.
    let mut by_op: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let t0 = Instant::now();
    for grouped in [false, true] {
        nccl.set_grouped(grouped);
        for n in SIZES {
            let checks = catch_unwind(AssertUnwindSafe(|| check::sized(&nccl, n, true)));
            match checks {
                Ok(checks) => {
                    for c in checks {
                        let key = c.op.clone();
                        if !by_op.contains_key(&key) {
                            order.push(key.clone());
                        }
                        let e = by_op.entry(key).or_default();
                        e.0 += 1;
                        if let Some(err) = c.error {
                            e.1.push(format!("n={n}{}: {err}", if grouped { " grouped" } else { "" }));
                        }
                    }
                }
                Err(p) => rep.line("sized checks", Err(panic_text(p.as_ref())), &format!("n={n} grouped={grouped}")),
            }
        }
    }
    nccl.set_grouped(false);
    let sizes = SIZES.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",");
    for op in &order {
        let (runs, errs) = &by_op[op];
        let r = if errs.is_empty() { Ok(()) } else { Err(errs.join("; ")) };
        rep.line(op, r, &format!("{runs} runs, words {sizes}, direct and grouped paths, results and counts"));
    }
    println!("(sized checks took {:.2} s)", t0.elapsed().as_secs_f64());

    // The shared self-checks (they panic on a wrong result).
    rep.line(
        "collectives (check::collectives)",
        attempt(|| {
            check::collectives(&nccl);
            Ok(())
        }),
        "uneven and empty blocks",
    );
    rep.line(
        "send/recv tags (check::send_recv)",
        attempt(|| {
            check::send_recv(&nccl);
            Ok(())
        }),
        "per-tag order, then barrier",
    );
    rep.line(
        "barrier",
        attempt(|| {
            (0..100).for_each(|_| nccl.barrier());
            Ok(())
        }),
        "100 barriers",
    );
    rep.line(
        "shared counter (check::counter)",
        attempt(|| {
            check::counter(&nccl);
            let ctr = nccl.counter();
            let got: Vec<u64> = (0..5).map(|_| ctr.fetch_add(3)).collect();
            if got != [0, 3, 6, 9, 12] || ctr.ops() != 5 {
                return Err(format!("fetch_add gave {got:?}, {} ops", ctr.ops()));
            }
            Ok(())
        }),
        "50 tasks claimed once; fetch_add sequence",
    );
    rep.line(
        "recv without a message",
        match catch_unwind(AssertUnwindSafe(|| nccl.recv(0, 99))) {
            Err(p) if panic_text(p.as_ref()).contains("no such message") => Ok(()),
            Err(p) => Err(format!("unexpected panic: {}", panic_text(p.as_ref()))),
            Ok(v) => Err(format!("got {} words from nowhere", v.len())),
        },
        "panics with a message instead of hanging",
    );
    rep.line(
        "repeatable sums",
        attempt(|| {
            let once = || {
                let mut b = check::data(0, 1 << 20);
                nccl.allreduce(&mut b, ReduceOp::Sum);
                b.iter().map(|x| x.to_bits()).collect::<Vec<u64>>()
            };
            if once() == once() && once() == check::data(0, 1 << 20).iter().map(|x| x.to_bits()).collect::<Vec<_>>() {
                Ok(())
            } else {
                Err("two all-reduces differ".into())
            }
        }),
        "1 Mi words, bit-identical (one rank: a copy)",
    );

    // Mixing: a table alternating nccl and threads by size.
    rep.line(
        "Mixed nccl+threads (check::mixing)",
        attempt(|| {
            let second = NcclComm::single()?;
            let mut entries = Vec::new();
            for op in Collective::ALL {
                for (k, bytes) in [0u64, 64, 256, 1024].into_iter().enumerate() {
                    let backend = if k % 2 == 0 { Backend::Nccl } else { Backend::Threads };
                    entries.push(Entry { op, bytes, backend, seconds: BTreeMap::new() });
                }
            }
            let table = TuningTable { world: World::Nccl, ranks: 1, entries };
            let m = Mixed::new(vec![Box::new(second), rank.comm(Backend::Threads)], table);
            check::mixing(&m);
            check::collectives(&m);
            let used = check::used(&m.calls(), Collective::Allreduce);
            if used.contains(&Backend::Nccl) && used.contains(&Backend::Threads) {
                Ok(())
            } else {
                Err(format!("all-reduces went to {used:?} only"))
            }
        }),
        "calls dispatched to both back ends",
    );

    // Timing: nccl vs threads on one rank, and NCCL on device-resident buffers.
    let th = rank.comm(Backend::Threads);
    let opts = TuneOptions {
        ops: Collective::ALL.to_vec(),
        sizes: tune::sizes_up_to(128 << 20),
        budget_bytes: 256 << 20,
        max_reps: 200,
    };
    let t0 = Instant::now();
    let timed = attempt(|| {
        let ms = tune::measure(&[&nccl, th.as_ref()], &opts, &mut |_| {});
        let device = device_allreduce(&opts.sizes).unwrap_or_else(|e| {
            println!("(device-resident timing skipped: {e})");
            Vec::new()
        });
        let md = timing_table(&ms, &device);
        println!("\n{md}");
        let nccl_only: Vec<Measurement> = ms.iter().filter(|m| m.backend == Backend::Nccl).cloned().collect();
        let table = tune::table_from(World::Nccl, 1, &nccl_only);
        let back = TuningTable::from_toml(&table.to_toml()).map_err(|e| e.0)?;
        if back.choose(Collective::Allreduce, 1 << 20) != Some(Backend::Nccl) {
            return Err("the nccl tuning table does not choose nccl".into());
        }
        if let Some(dir) = out_dir {
            std::fs::write(dir.join("nccl-timing.md"), &md).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("tuning-nccl.toml"), table.to_toml()).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    rep.line("timing + nccl tuning table", timed, &format!("{:.1} s", t0.elapsed().as_secs_f64()));

    let stats = nccl.stats();
    println!("nccl stats after all checks: {stats:?}");
    if rep.failures == 0 {
        println!("ALL PASS");
        0
    } else {
        println!("{} FAILED", rep.failures);
        1
    }
}

/// Seconds per `ncclAllReduce` (sum, in place) on device-resident buffers, by size.
fn device_allreduce(sizes: &[u64]) -> Result<Vec<(u64, f64)>, String> {
    use cudarc::driver::CudaContext;
    use cudarc::nccl::safe::{Comm, Id, ReduceOp as Op};
    let ctx = CudaContext::new(0).map_err(|e| format!("{e:?}"))?;
    let stream = ctx.new_stream().map_err(|e| format!("{e:?}"))?;
    let comm = Comm::from_rank(stream.clone(), 0, 1, Id::new().map_err(|e| format!("{e:?}"))?)
        .map_err(|e| format!("{e:?}"))?;
    let max = sizes.iter().map(|&b| (b as usize).div_ceil(8)).max().unwrap_or(1);
    let mut buf = stream.alloc_zeros::<f64>(max).map_err(|e| format!("{e:?}"))?;
    let mut out = Vec::new();
    for &bytes in sizes {
        let words = (bytes as usize).div_ceil(8).max(1);
        let reps = ((256u64 << 20) / bytes.max(1)).clamp(5, 500) as usize;
        let mut view = buf.slice_mut(0..words);
        comm.all_reduce_in_place(&mut view, &Op::Sum).map_err(|e| format!("{e:?}"))?;
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        let t0 = Instant::now();
        for _ in 0..reps {
            comm.all_reduce_in_place(&mut view, &Op::Sum).map_err(|e| format!("{e:?}"))?;
        }
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        out.push((bytes, t0.elapsed().as_secs_f64() / reps as f64));
    }
    Ok(out)
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn us(s: f64) -> String {
    format!("{:.1}", s * 1e6)
}

/// A markdown table: µs per call for each op and size, nccl vs threads.
fn timing_table(ms: &[Measurement], device: &[(u64, f64)]) -> String {
    let mut t: BTreeMap<(u64, Collective), BTreeMap<Backend, f64>> = BTreeMap::new();
    for m in ms {
        t.entry((m.bytes, m.op)).or_default().insert(m.backend, m.seconds);
    }
    let mut s =
        String::from("µs per call, one rank (nccl: host buffers staged through the GPU; threads: in-process)\n\n");
    s.push_str("| size | op | nccl | threads |\n|---:|---|---:|---:|\n");
    for ((bytes, op), by) in &t {
        let get = |b| by.get(&b).map(|&x| us(x)).unwrap_or_default();
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            human(*bytes),
            op.name(),
            get(Backend::Nccl),
            get(Backend::Threads)
        ));
    }
    if !device.is_empty() {
        s.push_str(
            "\nµs per all-reduce (sum): nccl back end (host buffers) vs ncclAllReduce on device-resident buffers\n\n",
        );
        s.push_str("| size | nccl back end | device-resident |\n|---:|---:|---:|\n");
        for &(bytes, sec) in device {
            let host = t
                .get(&(bytes, Collective::Allreduce))
                .and_then(|b| b.get(&Backend::Nccl))
                .map(|&x| us(x))
                .unwrap_or_default();
            s.push_str(&format!("| {} | {host} | {} |\n", human(bytes), us(sec)));
        }
    }
    s
}
