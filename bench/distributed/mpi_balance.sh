#!/usr/bin/env bash
# Strong scaling at 16 MPI processes, CCD o=28 v=280 (runs H2, H3 in
# bench/distributed/results.md): measures the host (lscpu), fits a fresh
# `tcc tune --ranks 16` table, then alternates, TRIALS times: one rank alone,
# 16 processes taking over each other's unstarted work (the default), 16
# processes each keeping to its own items (TCC_STEAL=off), and one process of
# 16 threads; each 16-process run with a summary of its ranks' kernel seconds
# and waits. Carry target/mpipack.tar.xz:
#   bash bench/distributed/mpi_balance.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/mpi_balance.txt") 2>&1
source bench/distributed/mpi_env.sh
lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|Model name|L2|L3|NUMA node)"
O=${O:-28} V=${V:-280}
f=/tmp/ccd_${O}_$V.tc
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$f', 'w').write(ccd.source($O, $V))"
OLD=bench/distributed/runs/G-tune16.toml
NEW=$OUT/tune16.toml
t0=$SECONDS
timeout 150 $T tune --ranks 16 --max-bytes 16MiB --out "$NEW" > "$OUT/tune16.log" 2>&1 || NEW=$OLD
echo "## tune: $((SECONDS - t0)) s, table $NEW"
# Prints the wall line and a summary of the ranks' kernel seconds and waits.
summary() {
  grep -E "norm2|tiled on|model:" "$1"
  grep -E "^      rank [0-9]+:" "$1" | python3 -c "
import re, sys
k, w, e = [], [], []
for l in sys.stdin:
    m = re.search(r'([0-9.]+) s in kernels .*?([0-9.]+) s waiting for fetched.*?([0-9.]+) s for other ranks.*?took over ([0-9]+) items', l)
    if m:
        k.append(float(m[1])); w.append(float(m[3])); e.append(int(m[4]))
if k:
    print(f'  kernels per rank: min {min(k):.3f} mean {sum(k)/len(k):.3f} max {max(k):.3f} s; sync waits max {max(w):.3f} s; items taken over {sum(e)}')
"
}
one() { # label, env...
  local label=$1; shift
  echo "=== $label"
  (export "$@"; mpirun -np 16 $T run $f --tiled --tile 40 --backend mpi --exchange one-sided --stats --tuning "$TUNING") > /tmp/one.txt 2>&1
  { echo "=== $label"; cat /tmp/one.txt; } >> "$OUT/mpi_balance_full.txt"
  summary /tmp/one.txt
}
for trial in $(seq 1 ${TRIALS:-3}); do
  echo "=== trial $trial: one rank alone, no MPI"
  $T run $f --tiled --tile 40 --stats | grep -E "norm2|tiled:"
  TUNING=$NEW one "trial $trial: 16 processes (taking over unstarted work: the default)" X=1
  TUNING=$NEW one "trial $trial: 16 processes, TCC_STEAL=off" TCC_STEAL=off
  echo "=== trial $trial: one process, 16 threads"
  TCC_NUM_THREADS=16 $T run $f --tiled --tile 40 --stats | grep -E "tiled:"
done
echo "## total $((SECONDS - t0)) s"
