"""Seeded input distributions for FP8 attention experiments, in FA3's layout.

`make_qkv(name, ...)` returns `(q, k, v)` shaped (batch, seqlen, heads, head_dim).
Every draw comes from a CPU `torch.Generator` seeded with `seed` and is then
moved to `device`/`dtype`, so a seed gives the same numbers on every machine.
Outlier channels and per-head ranges are fixed properties of the "model" (the
same for every seed), as they are in a real layer; only the values are redrawn.

| name               | what it models                                                                 |
|--------------------|--------------------------------------------------------------------------------|
| `normal`           | q, k, v ~ N(0, 1)                                                              |
| `fa3_outliers`     | the FA3 paper's N(0,1) + N(0,100)·Bernoulli(0.001): 0.1 % of entries get std 10 |
| `outlier_channels` | a few head-dim channels of q and k scaled up (and k shifted), as in LLM keys   |
| `sinks`            | the first tokens of k and v much larger than the rest (attention sinks)        |
| `head_ranges`      | each head scaled by its own factor, log-spaced over `2^±head_range_log2`       |
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from fp8lab.layout import check_count, check_positive

__all__ = ["DISTRIBUTIONS", "make_qkv", "sample", "drift_series", "head_factors"]


def _normal(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float32)


def _outliers(shape, gen, *, outlier_prob: float = 0.001, outlier_std: float = 10.0) -> torch.Tensor:
    base = _normal(shape, gen)
    big = _normal(shape, gen) * outlier_std
    mask = torch.rand(shape, generator=gen) < outlier_prob
    return base + big * mask


# Which channels are outliers and which head gets which range are properties of a model's layer,
# not of one batch: they come from this fixed generator, the same for every `seed`, so a scale
# calibrated on one draw meets the same structure in the next.
_MODEL_SEED = 20240711


def _model_generator() -> torch.Generator:
    return torch.Generator().manual_seed(_MODEL_SEED)


def _outlier_channels(q, k, v, gen, *, n_channels: int = 4, channel_scale: float = 20.0, channel_shift: float = 10.0):
    d = q.shape[-1]
    chans = torch.randperm(d, generator=_model_generator())[: min(n_channels, d)]
    q[..., chans] *= channel_scale
    k[..., chans] = k[..., chans] * channel_scale + channel_shift
    return q, k, v


def _sinks(q, k, v, gen, *, n_sinks: int = 1, sink_scale: float = 30.0):
    k[:, :n_sinks] *= sink_scale
    v[:, :n_sinks] *= sink_scale
    return q, k, v


def head_factors(heads: int, head_range_log2: float = 6.0) -> torch.Tensor:
    """float32 (heads,) per-head scale factors, log-spaced over 2^-r .. 2^r in a fixed shuffled order.

    The order is a property of the "model" (the same for every seed); `make_qkv("head_ranges")` uses it.
    """
    check_count("heads", heads, 1)
    _check_options("head_ranges", {"head_range_log2": head_range_log2})
    f = 2.0 ** torch.linspace(-head_range_log2, head_range_log2, heads)
    return f[torch.randperm(heads, generator=_model_generator())]


def _head_ranges(q, k, v, gen, *, head_range_log2: float = 6.0):
    def factors(h: int) -> torch.Tensor:
        return head_factors(h, head_range_log2)[None, None, :, None]

    return q * factors(q.shape[2]), k * factors(k.shape[2]), v * factors(v.shape[2])


# Each distribution's knobs: (name, least value, greatest value, whether it must be an int).
_OPTIONS: dict[str, tuple[tuple[str, float, float, bool], ...]] = {
    "normal": (),
    "fa3_outliers": (("outlier_prob", 0.0, 1.0, False), ("outlier_std", 0.0, math.inf, False)),
    "outlier_channels": (("n_channels", 0, math.inf, True), ("channel_scale", -math.inf, math.inf, False),
                         ("channel_shift", -math.inf, math.inf, False)),
    "sinks": (("n_sinks", 0, math.inf, True), ("sink_scale", -math.inf, math.inf, False)),
    "head_ranges": (("head_range_log2", 0.0, math.inf, False),),
}


def _check_options(name: str, options: dict[str, object]) -> None:
    """`options` must be `name`'s knobs (`_OPTIONS`): counts ints >= 0, the rest finite numbers in range."""
    known = {k: (least, high, integer) for k, least, high, integer in _OPTIONS[name]}
    unknown = sorted(set(options) - set(known))
    if unknown:
        takes = f"expected some of {sorted(known)}" if known else "it takes none"
        raise TypeError(f"{name}: unexpected options {unknown}; {takes}")
    for k, v in options.items():
        least, high, integer = known[k]
        if integer:
            check_count(k, v, int(least))
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (least <= v <= high and math.isfinite(v)):
            raise ValueError(f"{k}: expected a finite number in [{least:g}, {high:g}], got {v!r}")


