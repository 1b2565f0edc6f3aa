#!/bin/sh
# Issue 19: staged f64 tensor-core tile shapes swept on the CCSD(T) triples.
# Builds into DEST (default target/sweep19), packed as DEST.tar.xz, for
# bench/gpu/sweep_device_run.sh:
#   s_BMxBNxBKxTMxTN/   the 18 triples (cc_suite.py, n = 16/20/24) planned with
#                       that tile (TCC_GPU_TILE=...,mma, TCC_GPU_EPILOGUE=staged)
#   s_.../checks/       the 18 triples at small unequal extents and 40 random
#                       programs with that tile forced (checked on the device)
#   skinny/             abik,kj->abij (a = b = 150, i = j = k = 40), the shape the
#                       cost model's test pins to cuBLAS, planned by the model
#                       (time it with --gpu-gemm cublas and tiled)
# Shapes the generator refuses (TileCfg::valid) are skipped with a note.
# TCC: a tcc binary with LLVM (default target/release/tcc).
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-target/sweep19}
SHAPES=${SHAPES:-"64,64,8,32,32 64,64,8,32,16 64,64,8,16,32 128,64,8,32,32 64,128,8,32,32 128,128,8,64,32 32,64,8,16,32 64,64,4,32,32 64,64,8,16,16 32,32,8,16,16"}
rm -rf "$DEST" && mkdir -p "$DEST/src/small" "$DEST/skinny"
python3 bench/gpu/cc_suite.py small --dir "$DEST/src/small"
ls bench/gpu/random/*.tc | head -40 | xargs -I{} cp {} "$DEST/src/small/"
for s in $SHAPES; do
  d="$DEST/s_$(echo "$s" | tr , x)"
  if ! TCC_GPU_EPILOGUE=staged TCC_GPU_TILE="$s,mma" python3 bench/gpu/cc_suite.py build --group triples --dir "$d" --tcc "$TCC" 2>/dev/null; then
    echo "shape $s: refused by the generator, skipped"; rm -rf "$d"; continue
  fi
  mkdir -p "$d/checks"
  for f in "$DEST"/src/small/*.tc; do
    TCC_GPU_EPILOGUE=staged TCC_GPU_TILE="$s,mma" $TCC build --target cuda --gpu-gemm tiled "$f" \
      -o "$d/checks/$(basename "$f" .tc).ptx" 2>/dev/null || true
  done
done
printf 'range RA = 150; range RO = 40;\nindex a, b : RA; index i, j, k : RO;\ninput tensor F[a,b,i,k] : f64;\ninput tensor G[k,j] : f64;\noutput tensor Out[a,b,i,j] : f64;\nOut[a,b,i,j] = F[a,b,i,k] * G[k,j];\n' > "$DEST/skinny/abik.tc"
$TCC build --target cuda "$DEST/skinny/abik.tc" -o "$DEST/skinny/abik.ptx" 2>&1 | grep -E "→|->" | head -3 || true
cp target/release/tcc-gpu bench/gpu/sweep_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
tar cf - -C "$(dirname "$DEST")" "$(basename "$DEST")" | xz -T2 -3 > "$DEST.tar.xz"
du -sh "$DEST" "$DEST.tar.xz"
