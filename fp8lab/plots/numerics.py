"""Seaborn figures (and the tables behind them) for FP8 numerics.

Every number comes from `fp8lab.formats` at call time. Each `plot_*` takes an
optional matplotlib `ax`, draws one message, labels its axes with units and
returns the `Axes`; each `*_frame` / `*_table` returns the pandas DataFrame a
figure is drawn from, so a notebook can show the numbers beside the plot.
"""

from __future__ import annotations

import math
import numbers
from typing import Iterable, Sequence

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from fp8lab import formats, metrics
from fp8lab.formats import FP8Format

__all__ = [
    "ELEMENT_FORMATS",
    "format_table",
    "code_table",
    "value_grid_frame",
    "relative_spacing_frame",
    "rounding_error_frame",
    "rounding_summary",
    "scale_sweep_frame",
    "amax_scale_table",
    "plot_value_grid",
    "plot_relative_spacing",
    "plot_rounding_errors",
    "plot_scale_sweep",
]

FormatLike = str | FP8Format | torch.dtype


# Element formats (e8m0fnu is a scale format whose 254 binades would dwarf them in a shared plot).
ELEMENT_FORMATS: tuple[str, ...] = tuple(n for n, f in formats.FORMATS.items() if f.mantissa_bits > 0)


def _formats(fmts: Iterable[FormatLike] | FormatLike | None, default: Iterable[str] = tuple(formats.FORMATS)
             ) -> list[FP8Format]:
    """The formats named by `fmts` (a list of them, or one: "e4m3fn" is one format, not five letters)."""
    if isinstance(fmts, (str, FP8Format, torch.dtype)):
        fmts = [fmts]
    return [formats.get_format(f) for f in (fmts if fmts is not None else default)]


def _axes(ax: plt.Axes | None, size: tuple[float, float] = (8, 3.5)) -> plt.Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def format_table(fmts: Iterable[FormatLike] | None = None) -> pd.DataFrame:
    """One row per format: bit layout, bias, max, smallest values, range and precision.

    `binades` = log2(max / min_subnormal), the dynamic range in powers of two;
    `rel_precision` = 2^-(mantissa_bits + 1), a bound on the relative rounding
    error of round-to-nearest on normal values (the worst case, a tie just above
    a power of two, is 2^-(m+1) / (1 + 2^-(m+1))).
    """
    rows = []
    for f in _formats(fmts):
        v = formats.representable_values(f)
        codes = formats.decode(torch.arange(256).to(torch.uint8), f)
        rows.append(
            {
                "format": f.name,
                "layout": f"{'s' if f.has_sign else '-'}/{f.exponent_bits}/{f.mantissa_bits}",
                "bias": f.bias,
                "max": f.max,
                "min_normal": f.min_normal,
                "min_subnormal": f.min_subnormal,
                "binades": math.log2(f.max / f.min_subnormal),
                "rel_precision": 2.0 ** -(f.mantissa_bits + 1),
                "finite_values": v.numel(),
                "nan_codes": int(torch.isnan(codes).sum()),
                "inf": f.has_inf,
                "-0": f.has_negative_zero,
                "torch_dtype": str(f.torch_dtype).replace("torch.", "") if f.torch_dtype else None,
            }
        )
    return pd.DataFrame(rows).set_index("format")


def code_table(fmt: FormatLike, codes: Sequence[int] | None = None) -> pd.DataFrame:
    """Bit fields and value of each code (all 256 by default): code, bits, sign, exponent, mantissa, value."""
    f = formats.get_format(fmt)
    codes = list(range(256)) if codes is None else list(codes)
    bad = [c for c in codes if isinstance(c, bool) or not isinstance(c, numbers.Integral) or not 0 <= c <= 255]
    if bad:
        raise ValueError(f"codes: expected 8-bit codes, ints in 0..255, got {bad[:5]}")
    values = formats.decode(torch.tensor(codes, dtype=torch.int64).to(torch.uint8), f).tolist()
    m, e = f.mantissa_bits, f.exponent_bits
    rows = []
    for c, v in zip(codes, values):
        b = f"{c:08b}"
        rows.append(
            {
                "code": f"0x{c:02X}",
                "bits": f"{b[0]} {b[1:1 + e]} {b[1 + e:]}".strip() if f.has_sign else b,
                "sign": c >> 7 if f.has_sign else None,
                "exponent": (c >> m) & ((1 << e) - 1),
                "mantissa": c & ((1 << m) - 1) if m else None,
                "value": v,
            }
        )
    return pd.DataFrame(rows)