_BASE: dict[str, Callable] = {"fa3_outliers": _outliers}
_POST: dict[str, Callable] = {"outlier_channels": _outlier_channels, "sinks": _sinks, "head_ranges": _head_ranges}
DISTRIBUTIONS: tuple[str, ...] = ("normal", "fa3_outliers", "outlier_channels", "sinks", "head_ranges")


def make_qkv(
    name: str = "normal",
    *,
    batch: int = 1,
    seqlen_q: int = 128,
    seqlen_k: int | None = None,
    heads_q: int = 8,
    heads_kv: int | None = None,
    head_dim: int = 128,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
    **options: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(q, k, v)` from distribution `name` (see the module table), FA3 batched layout.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim).
    options: the distribution's knobs (outlier_prob, outlier_std; n_channels, channel_scale,
    channel_shift; n_sinks, sink_scale; head_range_log2).
    """
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {name!r}; expected one of {list(DISTRIBUTIONS)}")
    seqlen_k = seqlen_q if seqlen_k is None else seqlen_k
    heads_kv = heads_q if heads_kv is None else heads_kv
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim = (check_count(n, val, 1) for n, val in (
        ("batch", batch), ("seqlen_q", seqlen_q), ("seqlen_k", seqlen_k), ("heads_q", heads_q), ("heads_kv", heads_kv),
        ("head_dim", head_dim)))
    if heads_q % heads_kv:
        raise ValueError(f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    _check_options(name, options)
    gen = torch.Generator().manual_seed(seed)
    base = _BASE.get(name, _normal)
    base_opts = {k: options.pop(k) for k in ("outlier_prob", "outlier_std") if k in options}
    q = base((batch, seqlen_q, heads_q, head_dim), gen, **base_opts)
    k = base((batch, seqlen_k, heads_kv, head_dim), gen, **base_opts)
    v = base((batch, seqlen_k, heads_kv, head_dim), gen, **base_opts)
    if name in _POST:
        q, k, v = _POST[name](q, k, v, gen, **options)
    return tuple(t.to(device=device, dtype=dtype).contiguous() for t in (q, k, v))  # type: ignore[return-value]


def sample(name: str, shape: tuple[int, int, int, int], *, seed: int = 0, dtype: torch.dtype = torch.float32,
           device: torch.device | str = "cpu", **options: float) -> torch.Tensor:
    """One (batch, seqlen, heads, head_dim) tensor from distribution `name` (the `k` of `make_qkv`)."""
    if not isinstance(shape, (tuple, list, torch.Size)) or len(shape) != 4:
        raise ValueError(f"shape: expected (batch, seqlen, heads, head_dim), got {shape!r}")
    b, s, h, d = shape
    _, k, _ = make_qkv(name, batch=b, seqlen_q=1, seqlen_k=s, heads_q=h, heads_kv=h, head_dim=d,
                       dtype=dtype, device=device, seed=seed, **options)
    return k


def drift_series(
    steps: int,
    shape: tuple[int, ...],
    *,
    start: float = 1.0,
    growth: float = 1.02,
    jumps: dict[int, float] | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[list[torch.Tensor], list[float]]:
    """A sequence of N(0,1) tensors whose scale drifts: `start * growth^t`, times `jumps[t]` from step t on.

    Returns `(tensors, stds)`; used to show how delayed scaling lags a changing range.
    """
    check_count("steps", steps)
    for name, v in (("start", start), ("growth", growth), *((f"jumps[{t}]", f) for t, f in (jumps or {}).items())):
        check_positive(name, v)
    gen = torch.Generator().manual_seed(seed)
    jumps = jumps or {}
    scale, out, stds = start, [], []
    for t in range(steps):
        scale = scale * jumps.get(t, 1.0)
        stds.append(scale)
        out.append((torch.randn(shape, generator=gen) * scale).to(dtype))
        scale *= growth
    return out, stds
