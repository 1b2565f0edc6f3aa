#!/bin/bash
# Device side of bench/gpu/matched_prepare.sh (issue 19): per tile shape, the
# random programs with that tile forced checked against the interpreter, then
# the cases with it forced (best of REPEAT, device time) beside cuBLAS forced.
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf matched19.tar.xz -C /tmp
#   OUT=$OUT bash /tmp/matched19/matched_device_run.sh
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/matchedout}; mkdir -p "$OUT"
exec > >(tee "$OUT/matched_log.txt") 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L
REPEAT=${REPEAT:-10}
ms() { grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+"; }
for d in s[0-9]*/; do
  d=${d%/}
  n=$(ls $d/checks/*.ptx 2>/dev/null | wc -l)
  fails=$(timeout 100 ./tcc-gpu $(for p in $d/checks/*.ptx; do echo src/random/$(basename $p .ptx).tc; done) \
    --ptx-dir $d/checks --gpu-gemm tiled --check --keep-going 2>&1 | grep -cE "^FAIL")
  echo "$d ($(cat $d/shape)): random programs checked: $n built, $fails FAIL"
done
for f in s0/cc*.tc; do
  c=$(basename $f .tc)
  line="$c | cublas $(timeout 40 ./tcc-gpu cc/$c.tc --repeat $REPEAT --gpu-gemm cublas 2>&1 | ms) | auto $(timeout 40 ./tcc-gpu cc/$c.tc --repeat $REPEAT 2>&1 | ms)"
  for d in s[0-9]*/; do
    d=${d%/}
    [ -f $d/$c.ptx ] && line="$line | $(cat $d/shape) $(timeout 40 ./tcc-gpu $d/$c.tc --repeat $REPEAT --gpu-gemm tiled 2>&1 | ms)"
  done
  echo "$line"
done
echo "== total $SECONDS s"
