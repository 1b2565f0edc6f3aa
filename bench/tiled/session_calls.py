"""Time repeated calls of one tiled session (what a solver does each iteration).

Opens the four-index transform of `examples/tiled/four_index_sym.tc` at size N
with `tcc.tiled`, packs its inputs once, then runs it CALLS times and prints each
call's wall time. A session keeps its arena of temporaries between calls, so the
first call pays for first touching their pages and the later ones do not.

    python3 bench/tiled/session_calls.py [--n 80] [--ao-tile 8] [--mo-tile 20] [--calls 5] [--threads 2]
"""
import argparse
import os
import re
import time

import numpy as np
import tcc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=80)
    ap.add_argument("--ao-tile", type=int, default=8)
    ap.add_argument("--mo-tile", type=int, default=20)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    src = open(os.path.join(ROOT, "examples", "tiled", "four_index_sym.tc")).read()
    src = re.sub(r"range P = \d+ tile \d+", f"range P = {args.n} tile {args.ao_tile}", src)
    src = re.sub(r"range M = \d+ tile \d+", f"range M = {args.n} tile {args.mo_tile}", src)
    prog = tcc.tiled(src, threads=args.threads)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.n,) * 4)
    a = a + a.transpose(1, 0, 2, 3)
    a = a + a.transpose(0, 1, 3, 2)
    a = a + a.transpose(2, 3, 0, 1)
    prog.pack(A=a, C=rng.standard_normal((args.n, args.n)))
    times = []
    for _ in range(args.calls):
        t = time.perf_counter()
        prog.run()
        times.append(time.perf_counter() - t)
    print(f"tcc {tcc.__file__}: N={args.n}, {args.threads} threads, calls: "
          + " ".join(f"{1e3 * t:.0f}" for t in times) + " ms; "
          + f"first {1e3 * times[0]:.0f} ms, median of the rest {1e3 * float(np.median(times[1:])):.0f} ms")


if __name__ == "__main__":
    main()
