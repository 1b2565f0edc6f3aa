#!/usr/bin/env python3
"""The Python package (`import tcc`) against numpy.einsum and opt_einsum, in one process.

1. Call overhead on tiny arrays (2x2 matmul): a compiled tcc program called with
   keyword arrays, tcc.einsum (cached program), numpy.einsum (default and
   optimize=True), opt_einsum.contract, and `A @ B` as the floor. Median of
   --repeat timings, each the mean of a timeit loop.
2. Contractions of the CPU suite (bench/cpu/bench.py's SUITE: the coupled-cluster
   terms, the four-index transform, a matrix chain, ...; same sizes) through
   tcc.einsum against numpy.einsum(optimize=True) and opt_einsum.contract on the
   same arrays: median of --repeat calls each, interleaved, after one warm-up call
   (tcc's first call compiles; the compile time is reported separately).

Writes bench/python/results.md (with the command and the machine).

Reproduce (from the repository root):
    ./x python          # builds and installs the package
    python3 -m pip install opt_einsum
    python3 bench/python/bench.py --threads 2
"""

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_CASES = (
    "CCSD ladder,CCSD ring,CCSD hole ladder,CCSD Fock ac,CCSD ph,"
    "four-index transform,matrix chain,MPS environment"
)


def load_suite():
    spec = importlib.util.spec_from_file_location("cpu_bench", os.path.join(ROOT, "bench", "cpu", "bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SUITE


def machine():
    cpu = platform.processor() or "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def per_call(f, repeat, min_time=0.2):
    """Median over `repeat` timeit loops of the mean seconds per call."""
    t = timeit.Timer(f)
    n, _ = t.autorange()
    n = max(n, int(n * min_time / 0.2))
    return statistics.median(t.repeat(repeat=repeat, number=n)) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default=DEFAULT_CASES, help="comma-separated parts of suite case names ('' for all)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "python", "results.md"))
    ap.add_argument("--machine", default=None)
    args = ap.parse_args()
    os.environ["TCC_NUM_THREADS"] = str(args.threads)
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = str(args.threads)

    import numpy as np

    import tcc

    try:
        import opt_einsum as oe
    except ImportError:
        oe = None
        print("opt_einsum not installed: its columns are empty", file=sys.stderr)

    rows = []
    # ---------------------------------------------------------------- overhead
    lib = tcc.compile(
        "range I = 2; index i, j, k : I;"
        "input tensor A[i,k]; input tensor B[k,j]; output tensor C[i,j];"
        "C[i,j] = A[i,k] * B[k,j];"
    )
    mm = lib.main
    A = np.random.default_rng(0).standard_normal((2, 2))
    B = np.random.default_rng(1).standard_normal((2, 2))
    assert np.allclose(mm(A=A, B=B), A @ B) and np.allclose(tcc.einsum("ik,kj->ij", A, B), A @ B)
    over = [
        ("tcc program call `lib.main(A=A, B=B)`", lambda: mm(A=A, B=B)),
        ("tcc.einsum (cached)", lambda: tcc.einsum("ik,kj->ij", A, B)),
        ("numpy.einsum", lambda: np.einsum("ik,kj->ij", A, B)),
        ("numpy.einsum(optimize=True)", lambda: np.einsum("ik,kj->ij", A, B, optimize=True)),
    ]
    if oe is not None:
        over.append(("opt_einsum.contract", lambda: oe.contract("ik,kj->ij", A, B)))
    over.append(("`A @ B` (floor)", lambda: A @ B))
    over_rows = []
    for name, f in over:
        t = per_call(f, args.repeat)
        over_rows.append((name, t))
        print(f"{name:45s} {t * 1e6:8.2f} us", file=sys.stderr)
    t_np_opt = dict(over_rows)["numpy.einsum(optimize=True)"]

    # ---------------------------------------------------------------- suite
    suite = load_suite()
    parts = [p for p in args.only.split(",") if p] if args.only else []
    rng = np.random.default_rng(42)
    for name, spec, sizes, elem, _ in suite:
        if parts and not any(p in name for p in parts):
            continue
        dtype = np.float32 if elem == "f32" else np.float64
        ins, out = spec.split("->")
        ops = [rng.standard_normal([sizes[c] for c in s]).astype(dtype) for s in ins.split(",")]
        c0 = tcc.einsum_cache_info()["compilations"]
        t0 = time.perf_counter()
        # what tcc.einsum's first call does before running: generate, check, JIT-compile
        tcc._einsum_compile(spec, ops, elem, (spec, tuple(o.shape for o in ops), elem))
        t_compile = time.perf_counter() - t0
        assert tcc.einsum_cache_info()["compilations"] == c0 + 1
        got = tcc.einsum(spec, *ops)  # from the cache
        assert tcc.einsum_cache_info()["compilations"] == c0 + 1
        fs = {
            "tcc": lambda: tcc.einsum(spec, *ops),
            "np": lambda: np.einsum(spec, *ops, optimize=True),
        }
        if oe is not None:
            fs["oe"] = lambda: oe.contract(spec, *ops)
        for f in fs.values():
            f()  # warm up (opt_einsum caches nothing, numpy nothing; BLAS threads start)
        times = {k: [] for k in fs}
        for _ in range(args.repeat):
            for k, f in fs.items():
                time.sleep(0.1)
                t = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        ref = np.einsum(spec, *ops, optimize=True)
        err = float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-300))
        ok = err <= (1e-4 if elem == "f32" else 1e-9)
        row = dict(name=name, spec=spec, compile=t_compile, **med, err=err, ok=ok)
        rows.append(row)
        print(
            f"{name:36s} tcc {med['tcc']*1e3:8.2f} ms  numpy {med['np']*1e3:8.2f} ms  "
            + (f"opt_einsum {med['oe']*1e3:8.2f} ms  " if "oe" in med else "")
            + f"compile {t_compile:.2f} s  err {err:.1e}{'' if ok else ' WRONG'}",
            file=sys.stderr,
        )
        del ops, got, ref

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    cmd = "python3 bench/python/bench.py --threads %d --repeat %d" % (args.threads, args.repeat)
    if args.only != DEFAULT_CASES:
        cmd += f" --only '{args.only}'"
    lines = [
        "# The Python package against numpy.einsum and opt_einsum",
        "",
        f"Command: `{cmd}` (after `./x python`, which builds and installs the package).",
        "",
        f"Machine: {args.machine or machine()}. Threads: {args.threads} (TCC_NUM_THREADS; OMP/OPENBLAS_NUM_THREADS for numpy's BLAS).",
        f"Load average at the end (1, 5, 15 min): {load} — the machine is shared; compare ratios, not absolute times.",
        f"numpy {np.__version__}" + (f", opt_einsum {oe.__version__}" if oe is not None else ", no opt_einsum") + f", tcc {tcc.__version__}.",
        "",
        "## Call overhead: 2x2 matmul",
        "",
        f"Median of {args.repeat} timeit loops (mean per call within a loop).",
        "",
        "| call | µs per call | / numpy.einsum(optimize=True) |",
        "|---|---:|---:|",
    ]
    for name, t in over_rows:
        lines.append(f"| {name} | {t * 1e6:.2f} | {t / t_np_opt:.2f} |")
    lines += [
        "",
        "## CPU-suite contractions through `tcc.einsum`",
        "",
        "Cases and sizes of `bench/cpu/bench.py`. Median of "
        f"{args.repeat} calls each (interleaved, after a warm-up); `tcc.einsum` includes argument checks and the "
        "cache lookup; compile: generating, checking and JIT-compiling the program (once per expression, shapes "
        "and dtypes).",
        "",
        "| case | einsum | tcc (ms) | numpy opt (ms) | opt_einsum (ms) | tcc / numpy | tcc / opt_einsum | compile (s) | max rel. error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        oe_ms = f"{r['oe']*1e3:.2f}" if "oe" in r else "–"
        oe_ratio = f"{r['tcc'] / r['oe']:.2f}" if "oe" in r else "–"
        lines.append(
            f"| {r['name']} | `{r['spec']}` | {r['tcc']*1e3:.2f} | {r['np']*1e3:.2f} | {oe_ms} | "
            f"{r['tcc'] / r['np']:.2f} | {oe_ratio} | {r['compile']:.2f} | {r['err']:.1e}{'' if r['ok'] else ' WRONG'} |"
        )
    if rows:
        ratios = [r["tcc"] / r["np"] for r in rows]
        lines += ["", f"Median ratio tcc / numpy.einsum(optimize=True): **{statistics.median(ratios):.2f}** over {len(rows)} cases."]
        if oe is not None:
            r2 = [r["tcc"] / r["oe"] for r in rows]
            lines.append(f"Median ratio tcc / opt_einsum.contract: **{statistics.median(r2):.2f}**.")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not all(r["ok"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
