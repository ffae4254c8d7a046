"""Scale strategies: granularity x amax source x options, and quantize/dequantize.

Convention (FA3's and vLLM's): the *descale* multiplies the FP8 value back,
`x ~= x_fp8.float() * descale`, with `descale = amax / fp8_max`. It is the
inverse of TransformerEngine's `scale`. Quantization divides by the descale
in float32 (as vLLM's KV-cache write does; its Q quantization multiplies by the
reciprocal, `fp8lab.kvcache.scaled_fp8_quant`, which can round an ulp apart),
clamps to the format's max (saturation, when asked) and rounds to
nearest-even with `fp8lab.formats.cast_to_fp8`.

Amax sources:

* `CurrentAmax()`: the amax of the tensor being quantized (dynamic scaling).
* `StaticAmax(amax)`: a calibrated amax (`fp8lab.scaling.calibrate`).
* `DelayedAmax(history_len, algo, margin)`: TransformerEngine's delayed
  scaling. **Stateful**: each `quantize(x, strategy)` uses the descale derived
  from the amaxes of *earlier* calls, then records `amax(x)` into
  `strategy.source.history`; `strategy.source.reset()` forgets. The first call
  uses `initial_descale` (TE starts from scale 1).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Literal

import torch

from fp8lab import formats
from fp8lab.scaling.granularity import Granularity, PerHead, PerTensor, as_4d, fold_batch

__all__ = [
    "CurrentAmax",
    "StaticAmax",
    "DelayedAmax",
    "ScaleStrategy",
    "check_finite",
    "compute_amax",
    "descale_from_amax",
    "quantize",
    "quantize_with_descale",
    "dequantize",
    "fake_quantize",
]


def check_finite(x: torch.Tensor, name: str = "x") -> None:
    """TypeError unless `x` is a float tensor wider than FP8 (what gets quantized); ValueError naming
    `name` if it holds NaN or ±inf (a scale computed from it would be NaN/inf, and a static scale
    would store NaN or saturate inf to ±448 without a word)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.element_size() == 1:
        is_fp8 = isinstance(x, torch.Tensor) and x.is_floating_point()
        got = str(x.dtype).replace("torch.", "") if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name}: expected a float tensor (bfloat16, float16, float32 or float64) to quantize, "
                        f"got {got}{' (already FP8)' if is_fp8 else ''}")
    # one reduction on the happy path: amax propagates NaN and inf
    if x.numel() and not bool(torch.isfinite(x.abs().amax())):
        n_nan = int(torch.isnan(x).sum())
        n_inf = int(torch.isinf(x).sum())
        raise ValueError(f"{name}: expected finite values to quantize, got {n_nan} NaN and {n_inf} inf values "
                         f"(no scale maps them to FP8)")


def compute_amax(x: torch.Tensor, granularity: Granularity = PerTensor(), *, name: str = "x") -> torch.Tensor:
    """Float64 amax of `x` in `granularity`'s compact shape (checks finiteness first)."""
    x4 = as_4d(x, name)
    check_finite(x4, name)
    rows = granularity.rows(x4).abs()
    if rows.shape[1] == 0:
        amax = torch.zeros(rows.shape[0], dtype=torch.float64, device=rows.device)
    else:
        amax = torch.nan_to_num(rows, nan=0.0).amax(dim=1)
    return granularity.reduce_rows(amax, tuple(x4.shape))


def _next_up_float32(d64: torch.Tensor) -> torch.Tensor:
    """Float32 rounding of d64 that is never below it (so amax / descale <= fp8_max holds)."""
    d32 = d64.float()
    low = d32.double() < d64
    if bool(low.any()):
        d32 = torch.where(low, torch.nextafter(d32, torch.full_like(d32, float("inf"))), d32)
    return d32


