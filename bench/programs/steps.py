#!/usr/bin/env python3
"""Where a whole program's time goes: each statement of a .tc program alone, tcc
against numpy on the same shape, in the same process and minutes.

Each statement becomes a program of its own (the file's declarations, the tensors
it reads as inputs, the one it writes as the output) compiled with the tcc Python
package; its numpy counterpart is `numpy.einsum(..., optimize=True)` of the same
term (element-wise calls applied to the operand first), which for the GEMM-shaped
steps is one BLAS call. Consecutive pairs given with --pair (`Sc,P`: the GETT of
`Sc` and the map `P = exp(Sc)`) are timed as one program too, with
TCC_GETT_EPILOGUE=1 and 0 (the map inside the GETT, and as a pass of its own).
Then the whole program. Threads: --threads for both (TCC_NUM_THREADS set before
import; threadpoolctl for numpy), --pause seconds idle before each side's calls.

    python3 bench/programs/steps.py --threads 2
    python3 bench/programs/steps.py --threads 16 --reps 5
"""

import argparse
import os
import re
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--program", default="attention_block")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=3, help="alternations of tcc and numpy")
ap.add_argument("--repeat", type=int, default=5, help="calls per side per alternation (best kept)")
ap.add_argument("--pause", type=float, default=0.3)
ap.add_argument("--pair", action="append", default=None, help="two statement targets, e.g. Sc,P")
args = ap.parse_args()
os.environ["TCC_NUM_THREADS"] = str(args.threads)

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import tcc  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
src = open(os.path.join(ROOT, "examples", "programs", args.program + ".tc"), encoding="utf-8").read()
src = re.sub(r"//[^\n]*", "", src)
decls = [s.strip() for s in src.split(";") if s.strip()]
heads = [d for d in decls if re.match(r"(range|index)\b", d)]
tensors = {}  # name -> (indices, type)
for d in decls:
    m = re.match(r"(?:(?:input|output)\s+)?tensor\s+(\w+)\[([\w,\s]*)\]\s*:\s*(\w+)", d)
    if m:
        tensors[m.group(1)] = ([i.strip() for i in m.group(2).split(",")], m.group(3))
stmts = [d for d in decls if re.match(r"\w+\[[\w,\s]*\]\s*\+?=", d)]
sizes = {}
ranges = {m.group(1): int(m.group(2)) for m in (re.match(r"range\s+(\w+)\s*=\s*(\d+)", h) for h in heads) if m}
for h in heads:
    m = re.match(r"index\s+([\w,\s]+):\s*(\w+)", h)
    if m:
        for i in m.group(1).split(","):
            sizes[i.strip()] = ranges[m.group(2)]


def target(st):
    return re.match(r"(\w+)\[", st).group(1)


def reads(st):
    rhs = st.split("=", 1)[1]
    return list(dict.fromkeys(n for n in re.findall(r"(\w+)\[", rhs) if n in tensors))


def program(sts):
    """The declarations plus `sts`: what they read and nobody wrote, inputs; what
    they write, outputs (the last) or temporaries (the others)."""
    written = [target(s) for s in sts]
    ins = [t for s in sts for t in reads(s) if t not in written]
    lines = [h + ";" for h in heads]
    for t in dict.fromkeys(ins):
        idx, ty = tensors[t]
        lines.append(f"input tensor {t}[{','.join(idx)}] : {ty};")
    for t in written:
        idx, ty = tensors[t]
        role = "output tensor" if t == written[-1] else "tensor"
        lines.append(f"{role} {t}[{','.join(idx)}] : {ty};")
    return "\n".join(lines + [s + ";" for s in sts]) + "\n", list(dict.fromkeys(ins))


