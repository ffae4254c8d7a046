"""quantize_fp8 on head-major x, as a caller gets it (v17).

    PYTHONPATH=. python3 scripts/probe_quant_head_major.py OUT.json

run14/call2 timed the on-chip kernel at 0.86 of copy on 128 MiB viewed so that each slice is
contiguous memory. v17's `quantize_fp8` quantizes x stored as (b, h, s, d) through that view. This
times `quantize_fp8(x, "head", heads_kv=...)` (schedule "auto") at 1 x 16384 x 32 x 128, bf16, with
x token-major and head-major (`t.transpose(1, 2)`), 32 and 8 kv heads, three interleaved repeats,
CUDA-graph replays against a copy of the same tensor; bits and descales checked against two
passes over the token-major x.
"""

from __future__ import annotations

import sys

import torch

from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

SHAPE = (1, 16384, 32, 128)


def main(out: str) -> None:
    b, s, h, d = SHAPE
    token_major = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    head_major = token_major.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, (b, h, s, d) memory
    dst = torch.empty_like(token_major)
    rows = []
    for rep in range(3):
        copy_ms = bench.median_ms_graph(lambda: dst.copy_(token_major))
        for heads_kv in (32, 8):
            y2, d2 = quantize_fp8(token_major, "head", heads_kv=heads_kv, schedule="two-pass")
            for layout, x in (("token-major", token_major), ("head-major", head_major)):
                fn = lambda: quantize_fp8(x, "head", heads_kv=heads_kv)  # noqa: E731, B023
                y, dd = fn()
                same = bool(torch.equal(dd, d2) and torch.equal(y.contiguous().view(torch.uint8), y2.view(torch.uint8)))
                ms = bench.median_ms_graph(fn)
                rows.append(dict(rep=rep, layout=layout, heads_kv=heads_kv, y_stride=list(y.stride()), same_bits=same,
                                 ms_graph=ms, copy_ms=copy_ms,
                                 frac_copy_graph=bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)))
                print(f"{rep} {layout:<12} kv {heads_kv:2d} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} "
                      f"bits {same}", flush=True)
    bench.write_results(out, rows, env.context(shape=list(SHAPE), dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
