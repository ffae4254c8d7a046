"""fp8lab.plots.perf: the figures draw from frames of the records' shape, and refuse a frame they cannot read by
name instead of a seaborn/pandas error or an empty figure."""

from __future__ import annotations

import random

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fp8lab.plots import perf as plots  # noqa: E402


def _grid(rng: random.Random) -> pd.DataFrame:
    return pd.DataFrame([dict(case=f"{16384 // s}x{s}x32x{d}", head_dim=d, provider=p, tflops=rng.uniform(300, 900))
                         for d in (64, 128) for s in (2048, 8192) for p in ("fp8lab", "fa3-fwd FP8")])


def test_plot_providers_draws_one_head_dim_and_names_a_missing_one() -> None:
    grid = _grid(random.Random())
    ax = plots.plot_providers(grid, 128)
    assert len([p for p in ax.patches if p.get_height() > 0]) == 4  # 2 cases x 2 providers
    for head_dim in (96, "128"):  # both drew an empty figure
        with pytest.raises(ValueError, match=r"head_dim: expected one of the grid's timed head dims \[64, 128\]"):
            plots.plot_providers(grid, head_dim)
    with pytest.raises(ValueError, match=r"grid: expected columns .* missing \['tflops'\]"):  # was KeyError: 'tflops'
        plots.plot_providers(grid.drop(columns="tflops"), 128)
    with pytest.raises(TypeError, match="grid: expected a pandas DataFrame, got list"):
        plots.plot_providers(grid.to_dict("records"), 128)
    plt.close("all")


def test_plots_refuse_empty_frames_and_missing_columns() -> None:
    rng = random.Random()
    ratios = pd.DataFrame(dict(seqlen=[2048, 8192] * 2, head_dim=[64, 64, 128, 128],
                               ratio=[rng.uniform(0.7, 1.1) for _ in range(4)]))
    assert plots.plot_ratio(ratios).get_ylabel()
    with pytest.raises(ValueError, match="ratios: expected rows to plot, got an empty DataFrame"):
        plots.plot_ratio(ratios.iloc[:0])
    with pytest.raises(ValueError, match=r"ratios: expected columns .* missing \['ratio'\]"):  # seaborn's "Could not interpret"
        plots.plot_ratio(ratios.drop(columns="ratio"))
    t = pd.date_range("2026-01-01 10:00:00", periods=5, freq="100ms")
    log = pd.DataFrame(dict(time=t, sm_mhz=[rng.uniform(1700, 1980) for _ in t], power_w=[700.0] * 5))
    assert len(plots.plot_clock_trace(log, {"timed": (t[1], t[2])})) == 2
    with pytest.raises(ValueError, match="clocks: expected rows to plot"):  # was an IndexError from iloc[0]
        plots.plot_clock_trace(log.iloc[:0])
    with pytest.raises(ValueError, match="df: expected some of the columns zero, subnormal, normal"):
        plots.plot_p_grid(pd.DataFrame(dict(max_offset=[0.0, 8.0])))  # was "no numeric data to plot"
    plt.close("all")


def test_plot_roofline_needs_a_bandwidth() -> None:
    points = pd.DataFrame(dict(intensity=[100.0, 2000.0], tflops=[300.0, 600.0], provider=["a", "b"]))
    assert plots.plot_roofline(points, {"fp8": 1979.0}, 4.8).get_xscale() == "log"
    for copy_tbps in (0.0, float("nan"), "4.8"):  # 0 and NaN drew no slope; a str was a numpy ufunc error
        with pytest.raises(ValueError, match="copy_tbps: expected a finite number > 0"):
            plots.plot_roofline(points, {"fp8": 1979.0}, copy_tbps)
    plt.close("all")


def test_plot_quant_shapes_takes_one_version() -> None:
    """Two versions' repeats in one frame would be drawn as one min-max bar per split; one kernel alone drew
    nothing but seaborn's ZeroDivisionError (its dodge divides by the kernels less one)."""
    rng = random.Random()
    df = pd.DataFrame([dict(version=v, batch=b, size=f"{b}x{16384 // b}x32x128 (128 MiB)", kernel="per-token",
                            frac_copy_graph=rng.uniform(0.9, 1.0), copy_tbps_graph=4.2)
                       for v in ("v18", "v25") for b in (1, 2, 4)])
    assert plots.plot_quant_shapes(df[df["version"] == "v18"]).get_title()
    with pytest.raises(ValueError, match=r"df: expected one version's record, got versions \['v18', 'v25'\]"):
        plots.plot_quant_shapes(df)
    plt.close("all")
