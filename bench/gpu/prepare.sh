#!/bin/sh
# Builds everything the device run needs (on a machine with LLVM 14, no GPU):
# release binaries with the `cuda` feature, and PTX + plans of the examples, the
# random programs (twice: default plans, and every binary contraction on cuBLAS)
# and the benchmark suite, under bench/gpu/out/.
set -e
cargo build --release --features cuda --bin tcc --bin tcc-gpu
TCC=target/release/tcc
OUT=bench/gpu/out
rm -rf $OUT && mkdir -p $OUT/examples $OUT/random $OUT/random_blas $OUT/bench
for f in examples/*.tc; do
  n=$(basename $f .tc); $TCC build --target cuda $f -o $OUT/examples/$n.ptx 2>/dev/null
done
for f in bench/gpu/random/*.tc; do
  n=$(basename $f .tc)
  $TCC build --target cuda $f -o $OUT/random/$n.ptx 2>/dev/null
  TCC_GPU_GEMM_MIN=1 $TCC build --target cuda $f -o $OUT/random_blas/$n.ptx 2>/dev/null
done
python3 bench/gpu/bench.py build --dir $OUT/bench --tcc $TCC
cp target/release/tcc-gpu $OUT/tcc-gpu
du -sh $OUT
