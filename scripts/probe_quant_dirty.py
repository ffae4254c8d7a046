"""Does the flush spare a copy the write-back that the on-chip kernel hides anyway? (v36)

    PYTHONPATH=.:scripts python3 scripts/probe_quant_dirty.py OUT.json [--part2]

v35 left one reading untested. After the 256 MiB flush (a read: `amax`) the on-chip current
per-head kernel loses 10.5-10.8 us at 128 MiB and a copy 4.4-4.5. Back to back, each call starts
with the previous call's output dirty in the L2 and writes it back while it runs. A copy, bound by
the DRAM, pays for that write-back; the on-chip kernel, at about 0.79 of the copy's rate, may hide
it. The read-only flush leaves the L2 clean, so it would spare the copy a cost that the on-chip
kernel never paid, and the flushed gap would be that write-back, not the kernel.

If so, a flush that leaves the L2 dirty brings the copy's loss up to the on-chip kernel's, and
costs the on-chip kernel little more. Timings per kernel, 3 interleaved rounds, 64 and 128 MiB
(1 x tokens x 32 x 128 bf16), each step's own time cancelling (`probe_quant_flush.between_ms`):

- "graph": CUDA-graph replays back to back;
- "flushed": v34's 256 MiB `amax` (read) before every call;
- "flushed, 32 MiB written": the same read, then 32 MiB of another buffer zeroed (that much dirty);
- "flushed by writing": 256 MiB zeroed instead of read (the L2 left full of dirty lines).
"""

from __future__ import annotations

import sys

import torch

from probe_quant_flush import streaming_modes


def main(out: str) -> None:
    flush_buf = torch.rand(256 << 18, device="cuda")  # 256 MiB of float32
    dirty = torch.empty(32 << 18, device="cuda")  # 32 MiB
    befores = {"flushed": flush_buf.amax,
               "flushed, 32 MiB written": lambda: (flush_buf.amax(), dirty.zero_()),
               "flushed by writing": flush_buf.zero_}
    streaming_modes(out, 37, lambda x: befores)


def main_part2(out: str) -> None:
    """Part 2: which of these steps empties the L2 of x (a read of x after it shows), and what each
    costs the kernels: 256 and 512 MiB read, 256 MiB written, 256 MiB copied."""
    big = torch.rand(512 << 18, device="cuda")  # 512 MiB of float32
    dst = torch.empty(256 << 18, device="cuda")
    half = big[: 256 << 18]
    befores = {"flushed": half.amax,
               "512 MiB read": big.amax,
               "256 MiB written": dst.zero_,
               "256 MiB copied": lambda: dst.copy_(half)}
    streaming_modes(out, 38, lambda x: befores,
                    kernels=("read x (amax)", "copy bf16", "static (vLLM Q)", "per-head current (auto)"))


if __name__ == "__main__":
    (main_part2 if sys.argv[2:] == ["--part2"] else main)(sys.argv[1])
