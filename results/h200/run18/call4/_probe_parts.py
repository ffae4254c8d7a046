"""run18 call 4: the warp-specialized on-chip kernel's part size and buffers at 128 MiB (bf16, 32 x 128)
split into 1, 2 and 4 sequences: 16 KiB x 12, 32 KiB x 6 (the plan), 64 KiB x 3, and 32 KiB x 6 with
8 cast warps. Three interleaved repeats, CUDA-graph replays against a copy, bits against two passes.

    PYTHONPATH=. python3 _probe_parts.py OUT.json
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

SETTINGS = {"32k x6 (plan)": {}, "16k x12": dict(PART_BYTES=16 << 10, WS_BUFFERS=12),
            "64k x3": dict(PART_BYTES=64 << 10, WS_BUFFERS=3), "32k x6 8 cast warps": dict(WARPS=8)}


def launcher(x: torch.Tensor, hk: int, change: dict):
    b, s, h, d = x.shape
    saved = {k: getattr(O, k) for k in change}
    for k, v in change.items():
        setattr(O, k, v)
    try:
        plan = O.onchip_plan(x, b, s, h, d, hk, False, False)
    finally:
        for k, v in saved.items():
            setattr(O, k, v)
    assert not isinstance(plan, str) and plan.ws, plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    label = f"grid {plan.grid} parts {plan.parts} rows {plan.part_rows} buffers {plan.buffers} warps {plan.warps}"
    return label, lambda: O.quantize_onchip(x, y, cu, b, s, h, hk, False, plan)


def main(out: str) -> None:
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    runs = []
    for b in (1, 2, 4):
        xx = x.view(b, 16384 // b, 32, 128)
        ref = quantize_fp8(xx, "head", schedule="two-pass")
        for name, change in SETTINGS.items():
            try:
                label, fn = launcher(xx, 32, change)
            except Exception as e:  # a setting the plan refuses is a row, not a stop
                print(f"{b}x{16384 // b} {name}: {e!r}")
                continue
            runs.append((f"{b}x{16384 // b}", name, label, fn, ref))
    dst = torch.empty_like(x)
    rows = []
    for rep in range(3):
        copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))
        for shape, name, label, fn, ref in runs:
            y, d = fn()
            same = bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8), ref[0].view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            frac = bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)
            rows.append(dict(rep=rep, shape=shape, setting=name, plan=label, same_bits=same, ms_graph=ms,
                             copy_ms=copy_ms, frac_copy_graph=frac))
            print(f"{rep} {shape:<8} {name:<20} {ms * 1e3:6.1f} us {frac:.3f} bits {same} [{label}]", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, 16384, 32, 128], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
