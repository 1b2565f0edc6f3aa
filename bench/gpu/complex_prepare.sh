#!/bin/sh
# Builds what bench/gpu/complex_device_run.sh needs into DEST (default
# target/c21carry; carry that folder, or `tar cf - -C target c21carry | xz -T2 >
# target/c21carry.tar.xz`): the runner tcc-gpu (feature cuda), the complex
# programs and the PTX + plans + C shims `tcc build --target cuda` writes for
# them (the plans of their lowering to real parts, every alternative kept):
#   src/         examples/density_c64.tc, examples/complex_mps.tc (every example
#                with complex tensors) and 20 random complex programs
#                (bench/gpu/complex_random.py, seed 21)
#   ptx/         NAME.ptx, NAME.plan.json, NAME.c, NAME.h of each
#   zg/          bench/gpu/complex_zg.tc built with --target cuda (zg.c, zg.h,
#                zg.ptx), the C driver complex_driver.c and complex_check.py
# The device has no LLVM, so `tcc run --target cuda` cannot run there: tcc-gpu
# runs the plans `tcc build --target cuda` wrote (the same lowered program and
# plan as `tcc run --target cuda`) and --check compares with the complex
# interpreter.
# PROFILE=release (default) or debug (a check of this script: FEATURES=mpi,cuda
# reuses a debug build made with --features mpi); TCC: the tcc that builds.
set -e
PROFILE=${PROFILE:-release}
FEATURES=${FEATURES:-cuda}
DEST=${1:-target/c21carry}
if [ "$PROFILE" = release ]; then
  TCC=${TCC:-target/release/tcc}
  [ -x "$TCC" ] || cargo build --release --bin tcc
  cargo build --release --features "$FEATURES" --bin tcc-gpu
else
  TCC=${TCC:-target/debug/tcc}
  [ -x "$TCC" ] || cargo build --features mpi --bin tcc
  cargo build --features "$FEATURES" --bin tcc-gpu
fi
rm -rf "$DEST" && mkdir -p "$DEST/src" "$DEST/ptx" "$DEST/zg"
for f in examples/*.tc; do
  if grep -qE ': *c(64|128)' "$f"; then cp "$f" "$DEST/src/"; fi
done
python3 bench/gpu/complex_random.py "$DEST/src" 20 21
for f in "$DEST"/src/*.tc; do
  n=$(basename "$f" .tc)
  $TCC build --target cuda "$f" -o "$DEST/ptx/$n.ptx" 2>/dev/null || { echo "tcc build --target cuda failed: $f"; exit 1; }
done
$TCC build --target cuda bench/gpu/complex_zg.tc -o "$DEST/zg/zg.ptx" 2>/dev/null
cp bench/gpu/complex_zg.tc bench/gpu/complex_driver.c bench/gpu/complex_check.py "$DEST/zg/"
cp "target/$PROFILE/tcc-gpu" bench/gpu/complex_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
echo "$(ls "$DEST"/src/*.tc | wc -l) programs in $DEST"
du -sh "$DEST"
