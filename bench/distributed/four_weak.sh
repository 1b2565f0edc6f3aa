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
# SPEC="N:AO tile:MO tile ..." per rank count 1, 2, 4, ...; the default is the
# small runs H6/H7 used (AO tiles of 4: hundreds of thousands of tiny calls).
# Run H8 used tiles that grow with N (AO N/12, MO N/4):
#   SPEC="96:8:24 110:9:28 127:10:32 146:12:36 167:14:42"
n=1
for spec in ${SPEC:-48:4:12 56:4:12 64:4:12 72:4:12 84:4:12}; do
  IFS=: read -r size pt mt <<< "$spec"
  sed -e "s/range P = 100 tile 4/range P = $size tile $pt/" -e "s/range M = 100 tile 25/range M = $size tile $mt/" \
    examples/tiled/four_index_sym.tc > "/tmp/four_$size.tc"
  for mode in ${MODES:-on off}; do
    echo "=== four-index N=$size: mpirun -np $n, one-sided, TCC_READ_IN_PLACE=$mode"
    TCC_READ_IN_PLACE=$mode mpirun -np $n $T run "/tmp/four_$size.tc" --tiled --backend mpi --exchange one-sided --stats --tuning "$TUNING" |
      grep -E "norm2|tiled on|model:|read in place|rank 0: [0-9.]+ s in kernels" | cut -c1-260
  done
  n=$((n * 2))
done
# THREADS16=1: the largest size again in one process of 16 threads (no MPI).
if [ "${THREADS16:-0}" = 1 ]; then
  echo "=== four-index N=$size: one process, 16 threads"
  TCC_NUM_THREADS=16 $T run "/tmp/four_$size.tc" --tiled --stats --tuning "$TUNING" | grep -E "tiled:|model:" | cut -c1-200
fi
