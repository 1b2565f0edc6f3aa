#!/bin/sh
# Builds what bench/gpu/cc_device_run.sh needs into DEST (default
# target/g19carry; pass it to the device as one carried folder): the release
# runner tcc-gpu (feature cuda), bench/gpu/cc_suite.py and the suite's PTX +
# plans three ways:
#   cc/          the cost model's plans (every alternative kept: tcc-gpu --variants)
#   cc_inplace/  TCC_GPU_IN_PLACE=1: cuBLAS writes permuted outputs in place
#   cc_scratch/  TCC_GPU_IN_PLACE=0: cuBLAS through a scratch matrix and a copy
# TCC: a tcc binary with LLVM (default target/release/tcc; a debug build will do).
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-target/g19carry}
[ -x "$TCC" ] || cargo build --release --bin tcc
cargo build --release --features cuda --bin tcc-gpu
rm -rf "$DEST" && mkdir -p "$DEST"
python3 bench/gpu/cc_suite.py build --dir "$DEST/cc" --tcc "$TCC" 2>/dev/null
TCC_GPU_IN_PLACE=1 python3 bench/gpu/cc_suite.py build --dir "$DEST/cc_inplace" --tcc "$TCC" 2>/dev/null
TCC_GPU_IN_PLACE=0 python3 bench/gpu/cc_suite.py build --dir "$DEST/cc_scratch" --tcc "$TCC" 2>/dev/null
cp target/release/tcc-gpu bench/gpu/cc_suite.py bench/gpu/cc_device_run.sh "$DEST/"
du -sh "$DEST"
