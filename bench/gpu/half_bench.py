#!/usr/bin/env python3
"""bf16 / f16 programs on the GPU: tcc against torch in the same run.

  build  (here, with a tcc that has LLVM)  writes the benchmark cases and random
         16-bit programs as .tc files into DIR and compiles each with
         `tcc build --target cuda` (PTX + plan; checks also with tiled and
         naive kernels forced);
  run    (the GPU machine: python3 with torch, the tcc-gpu runner)  times each
         case with `tcc-gpu CASE.tc --repeat R` (device time of the fastest run,
         CUDA events, inputs resident) and the same contraction with torch
         (torch.einsum or the element-wise expression on tensors of the same
         dtype; CUDA events, best of R after warm-up), measures the GPU's bf16
         and f16 peak with torch.matmul (8192^3), and writes a markdown table:
         tcc and torch times, tcc/torch time ratio (below 1: tcc faster),
         TFLOP/s and the fraction of the measured peak of that dtype. Cases
         whose output is small enough are also compared with torch on the very
         same inputs (`tcc-gpu --save-inputs --output-dir`).

    python3 bench/gpu/half_bench.py build --dir DEST/half --tcc target/release/tcc
    python3 half_bench.py run --dir half --tcc-gpu ./tcc-gpu --out results.md --json half.json
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

# name, source (index notation), sizes, dtype, torch expression over the inputs
# (by name), flops kind: "gemm" (2 * product of every index), "ew" (elements of
# the output times the operations per element).
CASES = [
    ("gemm 8192^3", "C[i,j] = A[i,k] * B[k,j]", {"i": 8192, "j": 8192, "k": 8192}, "bf16",
     "torch.matmul(A, B)", "gemm"),
    ("mlp up: X W1 (4096 x 4096 -> 14336)", "H[t,f] = X[t,d] * W[d,f]", {"t": 4096, "d": 4096, "f": 14336}, "bf16",
     "torch.matmul(X, W)", "gemm"),
    ("mlp gate, nn.Linear layout: X W^T", "G[t,f] = X[t,d] * W[f,d]", {"t": 4096, "d": 4096, "f": 14336}, "bf16",
     "torch.matmul(X, W.t())", "gemm"),
    ("mlp down: H W2 (14336 -> 4096)", "Y[t,d] = H[t,f] * W[f,d]", {"t": 4096, "d": 4096, "f": 14336}, "bf16",
     "torch.matmul(H, W)", "gemm"),
    ("attention scores Q K^T (h 32, s 4096, d 128)", "S[b,h,s,u] = Q[b,h,s,d] * K[b,h,u,d]",
     {"b": 1, "h": 32, "s": 4096, "u": 4096, "d": 128}, "bf16", "torch.matmul(Q, K.transpose(-1, -2))", "gemm"),
    ("attention P V (b 2, h 32, s 2048, d 128)", "O[b,h,s,d] = P[b,h,s,u] * V[b,h,u,d]",
     {"b": 2, "h": 32, "s": 2048, "u": 2048, "d": 128}, "bf16", "torch.matmul(P, V)", "gemm"),
    ("attention scores, [b,s,h,d] inputs (s 2048)", "S[b,h,s,u] = Q[b,s,h,d] * K[b,u,h,d]",
     {"b": 2, "h": 32, "s": 2048, "u": 2048, "d": 128}, "bf16", "torch.einsum('bshd,buhd->bhsu', Q, K)", "gemm"),
    ("mlp up + down chain, bf16 intermediate H", "H[t,f] = X[t,d] * W[d,f]; Y[t,e] = H[t,f] * V[f,e]",
     {"t": 4096, "d": 4096, "f": 14336, "e": 4096}, "bf16", "torch.matmul(torch.matmul(X, W), V)", "gemm"),
    ("swiglu: silu(G) * U (4096 x 14336)", "Y[t,f] = silu(G[t,f]) * U[t,f]", {"t": 4096, "f": 14336}, "bf16",
     "torch.nn.functional.silu(G) * U", "ew"),
    ("gemm 8192^3 f16", "C[i,j] = A[i,k] * B[k,j]", {"i": 8192, "j": 8192, "k": 8192}, "f16",
     "torch.matmul(A, B)", "gemm"),
    ("attention scores Q K^T f16 (s 4096)", "S[b,h,s,u] = Q[b,h,s,d] * K[b,h,u,d]",
     {"b": 1, "h": 32, "s": 4096, "u": 4096, "d": 128}, "f16", "torch.matmul(Q, K.transpose(-1, -2))", "gemm"),
    ("mlp up f16", "H[t,f] = X[t,d] * W[d,f]", {"t": 4096, "d": 4096, "f": 14336}, "f16",
     "torch.matmul(X, W)", "gemm"),
]

REF = re.compile(r"([A-Za-z_]\w*)\[([a-z,]*)\]")


def tc_source(stmts, sizes, dtype):
    """The .tc program of one case (statements separated by `;`): every tensor
    in `dtype`; the last statement's target is the output, earlier targets are
    intermediates."""
    parts = [x.strip() for x in stmts.split(";") if x.strip()]
    ins, mids = [], []
    for k, st in enumerate(parts):
        lhs, rhs = st.split("=", 1)
        for m in REF.finditer(rhs):
            if m.group(1) not in [x[0] for x in ins + mids]:
                ins.append((m.group(1), m.group(2)))
        t = REF.search(lhs)
        if k + 1 < len(parts):
            mids.append((t.group(1), t.group(2)))
    out = REF.search(parts[-1].split("=", 1)[0])
    s = "".join(f"range R{c} = {n}; index {c} : R{c};\n" for c, n in sizes.items())
    s += "".join(f"input tensor {n}[{i}] : {dtype};\n" for n, i in ins)
    s += "".join(f"tensor {n}[{i}] : {dtype};\n" for n, i in mids)
    s += f"output tensor {out.group(1)}[{out.group(2)}] : {dtype};\n" + "".join(f"{st};\n" for st in parts)
    return s, [n for n, _ in ins], out.group(1)


def random_program(rng):
    """The random 16-bit programs of tests/gpu_half.rs (and tests/half.rs):
    16-bit, f32 and f64 tensors mixed; GEMM-shaped, chained through an
    intermediate, `exp`, `+=`, an outer sum. Sizes up to 4x the tests'."""
    types = ["bf16", "f16", "bf16", "f16", "f32", "f64"]
    ta, tb, tw, tt, tc, te = (rng.choice(types) for _ in range(6))
    n, m, k, l = 2 + rng.randrange(28), 1 + rng.randrange(36), 2 + rng.randrange(160), 1 + rng.randrange(24)
    s = (f"range N = {n}; range M = {m}; range K = {k}; range L = {l};\n"
         "index i : N; index j : M; index k : K; index l : L;\n"
         f"input tensor A[i,k] : {ta}; input tensor B[k,j] : {tb}; input tensor W[k,l] : {tw};\n"
         f"input tensor E[i,j] : {te}; input tensor V[j] : bf16;\n"
         f"tensor T[i,l] : {tt};\noutput tensor C[i,j] : {tc};\n")
    bases = ["A[i,k] * B[k,j]", "E[i,j]", "T[i,l] * W[k,l] * B[k,j]", "A[i,k] * B[k,j] * V[j]", "exp(E[i,j])"]

    def rhs():
        terms = []
        for t in range(1 + rng.randrange(3)):
            sign = "" if t == 0 else rng.choice([" + ", " - "])
            terms.append(f"{sign}{rng.choice(['', '2 * ', '0.5 * '])}{rng.choice(bases)}")
        return "".join(terms)

    s += "T[i,l] = A[i,k] * W[k,l];\n"
    s += f"C[i,j] = {rhs()};\n"
    if rng.randrange(2) == 0:
        s += f"C[i,j] += {rhs()};\n"
    if rng.randrange(3) == 0:
        s += "C[i,j] = C[i,j] * E[i,j] + V[j];\n"
    return s


