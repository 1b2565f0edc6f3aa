#!/bin/bash
# Device side of bench/gpu/ring_prepare.sh (issue 19): each check shape's
# random programs and small triples against the interpreter, then per case
# each shape forced (best of REPEAT, device time) beside the cost model's plan
# and cuBLAS forced; then, if ncu is there, the default and one ring tile on
# sd_t_d1_6.   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf ring19.tar.xz -C /tmp
#              OUT=$OUT bash /tmp/ring19/ring_device_run.sh
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/ringout}; mkdir -p "$OUT"
exec > >(tee "$OUT/ring_log.txt") 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L
REPEAT=${REPEAT:-10}
ms() { grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+"; }
for d in checks/*/; do
  d=${d%/}
  for s in random small; do
    fs=$(for p in $d/*.ptx; do b=$(basename $p .ptx); [ -f src/$s/$b.tc ] && echo src/$s/$b.tc; done)
    r=$(timeout 100 ./tcc-gpu $fs --ptx-dir $d --gpu-gemm tiled --check --keep-going 2>&1)
    echo "$d ($(cat $d/shape)) $s: $(echo "$fs" | wc -w) programs, $(echo "$r" | grep -cE "^FAIL") FAIL, $(echo "$r" | grep -ciE "check.*(ok|pass)") ok lines"
    echo "$r" | grep -E "^FAIL" | head -3
  done
done
for c in ${CASES:-0 4 5 10 11 22 23 24 26 27 29}; do
  [ -f cc/cc$c.tc ] || continue
  line="cc$c | cublas $(timeout 40 ./tcc-gpu cc/cc$c.tc --repeat $REPEAT --gpu-gemm cublas 2>&1 | ms) | auto $(timeout 40 ./tcc-gpu cc/cc$c.tc --repeat $REPEAT 2>&1 | ms)"
  for d in t*/; do
    d=${d%/}
    [ -f $d/cc$c.tc ] && line="$line | $(cat $d/shape) $(timeout 40 ./tcc-gpu $d/cc$c.tc --repeat $REPEAT --gpu-gemm tiled 2>&1 | ms)"
  done
  echo "$line"
  [ $SECONDS -gt ${DEADLINE:-420} ] && { echo "stopped: time"; break; }
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ $SECONDS -lt ${NCU_BEFORE:-450} ]; then
  for d in t0 ${NCU_RING:-t2}; do
    timeout 60 $NCU --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section LaunchStats -k regex:tcc --launch-count 1 \
      ./tcc-gpu $d/cc5.tc --repeat 1 --gpu-gemm tiled > $OUT/ncu_$d.txt 2>&1
    echo "ncu $d rc=$?"
  done
fi
echo "== total $SECONDS s"
