"""Does the order of a sequence's kv heads, or a grid of whole rounds, move per-head quantization?

    PYTHONPATH=. python3 scripts/probe_quant_order.py OUT.json

v17 (docs/kernel-notes.md) measured the on-chip kernel at 0.79 of copy on token-major x (a part:
256 bytes of every 8 KiB row) and 0.86 on the same bytes laid out so that each slice is contiguous;
rows 2 KiB or 512 B apart gave 0.82. The programs take a sequence's kv heads in order, so the
parts in flight (6 per program) are adjacent 256-byte columns: at any moment every load and store
has the same address bits 8-12 but for ~6 values of 32. Two readings predict opposite things:
- address bits spread too little over HBM channels (camping): taking kv heads in a strided order
  (`order=Q`: 0, n/Q, 2n/Q, ..., 1, n/Q + 1, ...), so parts in flight lie far apart within a
  row, is faster;
- DRAM pages reopened (row-buffer locality): adjacent columns read close in time help, so any
  strided order is slower.
`order=Q` is one source edit of `_slice_part` (the table, the plan and the bits are unchanged).
Also: with 2 and 4 query heads per kv head (512 B and 1 KiB of a row per part) a slice has 256 or
512 parts of 32 KiB, and the plan's 132 programs do not divide it; `grid=128` makes every round
of parts whole slices, and `parts=64K` gives 128 parts per slice with 3 buffers (2 per part).
bf16, three interleaved repeats, CUDA-graph replays against a copy, bits against two passes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

D = 128
SLICE_PART = """        b = s // n_kv
        g = s - b * n_kv
"""


def edited_module(q: int):
    """A copy of quantize_onchip taking each sequence's kv heads in the order 0, n/q, 2n/q, ..., 1, ..."""
    src = Path(O.__file__).read_text()
    assert src.count(SLICE_PART) == 1  # the kernel's text changed: update SLICE_PART
    src = src.replace(SLICE_PART, SLICE_PART + f"        g = (g % {q}) * (n_kv // {q}) + g // {q}\n")
    mod_name = f"onchip_order{q}"
    path = Path(tempfile.mkdtemp()) / f"{mod_name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def launcher(mod, x: torch.Tensor, hk: int, grid: int | None = None, part_kib: int | None = None):
    """`mod`'s kernel on x (1 x s x h x d), planned as quantize_fp8(schedule="onchip") plans it, or
    with `grid` programs, or with parts of `part_kib` KiB (then 3 buffers under warp specialization)."""
    b, s, h, d = x.shape
    saved = mod.PART_BYTES, mod.WS_BUFFERS
    if part_kib:
        mod.PART_BYTES, mod.WS_BUFFERS = part_kib << 10, 3
    try:
        plan = mod.onchip_plan(x, b, s, h, d, hk, False, False)
    finally:
        mod.PART_BYTES, mod.WS_BUFFERS = saved
    assert not isinstance(plan, str), plan
    if grid:
        plan = dataclasses.replace(plan, grid=grid)
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    label = f"grid {plan.grid} parts {plan.parts} ws {plan.ws} buffers {plan.buffers}"
    return label, lambda: mod.quantize_onchip(x, y, cu, b, s, h, hk, False, plan)


def main(out: str) -> None:
    mods = {q: edited_module(q) for q in (2, 4, 8, 16)} | {1: O}
    xs = {t: torch.randn(1, t, 32, D, device="cuda", dtype=torch.bfloat16) for t in (4096, 8192, 16384)}
    cases = []  # (name, tokens, kv heads, launcher args)
    for q in (1, 2, 4, 8, 16):
        cases.append((f"order={q}", 16384, 32, dict(mod=mods[q])))
    for t in (8192, 4096):
        for q in (1, 4):
            cases.append((f"order={q}", t, 32, dict(mod=mods[q])))
    for hk in (16, 8):
        cases += [("plan", 16384, hk, dict(mod=O)), ("grid=128", 16384, hk, dict(mod=O, grid=128)),
                  ("order=4", 16384, hk, dict(mod=mods[4])), ("order=4 grid=128", 16384, hk, dict(mod=mods[4], grid=128))]
    cases += [("parts=64K", 16384, 16, dict(mod=O, part_kib=64)), ("parts=64K order=4", 16384, 16,
                                                                       dict(mod=mods[4], part_kib=64))]
    contiguous = xs[16384].view(32, 16384, 1, D)
    runs, refs = [], {}
    for name, t, hk, kw in cases:
        x = xs[t]
        label, fn = launcher(kw.pop("mod"), x, hk, **kw)
        runs.append((name, t, hk, label, x, fn))
        if (t, hk) not in refs:
            refs[t, hk] = quantize_fp8(x, "head", heads_kv=hk, schedule="two-pass")
    ref_c = quantize_fp8(contiguous, "head", schedule="two-pass")
    runs.append(("contiguous slices", 16384, 32, launcher(O, contiguous, 1)[0], contiguous,
                 launcher(O, contiguous, 1)[1]))
    runs.append(("per-token", 16384, 32, "quantize_fp8(x, 'token')", xs[16384], lambda: quantize_fp8(xs[16384], "token")))
    rows = []
    for rep in range(3):
        copy_ms = {t: bench.median_ms_graph(lambda x=x, dst=torch.empty_like(x): dst.copy_(x)) for t, x in xs.items()}
        for name, t, hk, label, x, fn in runs:
            y, d = fn()
            same = None
            if name != "per-token":
                y2, d2 = ref_c if name == "contiguous slices" else refs[t, hk]
                same = bool(torch.equal(d, d2) and torch.equal(y.view(torch.uint8), y2.view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            rows.append(dict(rep=rep, kernel=name, tokens=t, heads=32, heads_kv=hk, plan=label, same_bits=same,
                             ms_graph=ms, copy_ms=copy_ms[t],
                             frac_copy_graph=bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms[t])))
            print(f"{rep} {t:>5} kv{hk:<3} {name:<20} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} "
                  f"bits {same}  [{label}]", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, "tokens", 32, D], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