def tcc_build(tcc, src, ptx, extra=()):
    r = subprocess.run([tcc, "build", "--target", "cuda", *extra, src, "-o", ptx], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{src}: {r.stderr}", file=sys.stderr)
        return None
    return [x for x in r.stderr.splitlines() if "kernel launches" in x or x.startswith("  ")]


def build(args):
    os.makedirs(os.path.join(args.dir, "cases"), exist_ok=True)
    manifest = []
    for k, (name, stmt, sizes, dtype, expr, kind) in enumerate(CASES):
        src = os.path.join(args.dir, "cases", f"h{k}.tc")
        text, ins, out = tc_source(stmt, sizes, dtype)
        open(src, "w").write(text)
        plan = tcc_build(args.tcc, src, os.path.join(args.dir, "cases", f"h{k}.ptx"))
        if plan is None:
            raise SystemExit(1)
        manifest.append({"name": name, "stmt": stmt, "sizes": sizes, "dtype": dtype, "torch": expr, "kind": kind,
                         "inputs": ins, "output": out, "plan": plan})
        print(f"h{k}: {name}: {' / '.join(p.strip() for p in plan)}")
    json.dump({"cases": manifest}, open(os.path.join(args.dir, "manifest.json"), "w"), indent=1)
    # Random 16-bit programs, and the 16-bit examples, for the checks.
    rdir = os.path.join(args.dir, "random")
    os.makedirs(rdir, exist_ok=True)
    rng = random.Random(1916)
    for k in range(args.random):
        open(os.path.join(rdir, f"r{k}.tc"), "w").write(random_program(rng))
    # One build: plans keep every implementation, `tcc-gpu --gpu-gemm K` forces one.
    sets = {"auto": []}
    srcs = [os.path.join(rdir, f) for f in sorted(os.listdir(rdir)) if f.endswith(".tc")]
    srcs += [os.path.join(args.dir, "examples", f) for f in sorted(os.listdir(os.path.join(args.dir, "examples")))]
    for d, extra in sets.items():
        os.makedirs(os.path.join(args.dir, "checks", d), exist_ok=True)
        bad = 0
        for s in srcs:
            n = os.path.splitext(os.path.basename(s))[0]
            bad += tcc_build(args.tcc, s, os.path.join(args.dir, "checks", d, n + ".ptx"), extra) is None
        print(f"checks/{d}: {len(srcs) - bad} of {len(srcs)} built")


def tflops(c, secs):
    sizes = c["sizes"]
    n = 1
    if c["kind"] == "gemm":
        # 2 flops per term of each statement's sum: its distinct indices.
        total = 0
        for st in [x for x in c["stmt"].split(";") if x.strip()]:
            idx = set(ch for m in REF.finditer(st) for ch in m.group(2).split(","))
            p = 1
            for ch in idx:
                p *= sizes[ch]
            total += 2.0 * p
        return total / secs / 1e12
    for v in sizes.values():
        n *= v
    return 5.0 * n / secs / 1e12  # silu(g) * u: about 5 operations per element


def run_tcc(tcc_gpu, src, repeat, outdir=None):
    cmd = [tcc_gpu, src, "--repeat", str(repeat)]
    if outdir:
        cmd += ["--save-inputs", "--output-dir", outdir]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    m = re.search(r"time = ([0-9.]+) ms", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        return None, (r.stdout + r.stderr)[-600:], time.time() - t0
    return float(m.group(1)) * 1e-3, "", time.time() - t0


def load_npy(path, dtype, torch, np):
    a = np.load(path)
    if dtype == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def best_time(torch, f, repeat):
    f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        f()
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) * 1e-3)
    return best


