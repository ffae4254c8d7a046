"""Which parts suit per-head quantization of Q under GQA (several query heads per kv head)?

    PYTHONPATH=. python3 scripts/probe_quant_gqa.py OUT.json

Three `gpu_bench.py --quant` runs (v15, run13/call3, run14/call1) timed 4 query heads per kv head
at 32 MiB faster with v14's kernel as one program of 8 warps per SM and 64 KiB parts (0.66-0.70
of copy) than with the default two programs of 4 warps and 32 KiB parts (0.60-0.65). v17 makes
that the plan for parts of GROUP_FROM or more query heads below WS_FROM_BYTES. This probe times,
with three interleaved repeats and CUDA-graph replays against a copy of the same tensor, bits
checked against two passes:
- below 64 MiB, GQA4 and GQA2 (8 MiB to 32 MiB, one sequence or four): `v16` (GROUP_FROM off),
  `v17` (GROUP_FROM = 4, the default), `group-from-2` (GQA2 takes it too);
- at 64 and 128 MiB (warp-specialized): `v16` (the default), `ws-64k` (64 KiB parts, 3 buffers),
  `v17-wide` (the non-WS kernel with GROUP_* parts).
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

SHAPES = [  # (b, s, h, d), kv heads
    ((1, 8192, 4, 128), 1), ((1, 16384, 4, 128), 1), ((1, 16384, 8, 128), 2), ((4, 4096, 8, 128), 2),
    ((1, 16384, 8, 128), 4), ((4, 4096, 8, 128), 4),
    ((1, 16384, 16, 128), 4), ((1, 16384, 32, 128), 8),
]
SMALL = {"v16": dict(GROUP_FROM=99), "v17": {}, "group-from-2": dict(GROUP_FROM=2)}
LARGE = {"v16": dict(GROUP_FROM=99), "ws-64k": dict(PART_BYTES=64 << 10, WS_BUFFERS=3),
         "v17-wide": dict(WS=False)}


def run(setting: dict, fn):
    """fn() with O's knobs set as `setting` says, then put back."""
    old = {k: getattr(O, k) for k in setting}
    try:
        for k, v in setting.items():
            setattr(O, k, v)
        return fn()
    finally:
        for k, v in old.items():
            setattr(O, k, v)


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(17)
    cases = []
    for shape, hkv in SHAPES:
        x = torch.randn(*shape, device="cuda", generator=gen, dtype=torch.bfloat16)
        big = x.numel() * 2 >= O.WS_FROM_BYTES
        for name, setting in (LARGE if big else SMALL).items():
            if name == "group-from-2" and shape[2] // hkv != 2:
                continue
            cases.append((shape, hkv, x, name, setting))
    refs = {(c[0], c[1]): quantize_fp8(c[2], "head", heads_kv=c[1], schedule="two-pass") for c in cases}
    rows = []
    for rep in range(3):
        for shape, hkv, x, name, setting in cases:
            fn = lambda: quantize_fp8(x, "head", heads_kv=hkv, schedule="onchip")  # noqa: E731, B023
            y, d = run(setting, fn)
            y2, d2 = refs[(shape, hkv)]
            same = bool(torch.equal(d, d2) and torch.equal(y.view(torch.uint8), y2.view(torch.uint8)))
            plan = run(setting, lambda: O.onchip_plan(x, shape[0], shape[1], shape[2], shape[3], hkv, False, False))  # noqa: B023
            ms = run(setting, lambda: bench.median_ms_graph(fn))  # noqa: B023
            dst = torch.empty_like(x)
            copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))  # noqa: B023
            rows.append(dict(rep=rep, shape="x".join(map(str, shape)), heads_kv=hkv, group=shape[2] // hkv,
                             mib=x.numel() * 2 >> 20, setting=name, ws=plan.ws, warps=plan.warps,
                             part_kib=plan.part_rows * plan.group * plan.head_dim * 2 >> 10, grid=plan.grid,
                             parts=plan.parts, same_bits=same, ms_graph=ms, copy_ms=copy_ms,
                             frac_copy_graph=bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)))
            r = rows[-1]
            print(f"{rep} {r['shape']:<16} kv {hkv} {name:<13} {r['part_kib']:3d} KiB {r['warps']} warps "
                  f"{ms * 1e3:7.1f} us {r['frac_copy_graph']:.3f} bits {same}", flush=True)
    bench.write_results(out, rows, env.context(dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
