#!/usr/bin/env bash
# How the placement's flops-per-word weight (TCC_FLOPS_PER_WORD) trades balance
# against words moved: CCD o=20 v=200 on 1..MAX in-process ranks, one thread each.
#   TCC=target/release/tcc TILES="40 25" bash bench/distributed/sweep_fpw.sh [max ranks] [weights...]
set -euo pipefail
cd "$(dirname "$0")/../.."
TCC=${TCC:-target/release/tcc}
MAX=${1:-$(nproc)}
shift || true
WEIGHTS=${*:-64 256 1024 1e12}
OUT=${OUT:-/tmp}
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$OUT/ccd_20_200.tc', 'w').write(ccd.source(20, 200))"
echo "## one process, $MAX threads"
TCC_NUM_THREADS=$MAX $TCC run "$OUT/ccd_20_200.tc" --tiled --tile 40 | grep -E "tiled:"
for tile in ${TILES:-40}; do
for w in $WEIGHTS; do
  n=1
  while [ "$n" -le "$MAX" ]; do
    echo "## --tile $tile TCC_FLOPS_PER_WORD=$w ranks=$n"
    TCC_FLOPS_PER_WORD=$w TCC_NUM_THREADS=$n $TCC run "$OUT/ccd_20_200.tc" --tiled --tile 40 --tile "$tile" --ranks "$n" --stats > "$OUT/run.txt"
    grep -E "norm2|tiled on" "$OUT/run.txt"
    # The most seconds a rank spent exchanging, the most words a rank sent.
    grep -oE "\(([0-9.]+) s exchanging" "$OUT/run.txt" | tr -d '(' | sort -g | tail -1
    grep -oE "words sent [0-9]+" "$OUT/run.txt" | sort -k3 -g | tail -1
    n=$((n * 2))
  done
done
done
