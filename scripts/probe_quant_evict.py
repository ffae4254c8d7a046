"""Pass 2 backwards, and L2 eviction hints on top: do more of pass 1's x lines survive for pass 2?

    PYTHONPATH=.:scripts python3 scripts/probe_quant_evict.py OUT.json

Variants of `_scale_cast_kernel` (edited copies of fp8lab.kernels.quantize, committed = backward):
- `evict-y`: y stored with eviction_policy="evict_first", so y's lines leave L2 before x's;
- `evict-xy`: also pass 2's loads of x evict_first (pass 2 reads each value once).
Two-pass per tensor and per head, bf16 1 x tokens x 32 x 128 at 64, 128, 256 MiB, timed by
`probe_quant_reverse.time_two_pass`: three interleaved repeats, CUDA-graph replays against a copy,
bits against the committed kernel.
"""

from __future__ import annotations

import sys

import fp8lab.kernels.quantize as Q
from probe_edit import edited_copy
from probe_quant_reverse import time_two_pass

CAST_STORE = """        y = _divide(x, d[None, :, None], r[None, :, None], tl.min(d, 0) < TINY_DESCALE, ROUND_IN_FP32)
    tl.store(Y + y_offs, _to_e4m3(y, ROUND_IN_FP32), mask=mask)
"""
EVICT_STORE = """        y = _divide(x, d[None, :, None], r[None, :, None], tl.min(d, 0) < TINY_DESCALE, ROUND_IN_FP32)
    tl.store(Y + y_offs, _to_e4m3(y, ROUND_IN_FP32), mask=mask, eviction_policy="evict_first")
"""
CAST_LOAD = """    y_offs, _ = _tile(pid_t, b, CU, seqlen, stride_yb, stride_ys, stride_yh, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
"""
EVICT_LOAD = """    y_offs, _ = _tile(pid_t, b, CU, seqlen, stride_yb, stride_ys, stride_yh, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    x = tl.load(X + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
"""


def main(out: str) -> None:
    mods = {"backward": Q,
            "evict-y": edited_copy(Q, [(CAST_STORE, EVICT_STORE)], "quantize_evict_y"),
            "evict-xy": edited_copy(Q, [(CAST_STORE, EVICT_STORE), (CAST_LOAD, EVICT_LOAD)], "quantize_evict_xy")}
    time_two_pass(mods, "backward", (8192, 16384, 32768), out)


if __name__ == "__main__":
    main(sys.argv[1])
