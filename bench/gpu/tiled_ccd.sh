#!/bin/bash
# Tiled programs on the GPU (issue 19, deliverable 3; bench/gpu/results.md):
# the spin-orbital CCD residual of bench/tiled/ccd.py (public equations,
# antisymmetric and spin-blocked tensors) by `tcc-gpu --tiled` against
# torch.einsum on dense tensors and `tcc run --tiled` on the host's cores, in
# one run; and the tiled examples checked against the interpreter.
#   here:   bash bench/gpu/tiled_ccd.sh prepare [DEST]  (default target/tccd; needs
#           target/release/tcc and tcc-gpu built with --features cuda)
#   device: bash tiled_ccd.sh run [DEST]   (LLVM's libraries on LD_LIBRARY_PATH
#           for tcc, as bench/gpu/cuda_env.sh sets them)
set -eu
mode=${1:?prepare or run}; D=${2:-target/tccd}
SIZES=${SIZES:-"10:38 20:100 20:200 30:300"}
if [ "$mode" = prepare ]; then
  rm -rf "$D" && mkdir -p "$D/ptx" "$D/check"
  for s in $SIZES; do
    python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$D/ccd_${s/:/_}.tc', 'w').write(ccd.source(${s%:*}, ${s#*:}))"
  done
  cp examples/tiled/*.tc examples/ccsd_terms.tc examples/programs/ccd.tc examples/programs/ccsd.tc \
    examples/programs/four_index_steps.tc "$D/check/"
  for f in "$D"/*.tc "$D"/check/*.tc; do
    target/release/tcc build "$f" --target cuda --tiled -o "$D/ptx/$(basename "$f" .tc).ptx" > /dev/null
  done
  cp target/release/tcc target/release/tcc-gpu bench/gpu/tiled_ccd_torch.py bench/gpu/tiled_ccd.sh "$D/"
  echo "prepared $D"
else
  cd "$D"
  echo "== checks against the interpreter (tcc-gpu --tiled --check, tile 4 and 32)"
  for t in 4 32; do
    ./tcc-gpu check/*.tc ccd_10_38.tc --tiled --tile $t --ptx-dir ptx --check --keep-going 2>&1 | grep -E "^(FAIL|tcc-gpu)"
  done
  ./tcc-gpu ccd_10_38.tc --tiled --ptx-dir ptx --check 2>&1 | tail -6
  echo "== CCD residual: tcc-gpu --tiled, torch.einsum dense, tcc run --tiled on $(nproc) cores"
  for s in $SIZES; do
    n=ccd_${s/:/_}
    for t in ${TILES:-25 50}; do
      echo "-- $n tile $t: $(timeout 300 ./tcc-gpu $n.tc --tiled --tile $t --ptx-dir ptx --repeat 3 2>&1 | grep -E 'gpu:|stored|error' | tr '\n' ' ')"
    done
    echo "-- $n $(timeout 300 python3 tiled_ccd_torch.py ${s%:*} ${s#*:} 3 2>&1 | tail -1)"
    if [ "${CPU:-1}" = 1 ]; then
      echo "-- $n cpu: $(TCC_NUM_THREADS=$(nproc) timeout 300 ./tcc run $n.tc --tiled --tile ${CPU_TILE:-25} 2>&1 | grep -E 'tiled:' | head -1)"
    fi
  done
fi
