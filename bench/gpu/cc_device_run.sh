#!/bin/bash
# Device run of issue 19: the held-out CC suite (bench/gpu/cc_suite.py) against
# torch.einsum and cupy.einsum in one run, every output checked against torch's,
# tcc-gpu also timing cuBLAS and tiled kernels forced; then cuBLAS writing the
# permuted outputs in place against cuBLAS through a scratch matrix. Run from the
# folder bench/gpu/cc_prepare.sh filled (`OUT=... bash cc_device_run.sh`);
# writes $OUT/device_log.txt, $OUT/cc_results.md, $OUT/cc.json.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/g19out}; mkdir -p $OUT
exec > >(tee $OUT/device_log.txt) 2>&1
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
chmod +x tcc-gpu
nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader
t0=$SECONDS
echo "== cc suite (auto plan; variants cublas, tiled forced)"
PYTHONUNBUFFERED=1 timeout ${SUITE_TIMEOUT:-330} python3 cc_suite.py run --dir cc --tcc-gpu ./tcc-gpu --repeat ${REPEAT:-10} \
  --variants cublas,tiled --tmp ${TMPDIR:-/tmp} --out $OUT/cc_results.md --json $OUT/cc.json ${ONLY:+--only $ONLY}
echo "== suite took $((SECONDS - t0)) s"
echo "== cuBLAS in place vs scratch (best of 5, device time; plans built with TCC_GPU_IN_PLACE=1 / 0)"
for k in $(seq 0 ${LAST:-30}); do
  [ $((SECONDS - t0)) -gt ${CMP_DEADLINE:-480} ] && { echo "stopped: time"; break; }
  n=$(python3 -c "import json;print(json.load(open('cc/manifest.json'))['cases'][$k]['name'])")
  a=$(timeout 30 ./tcc-gpu cc_inplace/cc$k.tc --repeat 5 --gpu-gemm cublas 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)
  b=$(timeout 30 ./tcc-gpu cc_scratch/cc$k.tc --repeat 5 --gpu-gemm cublas 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)
  echo "$n | in place: $a | scratch: $b"
done
echo "== total $((SECONDS - t0)) s"