def _pow2_ceil(d: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= d (exact, via frexp), for d > 0."""
    mantissa, exponent = torch.frexp(d)  # d = m * 2**e, m in [0.5, 1)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    return torch.ldexp(torch.ones_like(d), exponent)


def descale_from_amax(
    amax: torch.Tensor | float,
    fp8_max: float,
    *,
    eps: float = 1e-12,
    power_of_two: bool = False,
    margin: int = 0,
) -> torch.Tensor:
    """Float32 descale `max(amax, eps) * 2**margin / fp8_max`, optionally rounded up to a power of two.

    `eps` keeps all-zero tensors at a finite positive descale. The float32 result
    is rounded up, never down, so `amax / descale <= fp8_max` exactly.
    """
    if not (eps > 0):
        raise ValueError(f"eps must be > 0, got {eps}")
    if not (fp8_max > 0):
        raise ValueError(f"fp8_max must be > 0, got {fp8_max}")
    a = torch.as_tensor(amax, dtype=torch.float64)
    if a.numel() and (not bool(torch.isfinite(a).all()) or bool((a < 0).any())):
        raise ValueError(f"amax must be finite and >= 0, got {a.flatten()[:8].tolist()}")
    d = a.clamp(min=eps) * (2.0**margin) / fp8_max
    if power_of_two:
        d = _pow2_ceil(d)
    d32 = _next_up_float32(d)
    if d32.numel() and not bool(torch.isfinite(d32).all()):
        raise ValueError(f"amax {a.max().item():.3g} is too large for a float32 descale")
    if d32.numel() and not bool((d32 > 0).all()):
        raise ValueError(f"descale underflowed to 0 in float32 (eps {eps}, fp8_max {fp8_max}); raise eps")
    return d32


@dataclass(frozen=True)
class CurrentAmax:
    """Dynamic scaling: the amax of the tensor being quantized."""

    name = "current"


@dataclass(frozen=True)
class StaticAmax:
    """A fixed amax (from calibration): a tensor of the granularity's compact shape with batch 1, or
    (`PerTensor` only) a float."""

    amax: torch.Tensor | float
    method: str = "given"

    def __post_init__(self) -> None:
        a = torch.as_tensor(self.amax, dtype=torch.float64).detach().clone()
        if a.numel() == 0 or not bool(torch.isfinite(a).all()) or bool((a < 0).any()):
            raise ValueError(f"StaticAmax: amax must be finite and >= 0, got {a.flatten()[:8].tolist()}")
        object.__setattr__(self, "amax", a)

    @property
    def name(self) -> str:
        return f"static-{self.method}"


@dataclass
class DelayedAmax:
    """TransformerEngine-style delayed scaling; mutable state (see the module docstring).

    history: float64 `(history_len, *compact)`, newest first (zeros until filled).
    descale: the float32 descale the next `quantize` call will use, or None before the first.
    """

    history_len: int = 1024
    algo: Literal["max", "most_recent"] = "max"
    margin: int = 0
    initial_descale: float = 1.0
    history: torch.Tensor | None = field(default=None, repr=False)
    descale: torch.Tensor | None = field(default=None, repr=False)
    steps: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.history_len, int) or self.history_len < 1:
            raise ValueError(f"DelayedAmax: history_len must be a positive int, got {self.history_len!r}")
        if self.algo not in ("max", "most_recent"):
            raise ValueError(f"DelayedAmax: algo must be 'max' or 'most_recent', got {self.algo!r}")
        if not isinstance(self.initial_descale, numbers.Real) or not 0 < self.initial_descale < math.inf:
            raise ValueError(f"DelayedAmax: initial_descale must be finite and > 0, got {self.initial_descale!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, int) or not -126 <= self.margin <= 127:
            # descale * 2**margin must stay a float32 (TransformerEngine's margin is a few binades)
            raise ValueError(f"DelayedAmax: margin must be an int in [-126, 127] (binades), got {self.margin!r}")

    @property
    def name(self) -> str:
        return f"delayed-{self.algo}-{self.history_len}"

    def reset(self) -> None:
        self.history, self.descale, self.steps = None, None, 0

    def current_descale(self, compact: tuple[int, ...], device: torch.device) -> torch.Tensor:
        if self.descale is None:
            return torch.full(compact, self.initial_descale, dtype=torch.float32, device=device)
        if tuple(self.descale.shape) != compact:
            raise ValueError(
                f"DelayedAmax: the history was recorded for descale shape {tuple(self.descale.shape)}, "
                f"this tensor needs {compact}; call reset() to start a new history"
            )
        return self.descale

    def record(self, amax: torch.Tensor, fp8_max: float, eps: float, power_of_two: bool) -> None:
        """Push `amax` into the history and derive the next descale (keeps the old one where amax is 0)."""
        if self.history is None:
            self.history = torch.zeros((self.history_len, *amax.shape), dtype=torch.float64, device=amax.device)
        self.history = torch.roll(self.history, 1, dims=0)
        self.history[0] = amax
        reduced = self.history.amax(dim=0) if self.algo == "max" else self.history[0]
        new = descale_from_amax(reduced, fp8_max, eps=eps, power_of_two=power_of_two, margin=self.margin)
        old = self.current_descale(tuple(amax.shape), amax.device)
        self.descale = torch.where(reduced > 0, new, old)
        self.steps += 1


AmaxSource = CurrentAmax | StaticAmax | DelayedAmax


@dataclass(frozen=True)
class ScaleStrategy:
    """How a tensor gets its FP8 scales.

    granularity: which elements share a scale (`PerTensor`, `PerHead`, `PerToken`, `PerBlock`, `PerChannel`).
    source: where amax comes from (`CurrentAmax`, `StaticAmax`, `DelayedAmax`).
    fmt: target FP8 format (anything `fp8lab.formats.get_format` takes).
    fp8_max: the value amax maps to; None = the format's max (vLLM's old dynamic KV scales used 200 / 100).
    power_of_two: round each descale up to a power of two (exact rescaling, torchao/MX style).
    eps: floor on amax, so all-zero groups get a finite positive descale.
    saturate: clamp to the format's ±max (448 for e4m3fn) before the cast, so an fp8_max below it
        leaves headroom for later values (vLLM's amax / 200); False lets overflow become NaN (e4m3fn
        has no inf), which is what a plain torch cast does on CUDA (torch 2.11).
    """

    granularity: Granularity = field(default_factory=PerTensor)
    source: AmaxSource = field(default_factory=CurrentAmax)
    fmt: str = "e4m3fn"
    fp8_max: float | None = None
    power_of_two: bool = False
    eps: float = 1e-12
    saturate: bool = True
    label: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.granularity, Granularity):
            raise TypeError(f"granularity: expected a Granularity, got {type(self.granularity).__name__}")
        if not isinstance(self.source, (CurrentAmax, StaticAmax, DelayedAmax)):
            raise TypeError(f"source: expected CurrentAmax, StaticAmax or DelayedAmax, got {type(self.source).__name__}")
        fmt = formats.get_format(self.fmt)
        if fmt.torch_dtype is None:
            raise ValueError(f"fmt: {fmt.name} has no torch dtype to cast to")
        if self.fp8_max is not None and (not isinstance(self.fp8_max, numbers.Real) or not 0 < self.fp8_max <= fmt.max):
            raise ValueError(f"fp8_max must be a number in (0, {fmt.max}] for {fmt.name}, got {self.fp8_max!r}")
        if not isinstance(self.eps, numbers.Real) or not 0 < self.eps < math.inf:
            raise ValueError(f"eps: the floor on amax must be a finite number > 0, got {self.eps!r}")
        if self.granularity.token_dependent and not isinstance(self.source, CurrentAmax):
            raise ValueError(
                f"a {self.granularity.name} granularity follows token positions, so only CurrentAmax makes sense, "
                f"got {type(self.source).__name__}"
            )

    @property
    def format(self) -> formats.FP8Format:
        return formats.get_format(self.fmt)

    @property
    def max(self) -> float:
        return float(self.fp8_max if self.fp8_max is not None else self.format.max)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        g = self.granularity
        gran = f"block{g.block_size}" if hasattr(g, "block_size") else g.name
        return f"{gran}/{self.source.name}" + ("/pow2" if self.power_of_two else "")


def quantize_with_descale(
    x: torch.Tensor,
    descale: torch.Tensor,
    granularity: Granularity = PerTensor(),
    *,
    fmt: str = "e4m3fn",
    saturate: bool = True,
    name: str = "x",
) -> torch.Tensor:
    """`cast_to_fp8(x / descale)` with a given compact descale; same shape as `x`, dtype of `fmt`.

    The division is done in float32 (like vLLM's KV-cache write, `fp8lab.kvcache.cache_fp8_quant`); the cast is the exact
    round-to-nearest-even of that float32 quotient, clamped first when `saturate`.
    """
    x4 = as_4d(x, name)
    check_finite(x4, name)
    d = granularity.expand(descale, tuple(x4.shape), f"{name} descale").float()
    y = x4.float() / d  # float32, as vLLM's cache write divides
    out = formats.cast_to_fp8(y, fmt, overflow="saturate" if saturate else "nonfinite")
    return out.reshape(x.shape)


def quantize(x: torch.Tensor, strategy: ScaleStrategy = ScaleStrategy(), *, name: str = "x") -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` to FP8 with `strategy`; returns `(x_fp8, descale)`.

    x: float tensor, (B, S, H, D) or (T, H, D). x_fp8: same shape, the format's torch dtype.
    descale: float32, the granularity's compact shape (see `fp8lab.scaling.granularity`);
    `dequantize(x_fp8, descale, strategy)` gives x back up to rounding.
    A `DelayedAmax` source is updated in place (see the module docstring).
    """
    if not isinstance(strategy, ScaleStrategy):
        raise TypeError(f"strategy: expected a ScaleStrategy, got {type(strategy).__name__}")
    x4 = as_4d(x, name)
    check_finite(x4, name)
    g, src = strategy.granularity, strategy.source
    opts = dict(eps=strategy.eps, power_of_two=strategy.power_of_two)
    if isinstance(src, CurrentAmax):
        descale = descale_from_amax(compute_amax(x4, g, name=name), strategy.max, **opts)
    elif isinstance(src, StaticAmax):
        amax = src.amax.to(x4.device)
        g.check_shape(amax, tuple(x4.shape), f"{name} static amax")
        descale = descale_from_amax(amax, strategy.max, **opts)
    else:
        folded = fold_batch(x4)
        compact = g.compact_shape(tuple(folded.shape))
        descale = src.current_descale(compact, x4.device)
        src.record(compute_amax(folded, g, name=name), strategy.max, **opts)
    x_fp8 = quantize_with_descale(x, descale, g, fmt=strategy.fmt, saturate=strategy.saturate, name=name)
    return x_fp8, descale


def dequantize(
    x_fp8: torch.Tensor,
    descale: torch.Tensor,
    granularity: Granularity | ScaleStrategy = PerTensor(),
    *,
    dtype: torch.dtype = torch.float32,
    name: str = "x_fp8",
) -> torch.Tensor:
    """`x_fp8 * descale` computed in float64, returned in `dtype`; any descale strides are fine.

    For `PerHead` the descale may be FA3's `(batch, heads_kv)` tensor, expanded,
    materialized or a transposed view.
    """
    if isinstance(granularity, ScaleStrategy):
        granularity = granularity.granularity
    x4 = as_4d(x_fp8, name)
    if not x4.is_floating_point() or x4.element_size() != 1:
        hint = f"; FP8 bits in {x4.dtype} are read as FP8 by x.view(torch.float8_e4m3fn)" if x4.element_size() == 1 else ""
        raise TypeError(f"{name}: expected an FP8 tensor (float8_e4m3fn or another float8 dtype), "
                        f"got {str(x4.dtype).replace('torch.', '')}{hint}")
    if (isinstance(descale, torch.Tensor) and descale.dim() == 2 and not isinstance(granularity, PerHead)
            and descale.shape[0] in (1, x4.shape[0]) and descale.shape[1] and x4.shape[2] % descale.shape[1] == 0):
        # a (batch, heads_kv) descale is FA3's (quantize_for_fa3's for every granularity): only PerHead reads it
        raise ValueError(f"{name} descale: shape {tuple(descale.shape)} is FA3's (batch, heads_kv) layout, which "
                         f"{type(granularity).__name__} does not read; dequantize it with "
                         f"PerHead({descale.shape[1]}) (quantize_for_fa3 returns this layout for every strategy)")
    d = granularity.expand(descale, tuple(x4.shape), f"{name} descale")
    return (x4.double() * d).reshape(x_fp8.shape).to(dtype)


def fake_quantize(x: torch.Tensor, strategy: ScaleStrategy = ScaleStrategy(), *, name: str = "x") -> torch.Tensor:
    """quantize then dequantize, in float64: what the tensor becomes after an FP8 round trip."""
    x_fp8, descale = quantize(x, strategy, name=name)
    return dequantize(x_fp8, descale, strategy, dtype=torch.float64)
