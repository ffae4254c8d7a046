"""Benchmarks with context: FLOP and byte counts, median timings, recorded results.

Every number leaves this module with the GPU, driver, versions, date and
shapes it was measured with (`fp8lab.env.context()`), so a TFLOP/s figure never
travels alone. Timings are medians of repeated runs (`triton.testing.do_bench`,
which times with CUDA events and flushes the L2 between runs).
"""

from __future__ import annotations

import csv
import json
import math
import numbers
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

if TYPE_CHECKING:
    import pandas as pd
    import torch

__all__ = [
    "AttentionCase",
    "FACTS_H200",
    "H200_CEILINGS",
    "CLOCK_LOG_QUERY",
    "POWER_CAP_BIT",
    "attention_bytes",
    "attention_flops",
    "attention_intensity",
    "exp2_balance_head_dim",
    "exp2_ceiling_tflops",
    "first_cast_waits",
    "on_chip_bytes",
    "on_chip_marks",
    "one_pass_bound",
    "one_pass_bound_sweep",
    "one_pass_bound_table",
    "one_pass_limit",
    "held_for",
    "parse_case",
    "quant_floor_us",
    "roofline_ceilings",
    "values_per_descale",
    "records_frame",
    "check_frame",
    "check_one_version",
    "roofline_tflops",
    "bench_grid",
    "capture_graph",
    "case_calls",
    "clocks_while_timed",
    "load_results",
    "long_context_headline",
    "mbarrier_waits",
    "quant_targets",
    "interleaved_times",
    "median_ms",
    "median_ms_graph",
    "median_over_rounds",
    "ratio_table",
    "read_clock_log",
    "read_ncu_raw",
    "read_ncu_sass",
    "tflops",
    "tbps",
    "write_results",
]


@dataclass(frozen=True)
class AttentionCase:
    """One benchmark shape in FA3's batched layout: (batch, seqlen, heads, head_dim)."""

    batch: int
    seqlen: int
    heads_q: int
    heads_kv: int
    head_dim: int
    causal: bool

    def __post_init__(self) -> None:
        from fp8lab.layout import check_count

        for name in ("batch", "seqlen", "heads_q", "heads_kv", "head_dim"):
            check_count(f"AttentionCase.{name}", getattr(self, name), 1)
        if self.heads_q % self.heads_kv:
            raise ValueError(f"AttentionCase: heads_q must be a multiple of heads_kv (query heads share a kv head), "
                             f"got heads_q={self.heads_q}, heads_kv={self.heads_kv}")

    @property
    def tokens(self) -> int:
        return self.batch * self.seqlen

    def flops(self) -> float:
        return attention_flops(self.batch, self.seqlen, self.seqlen, self.heads_q, self.head_dim, self.causal)

    def label(self) -> str:
        hk = f"/{self.heads_kv}" if self.heads_kv != self.heads_q else ""
        return f"{self.batch}x{self.seqlen}x{self.heads_q}{hk}x{self.head_dim}{' causal' if self.causal else ''}"


def attention_flops(batch: int, seqlen_q: int, seqlen_k: int, heads_q: int, head_dim: int, causal: bool) -> float:
    """Forward FLOPs by FlashAttention's convention: 2 matmuls of 2*sq*sk*d each per head, half when causal."""
    _check_counts(batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_q, head_dim=head_dim)
    flops = 4.0 * batch * seqlen_q * seqlen_k * heads_q * head_dim
    return flops / 2 if causal else flops


def attention_bytes(batch: int, seqlen: int, heads_q: int, heads_kv: int, head_dim: int,
                    input_bytes: int = 1) -> float:
    """HBM bytes of a forward that reads Q, K, V once (`input_bytes` each: 1 for FP8, 2 for bf16)
    and writes bf16 O (2 bytes)."""
    _check_counts(batch=batch, seqlen=seqlen, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim,
                  input_bytes=input_bytes)
    return batch * seqlen * head_dim * (heads_q * (input_bytes + 2) + heads_kv * 2 * input_bytes)


def attention_intensity(case: "AttentionCase", input_bytes: int = 1) -> float:
    """FLOPs per HBM byte (FP8 inputs, or `input_bytes=2` for bf16): thousands for long sequences,
    so attention is compute-bound."""
    return case.flops() / attention_bytes(case.batch, case.seqlen, case.heads_q, case.heads_kv, case.head_dim,
                                          input_bytes)


def _check_counts(least: int = 0, **counts: object) -> None:
    """Each of `counts` an int >= `least` (`layout.check_count`), else ValueError naming it."""
    from fp8lab.layout import check_count

    for name, n in counts.items():
        check_count(name, n, least)


def _check_positive(**values: object) -> None:
    """Each of `values` a finite real number > 0 (`layout.check_positive`), else ValueError naming it."""
    from fp8lab.layout import check_positive

    for name, v in values.items():
        check_positive(name, v)


def _check_ghz(clock_ghz: object) -> None:
    """A clock in GHz, (0, 10]: 1980 (MHz) would make every ceiling 1000 times too high."""
    if isinstance(clock_ghz, bool) or not isinstance(clock_ghz, numbers.Real) or not 0 < clock_ghz <= 10:
        raise ValueError(f"clock_ghz: expected GHz, a number in (0, 10] (the H200 boosts to 1.98), got {clock_ghz!r}")


def roofline_tflops(intensity: float, peak_tflops: float, tbps: float) -> float:
    """Attainable TFLOP/s at `intensity` FLOP/byte: min(compute ceiling `peak_tflops` (TFLOP/s),
    bandwidth `tbps` (TB/s) x intensity)."""
    _check_positive(intensity=intensity, peak_tflops=peak_tflops, tbps=tbps)
    return min(peak_tflops, tbps * intensity)


def mma_peak_tflops(sms: int = 132, clock_ghz: float = 1.98, flop_per_clock: int = 8192) -> float:
    """Dense tensor-core peak (a model): `flop_per_clock` per SM per clock, 8192 for FP8 on Hopper
    (4096 for bf16). NVIDIA's datasheet figures are this at 1.83 GHz (1979 FP8, 989 bf16 TFLOP/s);
    compared with `exp2_ceiling_tflops` at the same clock, the two meet at head_dim 128 for FP8."""
    _check_counts(1, sms=sms)
    _check_positive(flop_per_clock=flop_per_clock)  # a model's: exp2_ceiling_tflops passes 64 * head_dim
    _check_ghz(clock_ghz)
    return sms * clock_ghz * 1e9 * flop_per_clock / 1e12


