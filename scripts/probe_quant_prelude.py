"""What the on-chip per-head kernel loses when any other kernel runs before it (v35, part 2).

    PYTHONPATH=.:scripts python3 scripts/probe_quant_prelude.py OUT.json

Part 1 (`probe_quant_tlb.py`) found the on-chip current per-head kernel 3-6 us slower than a copy
whichever step ran before it: a 256 MiB L2 flush, or one byte of every 2 MiB of 32 GiB, which
leaves the L2 as it was. So it may not be about data at all. Four timings per kernel, in 3
interleaved rounds, at 64 and 128 MiB (1 x tokens x 32 x 128 bf16), each step's own time
cancelling (`probe_quant_flush.between_ms`):

- "graph": CUDA-graph replays back to back (the kernel after itself);
- "after a tiny kernel": one add to a 1-element tensor before every call (almost no data moved, a
  different kernel's code);
- "after itself on other data": the same kernel on a second tensor of the same size before every
  call (its code, but other data in the L2);
- "flushed": the 256 MiB flush (v34).

If the loss comes from following a different kernel (its code, its launch), "after a tiny kernel"
shows it and "after itself on other data" does not.
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize as Q
from fp8lab import bench, env
from probe_quant_flush import REPLAYS, REPS, time_modes


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(36)
    flush_buf = torch.rand(256 << 18, device="cuda", generator=gen)  # 256 MiB of float32
    tiny = torch.zeros(1, device="cuda")
    q_scale = torch.tensor([0.05], device="cuda")
    rows = []
    for rep in range(3):
        for tokens in (8192, 16384):
            x, x2 = (torch.randn(1, tokens, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
                     for _ in range(2))
            n = x.numel()
            dst, dst2 = torch.empty_like(x), torch.empty_like(x)
            d_head = torch.rand(1, 32, device="cuda", generator=gen) * 0.01 + 0.005
            cases = {"copy bf16": (lambda a, b: b.copy_(a), 4 * n),
                     "static (vLLM Q)": (lambda a, b: Q.quantize_fp8_static(a, q_scale), 3 * n),
                     "per-token": (lambda a, b: Q.quantize_fp8(a, "token"), 3 * n),
                     "per-head current (auto)": (lambda a, b: Q.quantize_fp8(a, "head"), 3 * n),
                     "per-head delayed": (lambda a, b: Q.quantize_fp8_delayed(a, d_head), 3 * n)}
            for name, (call, nbytes) in cases.items():
                befores = {"after a tiny kernel": lambda: tiny.add_(1),
                           "after itself on other data": lambda call=call: call(x2, dst2),
                           "flushed": flush_buf.amax}
                rows += time_modes(lambda call=call: call(x, dst), befores, rep=rep, tokens=tokens, n=n,
                                   kernel=name, nbytes=nbytes)
    bench.write_results(out, rows, env.context(dtype="bfloat16"), reps=REPS, replays=REPLAYS, flush_mib=256)


if __name__ == "__main__":
    main(sys.argv[1])
