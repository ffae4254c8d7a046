"""Pass 2 backwards, and L2 eviction hints on top: do more of pass 1's x lines survive for pass 2?

    PYTHONPATH=.:scripts python3 probe_quant_evict.py OUT.json

Variants of `_scale_cast_kernel` (edited copies of fp8lab.kernels.quantize, committed = backward):
- `evict-y`: y stored with eviction_policy="evict_first", so y's lines leave L2 before x's;
- `evict-xy`: also pass 2's loads of x evict_first (pass 2 reads each value once).
Two-pass per tensor and per head, bf16 1 x tokens x 32 x 128 at 64, 128, 256 MiB; three
interleaved repeats; CUDA-graph replays against a copy; bits against the committed kernel.
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize as Q
from fp8lab import bench, env
from probe_edit import edited_copy

HEADS, D = 32, 128
CAST_STORE = """        y = _divide(x, d[None, :, None], r[None, :, None], tl.min(d, 0) < TINY_DESCALE, ROUND_IN_FP32)
    tl.store(Y + y_offs, _to_e4m3(y, ROUND_IN_FP32), mask=mask)
"""
EVICT_STORE = """        y = _divide(x, d[None, :, None], r[None, :, None], tl.min(d, 0) < TINY_DESCALE, ROUND_IN_FP32)
    tl.store(Y + y_offs, _to_e4m3(y, ROUND_IN_FP32), mask=mask, eviction_policy="evict_first")
"""
CAST_LOAD = """    y_offs, _ = _tile(pid_t, b, CU, seqlen, stride_yb, stride_ys, stride_yh, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
"""
EVICT_LOAD = """    y_offs, _ = _tile(pid_t, b, CU, seqlen, stride_yb, stride_ys, stride_yh, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    x = tl.load(X + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
"""


def main(out: str) -> None:
    mods = {"backward": Q,
            "evict-y": edited_copy(Q, [(CAST_STORE, EVICT_STORE)], "quantize_evict_y"),
            "evict-xy": edited_copy(Q, [(CAST_STORE, EVICT_STORE), (CAST_LOAD, EVICT_LOAD)], "quantize_evict_xy")}
    rows = []
    for tokens in (8192, 16384, 32768):
        x = torch.randn(1, tokens, HEADS, D, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(x)
        size = f"1x{tokens}x{HEADS}x{D} ({x.numel() * 2 >> 20} MiB)"
        runs = {f"{g} {name}": (lambda m=mod, g=g, x=x: m.quantize_fp8(x, g, schedule="two-pass"))
                for g in ("tensor", "head") for name, mod in mods.items()}
        for rep in range(3):
            copy_ms = bench.median_ms_graph(lambda x=x, dst=dst: dst.copy_(x))
            for name, fn in runs.items():
                y, d = fn()
                y2, d2 = runs[name.split()[0] + " backward"]()
                same = bool(torch.equal(d, d2) and torch.equal(y.view(torch.uint8), y2.view(torch.uint8)))
                ms = bench.median_ms_graph(fn)
                rows.append(dict(rep=rep, size=size, kernel=name, same_bits=same, ms_graph=ms, copy_ms=copy_ms,
                                 copy_tbps_graph=bench.tbps(4 * x.numel(), copy_ms),
                                 frac_copy_graph=bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)))
                print(f"{rep} {size:<26} {name:<16} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} bits {same}",
                      flush=True)
    bench.write_results(out, rows, env.context(heads=HEADS, head_dim=D, dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
