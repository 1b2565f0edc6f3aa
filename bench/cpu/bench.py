#!/usr/bin/env python3
"""tcc's CPU back end against numpy.einsum(optimize=True) and OpenBLAS dgemm.

Two steps, which may run on different machines of the same CPU family:

  build  writes each contraction of the suite (working sets of 50-500 MB) as a
         .tc program and compiles it with `tcc build` into DIR/libcaseK.so
         (plus DIR/manifest.json);
  run    (numpy only) for each case draws the inputs with numpy, times
         numpy.einsum(spec, *inputs, optimize=True) and the library's C function
         on the very same arrays through ctypes (best of --repeat runs each),
         checks tcc's result against numpy's, measures OpenBLAS dgemm
         (numpy.dot, 3000 x 3000) and writes a markdown table.

Both sides use the same number of threads (--threads: TCC_NUM_THREADS for tcc,
threadpoolctl for numpy's OpenBLAS).

Reproduce (from the repository root):
    cargo build --release --workspace
    pip install numpy threadpoolctl
    python3 bench/cpu/bench.py build --dir /tmp/tccbench
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/cpu/bench.py run --dir /tmp/tccbench --threads 2
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

import numpy as np

# (name, einsum spec, sizes, element type, GEMM-like: one compute-bound binary contraction
#  with every group large; small-k, matrix-vector-like and f32 cases are not)
SUITE = [
    ("matmul 2000", "ik,kj->ij", dict(i=2000, j=2000, k=2000), "f64", True),
    ("matmul 3000", "ik,kj->ij", dict(i=3000, j=3000, k=3000), "f64", True),
    ("matmul A^T B 2500", "ki,kj->ij", dict(i=2500, j=2500, k=2500), "f64", True),
    ("matmul A B^T 2500", "ik,jk->ij", dict(i=2500, j=2500, k=2500), "f64", True),
    ("matmul A^T B^T 2000", "ki,jk->ij", dict(i=2000, j=2000, k=2000), "f64", True),
    ("tall-skinny 200000x64x64", "ik,kj->ij", dict(i=200000, j=64, k=64), "f64", False),
    ("batched matmul 64x256^3", "bik,bkj->bij", dict(b=64, i=256, j=256, k=256), "f64", True),
    ("sgemm 3000 (f32)", "ik,kj->ij", dict(i=3000, j=3000, k=3000), "f32", False),
    ("3D: abk,kc->abc", "abk,kc->abc", dict(a=200, b=200, c=200, k=200), "f64", True),
    ("CCSD ladder abcd,cdij->abij", "abcd,cdij->abij", dict(a=80, b=80, c=80, d=80, i=30, j=30), "f64", True),
    ("CCSD ring acik,kbcj->abij", "acik,kbcj->abij", dict(a=100, b=100, c=100, i=30, j=30, k=30), "f64", True),
    ("CCSD hole ladder abkl,klij->abij", "abkl,klij->abij", dict(a=100, b=100, i=40, j=40, k=40, l=40), "f64", True),
    ("CCSD Fock ac,cbij->abij", "ac,cbij->abij", dict(a=200, b=200, c=200, i=30, j=30), "f64", False),
    ("CCSD Fock abik,kj->abij", "abik,kj->abij", dict(a=150, b=150, i=40, j=40, k=40), "f64", False),
    ("CCSD ph akic,ck->ai", "akic,ck->ai", dict(a=100, c=100, i=40, k=40), "f64", False),
    ("4-index step pqrs,ap->aqrs", "pqrs,ap->aqrs", dict(a=70, p=70, q=70, r=70, s=70), "f64", False),
    ("TN abcd,cdef->abef", "abcd,cdef->abef", dict(a=64, b=64, c=32, d=32, e=64, f=64), "f64", True),
    ("TN transposed aibj,bjck->acik", "aibj,bjck->acik", dict(a=50, b=50, c=50, i=50, j=50, k=50), "f64", True),
    ("attention scores bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", dict(b=4, h=16, q=512, k=512, d=64), "f64", False),
    ("attention values bhqk,bhkd->bhqd", "bhqk,bhkd->bhqd", dict(b=4, h=16, q=512, k=512, d=64), "f64", False),
    ("Coulomb J pqrs,rs->pq", "pqrs,rs->pq", dict(p=80, q=80, r=80, s=80), "f64", False),
    ("exchange K prqs,rs->pq", "prqs,rs->pq", dict(p=80, q=80, r=80, s=80), "f64", False),
    ("four-index transform N=70", "ap,bq,cr,ds,pqrs->abcd", dict(a=70, b=70, c=70, d=70, p=70, q=70, r=70, s=70), "f64", False),
    ("matrix chain ij,jk,kl->il", "ij,jk,kl->il", dict(i=2000, j=2000, k=2000, l=2000), "f64", False),
    ("MPS environment xsa,xy,ysb->ab", "xsa,xy,ysb->ab", dict(x=1000, y=1000, a=1000, b=1000, s=4), "f64", False),
    ("full contraction ijk,ijk->", "ijk,ijk->", dict(i=300, j=300, k=300), "f64", False),
]


def tc_source(spec, sizes, elem):
    ins, out = spec.split("->")
    lines = []
    for letter, n in sizes.items():
        lines.append(f"range R{letter} = {n}; index {letter} : R{letter};")
    ops = ins.split(",")
    for k, s in enumerate(ops):
        idx = f"[{','.join(s)}]" if s else ""
        lines.append(f"input tensor X{k}{idx} : {elem};")
    oidx = f"[{','.join(out)}]" if out else ""
    lines.append(f"output tensor Out{oidx} : {elem};")
    rhs = " * ".join(f"X{k}[{','.join(s)}]" if s else f"X{k}" for k, s in enumerate(ops))
    lines.append(f"Out{oidx} = {rhs};")
    return "\n".join(lines) + "\n"


def best_time(f, repeat):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def selected(args, name):
    """`--only A,B`: the cases whose name contains A or B (all without it)."""
    return not args.only or any(part in name for part in args.only.split(","))


def build(args):
    os.makedirs(args.dir, exist_ok=True)
    cases = []
    for k, (name, spec, sizes, elem, gemm_like) in enumerate(SUITE):
        if not selected(args, name):
            continue
        src = os.path.join(args.dir, f"case{k}.tc")
        with open(src, "w") as f:
            f.write(tc_source(spec, sizes, elem))
        lib = os.path.join(args.dir, f"libcase{k}.so")
        cmd = [args.tcc, "build", src, "-o", lib]
        if args.target_cpu:
            cmd += ["--target-cpu", args.target_cpu]
        subprocess.run(cmd, check=True, capture_output=True)
        header = open(os.path.join(args.dir, f"case{k}.h")).read()
        flops = float(re.search(r"\(([0-9.e+]+) flops per call\)", header).group(1))
        cases.append(dict(name=name, spec=spec, sizes=sizes, elem=elem, gemm_like=gemm_like,
                          lib=f"libcase{k}.so", func=f"tcc_case{k}_main", flops=flops))
        print(f"built {name}", file=sys.stderr)
    with open(os.path.join(args.dir, "manifest.json"), "w") as f:
        json.dump(dict(cases=cases, target_cpu=args.target_cpu or "native"), f, indent=1)


def run(args):
    os.environ["TCC_NUM_THREADS"] = str(args.threads)
    from threadpoolctl import threadpool_info, threadpool_limits

    manifest = json.load(open(os.path.join(args.dir, "manifest.json")))
    rows = []
    with threadpool_limits(args.threads):
        info = [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for d in threadpool_info()]
        print("numpy", np.__version__, info, file=sys.stderr)
        n = 3000
        a = np.random.default_rng(0).standard_normal((n, n))
        b = np.random.default_rng(1).standard_normal((n, n))
        np.dot(a, b)
        t = float("inf")
        for _ in range(args.repeat):
            time.sleep(0.3)
            t = min(t, best_time(lambda: np.dot(a, b), 1)[0])
        dgemm = 2 * n**3 / t / 1e9
        del a, b
        print(f"OpenBLAS dgemm {n}: {dgemm:.1f} GFLOP/s", file=sys.stderr)

        rng = np.random.default_rng(42)
        for case in manifest["cases"]:
            if not selected(args, case["name"]):
                continue
            spec, sizes, elem = case["spec"], case["sizes"], case["elem"]
            dtype = np.float32 if elem == "f32" else np.float64
            ins, out = spec.split("->")
            ops = [rng.standard_normal([sizes[c] for c in s]).astype(dtype) for s in ins.split(",")]
            res = np.empty([sizes[c] for c in out], dtype=dtype)
            ws = sum(o.nbytes for o in ops) + res.nbytes
            lib = ctypes.CDLL(os.path.join(args.dir, case["lib"]))
            f = getattr(lib, case["func"])
            f.restype = ctypes.c_int
            cargs = []
            for arr in ops + [res]:
                cargs += [ctypes.c_void_p(arr.ctypes.data), ctypes.c_size_t(arr.size)]

            def call():
                rc = f(*cargs)
                if rc != 0:
                    raise RuntimeError(f"{case['name']}: tcc returned {rc}")
            # Interleaved, so that both see the same machine load; best of each.
            # OpenBLAS's threads spin for a while after a call: pause before each
            # timed call so neither side runs against the other's idle threads.
            ref = np.einsum(spec, *ops, optimize=True)
            call()
            t_np = t_tcc = float("inf")
            for _ in range(args.repeat):
                time.sleep(0.3)
                t, ref = best_time(lambda: np.einsum(spec, *ops, optimize=True), 1)
                t_np = min(t_np, t)
                time.sleep(0.3)
                t, _ = best_time(call, 1)
                t_tcc = min(t_tcc, t)
            scale = max(float(np.max(np.abs(ref))), 1e-300)
            err = float(np.max(np.abs(res.astype(np.float64) - np.asarray(ref, dtype=np.float64)))) / scale
            ok = err <= (1e-4 if elem == "f32" else 1e-9)
            gflops = case["flops"] / t_tcc / 1e9
            row = dict(name=case["name"], spec=spec, ws=ws / 1e6, t_np=t_np, t_tcc=t_tcc, ratio=t_tcc / t_np,
                       gflops=gflops, gemm_like=case["gemm_like"], err=err, ok=ok, elem=elem)
            rows.append(row)
            print(f"{row['name']:36s} ws {row['ws']:6.0f} MB  numpy {t_np*1e3:9.2f} ms  tcc {t_tcc*1e3:9.2f} ms  "
                  f"ratio {row['ratio']:5.2f}  {gflops:6.1f} GFLOP/s  err {err:.1e}{'' if ok else '  WRONG'}",
                  file=sys.stderr)
            del ops, ref, res

        time.sleep(0.3)
        a = np.random.default_rng(0).standard_normal((n, n))
        b = np.random.default_rng(1).standard_normal((n, n))
        t_end = float("inf")
        for _ in range(args.repeat):
            time.sleep(0.3)
            t_end = min(t_end, best_time(lambda: np.dot(a, b), 1)[0])
        dgemm_end = 2 * n**3 / t_end / 1e9
        del a, b

    ratios = [r["ratio"] for r in rows]
    gemm = [r["gflops"] / dgemm for r in rows if r["gemm_like"] and r["elem"] == "f64"]
    lines = [
        "# tcc CPU back end vs numpy.einsum(optimize=True)",
        "",
        f"Machine: {args.machine}. Threads: {args.threads} (TCC_NUM_THREADS for tcc, threadpoolctl for numpy).",
        f"Best of {args.repeat} runs each, on the same numpy arrays; tcc is the `tcc build` library's C function",
        f"(compiled for `{manifest['target_cpu']}`) called through ctypes, numpy the einsum call.",
        f"numpy {np.__version__}, BLAS: {info}.",
        f"OpenBLAS dgemm (numpy.dot, 3000x3000): **{dgemm:.1f} GFLOP/s** before the suite, {dgemm_end:.1f} after "
        "(the % column uses the first).",
        "",
        "| case | einsum | working set (MB) | numpy (ms) | tcc (ms) | tcc / numpy | tcc GFLOP/s | % of dgemm | max rel. error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | `{r['spec']}` | {r['ws']:.0f} | {r['t_np']*1e3:.2f} | {r['t_tcc']*1e3:.2f} | "
                     f"{r['ratio']:.2f} | {r['gflops']:.1f} | {100 * r['gflops'] / dgemm:.0f} % | "
                     f"{r['err']:.1e}{'' if r['ok'] else ' WRONG'} |")
    lines += [
        "",
        f"**Median ratio tcc / numpy: {statistics.median(ratios):.2f}** over {len(rows)} cases "
        f"(geometric mean {float(np.exp(np.mean(np.log(ratios)))):.2f}; target ≤ 0.85).",
        "",
        (f"GEMM-like f64 cases (one compute-bound binary contraction, {len(gemm)}): median **{100 * statistics.median(gemm):.0f} %** "
         f"of dgemm's GFLOP/s (min {100 * min(gemm):.0f} %, max {100 * max(gemm):.0f} %; target ≥ 70 %). "
         "The other cases are memory-bound (`pqrs,rs->pq`, `akic,ck->ai`, a short `k`) or multi-step."
         if gemm else "No GEMM-like f64 case in this selection."),
        "",
        "Reproduce: `cargo build --release --workspace && python3 bench/cpu/bench.py build --dir /tmp/tccbench && "
        f"env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/cpu/bench.py run --dir /tmp/tccbench --threads {args.threads}`",
    ]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not all(r["ok"] for r in rows):
        sys.exit(1)


def main(build=build, run=run, tcc="target/release/tcc", repeat=5, out="bench/cpu/results.md"):
    """The `build` and `run` command line (runtime_sizes.py reuses it with its own steps)."""
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--dir", required=True)
    b.add_argument("--tcc", default=tcc)
    b.add_argument("--target-cpu", default=None)
    b.add_argument("--only", default=None)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--repeat", type=int, default=repeat)
    r.add_argument("--only", default=None)
    r.add_argument("--machine", default="this machine")
    r.add_argument("--out", default=out)
    args = ap.parse_args()
    build(args) if args.cmd == "build" else run(args)


if __name__ == "__main__":
    main()
