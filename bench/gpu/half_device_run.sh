#!/bin/bash
# Device run of issue 19 (bf16/f16 on the GPU), from the folder
# bench/gpu/half_prepare.sh filled (`OUT=... bash half_device_run.sh`):
#   1. the 16-bit examples and 40 random 16-bit programs run with tcc-gpu
#      --check against the interpreter (per-type tolerance: bf16 2e-2, f16 3e-3
#      of the largest magnitude), with the cost model's plan and with cuBLAS,
#      tiled and naive kernels forced: PASS/FAIL per file and counts;
#   2. the benchmark (half_bench.py run): each bf16/f16 case by tcc-gpu and by
#      torch in the same run, the bf16 and f16 peak measured with torch.matmul,
#      ratio tcc/torch and fraction of the measured peak.
# Writes $OUT/half_log.txt, $OUT/half_results.md, $OUT/half.json. Under ~4
# minutes: stage 2 skips cases after DEADLINE seconds (default 170).
# STAGES (default "1 2") picks stages; ONLY (e.g. 0,4) picks benchmark cases.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/h19out}; mkdir -p $OUT
exec > >(tee $OUT/half_log.txt) 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader
STAGES=${STAGES:-1 2}
t0=$SECONDS
stage() { [[ " $STAGES " == *" $1 "* ]]; }
if stage 1; then
  echo "== 1. 16-bit programs against the interpreter (tcc-gpu --check)"
  for g in auto cublas tiled naive; do
    for s in examples random; do
      timeout 100 ./tcc-gpu half/$s/*.tc --ptx-dir half/checks/auto --gpu-gemm $g --check --keep-going 2>&1 |
        grep -E "^(FAIL|tcc-gpu|error)|passed|failed" | sed "s/^/[$s $g] /"
    done
  done
  echo "-- one report in full (bf16_mlp, auto)"
  ./tcc-gpu half/examples/bf16_mlp.tc --ptx-dir half/checks/auto --check 2>&1 | tail -8
  echo "== checks took $((SECONDS - t0)) s"
fi
if stage 2; then
  echo "== 2. bf16/f16 cases against torch (best of ${REPEAT:-10}, device time)"
  PYTHONUNBUFFERED=1 timeout ${BENCH_TIMEOUT:-230} python3 half_bench.py run --dir half --tcc-gpu ./tcc-gpu \
    --repeat ${REPEAT:-10} --tmp ${TMPDIR:-/tmp} --deadline ${DEADLINE:-170} \
    --out $OUT/half_results.md --json $OUT/half.json ${ONLY:+--only $ONLY}
  echo "== benchmark done at $((SECONDS - t0)) s"
fi
echo "== total $((SECONDS - t0)) s"
