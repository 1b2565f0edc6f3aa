#!/usr/bin/env python3
"""Coalescing of a tiled kernel's C stores, computed from its plan (no GPU): for
each warp-wide store instruction, the 32-byte sectors it touches against the
bytes it writes, over a sample of blocks. Models the thread-to-address mapping
of src/codegen/nvptx/tiled.rs: the direct epilogue (FMA: rows ty*tm+i, columns
tx+j*(bn/tn); tensor cores: row lane/4 + 8i of the warp tile, columns
2*(lane%4) + 8j + {0,1}) and the staged one (unit u of a pass: vec consecutive
columns of stage row (u*vec)/bn; stage row (i-i0)*rows + y).

    python3 bench/gpu/store_sectors.py PLAN.json...   (tcc build --target cuda)

Prints per plan: store instructions per block, sectors per instruction and
bytes written / bytes of the sectors touched (1.0: every sector full).
"""

import json
import random
import sys


def offsets(dims, i):
    o = 0
    for d in reversed(dims):
        o += (i % d["size"]) * d["c"]
        i //= d["size"]
    return o


def total(dims):
    t = 1
    for d in dims:
        t *= d["size"]
    return t


def instructions(t, elem_bytes):
    """Yields, per warp store instruction of one block, the (row, col, count)
    triples its active threads write (count consecutive columns)."""
    cfg = t["cfg"]
    bm, bn, tm, tn, mma = cfg["bm"], cfg["bn"], cfg["tm"], cfg["tn"], cfg.get("mma", False)
    slots, ncols = (tm // 8, 2 * tn // 8) if mma else (tm, tn)
    if mma:
        nt = (bm // tm) * (bn // tn) * 32
        yn = bm // slots
        def row_of(y, i):
            return (y // 8) * tm + y % 8 + 8 * i
        def cls(tid):
            w, lane = divmod(tid, 32)
            return (w // (bn // tn)) * 8 + lane // 4
        def cols(tid):
            w, lane = divmod(tid, 32)
            c0 = (w % (bn // tn)) * tn + 2 * (lane % 4)
            return [c0 + 8 * j + r for j in range(tn // 8) for r in range(2)]
    else:
        nt = (bm // tm) * (bn // tn)
        yn = bm // slots
        def row_of(y, i):
            return y * tm + i
        def cls(tid):
            return tid // (bn // tn)
        def cols(tid):
            return [tid % (bn // tn) + j * (bn // tn) for j in range(tn)]
    if t.get("epilogue", "direct") == "direct":
        for w in range(0, nt, 32):
            for i in range(slots):
                for j in range(ncols):
                    yield [(row_of(cls(tid), i), cols(tid)[j], 1) for tid in range(w, w + 32)]
    else:
        v = t.get("vec", 1)
        ld = bn + 64 // elem_bytes
        ops = 2 * cfg["bk"] * (bm + (4 if mma else 16 // elem_bytes)) + 2 * cfg["bk"] * (bn + (4 if mma else 16 // elem_bytes))
        per_pass = max(1, min(slots, ops // (yn * ld)))
        for i0 in range(0, slots, per_pass):
            i1 = min(slots, i0 + per_pass)
            units = (i1 - i0) * yn * bn // v
            for u in range(0, units, nt):
                for w in range(0, nt, 32):
                    ins = []
                    for tid in range(w, w + 32):
                        e = tid + u
                        if e >= units:
                            continue
                        sr, sc = divmod(e * v, bn)
                        ins.append((row_of(sr % yn, i0 + sr // yn), sc, v))
                    if ins:
                        yield ins


def main():
    random.seed(1)
    for path in sys.argv[1:]:
        plan = json.load(open(path))
        for k in plan["kernels"]:
            t = k.get("tiled")
            if not t:
                continue
            eb = 8 if k["elem"] == "f64" else 4
            m_tot, n_tot = total(t["m"]), total(t["n"])
            cfg = t["cfg"]
            gx, gy = -(-n_tot // cfg["bn"]), -(-m_tot // cfg["bm"])
            n_ins = sectors = written = 0
            blocks = [(random.randrange(gx), random.randrange(gy)) for _ in range(6)]
            for bx, by in blocks:
                for ins in instructions(t, eb):
                    secs = set()
                    any_ = False
                    for r, c, cnt in ins:
                        row, col = by * cfg["bm"] + r, bx * cfg["bn"] + c
                        if row >= m_tot or col >= n_tot:
                            continue
                        base = offsets(t["m"], row)
                        for q in range(cnt):
                            a = (base + offsets(t["n"], col + q)) * eb
                            secs.add(a // 32)
                            written += eb
                            any_ = True
                    if any_:
                        n_ins += 1
                        sectors += len(secs)
            print(f"{path} {k['name']}: {t.get('epilogue', 'direct')} vec {t.get('vec', 1)} tile "
                  f"{cfg['bm']}x{cfg['bn']}x{cfg['bk']}/{cfg['tm']}x{cfg['tn']}{' mma' if cfg.get('mma') else ''}: "
                  f"{n_ins / len(blocks):.0f} store instructions per block, {sectors / n_ins:.2f} sectors each, "
                  f"sector use {written / (32 * sectors):.2f}")


if __name__ == "__main__":
    main()
