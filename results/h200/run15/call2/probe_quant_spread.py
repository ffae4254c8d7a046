"""Which sizes gain from taking a sequence's kv heads in interleaved runs (`OnchipPlan.spread`)?

    PYTHONPATH=. python3 scripts/probe_quant_spread.py OUT.json

run15/call1 (docs/kernel-notes.md, v18) took each sequence's 32 kv heads in the order 0, 8, 16,
24, 1, 9, ... (spread 4): the kernel without warp specialization at 1 x 4096 x 32 x 128 went from
0.71 to 0.77 of copy; the warp-specialized one at 64 and 128 MiB moved by a point or nothing.
This times per-head quantization on chip with the plan's spread replaced by 1, 2, 4 and 8 (where
it divides the kv heads) over sizes, batch shapes, head dims and kv heads, each checked against
two passes. bf16, three interleaved repeats, CUDA-graph replays against a copy of the same tensor.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

# (batch, tokens, heads, head_dim, kv heads)
SHAPES = [(1, 1024, 32, 128, 32), (1, 2048, 32, 128, 32), (1, 4096, 32, 128, 32), (2, 2048, 32, 128, 32),
          (4, 1024, 32, 128, 32), (1, 8192, 16, 128, 16), (1, 16384, 8, 128, 8), (1, 4096, 32, 128, 16),
          (1, 4096, 32, 128, 8), (1, 4096, 32, 64, 32), (1, 2048, 32, 256, 32), (1, 8192, 32, 128, 32),
          (4, 4096, 32, 128, 32)]
SPREADS = (1, 2, 4, 8)


def main(out: str) -> None:
    runs = []
    for b, t, h, d, hk in SHAPES:
        x = torch.randn(b, t, h, d, device="cuda", dtype=torch.bfloat16)
        plan = O.onchip_plan(x, b, t, h, d, hk, False, False)
        assert not isinstance(plan, str), plan
        ref = quantize_fp8(x, "head", heads_kv=hk, schedule="two-pass")
        y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        cu = torch.zeros(1, dtype=torch.int32, device=x.device)
        for q in SPREADS:
            if hk % q == 0:
                p = dataclasses.replace(plan, spread=q)
                fn = (lambda x=x, y=y, cu=cu, p=p, shape=(b, t, h, hk):
                      O.quantize_onchip(x, y, cu, shape[0], shape[1], shape[2], shape[3], False, p))
                runs.append(dict(shape=(b, t, h, d, hk), spread=q, plan_spread=plan.spread, ws=plan.ws,
                                 grid=plan.grid, parts=plan.parts, x=x, ref=ref, fn=fn))
    rows = []
    for rep in range(3):
        copy_ms = {}
        for r in runs:
            x = r["x"]
            if r["shape"] not in copy_ms:
                dst = torch.empty_like(x)
                copy_ms[r["shape"]] = bench.median_ms_graph(lambda: dst.copy_(x))
            y, d = r["fn"]()
            y2, d2 = r["ref"]
            same = bool(torch.equal(d, d2) and torch.equal(y.view(torch.uint8), y2.view(torch.uint8)))
            ms = bench.median_ms_graph(r["fn"])
            c = copy_ms[r["shape"]]
            frac = bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), c)
            b, t, h, d_, hk = r["shape"]
            rows.append(dict(rep=rep, batch=b, tokens=t, heads=h, head_dim=d_, heads_kv=hk, mib=x.numel() * 2 >> 20,
                             spread=r["spread"], plan_spread=r["plan_spread"], ws=r["ws"], grid=r["grid"],
                             parts=r["parts"], same_bits=same, ms_graph=ms, copy_ms=c, frac_copy_graph=frac))
            print(f"{rep} {b}x{t}x{h}x{d_} kv{hk:<3} {x.numel() * 2 >> 20:>4} MiB ws {int(r['ws'])} spread {r['spread']} "
                  f"(plan {r['plan_spread']}) {ms * 1e3:7.1f} us {frac:.3f} bits {same}", flush=True)
    bench.write_results(out, rows, env.context(dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
