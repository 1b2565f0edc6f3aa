#!/usr/bin/env python3
"""Checks compare_layer.py on the hand-written testdata/fake_layer.json (not a
measurement): the tcc runs it builds, the calibration, and the rows' sources.
Run after `cargo build --features mpi`: python3 bench/models/test_compare_layer.py"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_layer as cl  # noqa: E402

TCC = os.path.join(cl.ROOT, "target", "debug", "tcc")
FAKE = os.path.join(HERE, "testdata", "fake_layer.json")
measured = json.load(open(FAKE))
a = measured["args"]

# Flash-style attention is tcc's selective recomputation; checkpointing is full.
pairs = [("matmul", "none"), ("sdpa", "none"), ("matmul", "full"), ("sdpa", "full")]
assert [cl.tcc_recompute(x, y) for x, y in pairs] == ["none", "selective", "full", "full-flash"]
# Mixtral: top-2 of 8 experts over 4096 tokens: 1024 capacity slots per expert.
d = cl.dims("moe", a)
assert (d["capacity"], d["group"], d["hdim"], d["experts"]) == (1024, 4, 128, 8), d

mfu, rows = cl.compare(measured, TCC, 989.0, ("dense", "sdpa", "none"))
by = {cl.key(r): p for r, p in rows}
cal = [r for r, _ in rows if cl.key(r) == ("dense", "sdpa", "none")][0]
# The calibration row's time is the measured one (up to the printing of mfu).
assert abs(by[cl.key(cal)]["time_s"] * 1e3 / cal["fwd_bwd_ms"] - 1) < 1e-9, by[cl.key(cal)]["time_s"]
assert 0 < mfu <= 1
# Every prediction is tcc's own JSON: run one by hand.
out = subprocess.run(
    [TCC, "plan-model", os.path.join(cl.ROOT, "examples/llama_block.tc"), "--devices", "1", "--layers", "1",
     "--network", f"fat-tree:bw=25GB/s,lat=5us,peak=989TF/s,mfu={mfu!r}", "--recompute", "none", "--top", "1", "--json"]
    + sum([["--dim", f"{k}={v}"] for k, v in cl.dims("dense", a).items()], []),
    capture_output=True, text=True, check=True).stdout
plan = json.loads(out)["models"][0]["plans"][0]
p = by[("dense", "matmul", "none")]
assert p["activation_bytes"] == plan["memory"]["activations"] == p["kept_bytes"]
assert p["time_s"] == plan["time"]
# Llama-style layer at h 4096, kv 1024, ffn 14336: 2h² + 2·h·1024 + 3·h·ffn + 2h weights, bf16.
h, f = 4096, 14336
assert p["params_bytes"] == 2 * (2 * h * h + 2 * h * 1024 + 3 * h * f + 2 * h), p["params_bytes"]
# Under full recomputation a layer keeps its input only: b·s·h bf16.
assert by[("dense", "matmul", "full")]["kept_bytes"] == 2 * 4096 * 4096
# The table says how many activation rows are within 10%.
text = cl.table(measured, mfu, rows, ("dense", "sdpa", "none"), 989.0)
assert "rows within 10%" in text and "| dense | sdpa | none (selective) | fwd+bwd time (ms) | 16.000 | 16.000 | 1.000 | yes |" in text
print("compare_layer.py checks passed")