def exp2_ceiling_tflops(head_dim: int, sms: int = 132, clock_ghz: float = 1.98, exp2_per_clock: int = 16) -> float:
    """Attention TFLOP/s if the exp2 unit were the only limit (a model, not a measurement).

    Each score costs one exp2 and 4 * head_dim matmul FLOPs (QK^T and PV). Defaults: H200
    (132 SMs, 1.98 GHz boost), 16 exp2 per clock per SM (CUDA guide, compute capability 9.0).
    """
    _check_positive(head_dim=head_dim, exp2_per_clock=exp2_per_clock)  # a balance point may be fractional
    return mma_peak_tflops(sms, clock_ghz, exp2_per_clock * 4 * head_dim)  # FLOPs the exp2s of a clock allow


# Ceilings measured on the same H200 (fp8-attention-facts.md section 6, 2026-11-29) and the datasheet.
H200_CEILINGS = {
    "FP8 GEMM (torch._scaled_mm, 8192^3)": 1308.0,
    "bf16 GEMM": 726.0,
    "datasheet dense FP8": 1979.0,
}
H200_COPY_TBPS = {"measured copy (facts file)": 4.3, "datasheet": 4.8}

# What an H200 holds on chip (132 SMs): where x could wait for its amax instead of being read again.
H200_ON_CHIP_BYTES = {
    "shared memory (132 x 228 KiB)": 132 * (228 << 10),
    "registers (132 x 256 KiB)": 132 * (256 << 10),
    "L2 (50 MiB)": 50 << 20,
}


def one_pass_bound(x_bytes: float, held_bytes: float, in_bytes: int = 2, out_bytes: int = 1) -> float:
    """The largest fraction of copy speed that current (dynamic) per-tensor quantization of x can reach
    when `held_bytes` of x stay on chip until the amax is known: the cast of the first value needs the
    amax of the last, so the rest of x is read from HBM twice. Useful bytes: x read once and y
    written (x_bytes / in_bytes values of out_bytes); moved: those plus the second read. A model at
    the copy's rate with every second read from HBM: L2 (50 MiB on an H200) can serve part of the
    second pass, which is how two passes, the second walking x backwards (v23), measured 0.606-0.607
    at 128 MiB in v25's run where this gives 0.600."""
    if not 0 < x_bytes < math.inf or not held_bytes >= 0:  # NaN fails both
        raise ValueError(f"expected x_bytes > 0 (finite) and held_bytes >= 0, got {x_bytes} and {held_bytes}")
    useful = x_bytes + x_bytes / in_bytes * out_bytes
    return useful / (useful + max(x_bytes - held_bytes, 0.0))


def held_for(x_bytes: float, target: float, in_bytes: int = 2, out_bytes: int = 1) -> float:
    """Bytes of x that must stay on chip for `one_pass_bound` to reach `target` (0 < target <= 1)."""
    if not 0 < target <= 1:
        raise ValueError(f"target: expected a fraction in (0, 1], got {target}")
    if not 0 < x_bytes < math.inf:  # NaN fails too
        raise ValueError(f"expected x_bytes > 0 (finite), got {x_bytes}")
    useful = x_bytes + x_bytes / in_bytes * out_bytes
    return max(0.0, x_bytes - useful * (1 / target - 1))


def one_pass_limit(held_bytes: float, target: float = 0.85, in_bytes: int = 2, out_bytes: int = 1) -> float:
    """The largest x (bytes) for which `one_pass_bound(x, held_bytes)` still reaches `target`; inf
    where two passes already reach it. Up to `held_bytes` x fits and is read once; beyond, the bound
    falls with every byte that does not fit (`held_for` grows in proportion to x)."""
    if not 0 < target <= 1 or not held_bytes >= 0:
        raise ValueError(f"expected 0 < target <= 1 and held_bytes >= 0, got target={target}, held_bytes={held_bytes}")
    useful = 1 + out_bytes / in_bytes  # useful bytes per byte of x
    slope = target * (useful + 1) - useful  # bound >= target  <=>  x * slope <= target * held_bytes
    return float("inf") if slope <= 0 else max(float(held_bytes), target * held_bytes / slope)


def on_chip_bytes(l2: bool = False, on_chip: Mapping[str, int] | None = None) -> int:
    """Bytes the H200's SMs hold in shared memory and registers (`H200_ON_CHIP_BYTES`), with the L2
    too if `l2` (which also carries every read and write, so it cannot all hold x)."""
    on_chip = H200_ON_CHIP_BYTES if on_chip is None else on_chip
    return sum(b for name, b in on_chip.items() if l2 or not name.startswith("L2"))


def one_pass_bound_table(x_bytes: float, target: float = 0.85, on_chip: Mapping[str, int] | None = None
                         ) -> pd.DataFrame:
    """`one_pass_bound` of current per-tensor scaling of `x_bytes` of bf16 at what the chip holds.

    Rows: "nothing (two passes)"; one per entry of `on_chip` (default `H200_ON_CHIP_BYTES`),
    cumulative, named by the entry ("shared memory", "+ registers", "+ L2: everything" for the
    H200); "needed for <target> %" (`held_for`). Columns: "MB of x held" (1e6 bytes) and
    "bound (of copy)".
    """
    import pandas as pd

    marks = on_chip_marks(on_chip)
    held = [0.0, *(mb * 1e6 for mb in marks.values()), held_for(x_bytes, target)]
    table = pd.DataFrame({"MB of x held": [h / 1e6 for h in held]},
                         index=["nothing (two passes)", *marks, f"needed for {target * 100:g} %"])
    table["bound (of copy)"] = [one_pass_bound(x_bytes, h) for h in held]
    return table


def on_chip_marks(on_chip: Mapping[str, int] | None = None) -> dict[str, float]:
    """What the chip holds, cumulative, in MB (1e6 bytes), labelled by the entries of `on_chip`
    (default `H200_ON_CHIP_BYTES`): "shared memory", "+ registers", "+ L2: everything" for the H200."""
    on_chip = H200_ON_CHIP_BYTES if on_chip is None else on_chip
    if not on_chip:
        raise ValueError("on_chip: expected at least one name -> bytes")
    names = [name.split(" (")[0] for name in on_chip]
    labels = [names[0], *(f"+ {n}" for n in names[1:])]
    if len(labels) > 1:
        labels[-1] += ": everything"
    total, marks = 0, {}
    for label, b in zip(labels, on_chip.values()):
        total += b
        marks[label] = total / 1e6
    return marks


