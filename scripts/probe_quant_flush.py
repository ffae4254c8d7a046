"""The quantization kernels at 4-128 MiB with the L2 flushed before every call.

    PYTHONPATH=. python3 scripts/probe_quant_flush.py OUT.json

v26's size sweep (`probe_quant_delayed.py --sizes`) timed CUDA-graph replays back to back: at 32 MiB
and below x and y fit in the H200's 50 MiB L2, so both the kernels and the copy they are compared
with ran partly from L2. Here each size is timed both ways, in 3 interleaved rounds:

- "graph": `bench.median_ms_graph`, as v26 (no flush);
- "flushed": a CUDA graph of `REPS` pairs (flush, call) against a graph of `REPS` flushes alone,
  replayed in alternation; the call's time is the difference of the medians over `REPS`. The
  flush reads 256 MiB (an amax, so it leaves no dirty lines of its own); the write-back of the
  call's output, which the next flush evicts, is charged to the call, as it should be.

Inputs: 1 x tokens x 32 x 128 bf16 N(0, 1), per-head descales random (never ones). Kernels: a copy
of the same bytes (reads plus writes counted), the static cast (vLLM's Q), per-token, current
per-head and per-tensor (`quantize_fp8`'s default schedule) and delayed per-head scaling.
"""

from __future__ import annotations

import statistics
import sys
from typing import Callable

import torch

import fp8lab.kernels.quantize as Q
from fp8lab import bench, env

REPS = 20  # calls per graph: the flush's own time (about 70 us) cancels in the difference
REPLAYS = 40  # replays of each graph per timing, alternating


def flushed_ms(fn: Callable[[], object], flush_buf: torch.Tensor) -> tuple[float, float]:
    """(milliseconds of one `fn()` after an L2 flush, milliseconds of one flush alone)."""
    return between_ms(fn, flush_buf.amax)


