#!/usr/bin/env bash
# Tiled execution benchmarks (bench/tiled/results.md). From the repository root:
#   cargo build --release && bash bench/tiled/run.sh
# Every peer runs in the same script on the same machine, one at a time.
set -euo pipefail
cd "$(dirname "$0")/../.."
TCC=${TCC:-target/release/tcc}
THREADS=${THREADS:-$(nproc)}
export TCC_NUM_THREADS=$THREADS
echo "## machine: $(nproc) cores, $THREADS threads, $(date -u +%F)"

echo "## CCD residual, o=10 v=38: tiled vs dense build vs numpy.einsum (ms)"
python3 bench/tiled/ccd.py --o 10 --v 38 --tcc "$TCC" --threads "$THREADS" --repeat 5 | tail -1

echo "## CCD residual, o=20 v=200 (dense <ab||cd> alone: 12.8 GB)"
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('/tmp/ccd_20_200.tc', 'w').write(ccd.source(20, 200))"
/usr/bin/time -f "peak RSS %M KiB, wall %e s" "$TCC" run /tmp/ccd_20_200.tc --tiled --stats 2>&1 | grep -E "tiled:|flops:|storage:|Vvvvv:|peak RSS"

echo "## four-index transform, N=100, 8-fold symmetric input"
/usr/bin/time -f "peak RSS %M KiB, wall %e s" "$TCC" run examples/tiled/four_index_sym.tc --tiled --stats 2>&1 | grep -E "tiled:|flops:|storage:|  A:|  B:|peak RSS"
"$TCC" opt examples/tiled/four_index_sym.tc | grep -E "total flops|tiled"

echo "## static vs dynamic task claiming, skewed tiles (bench/tiled/schedule.tc)"
for s in static dynamic; do
  "$TCC" run bench/tiled/schedule.tc --tiled --stats --schedule $s | grep -E "busy"
done

echo "## tile kernel alone, one thread, operands in cache (packed vs unpacked), and numpy dgemm on one thread before and after"
cargo build --release -q --example tile_kernel
OPENBLAS_NUM_THREADS=1 python3 bench/tiled/dgemm.py
target/release/examples/tile_kernel
OPENBLAS_NUM_THREADS=1 python3 bench/tiled/dgemm.py

echo "## tiled matmul: C[i,j] = A[i,k] B[k,j], N=1536, GFLOP/s by tile size, and numpy (OpenBLAS) dgemm before and after"
python3 bench/tiled/dgemm.py
for t in 32 48 64 96 128; do
  printf "range N = 1536 tile $t;\nindex i, j, k : N;\ninput tensor A[i,k] : f64;\ninput tensor B[k,j] : f64;\noutput tensor C[i,j] : f64;\nC[i,j] = A[i,k] * B[k,j];\n" > /tmp/tiled_mm$t.tc
  best=0
  for rep in 1 2 3; do
    g=$("$TCC" run /tmp/tiled_mm$t.tc --tiled | grep -oE '[0-9.]+ GFLOP/s' | cut -d' ' -f1)
    best=$(python3 -c "print(max($best, $g))")
  done
  packed=0
  for rep in 1 2 3; do
    g=$(TCC_GETT_UNPACKED=0 "$TCC" run /tmp/tiled_mm$t.tc --tiled | grep -oE '[0-9.]+ GFLOP/s' | cut -d' ' -f1)
    packed=$(python3 -c "print(max($packed, $g))")
  done
  echo "tile $t: $best GFLOP/s, every call packed: $packed GFLOP/s (best of 3)"
done
python3 bench/tiled/dgemm.py
