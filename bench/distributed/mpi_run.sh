#!/usr/bin/env bash
# Strong scaling with real MPI processes on the GPU machine's 16-core host. Carry
# target/mpipack.tar.xz (bench/distributed/pack_mpipack.sh: an MPI build of tcc,
# its libraries and this machine's Open MPI, used there only if the host has no
# Open MPI of its own; it had 4.1.6 in run H1). The CCD residual o=20 v=200
# on 1, 2, 4, 8 and 16 ranks (a larger one, o=24 v=240, on 1 and 16) of one thread each,
# one-sided exchange; the in-process ranks and one process of 16 threads in the
# same call for comparison; then the four-index transform's weak scaling on
# 1, 2, 4, 8 and 16 processes. Every run prints its norm2. The scaling runs
# fix --tile 40 (run H1's tiling); the model's own choice of tile size (no
# --tile) is run beside them on 1 and 16 ranks.
#   bash bench/distributed/mpi_run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/mpi_run.txt") 2>&1
source bench/distributed/mpi_env.sh
TUNE=${TUNE:-bench/distributed/runs/G-tune16.toml}
KEEP="norm2|tiled on|took|model:|rank [0-9]+:|exchange:"
# CCD="o v ranks…; o v ranks…" picks the sizes and rank counts; FOUR=0 skips
# the four-index transform; ITER=1 runs a whole CCD iteration (residual,
# denominator update, energy: bench/tiled/ccd.py's iteration form) instead of
# the residual alone.
IFS=';' read -ra CCD_RUNS <<< "${CCD:-20 200 1 2 4 8 16 16;24 240 1 16 16}"
for size in "${CCD_RUNS[@]}"; do
  set -- $size
  o=$1 v=$2; shift 2
  f=/tmp/ccd_${o}_$v.tc
  python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$f', 'w').write(ccd.source($o, $v, ${ITER:-0} == 1))"
  echo "=== CCD o=$o v=$v: one process, one thread (no MPI)"
  $T run "$f" --tiled --tile 40 --stats | grep -E "norm2|tiled:|took"
  echo "=== CCD o=$o v=$v: one process, one thread, tile chosen by the model"
  $T run "$f" --tiled --stats | grep -E "norm2|tiled:|took|auto"
  for np in "$@"; do
    echo "=== CCD o=$o v=$v: mpirun -np $np, one-sided"
    t0=$(date +%s.%N)
    mpirun -np $np $T run "$f" --tiled --tile 40 --backend mpi --exchange one-sided --stats --tuning "$TUNE" | grep -E "$KEEP"
    echo "  [mpirun wall $(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')") s, JIT and start included]"
  done
  echo "=== CCD o=$o v=$v: mpirun -np 16, one-sided, tile chosen by the model"
  mpirun -np 16 $T run "$f" --tiled --backend mpi --exchange one-sided --stats --tuning "$TUNE" | grep -E "$KEEP|auto"
  echo "=== CCD o=$o v=$v: 16 in-process ranks, one-sided"
  TCC_NUM_THREADS=16 $T run "$f" --tiled --tile 40 --ranks 16 --exchange one-sided --stats --tuning "$TUNE" | grep -E "norm2|tiled on|took|model:"
  echo "=== CCD o=$o v=$v: one process, 16 threads"
  TCC_NUM_THREADS=16 $T run "$f" --tiled --tile 40 --stats | grep -E "norm2|tiled:|took"
done
# Weak scaling of the four-index transform (8-fold symmetric input, flops ~ N^5):
# N grows with ranks^(1/5), as bench/distributed/run.sh does with in-process ranks.
[ "${FOUR:-1}" = 0 ] && exit 0
n=1
for size in 48 56 64 72 84; do
  sed -e "s/range P = 100 tile 4/range P = $size tile 4/" -e "s/range M = 100 tile 25/range M = $size tile 12/" \
    examples/tiled/four_index_sym.tc > "/tmp/four_$size.tc"
  echo "=== four-index N=$size: mpirun -np $n, one-sided"
  mpirun -np $n $T run "/tmp/four_$size.tc" --tiled --backend mpi --exchange one-sided --stats --tuning "$TUNE" | grep -E "tiled on|flops:|model:"
  n=$((n * 2))
done
