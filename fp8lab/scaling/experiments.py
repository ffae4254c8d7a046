"""Experiments the notebooks run (and the tests check): tables of errors per strategy.

Each returns a pandas DataFrame (or a dict) whose columns its docstring names; errors come
from `fp8lab.metrics` (x = the FP8 round trip or FP8 attention, ref = the float64 truth).
Notebook 02 (scale strategies) uses the functions from `round_trip_summary` to
`percentile_sqnr`, notebook 03 (per-head scales and strides) those from
`per_head_round_trip` on, with `head_spread_sweep` and `fallback_sweep`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import torch

from fp8lab import formats, metrics
from fp8lab.layout import check_positive, check_values
from fp8lab.scaling.calibration import DEFAULT_MSE_RATIOS, calibrate
from fp8lab.scaling.checkpoint import resolve_checkpoint_scales
from fp8lab.scaling.fa3 import (
    as_contiguous_reads,
    as_kernel_reads,
    descale_from_heads,
    descale_from_scalar,
    descale_from_tokens,
    quantize_for_fa3,
)
from fp8lab.scaling.granularity import Granularity, PerBlock, PerChannel, PerHead, PerTensor, PerToken
from fp8lab.scaling.strategy import (
    CurrentAmax,
    DelayedAmax,
    ScaleStrategy,
    StaticAmax,
    check_finite,
    compute_amax,
    dequantize,
    descale_from_amax,
    quantize,
    quantize_with_descale,
)

__all__ = [
    "METRIC_NAMES",
    "NOT_FA3",
    "attention_layouts_agree",
    "best_and_worst",
    "by_key",
    "calibration_picks",
    "checkpoint_provenance",
    "compare_on_distributions",
    "compare_strategies",
    "current_spread",
    "delayed_summary",
    "delayed_trace",
    "descale_layout_table",
    "exact_max_split",
    "fa3_can_take",
    "fallback_q_over_k",
    "fallback_sweep",
    "gqa_descale_reads",
    "gqa_q_scale_cost",
    "head_spread_sweep",
    "k_heads_vs_e4m3",
    "log2_ratios",
    "per_head_round_trip",
    "percentile_sqnr",
    "pow2_cost",
    "round_trip_summary",
    "strategy_set",
    "token_reduction",
    "worst_head_gain",
]

METRIC_NAMES: tuple[str, ...] = ("rmse", "rel_l2", "cosine", "sqnr")


def _clamped(x: torch.Tensor, descale: torch.Tensor, strat: ScaleStrategy) -> float:
    """Fraction of elements with |x / descale| beyond the format's max (clamped by saturation, NaN without
    it); an fp8_max below the format's max leaves headroom, so fp8_max itself clamps nothing."""
    x4 = x if x.dim() == 4 else x[None]
    d = strat.granularity.expand(descale, tuple(x4.shape)).float()
    return (x4.float().abs() / d > strat.format.max).double().mean().item()


NOT_FA3 = " (not FA3)"  # appended to the name of a strategy whose descale FA3 cannot take


def fa3_can_take(strategy: ScaleStrategy) -> bool:
    """Whether FA3 (and vLLM) can take `strategy`'s descale: its descales are `(batch, heads_kv)`, so per
    tensor (expanded) or per head, of a tensor whose heads are KV heads, but not per token, per block or
    per channel (`quantize_for_fa3` reduces token and block scales to it, at a cost)."""
    if not isinstance(strategy, ScaleStrategy):
        raise TypeError(f"strategy: expected a ScaleStrategy, got {type(strategy).__name__}")
    return isinstance(strategy.granularity, (PerTensor, PerHead))


def _check_strategies(strategies: Mapping[str, ScaleStrategy]) -> None:
    """`strategies` must map names to ScaleStrategy objects (a list or a bare name has no names)."""
    if not isinstance(strategies, Mapping):
        raise TypeError(f"strategies: expected a dict of name -> ScaleStrategy, got {type(strategies).__name__}")
    bad = {name: type(s).__name__ for name, s in strategies.items() if not isinstance(s, ScaleStrategy)}
    if bad:
        raise TypeError(f"strategies: expected a ScaleStrategy per name, got {bad}")


