#!/bin/bash
# The whole GPU check, in one go, on the GPU machine (see book/src/gpu.md), from
# the tree bench/gpu/prepare.sh filled:
#   1. every example with each implementation of binary contractions forced
#      (auto, tiled, cublas, naive), the 120 random programs of bench/gpu/random
#      (auto and tiled; tiled with tiny tiles) and GEMM-shaped programs with
#      every tile shape, all run by tcc-gpu and checked against the interpreter:
#      FAIL lines and counts;
#      the C host shims of the examples, 20 random programs and 6 benchmark
#      cases, compiled and run (bench/gpu/shim_test.py);
#   2. registers and spills of the tiled kernels (ptxas -v, sm_90);
#   3. the tile shapes on the benchmark suite (tiled everywhere);
#   4. the benchmark suite against torch.einsum on the same GPU, each case also
#      with cuBLAS, tiled and naive forced (bench.py run --variants).
# Writes $OUT/device_log.txt, $OUT/results.md and $OUT/bench.json.
# CHECKS=quick: only auto and tiled on the examples, auto on the random
# programs; SWEEP= (empty) and PTXAS_V=0 skip steps 3 and 2.
set -u
OUT=${OUT:-/tmp/tccgpu-out}
mkdir -p "$OUT"
LOG=$OUT/device_log.txt
exec > >(tee "$LOG") 2>&1
G=bench/gpu/out
BIN=$G/tcc-gpu
chmod +x $BIN
echo "== device"; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader
# cuBLAS: the CUDA toolkit's, else the pip wheels torch uses.
. "$(dirname "$0")/cuda_env.sh"
status=0
t0=$SECONDS
check() { # label, then tcc-gpu arguments
  local label=$1; shift
  timeout 150 $BIN "$@" --check --keep-going | grep -E "^(FAIL|tcc-gpu)" | sed "s/^/[$label] /"
  [ ${PIPESTATUS[0]} -eq 0 ] || status=1
}
echo "== examples (checked against the interpreter)"
QUICK=$([ "${CHECKS:-full}" = quick ] && echo 1 || echo 0)
for g in $([ $QUICK = 1 ] && echo auto tiled || echo auto tiled cublas naive); do check "examples $g" examples/*.tc --ptx-dir $G/examples --gpu-gemm $g; done
echo "== random programs (checked against the interpreter)"
for g in $([ $QUICK = 1 ] && echo auto || echo auto tiled); do check "random $g" bench/gpu/random/*.tc --ptx-dir $G/random --gpu-gemm $g; done
if [ $QUICK = 0 ]; then
  check "random tiled, tiny tiles" bench/gpu/random/*.tc --ptx-dir $G/random_tiny --gpu-gemm tiled
  echo "== tiled kernels on GEMM shapes (checked against the interpreter)"
  for d in $G/tiled_*; do check "$(basename $d)" $d/*.tc --gpu-gemm tiled; done
fi
echo "== C host shims: compiled with the CUDA headers, run, outputs compared with tcc-gpu's"
if [ "${SHIM:-1}" = 1 ]; then
  shim() { timeout 200 python3 bench/gpu/shim_test.py --tcc-gpu $BIN "$@" | grep -E "^(FAIL|SKIP|shim_test)" | sed "s|^|[shim] |"; [ ${PIPESTATUS[0]} -eq 0 ] || status=1; }
  shim --dir $G/examples examples/*.tc
  shim --dir $G/random $(ls bench/gpu/random/*.tc | head -${SHIM_RANDOM:-20})
  shim --no-check $(for k in 6 13 14 19 21 22; do echo $G/bench/case$k.tc; done)
fi
echo "== checks took $((SECONDS - t0)) s"
echo "== tiled kernels: registers, spills (ptxas -v, sm_90)"
PTXAS=$(command -v ptxas || ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -1)
[ "${PTXAS_V:-1}" = 0 ] || for s in 0 1 2; do
  for k in 0 7; do
    echo "-- tile shape $s, bench case $k"
    $PTXAS -arch=sm_90 -v $G/bench_t$s/case$k.ptx -o /dev/null 2>&1 | grep -B1 -A3 "Function properties" | grep -E "Compiling|registers|spill|stack" | head -8
  done
done
echo "== tile shapes: tiled everywhere (best of 5)"
for k in ${SWEEP-0 5 6 7 13 17 18}; do
  line="case $k:"
  for s in 0 1 2; do
    t=$($BIN $G/bench_t$s/case$k.tc --gpu-gemm tiled --repeat 5 2>/dev/null | grep -oE "time = [0-9.]+ ms  \([0-9.]+ TFLOP/s" | head -1)
    line="$line | shape $s: $t"
  done
  echo "$line"
done
echo "== benchmark against torch.einsum"
PYTHONUNBUFFERED=1 timeout ${BENCH_TIMEOUT:-300} python3 bench/gpu/bench.py run --dir $G/bench --tcc-gpu $BIN --repeat ${REPEAT:-5} \
  --variants ${VARIANTS:-cublas,tiled,naive} --out $OUT/results.md --json $OUT/bench.json || status=1
echo "== device_run.sh exit status $status, $((SECONDS - t0)) s"
exit $status
