#!/bin/sh
# Builds what bench/gpu/half_device_run.sh needs into DEST (default
# target/h19carry; carry that folder, or `tar cf - -C target h19carry | xz -T2 >
# target/h19carry.tar.xz`): the runner tcc-gpu (feature cuda; PROFILE=release by
# default, PROFILE=debug for a quicker build), bench/gpu/half_bench.py and
#   half/cases/     the bf16/f16 benchmark cases (GEMMs, Llama MLP projections,
#                   attention contractions, SwiGLU), PTX + plans;
#   half/random/    40 random 16-bit programs (those of tests/gpu_half.rs, larger);
#   half/examples/  the 16-bit examples (bf16_mlp.tc, rmsnorm_f16.tc);
#   half/checks/auto/  PTX + plans of random/ and examples/ (every alternative
#                   kept: the device run forces cublas, tiled and naive too).
# TCC: a tcc binary with LLVM (default target/release/tcc, else target/debug/tcc).
set -e
PROFILE=${PROFILE:-release}
DEST=${1:-target/h19carry}
if [ -z "${TCC:-}" ]; then
  if [ -x target/release/tcc ]; then TCC=target/release/tcc; else TCC=target/debug/tcc; fi
fi
[ -x "$TCC" ] || cargo build --bin tcc
if [ "$PROFILE" = release ]; then
  cargo build --release --features cuda --bin tcc-gpu
else
  cargo build --features cuda --bin tcc-gpu
fi
rm -rf "$DEST" && mkdir -p "$DEST/half/examples"
cp examples/bf16_mlp.tc examples/rmsnorm_f16.tc "$DEST/half/examples/"
python3 bench/gpu/half_bench.py build --dir "$DEST/half" --tcc "$TCC"
cp "target/$PROFILE/tcc-gpu" bench/gpu/half_bench.py bench/gpu/half_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
du -sh "$DEST"
