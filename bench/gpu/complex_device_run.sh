#!/bin/bash
# Device run of issue 21's complex programs on the GPU, from the folder
# bench/gpu/complex_prepare.sh filled (`OUT=... bash complex_device_run.sh`):
#   1. tcc-gpu --check on every complex program (the examples with complex
#      tensors and 20 random ones): the plan of the lowered program that
#      `tcc build --target cuda` wrote, run on the GPU with the cost model's
#      choices and with cuBLAS, tiled and naive kernels forced, outputs joined
#      and compared with the complex interpreter;
#   2. the C shim of complex_zg.tc (taking double _Complex* / float _Complex*)
#      compiled with gcc against the CUDA headers, called from complex_driver.c
#      on inputs numpy wrote, outputs compared with numpy (complex_check.py);
#      a wrong length, a NULL and an overlap refused.
# Writes $OUT/complex_log.txt; exit 1 on any failure. Under 2 minutes.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/c21out}; mkdir -p "$OUT"
exec > >(tee "$OUT/complex_log.txt") 2>&1
. ./cuda_env.sh
chmod +x tcc-gpu
nvidia-smi -L
t0=$SECONDS
status=0
echo "== 1. tcc-gpu --check on the complex programs (plans of tcc build --target cuda)"
for g in auto cublas tiled naive; do
  timeout 40 ./tcc-gpu src/*.tc --ptx-dir ptx --gpu-gemm $g --check --keep-going > "$OUT/check_$g.txt" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  grep -E "^(FAIL|tcc-gpu|error)" "$OUT/check_$g.txt" | sed "s/^/[$g] /"
  [ $rc -eq 124 ] && echo "[$g] timed out"
done
for g in auto cublas tiled naive; do
  echo "[$g] $(grep -c 'check: matches the complex interpreter' "$OUT/check_$g.txt") programs checked against the complex interpreter"
done
echo "== checks took $((SECONDS - t0)) s"
echo "== 2. the C shim of complex_zg.tc called from C, against numpy"
# CUDA_INC (a folder with cuda.h and cublas_v2.h) and CUDA_LINK override the search.
CUDA_H=${CUDA_INC:+$CUDA_INC/cuda.h}; BLAS_H=${CUDA_INC:+$CUDA_INC/cublas_v2.h}
[ -n "$CUDA_H" ] || CUDA_H=$(ls /usr/local/cuda*/include/cuda.h 2>/dev/null | tail -1)
[ -n "$BLAS_H" ] || BLAS_H=$(ls /usr/local/cuda*/include/cublas_v2.h 2>/dev/null | tail -1)
[ -n "$CUDA_H" ] || CUDA_H=$(python3 -c "import glob,site;print((sorted(glob.glob(site.getsitepackages()[0]+'/nvidia/**/cuda.h',recursive=True)) or [''])[-1])")
[ -n "$BLAS_H" ] || BLAS_H=$(python3 -c "import glob,site;print((sorted(glob.glob(site.getsitepackages()[0]+'/nvidia/**/cublas_v2.h',recursive=True)) or [''])[-1])")
LIBDIRS=""
for d in $(ls -d /usr/local/cuda*/lib64 /usr/local/cuda*/lib64/stubs 2>/dev/null) $(echo "$LIBS" | tr ':' ' '); do LIBDIRS="$LIBDIRS -L$d"; done
echo "cuda.h: ${CUDA_H:-none}; cublas_v2.h: ${BLAS_H:-none}"
cd zg
if gcc -O2 -std=gnu99 -Wall -o drv complex_driver.c zg.c -I. -I"$(dirname "$CUDA_H")" -I"$(dirname "$BLAS_H")" $LIBDIRS \
    ${CUDA_LINK:--lcublas -lcuda} -lpthread -lm 2> "$OUT/zg_gcc.txt"; then
  python3 complex_check.py inputs . && timeout 60 ./drv . && python3 complex_check.py check . || { status=1; echo "FAIL: the C driver"; }
else
  status=1; echo "FAIL: gcc"; head -20 "$OUT/zg_gcc.txt"
fi
cd ..
echo "== total $((SECONDS - t0)) s; status $status"
exit $status
