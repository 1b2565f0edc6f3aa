#!/usr/bin/env bash
# Compile-time scaling on large programs (issue 23): seconds of `tcc opt`,
# `tcc check` and `tcc run` (JIT) as programs grow. Each case has a time limit;
# "timeout" in the output means it ran past it.
# Usage: cargo build --release && bash bench/scale/run.sh
set -u
cd "$(dirname "$0")/../.."
TCC=${TCC:-target/release/tcc}
LIMIT=${LIMIT:-120}
dir=$(mktemp -d)
time_of() { # label, command...
  local label=$1; shift
  local t0=$(date +%s.%N)
  if timeout "$LIMIT" "$@" > /dev/null 2>&1 || [ $? -eq 1 ]; then
    printf "%-40s %8.2f s\n" "$label" "$(python3 -c "print($(date +%s.%N) - $t0)")"
  else
    printf "%-40s  timeout (%s s) or failure\n" "$label" "$LIMIT"
  fi
}
for n in 1000 5000 10000; do
  python3 bench/scale/gen.py stmts $n $dir/s$n.tc
  time_of "tcc opt, $n statements" "$TCC" opt $dir/s$n.tc
done
for n in 20000 70000; do
  python3 bench/scale/gen.py errors $n $dir/e$n.tc
  time_of "tcc check, $n errors" "$TCC" check $dir/e$n.tc
done
for n in 300 1000 3000; do
  python3 bench/scale/gen.py terms $n $dir/t$n.tc
  time_of "tcc opt, one statement of $n terms" "$TCC" opt $dir/t$n.tc
  time_of "tcc run, one statement of $n terms" "$TCC" run $dir/t$n.tc
done
for n in 16 20 22; do
  python3 bench/scale/gen.py shared $n $dir/sh$n.tc
  time_of "tcc opt, shared product over $n indices" "$TCC" opt $dir/sh$n.tc
done
rm -rf "$dir"
