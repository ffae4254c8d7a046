"""A probe for the next H200 session (not run yet): is it the way per-head y is written that holds
the on-chip kernel at 80 % of copy?

    PYTHONPATH=. python3 scripts/probe_quant_writes.py OUT.json

v16 (docs/kernel-notes.md) split the warp-specialized kernel's 60 us at 128 MiB: loads, table
waits and hand-overs 40, casts 5, writes of y 15.5, while per-token quantization moves the same
bytes in 49. Per head, a part's y is 128 bytes of every 4 KiB row. This times copies of
`fp8lab.kernels.quantize_onchip` whose y stores differ (one source edit each, as run13's probes):
- `y-cs`, `y-evict-first`, `y-evict-last`: the same stores with a cache hint (same bits);
- `y-part-contiguous`: each part's y written as one contiguous 16 KiB block at a distinct place
  (wrong layout by design, same bytes): what the stores would cost if they were contiguous.
Shape: 1 x 16384 tokens x 32 heads x 128, bf16 (128 MiB); three interleaved repeats; CUDA-graph
replays against a copy, as `gpu_bench.py --quant`.
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
    "y-evict-last": [(STORE, STORE[:-1] + ', eviction_policy="evict_last")')],
    "y-part-contiguous": [  # part (first row r0, kv head g) -> rows g * TOKENS + r0 of a head-major y, no gaps
        ("offs = gl.expand_dims(row * stride_yr, 1) + gl.expand_dims(cols, 0) + (g * G + j) * width",
         "offs = gl.expand_dims((row * G + j) * width, 1) + gl.expand_dims(cols, 0)"),
        ("y_part = Y + _field(fields, i, 3).to(gl.int64) * stride_yr",
         f"y_part = Y + (_field(fields, i, 1) * {TOKENS} + _field(fields, i, 3)).to(gl.int64) * G * (D // 2)"),
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


def launcher(mod, x: torch.Tensor):
    """`mod`'s kernel on x (1 x TOKENS x HEADS x D, one query head per kv head), planned as
    quantize_fp8(schedule="onchip") plans it."""
    plan = mod.onchip_plan(x, 1, TOKENS, HEADS, D, HEADS, False, False)
    assert not isinstance(plan, str) and plan.ws, plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    return lambda: mod.quantize_onchip(x, y, cu, 1, TOKENS, HEADS, HEADS, False, plan)


def main(out: str) -> None:
    x = torch.randn(1, TOKENS, HEADS, D, device="cuda", dtype=torch.bfloat16)
    y2, d2 = quantize_fp8(x, "head", schedule="two-pass")
    runs = {"kernel": launcher(O, x), **{name: launcher(edited_module(name), x) for name in EDITS}}
    dst = torch.empty_like(x)
    rows = []
    for rep in range(3):
        copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))
        for name, fn in runs.items():
            y, d = fn()
            same = bool(torch.equal(d, d2) and torch.equal(y.view(torch.uint8), y2.view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            rows.append(dict(rep=rep, kernel=name, same_bits=same, ms_graph=ms, copy_ms=copy_ms,
                             frac_copy_graph=bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)))
            print(f"{rep} {name:<20} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} bits {same}", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, TOKENS, HEADS, D], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
