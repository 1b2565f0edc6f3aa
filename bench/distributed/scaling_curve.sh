#!/usr/bin/env bash
# Run H11 (bench/distributed/results.md): is the 16-core host 16 cores for
# compute-bound work? First N one-thread dgemm copies at once
# (bench/distributed/cores_probe.py), then the CCD o=28 v=280 (tile 56) strong-scaling
# curve: one rank alone, then 2, 4, 8 and 16 MPI processes, then one process of 8
# and of 16 threads, each with its efficiency against one rank alone. Carry
# target/mpipack.tar.xz:
#   OUT=$OUT bash bench/distributed/scaling_curve.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/scaling_curve.txt") 2>&1
echo "## cores probe"
timeout 120 python3 bench/distributed/cores_probe.py --seconds "${PROBE_S:-2}" --counts "${COUNTS:-1,2,4,8,12,16}"
source bench/distributed/mpi_env.sh
O=${O:-28} V=${V:-280} TILE=${TILE:-56}
f=/tmp/ccd_${O}_$V.tc
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$f', 'w').write(ccd.source($O, $V))"
TUNE=${TUNING:-bench/distributed/runs/H9-tune16mpi.toml}
# TUNE_HERE=1: calibrate the time model on this host first (tcc tune under mpirun -np 16).
if [ "${TUNE_HERE:-0}" = 1 ]; then
  mpirun -np 16 $T tune --backend mpi --max-bytes 16MiB --out "$OUT/tune16mpi.toml" > "$OUT/tune16mpi.log" 2>&1
  [ -s "$OUT/tune16mpi.toml" ] && TUNE=$OUT/tune16mpi.toml
  echo "## time model: $TUNE"
fi
t0=$SECONDS
# One process prints "tiled: … time = X s", MPI runs "tiled on N ranks × 1 threads: time = X s".
time_of() { sed -nE 's/.*tiled( on [0-9]+ ranks)?[: ].* time = ([0-9.]+) s.*/\2/p' "$1" | head -1; }
$T run $f --tiled --tile "$TILE" --stats > /tmp/solo.txt 2>&1
solo=$(time_of /tmp/solo.txt)
echo "=== one rank alone: ${solo} s"
grep -E "norm2" /tmp/solo.txt
for np in ${RANKS:-2 4 8 16}; do
  mpirun -np "$np" $T run $f --tiled --tile "$TILE" --backend mpi --exchange one-sided --stats --tuning "$TUNE" > /tmp/np.txt 2>&1
  cat /tmp/np.txt >> "$OUT/scaling_full.txt"
  t=$(time_of /tmp/np.txt)
  k=$(grep -oE "rank [0-9]+: [0-9.]+ s in kernels" /tmp/np.txt | awk '{s+=$3; n++} END {if (n) printf "%.3f", s/n}')
  echo "=== $np processes: ${t:-failed} s; mean kernel time per rank $k s; $(python3 -c "print(f'efficiency {100*$solo/($np*${t:-1e9}):.0f}%, kernels {100*$solo/($np*${k:-1e9}):.0f}% of one rank alone')")"
  grep -E "norm2" /tmp/np.txt
done
for th in ${THREADS:-8 16}; do
  TCC_NUM_THREADS=$th $T run $f --tiled --tile "$TILE" --stats > /tmp/th.txt 2>&1
  t=$(time_of /tmp/th.txt)
  echo "=== one process, $th threads: $t s; $(python3 -c "print(f'efficiency {100*$solo/($th*$t):.0f}%')")"
done
echo "## total $((SECONDS - t0)) s"
