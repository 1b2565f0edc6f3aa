#!/usr/bin/env bash
# Distributed tiled execution: strong scaling of the spin-orbital CCD residual and
# weak scaling of the four-index transform, in-process ranks (one thread each)
# against one process using all threads; bench/distributed/results.md.
#   TCC=target/release/tcc bash bench/distributed/run.sh [max ranks]
# On the GPU machine's 16-core host (no Rust there) it runs a carried build:
#   TCC="devpack/lib/ld-linux-x86-64.so.2 --library-path devpack/lib devpack/tcc" bash bench/distributed/run.sh 16
# TUNING=FILE: the table of `tcc tune --ranks N` whose time model `--stats` prints
# next to each run's wall time (default: ~/.config/tcc/tuning.toml, else built-in).
# EXCHANGE=one-sided|collective|auto: how ranks move tiles (default auto).
set -euo pipefail
cd "$(dirname "$0")/../.."
TCC=${TCC:-target/release/tcc}
MAX=${1:-$(nproc)}
OUT=${OUT:-/tmp}
TUNE_ARGS=()
if [ -n "${TUNING:-}" ]; then TUNE_ARGS=(--tuning "$TUNING"); fi
X_ARGS=(--exchange "${EXCHANGE:-auto}")
echo "## machine: $(nproc) cores, $(date -u +%F)"
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$OUT/ccd_20_200.tc', 'w').write(ccd.source(20, 200))"
echo "## CCD residual o=20 v=200: one process, $MAX threads"
TCC_NUM_THREADS=$MAX $TCC run "$OUT/ccd_20_200.tc" --tiled --tile 40 --stats "${TUNE_ARGS[@]}" | grep -E "norm2|tiled:|model:|kernels:|    (GETT|adds)"
echo "## CCD residual o=20 v=200: N in-process ranks, 1 thread each"
n=1
while [ "$n" -le "$MAX" ]; do
  TCC_NUM_THREADS=$n $TCC run "$OUT/ccd_20_200.tc" --tiled --tile 40 --ranks "$n" --stats "${TUNE_ARGS[@]}" "${X_ARGS[@]}" | grep -E "norm2|tiled on|model:|exchange:|rank 0:|kernels of rank 0:|    (GETT|adds)" | grep -v "words sent .*, received .*, read one-sided"
  n=$((n * 2))
done
echo "## four-index transform, 8-fold symmetric, weak scaling: N grows with ranks^(1/5) (flops ~ N^5)"
n=1
for size in 48 56 64 72 84; do
  [ "$n" -le "$MAX" ] || break
  sed -e "s/range P = 100 tile 4/range P = $size tile 4/" -e "s/range M = 100 tile 25/range M = $size tile 12/" \
    examples/tiled/four_index_sym.tc > "$OUT/four_$size.tc"
  echo "# N=$size on $n ranks"
  TCC_NUM_THREADS=$n $TCC run "$OUT/four_$size.tc" --tiled --tile 40 --ranks "$n" --stats "${TUNE_ARGS[@]}" "${X_ARGS[@]}" | grep -E "tiled on|flops:|model:|exchange:|kernels of rank 0:|    (GETT|adds)"
  n=$((n * 2))
done
