#!/bin/bash
# The whole GPU check, in one go, on the GPU machine (see book/src/gpu.md):
#   1. every example and the 120 random programs of bench/gpu/random (PTX built with
#      default plans, and again with every binary contraction on cuBLAS), run by
#      tcc-gpu and checked against the interpreter: PASS/FAIL lines;
#   2. the benchmark suite against torch.einsum on the same GPU (bench.py run).
# Needs bench/gpu/out from bench/gpu/prepare.sh (carry it: it is git-ignored).
# Writes $OUT/device_log.txt and $OUT/results.md.
set -u
OUT=${OUT:-/tmp/tccgpu-out}
mkdir -p "$OUT"
LOG=$OUT/device_log.txt
exec > >(tee "$LOG") 2>&1
G=bench/gpu/out
BIN=$G/tcc-gpu
chmod +x $BIN
echo "== device"; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader
# cuBLAS: the CUDA toolkit's, else the pip wheels torch uses.
LIBS=$(python3 - <<'PY'
import glob, os, site
dirs = set()
for pat in ["/usr/local/cuda*/lib64/libcublas.so*", "/usr/local/cuda*/targets/*/lib/libcublas.so*"] + [p + "/nvidia/**/libcublas.so*" for p in site.getsitepackages()]:
    for f in glob.glob(pat, recursive=True):
        dirs.add(os.path.dirname(f))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH=${LIBS}:${LD_LIBRARY_PATH:-}
echo "cuBLAS folders: $LIBS"
ls $(echo $LIBS | tr ':' ' ') 2>/dev/null | grep -E "libcublas(Lt)?\.so" | sort -u | tr '\n' ' '; echo
status=0
echo "== examples (checked against the interpreter)"
timeout 120 $BIN examples/*.tc --ptx-dir $G/examples --check --keep-going | grep -E "^(PASS|FAIL|tcc-gpu)" || status=1
echo "== random programs, default plans"
timeout 120 $BIN bench/gpu/random/*.tc --ptx-dir $G/random --check --keep-going | grep -E "^(FAIL|tcc-gpu)" || status=1
echo "== random programs, every binary contraction on cuBLAS"
timeout 120 $BIN bench/gpu/random/*.tc --ptx-dir $G/random_blas --check --keep-going | grep -E "^(FAIL|tcc-gpu)" || status=1
echo "== one full report"
$BIN examples/four_index.tc --ptx-dir $G/examples --check --repeat 3
echo "== benchmark against torch.einsum"
PYTHONUNBUFFERED=1 timeout ${BENCH_TIMEOUT:-420} python3 bench/gpu/bench.py run --dir $G/bench --tcc-gpu $BIN --repeat ${REPEAT:-10} --out $OUT/results.md || status=1
echo "== device_run.sh exit status $status"
exit $status
