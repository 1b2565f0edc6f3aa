#!/usr/bin/env python3
"""tcc's GPU back end against torch.einsum on the same GPU, in the same run.

The suite is the CPU benchmark's (bench/cpu/bench.py SUITE).

  build  (any machine with tcc)  writes each case as DIR/caseK.tc and compiles it
         with `tcc build --target cuda` into DIR/caseK.ptx + DIR/caseK.plan.json;
  run    (the GPU machine, with PyTorch)  for each case runs `tcc-gpu caseK.tc
         --repeat R --save-inputs --output-dir ...` (device time of the fastest
         run, inputs resident on the GPU), then times torch.einsum on the very same
         inputs (CUDA events, best of R after warm-up), checks tcc's output against
         torch's, measures the GPU's DGEMM / SGEMM peak (torch.matmul 8192^3), and
         writes a markdown table. With `--variants cublas,tiled,naive` tcc-gpu also
         times each implementation of the binary contractions forced everywhere
         (same inputs, outputs compared with the plan's); the table then has a
         column per kind, and the cost model's choices with predicted times
         follow it.

    python3 bench/gpu/bench.py build --dir bench/gpu/out/bench --tcc target/release/tcc
    python3 bench/gpu/bench.py run --dir bench/gpu/out/bench --tcc-gpu ./tcc-gpu --out results.md
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_suite():
    spec = importlib.util.spec_from_file_location("cpubench", os.path.join(HERE, "..", "cpu", "bench.py"))
    src = open(spec.origin).read()
    # Only SUITE and tc_source are needed; avoid importing numpy-dependent parts twice.
    ns = {}
    exec(src.split("def best_time")[0].replace("import numpy as np", ""), ns)
    return ns["SUITE"], ns["tc_source"]


def build(args):
    suite, tc_source = cpu_suite()
    os.makedirs(args.dir, exist_ok=True)
    cases = []
    for k, (name, spec, sizes, elem, gemm_like) in enumerate(suite):
        src = os.path.join(args.dir, f"case{k}.tc")
        with open(src, "w") as f:
            f.write(tc_source(spec, sizes, elem))
        r = subprocess.run([args.tcc, "build", "--target", "cuda", src, "-o", os.path.join(args.dir, f"case{k}.ptx")], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            raise SystemExit(1)
        lines = r.stderr.strip().splitlines()
        unit = [x for x in lines if "kernel launches" in x][-1]
        choices = [x.strip() for x in lines if x.startswith("  ")]
        cases.append(dict(name=name, spec=spec, sizes=sizes, elem=elem, file=f"case{k}.tc", plan=unit, choices=choices))
        print(f"built {name}: {unit}", file=sys.stderr)
    with open(os.path.join(args.dir, "manifest.json"), "w") as f:
        json.dump(dict(cases=cases), f, indent=1)


def run(args):
    import numpy as np
    import torch

    dev = torch.device("cuda")
    man = json.load(open(os.path.join(args.dir, "manifest.json")))

    def cuda_time(f, repeat):
        for _ in range(2):
            f()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeat):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            best = min(best, s.elapsed_time(e) / 1e3)
        return best

    peaks = {}
    for dt, name in [(torch.float64, "f64"), (torch.float32, "f32")]:
        n = 8192
        a = torch.randn(n, n, dtype=dt, device=dev)
        b = torch.randn(n, n, dtype=dt, device=dev)
        t = cuda_time(lambda: a @ b, 5)
        peaks[name] = 2 * n**3 / t / 1e12
        del a, b
    torch.cuda.empty_cache()
    print(f"measured peak: DGEMM {peaks['f64']:.1f} TFLOP/s, SGEMM {peaks['f32']:.1f} TFLOP/s ({torch.cuda.get_device_name()})", flush=True)

    rows = []
    for c in man["cases"]:
        if args.only and args.only not in c["name"]:
            continue
        tmp = os.path.join(args.tmp, "case")
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [args.tcc_gpu, os.path.join(args.dir, c["file"]), "--repeat", str(args.repeat), "--output-dir", tmp, "--save-inputs"]
        if args.variants:
            cmd += ["--variants", args.variants]
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL bench {c['name']}: {r.stdout[-500:]} {r.stderr[-1500:]}", flush=True)
            rows.append(dict(name=c["name"], ok=False))
            continue
        m = re.search(r"time = ([0-9.]+) ms", r.stdout)
        t_tcc = float(m.group(1)) / 1e3
        variants = {k: float(t) / 1e3 for k, t in re.findall(r"variant (\w+): time = ([0-9.]+) ms", r.stdout)}
        chosen = [x.rsplit("→ ", 1)[-1] for x in c.get("choices", [])]
        choice = "+".join(f"{k}×{chosen.count(k)}" if chosen.count(k) > 1 else k for k in sorted(set(chosen), key=chosen.index)) or "-"
        ins, out = c["spec"].split("->")
        ops = ins.split(",")
        dt = torch.float64 if c["elem"] == "f64" else torch.float32
        xs = [torch.from_numpy(np.load(os.path.join(tmp, f"X{k}.npy"))).to(dev, dt) for k in range(len(ops))]
        got = torch.from_numpy(np.load(os.path.join(tmp, "Out.npy"))).to(dev, dt)
        t_torch = cuda_time(lambda: torch.einsum(c["spec"], *xs), args.repeat)
        want = torch.einsum(c["spec"], *xs)
        rel = ((got - want).abs().max() / want.abs().max().clamp_min(1e-300)).item()
        flops = 2.0
        for n in c["sizes"].values():
            flops *= n
        if len(ops) > 2:
            flops = float(re.search(r"\(([0-9.e+]+) flops\)", c["plan"]).group(1))
        tol = 1e-10 if c["elem"] == "f64" else 1e-4
        ok = rel <= tol
        rows.append(dict(name=c["name"], ok=ok, t_tcc=t_tcc, t_torch=t_torch, ratio=t_tcc / t_torch, rel=rel,
                         tflops=flops / t_tcc / 1e12, peak=peaks[c["elem"]], plan=c["plan"].split(": ", 1)[-1],
                         flops=flops, variants=variants, choice=choice, choices=c.get("choices", [])))
        vs = ", ".join(f"{k} {t*1e3:.3f} ms" for k, t in variants.items())
        print(f"{'PASS' if ok else 'FAIL'} bench {c['name']}: tcc {t_tcc*1e3:.3f} ms ({choice}), torch {t_torch*1e3:.3f} ms, "
              f"ratio {t_tcc/t_torch:.2f}, rel {rel:.1e}{'; ' + vs if vs else ''}, wall {time.time()-t0:.1f}s", flush=True)
        del xs, got, want
        torch.cuda.empty_cache()
        shutil.rmtree(tmp, ignore_errors=True)

    good = [r for r in rows if r.get("ratio")]
    head = f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; measured peak DGEMM {peaks['f64']:.1f} TFLOP/s, SGEMM {peaks['f32']:.1f} TFLOP/s (torch.matmul 8192^3)"
    kinds = [k for k in ["cublas", "tiled", "naive"] if any(k in r.get("variants", {}) for r in good)]
    if kinds:
        lines = [head, "", "| case | tcc ms | torch.einsum ms | tcc/torch | tcc TFLOP/s | choice | " + " | ".join(f"{k} ms (TFLOP/s)" for k in kinds) + " | max rel err |",
                 "| --- | ---: | ---: | ---: | ---: | --- | " + " | ".join("---:" for _ in kinds) + " | ---: |"]
    else:
        lines = [head, "", "| case | tcc ms | torch.einsum ms | tcc/torch | tcc TFLOP/s | % of peak | max rel err | tcc plan |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if not r.get("ratio"):
            lines.append(f"| {r['name']} | FAILED | | | | | | |")
            continue
        if kinds:
            cols = []
            for k in kinds:
                t = r["variants"].get(k)
                cols.append(f"{t*1e3:.3f} ({r['flops']/t/1e12:.2f})" if t else "n/a")
            lines.append(f"| {r['name']} | {r['t_tcc']*1e3:.3f} | {r['t_torch']*1e3:.3f} | {r['ratio']:.2f} | {r['tflops']:.2f} | {r['choice']} | " + " | ".join(cols) + f" | {r['rel']:.1e} |")
        else:
            lines.append(f"| {r['name']} | {r['t_tcc']*1e3:.3f} | {r['t_torch']*1e3:.3f} | {r['ratio']:.2f} | {r['tflops']:.2f} | {100*r['tflops']/r['peak']:.0f}% | {r['rel']:.1e} | {r['plan']} |")
    if good:
        lines += ["", f"median tcc/torch ratio: {statistics.median(r['ratio'] for r in good):.2f} over {len(good)} cases; "
                  f"{sum(r['ok'] for r in rows)}/{len(rows)} outputs match torch"]
        for k in kinds:
            have = [r for r in good if k in r["variants"]]
            if have:
                lines.append(f"median {k}-everywhere/torch ratio: {statistics.median(r['variants'][k] / r['t_torch'] for r in have):.2f} over {len(have)} cases")
    if kinds:
        lines += ["", "Cost model (predicted times on the H200, per binary contraction):", ""]
        for r in good:
            for ch in r["choices"]:
                lines.append(f"- {r['name']}: `{ch}`")
    if args.json:
        json.dump(dict(head=head, rows=rows), open(args.json, "w"), indent=1)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--dir", required=True)
    b.add_argument("--tcc", default="target/release/tcc")
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--tcc-gpu", default="target/release/tcc-gpu")
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--only")
    r.add_argument("--tmp", default="/tmp/tccgpu")
    r.add_argument("--out")
    r.add_argument("--json", help="also write the rows as JSON")
    r.add_argument("--variants", help="kinds tcc-gpu also times, e.g. cublas,tiled,naive")
    a = p.parse_args()
    build(a) if a.cmd == "build" else run(a)


if __name__ == "__main__":
    main()