def value_grid_frame(fmts: Iterable[FormatLike] | None = None) -> pd.DataFrame:
    """Every positive finite value of each format (default: the element formats):
    columns format, value, log2_value, kind ('normal' / 'subnormal')."""
    rows = []
    for f in _formats(fmts, ELEMENT_FORMATS):
        v = formats.representable_values(f)
        v = v[v > 0]
        kind = ["subnormal" if x < f.min_normal else "normal" for x in v.tolist()]
        rows.append(pd.DataFrame({"format": f.name, "value": v.numpy(), "log2_value": torch.log2(v).numpy(), "kind": kind}))
    return pd.concat(rows, ignore_index=True)


def relative_spacing_frame(fmts: Iterable[FormatLike] | None = None) -> pd.DataFrame:
    """ulp(v)/v at every positive grid value v of each format (default: the element
    formats): columns format, x, rel_spacing. Between grid values the spacing is
    constant, so a step plot of these points is exact."""
    rows = []
    for f in _formats(fmts, ELEMENT_FORMATS):
        v = formats.representable_values(f)
        v = v[v > 0]
        rows.append(pd.DataFrame({"format": f.name, "x": v.numpy(), "rel_spacing": (formats.ulp(v, f) / v).numpy()}))
    return pd.concat(rows, ignore_index=True)