def between_ms(fn: Callable[[], object], before: Callable[[], object]) -> tuple[float, float]:
    """(milliseconds of one `fn()` run after `before()`, milliseconds of one `before()` alone)."""
    pair, _ = bench.capture_graph(lambda: [(before(), fn()) for _ in range(REPS)])
    alone, _ = bench.capture_graph(lambda: [before() for _ in range(REPS)])
    times: dict[str, list[float]] = {"pair": [], "alone": []}
    for _ in range(REPLAYS):
        for name, graph in (("pair", pair), ("alone", alone)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    med = {k: statistics.median(v) for k, v in times.items()}
    return (med["pair"] - med["alone"]) / REPS, med["alone"] / REPS


def time_modes(fn: Callable[[], object], befores: dict[str, Callable[[], object]], *, rep: int, tokens: int,
               n: int, kernel: str, nbytes: int) -> list[dict]:
    """Time `fn` back to back ("graph") and after each of `befores` (`between_ms`); one row per mode,
    printed on one line (the v35 probes)."""
    times = {"graph": bench.median_ms_graph(fn)}
    for mode, before in befores.items():
        times[mode], _ = between_ms(fn, before)
    print(f"{rep} {2 * n >> 20:4d} MiB {kernel:<24} " + "  ".join(f"{m} {t * 1e3:6.1f} us" for m, t in times.items()),
          flush=True)
    return [dict(rep=rep, tokens=tokens, mib=2 * n >> 20, kernel=kernel, mode=mode, nbytes=nbytes, ms=ms,
                 tbps=bench.tbps(nbytes, ms)) for mode, ms in times.items()]


STREAMING = ("copy bf16", "static (vLLM Q)", "per-token", "per-head current (auto)", "per-head delayed")


def streaming_modes(out: str, seed: int, befores: Callable[[torch.Tensor], dict[str, Callable[[], object]]],
                    kernels: tuple[str, ...] = STREAMING, **meta: object) -> None:
    """The v35/v36 probes: `kernels` (the copy, the streaming quantization kernels, or "read x (amax)")
    at 64 and 128 MiB (1 x tokens x 32 x 128 bf16), timed by `time_modes` after each of `befores(x)`,
    3 rounds, to `out`."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q_scale = torch.tensor([0.05], device="cuda")
    rows = []
    for rep in range(3):
        for tokens in (8192, 16384):
            x = torch.randn(1, tokens, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
            n = x.numel()
            dst = torch.empty_like(x)
            d_head = torch.rand(1, 32, device="cuda", generator=gen) * 0.01 + 0.005
            cases = {"copy bf16": (lambda: dst.copy_(x), 4 * n),
                     "static (vLLM Q)": (lambda: Q.quantize_fp8_static(x, q_scale), 3 * n),
                     "per-token": (lambda: Q.quantize_fp8(x, "token"), 3 * n),
                     "per-head current (auto)": (lambda: Q.quantize_fp8(x, "head"), 3 * n),
                     "per-head delayed": (lambda: Q.quantize_fp8_delayed(x, d_head), 3 * n),
                     "read x (amax)": (x.amax, 2 * n)}
            for name in kernels:
                fn, nbytes = cases[name]
                rows += time_modes(fn, befores(x), rep=rep, tokens=tokens, n=n, kernel=name, nbytes=nbytes)
    bench.write_results(out, rows, env.context(dtype="bfloat16"), reps=REPS, replays=REPLAYS, flush_mib=256, **meta)


def main(out: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(34)
    flush_buf = torch.rand(256 << 18, device="cuda", generator=gen)  # 256 MiB of float32
    q_scale = torch.tensor([0.05], device="cuda")
    rows = []
    for rep in range(3):
        for tokens in (512, 2048, 4096, 8192, 16384):
            x = torch.randn(1, tokens, 32, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
            n = x.numel()
            dst = torch.empty_like(x)
            d_head = torch.rand(1, 32, device="cuda", generator=gen) * 0.01 + 0.005
            if rep == 0:  # the flushed graphs compute what an eager call does
                y, d = Q.quantize_fp8(x, "head")
                graph, yg = bench.capture_graph(lambda: [Q.quantize_fp8(x, "head") for _ in range(2)])
                graph.replay()
                torch.cuda.synchronize()
                rows.append(dict(check="graph bits", tokens=tokens,
                                 same=all(torch.equal(a.view(torch.uint8), y.view(torch.uint8))
                                          and torch.equal(b, d) for a, b in yg)))
            cases = {"copy bf16": (lambda: dst.copy_(x), 4 * n),
                     "static (vLLM Q)": (lambda: Q.quantize_fp8_static(x, q_scale), 3 * n),
                     "per-token": (lambda: Q.quantize_fp8(x, "token"), 3 * n),
                     "per-head current (auto)": (lambda: Q.quantize_fp8(x, "head"), 3 * n),
                     "per-tensor current (auto)": (lambda: Q.quantize_fp8(x, "tensor"), 3 * n),
                     "per-head delayed": (lambda: Q.quantize_fp8_delayed(x, d_head), 3 * n)}
            for name, (fn, nbytes) in cases.items():
                ms_graph = bench.median_ms_graph(fn)
                ms_flushed, ms_flush = flushed_ms(fn, flush_buf)
                rows.append(dict(rep=rep, tokens=tokens, mib=2 * n >> 20, kernel=name, nbytes=nbytes,
                                 ms_graph=ms_graph, ms_flushed=ms_flushed, ms_flush=ms_flush,
                                 tbps_graph=bench.tbps(nbytes, ms_graph), tbps_flushed=bench.tbps(nbytes, ms_flushed)))
                print(f"{rep} {2 * n >> 20:4d} MiB {name:<26} graph {ms_graph * 1e3:8.1f} us "
                      f"flushed {ms_flushed * 1e3:8.1f} us (flush {ms_flush * 1e3:.1f})", flush=True)
            copy = rows[-len(cases)]
            for row in rows[-len(cases):]:
                row["frac_copy_graph"] = row["tbps_graph"] / copy["tbps_graph"]
                row["frac_copy_flushed"] = row["tbps_flushed"] / copy["tbps_flushed"]
    bench.write_results(out, rows, env.context(dtype="bfloat16"), reps=REPS, replays=REPLAYS, flush_mib=256)


if __name__ == "__main__":
    main(sys.argv[1])
