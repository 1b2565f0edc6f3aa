//! MPI back ends under `mpirun` (cargo feature `mpi`). Run without `mpirun`, each
//! test starts `mpirun --allow-run-as-root --oversubscribe -np N` on this very test
//! binary (for N = 2, 3, 4), where the test body runs on every rank.
#![cfg(feature = "mpi")]

use std::process::Command;
use std::time::{Duration, Instant};
use tcc_runtime::comm::check;
use tcc_runtime::comm::mixed::Mixed;
use tcc_runtime::comm::mpi::MpiWorld;
use tcc_runtime::comm::{Backend, Collective, World};

fn under_mpirun() -> bool {
    std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() || std::env::var_os("PMI_SIZE").is_some()
}

/// Runs test `name` of this binary under mpirun with `np` ranks; panics if it fails
/// or takes more than `limit`.
fn spawn(name: &str, np: usize, limit: Duration) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string()])
        .arg(&exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .spawn()
        .expect("mpirun is installed (apt-get install openmpi-bin)");
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "{name} on {np} ranks failed: {st}");
            return;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("{name} on {np} ranks did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn collectives_counters_and_mixing() {
    if !under_mpirun() {
        for np in [2, 3, 4] {
            spawn("collectives_counters_and_mixing", np, Duration::from_secs(120));
        }
        return;
    }
    let world = MpiWorld::init().expect("MPI initializes once");
    for b in World::Mpi.backends() {
        let c = world.comm(*b);
        check::collectives(c.as_ref());
        check::counter(c.as_ref());
        // Windows where the MPI library can create them over our memory (not
        // Open MPI with `btl_vader_single_copy_mechanism=none`): checked when made.
        let made = check::window(c.as_ref());
        // ./x test chooses a one-sided component that can (`osc pt2pt`) and says so.
        assert!(made || std::env::var_os("TCC_TEST_REQUIRE_MPI_WINDOWS").is_none(), "MPI_Win_create failed");
        if !made && c.rank() == 0 {
            eprintln!("MPI_Win_create failed here: one-sided gets not checked");
        }
        // Window memory (`MPI_Win_allocate`) works with every one-sided component.
        assert!(check::window_memory(c.as_ref(), made), "no window memory on {b}");
    }
    let m = Mixed::new(vec![world.comm(Backend::Mpi), world.comm(Backend::MpiP2p)], check::zigzag(World::Mpi));
    check::mixing(&m);
    let used = check::used(&m.calls(), Collective::Allreduce);
    assert!(used.contains(&Backend::Mpi) && used.contains(&Backend::MpiP2p), "{used:?}");
    // Exact counts of the p2p back end: a ring all-gather sends p − 1 messages.
    let c = world.comm(Backend::MpiP2p);
    let p = c.size();
    let before = c.stats();
    let mut g = vec![0.0; 3 * p];
    c.allgather(&[1.0, 2.0, 3.0], &mut g);
    let after = c.stats();
    assert_eq!(after.messages_sent - before.messages_sent, (p - 1) as u64);
    assert_eq!(after.words_sent - before.words_sent, 3 * (p - 1) as u64);
}
