"""Picks the knob variant with the best geometric mean time over the cases a
knobs_run.sh sweep timed (every round), among the variants with a folder under
SUITE_DIR: `python3 knobs_pick.py knobs_log.txt suite` prints its name."""
import math
import os
import re
import sys
from collections import defaultdict

log, suite_dir = sys.argv[1], sys.argv[2]
times = defaultdict(lambda: defaultdict(list))  # variant -> case -> [ms]
for line in open(log):
    m = re.match(r"r\d+ (cc\d+) \| (.*)", line.strip())
    if not m:
        continue
    for part in m.group(2).split(" | "):
        bits = part.split()
        if len(bits) == 2:
            try:
                times[bits[0]][m.group(1)].append(float(bits[1]))
            except ValueError:
                pass
cases = set.intersection(*(set(c) for c in times.values())) if times else set()
ok = [v for v in times if os.path.isdir(os.path.join(suite_dir, v))]


def score(v):
    return sum(math.log(min(times[v][c])) for c in cases) / max(len(cases), 1)


for v in sorted(times, key=score):
    print(f"{v}: geomean {math.exp(score(v)):.4f} ms over {len(cases)} cases", file=sys.stderr)
print(min(ok, key=score) if ok and cases else "base")
