#!/bin/bash
# bench/programs on the GPU machine's 16-core host, which has Python and numpy but
# no Rust and no package registry: the tcc wheels (one per CPython version), the
# pure-Python opt_einsum/threadpoolctl wheels and the shared libraries the
# extension needs (LLVM 14 and its dependencies, not libc) travel with the tree:
#   target/wheels/tcc-*.whl, target/pywheels/*.whl, target/pylibs.tar.xz
# (built by bench/programs/prepare_device.sh). Writes $OUT/programs-16.md and
# $OUT/programs-2.md (the same script here: 2 threads).
set -euo pipefail
PY=${PY:-python3}
V=$($PY -c 'import sys; print(f"cp{sys.version_info.major}{sys.version_info.minor}")')
D=$(mktemp -d)
tar xJf target/pylibs.tar.xz -C target
for w in target/wheels/tcc-*-"$V"-*.whl target/pywheels/*.whl; do
  $PY -m zipfile -e "$w" "$D"
done
export PYTHONPATH="$D" LD_LIBRARY_PATH="$PWD/target/pylibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-/tmp}
nproc; lscpu | grep -E "Model name|^CPU\(s\)" || true
for t in 16 2; do
  $PY bench/programs/bench.py --threads $t --reps 5 | tee "$OUT/programs-$t.md"
done
