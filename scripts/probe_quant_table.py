"""Is it the table's hot spot that holds one long sequence back?

    PYTHONPATH=. python3 scripts/probe_quant_table.py OUT.json

v18 (docs/kernel-notes.md) measured per-head quantization on chip at 0.78-0.80 of copy for
1 x 16384 x 32 x 128 and 0.85-0.86 for the same 128 MiB as 4 x 4096 or more sequences. With one
sequence, all 128 programs poll the same slice's 128 table entries (1 KiB, a few L2 lines) at
once; with four, four groups poll four slices' 32 entries each. If that hot spot delayed the
loads of x that share its L2 slice, spreading each slice's entries over more lines would help.
`stride=S`: one source edit placing entry i at TABLE[i * S] (S = 4: one 32-byte sector each, 16:
one 128-byte line each), the table S times larger; the bits and everything else unchanged.
bf16, three interleaved repeats, CUDA-graph replays against a copy, bits against two passes.
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8
from probe_edit import edited_copy


def edited_module(stride: int):
    """A copy of quantize_onchip with table entry i at TABLE[i * stride]."""
    return edited_copy(O, [("gl.store(TABLE + item, ", f"gl.store(TABLE + item * {stride}, "),
                           ("gl.load(TABLE + first + offs, ", f"gl.load(TABLE + (first + offs) * {stride}, "),
                           ("_table_and_ticket(x.device, plan.items)", f"_table_and_ticket(x.device, plan.items * {stride})")],
                       f"onchip_table_stride{stride}")


def main(out: str) -> None:
    mods = {1: O} | {s: edited_module(s) for s in (4, 16)}
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(1, 4096, 32, 128, device="cuda", dtype=torch.bfloat16)
    shapes = [("1x16384", x, 32), ("4x4096", x.view(4, 4096, 32, 128), 32), ("1x16384 kv8", x, 8),
              ("1x4096 (32 MiB)", small, 32)]
    runs = []
    for label, xx, hk in shapes:
        b, s, h, d = xx.shape
        ref = quantize_fp8(xx, "head", heads_kv=hk, schedule="two-pass")
        y = torch.empty(xx.shape, dtype=torch.float8_e4m3fn, device=xx.device)
        cu = torch.zeros(1, dtype=torch.int32, device=xx.device)
        for stride, mod in mods.items():
            plan = mod.onchip_plan(xx, b, s, h, d, hk, False, False)
            assert not isinstance(plan, str), plan
            fn = (lambda mod=mod, xx=xx, y=y, cu=cu, plan=plan, hk=hk:
                  mod.quantize_onchip(xx, y, cu, *xx.shape[:3], hk, False, plan))
            runs.append((label, stride, xx, fn, ref))
    rows = []
    for rep in range(3):
        copy_ms = {t.numel(): bench.median_ms_graph(lambda t=t, dst=torch.empty_like(t): dst.copy_(t)) for t in (x, small)}
        for label, stride, xx, fn, ref in runs:
            y, d = fn()
            same = bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8), ref[0].view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            c = copy_ms[xx.numel()]
            frac = bench.tbps(3 * xx.numel(), ms) / bench.tbps(4 * xx.numel(), c)
            rows.append(dict(rep=rep, shape=label, table_stride=stride, same_bits=same, ms_graph=ms, copy_ms=c,
                             frac_copy_graph=frac))
            print(f"{rep} {label:<16} stride {stride:>2} {ms * 1e3:7.1f} us {frac:.3f} bits {same}", flush=True)
    bench.write_results(out, rows, env.context(dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
