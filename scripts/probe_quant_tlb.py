"""Why the on-chip per-head kernel loses more than a copy after an L2 flush: the address translations?

    PYTHONPATH=.:scripts python3 scripts/probe_quant_tlb.py OUT.json

v34 (`probe_quant_flush.py`) flushed the L2 before every call by reading 256 MiB: at 128 MiB the copy
lost about 5 us and the on-chip per-head kernel about 10 us. That flush also evicts the GPU's
address translations (TLB entries) for x, and the per-head kernel reads x in 256-byte pieces of
rows 8 KiB apart, so it may wait on more translation misses than a streaming kernel does. Four
timings per kernel, in 3 interleaved rounds, at 64 and 128 MiB (1 x tokens x 32 x 128 bf16):

- "graph": CUDA-graph replays back to back (v26's timing, no flush);
- "flushed": the 256 MiB flush before every call (v34's timing);
- "flushed, x touched": the same flush, then one element of every 64 KiB of x read, which brings
  x's translations back while putting 2048 lines (256 KiB) of x in the L2;
- "translations evicted": no L2 flush; one byte of every 2 MiB of a 32 GiB buffer read before
  every call, which evicts translations and touches 2 MiB of the L2.

Each "before" step's own time cancels (`probe_quant_flush.between_ms`). If translations explain
the difference, "flushed, x touched" comes close to "graph" for the per-head kernel, and
"translations evicted" comes close to "flushed".
"""

from __future__ import annotations

import sys

import torch

from probe_quant_flush import streaming_modes

THRASH_GIB = 32


def main(out: str) -> None:
    flush_buf = torch.rand(256 << 18, device="cuda")  # 256 MiB of float32
    thrash = torch.zeros(THRASH_GIB << 30, device="cuda", dtype=torch.uint8)
    streaming_modes(out, 35, lambda x: {
        "flushed": flush_buf.amax,
        "flushed, x touched": lambda: (flush_buf.amax(), x.view(-1)[:: 1 << 15].amax()),
        "translations evicted": lambda: thrash[:: 2 << 20].max()}, thrash_gib=THRASH_GIB)


if __name__ == "__main__":
    main(sys.argv[1])
