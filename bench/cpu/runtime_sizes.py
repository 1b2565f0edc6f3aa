#!/usr/bin/env python3
"""What run-time sizes cost: each contraction of the CPU suite (bench.py's SUITE)
built twice with `tcc build`, once with its sizes fixed in the source
(`range Ri = 2000;`) and once with run-time ranges (`range Ri;`, built with
`--assume Ri=2000`, the sizes passed as `size_t` arguments at the call), both
called through ctypes on the very same numpy arrays, interleaved, best of
--repeat; numpy.einsum(optimize=True) is timed in the same loop as the peer.

  build  (this machine) writes DIR/fixedK.tc, DIR/runtimeK.tc, their libraries and
         DIR/manifest.json;
  run    (numpy only; may be another machine of the same CPU family) times and
         writes a markdown table: runtime / fixed per case, median and worst.

Reproduce (from the repository root):
    cargo build --workspace
    python3 bench/cpu/runtime_sizes.py build --dir /tmp/tccsizes --tcc target/debug/tcc --target-cpu skylake-avx512
    python3 bench/cpu/runtime_sizes.py run --dir /tmp/tccsizes --threads 16 --machine "..."
"""

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import SUITE, best_time, selected, tc_source  # noqa: E402
from bench import main as bench_main  # noqa: E402


def runtime_source(spec, sizes, elem):
    """The fixed-size program with every range's size left to run time."""
    return re.sub(r"range (R\w+) = \d+;", r"range \1;", tc_source(spec, sizes, elem))


def build(args):
    os.makedirs(args.dir, exist_ok=True)
    cases = []
    for k, (name, spec, sizes, elem, _) in enumerate(SUITE):
        if not selected(args, name):
            continue
        entry = dict(name=name, spec=spec, sizes=sizes, elem=elem)
        for kind, src_text in (("fixed", tc_source(spec, sizes, elem)), ("runtime", runtime_source(spec, sizes, elem))):
            lib = f"{kind}{k}"
            src = os.path.join(args.dir, f"{lib}.tc")
            with open(src, "w") as f:
                f.write(src_text)
            cmd = [args.tcc, "build", src, "-o", os.path.join(args.dir, f"lib{lib}.so")]
            if kind == "runtime":
                cmd += ["--assume", ",".join(f"R{c}={n}" for c, n in sizes.items())]
            if args.target_cpu:
                cmd += ["--target-cpu", args.target_cpu]
            subprocess.run(cmd, check=True, capture_output=True)
            header = open(os.path.join(args.dir, f"{lib}.h")).read()
            flops = float(re.search(r"\(([0-9.e+]+) flops per call", header).group(1))
            # Size arguments in the order the header declares them.
            proto = re.search(rf"int tcc_{lib}_main\(([^)]*)\)", header).group(1)
            size_args = re.findall(r"size_t size_R(\w+)", proto)
            entry[kind] = dict(lib=f"lib{lib}.so", func=f"tcc_{lib}_main", flops=flops, sizes=size_args)
        cases.append(entry)
        print(f"built {name}", file=sys.stderr)
    with open(os.path.join(args.dir, "manifest.json"), "w") as f:
        json.dump(dict(cases=cases, target_cpu=args.target_cpu or "native"), f, indent=1)


