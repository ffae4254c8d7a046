"""Per head, one long token-major sequence: do all programs load the same 256-byte column at once? (v37)

    PYTHONPATH=.:scripts python3 scripts/probe_quant_skew.py OUT.json

Of the layouts timed so far only one misses the line: token-major x with one or two long sequences
(v18: 0.78-0.80 of copy at 1 x 16384; four sequences 0.85, the same bytes head-major 0.86, and
head-major slices wait for all 128 programs too). Dealt round-robin, program p holds part p of
every slice, and the waits keep the programs in step: when slice s completes, every program frees
its buffer and loads its part of slice s + 6 at the same moment. With one sequence that is one kv
head, so every load in flight then reads the same 256 bytes of each 8 KiB row (addresses equal
modulo 8 KiB), and every store writes the same 128 bytes of each 4 KiB row of y. Four sequences
form four groups that drift apart, head-major slices are contiguous: neither keeps all traffic on
one column. If the memory system spreads such addresses over few L2 slices or channels, that
would be the loss; v18's interleaved head orders changed which columns wait in the buffers, not
how many are loaded at once.

`skew=D` (one source edit of `_part`, and of the table index `_publish` writes, as
`probe_quant_groups.py`): within each block of D slices, part p of deal slot k is slice
block + (k + p) mod D, so at each moment the programs load D columns, at the price of up to D - 1
slices of the buffers' lead (5 buffers cost about 2 points, v29). Timed: the plan and skew 2 and 4
at 1 x 16384 and 2 x 8192 (x 32 x 128 bf16), the plan at 4 x 4096, in 3 interleaved rounds of
CUDA-graph replays against a copy; bits and descales against two passes, before and after the
replays (`probe_quant_buffers.time_rounds`).
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize_onchip as O
from fp8lab.kernels import quantize_fp8
from probe_edit import edited_copy
from probe_quant_buffers import time_rounds
from probe_quant_groups import PART, PUBLISH, STORE, launcher


def edited_module(skew: int):
    """A copy of quantize_onchip whose deal is skewed within blocks of `skew` slices (module doc)."""
    part = f"""        parts, _, slices_, _, _ = geo
        s = item // parts
        p = item - s * parts
        if s < slices_ - slices_ % {skew}:
            s = (s // {skew}) * {skew} + (s % {skew} + p % {skew}) % {skew}
"""
    publish = PUBLISH.replace("_, _, _, _, _, left", "_, _, s_, p_, _, left")
    return edited_copy(O, [(PART, part), (PUBLISH, publish), (STORE, "gl.store(TABLE + s_ * geo[0] + p_, (tag << 32)")],
                       f"onchip_skew{skew}")


def main(out: str) -> None:
    x = torch.randn(1, 16384, 32, 128, device="cuda", dtype=torch.bfloat16)
    mods = {"plan": O, "skew 2": edited_module(2), "skew 4": edited_module(4)}
    cases = [(b, name) for b in (1, 2) for name in mods] + [(4, "plan")]
    runs = []
    for b, name in cases:
        xx = x.view(b, 16384 // b, 32, 128)
        label, fn = launcher(mods[name], xx, 32)
        fn()
        runs.append((xx, f"{b}x{16384 // b}", name, label, fn, quantize_fp8(xx, "head", schedule="two-pass")))
    time_rounds(out, runs)


if __name__ == "__main__":
    main(sys.argv[1])
