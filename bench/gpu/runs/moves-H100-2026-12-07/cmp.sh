#!/bin/bash
# Old (906d8ba), mid (fbd2a8d: an item per 4096 points) and new (an item per move, block tables) tile moves on the CCD residual, tile 50; then the new kernel's checks.
cd "$(dirname "$0")"; . ./cuda_env.sh; chmod +x */tcc-gpu
nvidia-smi -L
for r in 1 2; do for v in old mid new; do for n in ccd_20_100 ccd_20_200; do
  echo "r$r $v $n: $(timeout 60 ./$v/tcc-gpu $n.tc --tiled --tile 50 --ptx-dir $v/ptx --repeat 5 2>&1 | grep -E 'gpu: [0-9]|norm2|error' | tr -s ' ' | tr '\n' ' ')"
done; done; done
for t in 3 32; do timeout 120 ./new/tcc-gpu check/*.tc --tiled --tile $t --ptx-dir new/ptx --check --keep-going 2>&1 | grep -E "^(FAIL|tcc-gpu)"; done
