#!/bin/bash
# Device side of bench/gpu/sweep_prepare.sh (issue 19): per staged tensor-core
# tile shape, the small triples and random programs checked against the
# interpreter (tiled forced), then the triples timed (tiled forced, best of
# REPEAT, device time); then abik,kj->abij with cuBLAS and the tiled kernel
# forced. LLVM's libraries unpacked in LLVMLIBS_DIR (default /tmp/llvmlibs):
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf sweep19.tar.xz -C /tmp
#   OUT=$OUT bash /tmp/sweep19/sweep_device_run.sh
# Writes $OUT/sweep_log.txt and $OUT/sweep_times.txt (shape|case|ms).
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/sweepout}; mkdir -p "$OUT"
exec > >(tee "$OUT/sweep_log.txt") 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L
REPEAT=${REPEAT:-10}
CASES=${CASES:-"0 1 2 4 5 7 8 9 10 11 13 14 16 17"}
DEADLINE=${DEADLINE:-420}
t0=$SECONDS
: > "$OUT/sweep_times.txt"
for d in s_*; do
  r=$(timeout 90 ./tcc-gpu src/small/*.tc --ptx-dir "$d/checks" --gpu-gemm tiled --check --keep-going 2>&1)
  echo "$r" | grep -E "^FAIL" | head -3 | sed "s/^/[$d] /"
  echo "[$d] checks: PASS $(echo "$r" | grep -c '^PASS'), FAIL $(echo "$r" | grep -c '^FAIL')"
done
for k in $CASES; do
  [ $((SECONDS - t0)) -ge "$DEADLINE" ] && { echo "stopped: deadline"; break; }
  line="cc$k"
  for d in s_*; do
    t=$(timeout 40 ./tcc-gpu "$d/cc$k.tc" --repeat "$REPEAT" --gpu-gemm tiled 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+")
    echo "$d|cc$k|${t:-}" >> "$OUT/sweep_times.txt"
    line="$line | ${d#s_} ${t:-?}"
  done
  echo "$line"
done
for g in cublas tiled; do
  echo "abik,kj->abij (150,150,40,40,40) --gpu-gemm $g: $(timeout 40 ./tcc-gpu skinny/abik.tc --repeat "$REPEAT" --gpu-gemm $g 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)"
done
echo "== total $((SECONDS - t0)) s"