FUNCS = {"exp": np.exp, "recip": lambda x: 1.0 / x, "log": np.log, "sqrt": np.sqrt, "abs": np.abs,
         "relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh}


def numpy_step(st):
    """`numpy.einsum` of the statement's one term (coefficient, calls applied first)."""
    lhs, rhs = st.split("=", 1)
    out = "".join(i.strip() for i in re.match(r"\w+\[([\w,\s]*)\]", lhs.strip()).group(1).split(","))
    coef = 1.0
    ops = []
    for f in re.split(r"\*", rhs):
        f = f.strip()
        m = re.match(r"(\w+)\((\w+)\[([\w,\s]*)\]\)$", f)
        if m:
            ops.append((m.group(1), m.group(2), "".join(i.strip() for i in m.group(3).split(","))))
            continue
        m = re.match(r"(\w+)\[([\w,\s]*)\]$", f)
        if m:
            ops.append((None, m.group(1), "".join(i.strip() for i in m.group(2).split(","))))
            continue
        try:
            coef *= float(f)
        except ValueError:
            return None  # several terms: no one-call numpy counterpart
    spec = ",".join(o[2] for o in ops) + "->" + out

    def run(arrays):
        xs = [FUNCS[fn](arrays[t]) if fn else arrays[t] for fn, t, _ in ops]
        if len(xs) > 1 or spec.split("->")[0] != out:
            r = np.einsum(spec, *xs, optimize=True)
        else:
            r = xs[0] if ops[0][0] else xs[0].copy()  # a map's result is new already
        return coef * r if coef != 1.0 else r
    return run


def best_of(f, n):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def time_tcc(text, ins, arrays, env=None):
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        prog = tcc.compile(text).main  # TCC_GETT_EPILOGUE is read here
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    call = lambda: prog(**{t: arrays[t] for t in ins})  # noqa: E731
    best = float("inf")
    for _ in range(args.reps):
        time.sleep(args.pause)
        best = min(best, best_of(call, args.repeat))
    return best


rng = np.random.default_rng(0)
arrays = {t: 0.05 * rng.standard_normal([sizes[i] for i in idx]) for t, (idx, _) in tensors.items()}
rows = []
with threadpool_limits(args.threads):
    for st in stmts:
        text, ins = program([st])
        tt = time_tcc(text, ins, arrays)
        f = numpy_step(st)
        tn = float("inf") if f else float("nan")
        for _ in range(args.reps if f else 0):
            time.sleep(args.pause)
            tn = min(tn, best_of(lambda: f(arrays), args.repeat))
        rows.append((st, tt, tn))
        print(f"{st}: tcc {tt*1e3:.2f} ms, numpy {tn*1e3:.2f} ms", file=sys.stderr)
    pairs = args.pair if args.pair is not None else (["Sc,P"] if args.program == "attention_block" else [])
    pair_rows = []
    for p in pairs:
        a, b = p.split(",")
        sts = [next(s for s in stmts if target(s) == a), next(s for s in stmts if target(s) == b)]
        text, ins = program(sts)
        times = [time_tcc(text, ins, arrays, {"TCC_GETT_EPILOGUE": e}) for e in ("1", "0", "1", "0")]
        pair_rows.append((p, min(times[0], times[2]), min(times[1], times[3])))
    whole = [time_tcc(src, [t for t in tensors if re.search(rf"input tensor {t}\[", src)], arrays,
                      {"TCC_GETT_EPILOGUE": e}) for e in ("1", "0", "1", "0")]

print(f"\n{args.program}, {args.threads} threads, best of {args.reps} x {args.repeat} calls\n")
print("| statement | tcc | numpy | numpy / tcc |")
print("|---|---|---|---|")
for st, tt, tn in rows:
    print(f"| `{st}` | {tt*1e3:.2f} ms | {tn*1e3:.2f} ms | {tn/tt:.2f} |")
print(f"| sum of the statements | {sum(r[1] for r in rows)*1e3:.2f} ms | {sum(r[2] for r in rows)*1e3:.2f} ms | |")
for p, t1, t0 in pair_rows:
    print(f"\npair {p} as one program: {t1*1e3:.2f} ms with the map as the GETT's epilogue, "
          f"{t0*1e3:.2f} ms as a pass of its own (TCC_GETT_EPILOGUE=0)")
print(f"\nwhole program: {min(whole[0], whole[2])*1e3:.2f} ms (epilogue), "
      f"{min(whole[1], whole[3])*1e3:.2f} ms (TCC_GETT_EPILOGUE=0)")
