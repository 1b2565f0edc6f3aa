#!/bin/bash
# Device side of bench/gpu/knobs_prepare.sh (issue 19, about 5 minutes):
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf knobs19.tar.xz -C /tmp && OUT=$OUT bash /tmp/knobs19/knobs_run.sh
# 1. the checked variants' random programs and small triples against the interpreter;
# 2. registers and spills of each variant's triples kernel (ptxas -v, sm_90);
# 3. every case under every variant, best of 10 (ms), two rounds in
#    alternating order (so that clock drift shows);
# 4. the held-out suite against torch.einsum and cupy.einsum with the best variant;
# 5. ncu of the NCU_VARIANTS (default base) and best kernels of the NCU_CASES (default cc4,
#    an n = 20 triple), if ncu is there and time is left.
cd "$(dirname "$0")"; . ./cuda_env.sh; chmod +x tcc-gpu
OUT=${OUT:-/tmp/knobsout}; mkdir -p "$OUT"
exec > >(tee "$OUT/knobs_log.txt") 2>&1
nvidia-smi -L
ms() { grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+"; }
for d in checks/*/; do d=${d%/}
  for s in random small; do
    fs=$(for p in $d/*.ptx; do b=$(basename $p .ptx); [ -f src/$s/$b.tc ] && echo src/$s/$b.tc; done)
    r=$(timeout 60 ./tcc-gpu $fs --ptx-dir $d --check --keep-going 2>&1)
    echo "$d $s: $(echo "$fs" | wc -w) programs, $(echo "$r" | grep -cE "^FAIL") FAIL; $(echo "$r" | tail -1 | cut -c1-100)"
  done
done
PTXAS=$(command -v ptxas || ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -1)
for d in v/*/; do d=${d%/}
  echo "ptxas $d: $($PTXAS -arch=sm_90 -v $d/cc5.ptx -o /dev/null 2>&1 | grep -oE "function '[a-z0-9_]+'|Used [0-9]+ registers|[0-9]+ bytes spill (stores|loads)|[0-9]+ bytes smem" | tr '\n' ' ')"
done
names=$(ls v)
for round in 1 2; do
  [ $round = 2 ] && names=$(echo "$names" | tac)
  for c in $(ls v/base/*.tc | sed 's/.*cc\([0-9]*\).tc/\1/' | sort -n); do
    line="r$round cc$c"
    for n in $names; do
      [ -f v/$n/cc$c.tc ] && line="$line | $n $(timeout 20 ./tcc-gpu v/$n/cc$c.tc --repeat 10 2>&1 | ms)"
    done
    echo "$line"
  done
  [ $SECONDS -gt ${ROUND2_BEFORE:-200} ] && break
done
# The suite against torch and cupy with the variant of the best geometric
# mean over the swept cases (among those with a suite build).
best=$(python3 knobs_pick.py "$OUT/knobs_log.txt" suite)
# SUITE_ON=H200: the suite only where the card's name holds it.
if [ -z "${SUITE_ON:-}" ] || nvidia-smi -L | grep -q "$SUITE_ON"; then
  echo "suite with: $best ($(cat v/$best/env))"
  PYTHONUNBUFFERED=1 timeout ${SUITE_TIMEOUT:-230} python3 cc_suite.py run --dir suite/$best --tcc-gpu ./tcc-gpu --repeat ${SUITE_REPEAT:-5} \
    --tmp ${TMPDIR:-/tmp} --out "$OUT/cc_results.md" --json "$OUT/cc.json" > "$OUT/suite_log.txt" 2>&1
  echo "suite rc=$?"; grep -E "^- " "$OUT/cc_results.md" | head -8
else
  echo "suite skipped: not an $SUITE_ON"
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ] && [ -z "${NO_NCU:-}" ]; then
  for n in $(echo ${NCU_VARIANTS:-base} $best | tr ' ' '\n' | awk '!seen[$0]++'); do for c in ${NCU_CASES:-4}; do
    [ $SECONDS -gt ${NCU_BEFORE:-520} ] && break
    timeout 45 $NCU --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section SourceCounters --section LaunchStats --section SchedulerStats -k regex:tcc_k --launch-count 1 ./tcc-gpu v/$n/cc$c.tc --repeat 1 > "$OUT/ncu_${n}_cc$c.txt" 2>&1
    echo "ncu $n cc$c rc=$?"
  done; done
fi
echo "total $SECONDS s"
