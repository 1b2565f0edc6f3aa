#!/usr/bin/env python3
"""Writes random tcc programs for the GPU back end's device checks.

    python3 bench/gpu/gen_random.py DIR N [SEED]

Each program: 4-6 indices (one range each, sizes 1-9, or 8-40 in "gemm"
programs so that cuBLAS steps occur), 2-4 inputs (f64, some f32), 1-3
statements (`=` / `+=`) into outputs or temporaries read later, 1-2 terms of
0-3 factors, element-wise functions around factors, coefficients. Programs are
kept only if `tcc check` accepts them (TCC env var: the tcc binary)."""

import os
import random
import subprocess
import sys

FUNCS = ["exp", "tanh", "relu", "abs", "sigmoid", "gelu", "silu", "sqrt"]


def program(rng):
    gemm = rng.random() < 0.35
    letters = "abcdef"[: rng.randint(4, 6)]
    sizes = {c: (rng.randint(8, 40) if gemm else rng.randint(1, 9)) for c in letters}
    lines = [f"range R{c} = {n}; index {c} : R{c};" for c, n in sizes.items()]
    tensors = {}  # name -> (indices, elem, role)

    def pick_idx(k):
        return "".join(rng.sample(letters, k))

    for k in range(rng.randint(2, 4)):
        tensors[f"A{k}"] = (pick_idx(rng.randint(0, 3)), "f32" if rng.random() < 0.2 else "f64", "input")
    readable = [n for n in tensors]
    stmts = []
    nst = rng.randint(1, 3)
    for s in range(nst):
        temp = s + 1 < nst and rng.random() < 0.5
        terms = []
        used = set()
        for _ in range(rng.randint(1, 2)):
            nf = rng.randint(0 if terms else 1, 3)
            facs = []
            counts = {}
            for _ in range(nf):
                name = rng.choice(readable)
                idx = tensors[name][0]
                if any(counts.get(c, 0) >= 2 for c in idx):
                    continue
                for c in idx:
                    counts[c] = counts.get(c, 0) + 1
                ref = f"{name}[{','.join(idx)}]" if idx else name
                if rng.random() < 0.2:
                    f = rng.choice(FUNCS)
                    ref = f"{f}(abs({ref}))" if f == "sqrt" else f"{f}({ref})"
                facs.append((ref, idx))
            coef = rng.choice(["", "0.5 * ", "-1.5 * ", "2.0 * ", "-0.25 * "])
            if not facs:
                terms.append(("1.5", set()))
                continue
            term_idx = set("".join(i for _, i in facs))
            terms.append((coef + " * ".join(r for r, _ in facs), term_idx))
            used |= term_idx
        # lhs: indices that appear exactly once in some term are free candidates;
        # take a subset of indices common to every term that has factors.
        common = None
        for _, ti in terms:
            if ti:
                common = ti if common is None else common & ti
        common = sorted(common or [])
        lhs = "".join(c for c in common if rng.random() < 0.7)[:3]
        name = f"{'T' if temp else 'O'}{s}"
        tensors[name] = (lhs, "f32" if rng.random() < 0.15 else "f64", "temporary" if temp else "output")
        op = "+=" if rng.random() < 0.3 else "="
        ref = f"{name}[{','.join(lhs)}]" if lhs else name
        stmts.append(f"{ref} {op} " + " + ".join(t for t, _ in terms) + ";")
        readable.append(name)
    for n, (idx, elem, role) in tensors.items():
        dims = f"[{','.join(idx)}]" if idx else ""
        lines.append(f"{role} tensor {n}{dims} : {elem};")
    return "\n".join(lines + stmts) + "\n"


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    tcc = os.environ.get("TCC", "target/debug/tcc")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    kept = tries = 0
    while kept < n and tries < 20 * n:
        tries += 1
        src = program(rng)
        path = os.path.join(out, f"r{kept:03d}.tc")
        with open(path, "w") as f:
            f.write(src)
        r = subprocess.run([tcc, "check", path], capture_output=True, text=True)
        if r.returncode != 0:
            continue
        kept += 1
    print(f"{kept} programs in {out} ({tries} tried)", file=sys.stderr)


if __name__ == "__main__":
    main()
