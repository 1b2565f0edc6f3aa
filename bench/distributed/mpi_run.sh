#!/usr/bin/env bash
# Strong scaling with real MPI processes on the GPU machine's 16-core host (it
# has no MPI: carry target/mpipack.tar.xz from bench/distributed/pack_mpipack.sh,
# an MPI build of tcc with this machine's Open MPI). The CCD residual o=20 v=200
# on 1, 2, 4, 8 and 16 ranks (a larger one, o=24 v=240, on 1 and 16) of one thread each,
# one-sided exchange; the in-process ranks and one process of 16 threads in the
# same call for comparison. Every run prints its norm2.
#   bash bench/distributed/mpi_run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/mpi_run.txt") 2>&1
[ -d /tmp/mpipack ] || tar xJf target/mpipack.tar.xz -C /tmp
# The host's own Open MPI when it has one (same ABI, libmpi.so.40): tcc then runs
# on the host's loader with only the libraries the host lacks (LLVM's) carried.
if command -v mpirun >/dev/null && ldconfig -p | grep -q "libmpi.so.40 "; then
  mkdir -p /tmp/mpipack/extra
  for l in /tmp/mpipack/lib/*.so*; do
    n=$(basename "$l"); ldconfig -p | grep -q "^\s*$n " || ln -sf "$l" /tmp/mpipack/extra/
  done
  export LD_LIBRARY_PATH=/tmp/mpipack/extra
  T=/tmp/mpipack/tcc
  mpirun() { command mpirun --allow-run-as-root --bind-to "$BIND" "$@"; }
  echo "## the host's Open MPI: $(command mpirun --version | head -1); carried: $(ls /tmp/mpipack/extra | tr '\n' ' ')"
  ldd $T | grep "not found"
fi
# No MPI on the host, or one tcc cannot start with: the carried one, its folders
# at the paths it was built for.
use_carried() {
  cp -a /tmp/mpipack/root/. /
  L="/tmp/mpipack/lib/ld-linux-x86-64.so.2 --library-path /tmp/mpipack/lib"
  printf '#!/bin/sh\nexec %s /tmp/mpipack/tcc "$@"\n' "$L" > /tmp/mpipack/tcc.sh && chmod +x /tmp/mpipack/tcc.sh
  T=/tmp/mpipack/tcc.sh
  mpirun() { $L /tmp/mpipack/orterun --allow-run-as-root --bind-to "$BIND" "$@"; }
  unset LD_LIBRARY_PATH
  echo "## the carried Open MPI"
}
command -v mpirun >/dev/null && ldconfig -p | grep -q "libmpi.so.40 " || use_carried
# Open MPI under gVisor: no cross-memory attach for single copies; windows in
# shared memory (osc sm), made of messages where sm cannot (pt2pt).
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_osc=sm,pt2pt OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1 TCC_NUM_THREADS=1
BIND=${BIND:-core}
echo "## host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(date -u)"
mpirun -np 2 $T --version || { BIND=none; mpirun -np 2 $T --version; } || { use_carried; mpirun -np 2 $T --version; } ||
  { BIND=none; mpirun -np 2 $T --version; } || exit 1
echo "## binding: --bind-to $BIND"
TUNE=${TUNE:-bench/distributed/runs/G-tune16.toml}
KEEP="norm2|tiled on|took|model:|rank [0-9]+:|exchange:"
for size in "20 200 1 2 4 8 16 16" "24 240 1 16 16"; do
  set -- $size
  o=$1 v=$2; shift 2
  f=/tmp/ccd_${o}_$v.tc
  python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$f', 'w').write(ccd.source($o, $v))"
  echo "=== CCD o=$o v=$v: one process, one thread (no MPI)"
  $T run "$f" --tiled --stats | grep -E "norm2|tiled:|took"
  for np in "$@"; do
    echo "=== CCD o=$o v=$v: mpirun -np $np, one-sided"
    t0=$(date +%s.%N)
    mpirun -np $np $T run "$f" --tiled --backend mpi --exchange one-sided --stats --tuning "$TUNE" | grep -E "$KEEP"
    echo "  [mpirun wall $(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')") s, JIT and start included]"
  done
  echo "=== CCD o=$o v=$v: mpirun -np 16, one-sided, finer tiles (--tile 25)"
  mpirun -np 16 $T run "$f" --tiled --tile 25 --backend mpi --exchange one-sided --stats --tuning "$TUNE" | grep -E "$KEEP"
  echo "=== CCD o=$o v=$v: 16 in-process ranks, one-sided"
  TCC_NUM_THREADS=16 $T run "$f" --tiled --ranks 16 --exchange one-sided --stats --tuning "$TUNE" | grep -E "norm2|tiled on|took|model:"
  echo "=== CCD o=$o v=$v: one process, 16 threads"
  TCC_NUM_THREADS=16 $T run "$f" --tiled --stats | grep -E "norm2|tiled:|took"
done
