"""Tables read from the H200's recorded runs (`results/h200/`), as notebook 07 shows them.

Each function takes record rows as pandas frames (`fp8lab.bench.records_frame`, one file's rows)
or the results folder, and returns a DataFrame, Series or dict whose columns its docstring names.
The notebook only calls, plots and shows them; `tests/test_records.py` checks each on small
synthetic records and, where a figure is quoted, on the H200's.

Names used throughout: a *grid* is `records_frame(d, "grid")` restricted to one file's timed rows
(columns case, provider, tflops, head_dim, seqlen, causal; one row per case and provider); a
*ratio* is one provider's TFLOP/s over another's on the same case of the same run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from fp8lab.bench import (
    FACTS_H200,
    H200_CEILINGS,
    AttentionCase,
    attention_intensity,
    check_frame,
    clocks_while_timed,
    exp2_ceiling_tflops,
    load_results,
    mma_peak_tflops,
    parse_case,
    quant_floor_us,
    read_clock_log,
)
from fp8lab.layout import check_count

__all__ = [
    "GRID_KERNELS",
    "after_compile_summary",
    "cases_faster",
    "clock_speed_correlation",
    "copy_range",
    "exp2_table",
    "fastest_kernel",
    "fastest_quant",
    "flush_halves",
    "grid_rows",
    "grid_runs",
    "host_path_table",
    "kernel_ratio_ranges",
    "live_table",
    "power_by_head_dim",
    "prepared_overhead",
    "probe_ranges",
    "provider_across_runs",
    "provider_table",
    "quant_default_rows",
    "quant_floor_table",
    "quant_before",
    "quant_before_added",
    "quant_before_long",
    "quant_flush",
    "ratio_summary",
    "record_context",
    "reverse_table",
    "roofline_points",
    "round_bias",
    "round_spreads",
    "row_lists",
    "since_version",
    "span_range",
    "split_lows",
    "split_spans",
    "spread_summary",
    "target_table",
    "v19_clock_timings",
    "version_key",
    "vllm_ratio_by_version",
    "vllm_varlen_table",
]

GRID_KERNELS = ("fp8lab", "fp8lab ws")  # our Triton kernel and our Gluon kernel, as the grids name them
GLUON = "fp8lab ws"
FA3_FP8 = "fa3-fwd FP8"


def version_key(version: str) -> tuple[int, str]:
    """Sort key of a record version, "v8a" -> (8, "a"): v2 before v10."""
    m = re.fullmatch(r"v(\d+)([a-z]?)", str(version))
    if m is None:
        raise ValueError(f"version: expected 'v<number>' with an optional letter, e.g. 'v23' or 'v8a', got {version!r}")
    return int(m.group(1)), m.group(2)


# ---------------------------------------------------------------------------
# (a), (b): one grid and the targets


def grid_rows(grid_all: pd.DataFrame, version: str) -> pd.DataFrame:
    """The timed rows (tflops not NaN) of one version of `records_frame(d, "grid")`; a ValueError
    naming the recorded versions if `version` is not one."""
    check_frame(grid_all, ("version", "tflops"), "grid_all")
    versions = sorted(grid_all["version"].unique(), key=version_key)
    if version not in versions:
        raise ValueError(f"record_version: expected one of {versions} (a bench_<version>_grid.json), got {version!r}")
    return grid_all[(grid_all["version"] == version) & grid_all["tflops"].notna()].copy()


def provider_table(grid: pd.DataFrame, value: str = "tflops") -> pd.DataFrame:
    """A grid as a table: one row per case, one column per provider (both in record order), `value`
    (TFLOP/s) in the cells, NaN where a provider was not timed."""
    check_frame(grid, ("case", "provider", value), "grid")
    return grid.pivot_table(index="case", columns="provider", values=value, sort=False)


def record_context(path: str | Path, keys: Iterable[str] = ("gpu", "driver", "torch", "triton", "cuda", "fa3_fwd",
                                                            "date")) -> dict:
    """The `keys` of a record's context block (None where the record lacks one)."""
    ctx = load_results(path)["context"]
    return {k: ctx.get(k) for k in keys}


def fastest_kernel(grid: pd.DataFrame, kernels: Iterable[str] = GRID_KERNELS) -> pd.DataFrame:
    """Per case (in record order), the grid's row of the faster of our `kernels` (highest tflops);
    its `provider` says which."""
    check_frame(grid, ("case", "provider", "tflops"), "grid")
    mine = grid[grid["provider"].isin(list(kernels))]
    if mine.empty:
        raise ValueError(f"grid: no rows of {list(kernels)}")
    order = {c: i for i, c in enumerate(dict.fromkeys(grid["case"]))}
    best = mine.loc[mine.groupby("case", sort=False)["tflops"].idxmax()]
    return best.sort_values("case", key=lambda s: s.map(order)).reset_index(drop=True)


