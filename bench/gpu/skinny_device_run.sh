#!/bin/bash
# Device side of bench/gpu/skinny_prepare.sh (issue 19): per shape, cuBLAS
# forced, the staged 64x64x8 and 64x64x4 tensor-core tiles forced (best of
# REPEAT, device time); the 64x64x4 plans checked against the interpreter first.
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf skinny19.tar.xz -C /tmp
#   OUT=$OUT bash /tmp/skinny19/skinny_device_run.sh
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/skinnyout}; mkdir -p "$OUT"
exec > >(tee "$OUT/skinny_log.txt") 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L
REPEAT=${REPEAT:-10}
ms() { grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+"; }
for f in auto/*.tc; do
  b=$(basename "$f" .tc)
  c=$(timeout 40 ./tcc-gpu "auto/$b.tc" --repeat "$REPEAT" --gpu-gemm cublas 2>&1 | ms)
  t8=$(timeout 40 ./tcc-gpu "t8/$b.tc" --repeat "$REPEAT" --gpu-gemm tiled 2>&1 | ms)
  t4=$(timeout 40 ./tcc-gpu "t4/$b.tc" --repeat "$REPEAT" --gpu-gemm tiled 2>&1 | ms)
  echo "$b | cublas ${c:-?} | staged 64x64x8 ${t8:-?} | staged 64x64x4 ${t4:-?}"
done
echo "== total $SECONDS s"
