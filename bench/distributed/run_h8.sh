#!/usr/bin/env bash
# Run H8 (bench/distributed/results.md): on the GPU machine's 16-core host, a
# `tcc tune` under mpirun -np 16 (MPI all-to-all, shared-window first touch),
# then the four-index weak scaling with tiles that grow with N, then the CCD
# o=28 v=280 at 16 processes with tiles of 40 and 56. Carry target/mpipack.tar.xz.
#   OUT=$OUT bash bench/distributed/run_h8.sh
# Run H9: CCD_TILES=56 CCD_TRIALS=2 OUT=$OUT bash bench/distributed/run_h8.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source bench/distributed/mpi_env.sh
t0=$SECONDS
mpirun -np 16 $T tune --backend mpi --max-bytes 16MiB --out "$OUT/tune16mpi.toml" > "$OUT/tune16mpi.log" 2>&1
echo "## tune: $((SECONDS - t0)) s"; grep -E "fresh|gets|all-to-all" "$OUT/tune16mpi.log"
TUNE=$OUT/tune16mpi.toml
[ -s "$TUNE" ] || TUNE=bench/distributed/runs/H7-tune16.toml
OUT=$OUT/four MODES=on THREADS16=1 TUNING=$TUNE SPEC="96:8:24 110:9:28 127:10:32 146:12:36 167:14:42" \
  timeout 300 bash bench/distributed/four_weak.sh
echo "## four-index done at $((SECONDS - t0)) s"
# CCD_TILES=none skips the CCD (run H10).
for tile in ${CCD_TILES:-40 56}; do
  [ "$tile" = none ] && continue
  OUT=$OUT/ccd$tile TILE=$tile TUNING=$TUNE TRIALS=${CCD_TRIALS:-1} SOLO_ALL=0 VARIANTS="inplace" timeout 200 bash bench/distributed/mpi_split.sh
done
echo "## total $((SECONDS - t0)) s"