def run(args):
    import numpy as np
    import torch

    man = json.load(open(os.path.join(args.dir, "manifest.json")))["cases"]
    dev = torch.cuda.get_device_name(0)
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}
    peak = {}
    for d in ["bf16", "f16"]:
        a = torch.randn(8192, 8192, device="cuda", dtype=tdt[d])
        b = torch.randn(8192, 8192, device="cuda", dtype=tdt[d])
        peak[d] = 2 * 8192**3 / best_time(torch, lambda: torch.matmul(a, b), args.repeat) / 1e12
        del a, b
    print(f"device {dev}; measured peak (torch.matmul 8192^3): bf16 {peak['bf16']:.1f}, f16 {peak['f16']:.1f} TFLOP/s",
          flush=True)
    rows = []
    t_start = time.time()
    for k, c in enumerate(man):
        if args.only and str(k) not in args.only.split(","):
            continue
        if time.time() - t_start > args.deadline:
            print(f"h{k}: skipped (time)")
            continue
        src = os.path.join(args.dir, "cases", f"h{k}.tc")
        out_elems = 1
        last = [x for x in c["stmt"].split(";") if x.strip()][-1]
        for ch in re.search(r"\[([a-z,]*)\]", last).group(1).split(","):
            out_elems *= c["sizes"][ch]
        compare = out_elems <= args.compare_limit
        tmp = os.path.join(args.tmp, f"half_h{k}") if compare else None
        t_tcc, err, wall = run_tcc(args.tcc_gpu, src, args.repeat, tmp)
        row = {"case": f"h{k}", "name": c["name"], "dtype": c["dtype"], "tcc_s": t_tcc, "error": err, "tcc_wall_s": wall}
        # torch on random tensors of the same shapes (or tcc's own inputs, compared).
        env = {"torch": torch}
        shapes = {}
        for m in REF.finditer(c["stmt"]):
            shapes[m.group(1)] = [c["sizes"][ch] for ch in m.group(2).split(",")]
        for n in c["inputs"]:
            if compare and os.path.exists(os.path.join(tmp, f"{n}.npy")):
                env[n] = load_npy(os.path.join(tmp, f"{n}.npy"), c["dtype"], torch, np).cuda()
            else:
                env[n] = torch.randn(*shapes[n], device="cuda", dtype=tdt[c["dtype"]])
        f = eval("lambda: " + c["torch"], env)
        t_torch = best_time(torch, f, args.repeat)
        row["torch_s"] = t_torch
        if compare and t_tcc is not None:
            got = load_npy(os.path.join(tmp, f"{c['output']}.npy"), c["dtype"], torch, np).cuda().float()
            want = f().float()
            row["rel_err_vs_torch"] = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
        for k2 in list(env):
            if k2 != "torch":
                del env[k2]
        torch.cuda.empty_cache()
        if t_tcc is not None:
            row["tcc_tflops"] = tflops(c, t_tcc)
            row["ratio"] = t_tcc / t_torch
            row["frac_peak"] = row["tcc_tflops"] / peak[c["dtype"]] if c["kind"] == "gemm" else None
        row["torch_tflops"] = tflops(c, t_torch)
        rows.append(row)
        fp = f"{row['frac_peak']:.2f}" if row.get("frac_peak") is not None else "-"
        print(f"h{k} {c['name']}: tcc {t_tcc and t_tcc * 1e3 or float('nan'):.3f} ms, torch {t_torch * 1e3:.3f} ms, "
              f"ratio {row.get('ratio', float('nan')):.2f}, peak fraction {fp}, "
              f"err vs torch {row.get('rel_err_vs_torch', '-')} {err}", flush=True)
    lines = [f"Device: {dev}; torch {torch.__version__}. Measured peak (torch.matmul 8192^3): "
             f"bf16 {peak['bf16']:.1f} TFLOP/s, f16 {peak['f16']:.1f} TFLOP/s. Times: best of {args.repeat}, "
             "device time (CUDA events). Ratio: tcc time / torch time (below 1: tcc faster).", "",
             "| case | dtype | tcc ms | torch ms | tcc/torch | tcc TFLOP/s | of peak | max rel. err vs torch |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = f"{r['tcc_s'] * 1e3:.3f}" if r["tcc_s"] else "FAIL"
        lines.append(f"| {r['name']} | {r['dtype']} | {t} | {r['torch_s'] * 1e3:.3f} | "
                     f"{r.get('ratio', float('nan')):.2f} | {r.get('tcc_tflops', float('nan')):.1f} | "
                     f"{r['frac_peak']:.2f} |" if r.get("frac_peak") is not None else
                     f"| {r['name']} | {r['dtype']} | {t} | {r['torch_s'] * 1e3:.3f} | "
                     f"{r.get('ratio', float('nan')):.2f} | {r.get('tcc_tflops', float('nan')):.1f} | - |")
        lines[-1] += f" {r['rel_err_vs_torch']:.1e} |" if "rel_err_vs_torch" in r else " - |"
    open(args.out, "w").write("\n".join(lines) + "\n")
    if args.json:
        json.dump({"device": dev, "peak_tflops": peak, "rows": rows}, open(args.json, "w"), indent=1)
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--dir", required=True)
    b.add_argument("--tcc", required=True)
    b.add_argument("--random", type=int, default=40)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--tcc-gpu", required=True)
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--out", default="half_results.md")
    r.add_argument("--json")
    r.add_argument("--tmp", default="/tmp")
    r.add_argument("--only")
    r.add_argument("--deadline", type=float, default=170.0, help="seconds after which cases are skipped")
    r.add_argument("--compare-limit", type=int, default=1 << 26, help="largest output compared with torch")
    a = p.parse_args()
    build(a) if a.cmd == "build" else run(a)


if __name__ == "__main__":
    main()
