"""How many parts the warp-specialized on-chip kernel keeps in flight (v29).

    PYTHONPATH=. python3 scripts/probe_quant_buffers.py OUT.json

v22 found the loader of the per-head on-chip kernel waiting for a free buffer nearly all the time,
and one long token-major sequence waiting longest for its slices to complete. If the buffers bound
the speed, one more 32 KiB buffer (7, 224 KiB of the 227 an H200 program may take) would add speed
and one fewer would take it away. This times `quantize_onchip` per head at 128 MiB of bf16
(16k tokens x 32 heads x 128) split into 1, 2 and 4 token-major sequences, and 64 MiB as one,
with WS_BUFFERS = 5, 6 (the plan), 7, and 7 with 8 cast warps: three interleaved repeats,
CUDA-graph replays against a copy of the same tensor, bits and descales against two passes.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

SETTINGS = {"x6 (plan)": {}, "x5": dict(WS_BUFFERS=5), "x7": dict(WS_BUFFERS=7),
            "x7 8 cast warps": dict(WS_BUFFERS=7, WS_WARPS=8)}
SHAPES = ((1, 16384), (2, 8192), (4, 4096), (1, 8192))


def launcher(x: torch.Tensor, change: dict, heads_kv: int | None = None, grid: int | None = None):
    """(plan label, a call of the kernel planned with `change` applied to the module's constants;
    heads_kv: x's heads unless given; grid: the plan's unless given)."""
    b, s, h, d = x.shape
    hk = h if heads_kv is None else heads_kv
    saved = {k: getattr(O, k) for k in change}
    for k, v in change.items():
        setattr(O, k, v)
    try:
        plan = O.onchip_plan(x, b, s, h, d, hk, False, False)
    finally:
        for k, v in saved.items():
            setattr(O, k, v)
    if isinstance(plan, str) or not plan.ws:
        raise ValueError(f"not the warp-specialized plan: {plan}")
    if grid is not None:
        plan = dataclasses.replace(plan, grid=grid)
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    label = f"grid {plan.grid} parts {plan.parts} buffers {plan.buffers} warps {plan.warps}"
    if getattr(plan, "dynamic", False):  # the claiming build (v37's patch)
        label += " claimed"
    return label, lambda: O.quantize_onchip(x, y, cu, b, s, h, hk, False, plan)


def time_rounds(out: str, runs: list[tuple], rounds: int = 3) -> None:
    """Time every (x, shape, setting, label, call, two passes' (y, descale)) of `runs` in `rounds`
    interleaved rounds of CUDA-graph replays against a copy of the same tensor, checking the bits
    before the replays and after them (y zeroed first), and write the rows to `out`."""
    rows = []
    for rep in range(rounds):
        copy_ms = {}
        for xx, shape, name, label, fn, ref in runs:
            if shape not in copy_ms:
                dst = torch.empty_like(xx)
                copy_ms[shape] = bench.median_ms_graph(lambda: dst.copy_(xx))  # noqa: B023
            same = _same(fn(), ref)
            ms = bench.median_ms_graph(fn)
            y, _ = fn()
            y.view(torch.uint8).zero_()
            same = same and _same(fn(), ref)  # the replays left nothing behind (v37: the claim counter)
            frac = bench.tbps(3 * xx.numel(), ms) / bench.tbps(4 * xx.numel(), copy_ms[shape])
            rows.append(dict(rep=rep, shape=shape, setting=name, plan=label, same_bits=same, ms_graph=ms,
                             copy_ms=copy_ms[shape], frac_copy_graph=frac))
            print(f"{rep} {shape:<22} {name:<22} {ms * 1e3:6.1f} us {frac:.3f} bits {same} [{label}]", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, 16384, 32, 128], dtype="bfloat16"))


def _same(got: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor]) -> bool:
    return bool(torch.equal(got[1], ref[1]) and torch.equal(got[0].view(torch.uint8), ref[0].view(torch.uint8)))


def main(out: str) -> None:
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    runs = []
    for b, s in SHAPES:
        xx = x[:, : b * s].view(b, s, 32, 128)
        ref = quantize_fp8(xx, "head", schedule="two-pass")
        for name, change in SETTINGS.items():
            try:
                label, fn = launcher(xx, change)
                fn()
            except Exception as e:  # a setting the GPU refuses is a line of the log, not a stop
                print(f"{b}x{s} {name}: {e!r}", flush=True)
                continue
            runs.append((xx, f"{b}x{s}", name, label, fn, ref))
    time_rounds(out, runs)


if __name__ == "__main__":
    main(sys.argv[1])