def one_pass_bound_sweep(x_bytes: float, held_mb: Iterable[float] = range(0, 141, 2)) -> pd.DataFrame:
    """`one_pass_bound` of `x_bytes` against MB held on chip: columns held_mb, bound (for
    `fp8lab.plots.perf.plot_one_pass_bound`)."""
    import pandas as pd

    held = [float(mb) for mb in held_mb]
    return pd.DataFrame({"held_mb": held, "bound": [one_pass_bound(x_bytes, mb * 1e6) for mb in held]})


# The quantization benchmark's x: one sequence of 16k tokens x 32 heads x 128, bf16 (128 MiB).
QUANT_X_SHAPE = (1, 16384, 32, 128)
QUANT_X_BYTES = math.prod(QUANT_X_SHAPE) * 2


def values_per_descale(x_shape: tuple[int, int, int, int], granularity: object) -> int:
    """How many values of x (batch, tokens, heads, head_dim) one descale covers under a
    `fp8lab.scaling` granularity (PerToken, PerHead, PerTensor, ...): with current scaling, the
    values a kernel must read before it can cast the first of them."""
    from fp8lab.layout import check_count
    from fp8lab.scaling.granularity import Granularity

    if len(x_shape) != 4:
        raise ValueError(f"x_shape: expected (batch, tokens, heads, head_dim), got {x_shape}")
    for n in x_shape:
        check_count("x_shape", n, 1)
    if not isinstance(granularity, Granularity):
        raise TypeError(f"granularity: expected a fp8lab.scaling granularity such as PerHead() (an instance), got "
                        f"{granularity!r}")
    return math.prod(x_shape) // math.prod(granularity.compact_shape(tuple(x_shape)))


def first_cast_waits(x_shape: tuple[int, int, int, int] = QUANT_X_SHAPE) -> dict[str, int]:
    """Values of x this call must read before its first cast, by kind of scaling: "delayed" (the
    descale came from earlier calls: none), then current scaling "per token", "per head" (one
    scale per sequence and head, FA3's descale) and "per tensor"."""
    from fp8lab.scaling import PerHead, PerTensor, PerToken

    return {"delayed": 0, **{name: values_per_descale(x_shape, g) for name, g in
                             (("per token", PerToken()), ("per head", PerHead()), ("per tensor", PerTensor()))}}


def quant_floor_us(x_bytes: float, copy_tbps: float, in_bytes: int = 2, out_bytes: int = 1) -> float:
    """Microseconds to move what quantizing x costs at a copy's rate: x read once (`x_bytes`) and y
    written (`out_bytes` per value of `in_bytes`). A kernel's fraction of that copy is this floor
    over its time."""
    if not 0 < x_bytes < math.inf or not 0 < copy_tbps < math.inf:  # NaN fails too
        raise ValueError(f"expected x_bytes > 0 and copy_tbps > 0, finite, got {x_bytes} and {copy_tbps}")
    return (x_bytes + x_bytes / in_bytes * out_bytes) / (copy_tbps * 1e12) * 1e6


def exp2_balance_head_dim(flop_per_clock: int = 8192, exp2_per_clock: int = 16) -> float:
    """The head dim at which the exp2 unit takes as long per score as the tensor cores: a score
    costs 4 * head_dim MMA FLOPs (`flop_per_clock` per SM per clock) and one exp2 (`exp2_per_clock`);
    the clock cancels. 128 for FP8 on Hopper (8192), 64 for bf16 (4096)."""
    return flop_per_clock / (4 * exp2_per_clock)


def roofline_ceilings(clock_ghz: float = 1.98, exp2_head_dims: Iterable[int] = (64, 128)) -> dict[str, float]:
    """The roofline's compute ceilings in TFLOP/s: the measured and datasheet ones
    (`H200_CEILINGS`), the FP8 MMA model (`mma_peak_tflops`) and the exp2 model per head dim
    (`exp2_ceiling_tflops`), both at `clock_ghz`."""
    _check_ghz(clock_ghz)
    return {**H200_CEILINGS, f"FP8 MMA peak (model, {clock_ghz:g} GHz)": mma_peak_tflops(clock_ghz=clock_ghz),
            **{f"exp2 model, d={d}": exp2_ceiling_tflops(d, clock_ghz=clock_ghz) for d in exp2_head_dims}}


def parse_case(label: str) -> AttentionCase:
    """The `AttentionCase` of a record's case label, "4x4096x32x128", "2x8192x32/8x128 causal"
    (batch x seqlen x heads_q[/heads_kv] x head_dim): the inverse of `AttentionCase.label`."""
    import re

    if not isinstance(label, str):
        raise TypeError(f"case label: expected a str such as '2x8192x32x128 causal', got {type(label).__name__} {label!r}")
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)(?:/(\d+))?x(\d+)( causal)?", label)
    if m is None:
        raise ValueError(f"case label: expected 'BxSxH[/Hkv]xD[ causal]', e.g. '2x8192x32x128 causal', got {label!r}")
    b, s, hq, hk, d, causal = m.groups()
    return AttentionCase(int(b), int(s), int(hq), int(hk or hq), int(d), causal is not None)


