"""Static scales from calibration data: by max, by percentile, or by the lowest MSE.

All three look at the calibration tensors with the batch folded into the
tokens, one row of `|x|` per scale group (see `fp8lab.scaling.granularity`),
and return a `StaticAmax` whose compact shape has batch 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import torch

from fp8lab import formats
from fp8lab.scaling.granularity import Granularity, PerTensor, as_4d, fold_batch
from fp8lab.scaling.strategy import StaticAmax, check_finite, descale_from_amax

__all__ = ["calibrate", "calibration_mse", "row_percentile", "DEFAULT_MSE_RATIOS"]

# Candidate clipping ratios for the MSE search: amax_c = amax * ratio, 2^-4 .. 1, log-spaced.
DEFAULT_MSE_RATIOS = tuple(float(2.0 ** (-4 * (1 - i / 63))) for i in range(64))


def _stack_rows(samples: torch.Tensor | Iterable[torch.Tensor], granularity: Granularity) -> tuple[torch.Tensor, tuple[int, ...]]:
    """|rows| of all samples (batch folded into tokens), concatenated per group, and the compact shape."""
    tensors = [samples] if isinstance(samples, torch.Tensor) else list(samples)
    if not tensors:
        raise ValueError("calibrate: expected at least one calibration tensor, got none")
    folded = []
    for i, t in enumerate(tensors):
        x4 = fold_batch(as_4d(t, f"samples[{i}]"))
        check_finite(x4, f"samples[{i}]")
        if folded and x4.shape[2:] != folded[0].shape[2:]:
            raise ValueError(
                f"samples[{i}]: every calibration tensor needs the same (heads, head_dim) {tuple(folded[0].shape[2:])}, "
                f"got {tuple(x4.shape[2:])}"
            )
        folded.append(x4)
    x = torch.cat(folded, dim=1)
    return granularity.rows(x).abs(), granularity.compact_shape(tuple(x.shape))


def row_percentile(rows: torch.Tensor, percentile: float) -> torch.Tensor:
    """Per-row percentile (linear interpolation) of a (G, N) tensor, ignoring NaN padding."""
    if not (0 < percentile <= 100):
        raise ValueError(f"percentile must lie in (0, 100], got {percentile}")
    sorted_rows, _ = torch.sort(rows, dim=1)  # NaN sorts last
    n = (~torch.isnan(rows)).sum(dim=1)
    pos = (percentile / 100.0) * (n - 1).clamp(min=0).double()
    lo = pos.floor().long()
    hi = pos.ceil().long()
    frac = pos - lo.double()
    v_lo = sorted_rows.gather(1, lo[:, None])[:, 0]
    v_hi = sorted_rows.gather(1, hi[:, None])[:, 0]
    out = v_lo + (v_hi - v_lo) * frac
    return torch.where(n > 0, out, torch.zeros_like(out))


def calibration_mse(
    samples: torch.Tensor | Sequence[torch.Tensor],
    ratios: Sequence[float] = DEFAULT_MSE_RATIOS,
    granularity: Granularity = PerTensor(),
    *,
    fmt: str = "e4m3fn",
    fp8_max: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean squared FP8 round-trip error for each candidate amax `max|x| * ratio`.

    Returns `(amax_candidates, mse)`, both float64 `(len(ratios), groups)`:
    candidate amaxes and the MSE each gives, quantized as `quantize` would with that
    `StaticAmax` (the candidate maps to fp8_max; values beyond the format's max saturate).
    """
    rows, _ = _stack_rows(samples, granularity)
    fp8 = formats.get_format(fmt)
    top = float(fp8_max if fp8_max is not None else fp8.max)
    r = torch.as_tensor(list(ratios), dtype=torch.float64, device=rows.device)
    if r.numel() == 0 or not bool(((r > 0) & (r <= 1)).all()):
        raise ValueError(f"ratios must be a non-empty list in (0, 1], got {list(ratios)[:8]}")
    amax = torch.nan_to_num(rows, nan=0.0).amax(dim=1).clamp(min=1e-30)
    valid = ~torch.isnan(rows)
    x = torch.nan_to_num(rows, nan=0.0)
    counts = valid.sum(dim=1).clamp(min=1)
    mse = torch.empty(r.numel(), rows.shape[0], dtype=torch.float64, device=rows.device)
    cands = r[:, None] * amax[None, :]
    for i in range(r.numel()):
        d = descale_from_amax(cands[i], top)[:, None]  # float32, as `quantize` makes it
        y = x.float() / d  # as `quantize_with_descale`: saturates at the format's max, not at fp8_max
        err = formats.cast_to_fp8(y, fp8, overflow="saturate").double() * d.double() - x
        mse[i] = (err.square() * valid).sum(dim=1) / counts
    return cands, mse


def calibrate(
    samples: torch.Tensor | Iterable[torch.Tensor],
    granularity: Granularity = PerTensor(),
    method: Literal["max", "percentile", "mse"] = "max",
    *,
    percentile: float = 99.99,
    ratios: Sequence[float] = DEFAULT_MSE_RATIOS,
    fmt: str = "e4m3fn",
    fp8_max: float | None = None,
) -> StaticAmax:
    """A static amax from calibration tensors; use it as `ScaleStrategy(source=calibrate(...))`.

    method "max": the largest |x| seen (nothing saturates on the calibration data).
    method "percentile": that percentile of |x| (the rest saturates).
    method "mse": the candidate `max|x| * ratio` with the lowest FP8 round-trip MSE.
    Token-dependent granularities (per token, per block) cannot be static: ValueError.
    """
    if granularity.token_dependent:
        raise ValueError(f"calibrate: a {granularity.name} granularity follows token positions and cannot be static")
    if method == "max":
        rows, compact = _stack_rows(samples, granularity)
        amax = torch.nan_to_num(rows, nan=0.0).amax(dim=1) if rows.shape[1] else torch.zeros(rows.shape[0], dtype=torch.float64)
    elif method == "percentile":
        rows, compact = _stack_rows(samples, granularity)
        amax = row_percentile(rows, percentile)
    elif method == "mse":
        samples = [samples] if isinstance(samples, torch.Tensor) else list(samples)
        _, compact = _stack_rows(samples[:1], granularity)
        cands, mse = calibration_mse(samples, ratios, granularity, fmt=fmt, fp8_max=fp8_max)
        best = mse.argmin(dim=0)
        amax = cands.gather(0, best[None, :])[0]
    else:
        raise ValueError(f"calibrate: method must be 'max', 'percentile' or 'mse', got {method!r}")
    return StaticAmax(amax.reshape(compact).cpu(), method=method)
