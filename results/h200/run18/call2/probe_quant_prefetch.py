"""Per head: does asking L2 for parts beyond the shared-memory buffers help the on-chip kernel?

    PYTHONPATH=. python3 scripts/probe_quant_prefetch.py OUT.json

v18 (docs/kernel-notes.md) found token-major x in one or two long sequences 5-7 points below
four or more sequences of the same bytes, and one sequence split over groups of programs that
finish a slice in 2 or 4 steps slower still (0.79, 0.68): each program then holds buffers for
parts whose slices are not complete, with fewer loads in flight. The plan's `prefetch`
(`WS_PREFETCH`, `PREFETCH`) makes each program's loader ask L2 for the part `prefetch` places past
its newest TMA load (`prefetch.global.L2`, one instruction per 128-byte line; run18 call 1 ran
`cp.async.bulk.prefetch.L2`, one per row), so more of x is on its way than the buffers hold. This probe times prefetch = 0 (the committed plan), 2, 4 and 8 parts on
- 128 MiB of token-major x as 1 x 16384, 2 x 8192 and 4 x 4096 sequences x 32 heads x 128, the
  same bytes as 32 contiguous slices (head-major), and with 8 kv heads (4 query heads each);
- 64 MiB (1 x 8192 x 32 x 128, warp-specialized) and 32 MiB (1 x 4096 x 32 x 128, v14's kernel).
bf16, three interleaved repeats, CUDA-graph replays against a copy, bits against two passes.
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8


def launcher(x: torch.Tensor, hk: int, prefetch: int):
    b, s, h, d = x.shape
    O.WS_PREFETCH = O.PREFETCH = prefetch
    plan = O.onchip_plan(x, b, s, h, d, hk, False, False)
    O.WS_PREFETCH = O.PREFETCH = 0
    assert not isinstance(plan, str) and plan.prefetch == prefetch, plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    label = f"grid {plan.grid} parts {plan.parts} ws {plan.ws} buffers {plan.buffers} prefetch {plan.prefetch}"
    return label, lambda: O.quantize_onchip(x, y, cu, b, s, h, hk, False, plan)


def main(out: str) -> None:
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    shapes = [(f"{b}x{16384 // b}", x.view(b, 16384 // b, 32, 128), 32) for b in (1, 2, 4)]
    shapes += [("contiguous slices", x.view(32, 16384, 1, 128), 1), ("1x16384 kv8", x, 8),
               ("1x8192 (64 MiB)", x[:, :8192], 32), ("1x4096 (32 MiB)", x[:, :4096], 32)]
    runs = []
    for name, xx, hk in shapes:
        xx = xx.contiguous()
        ref = quantize_fp8(xx, "head", heads_kv=hk, schedule="two-pass")
        for p in ((0, 2, 4) if xx.numel() * 2 < O.WS_FROM_BYTES else (0, 2, 4, 8)):
            label, fn = launcher(xx, hk, p)
            runs.append((name, xx, hk, p, label, fn, ref))
    runs.append(("per-token", x, 32, None, "quantize_fp8(x, 'token')", lambda: quantize_fp8(x, "token"), None))
    rows = []
    for rep in range(3):
        for name, xx, hk, p, label, fn, ref in runs:
            dst = torch.empty_like(xx)
            copy_ms = bench.median_ms_graph(lambda: dst.copy_(xx))
            y, d = fn()
            same = None if ref is None else bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8),
                                                                                       ref[0].view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            frac = bench.tbps(3 * xx.numel(), ms) / bench.tbps(4 * xx.numel(), copy_ms)
            rows.append(dict(rep=rep, shape_name=name, shape=list(xx.shape), heads_kv=hk, prefetch=p, plan=label,
                             same_bits=same, ms_graph=ms, copy_ms=copy_ms, frac_copy_graph=frac))
            print(f"{rep} {name:<18} p={p} {ms * 1e3:7.1f} us {frac:.3f} bits {same}  [{label}]", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, 16384, 32, 128], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
