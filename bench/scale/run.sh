#!/usr/bin/env bash
# Compile-time scaling on large programs (issue 23): seconds of `tcc opt`,
# `tcc check`, `tcc run` (JIT) and `tcc lsp` as programs grow. Each case has a
# time limit; "timeout" in the output means it ran past it.
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
for n in 1000 2000 5000 10000; do
  python3 bench/scale/gen.py stmts $n $dir/s$n.tc
  time_of "tcc opt, $n statements" "$TCC" opt $dir/s$n.tc
done
for n in 1000 2000; do
  time_of "tcc run, $n statements" "$TCC" run $dir/s$n.tc
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
for n in 16 20 22 40; do
  python3 bench/scale/gen.py shared $n $dir/sh$n.tc
  time_of "tcc opt, shared product over $n indices" "$TCC" opt $dir/sh$n.tc
done
# The language server on 1 MB documents (16000 statements; 16000 errors): the
# first diagnostics, semantic tokens, and 1000 edits sent at once until the last
# version's diagnostics (bench/scale/lsp.py).
python3 bench/scale/gen.py stmts 16000 $dir/l.tc
python3 bench/scale/gen.py errors 16000 $dir/le.tc
for f in l le; do
  echo "tcc lsp, $(wc -c < $dir/$f.tc) bytes ($f):"
  if out=$(timeout "$LIMIT" python3 bench/scale/lsp.py "$TCC" $dir/$f.tc 1000 2>&1); then
    echo "$out" | sed 's/^/  /'
  else
    echo "$out" | sed 's/^/  /'
    echo "  timeout ($LIMIT s) or failure"
  fi
done
rm -rf "$dir"
