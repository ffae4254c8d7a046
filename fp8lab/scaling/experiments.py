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
from fp8lab.scaling.strategy import ScaleStrategy, dequantize, descale_from_amax, quantize, quantize_with_descale

__all__ = ["METRIC_NAMES", "compare_strategies", "delayed_trace", "fallback_sweep", "head_spread_sweep"]

METRIC_NAMES: tuple[str, ...] = ("rmse", "rel_l2", "cosine", "sqnr")


def _clamped(x: torch.Tensor, descale: torch.Tensor, strat: ScaleStrategy) -> float:
    """Fraction of elements with |x / descale| beyond the format's max (clamped by saturation, NaN without
    it); an fp8_max below the format's max leaves headroom, so fp8_max itself clamps nothing."""
    x4 = x if x.dim() == 4 else x[None]
    d = strat.granularity.expand(descale, tuple(x4.shape)).float()
    return (x4.float().abs() / d > strat.format.max).double().mean().item()


def compare_strategies(
    tensors: Mapping[str, torch.Tensor],
    strategies: Mapping[str, ScaleStrategy],
    metric_names: Sequence[str] = METRIC_NAMES,
) -> pd.DataFrame:
    """Round-trip error of every strategy on every tensor: columns tensor, strategy, one per metric,
    sqnr_worst_head (the SQNR of the worst head: a whole-tensor metric is dominated by the
    heads with the most energy and hides what happens to small heads), energy_exact_at_max (the
    share of the tensor's energy in elements stored as +-fp8_max to float32 precision: a current
    scale puts each group's largest element there, exactly but for the descale's rounding) and
    sqnr_rest (the SQNR of every other element).

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
            row["sqnr_worst_head"] = float(metrics.sqnr(back, ref, per_head=True).min())
            top = (x8.float().abs() == strat.max) & ((back - ref).abs() <= 2.0**-20 * ref.abs())  # not the clamped
            row["energy_exact_at_max"] = float(ref[top].square().sum() / ref.square().sum())
            row["sqnr_rest"] = float(metrics.sqnr(back[~top], ref[~top]))
            rows.append(row)
    return pd.DataFrame(rows)


def delayed_trace(series: Sequence[torch.Tensor], strategies: Mapping[str, ScaleStrategy]) -> pd.DataFrame:
    """Quantize a sequence of tensors with each (stateful) strategy, step by step.

    Columns: step, strategy, descale (max over groups), ideal (amax/fp8_max of this step's tensor),
    saturated (fraction of elements beyond the format's max, i.e. clamped), rel_l2, sqnr.
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
                "saturated": _clamped(x, d, strat),
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
    q_over_k: float = 1.0,
) -> pd.DataFrame:
    """The cost of vLLM's q_scale defect: attention error as Q's range sweeps `q_amaxes`.

    K and V get calibrated per-tensor checkpoint scales (amax/448); the checkpoint has no q_scale.
    q_saturated is the fraction of Q's elements beyond 448 · q_descale (clamped).
    For each target amax, Q and K are both rescaled to it (the premise of the k_scale fallback is
    that a layer's Q and K share a range) and the softmax scale is divided by the product of the
    two factors, so the exact attention is the same at every point and only what FP8 sees moves.
    q_over_k: Q's amax is `q_over_k` times K's (the premise broken): K is rescaled to the target
    / q_over_k, Q to the target, so `q_amax` stays Q's.
    Q is quantized with the q descale from `resolve_checkpoint_scales` in each mode, and with
    the ideal per-tensor descale amax/448.
    Columns: q_amax, mode (ideal / intended / vllm), q_descale, rel_l2 and sqnr of the attention
    output against float64 attention on the unquantized inputs.
    """
    from fp8lab.reference import attention_exact  # the attention reference lives there

    rows = []
    e4m3_max = ScaleStrategy().max
    heads_kv = k.shape[2]
    base_scale = q.shape[-1] ** -0.5
    if not q_over_k > 0:
        raise ValueError(f"q_over_k: expected a ratio > 0, got {q_over_k}")
    for target in q_amaxes:
        cq = target / q.double().abs().max().item()
        ck = target / q_over_k / k.double().abs().max().item()
        qs, ks = q.double() * cq, k.double() * ck
        scale = base_scale / (cq * ck)
        ref = attention_exact(qs, ks, v.double(), causal=causal, softmax_scale=scale)
        # calibrated per-tensor scales amax / 448, as float32 rounded up (nothing saturates)
        k_scale = descale_from_amax(ks.abs().max(), e4m3_max).item()
        v_scale = descale_from_amax(v.double().abs().max(), e4m3_max).item()
        ckpt = {"k_scale": k_scale, "v_scale": v_scale}
        choices = {"ideal": descale_from_amax(qs.abs().max(), e4m3_max).item()}
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
            out = attention_exact(q8, k8, v8, causal=causal, softmax_scale=scale, q_descale=qd.expand(b, heads_kv), k_descale=kd, v_descale=vd)
            rows.append({
                "q_amax": target,
                "q_over_k": q_over_k,
                "mode": mode,
                "q_descale": float(qd),
                "q_saturated": (qs.abs() / float(qd) > e4m3_max).double().mean().item(),
                "rel_l2": metrics.rel_l2(out, ref),
                "sqnr": metrics.sqnr(out, ref),
            })
    return pd.DataFrame(rows)


def head_spread_sweep(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spreads_log2: Sequence[float],
    *,
    causal: bool = True,
) -> pd.DataFrame:
    """Per-tensor against per-KV-head scales as the KV heads' ranges spread apart (notebook 03, section 1).

    q (batch, seqlen, heads_q, d), k and v (batch, seqlen, heads_kv, d), float. For each spread `s`
    (binades), K and V of head j are multiplied by `data.head_factors(heads_kv, s / 2)[j]` and the
    query heads that read it divided by it: the scores and attention pattern are unchanged, so any
    change in the relative error comes from FP8 alone. Q, K and V are quantized for FA3
    (`quantize_for_fa3`) per tensor and per (sequence, kv head), and exact attention runs on the FP8
    inputs. Columns: spread (binades), scales, rel_l2 (whole output), worst head rel_l2.
    """
    from fp8lab.data import head_factors
    from fp8lab.reference import attention_exact
    from fp8lab.scaling.fa3 import quantize_for_fa3
    from fp8lab.scaling.granularity import PerHead, PerTensor

    heads_q, heads_kv = q.shape[2], k.shape[2]
    rows = []
    for s in spreads_log2:
        f = head_factors(heads_kv, s / 2).double()[None, None, :, None]
        qs, ks, vs = q.double() / f.repeat_interleave(heads_q // heads_kv, dim=2), k.double() * f, v.double() * f
        ref = attention_exact(qs, ks, vs, causal=causal)
        for name, sq, skv in (("per tensor", ScaleStrategy(PerTensor()), ScaleStrategy(PerTensor())),
                              ("per KV head", ScaleStrategy(PerHead(heads_kv)), ScaleStrategy(PerHead()))):
            (q8, qd), (k8, kd), (v8, vd) = (quantize_for_fa3(t, st, heads_kv) for t, st in ((qs, sq), (ks, skv), (vs, skv)))
            out = attention_exact(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
            rows.append({"spread (binades)": s, "scales": name, "rel_l2": metrics.rel_l2(out, ref),
                         "worst head rel_l2": float(metrics.rel_l2(out, ref, per_head=True).max())})
    return pd.DataFrame(rows)
