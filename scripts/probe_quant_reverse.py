"""Does pass 2 of two-pass quantization gain from walking x backwards?

    PYTHONPATH=.:scripts python3 scripts/probe_quant_reverse.py OUT.json

Two passes read x twice: an amax kernel, then a cast kernel. Past the L2 (50 MiB on an H200) the
second read comes from HBM, which caps per-tensor quantization at 3/5 of copy (v9). But the blocks
pass 1 read last may still be in L2 when pass 2 starts, if pass 2 starts with them: the committed
cast kernel walks its blocks backwards (v23). This probe times it against a copy of the module
with that reversal edited out (`forward`), per tensor and per head (`schedule="two-pass"`), bf16,
1 x tokens x 32 x 128 at 32, 64, 128 and 256 MiB; three interleaved repeats, CUDA-graph replays
against a copy of the same tensor; bits and descales compared between the two.
"""

from __future__ import annotations

import sys

import torch

import fp8lab.kernels.quantize as Q
from fp8lab import bench, env
from probe_edit import edited_copy

HEADS, D = 32, 128
REVERSAL = """    if not STATIC:
        pid_t, b = tl.num_programs(0) - 1 - pid_t, tl.num_programs(1) - 1 - b
"""


def time_two_pass(mods: dict, reference: str, token_counts: tuple[int, ...], out: str) -> None:
    """Time `quantize_fp8(x, g, schedule="two-pass")` of each module in `mods` (name -> module), per
    tensor and per head, on bf16 1 x tokens x HEADS x D for each of `token_counts`: three interleaved
    repeats of CUDA-graph replays against a copy of x, bits and descales against `mods[reference]`.
    Writes the rows to `out` (and a csv beside it)."""
    rows = []
    for tokens in token_counts:
        x = torch.randn(1, tokens, HEADS, D, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(x)
        size = f"1x{tokens}x{HEADS}x{D} ({x.numel() * 2 >> 20} MiB)"
        runs = {f"{g} {name}": (lambda m=mod, g=g, x=x: m.quantize_fp8(x, g, schedule="two-pass"))
                for g in ("tensor", "head") for name, mod in mods.items()}
        for rep in range(3):
            copy_ms = bench.median_ms_graph(lambda x=x, dst=dst: dst.copy_(x))
            for name, fn in runs.items():
                y, d = fn()
                y2, d2 = runs[f"{name.split()[0]} {reference}"]()
                same = bool(torch.equal(d, d2) and torch.equal(y.view(torch.uint8), y2.view(torch.uint8)))
                ms = bench.median_ms_graph(fn)
                rows.append(dict(rep=rep, size=size, kernel=name, same_bits=same, ms_graph=ms, copy_ms=copy_ms,
                                 copy_tbps_graph=bench.tbps(4 * x.numel(), copy_ms),
                                 frac_copy_graph=bench.tbps(3 * x.numel(), ms) / bench.tbps(4 * x.numel(), copy_ms)))
                print(f"{rep} {size:<26} {name:<16} {ms * 1e3:7.1f} us {rows[-1]['frac_copy_graph']:.3f} bits {same}",
                      flush=True)
    bench.write_results(out, rows, env.context(heads=HEADS, head_dim=D, dtype="bfloat16"))


def main(out: str) -> None:
    forward = edited_copy(Q, [(REVERSAL, "")], "quantize_forward")
    time_two_pass({"forward": forward, "backward": Q}, "forward", (4096, 8192, 16384, 32768), out)


if __name__ == "__main__":
    main(sys.argv[1])
