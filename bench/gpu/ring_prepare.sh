#!/bin/sh
# Issue 19: operand tiles through a ring of cp.async buffers (TileCfg::stages
# >= 3) against the register double buffer, on the held-out suite's cases
# whose tiled kernels run many short reduction steps (triples at n = 16..24,
# AO->MO and Fock steps with k = 80..128). Builds into DEST (default
# target/ring19) + DEST.tar.xz, for bench/gpu/ring_device_run.sh:
#   cc/        the suite (cc_suite.py build: the cost model's plans)
#   cc_ring/   the same with TCC_GPU_STAGES=SUITE_STAGES (default 4)
#   t<k>/      the cases with tile shape k forced (tiled), shape in t<k>/shape
#   checks/<k> the random programs and the triples at small unequal extents
#              with check shape k forced, for checks against the interpreter
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-target/ring19}
SHAPES=${SHAPES:-"64,64,4,32,32,mma 64,64,4,32,32,mma,s3 64,64,4,32,32,mma,s4 64,64,4,32,32,mma,s6 64,64,8,32,32,mma,s4 32,80,8,16,40,mma,s4 64,80,8,32,40,mma,s4 128,64,8,64,32,mma,s3 64,64,12,32,32,mma 64,64,12,32,32,mma,s3 48,48,8,24,24,mma 48,48,24,24,24,mma 72,72,8,24,24,mma"}
CASES=${CASES:-"0 4 5 10 11 22 23 24 26 27 29"}
CHECKS=${CHECKS:-"64,64,4,32,32,mma,s4 16,32,8,8,16,mma,s3 8,16,2,2,4,s3 64,64,8,32,32,mma,s6 48,48,8,24,24,mma"}
rm -rf "$DEST" && mkdir -p "$DEST/src/random" "$DEST/src/small"
python3 bench/gpu/cc_suite.py build --dir "$DEST/cc" --tcc "$TCC" 2>/dev/null
# The whole suite again with the cost model's tiles on a ring of SUITE_STAGES.
TCC_GPU_STAGES=${SUITE_STAGES:-4} python3 bench/gpu/cc_suite.py build --dir "$DEST/cc_ring" --tcc "$TCC" 2>/dev/null
python3 bench/gpu/cc_suite.py small --dir "$DEST/src/small"
cp bench/gpu/random/*.tc "$DEST/src/random/"
k=0
for s in $SHAPES; do
  d="$DEST/t$k"; mkdir -p "$d"; echo "$s" > "$d/shape"
  for c in $CASES; do
    cp "$DEST/cc/cc$c.tc" "$d/"
    TCC_GPU_TILE=$s $TCC build --target cuda --gpu-gemm tiled "$d/cc$c.tc" -o "$d/cc$c.ptx" 2>/dev/null || rm -f "$d/cc$c.tc"
  done
  k=$((k + 1))
done
k=0
for s in $CHECKS; do
  d="$DEST/checks/$k"; mkdir -p "$d"; echo "$s" > "$d/shape"
  for f in "$DEST"/src/random/*.tc "$DEST"/src/small/*.tc; do
    TCC_GPU_TILE=$s $TCC build --target cuda --gpu-gemm tiled "$f" -o "$d/$(basename "$f" .tc).ptx" 2>/dev/null || true
  done
  k=$((k + 1))
done
# The random programs and small triples with the cost model's plans (auto).
mkdir -p "$DEST/checks/auto"
for f in "$DEST"/src/random/*.tc "$DEST"/src/small/*.tc; do
  $TCC build --target cuda "$f" -o "$DEST/checks/auto/$(basename "$f" .tc).ptx" > /dev/null 2>&1 || true
done
# The C host shims of the 16-bit and complex examples, for shim_test.py.
mkdir -p "$DEST/shims"
for e in bf16_mlp rmsnorm_f16 complex_mps density_c64 matmul; do
  cp examples/$e.tc "$DEST/shims/" && $TCC build --target cuda "$DEST/shims/$e.tc" -o "$DEST/shims/$e.ptx" > /dev/null 2>&1
done
cp bench/gpu/shim_test.py "$DEST/"
cp target/release/tcc-gpu bench/gpu/ring_device_run.sh bench/gpu/ring_quick_run.sh bench/gpu/ring_call.sh bench/gpu/ring_final.sh bench/gpu/cc_suite.py bench/gpu/cc_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
tar cf - -C "$(dirname "$DEST")" "$(basename "$DEST")" | xz -T2 -3 > "$DEST.tar.xz"
du -sh "$DEST.tar.xz"
