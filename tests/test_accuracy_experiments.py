"""fp8lab.reference.experiments: the tables and figures of notebook 05, on tiny fresh inputs."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from fp8lab.data import head_factors, make_qkv
from fp8lab.formats import cast_to_fp8, get_format, quantize
from fp8lab.metrics import rel_l2
from fp8lab.reference import attention_exact
from fp8lab.reference import experiments as ex

RECORD = Path(__file__).resolve().parents[1] / "results" / "h200" / "fidelity.json"
SMALL = dict(seqlen=41, heads=2, head_dim=16)


def test_emulation_check_is_exact_with_every_step_exact():
    got = ex.emulation_check("normal", **SMALL, seed=3)
    assert got["every step exact"] < 1e-12
    assert 0.01 < got["FA3 FP8"] < 0.15  # e4m3's rounding, a few per cent


def _per_head_cast_rel_l2(x: torch.Tensor) -> float:
    """x (batch, seq, heads, d): rel L2 of an amax/448 per-(batch, head) e4m3 round trip, in float64."""
    x = x.double()
    scale = x.abs().amax(dim=(1, 3), keepdim=True) / 448
    return float((quantize(x / scale, "e4m3fn") * scale - x).norm() / x.norm())


def test_cast_cost_table_measures_each_tensor_and_compares_the_output_costs():
    attr = ex.attribution_table(("normal", "fa3_outliers"), **SMALL, accumulator=None, seed=5)
    casts = ex.cast_cost_table(attr, **SMALL, seed=5)
    assert list(casts.index) == ["normal", "fa3_outliers"]
    for dist in casts.index:
        q, k, v = make_qkv(dist, seqlen_q=41, heads_q=2, head_dim=16, seed=5)
        for name, x in (("q", q), ("k", k), ("v", v)):
            assert casts.loc[dist, f"{name}: tensor"] == pytest.approx(_per_head_cast_rel_l2(x), rel=1e-3)
            assert casts.loc[dist, f"{name}: output"] == attr.loc[dist, name]
            assert 0.015 < casts.loc[dist, f"{name}: tensor"] < 0.04  # e4m3's RMS rounding error
    fake = pd.DataFrame({"q": [0.01, 0.03, 0.01], "k": [0.02, 0.04, 0.03], "v": [0.03, 0.02, 0.02]},
                        index=pd.Index(["normal", "fa3_outliers", "sinks"], name="distribution"))
    labels = ex.cast_cost_table(fake, seqlen=9, heads=1, head_dim=8)["V's cast against Q's and K's"]
    assert labels.tolist() == ["costs more than either", "costs less than either", "lies between"]


def test_quadrature_gap():
    attr = pd.DataFrame({"total": [0.1, 0.2], "quadrature_sum": [0.11, 0.15]}, index=["a", "b"])
    assert ex.quadrature_gap(attr).tolist() == pytest.approx([0.1, -0.25])
    with pytest.raises(ValueError, match="attribution_table's columns"):
        ex.quadrature_gap(attr.drop(columns="total"))


def test_mask_effect_matches_attribution_and_its_answers_tolerate_near_ties():
    effect = ex.mask_effect("normal", seqlen=64, heads=2, head_dim=16, seed=7)
    for name, causal in (("causal", True), ("non-causal", False)):
        row = ex.attribution_table(("normal",), seqlen=64, heads=2, head_dim=16, causal=causal, accumulator=None,
                                   seed=7).loc["normal"]
        assert effect.loc[name, ["q", "k", "v"]].tolist() == row[["q", "k", "v"]].tolist()
        assert effect.loc[name, "q, k mean / v"] == pytest.approx((row["q"] + row["k"]) / 2 / row["v"])
    # the causal mask shields Q and K on the first rows (a softmax over one key), never V
    answers, growth = ex.mask_effect_answers(effect)
    assert answers == {"more"} and growth > 1.05

    def fake(causal: float, non_causal: float) -> pd.DataFrame:
        return pd.DataFrame({"q, k mean / v": [causal, non_causal]}, index=["causal", "non-causal"])

    assert ex.mask_effect_answers(fake(1.0, 0.8)) == ({"less"}, pytest.approx(0.8))
    assert ex.mask_effect_answers(fake(1.0, 1.03))[0] == {"more", "less"}  # a near-tie
    assert ex.mask_effect_answers(fake(1.0, 1.03), tolerance=0)[0] == {"more"}
    with pytest.raises(ValueError, match="tolerance"):
        ex.mask_effect_answers(fake(1.0, 1.0), tolerance=-1)


@pytest.mark.parametrize("offset", [0, 3, 8])
def test_p_cast_thresholds_are_where_the_cast_zeros_and_leaves_the_normals(offset):
    e4m3 = get_format("e4m3fn")
    (row,) = ex.p_cast_thresholds((offset,)).to_dict(orient="records")
    assert row["max_offset"] == offset

    def cast(r: float) -> float:  # P = p / row max * 2^offset, cast
        return float(cast_to_fp8(torch.tensor([r * 2.0**offset], dtype=torch.float64)).double())

    zero, sub = row["zero at or below"], row["subnormal below"]
    assert cast(2.0**zero) == 0 and cast(2.0**zero * 1.01) == e4m3.min_subnormal
    assert cast(2.0**sub) == e4m3.min_normal and 0 < cast(2.0**sub * 0.9) < e4m3.min_normal


def test_head_input_range_takes_each_query_heads_kv_head():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 9, h, 8, generator=g) for h in (4, 2, 2))
    q[1, 3, 3, 5], k[0, 2, 0, 1], v[1, 1, 1, 0] = 50.0, -70.0, 90.0
    got = ex.head_input_range(q, k, v)
    want = [max(q[:, :, h].abs().max(), k[:, :, h // 2].abs().max(), v[:, :, h // 2].abs().max()) for h in range(4)]
    assert got.dtype == torch.float64 and got.tolist() == pytest.approx([float(w) for w in want])
    assert got.tolist()[:2] == [70.0, 70.0] and got.tolist()[2:] == [90.0, 90.0]
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        ex.head_input_range(q[:, :, :3], k, v)


def test_scaling_table_names_the_narrowest_and_the_worst_head():
    sc = ex.scaling_table(("head_ranges",), seqlen=33, heads=4, head_dim=16, seed=1)
    assert list(sc["scales"]) == [name for name, _, _ in ex.SCALING_VARIANTS]
    narrowest = int(head_factors(4).argmin())  # the distribution scales each head by its own factor
    assert set(sc["smallest_head"]) == {narrowest}
    q, k, v = make_qkv("head_ranges", seqlen_q=33, heads_q=4, head_dim=16, seed=1)
    ref = attention_exact(q, k, v, causal=True)
    out = ex.fp8_variant(q, k, v, scales="tensor", causal=True, seed=1)
    per_head = rel_l2(out, ref, per_head=True)
    row = sc.set_index("scales").loc["per-tensor"]
    assert row["rel_l2_smallest_head"] == pytest.approx(float(per_head[narrowest]))
    assert row["rel_l2_worst_head"] == pytest.approx(float(per_head.max()))
    rank = int((head_factors(4) > head_factors(4)[int(per_head.argmax())]).sum()) + 1
    assert row["worst_head_range_rank"] == rank
    assert (sc["rel_l2_worst_head"] >= sc["rel_l2_smallest_head"]).all()


@pytest.mark.parametrize("table", [ex.attribution_table, ex.scaling_table, ex.max_offset_table])
def test_dists_must_be_a_tuple_of_names(table):
    # ("normal") is the string "normal": it was read letter by letter ("unknown distribution 'n'"), and () was a
    # KeyError from pandas in attribution_table
    for bad in ("normal", ()):
        with pytest.raises(ValueError, match=re.escape(f"dists: expected a tuple of one or more distribution names "
                                                       f"such as ('normal',), got {bad!r}")):
            table(bad, seqlen=16, heads=2, head_dim=16)


def test_scaling_by_head_and_the_smallest_head_gain():
    sc = pd.DataFrame({
        "distribution": ["a", "a", "b", "b"], "scales": ["per-tensor", "per-head"] * 2,
        "rel_l2": [0.4, 0.5, 0.05, 0.04], "rel_l2_worst_head": [0.6, 0.6, 0.06, 0.05],
        "worst_head_range_rank": [1, 2, 3, 1], "rel_l2_smallest_head": [0.03, 0.02, 0.05, 0.05]})
    by = ex.scaling_by_head(sc)
    assert by.loc[("a", "per-head")].tolist() == [0.5, 0.6, 0.02, 2]
    gain = ex.smallest_head_gain(sc)
    assert list(gain.index) == ["a", "b"]
    assert gain.loc["a", "smallest head gain"] == pytest.approx(1.5)
    assert gain.loc["a", "whole output gain"] == pytest.approx(0.8)
    assert gain.loc["b", "smallest head, per-tensor"] == 0.05 and gain.loc["b", "whole output, per-head"] == 0.04
    with pytest.raises(ValueError, match="not in the table"):
        ex.smallest_head_gain(sc, finer="block")
    with pytest.raises(ValueError, match="missing"):
        ex.scaling_by_head(sc.drop(columns="worst_head_range_rank"))


def _record() -> dict:
    if not RECORD.exists():
        pytest.skip("no recorded fidelity measurement")
    return ex.load_fidelity(RECORD)


def test_recorded_fa3_error_and_the_fidelity_views():
    rec = _record()
    err = ex.recorded_fa3_error(rec, "normal")
    plain = ex.fidelity_table(rec, "plain")
    rows = plain[(plain["dist"] == "normal") & (plain["provider"] == "fa3-fwd")]
    assert (err["min"], err["max"]) == (rows["fa3_err_vs_exact"].min(), rows["fa3_err_vs_exact"].max())
    assert err["head_dims"] == [64, 128, 256] and 0.01 < err["min"] < err["max"] < 0.1
    assert ex.recorded_fa3_error(None) is None and ex.recorded_fa3_error(rec, "no such dist") is None
    assert ex.fidelity_max_ratio(plain) == {p: plain.loc[plain["provider"] == p, "ratio"].max() for p in set(plain["provider"])}
    assert ex.fidelity_max_ratio(pd.DataFrame()) == {}

    both = ex.accumulator_comparison(ex.accumulator_study(rec))
    hopper = ex.fidelity_table(ex.accumulator_study(rec), "hopper")
    keys = ["provider", "dist", "head_dim", "causal", "heads"]
    assert len(both) == len(hopper) and not both.isna().any().any()
    merged = both.merge(hopper[keys + ["ratio"]], on=keys)
    assert (merged["ratio_hopper_mma"] == merged["ratio"]).all()
    assert ex.accumulator_comparison({}).empty and "ratio_hopper_mma" in ex.accumulator_comparison({}).columns

    shown, figures = ex.long_context_hardware(rec)
    assert set(shown.index.get_level_values("who")) <= set(ex.LONG_CONTEXT_SHOWN) and len(shown)
    for (dist, who), row in shown.iterrows():
        assert figures[f"{dist}/{who}"] == {str(n): float(e) for n, e in row.dropna().items()}
    empty, none = ex.long_context_hardware(None)
    assert empty.empty and none == {}


def test_fidelity_source_loads_the_record_and_measures_only_on_hopper(tmp_path, monkeypatch):
    path = tmp_path / "fidelity.json"
    path.write_text(json.dumps({"cases": [], "context": {"gpu": "recorded"}}))
    calls = []

    def measure(out, *, budget_s, vllm_lib):
        calls.append((out, budget_s, vllm_lib))
        return {"cases": [], "context": {"gpu": "live"}}

    src = ex.fidelity_source(path, device="cpu", measure=measure)
    assert not src.live and src.shown == src.recorded and src.recorded["context"]["gpu"] == "recorded" and not calls
    assert ex.fidelity_source(tmp_path / "missing.json", device="cpu").shown is None

    from fp8lab.backends import fetch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(fetch, "resolve_library", lambda: (None, "not fetched"))
    src = ex.fidelity_source(path, device="cuda", measure=measure, budget_s=7)
    assert src.live and src.shown["context"]["gpu"] == "live" and src.recorded["context"]["gpu"] == "recorded"
    assert calls[-1][1:] == (7, None)
    assert not ex.fidelity_source(path, device="cuda", measure=measure, measure_live=False).live
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert not ex.fidelity_source(path, device="cuda", measure=measure).live  # not a Hopper GPU

    def broken(out, **kwargs):
        raise RuntimeError("no production FA3 kernel was measured")

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    src = ex.fidelity_source(path, device="cuda", measure=broken)
    assert not src.live and src.note == "no production FA3 kernel was measured" and src.shown == src.recorded


def test_p_cast_thresholds_checks_the_offsets():
    for bad in (float("nan"), -3, 100):  # were rows of NaN, or thresholds for offsets FA3 refuses
        with pytest.raises(ValueError, match=r"max_offset: expected a number in \[0, 8\]"):
            ex.p_cast_thresholds((0, bad))
    with pytest.raises(ValueError, match=r"offsets: expected one or more numbers such as \(0, 8\), got '08'"):
        ex.p_cast_thresholds("08")  # was "unsupported operand type(s) for -: 'int' and 'str'"
    with pytest.raises(ValueError, match="offsets: expected one or more numbers"):
        ex.max_offset_table(("normal",), 8, **SMALL)


def test_long_context_table_refuses_a_bare_length():
    with pytest.raises(ValueError, match="seqlens: expected one or more numbers .*, got '64'"):  # was "seqlen_k:
        ex.long_context_table("64", queries=4, heads=1, head_dim=16)  # expected an int >= 1, got '6'"


def test_head_input_range_checks_batch_and_head_dim():
    q = torch.randn(1, 8, 4, 16)
    for k in (torch.randn(2, 8, 2, 16), torch.randn(1, 8, 2, 8), torch.randn(1, 8, 0, 16)):  # were silent amaxes,
        with pytest.raises(ValueError, match="head_input_range: expected q"):  # the last a ZeroDivisionError
            ex.head_input_range(q, k, k)


def test_fidelity_tables_refuse_a_path():
    for f in (ex.fidelity_table, ex.long_context_record, ex.recorded_fa3_error, ex.accumulator_study):
        with pytest.raises(TypeError, match=r"record: expected a fidelity record \(a dict"):  # was AttributeError
            f(str(RECORD))  # "'str' object has no attribute 'get'"
    with pytest.raises(ValueError, match="model: expected 'plain' or 'hopper', got 'hoper'"):  # was an empty table
        ex.fidelity_table({}, "hoper")
