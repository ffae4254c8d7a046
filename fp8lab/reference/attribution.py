"""Which step of FA3's FP8 forward costs how much: one step at a time against exact attention."""

from __future__ import annotations

import math
from typing import Callable

import torch

from fp8lab.metrics import resolve_metric
from fp8lab.reference.exact import attention_exact
from fp8lab.reference.fa3 import STEP_NAMES, AccumulatorModel, FA3Steps, attention_fa3_fp8
from fp8lab.reference.inputs import quantize_qkv

__all__ = ["ATTRIBUTION_STEPS", "attribute_error"]

# The input casts, the P cast, the accumulator model, float32 arithmetic and the bf16 output.
ATTRIBUTION_STEPS: tuple[str, ...] = ("q", "k", "v", "p", "accumulator", "fp32", "output")


def attribute_error(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    granularity: str = "head",
    accumulator: AccumulatorModel | None = AccumulatorModel(),
    metric: str | Callable = "rel_l2",
    causal: bool = False,
    softmax_scale: float | None = None,
    **fa3_options,
) -> dict[str, float]:
    """Error of each step alone (all others exact), and of all together, against exact attention.

    q, k, v: float tensors in FA3's batched layout; they are quantized with
    amax-based descales (`quantize_qkv`, `granularity` "head" or "tensor").
    Returns {step: error} for `ATTRIBUTION_STEPS` (the accumulator step only
    when `accumulator` is given), "total" (every step on) and "quadrature_sum"
    sqrt(sum error^2): independent error sources add in quadrature, so for
    rel_l2/rmse the quadrature sum should be close to the total.
    """
    fn = resolve_metric(metric)
    qq = quantize_qkv(q, k, v, granularity)
    ref = attention_exact(q, k, v, causal=causal, softmax_scale=softmax_scale)
    common = dict(causal=causal, softmax_scale=softmax_scale, **fa3_options)
    descales = (qq.q_descale, qq.k_descale, qq.v_descale)
    errors: dict[str, float] = {}
    for name in ATTRIBUTION_STEPS:
        if name == "accumulator":
            if accumulator is None:
                continue
            out = attention_fa3_fp8(q, k, v, *descales, steps=FA3Steps.exact(), accumulator=accumulator, **common)
        else:
            assert name in STEP_NAMES
            out = attention_fa3_fp8(q, k, v, *descales, steps=FA3Steps.only(name), **common)
        errors[name] = float(fn(out, ref))
    out = attention_fa3_fp8(q, k, v, *descales, steps=FA3Steps(), accumulator=accumulator, **common)
    errors["total"] = float(fn(out, ref))
    errors["quadrature_sum"] = math.sqrt(sum(e * e for n, e in errors.items() if n != "total"))
    return errors
