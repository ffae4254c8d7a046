"""Is it x's layout that holds the on-chip kernel at 80 % of copy per head?

    PYTHONPATH=. python3 scripts/probe_quant_layout.py OUT.json

v16 (docs/kernel-notes.md) split the warp-specialized kernel's 60 us at 128 MiB: loads, table
waits and hand-overs 40, casts 5, writes of y 15.5, while per-token quantization moves the same
bytes in 49. Per head, a part is 128 tokens x 256 bytes of every 8 KiB row of x (and 128 bytes of
every 4 KiB row of y). run14/call1 (its probe kept beside it) found neither TMA stores of y nor
cache hints faster, y written contiguously 2-4 points faster, and the same bytes viewed as 32
sequences x 1 head (each slice contiguous) 7 points faster: 0.86 of copy. This probe (run14/call2)
times the committed kernel at 1 x 16384 tokens x 32 heads x 128, bf16 (128 MiB):
- on the same bytes viewed with rows of 8 KiB (x), 2 KiB, 512 B and 256 B (1 x 32, 4 x 8, 16 x 2,
  32 x 1 sequences x heads: the same parts per slice and plan, only the stride between a part's
  rows differs), each checked against two passes of its view;
- with the loader warp issuing its TMA loads two or three parts at a time (`load-group=n`: one
  source edit, as run13's probes; a program's consecutive parts are adjacent heads at the same
  tokens, so their loads then reach DRAM together);
- `per-token`: `quantize_fp8(x, "token")`, the same bytes in one pass with no slice-wide amax.
Three interleaved repeats; CUDA-graph replays against a copy, as `gpu_bench.py --quant`.
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8
from probe_edit import edited_copy

TOKENS, HEADS, D = 16384, 32, 128
LOADER = """        for k in range(mine):
            buf = k % BUFFERS
            mbarrier.wait(empty.index(buf), ((k // BUFFERS) & 1) ^ 1)  # a fresh mbarrier counts as phase 1 done
            _issue(x_desc, bufs, full.index(buf), buf, pid + k * grid, geo, BOX_ROWS, ROW_BOXES, G, D, VARLEN)
"""


def load_group(n: int) -> list[tuple[str, str]]:
    """The loader waits for n buffers, then issues their n parts' loads back to back."""
    return [(LOADER, f"""        for k0 in range(0, mine, {n}):
            for j in gl.static_range({n}):
                if k0 + j < mine:
                    mbarrier.wait(empty.index((k0 + j) % BUFFERS), (((k0 + j) // BUFFERS) & 1) ^ 1)
            for j in gl.static_range({n}):
                if k0 + j < mine:
                    _issue(x_desc, bufs, full.index((k0 + j) % BUFFERS), (k0 + j) % BUFFERS, pid + (k0 + j) * grid,
                           geo, BOX_ROWS, ROW_BOXES, G, D, VARLEN)
""")]


EDITS = {f"load-group={n}": load_group(n) for n in (2, 3)}


def edited_module(name: str):
    """A copy of quantize_onchip with EDITS[name] applied."""
    return edited_copy(O, EDITS[name], f"onchip_{name.replace('-', '_')}")


def launcher(mod, x: torch.Tensor):
    """`mod`'s kernel on x (b x s x h x d, one query head per kv head), planned as
    quantize_fp8(schedule="onchip") plans it."""
    b, s, h, d = x.shape
    plan = mod.onchip_plan(x, b, s, h, d, h, False, False)
    assert not isinstance(plan, str) and plan.ws and plan.parts == 128, plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    return lambda: mod.quantize_onchip(x, y, cu, b, s, h, h, False, plan)


def main(out: str) -> None:
    x = torch.randn(1, TOKENS, HEADS, D, device="cuda", dtype=torch.bfloat16)
    views = {f"rows {HEADS // b * D * 2} B": x.view(b, TOKENS, HEADS // b, D) for b in (1, 4, 16, 32)}
    ref = {name: quantize_fp8(v, "head", schedule="two-pass") for name, v in views.items()}
    runs = {name: (name, launcher(O, v)) for name, v in views.items()}
    runs |= {name: ("rows 8192 B", launcher(edited_module(name), x)) for name in EDITS}
    runs["per-token"] = ("rows 8192 B", lambda: quantize_fp8(x, "token"))
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
