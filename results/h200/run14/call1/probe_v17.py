"""Is it the way per-head y is written, or x's layout, that holds the on-chip kernel at 80 % of copy?

    PYTHONPATH=. python3 scripts/probe_quant_writes.py OUT.json

v16 (docs/kernel-notes.md) split the warp-specialized kernel's 60 us at 128 MiB: loads, table
waits and hand-overs 40, casts 5, writes of y 15.5, while per-token quantization moves the same
bytes in 49. Per head, a part's y is 128 bytes of every 4 KiB row, written by the cast warps'
st.global. This times, at 1 x 16384 tokens x 32 heads x 128, bf16 (128 MiB):
- `stages=0` (v16's stores), `stages=1`, `stages=2`: y through shared memory and TMA stores (v17,
  `WS_STAGES`);
- `y-cs`, `y-evict-first`: v16's stores with a cache hint (one source edit each, as run13's
  probes; same bits);
- `y-part-contiguous`: v16's stores, each part's y one contiguous 16 KiB block at a distinct place
  (wrong layout by design, same bytes): what the stores would cost if they were contiguous;
- `contiguous-slices`: the same bytes viewed as 32 sequences x 16384 tokens x 1 head, so that every
  part of x and of y is one contiguous block (same parts, slices and plan; bits checked against two
  passes of that view): what the per-head layout itself costs;
- `per-token`: `quantize_fp8(x, "token")`, the same bytes in one pass with no slice-wide amax.
Three interleaved repeats; CUDA-graph replays against a copy, as `gpu_bench.py --quant`.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8

TOKENS, HEADS, D = 16384, 32, 128
STORE = "gl.store(Y + offs, q, mask=gl.expand_dims(row < left, 1))"
EDITS = {
    "y-cs": [(STORE, STORE[:-1] + ', cache_modifier=".cs")')],
    "y-evict-first": [(STORE, STORE[:-1] + ', eviction_policy="evict_first")')],
    "y-part-contiguous": [  # part (first row r0, kv head g) -> rows g * TOKENS + r0 of a head-major y, no gaps
        ("offs = gl.expand_dims(row * stride_yr, 1) + gl.expand_dims(cols, 0) + (g * G + j) * width",
         "offs = gl.expand_dims((row * G + j) * width, 1) + gl.expand_dims(cols, 0)"),
        ("\n        y_part = Y + row0.to(gl.int64) * stride_yr",
         f"\n        y_part = Y + (g * {TOKENS} + row0).to(gl.int64) * G * (D // 2)"),
    ],
}


def edited_module(name: str):
    """A copy of quantize_onchip with EDITS[name] applied (each edit must match exactly once)."""
    src = Path(O.__file__).read_text()
    for old, new in EDITS[name]:
        assert src.count(old) == 1, (name, old)  # the kernel's text changed: update EDITS
        src = src.replace(old, new)
    mod_name = f"onchip_{name.replace('-', '_')}"
    path = Path(tempfile.mkdtemp()) / f"{mod_name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def launcher(mod, x: torch.Tensor, stages: int):
    """`mod`'s kernel on x (b x s x h x d, one query head per kv head) with `stages` y stages,
    planned as quantize_fp8(schedule="onchip") plans it."""
    b, s, h, d = x.shape
    mod.WS_STAGES = stages
    plan = mod.onchip_plan(x, b, s, h, d, h, False, False)
    assert not isinstance(plan, str) and plan.ws and plan.stages == stages, plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    return lambda: mod.quantize_onchip(x, y, cu, b, s, h, h, False, plan)


def main(out: str) -> None:
    x = torch.randn(1, TOKENS, HEADS, D, device="cuda", dtype=torch.bfloat16)
    flat = x.view(HEADS, TOKENS, 1, D)  # the same bytes, each slice contiguous
    ref = {"x": quantize_fp8(x, "head", schedule="two-pass"), "flat": quantize_fp8(flat, "head", schedule="two-pass")}
    runs = {f"stages={n}": ("x", launcher(O, x, n)) for n in (0, 1, 2)}
    runs |= {name: ("x", launcher(edited_module(name), x, 0)) for name in EDITS}
    runs |= {f"contiguous-slices stages={n}": ("flat", launcher(O, flat, n)) for n in (0, 2)}
    runs["per-token"] = ("x", lambda: quantize_fp8(x, "token"))
    dst = torch.empty_like(x)
    rows = []
    for rep in range(3):
        copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))
        for name, (which, fn) in runs.items():
            y, d = fn()
            y2, d2 = ref[which]
            same = None if name == "per-token" else bool(torch.equal(d, d2) and torch.equal(y.view(torch.uint8),
                                                                                           y2.view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            rows.append(dict(rep=rep, kernel=name, same_bits=same, ms_graph=ms, copy_ms=copy_ms,
                             frac_copy_graph=bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)))
            print(f"{rep} {name:<28} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} bits {same}", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, TOKENS, HEADS, D], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
