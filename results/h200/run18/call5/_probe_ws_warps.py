"""run18 call 5: 4 against 8 cast warps in the warp-specialized on-chip kernel (WS_WARPS), interleaved,
on every x from 64 MiB that takes it: 128 MiB of token-major x as b = 1, 2, 4, 8, 16 sequences of
16k / b tokens x 32 heads x 128, head-major (stored (b, h, s, d)) at b = 1 and 4, 8 kv heads (4 query
heads each) at b = 1 and 4, and 64 MiB (1 x 8192 x 32 x 128, 32 and 8 kv heads). bf16, three
interleaved repeats, CUDA-graph replays against a copy of the same tensor, bits against two passes.

    PYTHONPATH=. python3 _probe_ws_warps.py OUT.json
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8


def launcher(x: torch.Tensor, hk: int, warps: int):
    b, s, h, d = x.shape
    saved, O.WS_WARPS = O.WS_WARPS, warps
    try:
        plan = O.onchip_plan(x, b, s, h, d, hk, False, False)
    finally:
        O.WS_WARPS = saved
    assert not isinstance(plan, str) and plan.ws and plan.warps == warps, plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    label = f"grid {plan.grid} parts {plan.parts} warps {plan.warps} maxnreg {plan.maxnreg}"
    return label, lambda: O.quantize_onchip(x, y, cu, b, s, h, hk, False, plan)


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(5)
    shapes = []
    for b in (1, 2, 4, 8, 16):
        shapes.append((f"token {b}x{16384 // b}", torch.randn(b, 16384 // b, 32, 128, device="cuda", generator=gen,
                                                                dtype=torch.bfloat16), 32))
    for b in (1, 4):
        xh = torch.randn(b, 32, 16384 // b, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
        shapes.append((f"head-major {b}x{16384 // b}", xh.view(b * 32, 16384 // b, 1, 128), 1))
    for b in (1, 4):
        shapes.append((f"token {b}x{16384 // b} kv8", shapes[{1: 0, 4: 2}[b]][1], 8))
    x64 = torch.randn(1, 8192, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
    shapes += [("64 MiB token 1x8192", x64, 32), ("64 MiB token 1x8192 kv8", x64, 8)]
    runs = []
    for name, x, hk in shapes:
        ref = quantize_fp8(x, "head", heads_kv=hk, schedule="two-pass")
        for warps in (4, 8):
            label, fn = launcher(x, hk, warps)
            runs.append((name, x, hk, warps, label, fn, ref))
    rows = []
    for rep in range(3):
        for name, x, hk, warps, label, fn, ref in runs:
            dst = torch.empty_like(x)
            copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))
            y, d = fn()
            same = bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8), ref[0].view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            frac = bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)
            rows.append(dict(rep=rep, shape=name, heads_kv=hk, cast_warps=warps, plan=label, same_bits=same,
                             ms_graph=ms, copy_ms=copy_ms, frac_copy_graph=frac))
            print(f"{rep} {name:<24} warps {warps} {ms * 1e3:6.1f} us {frac:.3f} bits {same} [{label}]", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, 16384, 32, 128], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
