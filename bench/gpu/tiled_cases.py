#!/usr/bin/env python3
"""Writes GEMM-shaped programs for checking tiled kernels on the GPU: odd sizes
(partial tiles), several blocks per grid dimension, batches on grid.z,
transposed and multi-index groups, GEMV / outer products / full contractions,
f32, mixed element types and functions of operands. Sizes are small enough for
the interpreter to check every output.

    python3 bench/gpu/tiled_cases.py DIR
"""

import os
import sys

CASES = [
    ("ik,kj->ij", dict(i=300, j=257, k=129)),
    ("ki,jk->ji", dict(i=200, j=130, k=77)),
    ("ik,jk->ij", dict(i=3, j=700, k=9)),
    ("bik,bkj->bij", dict(b=5, i=131, j=67, k=45)),
    ("bhqd,bhkd->bhqk", dict(b=2, h=3, q=129, k=65, d=64)),
    ("aibj,bjck->acik", dict(a=13, b=9, c=14, i=7, j=11, k=6)),
    ("pqrs,ap->aqrs", dict(p=30, q=20, r=10, s=15, a=33)),
    ("abk,kc->acb", dict(a=40, b=30, c=150, k=70)),
    ("ik,k->i", dict(i=1000, k=999)),
    ("i,j->ij", dict(i=300, j=500)),
    ("ijk,ijk->", dict(i=30, j=40, k=50)),
]


def source(spec, sizes, elem):
    ins, out = spec.split("->")
    br = lambda x: f"[{','.join(x)}]" if x else ""
    lines = [f"range R{c} = {n}; index {c} : R{c};" for c, n in sizes.items()]
    ops = ins.split(",")
    lines += [f"input tensor X{k}{br(o)} : {elem};" for k, o in enumerate(ops)]
    lines.append(f"output tensor Out{br(out)} : {elem};")
    lines.append(f"Out{br(out)} = {' * '.join(f'X{k}{br(o)}' for k, o in enumerate(ops))};")
    return "\n".join(lines) + "\n"


MIXED = """range I = 203; range J = 190; range K = 121; index i : I; index j : J; index k : K;
input tensor A[i,k] : f32; input tensor B[j,k] : f64; output tensor C[i,j] : f64;
C[i,j] = 0.5 * tanh(A[i,k]) * B[j,k];
C[i,j] += -2.0 * A[i,k] * exp(B[j,k]);
"""

if __name__ == "__main__":
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    n = 0
    for k, (spec, sizes) in enumerate(CASES):
        for elem in ["f64", "f32"]:
            open(os.path.join(d, f"t{k:02d}_{elem}.tc"), "w").write(source(spec, sizes, elem))
            n += 1
    open(os.path.join(d, "t99_mixed.tc"), "w").write(MIXED)
    print(f"wrote {n + 1} programs to {d}")