def _source_kind(strategy: ScaleStrategy) -> str:
    return {CurrentAmax: "current", StaticAmax: "static", DelayedAmax: "delayed"}[type(strategy.source)]


def compare_strategies(
    tensors: Mapping[str, torch.Tensor],
    strategies: Mapping[str, ScaleStrategy],
    metric_names: Sequence[str] = METRIC_NAMES,
) -> pd.DataFrame:
    """Round-trip error of every strategy on every tensor: columns tensor, strategy, source ("current",
    "static" or "delayed"), power_of_two, fa3 (`fa3_can_take`: a descale FA3 accepts), one per metric,
    sqnr_worst_head (the SQNR of the worst head: a whole-tensor metric is dominated by the
    heads with the most energy and hides what happens to small heads), energy_exact_at_max (the
    share of the tensor's energy in elements stored as +-fp8_max to float32 precision: a current
    scale puts each group's largest element there, exactly but for the descale's rounding) and
    sqnr_rest (the SQNR of every other element).

    Static strategies must already hold their calibrated amax; delayed ones are reset before each tensor
    (so they show their first-call behaviour: the initial descale).
    """
    unknown = [m for m in metric_names if m not in metrics.METRICS]
    if isinstance(metric_names, str) or unknown:
        raise ValueError(f"metric_names: expected names from {METRIC_NAMES}, got {metric_names!r}")
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors: expected a dict of name -> float tensor, got {type(tensors).__name__}")
    _check_strategies(strategies)
    rows = []
    for tname, x in tensors.items():
        check_finite(x, tname)
        ref = x.double()
        for sname, strat in strategies.items():
            if hasattr(strat.source, "reset"):
                strat.source.reset()
            x8, d = quantize(x, strat, name=tname)
            back = dequantize(x8, d, strat, dtype=torch.float64)
            row = {"tensor": tname, "strategy": sname, "source": _source_kind(strat),
                   "power_of_two": strat.power_of_two, "fa3": fa3_can_take(strat)}
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
    if isinstance(series, torch.Tensor):  # iterating one tensor would make each batch row a step
        raise TypeError(f"series: expected a list of tensors, one per step, got one tensor of shape "
                        f"{tuple(series.shape)}; pass [x] for a single step")
    _check_strategies(strategies)
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
    check_positive("q_over_k", q_over_k)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_finite(t, name)
    for name, t in (("q", q), ("k", k)):
        if not bool((t != 0).any()):  # its range is rescaled to each target amax: 0 cannot be
            raise ValueError(f"{name}: expected a tensor with a nonzero value (its range is rescaled), got all zeros")
    e4m3_max = ScaleStrategy().max
    heads_kv = k.shape[2]
    base_scale = q.shape[-1] ** -0.5
    q_amaxes = check_values("q_amaxes", q_amaxes, "[0.1, 1.0, 10.0]")
    bad = [a for a in q_amaxes if not 0 < a < math.inf]
    if bad:  # 0 divides by zero below; a negative amax flips Q's sign
        raise ValueError(f"q_amaxes: expected finite amaxes > 0, got {bad[0]!r} in {q_amaxes}")
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
    inputs. Columns: spread (binades), scales, rel_l2 (whole output), worst head rel_l2, and largest head
    rel_l2 (the worst of the query heads that read the KV head with the largest factor: the largest K and V,
    so the largest share of the output's norm, and the smallest Q).
    """
    from fp8lab.data import head_factors
    from fp8lab.reference import attention_exact
    from fp8lab.scaling.fa3 import quantize_for_fa3
    from fp8lab.scaling.granularity import PerHead, PerTensor

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or not k.shape[2] or q.shape[2] % k.shape[2] \
            or k.shape[2] != v.shape[2]:
        raise ValueError(f"head_spread_sweep: expected q (b, s, heads_q, d), k/v (b, s, heads_kv, d) with heads_q a "
                         f"multiple of heads_kv, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    heads_q, heads_kv = q.shape[2], k.shape[2]
    rows = []
    for s in check_values("spreads_log2", spreads_log2, "(0, 8, 16)"):
        f = head_factors(heads_kv, s / 2).double()[None, None, :, None]
        largest = torch.arange(heads_q) // (heads_q // heads_kv) == int(f.flatten().argmax())  # its query heads
        qs, ks, vs = q.double() / f.repeat_interleave(heads_q // heads_kv, dim=2), k.double() * f, v.double() * f
        ref = attention_exact(qs, ks, vs, causal=causal)
        for name, sq, skv in (("per tensor", ScaleStrategy(PerTensor()), ScaleStrategy(PerTensor())),
                              ("per KV head", ScaleStrategy(PerHead(heads_kv)), ScaleStrategy(PerHead()))):
            (q8, qd), (k8, kd), (v8, vd) = (quantize_for_fa3(t, st, heads_kv) for t, st in ((qs, sq), (ks, skv), (vs, skv)))
            out = attention_exact(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
            per_head = metrics.rel_l2(out, ref, per_head=True)
            rows.append({"spread (binades)": s, "scales": name, "rel_l2": metrics.rel_l2(out, ref),
                         "worst head rel_l2": float(per_head.max()),
                         "largest head rel_l2": float(per_head[largest].max())})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- notebook 02: scale strategies


def log2_ratios(n: int, binades: float) -> list[float]:
    """`n` ratios log-spaced from `2**-binades` up to 1: candidate clipping ratios `amax_c / max|x|`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n: expected an int >= 2 (the first ratio and 1), got {n!r}")
    if not 0 < binades < math.inf:
        raise ValueError(f"binades: expected a finite number > 0, got {binades!r}")
    return [2.0 ** (-binades * (1 - i / (n - 1))) for i in range(n)]


def round_trip_summary(x: torch.Tensor, strategy: ScaleStrategy = ScaleStrategy()) -> pd.DataFrame:
    """One per-tensor descale, computed, and what the round trip loses (notebook 02, section 1).

    x: float tensor (B, S, H, D) or (T, H, D). Returns one column, value, indexed by: amax, "fp8 max (<fmt>)",
    "descale = amax / max" (float32, rounded up), "largest |x_fp8|" (the fp8 max itself), "relative L2 of
    the round trip" (float64) and "worst relative rounding of <fmt> (1/n)": half a step over the value just
    above a power of two, `u / (1 + u)` with `u = 2**-(mantissa_bits + 1)` (1/17 for e4m3).
    """
    if not isinstance(strategy, ScaleStrategy) or not isinstance(strategy.granularity, PerTensor):
        raise ValueError(f"strategy: expected a per-tensor ScaleStrategy (one descale), got {strategy!r}")
    x8, descale = quantize(x, strategy)
    back = dequantize(x8, descale, strategy, dtype=torch.float64)
    fmt = strategy.format
    u = 2.0 ** -(fmt.mantissa_bits + 1)
    return pd.Series({
        "amax": x.abs().max().item(),
        f"fp8 max ({fmt.name})": strategy.max,
        "descale = amax / max": descale.item(),
        "largest |x_fp8|": x8.float().abs().max().item(),
        "relative L2 of the round trip": metrics.rel_l2(back, x.double()),
        f"worst relative rounding of {fmt.name} (1/{2 ** (fmt.mantissa_bits + 1) + 1})": u / (1 + u),
    }, name="value").to_frame()


def strategy_set(
    calib: torch.Tensor,
    *,
    block_size: int = 128,
    percentile: float = 99.99,
    mse_ratios: Sequence[float] = DEFAULT_MSE_RATIOS,
) -> dict[str, ScaleStrategy]:
    """The strategies notebook 02 compares, named "granularity / amax source", the static ones calibrated
    on `calib` (B, S, H, D) float. A strategy whose descale FA3 cannot take (`fa3_can_take`: per token,
    per block, per channel) has `NOT_FA3`, " (not FA3)", appended to its name."""
    strategies = {
        "tensor / current": ScaleStrategy(PerTensor()),
        "tensor / current / pow2": ScaleStrategy(PerTensor(), power_of_two=True),
        "kv-head / current": ScaleStrategy(PerHead()),
        f"block {block_size} / current": ScaleStrategy(PerBlock(block_size)),
        "token / current": ScaleStrategy(PerToken()),
        "channel / current": ScaleStrategy(PerChannel()),
        "tensor / static max": ScaleStrategy(PerTensor(), calibrate(calib, PerTensor(), "max")),
        f"tensor / static p{percentile:g}": ScaleStrategy(
            PerTensor(), calibrate(calib, PerTensor(), "percentile", percentile=percentile)),
        "tensor / static MSE": ScaleStrategy(PerTensor(), calibrate(calib, PerTensor(), "mse", ratios=mse_ratios)),
        "kv-head / static max": ScaleStrategy(PerHead(), calibrate(calib, PerHead(), "max")),
    }
    return {(name if fa3_can_take(s) else name + NOT_FA3): s for name, s in strategies.items()}


def _matching(tensors: Mapping[str, torch.Tensor], calibs: Mapping[str, torch.Tensor]) -> None:
    missing = [name for name in tensors if name not in calibs]
    if missing:
        raise ValueError(f"calibs: expected a calibration tensor for every tensor, none for {missing}")


def compare_on_distributions(
    tensors: Mapping[str, torch.Tensor],
    calibs: Mapping[str, torch.Tensor],
    **strategy_options: object,
) -> pd.DataFrame:
    """`compare_strategies` of `strategy_set(calibs[name], **strategy_options)` on each of `tensors`
    (name -> (B, S, H, D) float), concatenated: the columns of `compare_strategies`."""
    _matching(tensors, calibs)
    return pd.concat([compare_strategies({name: x}, strategy_set(calibs[name], **strategy_options))
                      for name, x in tensors.items()], ignore_index=True)


def by_key(table: pd.DataFrame, column: str) -> dict[str, float]:
    """`{"tensor|strategy": value}` of one column of a `compare_strategies` table (how notebook 02 records it)."""
    return {f"{t}|{s}": float(v) for t, s, v in zip(table["tensor"], table["strategy"], table[column])}


def best_and_worst(table: pd.DataFrame, metric: str = "sqnr") -> pd.DataFrame:
    """Per tensor, the strategy with the highest and the lowest `metric` of a `compare_strategies` table.
    Index tensor; columns (best | worst, strategy | metric)."""
    pick = {"best": table.groupby("tensor")[metric].idxmax(), "worst": table.groupby("tensor")[metric].idxmin()}
    return pd.concat({k: table.loc[rows, ["tensor", "strategy", metric]].set_index("tensor") for k, rows in pick.items()},
                     axis=1)


def current_spread(table: pd.DataFrame, metric: str = "sqnr") -> pd.Series:
    """Per tensor, max - min of `metric` over the strategies with a current amax (power-of-two ones included)."""
    current = table[table["source"] == "current"]
    return current.groupby("tensor")[metric].agg(lambda s: s.max() - s.min()).rename(f"{metric} spread")


def worst_head_gain(table: pd.DataFrame, tensor: str, strategy: str, baseline: str) -> float:
    """dB by which `strategy` raises the worst head's SQNR of `tensor` over `baseline` (a `compare_strategies` table)."""
    worst = table.set_index(["tensor", "strategy"])["sqnr_worst_head"]
    for s in (strategy, baseline):
        if (tensor, s) not in worst.index:
            raise KeyError(f"no row ({tensor!r}, {s!r}) in the table; strategies: {sorted(set(table['strategy']))}")
    return float(worst[tensor, strategy] - worst[tensor, baseline])


def exact_max_split(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the current strategies, power-of-two ones left out, with columns tensor, strategy, sqnr,
    energy_exact_at_max (the energy share of each group's largest element, stored exactly at +-fp8_max)
    and sqnr_rest (the SQNR of every other element)."""
    current = table[(table["source"] == "current") & ~table["power_of_two"]]
    return current[["tensor", "strategy", "sqnr", "energy_exact_at_max", "sqnr_rest"]].reset_index(drop=True)


def calibration_picks(
    calibs: Mapping[str, torch.Tensor],
    *,
    percentile: float = 99.99,
    mse_ratios: Sequence[float] = DEFAULT_MSE_RATIOS,
) -> pd.DataFrame:
    """The per-tensor amax each calibration method picks on each calibration tensor (name -> float tensor).

    Columns: distribution, method ("max", "p<percentile>", "MSE"), amax, true_max (max |x|), "amax / max".
    """
    rows = []
    for dist, c in calibs.items():
        true_max = c.abs().max().item()
        picks = {
            "max": calibrate(c, PerTensor(), "max"),
            f"p{percentile:g}": calibrate(c, PerTensor(), "percentile", percentile=percentile),
            "MSE": calibrate(c, PerTensor(), "mse", ratios=mse_ratios),
        }
        for method, st in picks.items():
            a = st.amax.item()
            rows.append({"distribution": dist, "method": method, "amax": a, "true_max": true_max, "amax / max": a / true_max})
    return pd.DataFrame(rows)


def delayed_summary(trace: pd.DataFrame) -> pd.DataFrame:
    """Per strategy of a `delayed_trace`: steps_with_saturation (steps that clamped any element),
    worst_sqnr_db and mean_sqnr_db over the steps."""
    return trace.groupby("strategy").agg(
        steps_with_saturation=("saturated", lambda s: int((s > 0).sum())),
        worst_sqnr_db=("sqnr", "min"),
        mean_sqnr_db=("sqnr", "mean"),
    )


def pow2_cost(tensors: Mapping[str, torch.Tensor], granularity: Granularity = PerHead()) -> pd.DataFrame:
    """SQNR of current scaling in `granularity` with exact (float32, rounded up) and power-of-two descales.

    tensors: name -> float tensor. Index distribution; columns "SQNR (dB)", "SQNR, power of two (dB)",
    "cost (dB)" (the first minus the second: what rounding the descale up to a power of two costs)
    and "largest |x_fp8|, power of two" (in (fp8_max / 2, fp8_max]).
    """
    rows = []
    for dist, x in tensors.items():
        row = {"distribution": dist}
        for pow2, col in ((False, "SQNR (dB)"), (True, "SQNR, power of two (dB)")):
            s = ScaleStrategy(granularity, power_of_two=pow2)
            x8, d = quantize(x, s)
            row[col] = metrics.sqnr(dequantize(x8, d, s, dtype=torch.float64), x.double())
            if pow2:
                row["largest |x_fp8|, power of two"] = x8.float().abs().max().item()
        rows.append(row)
    table = pd.DataFrame(rows).set_index("distribution")
    table.insert(2, "cost (dB)", table["SQNR (dB)"] - table["SQNR, power of two (dB)"])
    return table


def percentile_sqnr(
    tensors: Mapping[str, torch.Tensor],
    calibs: Mapping[str, torch.Tensor],
    percentiles: Sequence[float],
) -> pd.DataFrame:
    """SQNR (dB) of a static per-tensor scale calibrated at each percentile of |calibs[name]|, on tensors[name].

    Index distribution; one column per percentile, "p<percentile>" (e.g. "p99.99", "p99").
    """
    _matching(tensors, calibs)
    percentiles = check_values("percentiles", percentiles, "(99.99, 99.0)")
    rows = {}
    for dist, x in tensors.items():
        row = {}
        for p in percentiles:
            s = ScaleStrategy(PerTensor(), calibrate(calibs[dist], PerTensor(), "percentile", percentile=p))
            x8, d = quantize(x, s)
            row[f"p{p:g}"] = metrics.sqnr(dequantize(x8, d, s, dtype=torch.float64), x.double())
        rows[dist] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("distribution")


# --------------------------------------------------------------------------- notebook 03: per-head scales and strides


def per_head_round_trip(x: torch.Tensor, strategies: Mapping[str, ScaleStrategy]) -> pd.DataFrame:
    """SQNR of each head of `x` (B, S, H, D) float after an FP8 round trip with each strategy.

    Columns: head, strategy, sqnr (dB; 0 for a head flushed to zeros), head amax (max |x| over the head).
    """
    _check_strategies(strategies)
    rows = []
    ref = x.double()
    head_amax = ref.abs().amax(dim=tuple(i for i in range(ref.dim()) if i != ref.dim() - 2))
    for name, strat in strategies.items():
        x8, d = quantize(x, strat)
        back = dequantize(x8, d, strat, dtype=torch.float64)
        for h, v in enumerate(metrics.sqnr(back, ref, per_head=True).tolist()):
            rows.append({"head": h, "strategy": name, "sqnr": v, "head amax": head_amax[h].item()})
    return pd.DataFrame(rows)


def k_heads_vs_e4m3(per_head: pd.DataFrame, *, coarse: str = "per tensor", fine: str = "per KV head") -> dict[str, float]:
    """How far apart a `per_head_round_trip` table's heads lie, against e4m3's range.

    Keys: "binades between largest and smallest head" (log2 of their amaxes' ratio), "e4m3 binades, smallest
    subnormal to 448", "worst head SQNR <coarse> (dB)" and "SQNR spread <fine> (dB)" (max - min over heads).
    """
    e4m3 = formats.get_format("e4m3fn")
    head_amax = per_head.groupby("head")["head amax"].first()
    by = {name: per_head[per_head["strategy"] == name]["sqnr"] for name in (coarse, fine)}
    for name, v in by.items():
        if v.empty:
            raise KeyError(f"no strategy {name!r} in the table; strategies: {sorted(set(per_head['strategy']))}")
    return {
        "binades between largest and smallest head": math.log2(head_amax.max() / head_amax.min()),
        f"e4m3 binades, smallest subnormal to {e4m3.max:g}": math.log2(e4m3.max / e4m3.min_subnormal),
        f"worst head SQNR {coarse} (dB)": float(by[coarse].min()),
        f"SQNR spread {fine} (dB)": float(by[fine].max() - by[fine].min()),
    }


def descale_layout_table(descales: Mapping[str, torch.Tensor]) -> pd.DataFrame:
    """Memory facts of (batch, heads_kv) descales, one row per name.

    Columns: shape, strides, contiguous, "bytes of storage" (of the storage behind the view: one float32
    for an expanded scalar), "FA3's strided read gives the values" (`as_kernel_reads`), and "a
    contiguity-assuming read gives" ("the values", "other values", or "past the storage": `as_contiguous_reads`).
    """
    rows = []
    for name, t in descales.items():
        naive = as_contiguous_reads(t)
        rows.append({
            "descale": name,
            "shape": tuple(t.shape),
            "strides": t.stride(),
            "contiguous": t.is_contiguous(),
            "bytes of storage": t.untyped_storage().nbytes(),
            "FA3's strided read gives the values": bool(torch.equal(as_kernel_reads(t), t)),
            "a contiguity-assuming read gives": ("past the storage" if naive is None else
                                                 "the values" if torch.equal(naive, t) else "other values"),
        })
    return pd.DataFrame(rows).set_index("descale")


def attention_layouts_agree(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    q_descale: torch.Tensor,
    k_descale: torch.Tensor,
    v_descale: torch.Tensor,
    *,
    backend: str | Callable[..., torch.Tensor] = "triton",
    causal: bool = True,
) -> dict[str, bool]:
    """Whether one FP8 attention gives the same bits when its descales' values come in other layouts.

    q8 (B, Sq, Hq, D), k8 and v8 (B, Sk, Hkv, D) float8_e4m3fn; the descales (B, Hkv) float32 as
    `quantize_for_fa3` gives them, v_descale one value (per tensor). backend: a `fp8lab.attention`
    backend name, or a callable `(q, k, v, *, causal, q_descale, k_descale, v_descale)`.
    Keys: "contiguous = transposed" (Q and K descales materialized against transposed views, V's
    materialized against a stride-0 scalar) and "expand = contiguous" (sequence 0's per-head values for
    every sequence, `expand()`ed with strides (0, 1) against materialized).
    """
    if not bool((v_descale == v_descale.flatten()[0]).all()):
        raise ValueError("v_descale: expected one value (a per-tensor descale) for the stride-0 scalar layout")
    if callable(backend):
        attend = backend
    else:
        from fp8lab.backends.api import attention

        def attend(q, k, v, **kw):
            return attention(q, k, v, backend=backend, **kw)
    batch, heads_kv = q_descale.shape
    dev = q8.device

    def run(qd: torch.Tensor, kd: torch.Tensor, vd: torch.Tensor) -> torch.Tensor:
        return attend(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)

    full = {layout: run(descale_from_heads(q_descale.contiguous().to(dev), batch, layout=layout),
                        descale_from_heads(k_descale.contiguous().to(dev), batch, layout=layout),
                        v_descale.contiguous().to(dev) if layout == "contiguous" else
                        descale_from_scalar(v_descale.flatten()[0], batch, heads_kv, device=dev))
            for layout in ("contiguous", "transposed")}
    shared = {layout: run(*(descale_from_heads(d[0].to(dev), batch, layout=layout) for d in (q_descale, k_descale, v_descale)))
              for layout in ("expand", "contiguous")}
    return {"contiguous = transposed": torch.equal(full["contiguous"], full["transposed"]),
            "expand = contiguous": torch.equal(shared["expand"], shared["contiguous"])}


def gqa_descale_reads(q: torch.Tensor, heads_kv: int) -> pd.DataFrame:
    """Which KV head, and which shared Q descale, each query head of sequence 0 reads under GQA.

    q: (B, S, Hq, D) float with Hq a multiple of heads_kv. Q's FA3 descale is per (sequence, KV head),
    the group max over its query heads / fp8_max (`quantize_for_fa3` with per-head scales); each query
    head's column is found by dequantizing an FP8 one per query head with it (as `dequantize`, and FA3,
    broadcast it). Index "query head"; columns "Q amax per query head", "reads KV head", "shared Q descale
    (group max / 448)" (float32, rounded up).
    """
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q: expected a (batch, seqlen, heads_q, head_dim) tensor, got {getattr(q, 'shape', type(q))}")
    heads_q = q.shape[2]
    _, qd = quantize_for_fa3(q, ScaleStrategy(PerHead()), heads_kv, name="q")
    one = formats.cast_to_fp8(torch.ones(1, 1, heads_q, 1))  # an FP8 1.0 per query head
    column = dequantize(one, torch.arange(1.0, heads_kv + 1)[None], PerHead(heads_kv), dtype=torch.float64)
    return pd.DataFrame({
        "Q amax per query head": compute_amax(q, PerHead())[0].tolist(),
        "reads KV head": (column[0, 0, :, 0] - 1).long().tolist(),
        "shared Q descale (group max / 448)": dequantize(one, qd[:1].cpu(), PerHead(heads_kv), dtype=torch.float64)[0, 0, :, 0].tolist(),
    }, index=pd.RangeIndex(heads_q, name="query head"))


def gqa_q_scale_cost(q: torch.Tensor, heads_kv: int) -> pd.DataFrame:
    """What sharing Q's descale within each GQA group costs Q's FP8 round trip.

    q: (B, S, Hq, D) float. Index "Q scales": "per query head (not FA3)", "per KV group (FA3)"; columns
    "worst head SQNR (dB)" (over query heads) and "SQNR (dB)" (whole Q).
    """
    rows = []
    for name, strat in (("per query head" + NOT_FA3, ScaleStrategy(PerHead())),
                        ("per KV group (FA3)", ScaleStrategy(PerHead(heads_kv)))):
        x8, d = quantize(q, strat)
        back = dequantize(x8, d, strat, dtype=torch.float64)
        rows.append({"Q scales": name, "worst head SQNR (dB)": float(metrics.sqnr(back, q.double(), per_head=True).min()),
                     "SQNR (dB)": metrics.sqnr(back, q.double())})
    return pd.DataFrame(rows).set_index("Q scales")


def token_reduction(k: torch.Tensor, heads_kv: int) -> dict[str, object]:
    """Per-token scales against their reduction to FA3's (batch, heads_kv) layout (`quantize_for_fa3`).

    k: (B, S, H, D) float, H a multiple of heads_kv. Keys: "sqnr_db" ({"per token (not FA3)": dB, "max over
    tokens (FA3)": dB}), "binades_lost" ((B, S, H) float32: log2 of the reduced descale over each token's
    own, the FP8 range each token gives up) and "median_binades_lost" (float).
    """
    tok8, tok_d = quantize(k, ScaleStrategy(PerToken()))
    fa8, fa_d = quantize_for_fa3(k, ScaleStrategy(PerToken()), heads_kv)
    reduced = descale_from_tokens(tok_d, heads_kv).repeat_interleave(k.shape[2] // heads_kv, dim=1)
    lost = torch.log2(reduced[:, None, :] / tok_d)
    return {
        "sqnr_db": {
            "per token" + NOT_FA3: metrics.sqnr(dequantize(tok8, tok_d, PerToken(), dtype=torch.float64), k.double()),
            "max over tokens (FA3)": metrics.sqnr(dequantize(fa8, fa_d, PerHead(heads_kv), dtype=torch.float64), k.double()),
        },
        "binades_lost": lost,
        "median_binades_lost": float(lost.median()),
    }


def checkpoint_provenance(
    checkpoints: Mapping[str, Mapping[str, float]],
    modes: Sequence[str] = ("intended", "vllm"),
) -> pd.DataFrame:
    """q, k and v descales, and where each came from, as `resolve_checkpoint_scales` resolves each checkpoint
    (name -> {scale name: value}) in each mode. Index (checkpoint, mode); columns q, "q from", k, "k from",
    v, "v from"."""
    if isinstance(modes, str):  # iterating "vllm" would ask for modes 'v', 'l', 'l', 'm'
        raise ValueError(f"modes: expected a tuple of modes such as ('intended', 'vllm'), got the str {modes!r}; "
                         f"pass ({modes!r},)")
    rows = []
    for name, ck in checkpoints.items():
        for mode in modes:
            r = resolve_checkpoint_scales(ck, emulate=mode, warn=False)
            rows.append({"checkpoint": name, "mode": mode, "q": r.q, "q from": r.sources["q"],
                         "k": r.k, "k from": r.sources["k"], "v": r.v, "v from": r.sources["v"]})
    return pd.DataFrame(rows).set_index(["checkpoint", "mode"])


def fallback_q_over_k(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ratios: Sequence[float],
    *,
    q_amax: float = 10.0,
    causal: bool = True,
) -> pd.DataFrame:
    """`fallback_sweep` at one Q range, `q_amax`, for each ratio of Q's range over K's (the k_scale
    fallback's premise broken by that factor); its columns, one block of rows per ratio."""
    ratios = check_values("ratios", ratios, "[1.0, 8.0, 64.0]")
    return pd.concat([fallback_sweep(q, k, v, [q_amax], causal=causal, q_over_k=r) for r in ratios], ignore_index=True)
