#!/bin/bash
# CPU scaling on the device machine (16 cores): the suite's libraries, built on the
# development machine for AVX-512 and for AVX2 (`prepare_device.sh`), run against
# numpy.einsum at 16, 4 and 1 threads. Writes bench/cpu/results-16core-*.md to $OUT.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/bench/cpu/threadpoolctl.whl${PYTHONPATH:+:$PYTHONPATH}"
if grep -qw avx512f /proc/cpuinfo; then D=bench/cpu/device-libs/avx512; else D=bench/cpu/device-libs/avx2; fi
model=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
cores=$(nproc)
echo "CPU: $model, $cores cores; libraries: $D"
python3 -c "import numpy; print('numpy', numpy.__version__)"
out="${OUT:-/tmp}"
for t in 16 4 1; do
  only=""
  [ "$t" != 16 ] && only="--only=matmul 3000,CCSD ladder,4-index step,3D,full contraction,Coulomb,four-index"
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE timeout 400 python3 bench/cpu/bench.py run --dir "$D" --threads "$t" --repeat 3 \
    ${only:+"$only"} --machine "device: $model, $cores cores" --out "$out/cpu_t$t.md" 2>&1 | grep -E "^\| |Median|GEMM-like|dgemm" | grep -v "^| case\|^|---"
done
