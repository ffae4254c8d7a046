"""Parts claimed from a counter instead of dealt round-robin, in the on-chip per-head kernel (v37).

    git apply results/h200/run33/call1/claims.patch
    PYTHONPATH=. python3 scripts/probe_quant_claims.py OUT.json

The claiming build (`WS_DYNAMIC`) was slower everywhere (0.65-0.66 of copy, paced by the counter)
and is not in the package; the patch adds it to commit 93a4614's `quantize_onchip.py` and its tests.

One long token-major sequence (1 x 16384 x 32 x 128 bf16, 128 MiB) runs the warp-specialized
kernel at 0.78-0.80 of a copy, four sequences of the same bytes at 0.85 (v18). With parts dealt
round-robin, program p holds part p of every slice, so every slice waits for the slowest of 128
programs, and a program that is slow for the whole call (its SM, its place on the chip) holds every
slice back; the 4 SMs that 128 does not fill stay idle. With WS_DYNAMIC each loader claims its next
part from a counter when a buffer frees: slices still complete in order, but a faster SM takes
more parts, and all 132 SMs take a program.

Timed, in 3 interleaved rounds of CUDA-graph replays against a copy of the same tensor: dealt (the
plan), claimed, claimed with 128 programs (what the extra SMs buy, apart from the claims) and
claimed with 7 buffers; token-major x as 1, 2 and 4 sequences and 1 x 8192 (64 MiB), the same
128 MiB as head-major slices (32 sequences of one head), and 4 query heads per kv head. Bits and
descales against two passes in every row.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

SETTINGS = {"dealt (plan)": ({}, None), "claimed": (dict(WS_DYNAMIC=True), None),
            "claimed, 128 programs": (dict(WS_DYNAMIC=True), 128), "claimed x7": (dict(WS_DYNAMIC=True, WS_BUFFERS=7),
                                                                                  None)}
# (name, sequences, tokens, heads, kv heads)
SHAPES = (("1x16384", 1, 16384, 32, 32), ("2x8192", 2, 8192, 32, 32), ("4x4096", 4, 4096, 32, 32),
          ("1x8192", 1, 8192, 32, 32), ("head-major 32x16384x1", 32, 16384, 1, 1),
          ("1x16384 GQA4", 1, 16384, 32, 8))


def launcher(x: torch.Tensor, heads_kv: int, change: dict, grid: int | None):
    """(plan label, a call of the kernel planned with `change` applied to the module's constants)."""
    b, s, h, d = x.shape
    saved = {k: getattr(O, k) for k in change}
    for k, v in change.items():
        setattr(O, k, v)
    try:
        plan = O.onchip_plan(x, b, s, h, d, heads_kv, False, False)
    finally:
        for k, v in saved.items():
            setattr(O, k, v)
    if isinstance(plan, str) or not plan.ws:
        raise ValueError(f"not the warp-specialized plan: {plan}")
    if grid is not None:
        plan = dataclasses.replace(plan, grid=grid)
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    label = f"grid {plan.grid} parts {plan.parts} buffers {plan.buffers} dynamic {plan.dynamic}"
    return label, lambda: O.quantize_onchip(x, y, cu, b, s, h, heads_kv, False, plan)


def main(out: str) -> None:
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    runs = []
    for shape, b, s, h, hk in SHAPES:
        xx = x.view(-1)[: b * s * h * 128].view(b, s, h, 128)
        ref = quantize_fp8(xx, "head", heads_kv=hk, schedule="two-pass")
        for name, (change, grid) in SETTINGS.items():
            try:
                label, fn = launcher(xx, hk, change, grid)
                fn()
            except Exception as e:  # a setting the GPU refuses is a line of the log, not a stop
                print(f"{shape} {name}: {e!r}", flush=True)
                continue
            runs.append((xx, shape, name, label, fn, ref))
    rows = []
    for rep in range(3):
        copy_ms = {}
        for xx, shape, name, label, fn, ref in runs:
            if shape not in copy_ms:
                dst = torch.empty_like(xx)
                copy_ms[shape] = bench.median_ms_graph(lambda: dst.copy_(xx))  # noqa: B023
            y, d = fn()
            same = bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8), ref[0].view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            y.view(torch.uint8).zero_()
            y, d = fn()  # after the replays too: the counters started each replay at zero
            same = same and bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8), ref[0].view(torch.uint8)))
            frac = bench.tbps(3 * xx.numel(), ms) / bench.tbps(4 * xx.numel(), copy_ms[shape])
            rows.append(dict(rep=rep, shape=shape, setting=name, plan=label, same_bits=same, ms_graph=ms,
                             copy_ms=copy_ms[shape], frac_copy_graph=frac))
            print(f"{rep} {shape:<22} {name:<22} {ms * 1e3:6.1f} us {frac:.3f} bits {same} [{label}]", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, 16384, 32, 128], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
