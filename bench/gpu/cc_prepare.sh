#!/bin/sh
# Builds what bench/gpu/cc_device_run.sh needs into DEST (default
# target/g19carry; pack it with `tar cf - -C target g19carry | xz -T2 >
# target/g19carry.tar.xz` and carry that file): the release runner tcc-gpu
# (feature cuda), bench/gpu/cc_suite.py and the suite's PTX + plans:
#   cc/          the cost model's plans with TCC_GPU_MMA=1 (f64 tiled kernels on
#                tensor cores; every alternative kept: tcc-gpu --variants)
#   cc_fma/      TCC_GPU_MMA=0: tiled kernels without f64 tensor cores
#   cc_mmaN/     every tiled kernel with tensor-core tile shape N (the sweep)
#   cc_inplace/  TCC_GPU_IN_PLACE=1: cuBLAS writes permuted outputs in place
#   cc_scratch/  TCC_GPU_IN_PLACE=0: cuBLAS through a scratch matrix and a copy
# and, for the checks against the interpreter on the device, the examples and
# the random programs of bench/gpu/random planned by the cost model with
# TCC_GPU_MMA=1 (checks/auto)
# and with tensor-core tiles forced (checks/mma_tiny, checks/mma_big); an f32
# GEMM with and without --tf32 (checks/tf32, checks/f32).
# TCC: a tcc binary with LLVM (default target/release/tcc; a debug build will do).
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-target/g19carry}
[ -x "$TCC" ] || cargo build --release --bin tcc
cargo build --release --features cuda --bin tcc-gpu
rm -rf "$DEST" && mkdir -p "$DEST"
TCC_GPU_MMA=1 python3 bench/gpu/cc_suite.py build --dir "$DEST/cc" --tcc "$TCC" 2>/dev/null
TCC_GPU_MMA=0 python3 bench/gpu/cc_suite.py build --dir "$DEST/cc_fma" --tcc "$TCC" 2>/dev/null
# The tensor-core shapes of TileCfg::CANDIDATES (src/codegen/nvptx/tiled.rs).
for s in 0:128,128,8,64,32,mma 1:64,64,8,32,32,mma 2:64,64,4,32,32,mma; do
  TCC_GPU_TILE=${s#*:} python3 bench/gpu/cc_suite.py build --dir "$DEST/cc_mma${s%%:*}" --tcc "$TCC" 2>/dev/null
done
TCC_GPU_IN_PLACE=1 python3 bench/gpu/cc_suite.py build --dir "$DEST/cc_inplace" --tcc "$TCC" 2>/dev/null
TCC_GPU_IN_PLACE=0 python3 bench/gpu/cc_suite.py build --dir "$DEST/cc_scratch" --tcc "$TCC" 2>/dev/null
mkdir -p "$DEST/src/examples" "$DEST/src/random" "$DEST/checks/auto" "$DEST/checks/mma_tiny" "$DEST/checks/mma_big"
cp examples/*.tc "$DEST/src/examples/"
cp bench/gpu/random/*.tc "$DEST/src/random/"
for f in examples/*.tc bench/gpu/random/*.tc; do
  n=$(basename $f .tc)
  TCC_GPU_MMA=1 $TCC build --target cuda $f -o "$DEST/checks/auto/$n.ptx" 2>/dev/null || true
  TCC_GPU_TILE=16,32,8,8,16,mma $TCC build --target cuda --gpu-gemm tiled $f -o "$DEST/checks/mma_tiny/$n.ptx" 2>/dev/null || true
  TCC_GPU_TILE=128,128,8,64,32,mma $TCC build --target cuda --gpu-gemm tiled $f -o "$DEST/checks/mma_big/$n.ptx" 2>/dev/null || true
done
# TF32: an f32 GEMM with and without --tf32 (checked at 1024, timed at 8192).
mkdir -p "$DEST/src/tf32" "$DEST/checks/tf32" "$DEST/checks/f32"
for n in 1024 8192; do
  printf 'range N = %s;\nindex i, j, k : N;\ninput tensor A[i,k] : f32;\ninput tensor B[k,j] : f32;\noutput tensor C[i,j] : f32;\nC[i,j] = A[i,k] * B[k,j];\n' $n > "$DEST/src/tf32/mm$n.tc"
  $TCC build --target cuda --tf32 "$DEST/src/tf32/mm$n.tc" -o "$DEST/checks/tf32/mm$n.ptx" 2>/dev/null
  $TCC build --target cuda "$DEST/src/tf32/mm$n.tc" -o "$DEST/checks/f32/mm$n.ptx" 2>/dev/null
done
cp target/release/tcc-gpu bench/gpu/cc_suite.py bench/gpu/cc_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
du -sh "$DEST"
