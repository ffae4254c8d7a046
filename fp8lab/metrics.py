"""Error metrics for attention outputs, computed in float64, with per-head breakdowns.

Every metric takes `x` (the result under test) and `ref` (the reference) of
the same shape. With `per_head=True` the heads axis (`head_axis`, -2 in FA3's
layouts `(batch, seqlen, heads, dim)` and `(total, heads, dim)`) is kept and a
float64 tensor `(heads,)` is returned; otherwise a Python float.

| metric | formula | perfect |
|---|---|---|
| rmse | sqrt(mean((x - ref)^2)) | 0 |
| rel_l2 | ||x - ref||_2 / ||ref||_2 | 0 |
| max_abs | max |x - ref| | 0 |
| rel_l1 | sum |x - ref| / sum |ref| (SageAttention's) | 0 |
| cosine | <x, ref> / (||x|| ||ref||) | 1 |
| sqnr | 10 log10(sum ref^2 / sum (x - ref)^2), dB (torchao's) | inf |

Against an all-zero `ref` (or head) the ratios are 0 / 0 or a / 0: a perfect match (x all
zero too) scores perfect (rel_l2 and rel_l1 0, cosine 1, sqnr inf), any nonzero x the worst
(rel_l2 and rel_l1 inf, cosine 0, sqnr -inf). NaN in x or ref still gives NaN, and so does
an inf in both at the same place (inf - inf).
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["METRICS", "cosine", "error_table", "max_abs", "rel_l1", "rel_l2", "resolve_metric", "rmse", "sqnr",
           "ulps_apart"]

_OK_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _prepare(x: torch.Tensor, ref: torch.Tensor, per_head: bool, head_axis: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Both as float64 on ref's device, flattened to (heads, n) with per_head, else (1, n)."""
    for name, t in (("x", x), ("ref", ref)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _OK_DTYPES:
            raise TypeError(
                f"{name}: expected a float16/bfloat16/float32/float64 tensor, got {str(t.dtype).replace('torch.', '')}"
                " (dequantize FP8 tensors first)"
            )
    if x.shape != ref.shape:
        raise ValueError(f"x and ref must have the same shape, got {tuple(x.shape)} and {tuple(ref.shape)}")
    if ref.numel() == 0:
        raise ValueError("x and ref are empty; a metric of nothing is undefined")
    x64 = x.detach().to(device=ref.device, dtype=torch.float64)
    r64 = ref.detach().to(torch.float64)
    if not per_head:
        return x64.reshape(1, -1), r64.reshape(1, -1)
    if not -ref.dim() <= head_axis < ref.dim():
        raise ValueError(f"head_axis {head_axis} is out of range for a {ref.dim()}-D tensor")
    return x64.movedim(head_axis, 0).reshape(ref.shape[head_axis], -1), r64.movedim(head_axis, 0).reshape(ref.shape[head_axis], -1)


def _ratio(num: torch.Tensor, den: torch.Tensor, if_both_zero: float) -> torch.Tensor:
    """num / den, with `if_both_zero` where num and den are both 0 (a / 0 stays inf, NaN stays NaN)."""
    return torch.where((num == 0) & (den == 0), torch.full_like(num, if_both_zero), num / den)


def _finish(v: torch.Tensor, per_head: bool) -> torch.Tensor | float:
    return v if per_head else float(v[0])


def rmse(x: torch.Tensor, ref: torch.Tensor, *, per_head: bool = False, head_axis: int = -2) -> torch.Tensor | float:
    """Root mean square error sqrt(mean((x - ref)^2)), in x's units."""
    a, r = _prepare(x, ref, per_head, head_axis)
    return _finish((a - r).square().mean(dim=1).sqrt(), per_head)


def rel_l2(x: torch.Tensor, ref: torch.Tensor, *, per_head: bool = False, head_axis: int = -2) -> torch.Tensor | float:
    """Relative L2 error ||x - ref|| / ||ref|| (where ref is all zeros: 0 if x is too, else inf)."""
    a, r = _prepare(x, ref, per_head, head_axis)
    return _finish(_ratio(torch.linalg.vector_norm(a - r, dim=1), torch.linalg.vector_norm(r, dim=1), 0.0), per_head)


def max_abs(x: torch.Tensor, ref: torch.Tensor, *, per_head: bool = False, head_axis: int = -2) -> torch.Tensor | float:
    """Largest absolute difference max |x - ref|."""
    a, r = _prepare(x, ref, per_head, head_axis)
    return _finish((a - r).abs().amax(dim=1), per_head)


def rel_l1(x: torch.Tensor, ref: torch.Tensor, *, per_head: bool = False, head_axis: int = -2) -> torch.Tensor | float:
    """Relative L1 error sum |x - ref| / sum |ref| (SageAttention's metric; where ref is all zeros: 0 if x is
    too, else inf)."""
    a, r = _prepare(x, ref, per_head, head_axis)
    return _finish(_ratio((a - r).abs().sum(dim=1), r.abs().sum(dim=1), 0.0), per_head)


def cosine(x: torch.Tensor, ref: torch.Tensor, *, per_head: bool = False, head_axis: int = -2) -> torch.Tensor | float:
    """Cosine similarity <x, ref> / (||x|| ||ref||) of the flattened tensors (1 = same direction;
    1 where both are all zeros, 0 where only one is)."""
    a, r = _prepare(x, ref, per_head, head_axis)
    num = (a * r).sum(dim=1)
    norm_a, norm_r = torch.linalg.vector_norm(a, dim=1), torch.linalg.vector_norm(r, dim=1)
    both_zero = (norm_a == 0) & (norm_r == 0)
    return _finish(torch.where(both_zero, torch.ones_like(num), _ratio(num, norm_a * norm_r, 0.0)), per_head)


def sqnr(x: torch.Tensor, ref: torch.Tensor, *, per_head: bool = False, head_axis: int = -2) -> torch.Tensor | float:
    """Signal-to-quantization-noise ratio 10 log10(sum ref^2 / sum (x - ref)^2) in dB (inf when x == ref, all
    zeros included; -inf when ref is all zeros and x is not)."""
    a, r = _prepare(x, ref, per_head, head_axis)
    noise = (a - r).square().sum(dim=1)
    signal = r.square().sum(dim=1)
    return _finish(10.0 * torch.log10(_ratio(signal, noise, float("inf"))), per_head)


METRICS: dict[str, Callable[..., torch.Tensor | float]] = {
    "rmse": rmse,
    "rel_l2": rel_l2,
    "max_abs": max_abs,
    "rel_l1": rel_l1,
    "cosine": cosine,
    "sqnr": sqnr,
}


def ulps_apart(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Elementwise, how many representable values apart x and ref are (0: the same value; -0.0 and
    +0.0 count as one), for two bfloat16 or float16 tensors of the same shape and dtype. int64.

    "The same bits up to summation order" reads `ulps_apart(out, ref).max() <= 1`. NaN and ±inf
    are counted by their bit patterns like any value (two NaNs with the same bits are 0 apart), so
    where NaN matters, check for it on its own.
    """
    for name, t in (("x", x), ("ref", ref)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a bfloat16 or float16 torch.Tensor, got {type(t).__name__}")
    if x.shape != ref.shape or x.dtype != ref.dtype or x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"expected two bfloat16 or float16 tensors of one shape, got {x.dtype} {tuple(x.shape)} "
                         f"and {ref.dtype} {tuple(ref.shape)}")

    def on_a_line(t: torch.Tensor) -> torch.Tensor:  # bit patterns in the values' order
        bits = t.contiguous().view(torch.int16).to(torch.int64)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (on_a_line(x) - on_a_line(ref)).abs()


def error_table(x: torch.Tensor, ref: torch.Tensor, metrics: tuple[str, ...] | None = None) -> dict[str, float]:
    """Every metric (or the named ones) of x against ref, as {name: float}."""
    if isinstance(metrics, str):  # iterating "rmse" would ask for metrics 'r', 'm', 's', 'e'
        raise TypeError(f"metrics: expected a tuple of metric names or None, got the str {metrics!r}; "
                        f"pass ({metrics!r},)")
    names = tuple(METRICS) if metrics is None else metrics
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; expected names from {tuple(METRICS)}")
    return {n: METRICS[n](x, ref) for n in names}


def resolve_metric(metric: str | Callable[..., torch.Tensor | float]) -> Callable[..., torch.Tensor | float]:
    """A metric function from its name or itself."""
    if callable(metric):
        return metric
    if not isinstance(metric, str) or metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {tuple(METRICS)}")
    return METRICS[metric]