# The facts file's H200 table (section 6; one run, 2026-11-29): TFLOP/s by provider.
FACTS_H200 = [
    {"case": "2x8192x32/8x128", "causal": False, "fa3-fwd bf16": 671, "fa3-fwd FP8": 899, "vLLM FA3 bf16": 598,
     "vLLM FA3 FP8": 693, "SDPA flash (FA2)": 342, "SDPA cuDNN": 602, "minimal Triton FP8": 751},
    {"case": "2x8192x32/8x128", "causal": True, "fa3-fwd bf16": 621, "fa3-fwd FP8": 860, "vLLM FA3 bf16": 576,
     "vLLM FA3 FP8": 635, "SDPA flash (FA2)": 323, "SDPA cuDNN": 549, "minimal Triton FP8": 576},
    {"case": "1x16384x32x128", "causal": False, "fa3-fwd bf16": 667, "fa3-fwd FP8": 903, "vLLM FA3 bf16": 629,
     "vLLM FA3 FP8": 698, "SDPA flash (FA2)": 346, "SDPA cuDNN": 609, "minimal Triton FP8": 756},
    {"case": "4x4096x16x256", "causal": False, "fa3-fwd bf16": 690, "fa3-fwd FP8": 1095, "vLLM FA3 bf16": 623,
     "vLLM FA3 FP8": 356, "SDPA flash (FA2)": 310, "SDPA cuDNN": 645, "minimal Triton FP8": 850},
    {"case": "4x8192x32x64", "causal": False, "fa3-fwd bf16": 517, "fa3-fwd FP8": 646, "vLLM FA3 bf16": 453,
     "vLLM FA3 FP8": 547, "SDPA flash (FA2)": 308, "SDPA cuDNN": 458, "minimal Triton FP8": 511},
]


def tflops(flops: float, ms: float) -> float:
    """TFLOP/s (1e12 FLOP per second) for `flops` done in `ms` milliseconds (finite, > 0)."""
    _check_positive(ms=ms)
    return flops / (ms * 1e-3) / 1e12


def tbps(nbytes: float, ms: float) -> float:
    """Terabytes per second for `nbytes` moved (reads + writes) in `ms` milliseconds (finite, > 0)."""
    _check_positive(ms=ms)
    return nbytes / (ms * 1e-3) / 1e12


