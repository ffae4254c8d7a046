"""The tables behind notebook 01's figures (fp8lab.plots.numerics), against direct computation."""

from __future__ import annotations

import math

import pytest
import torch

from fp8lab import formats
from fp8lab.plots import numerics as plots


def test_rounding_summary_by_rounding_and_format() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4000, generator=g, dtype=torch.float64)
    frame = plots.rounding_error_frame(x, ["e4m3fn", "e5m2"], roundings=("nearest", "stochastic"), generator=g)
    by_both = plots.rounding_summary(frame, ["format", "rounding"])
    assert list(by_both.columns) == ["mean_error_ulps", "max_abs_error_ulps", "rms_rel_error"]
    assert (by_both.xs("nearest", level="rounding").max_abs_error_ulps <= 0.5).all()
    assert (by_both.xs("stochastic", level="rounding").max_abs_error_ulps < 1).all()
    assert (by_both.xs("stochastic", level="rounding").max_abs_error_ulps > 0.5).all()  # SR errs beyond half a ulp
    for fmt in ("e4m3fn", "e5m2"):  # the RMS relative error and the bias in ulps, by hand
        q = formats.quantize(x, fmt)
        rms = math.sqrt((((q - x) / x.abs()) ** 2).mean().item())
        assert by_both.loc[(fmt, "nearest"), "rms_rel_error"] == pytest.approx(rms, rel=1e-12)
        bias = ((q - x) / formats.ulp(x, fmt)).mean().item()
        assert by_both.loc[(fmt, "nearest"), "mean_error_ulps"] == pytest.approx(bias, rel=1e-12, abs=1e-15)
    above = plots.rounding_summary(plots.rounding_error_frame(torch.tensor([1.03, 2.06]), ["e4m3fn"]), "format")
    assert above.loc["e4m3fn", "mean_error_ulps"] == pytest.approx(-0.24)  # both 0.24 ulp above 1.0 and 2.0: signed
    normal = plots.rounding_summary(plots.rounding_error_frame(x[x.abs() > 2**-6], ["e4m3fn", "e5m2"]), "format")
    assert 1.9 < normal.loc["e5m2", "rms_rel_error"] / normal.loc["e4m3fn", "rms_rel_error"] < 2.1  # one bit fewer


def test_amax_scale_table_matches_direct_computation() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 113, generator=g, dtype=torch.float64) * 7
    sweep = plots.scale_sweep_frame(x, ["e4m3fn", "e5m2"], range(-20, 21))
    for name, k in (("e4m3fn", -14), ("e4m3fn", 0), ("e5m2", 14), ("e5m2", -20)):  # flushing, inside, saturating
        f, row = formats.get_format(name), sweep[(sweep.format == name) & (sweep.log2_scale == k)].iloc[0]
        q = formats.quantize(x * 2.0**k, f, overflow="saturate")
        assert row["rel_l2"] == pytest.approx(((q / 2.0**k - x).norm() / x.norm()).item(), rel=1e-12)
        assert row["saturated"] == (q.abs() == f.max).double().mean().item()
        assert row["flushed"] == (q == 0).double().mean().item()
    assert sweep["saturated"].max() > 0.5 and sweep["flushed"].max() > 0.5  # both walls are in the sweep
    table = plots.amax_scale_table(x, sweep)
    assert list(table.index) == ["e4m3fn", "e5m2"]
    amax = x.abs().max().item()
    for name in ("e4m3fn", "e5m2"):
        f = formats.get_format(name)
        s = f.max / amax
        err = ((formats.quantize(x * s, f) / s - x).norm() / x.norm()).item()
        row = table.loc[name]
        assert row["scale"] == pytest.approx(s) and row["log2_scale"] == pytest.approx(math.log2(s))
        assert row["rel_l2 at amax scale"] == pytest.approx(err, rel=1e-12)
        errs = sweep[sweep.format == name]
        good = errs[errs.rel_l2 < 2 * errs.rel_l2.min()].log2_scale
        assert row["window (binades within 2x of best)"] == good.max() - good.min() + 1
        assert err < 2 * errs.rel_l2.min()  # the amax scale lies inside the window
    assert table.loc["e5m2", "window (binades within 2x of best)"] > table.loc["e4m3fn", "window (binades within 2x of best)"]
    wide = plots.amax_scale_table(x, sweep, within=4.0)
    assert (wide["window (binades within 4x of best)"] >= table["window (binades within 2x of best)"]).all()


@pytest.mark.parametrize("bad", [torch.zeros(8, dtype=torch.float64), torch.tensor([1.0, math.inf])])
def test_amax_scale_table_needs_a_finite_nonzero_amax(bad: torch.Tensor) -> None:
    sweep = plots.scale_sweep_frame(torch.ones(4), ["e4m3fn"], range(-2, 3))
    with pytest.raises(ValueError, match="finite, nonzero amax"):
        plots.amax_scale_table(bad, sweep)


def test_single_format_names_codes_and_degenerate_x_are_checked() -> None:
    """One format name is one format (not its letters); codes outside 0..255 were wrapped to another code's
    value; an all-zero or NaN x gave a sweep of NaN."""
    assert list(plots.format_table("e4m3fn").index) == ["e4m3fn"]
    assert set(plots.value_grid_frame("e5m2")["format"]) == {"e5m2"}
    for bad in ([256], [-1], [1.5]):
        with pytest.raises(ValueError, match=r"codes: expected 8-bit codes, ints in 0..255"):
            plots.code_table("e4m3fn", bad)
    x = torch.randn(64, generator=torch.Generator().manual_seed(int(torch.randint(0, 2**31, ()))))
    assert plots.scale_sweep_frame(x, "e4m3fn", range(0, 2))["rel_l2"].notna().all()
    for bad in (torch.zeros(8), torch.tensor([1.0, math.nan]), torch.zeros(0)):
        with pytest.raises(ValueError, match="x needs finite values, not all zero"):
            plots.scale_sweep_frame(bad, ["e4m3fn"], range(0, 2))