def run(args):
    import numpy as np

    os.environ["TCC_NUM_THREADS"] = str(args.threads)
    from threadpoolctl import threadpool_limits

    manifest = json.load(open(os.path.join(args.dir, "manifest.json")))
    rows = []
    rng = np.random.default_rng(42)
    with threadpool_limits(args.threads):
        for case in manifest["cases"]:
            if not selected(args, case["name"]):
                continue
            spec, sizes, elem = case["spec"], case["sizes"], case["elem"]
            dtype = np.float32 if elem == "f32" else np.float64
            ins, out = spec.split("->")
            ops = [rng.standard_normal([sizes[c] for c in s]).astype(dtype) for s in ins.split(",")]
            calls = {}
            results = {}
            for kind in ("fixed", "runtime"):
                c = case[kind]
                res = np.empty([sizes[ch] for ch in out], dtype=dtype)
                f = getattr(ctypes.CDLL(os.path.join(args.dir, c["lib"])), c["func"])
                f.restype = ctypes.c_int
                cargs = [ctypes.c_size_t(sizes[ch]) for ch in c["sizes"]]
                for arr in ops + [res]:
                    cargs += [ctypes.c_void_p(arr.ctypes.data), ctypes.c_size_t(arr.size)]
                results[kind] = res

                def call(f=f, cargs=cargs, kind=kind):
                    rc = f(*cargs)
                    if rc != 0:
                        raise RuntimeError(f"{case['name']} ({kind}): tcc returned {rc}")

                calls[kind] = call
                call()
            ref = np.einsum(spec, *ops, optimize=True)
            t = dict(fixed=float("inf"), runtime=float("inf"), numpy=float("inf"))
            for _ in range(args.repeat):
                for kind in ("fixed", "runtime"):
                    time.sleep(0.2)
                    t[kind] = min(t[kind], best_time(calls[kind], 1)[0])
                time.sleep(0.2)
                t["numpy"] = min(t["numpy"], best_time(lambda: np.einsum(spec, *ops, optimize=True), 1)[0])
            scale = max(float(np.max(np.abs(ref))), 1e-300)
            err = max(float(np.max(np.abs(results[k].astype(np.float64) - ref))) / scale for k in results)
            ok = err <= (1e-4 if elem == "f32" else 1e-9)
            row = dict(name=case["name"], spec=spec, fixed=t["fixed"], runtime=t["runtime"], numpy=t["numpy"],
                       ratio=t["runtime"] / t["fixed"], vs_numpy=t["runtime"] / t["numpy"], err=err, ok=ok)
            rows.append(row)
            print(f"{row['name']:36s} fixed {t['fixed']*1e3:9.2f} ms  runtime {t['runtime']*1e3:9.2f} ms  "
                  f"ratio {row['ratio']:5.2f}  numpy {t['numpy']*1e3:9.2f} ms  err {err:.1e}{'' if ok else '  WRONG'}",
                  file=sys.stderr)
            del ops, ref, results
    ratios = [r["ratio"] for r in rows]
    worst = max(rows, key=lambda r: r["ratio"])
    doc = ["# Run-time sizes against fixed sizes (CPU libraries)", "",
           f"Machine: {args.machine}. Threads: {args.threads}. Best of {args.repeat} interleaved runs each, on the",
           "same numpy arrays; both libraries built by the same `tcc build` (target CPU "
           f"`{manifest['target_cpu']}`), one with the sizes in the source, one with `range R;` and the sizes",
           "passed at the call (assumed with `--assume` at build time).", "",
           f"**Median runtime / fixed: {statistics.median(ratios):.2f}; worst {worst['ratio']:.2f} ({worst['name']})** "
           f"over {len(rows)} cases; all results {'match' if all(r['ok'] for r in rows) else 'DO NOT all match'} numpy.", "",
           "| case | einsum | fixed (ms) | run-time sizes (ms) | run-time / fixed | numpy (ms) | run-time / numpy | max rel. error |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        doc.append(f"| {r['name']} | `{r['spec']}` | {r['fixed']*1e3:.2f} | {r['runtime']*1e3:.2f} | {r['ratio']:.2f} | "
                   f"{r['numpy']*1e3:.2f} | {r['vs_numpy']:.2f} | {r['err']:.1e} |")
    doc += ["", "Command:", "", "```", " ".join(["python3"] + sys.argv), "```", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(doc))
    print("\n".join(doc))


if __name__ == "__main__":
    bench_main(build, run, tcc="target/debug/tcc", repeat=3, out="bench/cpu/results-runtime-sizes.md")
