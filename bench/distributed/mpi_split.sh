#!/usr/bin/env bash
# Strong scaling at 16 MPI processes, CCD o=28 v=280 (runs H2–H5 in
# bench/distributed/results.md): what splitting the items near the end of each
# rank's list (TCC_SPLIT, on by default) and prefetching at most 16384 elements
# of an operand tile (TCC_PREFETCH_WORDS) give, against the build as run H4
# measured it, in the same trial. Measures the host (lscpu), fits a fresh
# `tcc tune --ranks 16` table, then TRIALS times (3; a trial starts only if one
# as long as the last would end within LIMIT seconds, 420 by default, so that
# the call stays under 8 minutes): one
# rank alone, then the 16-process VARIANTS (default "split nosplit H4") in an
# order that rotates from trial to trial, then one process of 16 threads:
#   split:    the default (TCC_SPLIT=on, prefetch capped; one claimed item
#             waiting per compute thread instead of two);
#   split10:  TCC_SPLIT=0.1 (finer tails);
#   nosplit:  TCC_SPLIT=off (prefetch capped);
#   H4:       TCC_SPLIT=off TCC_PREFETCH_WORDS=all (what run H4 ran, but for the
#             claim counters in one window and taken items sharing tiles);
#   inplace:  the default since run H6: ranks on one node read each other's
#             tiles in place from shared window memory (TCC_READ_IN_PLACE=on);
#   copy:     TCC_READ_IN_PLACE=off, remote tiles copied by MPI_Get as before;
#   inplace-all: in place, with whole operand tiles prefetched.
# TILE=56: another tile size (40 by default).
# SOLO_ALL=0 skips the one rank with whole tiles prefetched (trial 1).
# Every 16-process run prints its wall time, efficiency against the one rank of
# the same trial, and each rank's breakdown from `--stats` (one line a rank:
# kernels, waits, partial tiles, the rest split into set-up, compute threads
# waiting for items and items outside kernel calls, items taken over). Full
# reports in $OUT/mpi_split_full.txt. Carry target/mpipack.tar.xz
# (bash bench/distributed/pack_mpipack.sh after
# `cargo build --release --features mpi --bin tcc`):
#   bash bench/distributed/mpi_split.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/mpi_split.txt") 2>&1
source bench/distributed/mpi_env.sh
lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|Model name|L2|L3|NUMA node)"
O=${O:-28} V=${V:-280}
f=/tmp/ccd_${O}_$V.tc
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('$f', 'w').write(ccd.source($O, $V))"
OLD=bench/distributed/runs/H4-tune16.toml
NEW=$OUT/tune16.toml
t0=$SECONDS
# TUNING=FILE: that table instead of a fresh one (a short call).
if [ -n "${TUNING:-}" ]; then
  NEW=$TUNING
else
  timeout 150 $T tune --ranks 16 --max-bytes 16MiB --out "$NEW" > "$OUT/tune16.log" 2>&1 || NEW=$OLD
fi
echo "## tune: $((SECONDS - t0)) s, table $NEW"
solo=0
# Prints the wall time, its efficiency against `solo`, a summary and one line per
# rank of the report in $1.
summary() {
  grep -E "norm2" "$1"
  SOLO=$solo python3 - "$1" <<'EOF'
import os, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"tiled on (\d+) ranks .*?time = ([0-9.]+) s", text)
if not m:
    print("  no time: the run failed (see the full report)")
    sys.exit()
p, t = int(m[1]), float(m[2])
solo = float(os.environ["SOLO"])
print(f"  wall {t:.3f} s on {p} ranks; efficiency against one rank alone ({solo:.3f} s): {100 * solo / (p * t):.0f}%")
pat = re.compile(
    r"rank (\d+): ([0-9.]+) s in kernels .*?([0-9.]+) s waiting for fetched tiles, ([0-9.]+) s for other ranks.*?"
    r"([0-9.]+) s adding partial tiles, ([0-9.]+) s else \(([0-9.]+) s setting up sets, ([0-9.]+) s compute threads "
    r"waiting for items, ([0-9.]+) s in items outside kernel calls\); took over (\d+) items")
