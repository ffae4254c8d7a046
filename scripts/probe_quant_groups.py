"""Per head at b.s = 16k tokens: does it matter how many slices the programs work on at once?

    PYTHONPATH=. python3 scripts/probe_quant_groups.py OUT.json

run15/call2 (docs/kernel-notes.md, v18) timed the on-chip kernel at 4 x 4096 x 32 x 128 (128 MiB,
token-major) at 0.84-0.85 of copy, where 1 x 16384 x 32 x 128, the same bytes, runs at 0.78-0.80.
With 4096 tokens a slice is 32 parts, so each round of the 128 programs covers 4 slices: 4
adjacent kv heads of the same tokens, read at once by 4 groups of 32 programs, each group
waiting only for itself. At 16384 tokens a round is one slice of 128 parts, all programs on it.
This probe times
- the committed plan at 1 x 16384, 2 x 8192, 4 x 4096, 8 x 2048 and 16 x 1024 (x 32 x 128), and
  with 8 kv heads (4 query heads each) at 1 x 16384 and 4 x 4096;
- `groups=n` at 1 x 16384: one source edit of `_part` (and of the table index `_publish` writes)
  so that the programs form n groups of 128 / n, group j taking kv heads j, n + j, 2n + j, ...
  with n parts of each slice per program, n slices read at once at the same tokens (as 4 x 4096
  does, with parts of 128 tokens);
- the same bytes viewed as 32 sequences x 1 head (contiguous slices), and per-token quantization.
bf16, three interleaved repeats, CUDA-graph replays against a copy, bits against two passes.
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8
from probe_edit import edited_copy

PART = """        parts, _, _, _, _ = geo
        s = item // parts
        p = item - s * parts
"""
PUBLISH = """        _, _, _, _, _, left = _part(item, geo, BOX_ROWS * ROW_BOXES, VARLEN)
        mbarrier.wait(bars.index(buf), (k // BUFFERS) & 1)
"""
STORE = "gl.store(TABLE + item, (tag << 32)"


def edited_module(n: int, grid: int = 128):
    """A copy of quantize_onchip whose `grid` programs form n groups (module doc); planned for slices
    of `grid` parts, n per program."""
    part = f"""        parts, _, _, _, _ = geo
        k = item // {grid}
        i = item - k * {grid}
        j = i // {grid // n}
        i = i - j * {grid // n}
        s = (k // {n}) * {n} + j
        p = (k % {n}) * {grid // n} + i
"""
    publish = PUBLISH.replace("_, _, _, _, _, left", "_, _, s_, p_, _, left")
    return edited_copy(O, [(PART, part), (PUBLISH, publish), (STORE, "gl.store(TABLE + s_ * geo[0] + p_, (tag << 32)")],
                       f"onchip_groups{n}")


def launcher(mod, x: torch.Tensor, hk: int, parts: int | None = None):
    b, s, h, d = x.shape
    plan = mod.onchip_plan(x, b, s, h, d, hk, False, False)
    assert not isinstance(plan, str) and (parts is None or (plan.parts, plan.grid) == (parts, parts)), plan
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    cu = torch.zeros(1, dtype=torch.int32, device=x.device)
    return f"grid {plan.grid} parts {plan.parts} ws {plan.ws}", lambda: mod.quantize_onchip(x, y, cu, b, s, h, hk,
                                                                                             False, plan)


def main(out: str) -> None:
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    cases = [(f"plan {b}x{16384 // b}", x.view(b, 16384 // b, 32, 128), 32, O, None) for b in (1, 2, 4, 8, 16)]
    cases += [(f"plan {b}x{16384 // b} kv8", x.view(b, 16384 // b, 32, 128), 8, O, None) for b in (1, 4)]
    cases += [(f"groups={n}", x, 32, edited_module(n), 128) for n in (2, 4)]
    cases += [("contiguous slices", x.view(32, 16384, 1, 128), 1, O, None)]
    runs = []
    for name, xx, hk, mod, parts in cases:
        label, fn = launcher(mod, xx, hk, parts)
        runs.append((name, xx, hk, label, fn, quantize_fp8(xx, "head", heads_kv=hk, schedule="two-pass")))
    runs.append(("per-token", x, 32, "quantize_fp8(x, 'token')", lambda: quantize_fp8(x, "token"), None))
    dst = torch.empty_like(x)
    rows = []
    for rep in range(3):
        copy_ms = bench.median_ms_graph(lambda: dst.copy_(x))
        for name, xx, hk, label, fn, ref in runs:
            y, d = fn()
            same = None if ref is None else bool(torch.equal(d, ref[1]) and torch.equal(y.view(torch.uint8),
                                                                                       ref[0].view(torch.uint8)))
            ms = bench.median_ms_graph(fn)
            frac = bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)
            rows.append(dict(rep=rep, kernel=name, shape=list(xx.shape), heads_kv=hk, plan=label, same_bits=same,
                             ms_graph=ms, copy_ms=copy_ms, frac_copy_graph=frac))
            print(f"{rep} {name:<20} {ms * 1e3:7.1f} us {frac:.3f} bits {same}  [{label}]", flush=True)
    bench.write_results(out, rows, env.context(shape=[1, 16384, 32, 128], dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
