#!/usr/bin/env python3
"""3x3 convolutions of ResNet-50 (He et al. 2016: conv2_x 64 channels at 56x56,
conv3_x 128 at 28x28, conv4_x 256 at 14x14; batch 8, f64, stride 1, the input
padded by hand: a "valid" convolution of (Y+2)x(Y+2)) as tcc programs with
affine subscripts, for `tcc-gpu --tiled` (a gather per tile, then GEMMs)
against torch.nn.functional.conv2d (cuDNN) in the same run.

    python3 tiled_conv.py source N C K Y > layer.tc     # a layer as a tcc program
    python3 tiled_conv.py torch N C K Y [REPEAT]        # prints `torch: X ms`
"""
import sys
import time

LAYERS = [(8, 64, 64, 56), (8, 128, 128, 28), (8, 256, 256, 14)]


def source(n, c, k, y):
    return f"""// ResNet-50 3x3 layer: batch {n}, {c} -> {k} channels, {y}x{y} (bench/gpu/tiled_conv.py)
range N = {n}; range C = {c}; range K = {k}; range Y = {y}; range R = 3; range H = {y + 2};
index n : N; index c : C; index k : K; index y, x : Y; index r, s : R; index h, w : H;
input tensor I[n,c,h,w] : f64;
input tensor F[k,c,r,s] : f64;
output tensor O[n,k,y,x] : f64;
O[n,k,y,x] = I[n,c,y+r,x+s] * F[k,c,r,s];
"""


def torch_time(n, c, k, y, repeat):
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    i = torch.randn((n, c, y + 2, y + 2), dtype=torch.float64, device="cuda", generator=g)
    f = torch.randn((k, c, 3, 3), dtype=torch.float64, device="cuda", generator=g)
    conv = torch.nn.functional.conv2d
    out = conv(i, f)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        conv(i, f)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    print(f"torch: {best * 1e3:.3f} ms (norm2 = {float(out.norm()) ** 2:.6e})")


def main():
    mode, args = sys.argv[1], [int(a) for a in sys.argv[2:]]
    if mode == "source":
        sys.stdout.write(source(*args[:4]))
    elif mode == "torch":
        torch_time(*args[:4], args[4] if len(args) > 4 else 5)
    else:
        sys.exit(f"unknown mode {mode}: source or torch")


if __name__ == "__main__":
    main()
