#!/bin/bash
# Issue 19: where the triples' tiled kernel spends its time, and the suite when
# the card is an H200 (about 1 minute on an H100, 5 on an H200). From the
# folder bench/gpu/ring_prepare.sh fills (cc/ built with the defaults):
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf ring19.tar.xz -C /tmp && cp bench/gpu/profile_run.sh /tmp/ring19/ && OUT=$OUT bash /tmp/ring19/profile_run.sh
# 1. ncu --set full of the tiled kernel of sd_t_d1_6 (n = 24, cc5) and
#    sd_t_d1_5 (n = 20, cc4), with the source view's hot SASS lines;
# 2. on an H200 only, ring_final.sh (checks, C shims, the held-out suite).
cd "$(dirname "$0")"; . ./cuda_env.sh; chmod +x tcc-gpu
OUT=${OUT:-/tmp/profile}; mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for c in 5 4; do
  timeout 150 "$NCU" --set full --import-source no -k regex:tcc_k --launch-count 1 \
    ./tcc-gpu cc/cc$c.tc --repeat 1 > "$OUT/ncu_cc$c.txt" 2>&1
  echo "ncu cc$c rc=$? ($SECONDS s)"
  timeout 60 "$NCU" --section SourceCounters --page source --print-source sass -k regex:tcc_k --launch-count 1 \
    ./tcc-gpu cc/cc$c.tc --repeat 1 > "$OUT/ncu_src_cc$c.txt" 2>&1
  echo "ncu source cc$c rc=$? ($SECONDS s)"
done
if grep -q H200 "$OUT/gpu.txt"; then
  REPEAT=10 OUT=$OUT/final bash ring_final.sh
fi
echo "total $SECONDS s"
