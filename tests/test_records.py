"""fp8lab.records: the tables notebook 07 shows, on small synthetic records (what each column means)
and on the H200's record where the notebook's prose quotes a figure."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from fp8lab import bench, env, records

PROVIDERS = ("fp8lab", "fp8lab ws", "fa3-fwd FP8", "fa3-fwd FP8 varlen", "vLLM FA3 FP8 varlen", "fa3-fwd bf16")


def _grid_rows(seed: int, cases: list[bench.AttentionCase] | None = None, drop: tuple = ()) -> list[dict]:
    """Random TFLOP/s for every provider on each case (as a grid record's rows), minus `drop`
    ((case label, provider) pairs)."""
    rng = random.Random(seed)
    cases = cases or [bench.AttentionCase(16384 // s, s, 32, 32, d, c) for d in (64, 256) for s in (4096, 16384)
                      for c in (False, True)]
    return [dict(case=c.label(), head_dim=c.head_dim, seqlen=c.seqlen, batch=c.batch, causal=c.causal, provider=p,
                 tflops=rng.uniform(300, 1100)) for c in cases for p in PROVIDERS if (c.label(), p) not in drop]


def _by(rows: list[dict]) -> dict[tuple[str, str], float]:
    return {(r["case"], r["provider"]): r["tflops"] for r in rows}


# ---------------------------------------------------------------------------
# (a), (b)


def test_grid_rows_pick_one_version_and_name_the_others():
    rows = _grid_rows(1)
    grid_all = pd.DataFrame([dict(r, version=v) for v in ("v2", "v10") for r in rows]
                            + [dict(case="x", provider="fp8lab", tflops=None, version="v10")])
    grid = records.grid_rows(grid_all, "v10")
    assert len(grid) == len(rows) and set(grid["version"]) == {"v10"}  # the untimed row is left out
    with pytest.raises(ValueError, match=r"one of \['v2', 'v10'\].*got 'v9'"):
        records.grid_rows(grid_all, "v9")
    table = records.provider_table(grid)
    assert list(table.columns) == list(PROVIDERS) and list(table.index) == list(dict.fromkeys(r["case"] for r in rows))
    assert table.loc[rows[7]["case"], rows[7]["provider"]] == rows[7]["tflops"]
    assert records.version_key("v8a") < records.version_key("v10") and records.version_key("v2") < records.version_key("v8")


def test_target_table_takes_the_faster_kernel_per_case():
    rows = _grid_rows(random.randrange(1000), drop={("4x4096x32x64", "vLLM FA3 FP8 varlen")})
    exact = {"fa3-fwd FP8": 1000.0, "fp8lab": 900.0, "fp8lab ws": 450.0}  # one case exactly at 0.9: it meets it
    rows = [dict(r, tflops=exact[r["provider"]]) if r["case"] == rows[0]["case"] and r["provider"] in exact else r
            for r in rows]
    by = _by(rows)
    t = records.target_table(pd.DataFrame(rows))
    assert t.loc[rows[0]["case"], "meets 0.9"]
    assert list(t.index) == list(dict.fromkeys(r["case"] for r in rows))
    for case, row in t.iterrows():
        triton, gluon, fa3 = by[(case, "fp8lab")], by[(case, "fp8lab ws")], by[(case, "fa3-fwd FP8")]
        assert row["kernel"] == ("fp8lab ws" if gluon > triton else "fp8lab")
        assert row["fastest fp8lab"] == max(triton, gluon) and row["ratio"] == pytest.approx(max(triton, gluon) / fa3)
        assert row["meets 0.9"] == (max(triton, gluon) / fa3 >= 0.9)
        assert row["beats FA3 bf16"] == (max(triton, gluon) > by[(case, "fa3-fwd bf16")])
        vllm = by.get((case, "vLLM FA3 FP8 varlen"))
        assert (pd.isna(row["beats vLLM FP8 varlen"]) if vllm is None
                else row["beats vLLM FP8 varlen"] == (max(triton, gluon) > vllm))
    assert (t["head_dim"].tolist(), t["causal"].tolist()) == ([64] * 4 + [256] * 4, [False, True] * 4)
    with pytest.raises(ValueError, match="no 'fa3-fwd FP8' rows"):
        records.target_table(pd.DataFrame([r for r in rows if r["provider"] != "fa3-fwd FP8"]))


def test_kernel_ratio_ranges_and_ratio_summary():
    rows = _grid_rows(random.randrange(1000), drop={("4x4096x32x256", "fp8lab ws")})  # the Gluon kernel missing once
    by = _by(rows)
    cases = list(dict.fromkeys(r["case"] for r in rows))
    ranges = records.kernel_ratio_ranges(pd.DataFrame(rows), target=0.8)
    for kernel in ("fp8lab", "fp8lab ws"):
        r = [by[(c, kernel)] / by[(c, "fa3-fwd FP8")] for c in cases if (c, kernel) in by]
        assert (ranges.loc[kernel, "lowest"], ranges.loc[kernel, "highest"]) == (pytest.approx(min(r)), pytest.approx(max(r)))
        assert ranges.loc[kernel, "cases"] == len(r) and ranges.loc[kernel, "at or above 0.8"] == sum(x >= 0.8 for x in r)
    best = [max(by[(c, k)] for k in ("fp8lab", "fp8lab ws") if (c, k) in by) / by[(c, "fa3-fwd FP8")] for c in cases]
    assert ranges.loc["faster per case", "lowest"] == pytest.approx(min(best)) and ranges.loc["faster per case", "cases"] == 8
    plain = records.ratio_summary(pd.DataFrame({"a": [0.5, 1.2, float("nan")]}), target=None)
    assert plain.loc["a"].tolist() == [0.5, 1.2, 2] and "at or above" not in " ".join(plain.columns)
    assert records.ratio_summary(pd.DataFrame({"a": [0.5, 1.2, 0.4]}), target=0.5).loc["a", "at or above 0.5"] == 2
    with pytest.raises(ValueError, match="grid: no 'fa3 FP8' rows to compare against"):  # was a bare KeyError
        records.kernel_ratio_ranges(pd.DataFrame(rows), against="fa3 FP8")
    with pytest.raises(ValueError, match="kernels: expected some of the grid's providers"):  # was a table of NaN
        records.kernel_ratio_ranges(pd.DataFrame(rows), kernels=["fp8"])


def test_grid_runs_one_row_per_grid_file(tmp_path):
    one = bench.AttentionCase(2, 8192, 32, 32, 128, False)
    two = bench.AttentionCase(2, 8192, 32, 32, 128, True)

    def write(name, ratios, gluon_wins, **meta):
        rows = []
        for case, ratio, wins in zip((one, two), ratios, gluon_wins):
            rows += [dict(case=case.label(), provider="fa3-fwd FP8", tflops=1000.0),
                     dict(case=case.label(), provider="fp8lab ws", tflops=1000.0 * ratio * (1 if wins else 0.5)),
                     dict(case=case.label(), provider="fp8lab", tflops=1000.0 * ratio * (0.5 if wins else 1))]
        bench.write_results(tmp_path / name, rows, {"gpu": "test"}, **meta)

    write("bench_v12_grid.json", (0.95, 0.85), (True, False))
    write("bench_v12_grid_run1.json", (0.91, 0.92), (True, True))
    write("bench_v10_grid.json", (0.9, 0.7), (False, False))  # 0.9 exactly: met
    write("bench_v23_grid.json", (0.93, 0.97), (True, True), rounds=5, settle_s=1.5)
    write("bench_v23_grid_run3.json", (0.93, 0.97), (True, True), rounds=5, settle_s=0.0)
    bench.write_results(tmp_path / "bench_v28_pv_flush_grid.json", [], {"gpu": "test"})  # another section: not read
    runs = records.grid_runs(tmp_path)
    assert runs["grid"].tolist() == ["v10_grid", "v12_grid", "v12_grid_run1", "v23_grid", "v23_grid_run3"]
    v12 = runs.set_index("grid").loc["v12_grid"]
    assert (v12["lowest"], v12["highest"], v12["met"], v12["Gluon faster"]) == (pytest.approx(0.85), pytest.approx(0.95), 1, 1)
    assert v12["lowest at"] == two.label() and v12["timing"] == "one median each" and v12["cases"] == 2
    assert runs["timing"].tolist()[3:] == ["5 rounds after 1.5 s of load", "5 rounds, no load first"]
    assert runs.set_index("grid").loc["v10_grid", "met"] == 1


def test_host_path_table(tmp_path):
    rows = [dict(section="speed", case="a", provider="default", tflops=800.0),
            dict(section="speed", case="a", provider="v2 host path", tflops=200.0),
            dict(section="speed", case="b", provider="default", tflops=700.0),  # not timed both ways
            dict(section="correctness", case="a", provider="v2 host path", ratio=0.1)]
    bench.write_results(tmp_path / "bench_v5_raw.json", rows, {"gpu": "test"})
    table = records.host_path_table(tmp_path)
    assert list(table.index) == ["a"] and table.loc["a", "v2 host path / default"] == 0.25


def test_row_lists_keep_integers_and_round_floats():
    df = pd.DataFrame({"lowest": [0.81234, 0.9], "highest": [0.95555, 1.0], "below": [2, 0]}, index=["x", "y"])
    assert records.row_lists(df) == {"x": [0.812, 0.956, 2], "y": [0.9, 1.0, 0]}
    assert all(type(v[2]) is int for v in records.row_lists(df).values())


# ---------------------------------------------------------------------------
# (c)


def test_provider_across_runs_with_the_facts_file():
    rng = random.Random()
    rows = [dict(version=v, case=c, provider=p, tflops=rng.uniform(800, 900))
            for v in ("v1", "v2", "v5") for c in ("1x16384x32x128", "1x16384x32x128 causal")
            for p in ("fa3-fwd FP8", "fp8lab")]
    rows.append(dict(version="v3", case="1x16384x32x128", provider="fa3-fwd FP8", tflops=None))  # not timed
    grid_all = pd.DataFrame(rows)
    facts = [{"case": "1x16384x32x128", "causal": False, "fa3-fwd FP8": 903}]
    out = records.provider_across_runs(grid_all, facts=facts)
    mine = [r["tflops"] for r in rows if r["case"] == "1x16384x32x128" and r["provider"] == "fa3-fwd FP8" and r["tflops"]]
    row = out.loc["1x16384x32x128"]
    assert (row["runs"], row["lowest"], row["highest"]) == (3, min(mine), max(mine))
    assert row["spread (%)"] == pytest.approx((max(mine) - min(mine)) / sorted(mine)[1] * 100)
    assert row["facts file"] == 903 and math.isnan(out.loc["1x16384x32x128 causal", "facts file"])
    with pytest.raises(ValueError, match="no timed rows of 'vLLM'"):
        records.provider_across_runs(grid_all, provider="vLLM")


def _timed_with_clocks() -> pd.DataFrame:
    rng = random.Random()
    rows = []
    for d, mhz in ((64, 1980.0), (128, 1850.0), (256, 1700.0)):
        for rep in range(4):
            clock = mhz - rng.uniform(0, 50)
            rows.append(dict(case=f"c{d}", provider="p", config="k", head_dim=d, tflops=clock / 2,
                             sm_mhz=clock, power_w=rng.uniform(600, 700), power_capped=float(d > 64)))
    rows.append(dict(case="c256", provider="p", config="k", head_dim=256, tflops=900.0, sm_mhz=float("nan"),
                     power_w=float("nan"), power_capped=float("nan")))  # no clock sample
    return pd.DataFrame(rows)


def test_power_by_head_dim_and_clock_correlation():
    timed = _timed_with_clocks()
    power = records.power_by_head_dim(timed)
    for d in (64, 128, 256):
        part = timed[(timed["head_dim"] == d) & timed["sm_mhz"].notna()]
        assert power.loc[d, "sm_mhz"] == pytest.approx(part["sm_mhz"].mean())
        assert power.loc[d, "power_w"] == part["power_w"].max()
    assert power["at_power_limit"].tolist() == [0.0, 1.0, 1.0]
    r, n = records.clock_speed_correlation(timed, min_head_dim=256)
    assert n == 4 and r == pytest.approx(1.0)  # speed proportional to the clock; the row without a clock left out
    assert records.clock_speed_correlation(timed)[1] == 8
    inverse = timed.assign(tflops=1e6 / timed["sm_mhz"])
    assert records.clock_speed_correlation(inverse, min_head_dim=256)[0] < -0.99


def test_after_compile_since_and_summary():
    after = pd.DataFrame({"grid": ["v10_grid", "v11_grid", "v12_grid", "v12_grid_run1", "v21_grid", "v23_grid"],
                          "timed": ["after a compile", "card busy before", "after a compile", "card busy before",
                                    "after a compile", "5 rounds after 1.5 s of load"],
                          "ratio": [0.5, 0.6, 0.88, 0.95, 0.93, 0.96]})
    recent = records.since_version(after, 12)
    assert recent["grid"].tolist() == ["v12_grid", "v12_grid_run1", "v21_grid", "v23_grid"]
    with pytest.raises(ValueError, match="first: expected an int >= 0, got 'v12'"):  # was a TypeError from the map
        records.since_version(after, "v12")
    summary = records.after_compile_summary(recent)
    assert list(summary.index) == ["after a compile", "card busy before", "5 rounds after 1.5 s of load"]
    assert summary.loc["after a compile"].tolist() == [0.88, 0.93, 1, 2]
    assert records.row_lists(summary)["card busy before"] == [0.95, 0.95, 0, 1]


def test_round_spreads_and_summary(tmp_path):
    rng = random.Random()
    tf = {(g, c, p): [rng.uniform(500, 1000) for _ in range(5)] for g in ("", "_run2") for c in ("a", "b")
          for p in ("fp8lab", "fa3-fwd FP8")}
    for suffix in ("", "_run2"):
        rows = [dict(case=c, provider=p, round=i, tflops=t) for (g, c, p), ts in tf.items() if g == suffix
                for i, t in enumerate(ts)]
        rows.append(dict(case="a", provider="fp8lab", round=None, error="RuntimeError()"))
        bench.write_results(tmp_path / f"bench_v23_rounds{suffix}.json", rows, {"gpu": "test"})
    spreads = records.round_spreads(tmp_path)
    assert len(spreads) == 8
    expect = {(g, c, p): (max(ts) - min(ts)) / sorted(ts)[2] * 100 for (g, c, p), ts in tf.items()}
    for r in spreads.itertuples(index=False):
        suffix = "" if r.grid == "v23" else "_run2"
        assert r[3] == pytest.approx(expect[(suffix, r.case, r.provider)])
    summary = records.spread_summary(spreads)
    mine = {k: v for k, v in expect.items() if k[2] == "fp8lab"}
    widest = max(mine, key=mine.get)
    assert summary.loc["fp8lab", "widest (%)"] == pytest.approx(mine[widest])
    middle = sorted(mine.values())[1:3]  # four spreads: the median is the mean of the middle two
    assert summary.loc["fp8lab", "median (%)"] == pytest.approx(sum(middle) / 2)
    assert summary.loc["fp8lab", "widest at"] == ("v23" if widest[0] == "" else "v23 run 2") + ", " + widest[1]


# ---------------------------------------------------------------------------
# (d)


def test_roofline_points_and_exp2_table():
    rows = _grid_rows(random.randrange(1000))
    grid = pd.DataFrame(rows)
    fastest = records.fastest_kernel(grid)
    pts = records.roofline_points(grid, fastest)
    assert sorted(pts["provider"].unique()) == ["fa3-fwd FP8", "fa3-fwd bf16", "fp8lab (faster kernel)"]
    assert len(pts) == 3 * 8
    row = pts[(pts["provider"] == "fa3-fwd bf16") & (pts["case"] == "1x16384x32x64")].iloc[0]
    assert row["intensity"] == pytest.approx(4 * 16384**2 * 32 * 64 / (16384 * 64 * 32 * (2 + 2 + 2 * 2)))
    fp8 = pts[(pts["provider"] == "fa3-fwd FP8") & (pts["case"] == "1x16384x32x64")].iloc[0]
    assert fp8["intensity"] == pytest.approx(4 * 16384**2 * 32 * 64 / (16384 * 64 * 32 * (1 + 2 + 2)))
    clocks = {64: 1980.0, 256: 1782.0}
    table = records.exp2_table(grid, fastest, clocks)
    assert list(table.index) == [64, 256]
    assert table.loc[64, "exp2 ceiling (model)"] == pytest.approx(132 * 1.98e9 * 16 * 4 * 64 / 1e12)
    assert table.loc[256, "at the clock measured in (c)"] == pytest.approx(132 * 1.782e9 * 16 * 4 * 256 / 1e12)
    assert table.loc[256, "clock lost (%)"] == pytest.approx(10.0)
    with pytest.raises(ValueError, match=r"sm_mhz: expected a clock for every head dim of the grid \[64, 256\], "
                                         r"none for \[256\]"):  # was KeyError: 256
        records.exp2_table(grid, fastest, {64: 1980.0})
    with pytest.raises(ValueError, match=r"max_mhz: expected a clock in MHz .* got 1.98"):  # GHz: was 1000x too low
        records.exp2_table(grid, fastest, clocks, max_mhz=1.98)
    with pytest.raises(ValueError, match=r"sm_mhz\[64\]: expected a clock in MHz"):
        records.exp2_table(grid, fastest, {64: 1.98, 256: 1.782})
    fa3_best = max(r["tflops"] for r in rows if r["head_dim"] == 256 and r["provider"] == "fa3-fwd FP8")
    ours_best = max(r["tflops"] for r in rows if r["head_dim"] == 256 and r["provider"] in ("fp8lab", "fp8lab ws"))
    assert (table.loc[256, "best FA3 FP8"], table.loc[256, "best fp8lab (faster kernel)"]) == (fa3_best, ours_best)
    # at 256 the MMA model is the lower ceiling (the exp2 one is twice it), at 64 the exp2 one
    assert table.loc[256, "best of the lower model"] == pytest.approx(max(fa3_best, ours_best) / bench.mma_peak_tflops())
    assert table.loc[64, "best of the lower model"] == pytest.approx(
        max(table.loc[64, "best FA3 FP8"], table.loc[64, "best fp8lab (faster kernel)"]) / bench.exp2_ceiling_tflops(64))


# ---------------------------------------------------------------------------
# (e)


def test_quant_default_rows_leave_out_sweeps_copies_and_tiles():
    quant = pd.DataFrame([
        dict(version="v5", kernel="per-head (2 passes)", frac_copy_graph=0.5),  # v5: no size, old name
        dict(version="v5", kernel="static (vLLM Q) tile=4096", frac_copy_graph=0.99),
        dict(version="v14", kernel="copy bf16->bf16 (torch)", size="1x16384x32x128 (128 MiB)", frac_copy_graph=1.0),
        dict(version="v14", kernel="per-head onchip", size="1x16384x32x128 (128 MiB)", frac_copy_graph=0.77),
        dict(version="v14", kernel="per-head onchip", size="1x16384x32x128 (128 MiB)", frac_copy_graph=0.8,
             part_bytes=32768),
        dict(version="v13", kernel=None, check="bits"),
        dict(version="v15", kernel="per-token", size="1x16384x8x128 (32 MiB)", frac_copy_graph=0.95, tile=float("nan")),
    ])
    rows = records.quant_default_rows(quant)
    assert rows.to_dict("records") == [
        dict(version="v5", kernel="per-head two-pass", size="1x16384x32x128 (128 MiB)", frac_copy_graph=0.5),
        dict(version="v14", kernel="per-head onchip", size="1x16384x32x128 (128 MiB)", frac_copy_graph=0.77),
        dict(version="v15", kernel="per-token", size="1x16384x8x128 (32 MiB)", frac_copy_graph=0.95)]


def _shapes(copy_tbps: float = 4.0) -> pd.DataFrame:
    rng = random.Random()
    return pd.DataFrame([dict(kernel=k, batch=b, size=f"{b}x{16384 // b}x32x128 (128 MiB)", rep=rep,
                              frac_copy_graph=rng.uniform(0.7, 1.0), copy_tbps_graph=copy_tbps + 0.01 * rep,
                              ms_graph=rng.uniform(0.04, 0.08))
                         for b in (1, 2, 4, 8, 16) for k in ("per-token", "per-head onchip") for rep in (0, 1, 2)])


def test_split_lows_and_spans_of_the_split_table():
    from fp8lab.kernels import explain

    shapes = _shapes()
    split = explain.quant_split_table(shapes)
    lows = records.split_lows(split, ["per-head onchip"])
    spans = records.split_spans(split, "per-token")
    for b in (1, 2, 4, 8, 16):
        mine = shapes[(shapes["batch"] == b)]
        head = mine[mine["kernel"] == "per-head onchip"]["frac_copy_graph"]
        token = mine[mine["kernel"] == "per-token"]["frac_copy_graph"]
        assert lows["per-head onchip"][[1, 2, 4, 8, 16].index(b)] == pytest.approx(head.min(), abs=5.01e-4)  # 3 decimals
        assert spans[f"{b}x{16384 // b}"] == pytest.approx([token.min(), token.max()], abs=5.01e-4)
    assert list(spans) == ["1x16384", "2x8192", "4x4096", "8x2048", "16x1024"]
    assert records.copy_range(shapes) == pytest.approx((4.0, 4.02))


def test_quant_floor_table_is_the_time_over_the_copy_floor():
    shapes = _shapes(copy_tbps=4.1)
    x = 128 * 2**20
    q = records.quant_floor_table(shapes, x)
    copy = shapes["copy_tbps_graph"].mean()
    assert q["floor_us"] == pytest.approx(1.5 * x / (copy * 1e12) * 1e6) == bench.quant_floor_us(x, copy)
    best = shapes.loc[shapes["ms_graph"].idxmin()]
    assert q["fastest_us"] == best["ms_graph"] * 1e3 and q["kernel"] == best["kernel"] and q["size"] == best["size"]
    assert q["over_floor"] == pytest.approx(best["ms_graph"] * 1e3 / q["floor_us"])
    assert records.fastest_quant(shapes)["ms_graph"] == shapes["ms_graph"].min()
    with pytest.raises(ValueError, match="shapes: expected a quantization record's rows, got none"):  # was argmin's
        records.quant_floor_table(shapes.iloc[:0], x)
    with pytest.raises(ValueError, match="x_bytes > 0 and copy_tbps > 0, finite"):  # was a NaN floor
        records.quant_floor_table(shapes, float("nan"))


def test_quant_flush_divides_by_the_copy_timed_the_same_way(tmp_path):
    rng = random.Random()
    kernels = ("copy bf16", "static (vLLM Q)", "per-head delayed")
    rows = [dict(check="graph bits", tokens=512, same=True)]
    rows += [dict(rep=rep, mib=mib, kernel=k, tbps_graph=rng.uniform(1, 5), tbps_flushed=rng.uniform(1, 5))
             for rep in range(3) for mib in (4.0, 128.0) for k in kernels]
    bench.write_results(tmp_path / "bench_v34_quant_flush.json", rows, {"gpu": "test"})
    long, lowest, copy = records.quant_flush(tmp_path / "bench_v34_quant_flush.json")
    assert list(lowest.index) == list(kernels[1:]) and set(long["timing"]) == set(records.FLUSH_TIMINGS.values())
    for key, label in records.FLUSH_TIMINGS.items():
        for mib in (4, 128):
            fracs = {k: [] for k in kernels[1:]}
            copies = []
            for rep in range(3):
                at = {r["kernel"]: r[f"tbps_{key}"] for r in rows[1:] if r["rep"] == rep and r["mib"] == mib}
                copies.append(at["copy bf16"])
                for k in fracs:
                    fracs[k].append(at[k] / at["copy bf16"])
            for k, f in fracs.items():
                assert lowest.loc[k, (label, mib)] == pytest.approx(min(f))
            assert copy.loc[label, mib] == pytest.approx(sorted(copies)[1])
    bench.write_results(tmp_path / "other.json", [dict(mib=4, kernel="x", frac_copy_graph=1.0)], {"gpu": "test"})
    with pytest.raises(ValueError, match="probe_quant_flush"):
        records.quant_flush(tmp_path / "other.json")


def test_quant_before_subtracts_the_same_rounds_back_to_back_time(tmp_path):
    rng = random.Random()
    kernels = ("copy bf16", "per-head current (auto)")

    def probe(name, modes):
        rows = [dict(rep=rep, mib=mib, kernel=k, mode=m, ms=rng.uniform(0.02, 0.08))
                for rep in range(3) for mib in (64.0, 128.0) for k in kernels for m in ("graph", *modes)]
        bench.write_results(tmp_path / name, rows, {"gpu": "test"})
        return rows

    first, second = probe("a.json", ("flushed", "x touched")), probe("b.json", ("tiny", "flushed"))
    long = records.quant_before_long([tmp_path / "a.json", tmp_path / "b.json"])
    assert list(dict.fromkeys(long["mode"])) == ["back to back", "flushed", "x touched", "tiny"]  # b's flush dropped
    for rows, record, mode in ((first, 0, "x touched"), (second, 1, "tiny")):
        for rep in range(3):
            at = {(r["kernel"], r["mode"]): r["ms"] * 1e3 for r in rows if r["rep"] == rep and r["mib"] == 128.0}
            got = long[(long["record"] == record) & (long["rep"] == rep) & (long["mib"] == 128)
                       & (long["kernel"] == kernels[1]) & (long["mode"] == mode)]["added_us"]
            assert got.item() == pytest.approx(at[kernels[1], mode] - at[kernels[1], "graph"])  # its own round
    table = records.quant_before([tmp_path / "a.json", tmp_path / "b.json"])
    assert list(table.columns) == ["back to back, us", "flushed", "x touched", "tiny"]
    assert list(table.index) == [(m, k) for m in (64, 128) for k in kernels]
    added = long[(long["mode"] == "tiny") & (long["mib"] == 64) & (long["kernel"] == kernels[0])]["added_us"]
    lo, hi = f"{added.min():+.1f}", f"{added.max():+.1f}"
    assert table.loc[(64, kernels[0]), "tiny"] == (lo if lo == hi else f"{lo} to {hi}")
    bench.write_results(tmp_path / "other.json", [dict(mib=4, kernel="x", tbps_graph=1.0)], {"gpu": "test"})
    with pytest.raises(ValueError, match="rows of a v35 or v36 probe"):
        records.quant_before([tmp_path / "other.json"])
    with pytest.raises(ValueError, match="one or more v35 or v36 records"):
        records.quant_before([])


def test_reverse_table_gains(tmp_path):
    rng = random.Random()
    rows = [dict(size=s, kernel=f"{g} {way}", rep=rep, frac_copy_graph=rng.uniform(0.5, 0.62), same_bits=True)
            for s in ("1x4096x32x128 (32 MiB)", "1x16384x32x128 (128 MiB)") for g in ("tensor", "head")
            for way in ("forward", "backward") for rep in range(3)]
    bench.write_results(tmp_path / "bench_v23_reverse.json", rows, {"gpu": "test"})
    table, same = records.reverse_table(tmp_path)
    assert same and list(table.index) == ["1x4096x32x128 (32 MiB)", "1x16384x32x128 (128 MiB)"]
    for s in table.index:
        med = {k: sorted(r["frac_copy_graph"] for r in rows if r["size"] == s and r["kernel"] == k)[1]
               for k in ("tensor forward", "tensor backward")}
        assert table.loc[s, "tensor backward / forward"] == pytest.approx(med["tensor backward"] / med["tensor forward"])
    rows[0]["same_bits"] = False
    bench.write_results(tmp_path / "bench_v23_reverse.json", rows, {"gpu": "test"})
    assert records.reverse_table(tmp_path)[1] is False


# ---------------------------------------------------------------------------
# (f), (g), live, exercises


def test_vllm_varlen_table_and_by_version():
    rows = _grid_rows(random.randrange(1000), drop={("4x4096x32x64", "fa3-fwd FP8 varlen")})
    by = _by(rows)
    vl = records.vllm_varlen_table(pd.DataFrame(rows))
    for case in vl.index:
        assert vl.loc[case, "vLLM / fa3-fwd"] == pytest.approx(by[(case, "vLLM FA3 FP8 varlen")] / by[(case, "fa3-fwd FP8")])
    assert math.isnan(vl.loc["4x4096x32x64", "fa3-fwd varlen / batched"])
    old = [r for r in _grid_rows(7) if r["provider"] not in ("fa3-fwd FP8 varlen",)]  # an early grid: no varlen entry
    grid_all = pd.DataFrame([dict(r, version="v23") for r in rows] + [dict(r, version="v2") for r in old])
    table = records.vllm_ratio_by_version(grid_all)
    assert list(table.index) == ["v2", "v23"]
    ratio = {c: by[(c, "vLLM FA3 FP8 varlen")] / by[(c, "fa3-fwd FP8")] for c in vl.index}
    d256 = [r for c, r in ratio.items() if c.split(" ")[0].endswith("x256")]
    assert table.loc["v23", "vLLM / fa3-fwd, d = 256, lowest"] == pytest.approx(min(d256))
    assert table.loc["v23", "vLLM / fa3-fwd, d < 256, highest"] == pytest.approx(
        max(r for c, r in ratio.items() if not c.split(" ")[0].endswith("x256")))
    assert math.isnan(table.loc["v2", "fa3-fwd varlen / batched, lowest"])


def test_prepared_overhead_and_cases_faster():
    overhead = pd.DataFrame({"case": ["a", "a", "a", "b"], "variant": ["ws direct", "sync + ws", "prepared fa3:fa3-fwd",
                                                                        "ws direct"], "extra ms": [0.0, 0.1, 0.0, 0.0]})
    assert records.prepared_overhead(overhead, "a")["variant"].tolist() == ["ws direct", "prepared fa3:fa3-fwd"]
    with pytest.raises(ValueError, match="no rows for case 'c'"):
        records.prepared_overhead(overhead, "c")
    table = pd.DataFrame({"x": [1.0, 3.0, float("nan")], "y": [2.0, 2.0, 1.0]})
    assert records.cases_faster(table, "x", "y") == 1


def test_live_table_beside_the_record():
    case = bench.AttentionCase(2, 8192, 32, 32, 128, False)
    ms = {"fp8lab": [1.0, 1.2, 1.1], "fa3-fwd FP8": [0.9, 0.8, 1.0]}
    rows = [dict(provider=p, round=r, ms=m) for r in range(3) for p, m in ((p, ms[p][r]) for p in ms)]
    rows.append(dict(provider="fp8lab ws", round=None, error="RuntimeError('no Hopper')"))
    recorded = pd.DataFrame([dict(case=case.label(), provider="fp8lab", tflops=700.0),
                             dict(case="other", provider="fp8lab", tflops=1.0)])
    t = records.live_table(rows, case, recorded, "v23")
    assert list(t.index) == ["fp8lab", "fa3-fwd FP8", "fp8lab ws"]
    live = t["live, median of 3 rounds"]
    assert live["fp8lab"] == pytest.approx(case.flops() / 1.1e-3 / 1e12) and math.isnan(live["fp8lab ws"])
    assert t.loc["fp8lab", "recorded (v23)"] == 700.0 and math.isnan(t.loc["fa3-fwd FP8", "recorded (v23)"])
    assert t.loc["fp8lab", "live / FA3 FP8"] == pytest.approx(0.9 / 1.1)
    assert "no Hopper" in t.loc["fp8lab ws", "error"] and pd.isna(t.loc["fp8lab", "error"])
    with pytest.raises(ValueError, match="interleaved_times"):
        records.live_table([], case, recorded, "v23")


# ---------------------------------------------------------------------------
# The H200's record: the figures notebook 07's prose quotes


@pytest.fixture(scope="module")
def h200():
    rdir = env.results_dir()
    grid_all = bench.records_frame(rdir, "grid")
    return rdir, grid_all, records.grid_rows(grid_all, "v23")


def test_h200_grids_meet_the_target_since_v23(h200):
    rdir, _, grid = h200
    t = records.target_table(grid)
    assert len(t) == 18 and t["meets 0.9"].all() and t["beats FA3 bf16"].all() and t["beats vLLM FP8 varlen"].all()
    assert (t["kernel"] == "fp8lab ws").sum() == 17
    runs = records.grid_runs(rdir)
    v23 = runs[runs["version"] == "v23"]
    assert len(v23) == 4 and (v23["met"] == 18).all() and v23["lowest"].min() > 0.9
    single = runs[(runs["timing"] == "one median each") & runs["version"].map(lambda v: records.version_key(v)[0] >= 12)]
    assert len(single) == 14 and (single["met"] < single["cases"]).sum() >= 5
    triton = records.host_path_table(rdir)["v2 host path / default"]
    assert (triton < 0.9).all()  # v2's syncs cost every case


def test_h200_runs_clocks_and_rounds(h200):
    rdir, grid_all, _ = h200
    fa3 = records.provider_across_runs(grid_all)
    one = fa3.loc["1x16384x32x128"]
    assert one["lowest"] < one["facts file"] < one["highest"] and (fa3["spread (%)"] < 15).all()
    timed = records.v19_clock_timings(rdir)
    power = records.power_by_head_dim(timed)
    assert power.loc[64, "sm_mhz"] > 1950 > 1850 > power.loc[256, "sm_mhz"]
    assert power.loc[256, "at_power_limit"] > 0.9 > 0.2 > power.loc[64, "at_power_limit"]
    r, n = records.clock_speed_correlation(timed)
    assert abs(r) < 0.3 and n > 200  # weakly related
    spread = records.spread_summary(records.round_spreads(rdir))
    assert spread.loc["fp8lab ws", "median (%)"] < 4 and spread.loc["fp8lab", "widest (%)"] > 10


def test_h200_roofline_vllm_and_quantization(h200):
    rdir, grid_all, grid = h200
    fastest = records.fastest_kernel(grid)
    assert (records.roofline_points(grid, fastest)["intensity"] > 1000).all()  # far right of any ridge
    clocks = records.power_by_head_dim(records.v19_clock_timings(rdir))["sm_mhz"]
    table = records.exp2_table(grid, fastest, clocks)
    assert 0.5 < table.loc[64, "best of the lower model"] < 0.7 and 0.5 < table.loc[256, "best of the lower model"] < 0.6
    by_version = records.vllm_ratio_by_version(grid_all)
    assert (by_version["vLLM / fa3-fwd, d = 256, highest"].dropna() < 0.4).all()
    assert (by_version["vLLM / fa3-fwd, d < 256, lowest"] > 0.6).all()
    _, flushed, copy = records.quant_flush(rdir / "run30" / "call1" / "bench_v34_quant_flush.json")
    head, delayed = flushed.loc["per-head current (auto)"], flushed.loc["per-head delayed"]
    assert 0.70 < head["L2 flushed", 128] < head["back to back", 128] - 0.03  # the flush costs current per head
    assert delayed["L2 flushed", 32] < 0.85 < delayed["L2 flushed", 128]  # delayed meets the line from 128 MiB only
    assert copy.loc["L2 flushed", 128] < copy.loc["back to back", 128] < 4.3 < copy.loc["back to back", 16]
    v35 = records.quant_before_long([rdir / "run31" / "call1" / "bench_v35_quant_tlb.json",
                                     rdir / "run31" / "call4" / "bench_v35_quant_prelude.json"])
    at128 = records.quant_before_added(v35).xs(128, level="mib")
    assert at128.loc[("flushed", "per-head current (auto)"), "min"] > at128.loc[("flushed", "copy bf16"), "max"] + 4
    assert at128.loc[("flushed, x touched", "per-head current (auto)"), "min"] > 9  # x's translations buy nothing
    assert (at128.loc["translations evicted", "min"] > 20).all()  # every kernel pays for those
    assert (at128.loc[["after a tiny kernel", "after itself on other data"]].abs() < 1.5).all().all()
    v36 = records.quant_before_added(records.quant_before_long(
        [rdir / "run32" / "call4" / "bench_v36_quant_evict.json", rdir / "run32" / "call3" / "bench_v36_quant_dirty.json"]))
    at128 = v36.xs(128, level="mib")
    head, copy, read = "per-head current (auto)", "copy bf16", "read x (amax)"
    assert at128.loc[("flushed", head), "min"] > at128.loc[("flushed", copy), "max"] + 4  # v35's gap, again
    assert at128.loc[("512 MiB read", head), "min"] > 8  # a larger read flush: the same
    writers = at128.loc["256 MiB copied"].drop(read)  # after a write, no kernel that writes loses a microsecond
    assert len(writers) == 3 and (writers.abs().max(axis=1) < 1).all()
    assert at128.loc[("256 MiB written", head), "max"] < 2 and at128.loc[("flushed by writing", head), "max"] < 2
    assert abs(at128.loc[("flushed", read)]).max() < 1 < 5 < at128.loc[("256 MiB written", read), "min"]
    rev, same = records.reverse_table(rdir)
    assert same and (rev[["tensor backward / forward", "head backward / forward"]] > 1).all().all()
    graph = records.quant_default_rows(bench.records_frame(rdir, "quant"))
    assert {"v5", "v14", "v15"} <= set(graph["version"]) and not graph["kernel"].str.contains("copy").any()


def test_flush_halves_at_head_dim_256():
    rng = random.Random()
    cases = ["2x8192x32x128", "2x8192x32x256", "2x8192x32x256 causal"]
    calls = ["fp8lab ws ws-a-pf", "fp8lab ws ws-b-pf", "fp8lab ws ws-a-pf-h2", "fp8lab ws ws-b-pf-h2", "fp8lab ws",
             "fp8lab m64-pf", "vLLM FA3 FP8 varlen", "fa3-fwd FP8"]
    tiles = pd.DataFrame([[rng.uniform(300, 1100) for _ in calls] for _ in cases], index=cases, columns=calls)
    tiles.loc["2x8192x32x256 causal", "fp8lab ws ws-b-pf"] = float("nan")  # a tile not timed there
    t = records.flush_halves(tiles)
    assert list(t.index) == cases[1:]
    for c in t.index:
        row = tiles.loc[c]
        assert t.loc[c, "Gluon pv_flush, whole width"] == row[["fp8lab ws ws-a-pf", "fp8lab ws ws-b-pf"]].max()
        assert t.loc[c, "Gluon pv_flush, two halves"] == max(row["fp8lab ws ws-a-pf-h2"], row["fp8lab ws ws-b-pf-h2"])
        assert (t.loc[c, "vLLM FA3 FP8 varlen"], t.loc[c, "fa3-fwd FP8"]) == (row["vLLM FA3 FP8 varlen"], row["fa3-fwd FP8"])
    with pytest.raises(ValueError, match="head dim 64"):
        records.flush_halves(tiles, 64)


def test_h200_flush_in_halves_at_head_dim_256():
    from fp8lab.kernels import explain

    t = records.flush_halves(explain.pv_flush(env.results_dir())[1])
    whole, halves = t["Gluon pv_flush, whole width"], t["Gluon pv_flush, two halves"]
    assert (whole < 1.1 * t["vLLM FA3 FP8 varlen"]).all() and (halves > 2 * whole).all()  # vLLM's speed, until halved


def test_span_range_of_a_clock_log():
    t0 = pd.Timestamp("2026-11-30 16:47:35")
    rng = random.Random()
    mhz = [rng.uniform(1500, 1980) for _ in range(12)]
    window = pd.DataFrame({"time": [t0 + pd.Timedelta(milliseconds=250 * i) for i in range(12)], "sm_mhz": mhz,
                           "power_w": [700.0] * 12})
    span = (t0 + pd.Timedelta(seconds=1), t0 + pd.Timedelta(seconds=2))  # samples 4 to 8
    assert records.span_range(window, span) == (min(mhz[4:9]), max(mhz[4:9]))
    assert records.span_range(window, span, "power_w") == (700.0, 700.0)
    with pytest.raises(ValueError, match="no sample"):
        records.span_range(window, (t0 - pd.Timedelta(seconds=9), t0 - pd.Timedelta(seconds=8)))


def test_round_bias_by_round(tmp_path):
    rng = random.Random()
    tf = {(c, p): [rng.uniform(500, 1000) for _ in range(5)] for c in ("a", "b") for p in ("x", "y")}
    rows = [dict(case=c, provider=p, head_dim=128, round=i, tflops=t) for (c, p), ts in tf.items() for i, t in enumerate(ts)]
    rows += [dict(case="small", provider="x", head_dim=64, round=i, tflops=1.0 + 99 * (i == 0)) for i in range(5)]
    bench.write_results(tmp_path / "bench_v23_rounds_run9.json", rows, {"gpu": "test"})
    bias = records.round_bias(tmp_path, {"nine": "_run9"})
    assert list(bias.columns) == [f"round {i}" for i in range(1, 6)] and list(bias.index) == ["nine"]
    for i in range(5):  # head dim 64 left out
        expect = sum(ts[i] / sorted(ts)[2] for ts in tf.values()) / len(tf)
        assert bias.loc["nine", f"round {i + 1}"] == pytest.approx(expect)
    assert records.round_bias(tmp_path, {"nine": "_run9"}, min_head_dim=64).loc["nine", "round 1"] > 10


def test_h200_first_round_after_idle_is_fast():
    bias = records.round_bias(env.results_dir())
    idle, loaded = bias.iloc[1], bias.iloc[0]
    assert idle["round 1"] > 1.0 > idle[["round 2", "round 3", "round 4", "round 5"]].max()  # fast first, then slow
    assert loaded["round 1"] < 1.0 < idle["round 1"]


def test_missing_columns_are_named() -> None:
    """A frame without the columns a table reads gets a ValueError naming them, not a pandas KeyError."""
    grid = pd.DataFrame(dict(case=["a", "a"], provider=["fp8lab", "fa3-fwd FP8"], tflops=[random.random(), 1.0]))
    with pytest.raises(ValueError, match=r"grid_all: expected columns \['version', 'tflops'\], missing \['version'\]"):
        records.grid_rows(grid, "v1")
    with pytest.raises(ValueError, match=r"missing \['tflops'\]"):
        records.provider_table(grid.drop(columns="tflops"))
    with pytest.raises(ValueError, match=r"missing \['head_dim', 'seqlen', 'causal'\]"):
        records.target_table(grid)
    with pytest.raises(TypeError, match="expected a pandas DataFrame, got list"):
        records.fastest_kernel([])


def test_probe_ranges_per_shape_and_setting(tmp_path):
    """Lowest-highest over the rounds, shapes and settings in the record's order, bits all-or-nothing."""
    rng = random.Random()
    fracs = {(shape, setting): [rng.uniform(0.5, 1.0) for _ in range(3)] for shape in ("1x8", "4x2") for setting in ("b", "a")}
    rows = [dict(rep=i, shape=shape, setting=setting, frac_copy_graph=f, same_bits=True)
            for i in range(3) for (shape, setting), fs in fracs.items() for f in [fs[i]]]
    bench.write_results(tmp_path / "probe.json", rows, {"gpu": "test"})
    table, same = records.probe_ranges(tmp_path / "probe.json")
    assert same and list(table.index) == ["1x8", "4x2"] and list(table.columns) == ["b", "a"]
    for (shape, setting), fs in fracs.items():
        assert table.loc[shape, setting] == f"{min(fs):.3f}-{max(fs):.3f}"
    rows[-1] = dict(rows[-1], same_bits=False, frac_copy_graph=0.25)
    bench.write_results(tmp_path / "probe.json", [dict(r, frac_copy_graph=0.25) for r in rows], {"gpu": "test"})
    table, same = records.probe_ranges(tmp_path / "probe.json")
    assert not same and (table == "0.250").all().all()  # one value over the rounds: no range
    bench.write_results(tmp_path / "bad.json", [{k: v for k, v in r.items() if k != "setting"} for r in rows], {})
    with pytest.raises(ValueError, match=r"missing \['setting'\]"):
        records.probe_ranges(tmp_path / "bad.json")


def test_h200_claimed_parts_are_paced_by_the_counter():
    """v37: parts claimed from one atomic counter run at about the same fraction of copy at every
    split of 128 MiB, below the dealt plan everywhere but one row; the committed kernel in the same
    session stays below 0.85 with one sequence."""
    rdir = env.results_dir() / "run33"
    claims, same = records.probe_ranges(rdir / "call1" / "bench_v37_quant_claims.json")
    def lo_hi(shape: str, setting: str) -> list[float]:
        return [float(v) for v in claims.loc[shape, setting].split("-")]

    claimed = [v for shape in ("1x16384", "2x8192", "4x4096") for v in lo_hi(shape, "claimed")]
    assert same and max(claimed) - min(claimed) < 0.02 and max(claimed) < 0.7
    for shape in claims.index.drop("1x16384 GQA4"):
        assert max(lo_hi(shape, "claimed")) < min(lo_hi(shape, "dealt (plan)")) - 0.05, shape
    committed, same = records.probe_ranges(rdir / "call2" / "bench_v37_quant_buffers.json")
    assert same and 0.78 < float(committed.loc["1x16384", "x6 (plan)"].split("-")[-1]) < 0.85
