"""Figures for performance (notebooks 07, 08 and 09): one message per figure, labelled axes.

Each `plot_*` takes an optional matplotlib `ax`, draws from a pandas DataFrame
(as `fp8lab.bench.records_frame` returns it, or built from it) and returns the Axes.
A frame without the columns a plot reads, or without rows, is refused by name.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from fp8lab.bench import check_frame, check_one_version
from fp8lab.layout import check_positive

__all__ = [
    "plot_after_compile",
    "plot_clock_trace",
    "plot_clocks",
    "plot_providers",
    "plot_pv_flush_grid",
    "plot_quant_bandwidth",
    "plot_quant_shapes",
    "plot_quant_sizes",
    "plot_ratio",
    "plot_roofline",
    "plot_transpose_v",
    "plot_versions",
    "plot_p_grid",
]


def _frame(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    """`bench.check_frame`, and a ValueError if `df` has no rows (seaborn draws an empty figure
    without a word)."""
    check_frame(df, columns, what)
    if df.empty:
        raise ValueError(f"{what}: expected rows to plot, got an empty DataFrame")


def plot_providers(grid: pd.DataFrame, head_dim: int, ax: plt.Axes | None = None) -> plt.Axes:
    """Bars: TFLOP/s of each provider per case, one head dim."""
    _frame(grid, ("case", "head_dim", "provider", "tflops"), "grid")
    df = grid[(grid["head_dim"] == head_dim) & grid["tflops"].notna()]
    if df.empty:
        timed = sorted(grid.loc[grid["tflops"].notna(), "head_dim"].unique().tolist())
        raise ValueError(f"head_dim: expected one of the grid's timed head dims {timed}, got {head_dim!r}")
    ax = ax or plt.subplots(figsize=(9, 3.8))[1]
    sns.barplot(data=df, x="case", y="tflops", hue="provider", ax=ax)
    ax.set_xlabel("batch x seqlen x heads x head_dim (b*s = 16k tokens)")
    ax.set_ylabel("TFLOP/s (median)")
    ax.set_title(f"head_dim {head_dim}: every provider on the same inputs")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(fontsize=8, ncols=3)
    return ax


def plot_ratio(ratios: pd.DataFrame, target: float = 0.9, ax: plt.Axes | None = None,
               title: str = "fp8lab against FA3 FP8, per case") -> plt.Axes:
    """Points: our TFLOP/s over FA3 FP8's per case (columns seqlen, head_dim, ratio; e.g.
    `fp8lab.records.target_table`), against the target line."""
    _frame(ratios, ("seqlen", "head_dim", "ratio"), "ratios")
    ax = ax or plt.subplots(figsize=(8, 3.6))[1]
    sns.pointplot(data=ratios, x="seqlen", y="ratio", hue="head_dim", markers="o", linestyles="-",
                  palette="viridis", ax=ax)
    ax.axhline(target, ls="--", color="k", lw=1)
    ax.text(0.02, target + 0.01, f"target {target}x", transform=ax.get_yaxis_transform())
    ax.set_xlabel("sequence length (tokens; batch = 16k / seqlen)")
    ax.set_ylabel("fp8lab / FA3 FP8 (TFLOP/s ratio)")
    ax.set_title(title)
    return ax


def plot_roofline(points: pd.DataFrame, ceilings: dict[str, float], copy_tbps: float,
                  ax: plt.Axes | None = None) -> plt.Axes:
    """Log-log roofline: compute ceilings (each a line, labelled with its TFLOP/s), the bandwidth
    slope, measured points by provider.

    points: columns intensity (FLOP/byte), tflops, provider.
    """
    _frame(points, ("intensity", "tflops", "provider"), "points")
    check_positive("copy_tbps", copy_tbps)  # 0 or NaN drew no bandwidth slope, without a word
    import numpy as np

    ax = ax or plt.subplots(figsize=(7.5, 4.6))[1]
    x = np.logspace(1, 4.5, 200)
    grays = sns.color_palette("Greys_d", len(ceilings))
    for i, (name, peak) in enumerate(sorted(ceilings.items(), key=lambda kv: -kv[1])):
        ax.plot(x, np.minimum(peak, copy_tbps * x), lw=1, ls=["-", "--", ":", "-."][i % 4], color=grays[i],
                label=f"{name}: {peak:.0f}")
    sns.scatterplot(data=points, x="intensity", y="tflops", hue="provider", style="provider", s=50, ax=ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Attention is far right of the ridge ({copy_tbps} TB/s): compute, not memory, bounds it")
    return ax


def plot_quant_bandwidth(df: pd.DataFrame, ax: plt.Axes | None = None,
                         title: str = "Static and per-token scales run at copy speed; per-head scales do not"
                         ) -> plt.Axes:
    """Bars: each quantization kernel's `frac_copy_graph` (bf16 read + e4m3 written once, as
    a fraction of a device copy's bandwidth), one bar per `version`."""
    _frame(df, ("kernel", "frac_copy_graph", "version"), "df")
    ax = ax or plt.subplots(figsize=(7, 3.6))[1]
    sns.barplot(data=df, y="kernel", x="frac_copy_graph", hue="version", ax=ax)
    ax.axvline(1.0, color="k", lw=1)
    ax.axvline(0.85, color="k", lw=1, ls="--")
    ax.text(0.84, 0.02, "85 % of copy", fontsize=8, ha="right", transform=ax.get_xaxis_transform())
    ax.set_xlabel("useful bandwidth / copy bandwidth (3 bytes per value, CUDA-graph timed)")
    ax.set_ylabel("")
    ax.set_title(title)
    return ax


