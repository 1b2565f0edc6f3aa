#!/bin/bash
# Device run of issue 19's staged store epilogue, from the folder
# bench/gpu/epi_prepare.sh filled; LLVM's libraries unpacked in LLVMLIBS_DIR
# (default /tmp/llvmlibs):
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf e19carry.tar.xz -C /tmp
#   OUT=$OUT bash /tmp/e19carry/epi_device_run.sh
# Stages (STAGES, default "1 2 3 4 5"):
#   1. checks against the interpreter (tcc-gpu --check, tiled kernels forced):
#      the 18 triples at extents 5..10 and 40 random programs, staged epilogue
#      with the cost model's tile, a tiny FMA tile, a real and a tiny f64
#      tensor-core tile (CHECK_SETS; `direct` is there too, for reference;
#      sets starting after CHECK_DEADLINE, default 170 s, are skipped);
#   2. ptxas -v (sm_90): registers and spills of the n = 24 kernel, both ways;
#   3. the 18 triples (n = 16/20/24), tiled forced, direct against staged
#      epilogue, alternating, best of REPEAT (10) each: device time;
#   4. the staged plans (cost model) against torch.einsum and cupy.einsum
#      (cc_suite.py run: every output checked against torch's);
#   5. the six n = 24 cases with other tile shapes (t1, t2, m1), both ways.
# Then one table (epi_table.py) of stages 3 and 4. Writes $OUT/epi_log.txt,
# $OUT/epi_times.txt, $OUT/epi_suite.md, $OUT/epi_suite.json, $OUT/epi_table.md.
# Stages after DEADLINE seconds (default 400) are skipped, cases stop there
# too; stage 4 stops after SUITE_TIMEOUT seconds (default 220) or the deadline.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/e19out}; mkdir -p $OUT
exec > >(tee $OUT/epi_log.txt) 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader
STAGES=${STAGES:-1 2 3 4 5}
REPEAT=${REPEAT:-10}
DEADLINE=${DEADLINE:-400}
t0=$SECONDS
stage() { [[ " $STAGES " == *" $1 "* ]] && [ $((SECONDS - t0)) -lt $DEADLINE ]; }
late() { [ $((SECONDS - t0)) -ge $DEADLINE ] && { echo "stopped: deadline ($DEADLINE s)"; return 0; }; return 1; }
ms() { grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+"; }
name() { python3 -c "import json;print(json.load(open('tri/direct/manifest.json'))['cases'][$1]['name'])"; }
if stage 1; then
  echo "== 1. checks against the interpreter (tiled forced)"
  for set in ${CHECK_SETS:-auto tiny mma mma_tiny}; do
    for s in triples random; do
      [ $((SECONDS - t0)) -ge ${CHECK_DEADLINE:-170} ] && { echo "[$set $s] skipped: time"; continue; }
      r=$(timeout 60 ./tcc-gpu checks/src/$s/*.tc --ptx-dir checks/$set --gpu-gemm tiled --check --keep-going 2>&1)
      echo "$r" | grep -E "^FAIL" | head -5 | sed "s/^/[$set $s] /"
      echo "[$set $s] PASS $(echo "$r" | grep -c '^PASS'), FAIL $(echo "$r" | grep -c '^FAIL'): $(echo "$r" | tail -1)"
    done
  done
  echo "== checks took $((SECONDS - t0)) s"
fi
if stage 2; then
  PTXAS=$(command -v ptxas || ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -1)
  for d in direct staged direct_t1 staged_t1 direct_m1 staged_m1; do
    echo "-- ptxas -v, tri/$d/cc2.ptx (sd_t_d1_3, n = 24)"
    [ -n "$PTXAS" ] && $PTXAS -arch=sm_90 -v tri/$d/cc2.ptx -o /dev/null 2>&1 | grep -E "registers|spill" | head -6
  done
fi
: > $OUT/epi_times.txt
if stage 3; then
  echo "== 3. tiled forced, direct vs staged epilogue (best of $REPEAT, device time)"
  for k in $(seq 0 17); do
    late && break
    n=$(name $k)
    # Alternate which goes first from case to case.
    order=$([ $((k % 2)) = 0 ] && echo "direct staged" || echo "staged direct")
    line="$n"
    for e in $order; do
      t=$(timeout 40 ./tcc-gpu tri/$e/cc$k.tc --repeat $REPEAT --gpu-gemm tiled 2>&1 | ms)
      echo "$n|$e|${t:-}" >> $OUT/epi_times.txt
      line="$line | $e ${t:-?} ms"
    done
    echo "$line"
  done
fi
if stage 4; then
  echo "== 4. staged plans (cost model) against torch.einsum and cupy.einsum"
  left=$((DEADLINE - (SECONDS - t0)))
  left=$((left < ${SUITE_TIMEOUT:-220} ? left : ${SUITE_TIMEOUT:-220}))
  PYTHONUNBUFFERED=1 timeout $((left > 30 ? left : 30)) python3 cc_suite.py run --dir tri/staged --tcc-gpu ./tcc-gpu \
    --repeat $REPEAT --tmp ${TMPDIR:-/tmp} --out $OUT/epi_suite.md --json $OUT/epi_suite.json ${ONLY:+--only $ONLY}
  echo "== suite done at $((SECONDS - t0)) s"
fi
if stage 5; then
  echo "== 5. n = 24 with other tile shapes (t1 128x64x8/8x4, t2 64x64x16/4x4, m1 64x64x8 f64 tensor cores)"
  for k in 2 5 8 11 14 17; do
    late && break
    n=$(name $k)
    line="$n"
    for s in t1 t2 m1; do
      for e in direct staged; do
        t=$(timeout 40 ./tcc-gpu tri/${e}_$s/cc$k.tc --repeat $REPEAT --gpu-gemm tiled 2>&1 | ms)
        echo "$n|${e}_$s|${t:-}" >> $OUT/epi_times.txt
        line="$line | ${e}_$s ${t:-?}"
      done
    done
    echo "$line"
  done
fi
python3 epi_table.py $OUT/epi_times.txt $OUT/epi_suite.json | tee $OUT/epi_table.md
echo "== total $((SECONDS - t0)) s"
