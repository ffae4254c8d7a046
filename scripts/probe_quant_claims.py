"""Parts claimed from a counter instead of dealt round-robin, in the on-chip per-head kernel (v37).

    git apply results/h200/run33/call1/claims.patch
    PYTHONPATH=.:scripts python3 scripts/probe_quant_claims.py OUT.json

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

import sys

import torch

from fp8lab.kernels import quantize_fp8
from probe_quant_buffers import launcher, time_rounds

SETTINGS = {"dealt (plan)": ({}, None), "claimed": (dict(WS_DYNAMIC=True), None),
            "claimed, 128 programs": (dict(WS_DYNAMIC=True), 128), "claimed x7": (dict(WS_DYNAMIC=True, WS_BUFFERS=7),
                                                                                  None)}
# (name, sequences, tokens, heads, kv heads)
SHAPES = (("1x16384", 1, 16384, 32, 32), ("2x8192", 2, 8192, 32, 32), ("4x4096", 4, 4096, 32, 32),
          ("1x8192", 1, 8192, 32, 32), ("head-major 32x16384x1", 32, 16384, 1, 1),
          ("1x16384 GQA4", 1, 16384, 32, 8))


def main(out: str) -> None:
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    runs = []
    for shape, b, s, h, hk in SHAPES:
        xx = x.view(-1)[: b * s * h * 128].view(b, s, h, 128)
        ref = quantize_fp8(xx, "head", heads_kv=hk, schedule="two-pass")
        for name, (change, grid) in SETTINGS.items():
            try:
                label, fn = launcher(xx, change, hk, grid)
                fn()
            except Exception as e:  # a setting the GPU refuses is a line of the log, not a stop
                print(f"{shape} {name}: {e!r}", flush=True)
                continue
            runs.append((xx, shape, name, label, fn, ref))
    time_rounds(out, runs)


if __name__ == "__main__":
    main(sys.argv[1])
