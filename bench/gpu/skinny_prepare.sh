#!/bin/sh
# Issue 19: skinny products Out[a,b,i,j] = F[a,b,i,k]·G[k,j] (a = b = 150,
# i = 40; j = n and k varied) planned three ways — the cost model's plan, and
# the staged f64 tensor-core tiles 64×64×8 and 64×64×4 forced — for
# bench/gpu/skinny_device_run.sh: how the tiles' staged stores fare when n does
# not fill the tile's 64 columns, and how cuBLAS fares on these shapes (data for
# a store-aware cost model). Builds into DEST (default target/skinny19) + .tar.xz.
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-target/skinny19}
rm -rf "$DEST" && mkdir -p "$DEST/auto" "$DEST/t8" "$DEST/t4"
for nk in 40:40 64:40 80:40 128:40 40:16 64:16 40:80 128:80; do
  n=${nk%%:*}; k=${nk#*:}; f="$DEST/auto/n${n}k${k}.tc"
  printf 'range RA = 150; range RI = 40; range RN = %s; range RK = %s;\nindex a, b : RA; index i : RI; index j : RN; index k : RK;\ninput tensor F[a,b,i,k] : f64;\ninput tensor G[k,j] : f64;\noutput tensor Out[a,b,i,j] : f64;\nOut[a,b,i,j] = F[a,b,i,k] * G[k,j];\n' "$n" "$k" > "$f"
  cp "$f" "$DEST/t8/"; cp "$f" "$DEST/t4/"
  $TCC build --target cuda "$f" -o "${f%.tc}.ptx" 2>&1 | grep -E "→" | sed "s/^/n=$n k=$k: /"
  TCC_GPU_EPILOGUE=staged TCC_GPU_TILE=64,64,8,32,32,mma $TCC build --target cuda "$DEST/t8/n${n}k${k}.tc" -o "$DEST/t8/n${n}k${k}.ptx" 2>/dev/null
  TCC_GPU_EPILOGUE=staged TCC_GPU_TILE=64,64,4,32,32,mma $TCC build --target cuda "$DEST/t4/n${n}k${k}.tc" -o "$DEST/t4/n${n}k${k}.ptx" 2>/dev/null
done
cp target/release/tcc-gpu bench/gpu/skinny_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
tar cf - -C "$(dirname "$DEST")" "$(basename "$DEST")" | xz -T2 -3 > "$DEST.tar.xz"
du -sh "$DEST.tar.xz"
