"""Seaborn figures for scale strategies, descale layouts and GQA (notebooks 02 and 03).

Each `plot_*` takes the DataFrame an experiment in `fp8lab.scaling.experiments`
returned (or plain arguments), an optional matplotlib `ax`, draws one message,
labels its axes with units and returns the `Axes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from fp8lab import formats

__all__ = [
    "plot_strategy_heatmap",
    "plot_calibration_curve",
    "plot_delayed_trace",
    "plot_per_head_error",
    "plot_gqa_mapping",
    "plot_fallback_sweep",
]

_METRIC_LABELS = {
    "sqnr": "SQNR (dB, higher is better)",
    "sqnr_worst_head": "SQNR of the worst head (dB)",
    "rel_l2": "relative L2 error",
    "rmse": "RMSE (units of x)",
    "cosine": "cosine similarity",
}


def _axes(ax: plt.Axes | None, size: tuple[float, float] = (8, 4)) -> plt.Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def plot_strategy_heatmap(df: pd.DataFrame, metric: str = "sqnr", *, ax: plt.Axes | None = None) -> plt.Axes:
    """Heatmap of `metric` with strategies as rows and distributions (`tensor`) as columns."""
    ax = _axes(ax, (9, 0.45 * df["strategy"].nunique() + 1.5))
    table = df.pivot(index="strategy", columns="tensor", values=metric).loc[list(dict.fromkeys(df["strategy"]))]
    table = table[list(dict.fromkeys(df["tensor"]))]
    sns.heatmap(table, annot=True, fmt=".1f" if metric == "sqnr" else ".3g", cmap="viridis", ax=ax,
                cbar_kws={"label": _METRIC_LABELS.get(metric, metric)})
    ax.set_xlabel("input distribution")
    ax.set_ylabel("scale strategy (granularity / amax source)")
    ax.set_title(f"FP8 e4m3 round-trip {_METRIC_LABELS.get(metric, metric)}")
    return ax


def plot_calibration_curve(
    amax_candidates: torch.Tensor,
    mse: torch.Tensor,
    marks: Mapping[str, float],
    *,
    true_amax: float,
    ax: plt.Axes | None = None,
    title: str = "",
) -> plt.Axes:
    """MSE of the FP8 round trip against the calibrated amax (relative to the true max), with chosen amaxes marked."""
    ax = _axes(ax)
    x = (amax_candidates.flatten() / true_amax).numpy()
    sns.lineplot(x=x, y=mse.flatten().numpy(), ax=ax, marker=".", label="round-trip MSE")
    for (name, a), color in zip(marks.items(), sns.color_palette("deep", len(marks) + 1)[1:]):
        ax.axvline(a / true_amax, color=color, linestyle="--", label=f"{name}: {a / true_amax:.3f} x max")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("calibrated amax / true max|x| (log2 scale)")
    ax.set_ylabel("mean squared error (units of x squared)")
    ax.set_title(title or "Clipping trades saturation error against resolution")
    ax.legend(fontsize=8)
    return ax


def plot_delayed_trace(df: pd.DataFrame, *, ax: plt.Axes | None = None) -> plt.Axes:
    """Descale per step for each strategy against the ideal amax/fp8_max of that step."""
    ax = _axes(ax, (9, 4))
    ideal = df[df["strategy"] == df["strategy"].iloc[0]]
    ax.plot(ideal["step"], ideal["ideal"], color="black", linewidth=3, alpha=0.3, label="ideal: this step's amax / fp8 max")
    sns.lineplot(data=df, x="step", y="descale", hue="strategy", style="strategy", ax=ax, drawstyle="steps-post")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step (one quantize call per step)")
    ax.set_ylabel("descale used (log2 scale)")
    ax.set_title("Delayed scaling uses yesterday's amax: it lags a drifting range")
    return ax


def plot_per_head_error(df: pd.DataFrame, *, metric: str = "sqnr", ax: plt.Axes | None = None) -> plt.Axes:
    """Bar chart of a per-head metric (columns head, strategy, metric)."""
    ax = _axes(ax)
    sns.barplot(data=df, x="head", y=metric, hue="strategy", ax=ax)
    ax.set_xlabel("head")
    ax.set_ylabel(_METRIC_LABELS.get(metric, metric))
    ax.set_title("One scale for all heads starves the small heads of FP8 range")
    return ax


def plot_gqa_mapping(heads_q: int, heads_kv: int, q_amax: Sequence[float] | None = None, *, ax: plt.Axes | None = None) -> plt.Axes:
    """Which KV head (descale column) each query head reads: a heads_q x heads_kv 0/1 map.

    With `q_amax` (per query head), annotates the cells with it and marks each group's max,
    the value Q's per-KV-head descale is built from.
    """
    if heads_q % heads_kv:
        raise ValueError(f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    ax = _axes(ax, (1.2 * heads_kv + 3, 0.4 * heads_q + 1.5))
    group = heads_q // heads_kv
    mapping = np.zeros((heads_q, heads_kv))
    mapping[np.arange(heads_q), np.arange(heads_q) // group] = 1
    annot = None
    if q_amax is not None:
        a = np.asarray(q_amax, dtype=float)
        annot = np.full((heads_q, heads_kv), "", dtype=object)
        for h in range(heads_q):
            j = h // group
            top = a[j * group:(j + 1) * group].max()
            annot[h, j] = f"{a[h]:.3g}" + (" (max)" if a[h] == top else "")
    sns.heatmap(mapping, annot=annot, fmt="", cmap="Blues", cbar=False, linewidths=0.5, linecolor="white", ax=ax,
                xticklabels=[f"kv {j}" for j in range(heads_kv)], yticklabels=[f"q {h}" for h in range(heads_q)])
    ax.set_xlabel("KV head = column of q_descale / k_descale / v_descale")
    ax.set_ylabel("query head")
    ax.set_title(f"GQA: query head h reads KV head h // {group}" + ("; cell = amax of that Q head" if q_amax is not None else ""))
    return ax


def plot_fallback_sweep(df: pd.DataFrame, *, metric: str = "rel_l2", ax: plt.Axes | None = None) -> plt.Axes:
    """Attention error against Q's amax for the ideal q descale, the k_scale fallback and vLLM's 1.0."""
    ax = _axes(ax, (9, 4))
    sns.lineplot(data=df, x="q_amax", y=metric, hue="mode", style="mode", markers=True, dashes=True, ax=ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    e4m3 = formats.get_format("e4m3fn")
    ax.axvline(e4m3.max, color="grey", linestyle=":", label=f"e4m3 max {e4m3.max:g}")
    ax.axvline(e4m3.min_normal, color="grey", linestyle="--", label=f"e4m3 min normal {e4m3.min_normal:g}")
    ax.set_xlabel("amax of Q (and K), log scale")
    ax.set_ylabel(_METRIC_LABELS.get(metric, metric) + " of attention output")
    ax.set_title("A q_descale of 1.0 is only harmless while Q's range sits inside FP8's")
    ax.legend(fontsize=8)
    return ax
