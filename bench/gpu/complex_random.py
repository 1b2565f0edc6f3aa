#!/usr/bin/env python3
"""Writes random complex tcc programs for the device check of complex programs
on the GPU (bench/gpu/complex_prepare.sh).

    python3 bench/gpu/complex_random.py DIR N [SEED]

The generator of tests/complex.rs (`random_program`) with GPU-sized ranges:
C[i,j] from sums of 1-3 terms of binary, ternary and outer products of c64 /
c128 / f64 tensors, `conj` of a factor or of a whole term, coefficients, a
second `+=` statement and one that reads its own target. Ranges are 1-9 or, in
a third of the programs, 24-64 (cuBLAS and tiled kernels)."""

import os
import random
import sys

BASES = [
    "A[i,k] * B[k,j]",
    "R[i,j]",
    "E[i,j]",
    "A[i,k] * W[k,l] * X[l,j]",
    "A[i,k] * S[k] * B[k,j]",
    "A[i,k] * W[k,l] * X[l,j] * V[j]",
    "(A[i,k] * B[k,j] + E[i,j])",
]


def program(rng):
    ty = lambda: "c64" if rng.randrange(3) == 0 else "c128"
    ta, tb, tw, tx, te, tc = (ty() for _ in range(6))
    big = rng.randrange(3) == 0
    n = (lambda: rng.randint(24, 64)) if big else (lambda: rng.randint(1, 9))
    s = (
        f"range N = {n()}; range M = {n()}; range K = {n()}; range L = {n()};\n"
        "index i : N; index j : M; index k : K; index l : L;\n"
        f"input tensor A[i,k] : {ta}; input tensor B[k,j] : {tb}; input tensor W[k,l] : {tw};\n"
        f"input tensor X[l,j] : {tx}; input tensor E[i,j] : {te}; input tensor V[j] : c128;\n"
        "input tensor R[i,j] : f64; input tensor S[k] : f64;\n"
        f"output tensor C[i,j] : {tc};\n"
    )

    def rhs():
        terms = []
        for _ in range(1 + rng.randrange(3)):
            base = rng.choice(BASES)
            r = rng.randrange(3)
            if r == 0:
                text = f"conj({base})"
            elif r == 1:
                text = base.replace("A[i,k]", "conj(A[i,k])", 1).replace("E[i,j]", "conj(E[i,j])", 1)
            else:
                text = base
            coef = rng.choice(["", "2 * ", "0.5 * ", "3 * "])
            sign = "" if not terms else rng.choice([" + ", " - "])
            terms.append(f"{sign}{coef}{text}")
        return "".join(terms)

    s += f"C[i,j] = {rhs()};\n"
    if rng.randrange(2) == 0:
        s += f"C[i,j] += {rhs()};\n"
    if rng.randrange(2) == 0:
        s += "C[i,j] = C[i,j] * conj(E[i,j]) + R[i,j];\n"
    return s


def main():
    d, count = sys.argv[1], int(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 21)
    os.makedirs(d, exist_ok=True)
    for k in range(count):
        with open(os.path.join(d, f"crand{k:02}.tc"), "w") as f:
            f.write(program(rng))


if __name__ == "__main__":
    main()