def rounding_error_frame(
    x: torch.Tensor,
    fmts: Iterable[FormatLike] | None = None,
    roundings: Sequence[str] = ("nearest",),
    generator: torch.Generator | None = None,
) -> pd.DataFrame:
    """Rounding errors of `quantize` on the values `x` (any float tensor, flattened).

    Columns: format, rounding, x, q, error (q - x), rel_error ((q - x)/|x|),
    error_ulps ((q - x) / ulp(x)). Zeros are dropped (no relative error);
    e8m0fnu sees |x|.
    """
    x = x.detach().flatten().double().cpu()
    x = x[(x != 0) & torch.isfinite(x)]
    frames = []
    for f in _formats(fmts):
        xf = x.abs() if not f.has_sign else x
        for rounding in roundings:
            gen = generator if rounding == "stochastic" else None
            q = formats.quantize(xf, f, rounding=rounding, overflow="saturate", generator=gen)
            err = q - xf
            frames.append(
                pd.DataFrame(
                    {
                        "format": f.name,
                        "rounding": rounding,
                        "x": xf.numpy(),
                        "q": q.numpy(),
                        "error": err.numpy(),
                        "rel_error": (err / xf.abs()).numpy(),
                        "error_ulps": (err / formats.ulp(xf, f)).numpy(),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def rounding_summary(frame: pd.DataFrame, by: str | Sequence[str] = "rounding") -> pd.DataFrame:
    """Per group of `rounding_error_frame` rows (by "rounding", "format" or both): the mean error
    in ulps (bias), the largest |error| in ulps and the RMS relative error."""
    return frame.groupby(by).agg(
        mean_error_ulps=("error_ulps", "mean"),
        max_abs_error_ulps=("error_ulps", lambda e: e.abs().max()),
        rms_rel_error=("rel_error", lambda e: math.sqrt((e**2).mean())),
    )


def scale_sweep_frame(
    x: torch.Tensor, fmts: Iterable[FormatLike] | None = None, log2_scales: Iterable[int] = range(-30, 31)
) -> pd.DataFrame:
    """Relative L2 error of scale-quantize-descale, `quantize(x * 2^k) / 2^k`, for each k.

    Shows the window of scales where a format works (too small: values flush to
    zero; too large: values saturate) and the error floor inside it (precision).
    Columns: format, log2_scale, rel_l2, saturated (fraction at +-max), flushed (fraction -> 0).
    """
    x = x.detach().flatten().double().cpu()
    norm = x.norm().item()
    if not 0 < norm < math.inf:  # all zeros, empty, NaN or inf: every rel_l2 would be NaN
        raise ValueError(f"scale_sweep_frame: x needs finite values, not all zero, got {x.numel()} values with "
                         f"L2 norm {norm}")
    rows = []
    for f in _formats(fmts):
        xf = x if f.has_sign else x.abs()
        for k in log2_scales:
            s = 2.0**k
            q = formats.quantize(xf * s, f, overflow="saturate")
            rows.append(
                {
                    "format": f.name,
                    "log2_scale": k,
                    "rel_l2": ((q / s - xf).norm() / norm).item(),
                    "saturated": (q.abs() == f.max).double().mean().item(),
                    "flushed": ((q == 0) & (xf != 0)).double().mean().item(),
                }
            )
    return pd.DataFrame(rows)


def amax_scale_table(x: torch.Tensor, sweep: pd.DataFrame, within: float = 2.0) -> pd.DataFrame:
    """The usual per-tensor scale `s = max / amax(x)` for each format of `sweep` (a
    `scale_sweep_frame` of the same `x`), one row per format:

    scale, log2_scale (not a whole number in general), rel_l2 at that scale
    (quantize(x * s) / s against x), and window: the span, in binades, of the sweep's
    power-of-two scales whose rel_l2 is within `within` times the format's best (the usable window).
    """
    x = x.detach().flatten().double().cpu()
    amax = x.abs().max().item()
    if not amax > 0 or not math.isfinite(amax):
        raise ValueError(f"amax_scale_table: x needs a finite, nonzero amax, got {amax}")
    rows = []
    for name, errs in sweep.groupby("format", sort=False):
        f = formats.get_format(name)
        xf = x if f.has_sign else x.abs()
        s = f.max / amax
        good = errs[errs.rel_l2 < within * errs.rel_l2.min()].log2_scale
        rows.append({
            "format": name,
            "scale": s,
            "log2_scale": math.log2(s),
            "rel_l2 at amax scale": metrics.rel_l2(formats.quantize(xf * s, f) / s, xf),
            f"window (binades within {within:g}x of best)": int(good.max() - good.min() + 1),
        })
    return pd.DataFrame(rows).set_index("format")


def plot_value_grid(
    fmts: Iterable[FormatLike] | None = None, ax: plt.Axes | None = None, log2: bool = True,
    xlim: tuple[float, float] | None = None,
) -> plt.Axes:
    """Each positive value of each format as a tick on a log2 (or linear) axis, subnormals in another colour."""
    df = value_grid_frame(fmts)
    col = "log2_value" if log2 else "value"
    if xlim is not None:
        df = df[(df[col] >= xlim[0]) & (df[col] <= xlim[1])]
    ax = _axes(ax, (9, 0.6 + 0.55 * df["format"].nunique()))
    sns.stripplot(data=df, x=col, y="format", hue="kind", hue_order=["normal", "subnormal"],
                  marker="|", size=14, linewidth=1.2, jitter=False, ax=ax)
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_xlabel("log2(value)" if log2 else "value")
    ax.set_ylabel("format")
    ax.set_title("Where the positive FP8 values lie" + (" (log2 scale)" if log2 else ""))
    return ax


def plot_relative_spacing(fmts: Iterable[FormatLike] | None = None, ax: plt.Axes | None = None) -> plt.Axes:
    """ulp(x)/|x| against |x|, log-log: a sawtooth between 2^-m and 2^-(m+1) over the
    normal range, rising towards 1 through the subnormals."""
    df = relative_spacing_frame(fmts)
    ax = _axes(ax)
    sns.lineplot(data=df, x="x", y="rel_spacing", hue="format", drawstyle="steps-post", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("|x|")
    ax.set_ylabel("relative spacing ulp(x) / |x|")
    ax.set_title("Relative spacing: precision per format over its range")
    return ax


def plot_rounding_errors(
    frame: pd.DataFrame, column: str = "error_ulps", ax: plt.Axes | None = None, bins: int = 60
) -> plt.Axes:
    """Histogram of one error column of `rounding_error_frame`, one colour per format (or rounding)."""
    hue = "format" if frame["format"].nunique() > 1 else "rounding"
    ax = _axes(ax)
    sns.histplot(data=frame, x=column, hue=hue, bins=bins, stat="density", common_norm=False,
                 element="step", fill=False, ax=ax)
    labels = {
        "error_ulps": "rounding error (q - x) / ulp(x)  [ulp]",
        "rel_error": "relative rounding error (q - x) / |x|",
        "error": "rounding error q - x",
    }
    ax.set_xlabel(labels.get(column, column))
    ax.set_ylabel("density")
    ax.set_title("Rounding errors" + (f" ({frame['format'].iloc[0]})" if hue == "rounding" else ""))
    return ax


def plot_scale_sweep(frame: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Axes:
    """rel L2 error of scale-quantize-descale against log2(scale), log y: range vs precision."""
    ax = _axes(ax)
    sns.lineplot(data=frame, x="log2_scale", y="rel_l2", hue="format", marker="o", markersize=3, ax=ax)
    ax.set_yscale("log")
    ax.set_xlabel("log2(scale) applied before quantizing")
    ax.set_ylabel("relative L2 error after descaling")
    ax.set_title("Range against precision: the usable window and the error floor")
    return ax
