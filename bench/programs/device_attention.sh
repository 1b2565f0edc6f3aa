#!/bin/bash
# The attention block on the GPU machine's 16-core host (issue 18): the GETT
# epilogue on and off (TCC_GETT_EPILOGUE, read when tcc compiles), where the time
# goes per statement (bench/programs/steps.py), then every program. Carries what
# bench/programs/device_run.sh carries (target/wheels, target/pywheels,
# target/pylibs.tar.xz; bench/programs/prepare_device.sh builds them). Writes
# $OUT/attention-16.md, $OUT/bound-{2,16}.md (bench/programs/bound.py: the least
# time any implementation of the block can take), $OUT/steps-16.md,
# $OUT/steps-2.md, $OUT/programs-16.md, $OUT/programs-2.md.
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
for e in 1 0 1 0; do
  echo "TCC_GETT_EPILOGUE=$e"
  TCC_GETT_EPILOGUE=$e $PY bench/programs/bench.py --threads 16 --reps 3 --only attention_block
done 2>&1 | tee "$OUT/attention-16.md"
$PY bench/programs/bound.py --threads 2 | tee "$OUT/bound-2.md"
$PY bench/programs/bound.py --threads 16 | tee "$OUT/bound-16.md"
$PY bench/programs/steps.py --threads 16 --reps 5 | tee "$OUT/steps-16.md"
$PY bench/programs/steps.py --threads 2 --reps 3 | tee "$OUT/steps-2.md"
$PY bench/programs/bench.py --threads 16 --reps 3 | tee "$OUT/programs-16.md"
$PY bench/programs/bench.py --threads 2 --reps 3 | tee "$OUT/programs-2.md"
