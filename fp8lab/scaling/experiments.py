"""Experiments the notebooks run (and the tests check): tables of errors per strategy.

Each returns a pandas DataFrame with one row per measurement; errors come from
`fp8lab.metrics` (x = the FP8 round trip or FP8 attention, ref = the float64 truth).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import torch

from fp8lab import metrics
from fp8lab.scaling.checkpoint import resolve_checkpoint_scales
from fp8lab.scaling.granularity import PerHead
from fp8lab.scaling.strategy import ScaleStrategy, dequantize, quantize, quantize_with_descale

__all__ = ["METRIC_NAMES", "compare_strategies", "delayed_trace", "fallback_sweep"]

METRIC_NAMES: tuple[str, ...] = ("rmse", "rel_l2", "cosine", "sqnr")


def compare_strategies(
    tensors: Mapping[str, torch.Tensor],
    strategies: Mapping[str, ScaleStrategy],
    metric_names: Sequence[str] = METRIC_NAMES,
) -> pd.DataFrame:
    """Round-trip error of every strategy on every tensor: columns tensor, strategy, one per metric.

    Static strategies must already hold their calibrated amax; delayed ones are reset before each tensor
    (so they show their first-call behaviour: the initial descale).
    """
    rows = []
    for tname, x in tensors.items():
        ref = x.double()
        for sname, strat in strategies.items():
            if hasattr(strat.source, "reset"):
                strat.source.reset()
            x8, d = quantize(x, strat, name=tname)
            back = dequantize(x8, d, strat, dtype=torch.float64)
            row = {"tensor": tname, "strategy": sname}
            row.update({m: metrics.METRICS[m](back, ref) for m in metric_names})
            rows.append(row)
    return pd.DataFrame(rows)


def delayed_trace(series: Sequence[torch.Tensor], strategies: Mapping[str, ScaleStrategy]) -> pd.DataFrame:
    """Quantize a sequence of tensors with each (stateful) strategy, step by step.

    Columns: step, strategy, descale (max over groups), ideal (amax/fp8_max of this step's tensor),
    saturated (fraction of elements clamped), rel_l2, sqnr.
    """
    rows = []
    for sname, strat in strategies.items():
        if hasattr(strat.source, "reset"):
            strat.source.reset()
        for t, x in enumerate(series):
            x8, d = quantize(x, strat)
            back = dequantize(x8, d, strat, dtype=torch.float64)
            ideal = x.double().abs().max().item() / strat.max
            rows.append({
                "step": t,
                "strategy": sname,
                "descale": d.double().max().item(),
                "ideal": ideal,
                "saturated": (x8.float().abs() >= strat.max).double().mean().item(),
                "rel_l2": metrics.rel_l2(back, x.double()),
                "sqnr": metrics.sqnr(back, x.double()),
            })
    return pd.DataFrame(rows)


def fallback_sweep(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_amaxes: Sequence[float],
    *,
    causal: bool = False,
) -> pd.DataFrame:
    """The cost of vLLM's q_scale defect: attention error as Q's range sweeps `q_amaxes`.

    K and V get calibrated per-tensor checkpoint scales (amax/448); the checkpoint has no q_scale.
    For each target amax, Q is rescaled to it (as if a layer's Q and K shared that range, the premise
    of the k_scale fallback, K is rescaled too) and quantized with the q descale from
    `resolve_checkpoint_scales` in each mode, plus the ideal per-tensor q descale.
    Columns: q_amax, mode (ideal / intended / vllm), q_descale, rel_l2 and sqnr of the attention
    output against float64 attention on the unquantized inputs.
    """
    from fp8lab.reference import attention_exact  # the attention reference lives there

    rows = []
    e4m3_max = ScaleStrategy().max
    heads_kv = k.shape[2]
    for target in q_amaxes:
        qs = q.double() * (target / q.double().abs().max())
        ks = k.double() * (target / k.double().abs().max())
        ref = attention_exact(qs, ks, v.double(), causal=causal)
        k_scale = ks.abs().max().item() / e4m3_max
        v_scale = v.double().abs().max().item() / e4m3_max
        ckpt = {"k_scale": k_scale, "v_scale": v_scale}
        choices = {"ideal": qs.abs().max().item() / e4m3_max}
        for mode in ("intended", "vllm"):
            choices[mode] = resolve_checkpoint_scales(ckpt, emulate=mode, warn=False).q
        k8 = quantize_with_descale(ks, torch.tensor(k_scale, dtype=torch.float32))
        v8 = quantize_with_descale(v, torch.tensor(v_scale, dtype=torch.float32))
        b = q.shape[0]
        kd = torch.tensor(k_scale, dtype=torch.float32).expand(b, heads_kv)
        vd = torch.tensor(v_scale, dtype=torch.float32).expand(b, heads_kv)
        for mode, qscale in choices.items():
            qd = torch.tensor(qscale, dtype=torch.float32)
            q8 = quantize_with_descale(qs, qd)
            out = attention_exact(q8, k8, v8, causal=causal, q_descale=qd.expand(b, heads_kv), k_descale=kd, v_descale=vd)
            rows.append({
                "q_amax": target,
                "mode": mode,
                "q_descale": float(qd),
                "q_saturated": (q8.float().abs() >= e4m3_max).double().mean().item(),
                "rel_l2": metrics.rel_l2(out, ref),
                "sqnr": metrics.sqnr(out, ref),
            })
    return pd.DataFrame(rows)
