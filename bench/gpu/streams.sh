#!/bin/bash
# Streams for independent steps (issue 19, deliverable 1; bench/gpu/results.md):
# the whole programs of examples/programs/ (CCSD and CCD residuals, attention
# block, four-index transform in steps, MPS step) at their sizes and larger,
# each run by tcc-gpu on one stream and on 4 streams, alternating, in one run
# (best of --repeat 20 per run, two runs each); each checked against the
# interpreter on 4 streams at a small size.
#   here:   bash bench/gpu/streams.sh prepare [DEST]  (default target/streams;
#           needs target/release/tcc and tcc-gpu built with --features cuda)
#   device: bash streams.sh run [DEST]   (after . cuda_env.sh)
set -u
mode=${1:?prepare or run}; D=${2:-target/streams}
# program:RANGE=N,RANGE=N...  (nothing after the colon: the example's own sizes)
CASES=${CASES:-"ccsd: ccsd:O=24,V=96 ccsd:O=32,V=128 ccd: ccd:O=20,V=100 ccd:O=30,V=150 attention_block:
attention_block:B=8,S=1024 four_index_steps: four_index_steps:N=96 mps_step: mps_step:D=512"}
if [ "$mode" = prepare ]; then
  set -e
  rm -rf "$D" && mkdir -p "$D/cases" "$D/check"
  # make PROGRAM SIZES DIR: the example with its ranges resized, built for the GPU.
  make() {
    local name=$1${2:+_${2//[=,]/_}}
    python3 - "examples/programs/$1.tc" "$3/$name.tc" "$2" <<'PY'
import re, sys
src, dst, sizes = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src).read()
for kv in filter(None, sizes.split(",")):
    k, v = kv.split("=")
    text, n = re.subn(rf"^range {k} = \d+;", f"range {k} = {v};", text, flags=re.M)
    assert n == 1, (src, k)
open(dst, "w").write(text)
PY
    target/release/tcc build "$3/$name.tc" --target cuda -o "$3/$name.ptx" > /dev/null
  }
  for c in $CASES; do make "${c%%:*}" "${c#*:}" "$D/cases"; done
  # Small enough for the dense interpreter.
  for c in ccsd:O=6,V=16 ccd:O=6,V=14 attention_block:B=2,S=16,H=2,E=8,M=16 four_index_steps:N=12 mps_step:D=16; do
    make "${c%%:*}" "${c#*:}" "$D/check"
  done
  cp target/release/tcc-gpu bench/gpu/streams.sh bench/gpu/cuda_env.sh "$D/"
  echo "prepared $D"
else
  cd "$D"
  echo "== checks against the interpreter, 4 streams"
  timeout 200 ./tcc-gpu check/*.tc --ptx-dir check --streams 4 --check --keep-going 2>&1 | grep -E "^(FAIL|PASS|tcc-gpu)"
  echo "== one stream against four (best of 20 per run; runs alternate 1, 4, 1, 4)"
  echo "| program | launches, cuBLAS calls | 1 stream ms | 4 streams ms | 4 / 1 |"
  echo "|---|---|---:|---:|---:|"
  for f in cases/*.tc; do
    declare -A best=()
    for n in 1 4 1 4; do
      out=$(timeout 60 ./tcc-gpu "$f" --ptx-dir cases --repeat 20 --streams $n 2>&1)
      t=$(echo "$out" | grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+")
      calls=$(echo "$out" | grep -oE "[0-9]+ kernel launches, [0-9]+ cuBLAS calls" | head -1)
      [ -z "$t" ] && { echo "$f --streams $n: $(echo "$out" | tail -3)"; continue; }
      if [ -z "${best[$n]:-}" ] || python3 -c "import sys; sys.exit(0 if $t < ${best[$n]} else 1)"; then best[$n]=$t; fi
    done
    r=$(python3 -c "print(f'{${best[4]:-0} / ${best[1]:-1}:.2f}')")
    echo "| $(basename "$f" .tc) | $calls | ${best[1]:-} | ${best[4]:-} | $r |"
    unset best
  done
fi
