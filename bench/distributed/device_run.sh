#!/usr/bin/env bash
# On the GPU machine's 16-core host (no Rust there): unpacks the carried release
# build (`target/devpack.tar.xz`: tcc with libLLVM and the C library it was linked
# against, run through the carried loader), calibrates the time model with 16
# ranks, runs bench/distributed/run.sh with each exchange, then the 16-rank CCD
# alternating the two exchanges (the host is shared: alternation shows drift).
# Prepare here:
#   cargo build --release && bash bench/distributed/pack_devpack.sh
# then `run` with carry ["target/devpack.tar.xz"]: bash bench/distributed/device_run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/device_run.txt") 2>&1
tar xJf target/devpack.tar.xz -C /tmp
T="/tmp/devpack/lib/ld-linux-x86-64.so.2 --library-path /tmp/devpack/lib /tmp/devpack/tcc"
echo "## host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "## transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
$T tune --ranks 16 --max-bytes 16MiB --out "$OUT/tune16.toml" 2>&1 | grep -E "alpha|executor" || true
# EXCHANGES="one-sided" measures only that one.
for x in ${EXCHANGES:-one-sided collective}; do
  echo "=== --exchange $x"
  EXCHANGE=$x TUNING="$OUT/tune16.toml" TCC="$T" OUT=/tmp bash bench/distributed/run.sh 16
done
echo "=== 16 ranks, alternating"
for i in 1 2 3; do
  for x in ${EXCHANGES:-one-sided collective}; do
    echo "# $x, trial $i"
    TCC_NUM_THREADS=16 $T run /tmp/ccd_20_200.tc --tiled --tile 40 --ranks 16 --stats --tuning "$OUT/tune16.toml" --exchange $x |
      grep -E "tiled on|model:|rank 0:"
  done
  echo "# one process, 16 threads, trial $i"
  TCC_NUM_THREADS=16 $T run /tmp/ccd_20_200.tc --tiled --tile 40 | grep -E "tiled:"
done