rows = [m for m in pat.finditer(text)]
if rows:
    col = lambda i: [float(r[i]) for r in rows]
    k, sync, els = col(2), col(4), col(6)
    print(f"  kernels per rank min {min(k):.3f} mean {sum(k)/len(k):.3f} max {max(k):.3f} s; sync waits mean "
          f"{sum(sync)/len(sync):.3f} max {max(sync):.3f} s; else mean {sum(els)/len(els):.3f} s; "
          f"items taken over {sum(int(r[10]) for r in rows)}")
    print("  rank: kernels  tiles   syncs  partial else (setup idle outside) taken")
    for r in rows:
        print(f"  {int(r[1]):4d}: {float(r[2]):6.3f} {float(r[3]):6.3f} {float(r[4]):6.3f} {float(r[5]):6.3f} "
              f"{float(r[6]):6.3f} ({float(r[7]):.3f} {float(r[8]):.3f} {float(r[9]):.3f}) {r[10]}")
EOF
}
variant() { # name → its environment
  case $1 in
    split) echo "TCC_SPLIT=on" ;;
    split10) echo "TCC_SPLIT=0.1" ;;
    nosplit) echo "TCC_SPLIT=off" ;;
    H4) echo "TCC_SPLIT=off TCC_PREFETCH_WORDS=all" ;;
    inplace) echo "TCC_READ_IN_PLACE=on" ;;
    copy) echo "TCC_READ_IN_PLACE=off" ;;
    inplace-all) echo "TCC_READ_IN_PLACE=on TCC_PREFETCH_WORDS=all" ;;
    *) echo "unknown variant $1" >&2; exit 1 ;;
  esac
}
one() { # trial, variant
  local env
  env=$(variant "$2")
  echo "=== trial $1: 16 processes, $2 ($env)"
  (export $env; mpirun -np 16 $T run $f --tiled --tile "${TILE:-40}" --backend mpi --exchange one-sided --stats --tuning "$NEW") > /tmp/one.txt 2>&1
  { echo "=== trial $1: 16 processes, $2 ($env)"; cat /tmp/one.txt; } >> "$OUT/mpi_split_full.txt"
  summary /tmp/one.txt
}
read -r -a order <<< "${VARIANTS:-split nosplit H4}"
n=${#order[@]}
last=0
for trial in $(seq 1 "${TRIALS:-3}"); do
  # A trial starts only if one as long as the last still ends by LIMIT seconds.
  if [ "$trial" -gt 1 ] && [ $((SECONDS - t0 + last)) -gt "${LIMIT:-420}" ]; then
    echo "## no trial $trial: $((SECONDS - t0)) s gone, the last trial took $last s"
    break
  fi
  ts=$SECONDS
  echo "=== trial $trial: one rank alone, no MPI"
  $T run $f --tiled --tile "${TILE:-40}" --stats > /tmp/solo.txt 2>&1
  grep -E "norm2|tiled:|kernels:" /tmp/solo.txt
  solo=$(sed -nE 's/.*tiled: .* time = ([0-9.]+) s.*/\1/p' /tmp/solo.txt)
  solo=${solo:-0}
  if [ "$trial" = 1 ] && [ "${SOLO_ALL:-1}" = 1 ]; then
    echo "=== trial 1: one rank alone, TCC_PREFETCH_WORDS=all (as H4)"
    TCC_PREFETCH_WORDS=all $T run $f --tiled --tile "${TILE:-40}" --stats 2>&1 | grep -E "tiled:|kernels:"
  fi
  for k in $(seq 0 $((n - 1))); do
    one "$trial" "${order[$(((k + trial - 1) % n))]}"
  done
  echo "=== trial $trial: one process, 16 threads"
  TCC_NUM_THREADS=16 $T run $f --tiled --tile "${TILE:-40}" --stats | grep -E "tiled:"
  last=$((SECONDS - ts))
  echo "## trial $trial: $last s"
done
echo "## total $((SECONDS - t0)) s"
