#!/usr/bin/env bash
# Weak scaling of the four-index transform (8-fold symmetric input, flops ~ N^5)
# with MPI processes on the GPU machine's 16-core host: N = 48, 56, 64, 72, 84 on
# 1, 2, 4, 8, 16 processes (N grows with ranks^(1/5)), one-sided exchange, each
# run with remote tiles read in place (the default on one node) and copied
# (TCC_READ_IN_PLACE=off). Carry target/mpipack.tar.xz; prints GFLOP/s per run
# and per rank. MODES="on" runs only the in-place runs.
#   TUNING=bench/distributed/runs/H4-tune16.toml bash bench/distributed/four_weak.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/four_weak.txt") 2>&1
source bench/distributed/mpi_env.sh
TUNING=${TUNING:-bench/distributed/runs/H4-tune16.toml}
n=1
for size in 48 56 64 72 84; do
  sed -e "s/range P = 100 tile 4/range P = $size tile 4/" -e "s/range M = 100 tile 25/range M = $size tile 12/" \
    examples/tiled/four_index_sym.tc > "/tmp/four_$size.tc"
  for mode in ${MODES:-on off}; do
    echo "=== four-index N=$size: mpirun -np $n, one-sided, TCC_READ_IN_PLACE=$mode"
    TCC_READ_IN_PLACE=$mode mpirun -np $n $T run "/tmp/four_$size.tc" --tiled --backend mpi --exchange one-sided --stats --tuning "$TUNING" |
      grep -E "norm2|tiled on|model:|read in place" | cut -c1-200
  done
  n=$((n * 2))
done
