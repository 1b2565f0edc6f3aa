#!/usr/bin/env python3
"""The spin-orbital CCD residual of bench/tiled/ccd.py with torch.einsum on the
GPU (f64, dense tensors): the peer of `tcc-gpu --tiled` in bench/gpu/tiled_ccd.sh.

    python3 tiled_ccd_torch.py O V [REPEAT]

Prints `torch: X ms` (fastest of REPEAT, synchronized wall time) or `torch:
out of memory (N GB dense inputs)`.
"""
import sys
import time

import torch


def residual(t2, fvv, foo, vvvoo, vvvvv, voooo, vovvo, voovv):
    e = torch.einsum
    r = vvvoo.clone()
    r += e("bc,acij->abij", fvv, t2) - e("ac,bcij->abij", fvv, t2)
    r += -e("kj,abik->abij", foo, t2) + e("ki,abjk->abij", foo, t2)
    r += 0.5 * e("abcd,cdij->abij", vvvvv, t2)
    r += 0.5 * e("klij,abkl->abij", voooo, t2)
    r += e("kbcj,acik->abij", vovvo, t2) - e("kacj,bcik->abij", vovvo, t2)
    r += -e("kbci,acjk->abij", vovvo, t2) + e("kaci,bcjk->abij", vovvo, t2)
    r += 0.25 * e("klcd,cdij,abkl->abij", voovv, t2, t2)
    r += e("klcd,acik,bdjl->abij", voovv, t2, t2) - e("klcd,acjk,bdil->abij", voovv, t2, t2)
    r += -0.5 * e("klcd,dcik,ablj->abij", voovv, t2, t2) + 0.5 * e("klcd,dcjk,abli->abij", voovv, t2, t2)
    r += -0.5 * e("klcd,aclk,dbij->abij", voovv, t2, t2) + 0.5 * e("klcd,bclk,daij->abij", voovv, t2, t2)
    return r


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
