#!/bin/bash
# Copies and permutations on the GPU, tiled (32 × 32 shared tile) against
# plain one-thread-per-element copies (bench/gpu/results.md, 2026-12-06).
#   here:   bash bench/gpu/copies.sh prepare [DEST]   (default target/copies;
#           writes the programs and builds both variants with target/release/tcc)
#   device: bash copies.sh run [DEST]                 (tcc-gpu next to DEST,
#           or TCC_GPU=...; best of 10 device time, two rounds)
set -eu
mode=${1:?prepare or run}; D=${2:-target/copies}
if [ "$mode" = prepare ]; then
  TCC=${TCC:-target/release/tcc}
  rm -rf "$D" && mkdir -p "$D/tiled" "$D/plain"
  w() { n=$1; shift; printf '%s\n' "$@" > "$D/$n.tc"; }
  w cp2 'range R = 8192; index a : R; index b : R;' 'input tensor A[a,b] : f64;' 'output tensor B[a,b] : f64;' 'B[a,b] = 2.0 * A[a,b];'
  w t2 'range R = 8192; index a : R; index b : R;' 'input tensor A[a,b] : f64;' 'output tensor B[b,a] : f64;' 'B[b,a] = A[a,b];'
  w t4ring 'range Rv = 128; index a : Rv; index c : Rv;' 'range Ro = 32; index k : Ro; index j : Ro;' 'input tensor A[a,k,c,j] : f64;' 'output tensor B[a,j,c,k] : f64;' 'B[a,j,c,k] = A[a,k,c,j];'
  w t4b 'range Rv = 128; index a : Rv; index c : Rv;' 'range Ro = 32; index k : Ro; index j : Ro;' 'input tensor A[a,k,c,j] : f64;' 'output tensor B[j,c,k,a] : f64;' 'B[j,c,k,a] = A[a,k,c,j];'
  w t4n48 'range R = 48; index a : R; index b : R; index c : R; index d : R;' 'input tensor A[a,b,c,d] : f64;' 'output tensor B[d,a,c,b] : f64;' 'B[d,a,c,b] = A[a,b,c,d];'
  w t5tn 'range R = 24; index a : R; index b : R; index c : R; index d : R; index e : R;' 'input tensor A[a,b,c,d,e] : f64;' 'output tensor B[a,c,e,b,d] : f64;' 'B[a,c,e,b,d] = A[a,b,c,d,e];'
  w t6 'range R = 24; index a : R; index b : R; index c : R; index i : R; index j : R; index k : R;' 'input tensor A[a,b,c,i,j,k] : f64;' 'output tensor B[k,j,a,b,c,i] : f64;' 'B[k,j,a,b,c,i] = A[a,b,c,i,j,k];'
  w p4keep 'range Ra = 100; index a : Ra; index c : Ra;' 'range Ri = 40; index i : Ri; index k : Ri;' 'input tensor A[a,k,i,c] : f64;' 'output tensor B[a,i,k,c] : f64;' 'B[a,i,k,c] = A[a,k,i,c];'
  for f in "$D"/*.tc; do
    n=$(basename "$f" .tc)
    "$TCC" build --target cuda "$f" -o "$D/tiled/$n.ptx" > /dev/null
    TCC_GPU_PLAIN_COPIES=1 "$TCC" build --target cuda "$f" -o "$D/plain/$n.ptx" > /dev/null
  done
  echo "built $(ls "$D"/*.tc | wc -l) programs in $D"
else
  G=${TCC_GPU:-$D/../tcc-gpu}
  for r in 1 2; do for f in "$D"/*.tc; do
    n=$(basename "$f" .tc)
    a=$("$G" "$f" --ptx-dir "$D/tiled" --repeat 10 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)
    b=$("$G" "$f" --ptx-dir "$D/plain" --repeat 10 2>&1 | grep -oE "time = [0-9.]+ ms" | head -1)
    echo "$n | tiled: $a | plain: $b"
  done; done
fi