def target_table(grid: pd.DataFrame, against: str = FA3_FP8, target: float = 0.9,
                 kernels: Iterable[str] = GRID_KERNELS,
                 beat: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The issue's targets per case (index: case, in record order) for the faster of our kernels.

    Columns: head_dim, seqlen, causal; kernel (which of ours was faster); "fastest fp8lab" and
    `against` (TFLOP/s); ratio (the first over the second); "meets <target>" (ratio >= target);
    and for each `beat` label -> provider (default: FA3 bf16 and vLLM's FP8 varlen path) a column
    "beats <label>": our faster kernel's TFLOP/s above that provider's (NaN where it was not timed).
    """
    beat = {"FA3 bf16": "fa3-fwd bf16", "vLLM FP8 varlen": "vLLM FA3 FP8 varlen"} if beat is None else beat
    check_frame(grid, ("case", "provider", "tflops", "head_dim", "seqlen", "causal"), "grid")
    table = provider_table(grid)
    if against not in table:
        raise ValueError(f"grid: no {against!r} rows to compare against")
    best = fastest_kernel(grid, kernels).set_index("case")
    out = best[["head_dim", "seqlen", "causal"]].copy()
    out["kernel"] = best["provider"]
    out["fastest fp8lab"] = best["tflops"]
    out[against] = table.loc[out.index, against]
    out["ratio"] = out["fastest fp8lab"] / out[against]
    out[f"meets {target:g}"] = out["ratio"] >= target
    for label, provider in beat.items():
        other = table[provider].reindex(out.index) if provider in table else pd.Series(float("nan"), index=out.index)
        out[f"beats {label}"] = (out["fastest fp8lab"] > other).where(other.notna())
    return out[out["ratio"].notna()]


def ratio_summary(ratios: pd.DataFrame, target: float | None = 0.9) -> pd.DataFrame:
    """One row per column of `ratios` (a ratio per case in each): lowest, highest, cases (not NaN)
    and, with a `target`, "at or above <target>" (how many cases reach it)."""
    out = pd.DataFrame({"lowest": ratios.min(), "highest": ratios.max(), "cases": ratios.notna().sum()})
    out.index.name = None
    if target is not None:
        out[f"at or above {target:g}"] = (ratios >= target).sum()
    return out


def kernel_ratio_ranges(grid: pd.DataFrame, against: str = FA3_FP8, target: float = 0.9,
                        kernels: Iterable[str] = GRID_KERNELS) -> pd.DataFrame:
    """`ratio_summary` of each of our kernels over `against` where the grid timed it (rows: the
    kernels, then "faster per case", the better of the two on each case)."""
    table = provider_table(grid)
    if against not in table:
        raise ValueError(f"grid: no {against!r} rows to compare against")
    kernels = [k for k in kernels if k in table]
    if not kernels:
        raise ValueError(f"kernels: expected some of the grid's providers {list(table.columns)}, got none of them")
    ratios = table[kernels].div(table[against], axis=0)
    ratios["faster per case"] = ratios.max(axis=1)
    return ratio_summary(ratios, target)


def grid_runs(results_dir: str | Path, against: str = FA3_FP8, target: float = 0.9,
              kernels: Iterable[str] = GRID_KERNELS) -> pd.DataFrame:
    """Every recorded grid (`bench_v<N>_grid.json` and its reruns `bench_v<N>_grid_run<K>.json`), one
    row each, in version order: grid (the file's name without bench_ and .json), version, timing
    ("one median each", or "<n> rounds after <s> s of load" / "<n> rounds, no load first"), cases
    (timed for `against` and one of our kernels), lowest and highest ratio of the faster of our
    kernels over `against`, "lowest at" (that case), met (cases at or above `target`), and
    "Gluon faster" (cases where the Gluon kernel is the faster; NaN where the grid has none)."""
    pattern = re.compile(r"bench_(v\d+[a-z]?)_grid(_run\d+)?\.json")
    rows = []
    for path in Path(results_dir).glob("bench_v*_grid*.json"):
        m = pattern.fullmatch(path.name)
        if m is None:
            continue
        data = load_results(path)
        grid = pd.DataFrame([r for r in data["rows"] if r.get("tflops") is not None])
        table = provider_table(grid)
        mine = [k for k in kernels if k in table]
        if against not in table or not mine:
            continue
        ratio = (table[mine].max(axis=1) / table[against]).dropna()
        if ratio.empty:
            continue
        rounds, settle = data["meta"].get("rounds"), data["meta"].get("settle_s")
        timing = ("one median each" if not rounds else f"{rounds} rounds after {settle:g} s of load" if settle
                  else f"{rounds} rounds, no load first")
        gluon = int((table.loc[ratio.index, mine].idxmax(axis=1) == GLUON).sum()) if GLUON in mine else float("nan")
        rows.append(dict(grid=path.stem.removeprefix("bench_"), version=m.group(1), timing=timing, cases=len(ratio),
                         lowest=ratio.min(), highest=ratio.max(), **{"lowest at": ratio.idxmin()},
                         met=int((ratio >= target).sum()), **{"Gluon faster": gluon}))
    if not rows:
        raise FileNotFoundError(f"no bench_v*_grid*.json with {against!r} under {results_dir}")
    rows.sort(key=lambda r: (version_key(r["version"]), r["grid"]))
    return pd.DataFrame(rows).astype({"Gluon faster": "Int64"})


def host_path_table(results_dir: str | Path) -> pd.DataFrame:
    """v5's speed rows (`bench_v5_raw.json`) of the cases it timed both ways: TFLOP/s of the
    kernel's call as v5 made it ("default") and as v2 made it ("v2 host path": six device syncs in
    the input checks, inside the timed call), and "v2 host path / default". Index: case."""
    raw = pd.DataFrame([r for r in load_results(Path(results_dir) / "bench_v5_raw.json")["rows"]
                        if r.get("section") == "speed" and r.get("provider") in ("default", "v2 host path")
                        and r.get("tflops") is not None])
    table = raw.pivot_table(index="case", columns="provider", values="tflops", sort=False).dropna()
    table["v2 host path / default"] = table["v2 host path"] / table["default"]
    return table


def row_lists(table: pd.DataFrame, digits: int = 3) -> dict[str, list]:
    """Each row of `table` as a list of plain numbers (floats rounded to `digits`, integers kept),
    keyed by the index: how the notebook records a summary."""
    def plain(x: object) -> object:
        if isinstance(x, (bool, int)) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") in "biu"):
            return int(x)
        return round(float(x), digits)

    return {str(k): [plain(x) for x in row] for k, row in zip(table.index, table.itertuples(index=False))}


# ---------------------------------------------------------------------------
# (c): runs, clocks and rounds


def provider_across_runs(grid_all: pd.DataFrame, provider: str = FA3_FP8,
                         facts: list[dict] | None = None) -> pd.DataFrame:
    """One provider's TFLOP/s per case over every recorded grid (`records_frame(d, "grid")`): runs
    (grids that timed it), lowest, highest, "spread (%)" ((highest - lowest) / median of the runs)
    and "facts file" (the facts file's table, `FACTS_H200`, where it holds the case; NaN
    elsewhere). Index: case, in first-recorded order."""
    facts = FACTS_H200 if facts is None else facts
    rows = grid_all[(grid_all["provider"] == provider) & grid_all["tflops"].notna()]
    if rows.empty:
        raise ValueError(f"grid_all: no timed rows of {provider!r}")
    by = rows.groupby(["case", "version"], sort=False)["tflops"].median().unstack("version")
    out = pd.DataFrame({"runs": by.notna().sum(axis=1), "lowest": by.min(axis=1), "highest": by.max(axis=1)})
    out["spread (%)"] = (out["highest"] - out["lowest"]) / by.median(axis=1) * 100
    known = {f["case"] + (" causal" if f["causal"] else ""): f.get(provider) for f in facts}
    out["facts file"] = [known.get(c, float("nan")) for c in out.index]
    return out


def v19_clock_timings(results_dir: str | Path) -> pd.DataFrame:
    """v19's persistent-programs comparison (`bench_v19_ps2.json`, speed rows) joined to the clock log
    of its session (`run16/call2/clocks.csv`) by `bench.clocks_while_timed`: each timing's rows with
    sm_mhz, power_w and power_capped."""
    rdir = Path(results_dir)
    rows = pd.DataFrame([r for r in load_results(rdir / "bench_v19_ps2.json")["rows"]
                         if r.get("section") == "speed" and r.get("tflops") is not None])
    return clocks_while_timed(rows, read_clock_log(rdir / "run16" / "call2" / "clocks.csv"))


def power_by_head_dim(timed: pd.DataFrame) -> pd.DataFrame:
    """Per head dim (index) of timings joined to a clock log (`clocks_while_timed`): sm_mhz (the mean
    clock over its timings), power_w (the highest power drawn) and at_power_limit (the mean share of
    samples at the power limit)."""
    return timed.groupby("head_dim").agg(sm_mhz=("sm_mhz", "mean"), power_w=("power_w", "max"),
                                         at_power_limit=("power_capped", "mean"))


def clock_speed_correlation(timed: pd.DataFrame, min_head_dim: int = 128,
                            keys: Iterable[str] = ("case", "provider", "config")) -> tuple[float, int]:
    """Pearson correlation, over the timings at head dims >= `min_head_dim` that have a clock, of
    the SM clock with the timing's TFLOP/s over the median of the same `keys` (the same kernel on
    the same case); and how many timings that is."""
    busy = timed[timed["head_dim"] >= min_head_dim].dropna(subset=["sm_mhz"])
    keys = [k for k in keys if k in busy]
    relative = busy["tflops"] / busy.groupby(keys)["tflops"].transform("median")
    return float(busy["sm_mhz"].corr(relative)), len(busy)


def since_version(df: pd.DataFrame, first: int, column: str = "grid") -> pd.DataFrame:
    """The rows whose `column` ("v12_grid_run3", "v23_grid", ...) names version `first` or later."""
    first = check_count("first", first)  # 12 for v12
    return df[df[column].map(lambda g: version_key(str(g).split("_")[0])[0] >= first)]


def span_range(window: pd.DataFrame, span: tuple[pd.Timestamp, pd.Timestamp], column: str = "sm_mhz"
               ) -> tuple[float, float]:
    """The lowest and highest `column` of a clock log's samples (`bench.read_clock_log`, e.g.
    `explain.v23_swing`'s window) taken within `span` (start, end), both ends included."""
    inside = window.loc[window["time"].between(*span), column]
    if inside.empty:
        raise ValueError(f"window: no sample between {span[0]} and {span[1]}")
    return float(inside.min()), float(inside.max())


def after_compile_summary(after: pd.DataFrame, target: float = 0.9) -> pd.DataFrame:
    """`explain.v23_after_compile`'s rows by how the Gluon kernel was timed (index: timed, in order
    of appearance): lowest and highest ratio over FA3 FP8, "below <target>" (grids under it) and
    grids."""
    by = after.groupby("timed", sort=False)["ratio"]
    below = by.apply(lambda r: int((r < target).sum()))
    return pd.DataFrame({"lowest": by.min(), "highest": by.max(), f"below {target:g}": below, "grids": by.size()})


def _round_rows(results_dir: str | Path, runs: Mapping[str, str]) -> pd.DataFrame:
    """The timed rows of v23's round records (`bench_v23_rounds<suffix>.json`), with a grid column."""
    rows = pd.concat([pd.DataFrame(load_results(Path(results_dir) / f"bench_v23_rounds{suffix}.json")["rows"])
                      .assign(grid=label) for label, suffix in runs.items()], ignore_index=True)
    return rows[rows["tflops"].notna()]


def round_spreads(results_dir: str | Path, runs: Mapping[str, str] | None = None) -> pd.DataFrame:
    """How far one provider's rounds on one case lie apart in the v23 grids' round records
    (`bench_v23_rounds<suffix>.json`; `runs`: label -> suffix, default the first two grids): one
    row per grid, case and provider with "spread (%)" = (max - min) / median of its rounds' TFLOP/s."""
    rows = _round_rows(results_dir, {"v23": "", "v23 run 2": "_run2"} if runs is None else runs)
    by = rows.groupby(["grid", "case", "provider"], sort=False)["tflops"]
    return ((by.max() - by.min()) / by.median() * 100).rename("spread (%)").reset_index()


def round_bias(results_dir: str | Path, runs: Mapping[str, str] | None = None, min_head_dim: int = 128
               ) -> pd.DataFrame:
    """Whether a round comes out fast or slow: per grid (rows; `runs` as in `round_spreads`, default
    v23's first grid, timed after 1.5 s of load, and its third, with no load first) and round
    (columns, in the order timed), the mean over the cases at head dims >= `min_head_dim` and their
    providers of the round's TFLOP/s over the median of that provider's rounds on that case."""
    rows = _round_rows(results_dir, {"v23 (1.5 s of load first)": "", "v23 run 3 (no load first)": "_run3"}
                       if runs is None else runs)
    rows = rows[rows["head_dim"] >= min_head_dim]
    rel = rows["tflops"] / rows.groupby(["grid", "case", "provider"])["tflops"].transform("median")
    table = rows.assign(rel=rel).pivot_table(index="grid", columns="round", values="rel", aggfunc="mean", sort=False)
    return table.rename(columns=lambda r: f"round {int(r) + 1}")


def spread_summary(spreads: pd.DataFrame) -> pd.DataFrame:
    """`round_spreads` per provider (index): "median (%)" and "widest (%)" of its spreads, and where
    the widest was ("widest at": grid and case)."""
    by = spreads.groupby("provider")["spread (%)"]
    widest = spreads.loc[by.idxmax()].set_index("provider")
    return pd.DataFrame({"median (%)": by.median(), "widest (%)": by.max(),
                         "widest at": widest["grid"] + ", " + widest["case"]})


# ---------------------------------------------------------------------------
# (d): the roofline


def roofline_points(grid: pd.DataFrame, fastest: pd.DataFrame,
                    providers: Iterable[str] = (FA3_FP8, "fa3-fwd bf16")) -> pd.DataFrame:
    """The roofline's measured points: the faster of our kernels per case (`fastest_kernel`, as
    "fp8lab (faster kernel)") and the grid's `providers`; columns provider, case, tflops and
    intensity (FLOP per HBM byte, `bench.attention_intensity`; 2-byte inputs for bf16 providers)."""
    pts = pd.concat([fastest.assign(provider="fp8lab (faster kernel)"), grid[grid["provider"].isin(list(providers))]],
                    ignore_index=True)[["provider", "case", "tflops"]]
    pts["intensity"] = [attention_intensity(parse_case(c), input_bytes=2 if "bf16" in p else 1)
                        for c, p in zip(pts["case"], pts["provider"])]
    return pts


def exp2_table(grid: pd.DataFrame, fastest: pd.DataFrame, sm_mhz: Mapping[int, float],
               max_mhz: float = 1980.0) -> pd.DataFrame:
    """Per head dim (index) of the grid: the exp2 model's ceiling at `max_mhz` and at the clock the
    card kept at that head dim (`sm_mhz`, e.g. `power_by_head_dim`'s), "clock lost (%)", the FP8
    MMA model's peak and the measured FP8 GEMM (TFLOP/s); the best FA3 FP8 and best fp8lab (faster
    kernel) TFLOP/s over the grid's cases; and "best of the lower model" (the better of the two
    over the lower of the exp2 and MMA models at `max_mhz`)."""
    dims = sorted(grid["head_dim"].unique())
    missing = [int(d) for d in dims if d not in sm_mhz]
    if missing:
        raise ValueError(f"sm_mhz: expected a clock for every head dim of the grid {[int(d) for d in dims]}, "
                         f"none for {missing}")
    for name, mhz in (("max_mhz", max_mhz), *((f"sm_mhz[{d}]", sm_mhz[d]) for d in dims)):
        if not 100 <= mhz <= 10_000:  # 1.98 would be GHz: every ceiling 1000 times too low
            raise ValueError(f"{name}: expected a clock in MHz (100 to 10000, e.g. 1980), got {mhz!r}")
    ghz = max_mhz / 1000
    out = pd.DataFrame(index=pd.Index(dims, name="head_dim"))
    out["exp2 ceiling (model)"] = [exp2_ceiling_tflops(d, clock_ghz=ghz) for d in dims]
    out["at the clock measured in (c)"] = [exp2_ceiling_tflops(d, clock_ghz=sm_mhz[d] / 1000) for d in dims]
    out["clock lost (%)"] = [(1 - sm_mhz[d] / max_mhz) * 100 for d in dims]
    out["FP8 MMA peak (model)"] = mma_peak_tflops(clock_ghz=ghz)
    out["FP8 GEMM (measured)"] = H200_CEILINGS["FP8 GEMM (torch._scaled_mm, 8192^3)"]
    out["best FA3 FP8"] = grid[grid["provider"] == FA3_FP8].groupby("head_dim")["tflops"].max()
    out["best fp8lab (faster kernel)"] = fastest.groupby("head_dim")["tflops"].max()
    lower = out[["exp2 ceiling (model)", "FP8 MMA peak (model)"]].min(axis=1)
    out["best of the lower model"] = out[["best FA3 FP8", "best fp8lab (faster kernel)"]].max(axis=1) / lower
    return out


# ---------------------------------------------------------------------------
# (e): quantization


_QUANT_KNOBS = ("tile", "tile_words", "part_kib", "part_bytes", "fused_tile_elements", "_fresh_table")


def quant_default_rows(quant: pd.DataFrame, v5_size: str = "1x16384x32x128 (128 MiB)") -> pd.DataFrame:
    """The CUDA-graph timings of each quantization kernel at its default settings in the early
    `quant` records (`records_frame(d, "quant")`, v5-v15): rows with a `frac_copy_graph`, none of
    the knob sweeps' settings, not the copy itself and no "tile=" variant. v5 timed only `v5_size`
    and named two-pass kernels "... (2 passes)": both are filled in as later records write them.
    Columns: version, kernel, size, frac_copy_graph."""
    quant = quant.reindex(columns=list(dict.fromkeys([*quant.columns, "size", "frac_copy_graph", *_QUANT_KNOBS])))
    quant = quant.assign(size=quant["size"].fillna(v5_size),
                         kernel=quant["kernel"].str.replace(" (2 passes)", " two-pass", regex=False))
    keep = (quant["frac_copy_graph"].notna() & quant[list(_QUANT_KNOBS)].isna().all(axis=1)
            & ~quant["kernel"].str.contains("tile=|copy", regex=True, na=True))
    return quant.loc[keep, ["version", "kernel", "size", "frac_copy_graph"]].reset_index(drop=True)


def copy_range(shapes: pd.DataFrame) -> tuple[float, float]:
    """The lowest and highest rate (TB/s, reads plus writes) of the copies a quantization record
    timed beside its kernels (`copy_tbps_graph`)."""
    return float(shapes["copy_tbps_graph"].min()), float(shapes["copy_tbps_graph"].max())


def split_lows(split: pd.DataFrame, kernels: Iterable[str], batches: Iterable[int] = (1, 2, 4, 8, 16)
               ) -> dict[str, list[float]]:
    """From `explain.quant_split_table`: per kernel, the lowest repeat at each number of sequences
    in `batches`."""
    return {k: [float(split.loc[k, (b, "min")]) for b in batches] for k in kernels}


def split_spans(split: pd.DataFrame, kernel: str, tokens: int = 16384) -> dict[str, list[float]]:
    """From `explain.quant_split_table`: one kernel's [lowest, highest] repeat per split of `tokens`,
    keyed "<sequences>x<tokens per sequence>"."""
    batches = list(dict.fromkeys(b for b, _ in split.columns))
    return {f"{b}x{tokens // b}": [float(split.loc[kernel, (b, "min")]), float(split.loc[kernel, (b, "max")])]
            for b in sorted(batches)}


def reverse_table(results_dir: str | Path) -> tuple[pd.DataFrame, bool]:
    """v23's two-pass probe (`bench_v23_reverse.json`): per size (rows) and kernel (columns: "tensor
    forward", "tensor backward", "head forward", "head backward": the cast pass walking x forwards or
    backwards) the median fraction of copy over the repeats, then "<g> backward / forward" for g in
    tensor and head; and whether every timed row gave the same bits as two forward passes."""
    rev = pd.DataFrame(load_results(Path(results_dir) / "bench_v23_reverse.json")["rows"])
    table = rev.pivot_table(index="size", columns="kernel", values="frac_copy_graph", aggfunc="median", sort=False)
    for g in ("tensor", "head"):
        table[f"{g} backward / forward"] = table[f"{g} backward"] / table[f"{g} forward"]
    return table, bool(rev["same_bits"].all())


def fastest_quant(shapes: pd.DataFrame) -> pd.Series:
    """The timing with the fewest milliseconds (`ms_graph`) of a quantization record."""
    if shapes.empty:
        raise ValueError("shapes: expected a quantization record's rows, got none")
    return shapes.loc[shapes["ms_graph"].idxmin()]


def quant_floor_table(shapes: pd.DataFrame, x_bytes: float) -> dict[str, object]:
    """Exercise 6 from a quantization record at one size of x (`x_bytes` of bf16): floor_us (x read
    and e4m3 y written at the record's mean copy rate, `bench.quant_floor_us`), copy_tbps, the
    fastest timing's kernel, size and microseconds, over_floor (its time over the floor) and its
    frac_copy_graph (1 / over_floor, up to the copy's spread)."""
    best = fastest_quant(shapes)
    copy = float(shapes["copy_tbps_graph"].mean())
    floor = quant_floor_us(x_bytes, copy)
    us = float(best["ms_graph"]) * 1e3
    return dict(floor_us=floor, copy_tbps=copy, kernel=best["kernel"], size=best["size"], fastest_us=us,
                over_floor=us / floor, frac_copy_graph=float(best["frac_copy_graph"]))


FLUSH_TIMINGS = {"graph": "back to back", "flushed": "L2 flushed"}


def quant_flush(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The quantization kernels timed two ways (`scripts/probe_quant_flush.py`, v34's
    `bench_v34_quant_flush.json`): CUDA-graph replays back to back, and with the L2 flushed before
    every call. Returns (long, lowest, copy):
    long: one row per (round, MiB, kernel, timing) with `tbps` and `frac` (of a copy timed the same
    way in the same round);
    lowest: per kernel (rows, the record's order) the lowest `frac` over the rounds, columns
    (timing, mib); copy: the copy's median TB/s (reads plus writes), rows timing, columns mib."""
    rows = pd.DataFrame(load_results(path)["rows"]).dropna(subset=["kernel"])
    need = {"rep", "mib", "kernel", "tbps_graph", "tbps_flushed"}
    if not need <= set(rows.columns):
        raise ValueError(f"{path}: expected the rows of probe_quant_flush.py (columns {sorted(need)}), "
                         f"got {sorted(rows.columns)}")
    rows = rows.assign(mib=rows["mib"].astype(int))
    parts = []
    for key, label in FLUSH_TIMINGS.items():
        tb = rows[["rep", "mib", "kernel", f"tbps_{key}"]].rename(columns={f"tbps_{key}": "tbps"})
        copy = tb[tb["kernel"] == "copy bf16"].set_index(["rep", "mib"])["tbps"]
        tb = tb[tb["kernel"] != "copy bf16"]
        same_round = copy.loc[list(zip(tb["rep"], tb["mib"]))].to_numpy()
        parts.append(tb.assign(frac=tb["tbps"].to_numpy() / same_round, timing=label, copy_tbps=same_round))
    long = pd.concat(parts, ignore_index=True)
    order = list(dict.fromkeys(long["kernel"]))
    lowest = long.pivot_table(index="kernel", columns=["timing", "mib"], values="frac", aggfunc="min")
    lowest = lowest.loc[order, list(FLUSH_TIMINGS.values())]
    copy = (long.groupby(["timing", "mib"])["copy_tbps"].median().unstack("mib")
            .loc[list(FLUSH_TIMINGS.values())])
    return long.drop(columns="copy_tbps"), lowest, copy


def quant_before_long(paths: Iterable[str | Path]) -> pd.DataFrame:
    """v35's and v36's records (`bench_v35_quant_tlb.json`, `bench_v35_quant_prelude.json`,
    `bench_v36_quant_evict.json`, `bench_v36_quant_dirty.json`: each quantization kernel timed back to
    back and after a step before every call) in long form: one row per (record,
    round, MiB, kernel, step) with `us` (the median microseconds) and `added_us` (over the back-to-back
    time of the same round of the same record; 0 for "back to back" itself). A step timed in more than
    one record (the flush) is kept from the first only."""
    parts, seen = [], set()
    for i, path in enumerate(paths):
        rows = pd.DataFrame(load_results(path)["rows"])
        need = {"rep", "mib", "kernel", "mode", "ms"}
        if not need <= set(rows.columns) or "graph" not in set(rows["mode"]):
            raise ValueError(f"{path}: expected the rows of a v35 or v36 probe (columns {sorted(need)}, mode 'graph' among "
                             f"them), got columns {sorted(rows.columns)}")
        rows = rows.assign(record=i, us=rows["ms"] * 1e3, mib=rows["mib"].astype(int))
        back = rows[rows["mode"] == "graph"].set_index(["rep", "mib", "kernel"])["us"]
        rows = rows.assign(added_us=rows["us"].to_numpy() - back.loc[list(zip(rows["rep"], rows["mib"], rows["kernel"]))]
                           .to_numpy(), mode=rows["mode"].replace({"graph": "back to back"}))
        keep = rows["mode"].eq("back to back") | ~rows["mode"].isin(seen)
        parts.append(rows[keep][["record", "rep", "mib", "kernel", "mode", "us", "added_us"]])
        seen |= set(rows["mode"])
    if not parts:
        raise ValueError("paths: expected one or more v35 or v36 records, got none")
    return pd.concat(parts, ignore_index=True)


def quant_before_added(long: pd.DataFrame) -> pd.DataFrame:
    """The lowest and highest `added_us` over the rounds of `quant_before_long`'s rows, per (step,
    MiB, kernel) in the record's order, "back to back" left out: columns "min", "max"."""
    steps = long[long["mode"] != "back to back"]
    return steps.groupby(["mode", "mib", "kernel"], sort=False)["added_us"].agg(["min", "max"])


def quant_before(paths: Iterable[str | Path]) -> pd.DataFrame:
    """`quant_before_long` as a table: rows (MiB, kernel) in the record's order; "back to back, us"
    (the first record's, lowest-highest over its rounds) and, per step, the microseconds it adds
    (lowest to highest over the rounds, `quant_before_added`)."""
    long = quant_before_long(paths)

    def span(lo: float, hi: float, fmt: str, sep: str) -> str:
        lo_s, hi_s = fmt.format(lo), fmt.format(hi)
        return lo_s if lo_s == hi_s else f"{lo_s}{sep}{hi_s}"

    first = long[(long["record"] == 0) & (long["mode"] == "back to back")]
    back = first.groupby(["mib", "kernel"], sort=False)["us"].agg(["min", "max"])
    out = pd.DataFrame({"back to back, us": [span(lo, hi, "{:.1f}", "-") for lo, hi in back.to_numpy()]},
                       index=back.index)
    added = quant_before_added(long)
    for mode in dict.fromkeys(added.index.get_level_values("mode")):
        out[mode] = pd.Series({key: span(lo, hi, "{:+.1f}", " to ") for key, (lo, hi) in added.loc[mode].iterrows()})
    return out


def probe_ranges(path: str | Path, value: str = "frac_copy_graph") -> tuple[pd.DataFrame, bool]:
    """A settings probe's record (`probe_quant_buffers.py`, `probe_quant_claims.py`: rows of shape,
    setting, rep, `value` and same_bits): per shape (rows) and setting (columns), both in the
    record's order, "lo-hi" of `value` over the rounds (3 decimals); and whether every row gave two
    passes' bits."""
    rows = pd.DataFrame(load_results(path)["rows"])
    check_frame(rows, ["shape", "setting", value, "same_bits"], f"{path}: a settings probe's rows")
    spans = rows.groupby(["shape", "setting"], sort=False)[value].agg(["min", "max"])
    text = pd.Series([f"{lo:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f}-{hi:.3f}"
                      for lo, hi in spans.to_numpy()], index=spans.index)
    table = text.unstack("setting")
    order = list(dict.fromkeys(rows["setting"]))
    return table.loc[list(dict.fromkeys(rows["shape"])), order].rename_axis(None, axis=1), bool(rows["same_bits"].all())


# ---------------------------------------------------------------------------
# (f), (g): vLLM's varlen path, the API


def vllm_varlen_table(grid: pd.DataFrame) -> pd.DataFrame:
    """Per case (index): TFLOP/s of fa3-fwd FP8 (batched entry), fa3-fwd FP8 varlen and vLLM FA3 FP8
    varlen (NaN where the grid did not time one), "vLLM / fa3-fwd" and "fa3-fwd varlen / batched"."""
    vl = provider_table(grid).reindex(columns=[FA3_FP8, "fa3-fwd FP8 varlen", "vLLM FA3 FP8 varlen"])
    vl["vLLM / fa3-fwd"] = vl["vLLM FA3 FP8 varlen"] / vl[FA3_FP8]
    vl["fa3-fwd varlen / batched"] = vl["fa3-fwd FP8 varlen"] / vl[FA3_FP8]
    return vl


def vllm_ratio_by_version(grid_all: pd.DataFrame, split_at: int = 256) -> pd.DataFrame:
    """`vllm_varlen_table`'s two ratios in every recorded grid (index: version, in order): lowest and
    highest of "vLLM / fa3-fwd" below head dim `split_at` and at it, and of "fa3-fwd varlen /
    batched" (NaN where a grid did not time that entry)."""
    out = {}
    for version in sorted(grid_all["version"].unique(), key=version_key):
        grid = grid_all[(grid_all["version"] == version) & grid_all["tflops"].notna()]
        vl = vllm_varlen_table(grid)
        if vl["vLLM / fa3-fwd"].isna().all():
            continue
        dims = grid.drop_duplicates("case").set_index("case")["head_dim"].reindex(vl.index)
        row = {}
        for label, part in ((f"d < {split_at}", vl[dims < split_at]), (f"d = {split_at}", vl[dims == split_at])):
            row[f"vLLM / fa3-fwd, {label}, lowest"] = part["vLLM / fa3-fwd"].min()
            row[f"vLLM / fa3-fwd, {label}, highest"] = part["vLLM / fa3-fwd"].max()
        row["fa3-fwd varlen / batched, lowest"] = vl["fa3-fwd varlen / batched"].min()
        row["fa3-fwd varlen / batched, highest"] = vl["fa3-fwd varlen / batched"].max()
        out[version] = row
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("version")


def flush_halves(tiles: pd.DataFrame, head_dim: int = 256) -> pd.DataFrame:
    """From `explain.pv_flush`'s tiles (TFLOP/s, one row per case, one column per call): per case at
    `head_dim` (index), the Gluon kernel's fastest `pv_flush` tile adding O's whole width at once
    ("Gluon pv_flush, whole width": calls "fp8lab ws <config>-pf"), its fastest adding it in two halves
    ("Gluon pv_flush, two halves": "...-pf-h2"), and vLLM's FP8 varlen path and fa3-fwd FP8 on the
    same inputs."""
    t = tiles.loc[[c for c in tiles.index if parse_case(c).head_dim == head_dim]]
    if t.empty:
        raise ValueError(f"tiles: no case at head dim {head_dim}")
    ws = [c for c in t.columns if c.startswith("fp8lab ws ") and "-pf" in c]
    whole, halves = [c for c in ws if not c.endswith("-h2")], [c for c in ws if c.endswith("-h2")]
    return pd.DataFrame({"Gluon pv_flush, whole width": t[whole].max(axis=1), "Gluon pv_flush, two halves":
                         t[halves].max(axis=1), "vLLM FA3 FP8 varlen": t["vLLM FA3 FP8 varlen"],
                         "fa3-fwd FP8": t[FA3_FP8]})


PREPARED_VARIANTS = ("ws direct", "key_ordered_vt + ws", "api triton:gluon", "prepared triton:gluon",
                     "fa3 direct", "api fa3:fa3-fwd", "prepared fa3:fa3-fwd")


def prepared_overhead(overhead: pd.DataFrame, case: str = "4x4096x32x64",
                      variants: Iterable[str] = PREPARED_VARIANTS) -> pd.DataFrame:
    """The rows of `explain.api_overhead` (v27) for one case and the calls that compare
    `prepare_attention` with the API and the direct calls, in the record's order."""
    out = overhead[(overhead["case"] == case) & overhead["variant"].isin(list(variants))]
    if out.empty:
        raise ValueError(f"overhead: no rows for case {case!r} and variants {list(variants)}")
    return out


def cases_faster(table: pd.DataFrame, ours: str, than: str) -> int:
    """In how many cases of a `provider_table` `ours` ran faster than `than` (cases timed for both)."""
    return int((table[ours] > table[than]).sum())


# ---------------------------------------------------------------------------
# Live: one case timed now


def live_table(rows: list[dict], case: AttentionCase, recorded: pd.DataFrame, version: str) -> pd.DataFrame:
    """`bench.interleaved_times`' rows of one case beside the record: per provider (index, in the
    order timed) "live, median of <n> rounds" (TFLOP/s, `case`'s FLOPs over each timing's ms),
    "recorded (<version>)" (the grid's TFLOP/s for the same case label), "live / FA3 FP8" where
    fa3-fwd FP8 was timed, and "error" where a provider failed (its first error)."""
    from fp8lab.bench import tflops

    df = pd.DataFrame(rows)
    if df.empty or "provider" not in df:
        raise ValueError("rows: expected interleaved_times' rows (provider, round, ms or error), got none")
    timed = df[df["ms"].notna()] if "ms" in df else df.iloc[:0]
    rounds = int(timed["round"].nunique()) if len(timed) else 0
    live = (timed.assign(tflops=[tflops(case.flops(), ms) for ms in timed["ms"]])
            .groupby("provider", sort=False)["tflops"].median())
    here = recorded[recorded["case"] == case.label()].set_index("provider")["tflops"]
    providers = list(dict.fromkeys(df["provider"]))
    out = pd.DataFrame({f"live, median of {rounds} rounds": live.reindex(providers),
                        f"recorded ({version})": here.reindex(providers)})
    if FA3_FP8 in live:
        out["live / FA3 FP8"] = out.iloc[:, 0] / live[FA3_FP8]
    if "error" in df and df["error"].notna().any():
        first_error = df[df["error"].notna()].drop_duplicates("provider").set_index("provider")["error"]
        out["error"] = first_error.reindex(providers)
    return out
