#!/usr/bin/env bash
# Where 16 ranks lose against one rank alone on the GPU machine's 16-core host:
# the same CCD run (o=20 v=200) alone, then on 16 in-process ranks with ranks
# taking over each other's unstarted work (TCC_STEAL=on, the default) and not
# (off), alternating, each rank's seconds split into kernels, waits and the rest, and
# one process with 16 threads. (Runs G1-G3 compared the allocator keeping
# freed memory, 16 independent one-rank processes, and balancing flops against
# modelled time: bench/distributed/runs.) Carry target/devpack.tar.xz (bench/distributed/pack_devpack.sh):
#   bash bench/distributed/diagnose.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/diagnose.txt") 2>&1
[ -d /tmp/devpack ] || tar xJf target/devpack.tar.xz -C /tmp
T="/tmp/devpack/lib/ld-linux-x86-64.so.2 --library-path /tmp/devpack/lib /tmp/devpack/tcc"
echo "## host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(date -u)"
python3 -c "import sys; sys.path.insert(0, 'bench/tiled'); import ccd; open('/tmp/ccd.tc', 'w').write(ccd.source(20, 200))"
TUNE=${TUNE:-bench/distributed/runs/G-tune16.toml}
# Runs "$@" and prints its time line plus the children's page faults and context switches.
ru() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t0 = time.time()
out = subprocess.run(sys.argv[1:], capture_output=True, text=True).stdout
dt = time.time() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
for l in out.splitlines():
    if any(k in l for k in ("tiled", "norm2", "rank 0:", "kernels of rank 0", "GETT m 1024", "GETT m 256", "s in kernels")):
        print(l)
print(f"  [rusage] wall {dt:.3f} s, user {r.ru_utime:.2f} s, sys {r.ru_stime:.2f} s, minflt {r.ru_minflt}, majflt {r.ru_majflt}, nvcsw {r.ru_nvcsw}, nivcsw {r.ru_nivcsw}")
PY
}
echo "=== one rank alone"
TCC_NUM_THREADS=1 ru $T run /tmp/ccd.tc --tiled --tile 40 --stats --tuning "$TUNE"
for i in 1 2 3; do
  for st in on off; do
    echo "=== trial $i: 16 ranks, TCC_STEAL=$st"
    TCC_STEAL=$st TCC_NUM_THREADS=16 ru $T run /tmp/ccd.tc --tiled --tile 40 --ranks 16 --stats --tuning "$TUNE" --exchange one-sided
  done
  echo "=== trial $i: one process, 16 threads"
  TCC_NUM_THREADS=16 ru $T run /tmp/ccd.tc --tiled --tile 40 --stats
done