def plot_quant_sizes(df: pd.DataFrame, target: float = 0.85, ax: plt.Axes | None = None,
                     title: str = "A scale known before x needs one pass: delayed scaling keeps up from 128 MiB"
                     ) -> plt.Axes:
    """Lines: each quantization kernel's `frac_copy_graph` against the size of x (columns kernel,
    mib, frac_copy_graph; repeats as the band), with the target line."""
    _frame(df, ("kernel", "mib", "frac_copy_graph"), "df")
    ax = ax or plt.subplots(figsize=(8, 4))[1]
    sns.lineplot(data=df, x="mib", y="frac_copy_graph", hue="kernel", style="kernel", markers=True, dashes=False,
                 errorbar=("pi", 100), ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(df["mib"].unique()), [str(m) for m in sorted(df["mib"].unique())])
    _target_line(ax, target, f"{target:.0%} of the copy timed at each size")
    return _copy_fraction_axes(ax, "MiB of bf16 x (1 x tokens x 32 heads x 128)", title)


def plot_quant_shapes(df: pd.DataFrame, target: float = 0.85, issue_copy_tbps: float | None = 4.3,
                      ax: plt.Axes | None = None,
                      title: str = "Per head, the same bytes quantize faster split into shorter sequences") -> plt.Axes:
    """Points: each kernel's `frac_copy_graph` per batch shape of the same tokens (columns batch,
    size, kernel, frac_copy_graph, copy_tbps_graph; repeats as the min-max bar), against the target
    line, as a fraction of the copy timed in the same run and, dotted, of `issue_copy_tbps`."""
    _frame(df, ("batch", "size", "kernel", "frac_copy_graph", "copy_tbps_graph"), "df")
    check_one_version(df, "df")
    ax = ax or plt.subplots(figsize=(9, 4))[1]
    df = df.assign(split=df["size"].str.split(" ").str[0].str.rsplit("x", n=2).str[0])  # "4x4096x32x128 (..)" -> "4x4096"
    order = df.sort_values("batch")["split"].unique()
    kernels = df["kernel"].nunique()
    sns.pointplot(data=df, x="split", y="frac_copy_graph", hue="kernel", order=order, errorbar=("pi", 100),
                  markers="o", linestyles="-", dodge=0.3 if kernels > 1 else False,  # seaborn divides by kernels - 1
                  palette="tab10" if kernels <= 10 else "tab20", ax=ax)
    copy = df["copy_tbps_graph"].median()
    _target_line(ax, target, f"{target:.0%} of this run's copy ({copy:.2f} TB/s)")
    if issue_copy_tbps:
        _target_line(ax, target * issue_copy_tbps / copy, f"{target:.0%} of {issue_copy_tbps} TB/s (the issue's copy figure)",
                     ls=":")
    return _copy_fraction_axes(ax, "batch x tokens (x 32 heads x 128: the same 128 MiB of bf16)", title)


