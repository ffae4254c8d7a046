"""What a device copy reaches by size: is the facts file's 4.3 TB/s a 128 MiB figure?

    PYTHONPATH=. python3 scripts/probe_copy_sizes.py OUT.json

A bf16 torch copy (reads plus writes counted) and static e4m3 quantization (`quantize_fp8_static`,
the simplest pass: read 2 bytes, write 1) at 32 MiB to 4 GiB of x, CUDA-graph replays and plain
`do_bench` medians, three interleaved repeats.
"""

from __future__ import annotations

import sys

import torch

from fp8lab import bench, env
from fp8lab.kernels import quantize_fp8_static


def main(out: str) -> None:
    rows = []
    for mib in (32, 128, 512, 1024, 4096):
        x = torch.randn(mib << 19, device="cuda", dtype=torch.bfloat16).view(-1, 32, 128)
        dst = torch.empty_like(x)
        runs = {"copy bf16": (lambda x=x, dst=dst: dst.copy_(x), 4 * x.numel()),
                "static e4m3": (lambda x=x: quantize_fp8_static(x[None], 0.02), 3 * x.numel())}
        for rep in range(3):
            for name, (fn, nbytes) in runs.items():
                for how, timer in (("graph", bench.median_ms_graph), ("do_bench", bench.median_ms)):
                    ms = timer(fn)
                    rows.append(dict(rep=rep, mib=mib, kernel=name, timer=how, ms=ms, tbps=bench.tbps(nbytes, ms)))
                    print(f"{rep} {mib:5d} MiB {name:<12} {how:<8} {ms * 1e3:9.1f} us {rows[-1]['tbps']:.3f} TB/s",
                          flush=True)
    bench.write_results(out, rows, env.context(dtype="bfloat16"))


if __name__ == "__main__":
    main(sys.argv[1])
