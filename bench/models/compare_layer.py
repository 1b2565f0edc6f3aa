#!/usr/bin/env python3
"""Compare `measure_layer.py`'s GPU measurements with what `tcc plan-model`
predicts for the same layer on one device (issue 20, deliverable 5).

    bench/models/compare_layer.py MEASURED.json [--tcc target/debug/tcc] [--peak 989]

For each measured run (layer dense|moe × attention matmul|sdpa × recomputation
none|full) it runs tcc on the matching example layer with the measured sizes:

    dense: examples/llama_block.tc   --dim batch=B --dim seq=S --dim hidden=H
           --dim kvheads=KV --dim group=HEADS/KV --dim hdim=H/HEADS --dim ffn=F
    moe:   examples/mixtral_block.tc  the same, --dim experts=E and
           --dim capacity=K*S/E (top-K routing, capacity factor 1), ffn=MOE_FFN

with `--devices 1 --layers 1 --recompute R --top 1 --json`, where R is `none`
for matmul attention, `selective` for SDPA (a flash-style kernel keeps no s²
scores and recomputes them: tcc's selective recomputation, book/src/models.md),
and for torch.utils.checkpoint `full` with matmul attention, `full-flash` with
SDPA (the recomputed layer runs flash attention: no s² scores in its working set).

Memory rows (measured / predicted, goal within 10%):
  params      measured weights (bf16) vs tcc's 2·Ψ;
  fwd kept    memory held after the forward vs tcc's activations less the
              recomputation working set (what the layer keeps for its backward);
  fwd+bwd     the fwd+bwd peak above weights, gradients and input vs tcc's
              activations plus its backward working set above them
              (memory.backward: at each activation, walking the layer
              backwards, its gradients — three tensors for a softmax — less
              the activations already freed).
Time: one efficiency is calibrated (--calibrate, default the dense layer with
SDPA and no recomputation): tcc at mfu=1 gives the step's time at the peak, the
measured fwd+bwd time gives the efficiency, and tcc is run again at that mfu
for every row; the calibration row is 1.000 by construction, the others are
out of sample. Forward time is tcc's model flops / 3 at that rate.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = {"dense": "examples/llama_block.tc", "moe": "examples/mixtral_block.tc"}


def fail(msg):
    sys.stderr.write(f"compare_layer.py: {msg}\n")
    sys.exit(2)


def tcc_recompute(attn, recompute):
    if recompute == "full":
        return "full-flash" if attn == "sdpa" else "full"
    return "selective" if attn == "sdpa" else "none"


def dims(kind, a):
    """The tcc --dim arguments of the measured layer."""
    h, heads, kv = a["hidden"], a["heads"], a["kv_heads"]
    if h % heads or heads % kv:
        fail(f"hidden {h}, heads {heads}, kv heads {kv} do not divide")
    d = {
        "batch": a["batch"],
        "seq": a["seq"],
        "hidden": h,
        "kvheads": kv,
        "group": heads // kv,
        "hdim": h // heads,
        "ffn": a["ffn"] if kind == "dense" else a["moe_ffn"],
    }
    if kind == "moe":
        slots = a["top_k"] * a["seq"]
        if slots % a["experts"]:
            fail(f"top-k × seq = {slots} does not divide into {a['experts']} experts' capacity")
        d["experts"] = a["experts"]
        d["capacity"] = slots // a["experts"]
    return d


def predict(tcc, kind, a, attn, recompute, peak, mfu):
    cmd = [tcc, "plan-model", os.path.join(ROOT, EXAMPLES[kind]), "--devices", "1", "--layers", "1"]
    cmd += ["--network", f"fat-tree:bw=25GB/s,lat=5us,peak={peak}TF/s,mfu={mfu!r}"]
    cmd += ["--recompute", tcc_recompute(attn, recompute), "--top", "1", "--json"]
    for k, v in dims(kind, a).items():
        cmd += ["--dim", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    plan = json.loads(r.stdout)["models"][0]["plans"][0]
    mem = plan["memory"]
    return {
        "cmd": " ".join(cmd),
        "params_bytes": 2.0 * (plan["psi_dense"] + plan["psi_expert"]),
        "kept_bytes": mem["activations"] - mem["recompute_working"],
        "activation_bytes": mem["activations"],
        "peak_bytes": mem["activations"] + mem["backward"],
        "time_s": plan["time"],
        "fwd_s": plan["model_flops_per_rank"] / 3.0 / plan["rate"],
    }


def key(r):
    return (r["layer"], r["attn"], r["recompute"])


def compare(measured, tcc, peak, calibrate):
    a = measured["args"]
    runs = measured["runs"]
    by = {key(r): r for r in runs}
    if calibrate not in by:
        fail(f"no measured run {'/'.join(calibrate)} to calibrate on (have {sorted(by)})")
    c = by[calibrate]
    at_peak = predict(tcc, c["layer"], a, c["attn"], c["recompute"], peak, 1.0)
    mfu = at_peak["time_s"] / (c["fwd_bwd_ms"] / 1e3)
    if not 0 < mfu <= 1:
        fail(f"calibrated efficiency {mfu:.3f} is not in (0, 1]: is --peak ({peak} TF/s) the device's?")
    rows = []
    for r in runs:
        p = predict(tcc, r["layer"], a, r["attn"], r["recompute"], peak, mfu)
        rows.append((r, p))
    return mfu, rows


def ratio(m, p):
    return m / p if p else float("nan")


def table(measured, mfu, rows, calibrate, peak):
    gb = lambda x: f"{x / 1e9:.3f}"
    out = []
    out.append(f"device: {measured.get('device', '?')}, torch {measured.get('torch', '?')}, {measured.get('dtype', '?')}; "
               f"sizes: {json.dumps(measured['args'], sort_keys=True)}")
    out.append(f"calibration: {'/'.join(calibrate)} fwd+bwd time gives mfu = {mfu:.3f} of {peak} TF/s")
    out.append("")
    out.append("| layer | attention | recompute (tcc) | quantity | measured | tcc | measured/tcc | within 10% |")
    out.append("|---|---|---|---|---|---|---|---|")
    worst = []
    for r, p in rows:
        label = f"| {r['layer']} | {r['attn']} | {r['recompute']} ({tcc_recompute(r['attn'], r['recompute'])}) |"
        for what, m, q, unit, fmt, goal in (
            ("params", r["params_bytes"], p["params_bytes"], "GB", gb, True),
            ("fwd kept", r["fwd_bytes"], p["kept_bytes"], "GB", gb, True),
            ("fwd+bwd peak", r["fwd_bwd_peak_bytes"], p["peak_bytes"], "GB", gb, True),
            ("fwd time", r["fwd_ms"], p["fwd_s"] * 1e3, "ms", lambda x: f"{x:.3f}", False),
            ("fwd+bwd time", r["fwd_bwd_ms"], p["time_s"] * 1e3, "ms", lambda x: f"{x:.3f}", False),
        ):
            x = ratio(m, q)
            ok = abs(x - 1) <= 0.10
            if goal and what != "params":
                worst.append((abs(x - 1), f"{r['layer']}/{r['attn']}/{r['recompute']} {what}", x))
            out.append(f"{label} {what} ({unit}) | {fmt(m)} | {fmt(q)} | {x:.3f} | {'yes' if ok else 'no'} |")
    if worst:
        w = max(worst)
        inside = sum(1 for d, _, _ in worst if d <= 0.10)
        out.append("")
        out.append(f"activation memory: {inside} of {len(worst)} rows within 10%; worst {w[1]}: measured/tcc = {w[2]:.3f}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measured", help="JSON written by measure_layer.py")
    ap.add_argument("--tcc", default=os.path.join(ROOT, "target", "debug", "tcc"))
    ap.add_argument("--peak", type=float, default=989.0, help="the device's dense bf16 peak, TF/s (H100/H200 SXM: 989)")
    ap.add_argument("--calibrate", default="dense/sdpa/none", help="LAYER/ATTN/RECOMPUTE of the calibration run")
    ap.add_argument("--json", help="also write the rows as JSON here")
    a = ap.parse_args()
    try:
        with open(a.measured) as fh:
            measured = json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read {a.measured}: {e}")
    for k in ("args", "runs"):
        if k not in measured:
            fail(f"{a.measured} has no `{k}`: not a measure_layer.py output")
    if not os.access(a.tcc, os.X_OK):
        fail(f"no tcc binary at {a.tcc} (cargo build --features mpi, or --tcc PATH)")
    cal = tuple(a.calibrate.split("/"))
    if len(cal) != 3:
        fail("--calibrate takes LAYER/ATTN/RECOMPUTE, e.g. dense/sdpa/none")
    if measured["args"].get("causal"):
        print("note: the measurement is causal; tcc's example layers are not (same memory, half the attention flops)")
    mfu, rows = compare(measured, a.tcc, a.peak, cal)
    print(table(measured, mfu, rows, cal, a.peak))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"mfu": mfu, "rows": [{"measured": r, "tcc": p} for r, p in rows]}, fh, indent=1)


if __name__ == "__main__":
    main()