def plot_one_pass_bound(df: pd.DataFrame, marks: dict[str, float], target: float = 0.85,
                        ax: plt.Axes | None = None,
                        title: str = "Current per-tensor scaling of 128 MiB: what on-chip memory allows") -> plt.Axes:
    """Line: `bench.one_pass_bound` (column bound) against the MB of x held on chip (column held_mb);
    dotted verticals at `marks` (label -> MB), the target as a dashed line."""
    _frame(df, ("held_mb", "bound"), "df")
    ax = ax or plt.subplots(figsize=(8, 3.8))[1]
    sns.lineplot(data=df, x="held_mb", y="bound", color="k", ax=ax)
    for i, (label, mb) in enumerate(marks.items()):
        ax.axvline(mb, ls=":", color=sns.color_palette("tab10")[i], lw=1.5, label=f"{label}: {mb:.0f} MB")
    _target_line(ax, target, f"{target:.0%} of copy (the issue's target)")
    ax.set_ylim(0.5, 1.02)
    return _copy_fraction_axes(ax, "MB of x held on chip until the amax is known", title)


def _target_line(ax: plt.Axes, y: float, label: str, ls: str = "--") -> None:
    ax.axhline(y, ls=ls, color="k", lw=1)
    ax.text(0.01, y + 0.01, label, fontsize=8, transform=ax.get_yaxis_transform())


def _copy_fraction_axes(ax: plt.Axes, xlabel: str, title: str) -> plt.Axes:
    """Labels and legend of the quantization plots (y: useful bandwidth over the copy's)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel("useful bandwidth / this run's copy")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


def plot_clocks(df: pd.DataFrame, max_mhz: float = 1980.0, ax: plt.Axes | None = None) -> plt.Axes:
    """Boxes per head dim: the SM clock while each timing ran (columns head_dim, sm_mhz; as
    `fp8lab.bench.clocks_while_timed` returns them), against the card's maximum clock."""
    _frame(df, ("head_dim", "sm_mhz"), "df")
    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    sns.boxplot(data=df, x="head_dim", y="sm_mhz", color="#9ecae1", ax=ax)
    sns.stripplot(data=df, x="head_dim", y="sm_mhz", color="k", size=2, alpha=0.4, ax=ax)
    ax.axhline(max_mhz, ls="--", color="k", lw=1)
    ax.text(0.01, max_mhz + 8, f"maximum {max_mhz:.0f} MHz", fontsize=8, transform=ax.get_yaxis_transform())
    ax.set_xlabel("head dim")
    ax.set_ylabel("SM clock while timed (MHz)")
    ax.set_title("At head dim 128 and 256 the card runs at its power limit")
    return ax