def median_ms(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median milliseconds of `fn()` on the GPU (triton.testing.do_bench, L2 flushed between runs)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def capture_graph(fn: Callable[[], object]) -> tuple[torch.cuda.CUDAGraph, object]:
    """Capture `fn()` in a CUDA graph, as vLLM captures a decode step: one eager call on a side
    stream first (Triton compiles, allocators warm up: neither may happen inside a capture), then
    the captured call. Returns (graph, what the captured call returned); each `graph.replay()`
    reruns the kernels on whatever the captured tensors hold then, writing into those outputs."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def median_ms_graph(fn: Callable[[], object], rep_ms: int = 100) -> float:
    """Median milliseconds of `fn()` replayed from a captured CUDA graph: the kernels' own time,
    without the host's launch overhead (which dominates kernels of tens of microseconds). The
    replays run back to back with no L2 flush: data that fits in L2 is timed partly from it."""
    from triton.testing import do_bench_cudagraph

    return float(do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))


def bench_grid(
    head_dims: Iterable[int] = (64, 128, 256),
    seqlens: Iterable[int] = (4096, 8192, 16384),
    tokens: int = 16384,
    heads: int = 32,
    causal: Iterable[bool] = (False, True),
) -> list[AttentionCase]:
    """The issue's grid: batch * seqlen = `tokens`, `heads` query and kv heads."""
    seqlens = list(seqlens)
    uneven = [s for s in seqlens if isinstance(s, int) and s > 0 and tokens % s]
    if uneven:
        raise ValueError(f"seqlens: expected each to divide tokens={tokens} (batch * seqlen = tokens), got {uneven}")
    return [
        AttentionCase(tokens // s, s, heads, heads, d, c)
        for d in head_dims
        for s in seqlens
        for c in causal
    ]


def case_calls(case: AttentionCase, *, device: str = "cuda", seed: int = 0,
               configs: Mapping[str, object] | None = None) -> dict[str, Callable[[], object]]:
    """The grid's providers on one case, as calls for `interleaved_times`, labelled as the records are.

    Inputs: N(0, 1) bf16 q, k, v of `case`'s shape, quantized per kv head by `quantize_fp8`
    (random descales, never ones). "fp8lab": the Triton kernel with V pre-transposed;
    "fp8lab ws": the Gluon kernel with `key_ordered_vt` (Hopper only); where found, "fa3-fwd FP8",
    "vLLM FA3 FP8 varlen" (vLLM's package or its library alone) and "fa3-fwd bf16" (N(0, 1) bf16
    inputs), through `prepare_attention`: checked once, then the provider alone, as the grid
    called them. V's copies are made here, outside the timing, as in the grid.
    configs: more calls on the same inputs, label -> an `AttentionConfig` (the Triton kernel) or
    a `WsConfig` (the Gluon kernel, Hopper only: skipped elsewhere; with `transpose_v` on V as
    stored, else on `key_ordered_vt`'s copy).
    """
    import torch

    from fp8lab.backends import prepare_attention, probe_all
    from fp8lab.kernels import AttentionConfig, WsConfig, fp8_attention, key_ordered_vt, pretranspose_v, quantize_fp8
    from fp8lab.kernels.attention_ws import fp8_attention_ws, ws_supported

    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (case.batch, case.seqlen)
    x = [torch.randn(*shape, h, case.head_dim, device=device, generator=gen).to(torch.bfloat16)
         for h in (case.heads_q, case.heads_kv, case.heads_kv)]
    (q, qd), (k, kd), (v, vd) = (quantize_fp8(t, "head", heads_kv=case.heads_kv) for t in x)
    causal = case.causal
    vt = pretranspose_v(v)
    calls: dict[str, Callable[[], object]] = {
        "fp8lab": lambda: fp8_attention(q, k, vt, qd, kd, vd, causal=causal)}
    ws = ws_supported(torch.device(device))
    if ws:
        vk = key_ordered_vt(v)
        calls["fp8lab ws"] = lambda: fp8_attention_ws(q, k, vk, q_descale=qd, k_descale=kd, v_descale=vd,
                                                      causal=causal)
    for label, cfg in (configs or {}).items():
        if isinstance(cfg, AttentionConfig):
            calls[label] = lambda c=cfg: fp8_attention(q, k, vt, qd, kd, vd, causal=causal, config=c)
        elif isinstance(cfg, WsConfig):
            if ws:  # transpose_v takes V as stored; the others key_ordered_vt's copy, made here
                calls[label] = lambda c=cfg: fp8_attention_ws(q, k, v if c.transpose_v else vk, q_descale=qd,
                                                              k_descale=kd, v_descale=vd, causal=causal, config=c)
        else:
            raise TypeError(f"configs[{label!r}]: expected an AttentionConfig or a WsConfig, got {type(cfg).__name__}")
    found = {name for name, (ok, _) in probe_all().items() if ok} if torch.device(device).type == "cuda" else set()
    fp8 = dict(q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)
    if "fa3-fwd" in found:
        calls["fa3-fwd FP8"] = prepare_attention(q, k, v, backend="fa3:fa3-fwd", **fp8)
    vllm = next((p for p in ("vllm", "vllm-so") if p in found), None)
    if vllm is not None:
        calls["vLLM FA3 FP8 varlen"] = prepare_attention(q, k, v, backend=f"fa3:{vllm}", **fp8)
    if "fa3-fwd" in found:
        qb, kb, vb = (torch.randn(t.shape, device=device, generator=gen).to(torch.bfloat16) for t in (q, k, v))
        calls["fa3-fwd bf16"] = prepare_attention(qb, kb, vb, backend="fa3:fa3-fwd", causal=causal)
    return calls


TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"  # a timing's start and end stamps, as nvidia-smi writes its log


def _stamp() -> str:
    from datetime import datetime

    return datetime.now().strftime(TIME_FORMAT)[:-3]


def interleaved_times(
    fns: dict[str, Callable[[], object]],
    rounds: int = 5,
    settle_s: float = 1.5,
    *,
    timer: Callable[[Callable[[], object]], float] = median_ms,
    sync: Callable[[], object] = lambda: None,
) -> list[dict]:
    """Time every fn of `fns` (provider -> fn) `rounds` times, interleaved, after the GPU settles.

    Each fn first runs once (compiling it), then all of them run in turn for `settle_s` seconds
    (calling `sync` after each turn), so that the timings start at the clock and power the card
    keeps under this load, not in the swing that follows a step up from idle. Round r then times
    them in the order rotated r places, so every provider is timed at every position.

    Returns one row per timing: provider, round, position, ms (`timer`'s median), started_at and
    ended_at (host clock, "YYYY/MM/DD HH:MM:SS.mmm"). A fn that raises gets one row with `error`
    instead of ms and takes no further turns.
    """
    if not fns:
        raise ValueError("fns: expected at least one provider -> callable, got none")
    if rounds < 1 or settle_s < 0:
        raise ValueError(f"expected rounds >= 1 and settle_s >= 0, got rounds={rounds}, settle_s={settle_s}")
    import time

    rows: list[dict] = []
    live = dict(fns)

    def fail(name: str, e: Exception, r: int | None) -> None:
        rows.append(dict(provider=name, round=r, error=repr(e)[:300]))
        del live[name]

    for name, fn in list(live.items()):
        try:
            fn()
            sync()
        except Exception as e:  # noqa: BLE001  (one provider failing must not lose the others)
            fail(name, e, None)
    t0 = time.perf_counter()
    while live and time.perf_counter() - t0 < settle_s:
        for fn in live.values():
            fn()
        sync()
    for r in range(rounds):
        names = list(live)
        order = names[r % len(names):] + names[:r % len(names)] if names else []
        for pos, name in enumerate(order):
            start = _stamp()
            try:
                ms = timer(live[name])
            except Exception as e:  # noqa: BLE001
                fail(name, e, r)
                continue
            rows.append(dict(provider=name, round=r, position=pos, ms=ms, started_at=start, ended_at=_stamp()))
    return rows


def case_rows(case: AttentionCase, timed: list[dict], labels: Mapping[str, str] | None = None) -> list[dict]:
    """`interleaved_times`' rows for one case as the probes record them: case, head_dim, causal,
    provider, round, then `config` (labels[provider], where given) and ms with TFLOP/s, or the error."""
    out = []
    for r in timed:
        row = dict(case=case.label(), head_dim=case.head_dim, causal=case.causal, provider=r["provider"],
                   round=r.get("round"))
        if labels and r["provider"] in labels:
            row["config"] = labels[r["provider"]]
        if "ms" in r:
            row.update(ms=r["ms"], tflops=tflops(case.flops(), r["ms"]))
        else:
            row.update(error=r.get("error"))
        out.append(row)
    return out


def case_medians(rows: list[dict], case: AttentionCase) -> dict[str, int]:
    """Median TFLOP/s per provider of `case`'s timed rows (`case_rows`), rounded: a probe's progress line."""
    import statistics

    here = [r for r in rows if r["case"] == case.label() and "tflops" in r]
    return {p: round(statistics.median(r["tflops"] for r in here if r["provider"] == p))
            for p in dict.fromkeys(r["provider"] for r in here)}


def median_over_rounds(rows: list[dict], keys: tuple[str, ...] = ("case", "provider")) -> list[dict]:
    """One row per `keys` group of timed rows (rows with `ms` and `tflops`, e.g. from
    `interleaved_times`): the group's first row's other fields, with ms and tflops the medians over
    its rounds, tflops_min and tflops_max the extremes, and rounds the count. Rows with an `error`
    and no ms pass through unchanged."""
    import statistics

    groups: dict[tuple, list[dict]] = {}
    out: list[dict] = []
    for r in rows:
        if "ms" not in r:
            out.append(dict(r))
            continue
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    per_round = ("round", "position", "started_at", "ended_at", "done_at", "compile_and_time_s")
    for group in groups.values():
        t = [g["tflops"] for g in group]
        row = {k: v for k, v in group[0].items() if k not in per_round}
        row.update(ms=statistics.median(g["ms"] for g in group), tflops=statistics.median(t),
                   tflops_min=min(t), tflops_max=max(t), rounds=len(group))
        out.append(row)
    return out


@dataclass
class Results:
    """Rows of measurements plus the context they were taken in."""

    context: dict
    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)


def write_results(path: str | Path, rows: list[dict], context: dict, **meta: object) -> Path:
    """Write `{"context", "meta", "rows"}` as JSON at `path` and the rows as CSV beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(Results(context, rows, dict(meta))), indent=1, default=str) + "\n")
    if rows:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with path.with_suffix(".csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return path


def load_results(path: str | Path) -> dict:
    """Read a results JSON written by `write_results`; it must carry a context block."""
    data = json.loads(Path(path).read_text())
    if "context" not in data or "rows" not in data:
        raise ValueError(f"{path}: expected a results file with 'context' and 'rows', got keys {sorted(data)}")
    return data


def records_frame(directory: str | Path, section: str = "grid"):
    """All `bench_v<N>_<section>.json` files under `directory` as one pandas DataFrame with a
    `version` column (v1, v2, v8a, ...) and the run's date and GPU. Only that exact name: "grid" reads
    `bench_v23_grid.json`, not `bench_v23_grid_run2.json` or `bench_v28_pv_flush_grid.json`."""
    import re

    import pandas as pd

    pattern = re.compile(rf"bench_(v\d+[a-z]?)_{re.escape(section)}\.json")
    frames = []
    for path in sorted(Path(directory).glob(f"bench_v*_{section}.json")):
        match = pattern.fullmatch(path.name)
        if match is None:
            continue
        data = load_results(path)
        version = match.group(1)
        df = pd.DataFrame(data["rows"])
        df.insert(0, "version", version)
        df["date"] = data["context"].get("date")
        df["gpu"] = data["context"].get("gpu")
        frames.append(df)
    if not frames:
        raise FileNotFoundError(f"no bench_v*_{section}.json under {directory}")
    return pd.concat(frames, ignore_index=True)


def check_frame(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """TypeError unless `df` (`what`) is a pandas DataFrame; ValueError naming the `columns` it lacks,
    and the ones it has."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: expected columns {list(columns)}, missing {missing}; got {list(df.columns)}")


