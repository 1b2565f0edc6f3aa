//! One tile kernel call at a time, operands in cache: GFLOP/s of
//! `C[i,j] += A[i,k] B[k,j]` on square tiles stored as tiled execution stores
//! them (row-major boxes), packed (`gett_serial`) and unpacked (`gett_tile`),
//! one thread. `bench/tiled/run.sh` prints it next to numpy's dgemm.
//!
//! `cargo run --release --example tile_kernel`

use std::time::Instant;
use tcc::codegen::llvm::tile_kernel;
use tcc::tiled::buffer::AlignedBuf;
use tcc_runtime::kernels::{gett_serial, gett_tile, GettDim};

fn main() {
    let k = tile_kernel().expect("tile kernel");
    println!("tile kernel: {}x{} micro-tile for {}", k.params.mr, k.params.nr, k.cpu);
    for t in [32usize, 48, 64, 96, 128] {
        let mut a = AlignedBuf::zeroed(t * t).unwrap();
        let mut b = AlignedBuf::zeroed(t * t).unwrap();
        let mut c = AlignedBuf::zeroed(t * t).unwrap();
        for (x, v) in a.iter_mut().enumerate() {
            *v = (x % 7) as f64 * 0.1;
        }
        for (x, v) in b.iter_mut().enumerate() {
            *v = (x % 5) as f64 * 0.1;
        }
        let s = t as i64;
        // m = i (A stride t, C stride t), n = j (B, C stride 1), k (A 1, B t).
        let dims = [
            GettDim { kind: 1, size: s, sa: s, sb: 0, sc: s },
            GettDim { kind: 2, size: s, sa: 0, sb: 1, sc: 1 },
            GettDim { kind: 3, size: s, sa: 1, sb: s, sc: 0 },
        ];
        let flops = 2.0 * (t * t * t) as f64;
        let calls = (4e9 / flops) as usize;
        let mut rate = |unpacked: bool| {
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t0 = Instant::now();
                for _ in 0..calls {
                    // SAFETY: the dims address the three t×t buffers.
                    unsafe {
                        if unpacked {
                            gett_tile(a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), 1.0, &dims, k.params, k.uk, k.uks, false)
                        } else {
                            gett_serial(a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), 1.0, &dims, k.params, k.uk, false)
                        }
                    }
                }
                best = best.min(t0.elapsed().as_secs_f64());
            }
            calls as f64 * flops / best / 1e9
        };
        let (p, u) = (rate(false), rate(true));
        println!("tile {t}: packed {p:.1} GFLOP/s, unpacked {u:.1} GFLOP/s (one thread, in cache)");
    }
}
