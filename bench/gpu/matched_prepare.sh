#!/bin/sh
# Issue 19: tensor-core tiles whose width matches a short extent, on the
# suite's GEMM shapes with one dimension <= 128 (AO->MO: m 512000, n 80,
# k 80; CCSD Fock ac,cbij->abij: m 128, n 131072, k 128). The default 64-wide
# tiles leave 48 of 128 columns idle at n = 80 and read the long operand twice.
# Builds, into DEST (default target/matched19), the suite (cc_suite.py build:
# the cost model's plans, for the same call's suite run) and per shape the
# cases' plans with that tile forced (DEST/s<k>/ccN.ptx), plus the random
# programs with each shape forced, to be checked against the interpreter on
# the device first (bench/gpu/matched_device_run.sh).
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-target/matched19}
SHAPES=${SHAPES:-"64,80,8,32,40,mma 64,80,16,32,40,mma 128,80,8,64,40,mma 32,80,8,16,40,mma 128,64,8,64,32,mma 128,32,8,32,32,mma 128,64,4,64,32,mma"}
CASES=${CASES:-"23 24 25 26 27"}
rm -rf "$DEST" && mkdir -p "$DEST"
python3 bench/gpu/cc_suite.py build --dir "$DEST/cc" --tcc "$TCC" 2>/dev/null
mkdir -p "$DEST/src/random"
cp bench/gpu/random/*.tc "$DEST/src/random/"
k=0
for s in $SHAPES; do
  d="$DEST/s$k"; mkdir -p "$d/checks"
  echo "$s" > "$d/shape"
  for c in $CASES; do
    cp "$DEST/cc/cc$c.tc" "$d/"
    TCC_GPU_TILE=$s $TCC build --target cuda --gpu-gemm tiled "$d/cc$c.tc" -o "$d/cc$c.ptx" 2>/dev/null || echo "s$k ($s): cc$c not built"
  done
  for f in bench/gpu/random/*.tc; do
    TCC_GPU_TILE=$s $TCC build --target cuda --gpu-gemm tiled "$f" -o "$d/checks/$(basename "$f" .tc).ptx" 2>/dev/null || true
  done
  k=$((k + 1))
done
cp target/release/tcc-gpu bench/gpu/cc_suite.py bench/gpu/cc_device_run.sh bench/gpu/matched_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
tar cf - -C "$(dirname "$DEST")" "$(basename "$DEST")" | xz -T2 -3 > "$DEST.tar.xz"
du -sh "$DEST.tar.xz"
