#!/usr/bin/env python3
"""numpy (OpenBLAS) dgemm GFLOP/s at n = 1536, best of 10 (bench/tiled/run.sh)."""
import time

import numpy as np

n = 1536
a, b = np.random.rand(n, n), np.random.rand(n, n)
a @ b
best = min((lambda t0: (a @ b, time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(10))
print(f"numpy dgemm: {2 * n**3 / best / 1e9:.2f} GFLOP/s (best of 10)")
