#!/bin/sh
# Builds everything the device run needs (on a machine with LLVM 14, no GPU) into
# the tree DEST (default: this checkout), so that `cd DEST && bash
# bench/gpu/device_run.sh` runs there: the release runner `tcc-gpu` (feature
# `cuda`), the sources it reads (examples, random programs, benchmark cases), and
# the PTX + plans under DEST/bench/gpu/out/ of
#   examples/      the examples (plans keep every implementation: tcc-gpu --gpu-gemm picks)
#   random/        the random programs of bench/gpu/random
#   random_tiny/   the same with tiny tiles (TCC_GPU_TILE): many blocks and steps
#   tiled_N/       GEMM-shaped programs (tiled_cases.py) with tile shape N (tiny: t)
#   bench/         the benchmark suite (bench.py build)
#   bench_tN/      the suite with every tiled kernel of tile shape N (the sweep)
# TCC: a tcc binary (default target/release/tcc; any build with LLVM will do).
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-.}
[ -x "$TCC" ] || cargo build --release --bin tcc
cargo build --release --features cuda --bin tcc-gpu
OUT=$DEST/bench/gpu/out
rm -rf $OUT && mkdir -p $OUT/examples $OUT/random $OUT/random_tiny
if [ "$DEST" != "." ]; then
  mkdir -p $DEST/examples $DEST/bench/gpu/random $DEST/bench/cpu
  cp examples/*.tc $DEST/examples/
  cp bench/gpu/random/*.tc $DEST/bench/gpu/random/
  cp bench/gpu/*.py bench/gpu/*.sh $DEST/bench/gpu/
  cp bench/cpu/bench.py $DEST/bench/cpu/
fi
TINY=16,8,4,2,2
# The tile shapes of TileCfg::CANDIDATES (src/codegen/nvptx/tiled.rs), and tiny.
SHAPES="0:128,128,8,8,8 1:128,64,8,8,4 2:64,64,16,4,4 t:$TINY"
for f in examples/*.tc; do
  n=$(basename $f .tc); $TCC build --target cuda $f -o $OUT/examples/$n.ptx 2>/dev/null
done
for f in bench/gpu/random/*.tc; do
  n=$(basename $f .tc)
  $TCC build --target cuda $f -o $OUT/random/$n.ptx 2>/dev/null
  TCC_GPU_TILE=$TINY $TCC build --target cuda $f -o $OUT/random_tiny/$n.ptx 2>/dev/null
done
for s in $SHAPES; do
  d=$OUT/tiled_${s%%:*}
  python3 bench/gpu/tiled_cases.py $d >/dev/null
  for f in $d/*.tc; do TCC_GPU_TILE=${s#*:} $TCC build --target cuda --gpu-gemm tiled $f -o ${f%.tc}.ptx 2>/dev/null; done
done
python3 bench/gpu/bench.py build --dir $OUT/bench --tcc $TCC
for s in $SHAPES; do
  [ "${s%%:*}" = t ] && continue
  TCC_GPU_TILE=${s#*:} python3 bench/gpu/bench.py build --dir $OUT/bench_t${s%%:*} --tcc $TCC 2>/dev/null
done
cp target/release/tcc-gpu $OUT/tcc-gpu
du -sh $OUT
