#!/usr/bin/env python3
"""Inputs for bench/gpu/complex_driver.c and the check of its outputs against
numpy (bench/gpu/complex_device_run.sh).

    python3 complex_check.py inputs DIR    # writes DIR/{A,B,R,S,T}.bin
    python3 complex_check.py check DIR     # compares DIR/{C,D}.bin with numpy
"""

import sys

import numpy as np

N, K, M = 384, 256, 320


def main():
    mode, d = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(21)
    cx = lambda shape, t: (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(t)
    A, B = cx((N, K), np.complex128), cx((K, M), np.complex128)
    R = rng.standard_normal((N, M))
    S, T = cx((N, K), np.complex64), cx((K, M), np.complex64)
    if mode == "inputs":
        for name, v in dict(A=A, B=B, R=R, S=S, T=T).items():
            v.tofile(f"{d}/{name}.bin")
        return 0
    C = np.fromfile(f"{d}/C.bin", dtype=np.complex128).reshape(N, M)
    D = np.fromfile(f"{d}/D.bin", dtype=np.complex64).reshape(N, M)
    wantC = A @ np.conj(B) - 0.5 * R
    wantD = np.conj(S).astype(np.complex128) @ T.astype(np.complex128)
    ok = True
    for name, got, want, tol in [("C (c128)", C, wantC, 1e-10), ("D (c64)", D, wantD, 1e-4)]:
        rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
        good = rel <= tol and np.abs(got.imag).max() > 0
        ok &= bool(good)
        print(f"{'ok  ' if good else 'FAIL'} {name}: max relative difference to numpy {rel:.2e} (tolerance {tol:.0e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
