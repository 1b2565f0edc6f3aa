#!/usr/bin/env python3
"""Issue 18, deliverable 3: the GETT's cache blocking (kc, mc, nc) swept against
OpenBLAS dgemm of the same m x n x k, on the libraries `gemm_ratio.py build`
made. The runtime reads `TCC_GETT_KC`/`_MC`/`_NC` once per process, so each
setting runs in its own process (unset: the runtime's choice); within it, dgemm and tcc alternate (best of
--inner calls, --rounds rounds) and only ratios measured in the same round are
compared.

    python3 bench/cpu/gemm_ratio.py build --dir D [--target-cpu skylake-avx512]
    python3 bench/cpu/blocking_sweep.py --dir D --threads 2 --settings 256,192 384,192 256,384
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from gemm_ratio import load_case  # noqa: E402


def measure(args):
    """One setting (the environment's): per case, the rounds' tcc/dgemm rates."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(7)
    out = {}
    with threadpool_limits(args.threads):
        for c in json.load(open(os.path.join(args.dir, "manifest.json"))):
            if c["kind"] != "gemm" or (args.only and not any(p in c["name"] for p in args.only.split(","))):
                continue
            spec = c["spec"]
            ops, res, dgemm, tcc = load_case(args.dir, c, rng)
            calls = {"dgemm": dgemm, "tcc": tcc}
            for g in calls.values():
                g()
            rates = []
            for _ in range(args.rounds):
                t = {}
                for key, g in calls.items():
                    time.sleep(0.2)  # OpenBLAS's threads spin for a while after a call.
                    best = float("inf")
                    for _ in range(args.inner):
                        s = time.perf_counter()
                        g()
                        best = min(best, time.perf_counter() - s)
                    t[key] = best
                rates.append(t["dgemm"] / t["tcc"])
            if not np.allclose(res, np.einsum(spec, *ops, optimize=True), rtol=1e-9, atol=1e-9):
                sys.exit(f"{c['name']}: wrong result")
            out[c["name"]] = rates
    json.dump(out, sys.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inner", type=int, default=2)
    ap.add_argument("--only", default=None)
    ap.add_argument("--settings", nargs="+", default=["256,192"], help="kc,mc or kc,mc,nc")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ["TCC_NUM_THREADS"] = str(args.threads)
    if args.one:
        return measure(args)
    table = {}
    for s in args.settings:
        env = dict(os.environ, **dict(zip(["TCC_GETT_KC", "TCC_GETT_MC", "TCC_GETT_NC"], s.split(","))))
        cmd = [sys.executable, __file__, "--one", "--dir", args.dir, "--threads", str(args.threads),
               "--rounds", str(args.rounds), "--inner", str(args.inner)] + (["--only", args.only] if args.only else [])
        table[s] = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
        print(f"kc,mc,nc = {s}: " + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in table[s].items()),
              file=sys.stderr, flush=True)
    names = list(next(iter(table.values())))
    print(f"Threads {args.threads}; {args.rounds} rounds, best of {args.inner} calls; tcc rate / dgemm rate, "
          "median of rounds (worst)\n")
    print("| case (kc,mc,nc) | " + " | ".join(f"{s}" for s in args.settings) + " |")
    print("|---|" + "---:|" * len(args.settings))
    for n in names:
        cells = [f"{statistics.median(table[s][n]):.2f} ({min(table[s][n]):.2f})" for s in args.settings]
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
