#!/usr/bin/env python3
"""Generates the large programs of bench/scale/run.sh (issue 23's blow-ups):
N statements, one statement of N terms, two statements sharing a product over
n indices, and a file with N errors."""
import sys

kind, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
head = "range N = 4;\nindex i, j, k : N;\ninput tensor A[i,j];\ninput tensor B[j,k];\n"
if kind == "stmts":
    src = head + "".join(f"output tensor C{s}[i,k];\n" for s in range(n))
    src += "".join(f"C{s}[i,k] = {s + 1} * A[i,j] * B[j,k];\n" for s in range(n))
elif kind == "terms":
    src = head + "".join(f"input tensor A{t}[i,j];\n" for t in range(7)) + "output tensor C[i,k];\n"
    src += "C[i,k] = " + " + ".join(f"A{t % 7}[i,j] * B[j,k]" for t in range(n)) + ";\n"
elif kind == "shared":
    # Two statements sharing A[I]*B[I] over n indices of extent 2.
    idx = [f"x{d}" for d in range(n)]
    src = "range R = 2;\n" + f"index {', '.join(idx)} : R;\n"
    src += f"input tensor A[{','.join(idx)}];\ninput tensor B[{','.join(idx)}];\n"
    src += "input tensor u;\ninput tensor v;\noutput tensor S;\noutput tensor T;\n"
    src += f"S = u * A[{','.join(idx)}] * B[{','.join(idx)}];\n"
    src += f"T = v * A[{','.join(idx)}] * B[{','.join(idx)}];\n"
elif kind == "errors":
    src = head + "".join(f"output tensor E{s}[i,k];\nE{s}[i,k] = Q{s}[i,j] * B[j,k];\n" for s in range(n))
else:
    sys.exit(f"unknown kind {kind}")
open(out, "w").write(src)