def plot_clock_trace(clocks: pd.DataFrame, spans: dict[str, tuple[pd.Timestamp, pd.Timestamp]] | None = None,
                     axes: tuple[plt.Axes, plt.Axes] | None = None) -> tuple[plt.Axes, plt.Axes]:
    """Two stacked lines over a window of a `fp8lab.bench.read_clock_log` log (time, sm_mhz, power_w):
    the SM clock above, the power below; `spans` (label -> (start, end)) are shaded."""
    _frame(clocks, ("time", "sm_mhz", "power_w"), "clocks")
    if axes is None:
        axes = tuple(plt.subplots(2, 1, figsize=(7, 4), sharex=True)[1])
    t0 = clocks["time"].iloc[0]
    t = (clocks["time"] - t0).dt.total_seconds()
    for ax, col, label in zip(axes, ("sm_mhz", "power_w"), ("SM clock (MHz)", "power (W)")):
        sns.lineplot(x=t, y=clocks[col], marker="o", markersize=3, color="#08519c", ax=ax)
        ax.set_ylabel(label)
        for i, (name, (start, end)) in enumerate((spans or {}).items()):
            ax.axvspan((start - t0).total_seconds(), (end - t0).total_seconds(), alpha=0.25,
                       color=sns.color_palette("deep")[i + 1], label=name)
    axes[0].legend(fontsize=8, loc="lower left")
    axes[1].set_xlabel(f"seconds after {t0:%H:%M:%S}.{t0.microsecond // 1000:03d}")
    return axes


