"""Figures for FP8 attention accuracy (notebooks 05 and 06): one message per figure, labelled axes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

__all__ = ["plot_attribution", "plot_decode_errors", "plot_decode_splits", "plot_fidelity", "plot_long_context",
           "plot_max_offset", "plot_scaling", "plot_table3"]


def plot_table3(df: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Bars: RMSE of each method, ours beside the FA3 paper's (log scale)."""
    ax = ax or plt.subplots(figsize=(8, 3.8))[1]
    long = df.melt(id_vars="method", value_vars=["rmse_ours", "rmse_paper"], var_name="source", value_name="rmse")
    long["source"] = long["source"].map({"rmse_ours": "fp8lab emulation", "rmse_paper": "FA3 paper, Table 3"})
    sns.barplot(data=long.dropna(), y="method", x="rmse", hue="source", ax=ax)
    ax.set_xscale("log")
    ax.set_xlabel("RMSE vs float64 attention (output units, log scale)")
    ax.set_ylabel("")
    ax.set_title("Incoherent processing, not block quantization, removes most of the outlier error")
    return ax


def plot_attribution(df: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Heatmap: rel L2 error of each step alone (columns) per distribution (rows)."""
    ax = ax or plt.subplots(figsize=(9, 0.6 * len(df) + 1.5))[1]
    sns.heatmap(df, annot=True, fmt=".1e", cmap="rocket_r", ax=ax, cbar_kws={"label": "rel L2 vs exact"})
    ax.set_xlabel("step switched to FP8 alone (total = all steps)")
    ax.set_ylabel("input distribution")
    ax.set_title("Where the FP8 error comes from")
    return ax


def plot_max_offset(df: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Lines: rel L2 of the P cast alone against FA3's max offset, one line per distribution."""
    ax = ax or plt.subplots(figsize=(6.5, 3.8))[1]
    sns.lineplot(data=df, x="max_offset", y="P cast only", hue="distribution", marker="o", ax=ax)
    ax.set_yscale("log")
    ax.set_xlabel("max offset (P lies in [0, 2^offset])")
    ax.set_ylabel("rel L2 vs exact, P cast alone (log)")
    ax.set_title("Shifting P into e4m3's normal range helps outlier inputs")
    return ax


def plot_scaling(df: pd.DataFrame, column: str = "rel_l2", ax: plt.Axes | None = None) -> plt.Axes:
    """Bars: error per scale granularity / incoherent processing, per distribution."""
    ax = ax or plt.subplots(figsize=(9, 4))[1]
    sns.barplot(data=df, x="distribution", y=column, hue="scales", ax=ax)
    ax.set_yscale("log")
    ax.set_xlabel("input distribution")
    ax.set_ylabel(f"{column.replace('_', ' ')} vs exact (log)")
    ax.set_title("Which scaling helps depends on where the range problem is")
    return ax


def plot_long_context(df: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Lines: rel L2 against the number of keys for each accumulation model."""
    ax = ax or plt.subplots(figsize=(6.5, 3.8))[1]
    sns.lineplot(data=df, x="seqlen_k", y="rel_l2", hue="accumulation", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("keys per query (log2)")
    ax.set_ylabel("rel L2 vs exact (log)")
    ax.set_title("A narrow accumulator loses accuracy as the context grows")
    return ax


def plot_fidelity(df: pd.DataFrame, target: float = 0.1, ax: plt.Axes | None = None) -> plt.Axes:
    """Bars: |emulation - FA3| / |FA3 - exact| per case and provider, with the target line."""
    ax = ax or plt.subplots(figsize=(10, 4))[1]
    d = df.copy()
    d["case"] = (d["dist"] + " d" + d["head_dim"].astype(str) + d["causal"].map({True: " causal", False: ""})
                 + (" h" + d["heads"].astype(str) if "heads" in d else ""))  # GQA cases are their own bars
    sns.barplot(data=d, x="case", y="ratio", hue="provider", ax=ax)
    ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:g}")
    ax.set_xlabel("")
    ax.set_ylabel("rel L2(emulation, FA3) / rel L2(FA3, exact)")
    ax.tick_params(axis="x", rotation=45)
    ax.legend()
    ax.set_title("How far the emulation is from the hardware, in units of the hardware's own error")
    return ax


def plot_decode_errors(df: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Bars: decode error per scale choice, storage alone ("dequantized") beside FA3's FP8 math
    ("fa3_fp8"); df is `fp8lab.kvcache.decode_error_table` (notebook 06)."""
    ax = ax or plt.subplots(figsize=(8, 3.8))[1]
    long = df[["fa3_fp8", "dequantized"]].reset_index().melt(id_vars="scales", var_name="math",
                                                              value_name="rel L2 vs exact")
    sns.barplot(data=long, y="scales", x="rel L2 vs exact", hue="math", ax=ax)
    ax.set(xscale="log", xlabel="relative L2 error of the decode output (log scale)", ylabel="",
           title="Decode error: FP8 storage alone vs FA3's FP8 math")
    return ax


def plot_decode_splits(points: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Points: per recorded sequence, the fraction of bf16 outputs bit-equal to vLLM's library, with the
    emulation split as FA3 predicts and not split; points is `fp8lab.kvcache.decode_split_points`."""
    ax = ax or plt.subplots(figsize=(9, 4))[1]
    sns.scatterplot(data=points, x="predicted_splits", y="equal", hue="emulation", style="emulation", s=60, ax=ax)
    ax.set(xlabel="splits FA3 gives the sequence (fa3_decode_splits)",
           ylabel="fraction of bf16 outputs bit-equal\nto vLLM's library", ylim=(0, 1),
           title="H200, paged FP8 decode, one point per sequence: vLLM's bits need FA3's splits")
    return ax
