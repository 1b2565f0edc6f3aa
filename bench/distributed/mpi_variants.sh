#!/usr/bin/env bash
# Why 16 MPI processes ran slower than 16 in-process ranks (run H1), and what the
# mends do: the same CCD (o=20 v=200, one-sided) under mpirun -np 16 with tensors
# in window memory read by osc sm (loads; the default of mpi_env.sh) or served by
# osc pt2pt (messages, the owner's MPI answers), bound to a core or not, Open MPI
# yielding while it waits, alternating, next to 16 in-process ranks and one
# process of 16 threads. Carry target/mpipack.tar.xz:
#   bash bench/distributed/mpi_variants.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/mpi_variants.txt") 2>&1
source bench/distributed/mpi_env.sh
TUNE=${TUNE:-bench/distributed/runs/G-tune16.toml}
f=/tmp/ccd_20_200.tc
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$f', 'w').write(ccd.source(20, 200))"
KEEP="norm2|tiled on|tiled:|^      rank|kernels of|exchange:"
one() { # label, env..., then mpirun -np 16
  local label=$1; shift
  echo "=== $label"
  (export "$@"; mpirun -np 16 $T run $f --tiled --tile 40 --backend mpi --exchange one-sided --stats --tuning $TUNE) | grep -E "$KEEP"
}
echo "=== one rank: mpirun -np 1"
mpirun -np 1 $T run $f --tiled --tile 40 --backend mpi --exchange one-sided --stats --tuning $TUNE | grep -E "tiled on|kernels of"
for trial in $(seq 1 ${TRIALS:-2}); do
  one "trial $trial: bind core, osc sm" BIND=core
  one "trial $trial: bind none, osc sm" BIND=none
  one "trial $trial: bind core, osc pt2pt" BIND=core OMPI_MCA_osc=pt2pt
  one "trial $trial: bind core, osc pt2pt, yield when idle" BIND=core OMPI_MCA_osc=pt2pt OMPI_MCA_mpi_yield_when_idle=1
  echo "=== trial $trial: 16 in-process ranks"
  TCC_NUM_THREADS=16 $T run $f --tiled --tile 40 --ranks 16 --exchange one-sided --stats --tuning $TUNE | grep -E "tiled on"
  echo "=== trial $trial: one process, 16 threads"
  TCC_NUM_THREADS=16 $T run $f --tiled --tile 40 --stats | grep -E "tiled:"
done