def check_one_version(df: pd.DataFrame, what: str) -> None:
    """ValueError if `df` (`what`, e.g. from `records_frame`) holds the rows of more than one version:
    a table or plot of repeats would then span every version's at once."""
    versions = list(df["version"].unique()) if "version" in df else []
    if len(versions) > 1:
        raise ValueError(f"{what}: expected one version's record, got versions {versions}; pick one, e.g. "
                         f"{what}[{what}['version'] == {versions[-1]!r}]")


def long_context_headline(results_dir: str | Path) -> dict:
    """The long-context figures the notebooks quote (05, 06, 07, 08), read from the H200's record.

    "probe": `bench_v28_long_context.json` (`scripts/probe_pv_flush.py --accuracy`, on the inputs of
    `scripts/probe_long_context.py`: 16 queries, 4 heads, d = 128, N(0, 1) q and k, V + 1, non-causal),
    rel L2 against exact attention by number of keys, for "fa3-fwd" (upstream FA3), "ours" (the highest
    of our kernels without `pv_flush`), "ours, pv_flush" (the highest of every flushing tile) and
    "vllm-so" (vLLM's FA3 library). "fidelity": the long-context cases of `fidelity.json`
    (`scripts/gpu_fidelity.py`: 128 queries, 4 heads, d = 128, V + 1), rel L2 of "fa3-fwd" and
    "vllm-fa3" by number of keys. "fidelity_ratio_hopper": [lowest, highest] over every recorded case of
    the emulation's distance to each production kernel in units of that kernel's own error, with the FP8
    MMA accumulator model (`fp8lab.reference.experiments.fidelity_table(..., "hopper")`), None where the
    record holds no accumulator study. Keys of the inner dicts are numbers of keys (int).
    """
    from fp8lab.reference import experiments

    rdir = Path(results_dir)
    rows = [r for r in load_results(rdir / "bench_v28_long_context.json")["rows"] if "rel_l2" in r]
    ours = [r for r in rows if r["who"].startswith(("triton ", "gluon "))]
    groups = {"fa3-fwd": [r for r in rows if r["who"] == "fa3-fwd"],
              "ours": [r for r in ours if not r["who"].endswith("-pf")],
              "ours, pv_flush": [r for r in ours if r["who"].endswith("-pf")],
              "vllm-so": [r for r in rows if r["who"] == "vllm-so"]}
    probe: dict[str, dict[int, float]] = {}
    for who, group in groups.items():
        if not group:
            raise ValueError(f"{rdir / 'bench_v28_long_context.json'}: no rel_l2 rows for {who!r}")
        for r in group:
            n = int(r["seqlen_k"])
            probe.setdefault(who, {})[n] = max(probe.get(who, {}).get(n, 0.0), float(r["rel_l2"]))
    fid = experiments.load_fidelity(rdir / "fidelity.json")
    fidelity: dict[str, dict[int, float]] = {}
    for case in fid.get("long_context", []):
        if case.get("dist") != "v_offset":
            continue
        for prov, r in case.get("providers", {}).items():
            if "err_vs_exact" in r:
                fidelity.setdefault(prov, {})[int(case["seqlen_k"])] = float(r["err_vs_exact"])
    hopper = experiments.fidelity_table(experiments.accumulator_study(fid), "hopper")
    return {"probe": {k: dict(sorted(v.items())) for k, v in probe.items()},
            "fidelity": {k: dict(sorted(v.items())) for k, v in fidelity.items()},
            "fidelity_ratio_hopper": [float(hopper["ratio"].min()), float(hopper["ratio"].max())] if len(hopper) else None}


def ratio_table(rows: list[dict], ours: str, against: str, value: str = "tflops") -> list[dict]:
    """For each case present for both providers: {case, ours, against, ratio}.

    rows: dicts with keys 'case', 'provider' and `value`.
    """
    by = {(r["case"], r["provider"]): r[value] for r in rows if r.get(value) is not None}
    cases = list(dict.fromkeys(r["case"] for r in rows))
    out = []
    for c in cases:
        if (c, ours) in by and (c, against) in by:
            a, b = by[(c, ours)], by[(c, against)]
            if not b > 0:  # a provider that ran at 0 (or NaN) TFLOP/s has no ratio to take
                raise ValueError(f"{c}: expected {against}'s {value} > 0 to compare {ours} with, got {b!r}")
            out.append({"case": c, ours: a, against: b, "ratio": a / b})
    return out


CLOCK_LOG_QUERY = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
POWER_CAP_BIT = 0x4  # nvidia-smi's clock-event reason "SW power cap": the board is at its power limit
_CLOCK_COLUMNS = ("time", "sm_mhz", "mem_mhz", "power_w", "temp_c", "reasons")


