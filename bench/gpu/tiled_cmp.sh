#!/bin/bash
# Two tcc-gpu builds on the same tiled programs, in alternating order, best of
# REPEAT each (issue 19): ./tiled_cmp.sh OLD NEW TILES PROGRAM.tc...
# run in a folder bench/gpu/tiled_ccd.sh prepared (ptx/ beside the programs).
old=$1; new=$2; tiles=$3; shift 3
for f in "$@"; do
  for t in $tiles; do
    for round in 1 2; do
      for b in $old $new; do
        echo "-- $(basename $f .tc) tile $t round $round $b: $(timeout 120 ./$b $f --tiled --tile $t --ptx-dir ptx --repeat ${REPEAT:-5} 2>&1 | grep -E 'gpu: [0-9.e-]+ s|operand|error' | tr '\n' ' ')"
      done
    done
  done
done
