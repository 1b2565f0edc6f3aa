#!/bin/bash
# Device run of issue 19, from the folder bench/gpu/cc_prepare.sh filled
# (`OUT=... bash cc_device_run.sh`):
#   1. the examples and 120 random programs checked against the interpreter
#      with the cost model's plans and with f64 tensor-core tiles forced; an
#      f32 GEMM with --tf32 checked and timed against plain f32;
#      registers and spills of the tensor-core kernels (ptxas -v, sm_90);
#   2. the held-out CC suite (cc_suite.py) against torch.einsum and
#      cupy.einsum in one run, every output checked against torch's, tcc-gpu
#      also timing cuBLAS and tiled kernels forced;
#   3. per case: tiled without tensor cores (cc_fma) and each tensor-core tile
#      shape (cc_mmaN), tiled forced, best of 5;
#   4. cuBLAS writing permuted outputs in place against via scratch.
# Writes $OUT/device_log.txt, $OUT/cc_results.md, $OUT/cc.json.
# STAGES (default "1 2 3 4") picks stages, CHECK_SETS the plan sets of stage 1
# (auto mma_tiny mma_big), CASES the suite's case numbers of stage 3 (all).
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/g19out}; mkdir -p $OUT
exec > >(tee $OUT/device_log.txt) 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader
STAGES=${STAGES:-1 2 3 4}
t0=$SECONDS
stage() { [[ " $STAGES " == *" $1 "* ]]; }
if stage 1; then
  echo "== 1. checks against the interpreter"
  for d in ${CHECK_SETS:-auto mma_tiny mma_big}; do
    g=$([ $d = auto ] && echo auto || echo tiled)
    for s in examples random; do
      timeout 120 ./tcc-gpu src/$s/*.tc --ptx-dir checks/$d --gpu-gemm $g --check --keep-going 2>&1 |
        grep -E "^(FAIL|tcc-gpu)" | sed "s/^/[$s $d] /"
    done
  done
  echo "-- f32 GEMM, --tf32 against plain f32 (1024: checked; 8192: best of 5)"
  for d in tf32 f32; do
    ./tcc-gpu src/tf32/mm1024.tc --ptx-dir checks/$d --check 2>&1 | grep -E "check|FAIL|error" | sed "s/^/[$d 1024] /"
    ./tcc-gpu src/tf32/mm8192.tc --ptx-dir checks/$d --repeat 5 2>&1 | grep -oE "time = .*TFLOP/s" | sed "s/^/[$d 8192] /"
  done
  PTXAS=$(command -v ptxas || ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -1)
  for d in cc_mma0 cc_mma1 cc_mma2 cc_fma; do
    echo "-- ptxas -v, $d/cc0.ptx"
    $PTXAS -arch=sm_90 -v $d/cc0.ptx -o /dev/null 2>&1 | grep -E "registers|spill" | head -4
  done
  echo "== checks took $((SECONDS - t0)) s"
fi
if stage 2; then
  echo "== 2. cc suite (auto plan; variants cublas, tiled forced)"
  PYTHONUNBUFFERED=1 timeout ${SUITE_TIMEOUT:-330} python3 cc_suite.py run --dir cc --tcc-gpu ./tcc-gpu --repeat ${REPEAT:-10} \
    --variants cublas,tiled --tmp ${TMPDIR:-/tmp} --out $OUT/cc_results.md --json $OUT/cc.json ${ONLY:+--only $ONLY}
  echo "== suite done at $((SECONDS - t0)) s"
fi
if stage 3; then
  echo "== 3. tiled forced: without tensor cores, and each tensor-core shape (best of 5, device time)"
  for k in ${CASES:-$(seq 0 ${LAST:-30})}; do
    [ $((SECONDS - t0)) -gt ${TILE_DEADLINE:-520} ] && { echo "stopped: time"; break; }
    [ -f cc/cc$k.tc ] || break
    n=$(python3 -c "import json;print(json.load(open('cc/manifest.json'))['cases'][$k]['name'])")
    line="$n"
    for d in cc_fma cc_mma0 cc_mma1 cc_mma2; do
      t=$(timeout 30 ./tcc-gpu $d/cc$k.tc --repeat 5 --gpu-gemm tiled 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)
      line="$line | $d: $t"
    done
    echo "$line"
  done
fi
if stage 4; then
  echo "== 4. cuBLAS in place vs scratch (best of 5, device time)"
  for k in $(seq 0 ${LAST:-30}); do
    [ $((SECONDS - t0)) -gt ${CMP_DEADLINE:-560} ] && { echo "stopped: time"; break; }
    [ -f cc/cc$k.tc ] || break
    n=$(python3 -c "import json;print(json.load(open('cc/manifest.json'))['cases'][$k]['name'])")
    a=$(timeout 30 ./tcc-gpu cc_inplace/cc$k.tc --repeat 5 --gpu-gemm cublas 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)
    b=$(timeout 30 ./tcc-gpu cc_scratch/cc$k.tc --repeat 5 --gpu-gemm cublas 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)
    echo "$n | in place: $a | scratch: $b"
  done
fi
echo "== total $((SECONDS - t0)) s"