def read_clock_log(path: str | Path) -> pd.DataFrame:
    """A log of `nvidia-smi --query-gpu=<CLOCK_LOG_QUERY> --format=csv -lms N` as a DataFrame:
    time (datetime64, the host's local clock), sm_mhz, mem_mhz, power_w, temp_c (float) and
    reasons (int, the active clock-event bits; `POWER_CAP_BIT` is the power limit). Lines that
    do not parse (a last line cut when the logger was stopped) are dropped."""
    import pandas as pd

    df = pd.read_csv(path, skipinitialspace=True, dtype=str)
    if len(df.columns) != len(_CLOCK_COLUMNS) or not str(df.columns[0]).startswith("timestamp"):
        raise ValueError(f"{path}: expected nvidia-smi's csv of {CLOCK_LOG_QUERY}, got columns {list(df.columns)}")
    df.columns = list(_CLOCK_COLUMNS)
    out = pd.DataFrame({"time": pd.to_datetime(df["time"], format="%Y/%m/%d %H:%M:%S.%f", errors="coerce")})
    for col in _CLOCK_COLUMNS[1:5]:  # "1980 MHz", "687.77 W", "68"
        out[col] = pd.to_numeric(df[col].str.split().str[0], errors="coerce")
    out["reasons"] = [int(x, 16) if isinstance(x, str) and x.startswith("0x") else None for x in df["reasons"]]
    return out.dropna().astype({"reasons": int}).reset_index(drop=True)


def clocks_while_timed(rows: pd.DataFrame, clocks: pd.DataFrame, busy_w: float = 150.0, pad_s: float = 0.125
                       ) -> pd.DataFrame:
    """Timed rows with the GPU's state while each ran: the mean SM clock (sm_mhz), the highest power
    (power_w) and the share of samples at the power limit (power_capped), over the `read_clock_log`
    samples in the timing's window in which the GPU was busy (power above busy_w).

    The window is started_at to ended_at, widened by `pad_s` each side, where the rows have those
    stamps (`interleaved_times`, "YYYY/MM/DD HH:MM:SS.mmm"); otherwise, for the rows
    `scripts/gpu_bench.py` wrote before them, done_at - compile_and_time_s to done_at + 1 s (done_at
    is cut to the second). Rows without such samples get NaN. Both clocks must be the same host's.
    """
    import pandas as pd

    if {"started_at", "ended_at"} <= set(rows.columns):
        pad = pd.Timedelta(seconds=pad_s)
        start = pd.to_datetime(rows["started_at"], format=TIME_FORMAT) - pad
        end = pd.to_datetime(rows["ended_at"], format=TIME_FORMAT) + pad
    else:
        missing = {"done_at", "compile_and_time_s"} - set(rows.columns)
        if missing:
            raise ValueError("rows: expected columns started_at and ended_at (interleaved_times), or done_at and "
                             f"compile_and_time_s (gpu_bench.py rows), missing {missing}")
        end = pd.to_datetime(rows["done_at"], format="%Y/%m/%d %H:%M:%S") + pd.Timedelta(seconds=1)
        start = end - pd.to_timedelta(rows["compile_and_time_s"] + 1.0, unit="s")
    busy = clocks[clocks["power_w"] > busy_w]
    state = []
    for s, e in zip(start, end):
        w = busy[(busy["time"] >= s) & (busy["time"] <= e)]
        state.append((w["sm_mhz"].mean(), w["power_w"].max(), ((w["reasons"] & POWER_CAP_BIT) > 0).mean())
                     if len(w) else (float("nan"),) * 3)
    out = rows.copy()
    out[["sm_mhz", "power_w", "power_capped"]] = pd.DataFrame(state, index=rows.index)
    return out


def read_ncu_raw(path: str | Path) -> pd.DataFrame:
    """The first kernel of `ncu --import R --page raw --csv > path` (or some of its columns), one row
    per metric name: `value` (float; NaN where the field is text, such as the kernel's name, kept in
    `text`) and `unit` (Nsight Compute's, e.g. "us", "Mbyte", "cycle")."""
    import pandas as pd

    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "gpu__time_duration.sum" not in df.columns or len(df) < 2:
        raise ValueError(f"{path}: expected Nsight Compute's raw page as csv (a units row, then one row per kernel)")
    text = df.iloc[1]
    return pd.DataFrame({"value": pd.to_numeric(text.str.replace(",", ""), errors="coerce"), "unit": df.iloc[0],
                         "text": text})


def read_ncu_sass(path: str | Path) -> pd.DataFrame:
    """`ncu --import R --page source --csv --print-source sass > path` (or some of its rows under
    the same two header lines): one row per SASS instruction with its text (`sass`), how often
    warps executed it (`executed`) and its warp-stall samples (`samples`), in program order."""
    import pandas as pd

    df = pd.read_csv(path, skiprows=1, dtype=str, keep_default_na=False)
    need = {"Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"}
    if not need <= set(df.columns):
        raise ValueError(f"{path}: expected Nsight Compute's source page (SASS) as csv, missing {need - set(df.columns)}")
    return pd.DataFrame({"sass": df["Source"].str.strip(),
                         "executed": pd.to_numeric(df["Instructions Executed"], errors="coerce").fillna(0).astype(int),
                         "samples": pd.to_numeric(df["Warp Stall Sampling (All Samples)"],
                                                  errors="coerce").fillna(0).astype(int)})


def mbarrier_waits(sass: pd.DataFrame) -> pd.DataFrame:
    """The mbarrier arrays of a kernel (`read_ncu_sass`), by the constant shared-memory offset
    its SASS adds to an array's index: how often warps executed a try-wait on it (SYNCS.PHASECHK:
    one per retry, so a long wait counts many), a plain arrival (`arrive`) and an arrival that
    also expects a TMA load's bytes (`arrive_expect`: whoever issues the load)."""
    import pandas as pd

    op = sass["sass"].str.extract(r"SYNCS\.(PHASECHK\.TRANS64\.TRYWAIT|ARRIVE\.TRANS64\.A1T0|ARRIVE\.TRANS64)\b")[0]
    offset = sass["sass"].str.extract(r"\[[^\]]*\+(0x[0-9a-f]+)\]")[0]
    kind = op.map({"PHASECHK.TRANS64.TRYWAIT": "try_waits", "ARRIVE.TRANS64.A1T0": "arrive",
                   "ARRIVE.TRANS64": "arrive_expect"})
    rows = pd.DataFrame({"offset": offset, "kind": kind, "executed": sass["executed"]}).dropna()
    table = rows.pivot_table(index="offset", columns="kind", values="executed", aggfunc="sum", fill_value=0)
    return table.reindex(columns=["try_waits", "arrive", "arrive_expect"], fill_value=0).astype(int)


