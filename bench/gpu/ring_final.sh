#!/bin/bash
# The device call after the ring became the default (issue 19, about 4
# minutes), from the folder bench/gpu/ring_prepare.sh fills (cc/ is built with
# the defaults): the random programs and small triples with the cost model's
# plans against the interpreter, the C host shims of the 16-bit and complex
# examples, then the held-out suite against torch.einsum and cupy.einsum.
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf ring19.tar.xz -C /tmp && OUT=$OUT bash /tmp/ring19/ring_final.sh
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/ringfinal}; mkdir -p "$OUT"
(
  . ./cuda_env.sh; chmod +x tcc-gpu; nvidia-smi -L
  for s in random small; do
    fs=$(for p in checks/auto/*.ptx; do b=$(basename $p .ptx); [ -f src/$s/$b.tc ] && echo src/$s/$b.tc; done)
    r=$(timeout 60 ./tcc-gpu $fs --ptx-dir checks/auto --check --keep-going 2>&1)
    echo "auto $s: $(echo "$fs" | wc -w) programs, $(echo "$r" | grep -cE "^FAIL") FAIL; $(echo "$r" | tail -1 | cut -c1-100)"
  done
  timeout 120 python3 shim_test.py --tcc-gpu ./tcc-gpu --dir shims shims/*.tc
) 2>&1 | tee "$OUT/checks.txt"
STAGES=2 REPEAT=${REPEAT:-5} SUITE_TIMEOUT=${SUITE_TIMEOUT:-240} OUT=$OUT/s bash cc_device_run.sh > /dev/null 2>&1
grep -E "^- " "$OUT/s/cc_results.md" | head -8
