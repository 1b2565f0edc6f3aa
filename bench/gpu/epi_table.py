#!/usr/bin/env python3
"""One markdown table of epi_device_run.sh's measurements: per triples case the
tiled kernel with the direct and the staged epilogue (stage 3: tcc-gpu device
time, best of R), the staged plan and torch.einsum / cupy.einsum in one run
(stage 4, cc_suite.py's JSON), and the other tile shapes (stage 5).

    python3 epi_table.py TIMES.txt [SUITE.json]

TIMES.txt: lines `case|variant|ms` (variant direct, staged, direct_t1, ...).
"""

import json
import os
import statistics
import sys


def main():
    times = {}
    order = []
    for line in open(sys.argv[1]):
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        name, var, ms = parts
        if name not in times:
            times[name] = {}
            order.append(name)
        if ms:
            times[name][var] = float(ms)
    suite = {}
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        for r in json.load(open(sys.argv[2]))["rows"]:
            suite[r["name"]] = r
    extra = sorted({v for t in times.values() for v in t} - {"direct", "staged"})
    head = ["case", "direct ms", "staged ms", "staged/direct", "torch ms", "cupy ms",
            "staged plan ms", "plan / better peer", "best tiled / better peer"] + [f"{v} ms" for v in extra]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    ratios, vs_peer, best_peer = [], [], []
    for name in order + [n for n in suite if n not in times]:
        t = times.get(name, {})
        r = suite.get(name, {})
        d, s = t.get("direct"), t.get("staged")
        cell = lambda x, f="{:.3f}": f.format(x) if x is not None else "–"
        peer = min(r["t_torch"], r["t_cupy"]) if r.get("t_torch") else None
        best = min([x for x in t.values()] or [float("nan")])
        row = [name, cell(d), cell(s), cell(s / d if d and s else None, "{:.2f}"),
               cell(r.get("t_torch") and r["t_torch"] * 1e3), cell(r.get("t_cupy") and r["t_cupy"] * 1e3),
               cell(r.get("t_tcc") and r["t_tcc"] * 1e3) + ("" if r.get("ok", True) else " WRONG"),
               cell(r.get("ratio"), "{:.2f}"), cell(best / (peer * 1e3) if peer and t else None, "{:.2f}")]
        row += [cell(t.get(v)) for v in extra]
        print("| " + " | ".join(row) + " |")
        if d and s:
            ratios.append(s / d)
        if r.get("ratio"):
            vs_peer.append(r["ratio"])
        if peer and t:
            best_peer.append(best / (peer * 1e3))
    print()
    if ratios:
        print(f"- staged / direct (tiled forced): median {statistics.median(ratios):.2f}, "
              f"min {min(ratios):.2f}, max {max(ratios):.2f} ({len(ratios)} cases)")
    if vs_peer:
        print(f"- staged plan / better peer: median {statistics.median(vs_peer):.2f}, worst {max(vs_peer):.2f} "
              f"(goal: median <= 0.8, none above 1.2; {len(vs_peer)} cases)")
    if best_peer:
        print(f"- best tiled variant measured / better peer: median {statistics.median(best_peer):.2f}, "
              f"worst {max(best_peer):.2f}")
    if suite:
        print(f"- outputs checked against torch.einsum: {sum(r.get('ok', False) for r in suite.values())}/{len(suite)}")


if __name__ == "__main__":
    main()