# The kinds of scaling `quant_targets` reports, in its row order: label, the record kernels that
# time that kind at the target size, and the number of sequences (None: every split). Kernel names
# are the records' own: quant_shapes (v18, v25), quant_sizes (v25, v26; one sequence) and v23's
# two-pass probe ("tensor forward" before v23, "tensor backward" since). Only one query head per kv
# head: the GQA4 rows are in the notebooks' split tables.
_QUANT_TARGET_KINDS: tuple[tuple[str, frozenset[str], int | None], ...] = (
    ("static (vLLM's Q)", frozenset({"static (vLLM Q)"}), None),
    ("per token", frozenset({"per-token"}), None),
    ("delayed, per head", frozenset({"per-head delayed", "per-head delayed, head-major x"}), None),
    ("delayed, per tensor", frozenset({"per-tensor delayed"}), None),
    ("current, per head, head-major x", frozenset({"per-head onchip, head-major x"}), None),
    *((f"current, per head, token-major x, {b} sequence{'s' if b > 1 else ''}",
       frozenset({"per-head onchip", "per-head current (auto)"}), b) for b in (1, 2, 4, 8, 16)),
    ("current, per tensor", frozenset({"per-tensor two-pass", "per-tensor current (auto)", "tensor forward",
                                       "tensor backward"}), None),
)


def _quant_target_rows(results_dir: str | Path) -> pd.DataFrame:
    """Every timing the targets table reads, one frame: record, kernel, mib, batch, frac_copy_graph,
    copy_tbps_graph (NaN where a record lacks it), same_bits (None where not checked)."""
    import re

    import pandas as pd

    rdir = Path(results_dir)
    frames = []
    for name, label in (("bench_v18_quant_shapes.json", "v18 quant_shapes"),
                        ("bench_v25_quant_shapes.json", "v25 quant_shapes"),
                        ("bench_v23_reverse.json", "v23 reverse"),
                        ("bench_v25_quant_sizes.json", "v25 quant_sizes"),
                        ("bench_v26_quant_sizes.json", "v26 quant_sizes")):
        df = pd.DataFrame(load_results(rdir / name)["rows"])
        df = df[df["kernel"].notna()].copy()  # the sizes records also hold bit checks without a timing
        if "size" in df:  # "4x4096x32x128 (128 MiB)": sequences x tokens x heads x head_dim
            parsed = df["size"].map(lambda s: re.fullmatch(r"(\d+)x\d+x\d+x\d+ \((\d+) MiB\)", str(s)))
            if parsed.isna().any():
                raise ValueError(f"{rdir / name}: expected sizes like '1x16384x32x128 (128 MiB)', got "
                                 f"{sorted(df.loc[parsed.isna(), 'size'].astype(str).unique())}")
            df["batch"] = [int(m.group(1)) for m in parsed]
            df["mib"] = [int(m.group(2)) for m in parsed]
        else:  # the size sweeps time one sequence per size
            df["batch"], df["mib"] = 1, df["mib"].astype(int)
        for col in ("copy_tbps_graph", "same_bits"):
            if col not in df:
                df[col] = None
        frames.append(df.assign(record=label)[["record", "kernel", "mib", "batch", "frac_copy_graph",
                                               "copy_tbps_graph", "same_bits"]])
    return pd.concat(frames, ignore_index=True)


def _verdict(low: float, high: float, target: float) -> str | None:
    if low != low or high != high:  # NaN: no timing to judge
        return None
    return "met" if low >= target else "not met" if high < target else "at the line"


def quant_targets(results_dir: str | Path, target: float = 0.85, copy_tbps: float | None = None,
                  mib: int = 128) -> pd.DataFrame:
    """Where fused FP8 quantization stands against the issue's target, read from the H200's record.

    One row per kind of scaling (static, per token, delayed per head and per tensor, current per head
    on head-major x, current per head on token-major x by number of sequences, current per tensor),
    over every timing of that kind at `mib` MiB of bf16 (128: 16k tokens x 32 heads x 128) in
    `bench_v18_quant_shapes`, `bench_v25_quant_shapes`, `bench_v23_reverse`, `bench_v25_quant_sizes`
    and `bench_v26_quant_sizes` (timings whose bits were checked and differed are left out):

    - ``low``, ``high``: the lowest and highest fraction of a copy of the same bytes timed in the
      same run (`frac_copy_graph`: the copy's time over the kernel's, counting the kernel's reads and
      writes, 3 bytes per value);
    - ``verdict``: "met" if every timing reaches `target`, "not met" if none does, else "at the line";
    - ``low of <copy_tbps>``, ``high of <copy_tbps>``, ``verdict of <copy_tbps>``: the same against
      a copy at `copy_tbps` TB/s (default: the facts file's 4.3, `H200_COPY_TBPS`), over the timings
      whose record holds its copy's rate (NaN and None where none does);
    - ``records``: which records the row reads; ``sequences``: the splits of the tokens timed;
      ``timings``: how many.
    """
    import pandas as pd

    if copy_tbps is None:
        copy_tbps = H200_COPY_TBPS["measured copy (facts file)"]
    rows = _quant_target_rows(results_dir)
    rows = rows[(rows["mib"] == mib) & rows["same_bits"].ne(False)]
    rows = rows.assign(frac_of=rows["frac_copy_graph"] * pd.to_numeric(rows["copy_tbps_graph"]) / copy_tbps)
    of = f"of {copy_tbps:g} TB/s"
    out = {}
    for label, kernels, batch in _QUANT_TARGET_KINDS:
        kind = rows[rows["kernel"].isin(kernels)]
        kind = kind if batch is None else kind[kind["batch"] == batch]
        if kind.empty:
            raise ValueError(f"{results_dir}: no timing of {label!r} at {mib} MiB (kernels {sorted(kernels)})")
        low, high = kind["frac_copy_graph"].min(), kind["frac_copy_graph"].max()
        low_of, high_of = kind["frac_of"].min(), kind["frac_of"].max()
        out[label] = {"low": low, "high": high, "verdict": _verdict(low, high, target),
                      f"low {of}": low_of, f"high {of}": high_of, f"verdict {of}": _verdict(low_of, high_of, target),
                      "records": ", ".join(dict.fromkeys(kind["record"])),
                      "sequences": ", ".join(str(b) for b in sorted(kind["batch"].unique())),
                      "timings": len(kind)}
    table = pd.DataFrame.from_dict(out, orient="index")
    table.index.name = "scaling"
    return table