def plot_after_compile(df: pd.DataFrame, target: float = 0.9, ax: plt.Axes | None = None) -> plt.Axes:
    """Points: one grid's Gluon / FA3 FP8 ratio on one case (columns grid, timed, ratio; as
    `fp8lab.kernels.explain.v23_after_compile` returns them), grouped by how it was timed and
    coloured by the grid's kernel version."""
    _frame(df, ("grid", "timed", "ratio"), "df")
    ax = ax or plt.subplots(figsize=(7, 3.2))[1]
    sns.stripplot(x=df["ratio"], y=df["timed"], hue=df["grid"].str.split("_").str[0], size=7, jitter=0.15,
                  palette="deep", ax=ax)
    ax.legend(title="kernel version", fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.axvline(target, ls="--", color="k", lw=1)
    ax.set_xlabel("Gluon TFLOP/s over FA3 FP8's")
    ax.set_ylabel("")
    ax.set_title("Timed just after an idle compile: the clock's swing")
    return ax


def plot_api_grid(df: pd.DataFrame, target: float = 0.9, ax: plt.Axes | None = None) -> plt.Axes:
    """Bars per case: TFLOP/s over fa3-fwd called directly, for the Gluon kernel called directly
    and through `fp8lab.attention`, and fa3-fwd through it (`fp8lab.kernels.explain.v24_api_grid`)."""
    return _ratio_bars(df, ["Gluon direct", "API triton (Gluon)", "API fa3:fa3-fwd"], "fa3-fwd direct", target,
                       "TFLOP/s over fa3-fwd FP8 called directly",
                       "The kernels through fp8lab.attention (V in FA3's layout, checks, one sync)",
                       ax or plt.subplots(figsize=(8, 5.5))[1], legend_y=-0.1)


def plot_pv_flush_grid(grid: pd.DataFrame, target: float = 0.9, ax: plt.Axes | None = None) -> plt.Axes:
    """Bars per case: TFLOP/s over fa3-fwd FP8 (O accumulated in the FP8 MMA) for both kernels with
    `pv_flush`, the Gluon kernel without it and vLLM's FP8 varlen path, which flushes too
    (`fp8lab.kernels.explain.pv_flush`'s grid)."""
    return _ratio_bars(grid, ["Gluon", "Gluon pv_flush", "Triton pv_flush", "vLLM FP8 varlen"], "FA3 FP8", target,
                       "TFLOP/s over fa3-fwd FP8 (which does not flush)",
                       "O added in fp32 every key block: our kernels and vLLM's",
                       ax or plt.subplots(figsize=(8, 7))[1], legend_y=-0.08)


def plot_transpose_v(forms: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Bars per case: the in-kernel V transpose's TFLOP/s over the same kernel on V^T made before
    the call, one bar per form of the transposer, and where the copy (`key_ordered_vt` in the call)
    lies (`fp8lab.kernels.explain.transpose_v_forms`)."""
    _frame(forms, ("transpose_v / V^T ready", "+ copy", "V^T ready"), "forms")
    ax = ax or plt.subplots(figsize=(8, 4.5))[1]
    long = forms["transpose_v / V^T ready"].rename("ratio").reset_index()
    sns.barplot(data=long, y="case", x="ratio", hue="form", palette="crest", ax=ax)
    copy = (forms["+ copy"] / forms["V^T ready"]).groupby(level="case", sort=False).mean()
    ax.scatter(copy.to_numpy(), range(len(copy)), marker="|", s=400, color="k", zorder=3,
               label="+ copy (mean of the runs)")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlim(0.4, 1.05)
    ax.set_xlabel("TFLOP/s over the kernel on V^T made before the call (same run)")
    ax.set_ylabel("")
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    ax.set_title("V transposed inside the kernel, three forms, against a copy of V")
    return ax


def _ratio_bars(df: pd.DataFrame, cols: list[str], base: str, target: float, xlabel: str, title: str,
                ax: plt.Axes, legend_y: float) -> plt.Axes:
    """Horizontal bars per case (df's index): each of `cols` over `base`, with the target line."""
    _frame(df, (*cols, base), "df")
    long = (df[cols].div(df[base], axis=0).rename_axis("case").reset_index()
            .melt(id_vars="case", var_name="call", value_name="ratio"))
    sns.barplot(data=long, y="case", x="ratio", hue="call", palette="deep", ax=ax)
    ax.axvline(target, ls="--", color="k", lw=1, label=f"target {target}x")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("")
    ax.legend(fontsize=8, ncol=len(cols), loc="upper center", bbox_to_anchor=(0.5, legend_y))
    ax.set_title(title)
    return ax


def plot_versions(df: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Lines: best TFLOP/s per version, one line per (head_dim, causal)."""
    _frame(df, ("version", "setting", "tflops"), "df")
    ax = ax or plt.subplots(figsize=(7, 3.6))[1]
    sns.lineplot(data=df, x="version", y="tflops", hue="setting", marker="o", ax=ax)
    ax.set_xlabel("kernel version (docs/kernel-notes.md)")
    ax.set_ylabel("TFLOP/s at 2 x 8192 x 32 heads")
    ax.set_title("What each tuning step bought")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return ax


def plot_p_grid(df: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """Stacked bars: where P's values land on the e4m3 grid, with and without the max offset."""
    _frame(df, ("max_offset",), "df")
    cols = [c for c in ("zero", "subnormal", "normal") if c in df.columns]
    if not cols:
        raise ValueError(f"df: expected some of the columns zero, subnormal, normal "
                         f"(`explain.p_grid_fractions`), got {list(df.columns)}")
    ax = ax or plt.subplots(figsize=(6.5, 3.4))[1]
    df.set_index("max_offset")[cols].plot.barh(stacked=True, ax=ax, color=sns.color_palette("rocket_r", len(cols)))
    ax.set_xlabel("fraction of P values (after the e4m3 cast)")
    ax.set_ylabel("max offset")
    ax.set_title("The offset lifts small probabilities out of e4m3's subnormals")
    return ax


def plot_ws(df: pd.DataFrame, target: float = 0.9, ax: plt.Axes | None = None,
            title: str = "FA3's structure in Gluon against the Triton kernel") -> plt.Axes:
    """Bars: TFLOP/s over FA3 FP8's per case and kernel (columns case, kernel, ratio; e.g.
    `fp8lab.kernels.explain.ws_record` for one version, or `v10_record`)."""
    _frame(df, ("case", "kernel", "ratio"), "df")
    ax = ax or plt.subplots(figsize=(9, 3.8))[1]
    sns.barplot(data=df, x="case", y="ratio", hue="kernel", palette="mako", ax=ax)
    ax.axhline(target, ls="--", color="k", lw=1, label=f"target {target}x")
    ax.tick_params(axis="x", rotation=70)
    ax.set_xlabel("")
    ax.set_ylabel("TFLOP/s over FA3 FP8's (same run)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(title)
    return ax
