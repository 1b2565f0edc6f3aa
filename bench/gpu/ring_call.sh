#!/bin/bash
# One device call for issue 19's ring of cp.async buffers (about 9 minutes),
# from the folder bench/gpu/ring_prepare.sh fills:
#   1. ring_quick_run.sh: the ring's checks against the interpreter and key
#      cases under each tile shape (quick.txt);
#   2. the held-out suite with the cost model's tiles on a ring of 4
#      (cc_ring), against torch.einsum and cupy.einsum in the same run (s/);
#   3. the C host shims of the 16-bit and complex examples (shim_test.py);
#   4. ring_device_run.sh for the time left: every case under every shape,
#      cuBLAS and the plan's choice beside them (ring_log.txt).
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf ring19.tar.xz -C /tmp && OUT=$OUT bash /tmp/ring19/ring_call.sh
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/ringcall}; mkdir -p "$OUT"
bash ring_quick_run.sh 2>&1 | tee "$OUT/quick.txt"
mv cc cc_s2 && mv cc_ring cc
STAGES=2 REPEAT=5 SUITE_TIMEOUT=${SUITE_TIMEOUT:-240} OUT=$OUT/s bash cc_device_run.sh > /dev/null 2>&1
mv cc cc_ring && mv cc_s2 cc
grep -E "^- " "$OUT/s/cc_results.md" | head -8
(. ./cuda_env.sh && timeout 120 python3 shim_test.py --tcc-gpu ./tcc-gpu --dir shims shims/*.tc) 2>&1 | tee "$OUT/shim.txt" | tail -8
DEADLINE=${DEADLINE:-130} NCU_BEFORE=${NCU_BEFORE:-150} REPEAT=${REPEAT:-10} OUT=$OUT bash ring_device_run.sh > /dev/null 2>&1
tail -14 "$OUT/ring_log.txt"
