#!/bin/sh
# Builds what bench/gpu/epi_device_run.sh needs (issue 19: the tiled kernels'
# store epilogue staged through shared memory, against the direct one) into
# DEST (default target/e19carry), packs it into DEST.tar.xz and copies LLVM's
# shared libraries (tcc-gpu links libLLVM-14, which the device lacks; LLVMLIBS,
# default /work/main/target/llvmlibs.tar.xz, unpacking to llvmlibs/) to
# target/llvmlibs.tar.xz. Carry both files; see epi_device_run.sh.
#   tcc-gpu                the runner (feature cuda; PROFILE=release by default)
#   tri/direct, tri/staged the 18 CCSD(T) triples (sd_t_d1/d2_1..9, n = 16/20/24)
#                          planned with TCC_GPU_EPILOGUE=direct / staged (cost
#                          model's tile; every alternative kept)
#   tri/{direct,staged}_{t1,t2,m1}  the same with one tile shape forced
#                          (TCC_GPU_TILE): t1 128x64x8/8x4, t2 64x64x16/4x4,
#                          m1 64x64x8 with f64 tensor cores (32x32 warps)
#   checks/src/triples     the 18 triples at small unequal extents (5..10)
#   checks/src/random      40 random programs (bench/gpu/random)
#   checks/SET             their PTX + plans, staged: `auto` (cost model),
#                          `tiny` (16,8,4,2,2), `mma` (64,64,8,32,32,mma),
#                          `mma_tiny` (16,32,8,8,16,mma); `direct` for reference
# TCC: a tcc binary with LLVM (default target/release/tcc, else target/debug/tcc).
set -e
PROFILE=${PROFILE:-release}
DEST=${1:-target/e19carry}
LLVMLIBS=${LLVMLIBS:-/work/main/target/llvmlibs.tar.xz}
if [ -z "${TCC:-}" ]; then
  if [ -x target/release/tcc ]; then TCC=target/release/tcc; else TCC=target/debug/tcc; fi
fi
[ -x "$TCC" ] || cargo build --features mpi --bin tcc
if [ "$PROFILE" = release ]; then
  nice cargo build --release --features cuda --bin tcc-gpu
else
  nice cargo build --features cuda --bin tcc-gpu
fi
rm -rf "$DEST" && mkdir -p "$DEST/tri" "$DEST/checks/src/triples" "$DEST/checks/src/random"
for e in direct staged; do
  TCC_GPU_EPILOGUE=$e python3 bench/gpu/cc_suite.py build --group triples --dir "$DEST/tri/$e" --tcc "$TCC" 2>/dev/null
  for s in t1:128,64,8,8,4 t2:64,64,16,4,4 m1:64,64,8,32,32,mma; do
    TCC_GPU_EPILOGUE=$e TCC_GPU_TILE=${s#*:} python3 bench/gpu/cc_suite.py build --group triples \
      --dir "$DEST/tri/${e}_${s%%:*}" --tcc "$TCC" 2>/dev/null
  done
done
# The triples small: every index its own extent, so partial tiles and
# unequal strides show.
python3 bench/gpu/cc_suite.py small --dir "$DEST/checks/src/triples"
ls bench/gpu/random/*.tc | head -40 | xargs -I{} cp {} "$DEST/checks/src/random/"
for set in auto:staged: tiny:staged:16,8,4,2,2 mma:staged:64,64,8,32,32,mma mma_tiny:staged:16,32,8,8,16,mma direct:direct:; do
  name=${set%%:*}; rest=${set#*:}; epi=${rest%%:*}; tile=${rest#*:}
  mkdir -p "$DEST/checks/$name"
  for f in "$DEST"/checks/src/triples/*.tc "$DEST"/checks/src/random/*.tc; do
    n=$(basename "$f" .tc)
    if [ -n "$tile" ]; then
      TCC_GPU_EPILOGUE=$epi TCC_GPU_TILE=$tile $TCC build --target cuda --gpu-gemm tiled "$f" -o "$DEST/checks/$name/$n.ptx" 2>/dev/null || true
    else
      TCC_GPU_EPILOGUE=$epi $TCC build --target cuda "$f" -o "$DEST/checks/$name/$n.ptx" 2>/dev/null || true
    fi
  done
done
cp "target/$PROFILE/tcc-gpu" bench/gpu/cc_suite.py bench/gpu/epi_device_run.sh bench/gpu/epi_table.py bench/gpu/cuda_env.sh "$DEST/"
[ "$LLVMLIBS" -ef target/llvmlibs.tar.xz ] || cp "$LLVMLIBS" target/llvmlibs.tar.xz
tar cf - -C "$(dirname "$DEST")" "$(basename "$DEST")" | xz -T2 -3 > "$DEST.tar.xz"
du -sh "$DEST" "$DEST.tar.xz" target/llvmlibs.tar.xz
