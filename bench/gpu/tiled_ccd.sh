#!/bin/bash
# Tiled programs on the GPU (issue 19, deliverable 3; bench/gpu/results.md):
# the spin-orbital CCD residual of bench/tiled/ccd.py (public equations,
# antisymmetric and spin-blocked tensors) by `tcc-gpu --tiled` against
# torch.einsum on dense tensors and `tcc run --tiled` on the host's cores, in
# one run; and the tiled examples, `max`/`min`/`where` programs
# (bench/gpu/tiled_special/) and windows (affine subscripts) included, checked
# against the interpreter.
#   here:   bash bench/gpu/tiled_ccd.sh prepare [DEST]  (default target/tccd; needs
#           target/release/tcc and tcc-gpu built with --features cuda)
#   device: bash tiled_ccd.sh run [DEST]   (LLVM's libraries on LD_LIBRARY_PATH
#           for tcc, as bench/gpu/cuda_env.sh sets them)
set -u
mode=${1:?prepare or run}; D=${2:-target/tccd}
SIZES=${SIZES:-"10:38 20:100 20:200 30:300"}
if [ "$mode" = prepare ]; then
  set -e
  rm -rf "$D" && mkdir -p "$D/ptx" "$D/check" "$D/cross" "$D/random"
  src() { python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$1', 'w').write(ccd.source($2, $3, $4))"; }
  for s in $SIZES; do src "$D/ccd_${s/:/_}.tc" ${s%:*} ${s#*:} False; done
  # Small enough for the interpreter (--check); the examples are compared with
  # `tcc run --tiled` (CPU) instead, which the tests hold to the interpreter.
  src "$D/check/ccd_6_12.tc" 6 12 False
  src "$D/check/ccd_iteration_6_12.tc" 6 12 True
  # `max`/`min`/`where` of symmetry-packed tensors and masked attention (moves of their own).
  cp examples/ccsd_terms.tc examples/programs/ccd.tc examples/conv2d.tc bench/gpu/tiled_special/*.tc "$D/check/"
  # Complex programs run as their (re, im) parts; --check against the complex interpreter.
  cp examples/complex_mps.tc examples/density_c64.tc "$D/check/"
  cp examples/tiled/*.tc examples/programs/ccsd.tc examples/programs/four_index_steps.tc "$D/cross/"
  # ResNet-50's 3x3 layers (affine subscripts: a gather per tile, then GEMMs).
  for l in ${CONV:-$(python3 -c "import sys; sys.path.insert(0, 'bench/gpu'); import tiled_conv; print(' '.join(':'.join(map(str, l)) for l in tiled_conv.LAYERS))")}; do
    python3 bench/gpu/tiled_conv.py source ${l//:/ } > "$D/conv_${l//:/_}.tc"
  done
  for f in "$D"/*.tc "$D"/check/*.tc "$D"/cross/*.tc; do
    target/release/tcc build "$f" --target cuda --tiled -o "$D/ptx/$(basename "$f" .tc).ptx" 2> /dev/null
  done
  # The random programs of the GPU suite (the move kernels are the same PTX
  # for every program).
  cp bench/gpu/random/*.tc "$D/random/"
  for f in "$D"/random/*.tc; do cp "$D/ptx/ccd.ptx" "$D/ptx/$(basename "$f" .tc).ptx"; done
  cp target/release/tcc target/release/tcc-gpu bench/gpu/tiled_ccd_torch.py bench/gpu/tiled_conv.py bench/gpu/tiled_ccd.sh bench/tiled/ccd.py \
    bench/gpu/cuda_env.sh "$D/"
  echo "prepared $D"
else
  cd "$D"
  echo "== small programs against the interpreter (tcc-gpu --tiled --check, tiles 3 and 32)"
  for t in 3 32; do
    timeout 120 ./tcc-gpu check/*.tc --tiled --tile $t --ptx-dir ptx --check --keep-going 2>&1 | grep -E "^(FAIL|tcc-gpu)"
  done
  timeout 60 ./tcc-gpu check/ccd_iteration_6_12.tc --tiled --tile 3 --ptx-dir ptx --check 2>&1 | tail -7
  echo "== the random programs against the interpreter (tiles 2, 3, 4)"
  for t in 2 3 4; do
    timeout 120 ./tcc-gpu random/*.tc --tiled --tile $t --ptx-dir ptx --check --keep-going 2>&1 | grep -E "^(FAIL|tcc-gpu)"
  done
  echo "== examples: tcc-gpu --tiled against tcc run --tiled (CPU), norm2 of every output"
  for f in cross/*.tc; do
    g=$(timeout 120 ./tcc-gpu "$f" --tiled --ptx-dir ptx 2>&1 | grep -oE "norm2 = \S+" | tr '\n' ' ')
    c=$(timeout 120 ./tcc run "$f" --tiled --tile 32 2>&1 | grep -oE "norm2 = \S+" | tr '\n' ' ')
    python3 -c "
import sys
g, c = [float(x) for x in '$g'.split()[2::3]], [float(x) for x in '$c'.split()[2::3]]
ok = len(g) == len(c) and len(g) > 0 and all(abs(a - b) <= 1e-9 * max(abs(b), 1e-300) for a, b in zip(g, c))
print(('SAME ' if ok else 'DIFFERENT ') + '$f', g, c)"
  done
  echo "== ResNet-50 3x3 layers (f64): tcc-gpu --tiled (default tile) against torch conv2d (cuDNN)"
  for f in $(ls conv_*.tc 2> /dev/null); do
    l=$(basename $f .tc); l=${l#conv_}
    echo "-- $l: $(timeout 120 ./tcc-gpu $f --tiled --ptx-dir ptx --repeat 5 2>&1 | grep -E 'gpu:|error' | tr '\n' ' ') $(timeout 120 python3 tiled_conv.py torch ${l//_/ } 5 2>&1 | tail -1)"
  done
  echo "== CCD residual: tcc-gpu --tiled, torch.einsum dense, tcc run --tiled on $(nproc) cores"
  for s in $SIZES; do
    n=ccd_${s/:/_}
    for t in ${TILES:-25 50}; do
      echo "-- $n tile $t: $(timeout 120 ./tcc-gpu $n.tc --tiled --tile $t --ptx-dir ptx --repeat 3 2>&1 | grep -E 'gpu:|stored|error|norm2' | tr '\n' ' ')"
    done
    echo "-- $n $(timeout 120 python3 tiled_ccd_torch.py ${s%:*} ${s#*:} 3 2>&1 | tail -1)"
    if [ "${CPU:-1}" = 1 ]; then
      echo "-- $n cpu: $(TCC_NUM_THREADS=$(nproc) timeout 120 ./tcc run $n.tc --tiled --tile ${CPU_TILE:-25} 2>&1 | grep -E 'tiled:|norm2' | tr '\n' ' ')"
    fi
  done
fi
