#!/usr/bin/env python3
"""Measure one dense (Llama-style) and one MoE (Mixtral-style) transformer layer
on a CUDA device, for issue 20's check of `tcc plan-model` against a real run.

Self-contained: PyTorch only, no tcc. The layers are written to keep, for the
backward pass, what fused training kernels keep (Megatron-LM / Transformer
Engine), so the measurement is of the layer and not of a naive implementation:

- RMSNorm as a fused kernel (Apex/TE): fp32 statistics, the backward keeps the
  input and 1/rms only, the normalised output is kept by the next matmul.
- GQA attention with RoPE, no dropout. `matmul` attention ("no flash") is
  Q·Kᵀ → softmax → P·V with torch.matmul: the query heads of one KV head are
  stacked along the rows ([b, kv, group·s, d] @ [b, kv, d, s]) so K and V are
  never expanded; softmax keeps its bf16 output (one s² tensor per head).
  `sdpa` ("flash") is F.scaled_dot_product_attention, which keeps no s² tensor.
  Non-causal by default, like tcc's examples/llama_block.tc (--causal masks).
- SwiGLU MLP: W2(silu(x W1) * (x W3)).
- MoE: a router (h × E), top-k of its logits, softmax over the k (Mixtral), the
  tokens gathered per expert (k·T rows in all: no capacity padding), a SwiGLU
  expert each, the outputs weighted and scattered back with index_add.

Per layer × attention (matmul, sdpa) × recomputation (none, full =
torch.utils.checkpoint over the whole layer), it measures:

- params_bytes / grads_bytes: the layer's weights and their gradients (bf16);
- fwd_bytes: memory allocated after the forward minus before (autograd's saved
  tensors plus the layer output), the input and weights already allocated;
- fwd_peak_bytes: the peak during the forward above that baseline;
- fwd_bwd_peak_bytes: torch.cuda.max_memory_allocated over forward + backward
  minus the baseline (weights, gradients already allocated, input, output
  gradient); the input's gradient is produced, as inside a model;
- fwd_ms / fwd_bwd_ms: CUDA-event times, median of --reps after --warmup runs.

Output: JSON (--out, default stdout). Without CUDA it exits with status 2 and
says so; `--check` runs the numerical self-checks (matmul vs sdpa attention,
checkpoint vs plain gradients, grouped MoE vs a per-token loop) on the CPU in
fp32 at tiny sizes, and needs no GPU.
"""

import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError:  # pragma: no cover - the message is the point
    sys.stderr.write("measure_layer.py: PyTorch is not installed (pip install torch); it needs torch with CUDA\n")
    sys.exit(2)


class RMSNorm(torch.autograd.Function):
    """RMSNorm as fused kernels run it (Apex/TE): statistics in fp32, the backward
    keeps only the input and 1/rms (fp32, one per row) and recomputes x/rms; the
    output is kept by the matmul that reads it. Plain autograd would also keep
    x·(1/rms), one more hidden-size tensor per norm."""

    @staticmethod
    def forward(ctx, x, g, eps):
        acc = torch.promote_types(x.dtype, torch.float32)  # fp32, or fp64 in gradcheck
        r = torch.rsqrt(x.to(acc).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, g, r)
        return (x.to(acc) * r).to(x.dtype) * g

    @staticmethod
    def backward(ctx, dy):
        x, g, r = ctx.saved_tensors
        n = x.to(r.dtype) * r
        a = dy.to(r.dtype) * g.to(r.dtype)
        dx = r * (a - n * (a * n).mean(-1, keepdim=True))
        dg = (dy.to(r.dtype) * n).reshape(-1, n.shape[-1]).sum(0)
        return dx.to(x.dtype), dg.to(g.dtype), None


def rms_norm(x, g, eps=1e-5):
    return RMSNorm.apply(x, g, eps)


