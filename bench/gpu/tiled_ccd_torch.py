#!/usr/bin/env python3
"""The spin-orbital CCD residual of bench/tiled/ccd.py with torch.einsum on the
GPU (f64, dense tensors): the peer of `tcc-gpu --tiled` in bench/gpu/tiled_ccd.sh.

    python3 tiled_ccd_torch.py O V [REPEAT]

Prints `torch: X ms` (fastest of REPEAT, synchronized wall time) or `torch:
out of memory (N GB dense inputs)`.
"""
import os
import sys
import time

import torch

# bench/tiled/ccd.py, beside this file on the device or in the repository.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tiled")]
from ccd import residual as ccd_residual  # noqa: E402


def residual(*tensors):
    return ccd_residual(torch.einsum, *tensors)


def main():
    o, v = int(sys.argv[1]), int(sys.argv[2])
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    shapes = [(v, v, o, o), (v, v), (o, o), (v, v, o, o), (v, v, v, v), (o, o, o, o), (o, v, v, o), (o, o, v, v)]
    gb = sum(8 * torch.Size(s).numel() for s in shapes) / 1e9
    try:
        g = torch.Generator(device="cuda").manual_seed(0)
        arrs = [torch.randn(s, dtype=torch.float64, device="cuda", generator=g) for s in shapes]
        residual(*arrs)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            residual(*arrs)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        print(f"torch: {best * 1e3:.2f} ms ({gb:.1f} GB dense inputs)")
    except torch.cuda.OutOfMemoryError:
        print(f"torch: out of memory ({gb:.1f} GB dense inputs)")


if __name__ == "__main__":
    main()