def rope_tables(seq, hdim, device, dtype, base=500000.0):
    inv = 1.0 / (base ** (torch.arange(0, hdim, 2, device=device, dtype=torch.float32) / hdim))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope(x, cos, sin):
    """Rotary embedding over the last dim (rotate-half form); cos/sin are [s, d]."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


class Attention(torch.nn.Module):
    def __init__(self, hidden, heads, kv_heads, dtype, device):
        super().__init__()
        assert hidden % heads == 0 and heads % kv_heads == 0
        self.h, self.heads, self.kv = hidden, heads, kv_heads
        self.d = hidden // heads
        self.group = heads // kv_heads
        p = lambda *s: torch.nn.Parameter(torch.randn(*s, device=device, dtype=dtype) / math.sqrt(s[0]))
        self.g1 = torch.nn.Parameter(torch.ones(hidden, device=device, dtype=dtype))
        self.wq = p(hidden, heads * self.d)
        self.wk = p(hidden, kv_heads * self.d)
        self.wv = p(hidden, kv_heads * self.d)
        self.wo = p(heads * self.d, hidden)

    def forward(self, x, attn, causal, cos, sin):
        b, s, _ = x.shape
        kv, g, d = self.kv, self.group, self.d
        n1 = rms_norm(x, self.g1)
        # [b, s, kv, g, d] → [b, kv, g, s, d]: the query heads of one KV head together.
        q = (n1 @ self.wq).view(b, s, kv, g, d).permute(0, 2, 3, 1, 4)
        k = (n1 @ self.wk).view(b, s, kv, d).transpose(1, 2)
        v = (n1 @ self.wv).view(b, s, kv, d).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if attn == "matmul":
            qs = (q * (1.0 / math.sqrt(d))).reshape(b, kv, g * s, d)
            scores = torch.matmul(qs, k.transpose(-1, -2))  # [b, kv, g·s, s]
            if causal:
                mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.view(b, kv, g, s, s).masked_fill(mask, float("-inf")).view(b, kv, g * s, s)
            p = torch.softmax(scores, dim=-1)
            o = torch.matmul(p, v).view(b, kv, g, s, d)
        elif attn == "sdpa":
            if not causal:
                # Non-causal: stacking the group along the rows is exact, no K/V expansion.
                o = F.scaled_dot_product_attention(q.reshape(b, kv, g * s, d), k, v).view(b, kv, g, s, d)
            else:
                qh = q.reshape(b, kv * g, s, d)
                try:
                    o = F.scaled_dot_product_attention(qh, k, v, is_causal=True, enable_gqa=True)
                except TypeError:  # torch < 2.5: expand K and V
                    o = F.scaled_dot_product_attention(
                        qh, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True
                    )
                o = o.view(b, kv, g, s, d)
        else:
            raise ValueError(f"unknown attention {attn}")
        c = o.permute(0, 3, 1, 2, 4).reshape(b, s, self.h)
        return x + c @ self.wo


class Dense(torch.nn.Module):
    """Llama-style layer: attention, then a SwiGLU MLP."""

    def __init__(self, a, dtype, device):
        super().__init__()
        self.attn = Attention(a.hidden, a.heads, a.kv_heads, dtype, device)
        p = lambda *s: torch.nn.Parameter(torch.randn(*s, device=device, dtype=dtype) / math.sqrt(s[0]))
        self.g2 = torch.nn.Parameter(torch.ones(a.hidden, device=device, dtype=dtype))
        self.w1, self.w3, self.w2 = p(a.hidden, a.ffn), p(a.hidden, a.ffn), p(a.ffn, a.hidden)

    def forward(self, x, attn, causal, cos, sin):
        a = self.attn(x, attn, causal, cos, sin)
        n2 = rms_norm(a, self.g2)
        return a + (F.silu(n2 @ self.w1) * (n2 @ self.w3)) @ self.w2


class MoE(torch.nn.Module):
    """Mixtral-style layer: attention, then top-k of E SwiGLU experts."""

    def __init__(self, a, dtype, device):
        super().__init__()
        self.attn = Attention(a.hidden, a.heads, a.kv_heads, dtype, device)
        self.e, self.k = a.experts, a.top_k
        h, f = a.hidden, a.moe_ffn
        p = lambda *s: torch.nn.Parameter(torch.randn(*s, device=device, dtype=dtype) / math.sqrt(s[0]))
        self.g2 = torch.nn.Parameter(torch.ones(h, device=device, dtype=dtype))
        self.wr = p(h, self.e)
        # One parameter per expert (as Mixtral's ModuleList of experts): slicing a
        # stacked [E, h, f] weight would make each slice's backward allocate a
        # zero tensor of the whole stack.
        lists = lambda *s: torch.nn.ParameterList([p(*s) for _ in range(self.e)])
        self.w1, self.w3, self.w2 = lists(h, f), lists(h, f), lists(f, h)

    def route(self, n2):
        """Top-k experts per token and their weights (softmax over the k logits)."""
        top, idx = (n2 @ self.wr).topk(self.k, dim=-1)
        return idx, torch.softmax(top, dim=-1)

    def experts(self, n2):
        t, h = n2.shape
        idx, w = self.route(n2)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // self.k
        counts = torch.bincount(flat, minlength=self.e).tolist()
        xs = n2[token]  # [k·T, h]: every token once per chosen expert
        outs, start = [], 0
        for e, n in enumerate(counts):
            xe = xs[start : start + n]
            outs.append((F.silu(xe @ self.w1[e]) * (xe @ self.w3[e])) @ self.w2[e])
            start += n
        ys = torch.cat(outs) * w.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(n2).index_add(0, token, ys)

    def forward(self, x, attn, causal, cos, sin):
        a = self.attn(x, attn, causal, cos, sin)
        b, s, h = a.shape
        n2 = rms_norm(a, self.g2)
        return a + self.experts(n2.reshape(b * s, h)).view(b, s, h)


def call(layer, x, attn, recompute, causal, cos, sin):
    if recompute == "full":
        return checkpoint(layer, x, attn, causal, cos, sin, use_reentrant=False)
    return layer(x, attn, causal, cos, sin)


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def measure(layer, a, attn, recompute, dtype, dev):
    cos, sin = rope_tables(a.seq, a.hidden // a.heads, dev, dtype)
    x = torch.randn(a.batch, a.seq, a.hidden, device=dev, dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    # Materialise the weight gradients once, so the baseline holds them.
    call(layer, x, attn, recompute, a.causal, cos, sin).backward(dy)
    x.grad = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = call(layer, x, attn, recompute, a.causal, cos, sin)
    torch.cuda.synchronize()
    fwd = torch.cuda.memory_allocated() - base
    fwd_peak = torch.cuda.max_memory_allocated() - base
    y.backward(dy)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del y
    x.grad = None

    def fwd_only():
        call(layer, x, attn, recompute, a.causal, cos, sin)

    def fwd_bwd():
        call(layer, x, attn, recompute, a.causal, cos, sin).backward(dy)
        x.grad = None

    r = {
        "fwd_bytes": fwd,
        "fwd_peak_bytes": fwd_peak,
        "fwd_bwd_peak_bytes": peak,
        "fwd_ms": median_ms(fwd_only, a.warmup, a.reps),
        "fwd_bwd_ms": median_ms(fwd_bwd, a.warmup, a.reps),
    }
    torch.cuda.empty_cache()
    return r


def build(kind, a, dtype, dev):
    torch.manual_seed(a.seed)
    return Dense(a, dtype, dev) if kind == "dense" else MoE(a, dtype, dev)


def check(a):
    """Numerical self-checks on the CPU in fp32 at tiny sizes (no GPU needed)."""
    t = argparse.Namespace(**vars(a))
    t.hidden, t.heads, t.kv_heads, t.ffn, t.moe_ffn, t.seq, t.batch, t.experts, t.top_k = 32, 4, 2, 48, 40, 12, 2, 4, 2
    dev, dt = torch.device("cpu"), torch.float32
    failures = []

    def close(what, u, v, tol=1e-4):
        err = (u - v).abs().max().item() / max(v.abs().max().item(), 1e-30)
        ok = err < tol
        print(f"check {what}: relative error {err:.2e} {'ok' if ok else 'FAILED'}")
        if not ok:
            failures.append(what)

    for causal in (False, True):
        cos, sin = rope_tables(t.seq, t.hidden // t.heads, dev, dt)
        for kind in ("dense", "moe"):
            layer = build(kind, t, dt, dev)
            x = torch.randn(t.batch, t.seq, t.hidden, requires_grad=True)
            ym = layer(x, "matmul", causal, cos, sin)
            ys = layer(x, "sdpa", causal, cos, sin)
            close(f"{kind} causal={causal}: sdpa = matmul attention", ys, ym)
            dy = torch.randn_like(ym)
            ym.backward(dy)
            g_plain = [p.grad.clone() for p in layer.parameters()] + [x.grad.clone()]
            layer.zero_grad()
            x.grad = None
            call(layer, x, "matmul", "full", causal, cos, sin).backward(dy)
            g_ckpt = [p.grad for p in layer.parameters()] + [x.grad]
            close(f"{kind} causal={causal}: checkpoint gradients", torch.cat([g.flatten() for g in g_ckpt]),
                  torch.cat([g.flatten() for g in g_plain]))
    # The fused RMSNorm's backward against autograd's numerical gradient (fp64).
    xd = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    gd = torch.randn(8, dtype=torch.float64, requires_grad=True)
    ok = torch.autograd.gradcheck(lambda a, b: RMSNorm.apply(a, b, 1e-5), (xd, gd))
    print(f"check RMSNorm backward (gradcheck): {'ok' if ok else 'FAILED'}")
    if not ok:
        failures.append("RMSNorm backward")
    # The grouped MoE equals a per-token loop over its top-k experts.
    moe = build("moe", t, dt, dev)
    n2 = torch.randn(t.seq, t.hidden)
    got = moe.experts(n2)
    idx, w = moe.route(n2)
    want = torch.zeros_like(n2)
    for i in range(n2.shape[0]):
        for j in range(t.top_k):
            e = idx[i, j].item()
            xe = n2[i]
            want[i] += w[i, j] * ((F.silu(xe @ moe.w1[e]) * (xe @ moe.w3[e])) @ moe.w2[e])
    close("moe experts = per-token loop", got, want)
    # Parameter counts against the closed forms compare_layer.py and tcc use.
    h, f, kvd = t.hidden, t.ffn, t.kv_heads * t.hidden // t.heads
    dense_params = sum(p.numel() for p in build("dense", t, dt, dev).parameters())
    want_dense = 2 * h + 2 * h * h + 2 * h * kvd + 3 * h * f
    moe_params = sum(p.numel() for p in moe.parameters())
    want_moe = 2 * h + 2 * h * h + 2 * h * kvd + h * t.experts + 3 * t.experts * h * t.moe_ffn
    for what, g, w_ in (("dense", dense_params, want_dense), ("moe", moe_params, want_moe)):
        ok = g == w_
        print(f"check {what} parameters: {g} vs {w_} {'ok' if ok else 'FAILED'}")
        if not ok:
            failures.append(f"{what} parameters")
    if failures:
        sys.stderr.write(f"measure_layer.py --check: {len(failures)} check(s) failed: {', '.join(failures)}\n")
        sys.exit(1)
    print("all checks passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=14336, help="dense layer's MLP width")
    ap.add_argument("--moe-ffn", type=int, default=14336, help="each expert's MLP width")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1, help="micro-batch (sequences)")
    ap.add_argument("--causal", action="store_true", help="causal attention (default off, as in tcc's example layers)")
    ap.add_argument("--layers", default="dense,moe", help="comma list of dense, moe")
    ap.add_argument("--attn", default="matmul,sdpa", help="comma list of matmul (no flash), sdpa (flash-style)")
    ap.add_argument("--recompute", default="none,full", help="comma list of none, full (torch.utils.checkpoint)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the JSON here (default: stdout)")
    ap.add_argument("--check", action="store_true", help="CPU self-checks at tiny sizes, then exit")
    a = ap.parse_args()
    sets = {"layers": ("dense", "moe"), "attn": ("matmul", "sdpa"), "recompute": ("none", "full")}
    for key, allowed in sets.items():
        vals = getattr(a, key).split(",")
        bad = [v for v in vals if v not in allowed]
        if bad or not vals:
            ap.error(f"--{key}: {','.join(bad)} is not one of {', '.join(allowed)}")
        setattr(a, key, vals)
    if a.hidden % a.heads or a.heads % a.kv_heads or (a.hidden // a.heads) % 2:
        ap.error("--hidden must divide into --heads of even size, and --heads into --kv-heads groups")
    if not 1 <= a.top_k <= a.experts:
        ap.error("--top-k must be between 1 and --experts")
    if a.check:
        check(a)
        return
    if not torch.cuda.is_available():
        sys.stderr.write(
            "measure_layer.py: no CUDA device (torch.cuda.is_available() is False); it measures GPU memory "
            "and time and runs only on a GPU (use --check for the CPU self-checks)\n"
        )
        sys.exit(2)
    dev, dtype = torch.device("cuda"), torch.bfloat16
    out = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dtype": "bf16",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "args": {k: v for k, v in vars(a).items() if k not in ("out", "check")},
        "runs": [],
    }
    for kind in a.layers:
        layer = build(kind, a, dtype, dev)
        params = list(layer.parameters())
        for attn in a.attn:
            for rec in a.recompute:
                r = measure(layer, a, attn, rec, dtype, dev)
                r.update(
                    layer=kind,
                    attn=attn,
                    recompute=rec,
                    params=sum(p.numel() for p in params),
                    params_bytes=nbytes(params),
                    grads_bytes=nbytes([p.grad for p in params if p.grad is not None]),
                )
                out["runs"].append(r)
                print(
                    f"{kind:5} {attn:6} {rec:4}: fwd {r['fwd_bytes'] / 1e9:7.3f} GB, fwd+bwd peak "
                    f"{r['fwd_bwd_peak_bytes'] / 1e9:7.3f} GB, fwd {r['fwd_ms']:8.3f} ms, fwd+bwd {r['fwd_bwd_ms']:8.3f} ms",
                    file=sys.stderr,
                )
        del layer, params
        torch.cuda.empty_cache()
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
