"""fp8lab.scaling.experiments: the tables and figures of notebooks 02 and 03, against direct float64
computations on small fresh random inputs."""

from __future__ import annotations

import math

import pytest
import torch

from fp8lab import data, formats
from fp8lab.reference import attention_exact
from fp8lab.scaling import (
    PerHead,
    PerTensor,
    PerToken,
    ScaleStrategy,
    as_kernel_reads,
    as_contiguous_reads,
    dequantize,
    descale_from_heads,
    descale_from_scalar,
    quantize_for_fa3,
)
from fp8lab.scaling import experiments as ex

E4M3 = formats.get_format("e4m3fn")


def randn(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def sqnr64(back: torch.Tensor, x: torch.Tensor) -> float:
    x = x.double()
    return 10 * math.log10(float(x.square().sum() / (back.double() - x).square().sum()))


def descale32(amax: float) -> float:
    """amax / 448 as the float32 at or above it (what `descale_from_amax` gives)."""
    d = torch.tensor(amax / 448, dtype=torch.float64).float()
    return (d if d.item() >= amax / 448 else torch.nextafter(d, torch.tensor(math.inf))).item()


def round_trip64(x: torch.Tensor, descale: float) -> torch.Tensor:
    """x quantized with one descale, in float64: clamp to +-448, round to e4m3 (RNE), multiply back."""
    y = (x.float() / torch.tensor(descale, dtype=torch.float32)).double().clamp(-E4M3.max, E4M3.max)
    return formats.quantize(y, E4M3) * descale


# --------------------------------------------------------------------------- notebook 02


def test_log2_ratios():
    r = ex.log2_ratios(9, 4.0)
    assert len(r) == 9 and r[0] == 2.0**-4 and r[-1] == 1.0
    assert all(math.isclose(math.log2(b / a), 0.5) for a, b in zip(r, r[1:]))
    for bad in ({"n": 1, "binades": 4.0}, {"n": 5, "binades": 0.0}, {"n": 2.0, "binades": 1.0}):
        with pytest.raises(ValueError):
            ex.log2_ratios(**bad)


def test_round_trip_summary_against_float64():
    x = randn(2, 37, 3, 16, seed=1, scale=3.0)
    t = ex.round_trip_summary(x)["value"]
    amax = x.double().abs().max().item()
    assert t["amax"] == pytest.approx(amax, rel=1e-7) and t["fp8 max (e4m3fn)"] == 448.0
    d = t["descale = amax / max"]
    assert amax / 448 <= d <= amax / 448 * (1 + 2**-23)  # float32, rounded up
    assert t["largest |x_fp8|"] == 448.0
    rel = float((round_trip64(x, d) - x.double()).norm() / x.double().norm())
    assert t["relative L2 of the round trip"] == pytest.approx(rel, rel=1e-12)
    assert t["worst relative rounding of e4m3fn (1/17)"] == pytest.approx(1 / 17, rel=1e-15)
    assert rel < 1 / 17
    assert ex.round_trip_summary(x, ScaleStrategy(fmt="e5m2"))["value"]["worst relative rounding of e5m2 (1/9)"] == \
        pytest.approx(1 / 9)
    with pytest.raises(ValueError, match="per-tensor"):
        ex.round_trip_summary(x, ScaleStrategy(PerHead()))


def test_strategy_set_labels_what_fa3_cannot_take():
    c = randn(1, 40, 2, 8, seed=2)
    s = ex.strategy_set(c, block_size=16, percentile=99.0, mse_ratios=(0.5, 1.0))
    assert list(s) == ["tensor / current", "tensor / current / pow2", "kv-head / current",
                       "block 16 / current (not FA3)", "token / current (not FA3)", "channel / current (not FA3)",
                       "tensor / static max", "tensor / static p99", "tensor / static MSE", "kv-head / static max"]
    for name, strat in s.items():
        assert name.endswith(ex.NOT_FA3) == (not ex.fa3_can_take(strat))
        if not name.endswith(ex.NOT_FA3):  # what FA3 takes, quantize_for_fa3 takes too
            quantize_for_fa3(c, strat, heads_kv=2)
    assert s["tensor / static max"].source.amax.item() == pytest.approx(c.double().abs().max().item())
    assert s["tensor / static p99"].source.amax.item() == pytest.approx(
        torch.quantile(c.double().abs().flatten(), 0.99).item())
    assert torch.equal(s["kv-head / static max"].source.amax[0], c.double().abs().amax(dim=(0, 1, 3)))
    with pytest.raises(TypeError):
        ex.fa3_can_take("tensor")


@pytest.fixture(scope="module")
def strategy_table():
    shape = (1, 64, 4, 32)
    spread = {"normal": {}, "head_ranges": {"head_range_log2": 9.0}}  # heads 2^18 apart: the smallest meet subnormals
    tensors = {n: data.sample(n, shape, seed=3, **o) for n, o in spread.items()}
    calibs = {n: data.sample(n, shape, seed=4, **o) for n, o in spread.items()}
    return ex.compare_on_distributions(tensors, calibs, block_size=16, mse_ratios=(0.25, 0.5, 1.0)), tensors


def test_compare_on_distributions_and_what_notebook_02_derives_from_it(strategy_table):
    table, tensors = strategy_table
    assert len(table) == 2 * 10 and set(table["tensor"]) == set(tensors)
    # rows against a direct float64 round trip
    row = table.set_index(["tensor", "strategy"]).loc[("normal", "tensor / current")]
    x = tensors["normal"]
    d = descale32(x.double().abs().max().item())
    assert row["sqnr"] == pytest.approx(sqnr64(round_trip64(x, d), x), rel=1e-9)
    assert row["fa3"] and row["source"] == "current" and not row["power_of_two"]
    keyed = ex.by_key(table, "sqnr")
    assert len(keyed) == 20 and keyed["head_ranges|token / current (not FA3)"] == pytest.approx(
        table[(table.tensor == "head_ranges") & (table.strategy == "token / current (not FA3)")]["sqnr"].item())
    bw = ex.best_and_worst(table)
    for t in tensors:
        rows = table[table.tensor == t]
        assert bw.loc[t, ("best", "sqnr")] == rows["sqnr"].max()
        assert bw.loc[t, ("worst", "strategy")] == rows.loc[rows["sqnr"].idxmin(), "strategy"]
    spread = ex.current_spread(table)
    current = [n for n in table.strategy.unique() if "/ current" in n]
    assert len(current) == 6  # pow2 included
    for t in tensors:
        v = [keyed[f"{t}|{n}"] for n in current]
        assert spread[t] == pytest.approx(max(v) - min(v))
    # a per-head strategy's worst head beats the per-tensor one's on heads of very different ranges
    gain = ex.worst_head_gain(table, "head_ranges", "kv-head / current", "tensor / current")
    worst = ex.by_key(table, "sqnr_worst_head")
    assert gain == pytest.approx(worst["head_ranges|kv-head / current"] - worst["head_ranges|tensor / current"])
    assert gain > 3
    with pytest.raises(KeyError, match="no row"):
        ex.worst_head_gain(table, "head_ranges", "token / current", "tensor / current")
    split = ex.exact_max_split(table)
    assert list(split.columns) == ["tensor", "strategy", "sqnr", "energy_exact_at_max", "sqnr_rest"]
    assert set(split.strategy) == {n for n in current if "pow2" not in n}
    assert ((split.energy_exact_at_max > 0) & (split.energy_exact_at_max < 1)).all()
    with pytest.raises(ValueError, match="calibration tensor"):
        ex.compare_on_distributions(tensors, {"normal": tensors["normal"]})


def test_compare_strategies_names_an_unknown_metric():
    x = randn(1, 8, 2, 16, seed=5)
    for bad in (["snr"], "sqnr"):  # a typo, and one name not in a list: were KeyError 'snr' and KeyError 's'
        with pytest.raises(ValueError, match=r"metric_names: expected names from \('rmse', 'rel_l2', 'cosine', "
                                             r"'sqnr'\), got"):
            ex.compare_strategies({"x": x}, {"tensor": ScaleStrategy()}, metric_names=bad)


def test_calibration_picks():
    calibs = {"a": randn(1, 97, 2, 16, seed=5), "b": randn(1, 97, 2, 16, seed=6).pow(3)}
    picks = ex.calibration_picks(calibs, percentile=99.0, mse_ratios=ex.log2_ratios(16, 4.0)).set_index(
        ["distribution", "method"])
    for name, c in calibs.items():
        a = c.double().abs()
        assert picks.loc[(name, "max"), "amax / max"] == 1.0
        assert picks.loc[(name, "p99"), "amax"] == pytest.approx(torch.quantile(a.flatten(), 0.99).item(), rel=1e-9)
        mse = picks.loc[(name, "MSE")]
        assert any(math.isclose(mse["amax / max"], r, rel_tol=1e-9) for r in ex.log2_ratios(16, 4.0))
        assert mse["true_max"] == pytest.approx(a.max().item())


def test_delayed_summary():
    import pandas as pd

    trace = pd.DataFrame({"strategy": ["a"] * 4 + ["b"] * 2, "saturated": [0, 0.1, 0, 0.5, 0, 0],
                          "sqnr": [30.0, 10.0, 31.0, 5.0, 29.0, 27.0]})
    s = ex.delayed_summary(trace)
    assert s.loc["a"].tolist() == [2, 5.0, 19.0] and s.loc["b"].tolist() == [0, 27.0, 28.0]


def test_pow2_cost_against_float64_and_under_a_bit():
    x = randn(1, 300, 2, 16, seed=7, scale=0.37)
    t = ex.pow2_cost({"x": x}, PerTensor()).loc["x"]
    amax = x.double().abs().max().item()
    d = descale32(amax)
    p2 = 2.0 ** math.ceil(math.log2(amax / 448))
    assert t["SQNR (dB)"] == pytest.approx(sqnr64(round_trip64(x, d), x), rel=1e-9)
    assert t["SQNR, power of two (dB)"] == pytest.approx(sqnr64(round_trip64(x, p2), x), rel=1e-9)
    assert t["cost (dB)"] == pytest.approx(t["SQNR (dB)"] - t["SQNR, power of two (dB)"])
    assert 224 < t["largest |x_fp8|, power of two"] <= 448
    # per head on many values: >= 0 up to rounding luck, and well under a bit (6.02 dB)
    costs = ex.pow2_cost({f"s{s}": randn(2, 256, 4, 64, seed=s) * randn(1, 1, 4, 1, seed=s + 50).exp()
                          for s in range(3)})["cost (dB)"]
    assert (costs > -0.1).all() and (costs < 20 * math.log10(2)).all()


def test_percentile_sqnr_against_float64():
    tensors = {"normal": randn(1, 200, 2, 32, seed=8), "outliers": data.sample("fa3_outliers", (1, 200, 2, 32), seed=8)}
    calibs = {"normal": randn(1, 200, 2, 32, seed=9), "outliers": data.sample("fa3_outliers", (1, 200, 2, 32), seed=9)}
    t = ex.percentile_sqnr(tensors, calibs, (99.99, 99.0))
    assert list(t.columns) == ["p99.99", "p99"] and list(t.index) == ["normal", "outliers"]
    for name in tensors:
        for p in (99.99, 99.0):
            amax = torch.quantile(calibs[name].double().abs().flatten(), p / 100).item()
            d = descale32(amax)
            assert t.loc[name, f"p{p:g}"] == pytest.approx(sqnr64(round_trip64(tensors[name], d), tensors[name]), rel=1e-9)
    assert (t["p99"] < t["p99.99"]).all()  # clipping 1 % costs more than rounding: FP8's precision is relative


# --------------------------------------------------------------------------- notebook 03


def test_per_head_round_trip_and_k_heads_vs_e4m3():
    k = randn(2, 50, 3, 16, seed=10) * torch.tensor([1.0, 2.0**-10, 2.0**-20])[None, None, :, None]
    per_head = ex.per_head_round_trip(k, {"per tensor": ScaleStrategy(), "per KV head": ScaleStrategy(PerHead())})
    assert len(per_head) == 6
    amax = k.double().abs().amax(dim=(0, 1, 3))
    assert per_head.groupby("head")["head amax"].first().tolist() == pytest.approx(amax.tolist())
    by = per_head.set_index(["strategy", "head"])["sqnr"]
    assert by["per tensor", 2] == 0.0  # 2^20 below the largest head: flushed to zeros
    for h in range(3):
        x = k[:, :, h]
        back = torch.stack([round_trip64(x[b], descale32(x[b].double().abs().max().item())) for b in range(2)])
        assert by["per KV head", h] == pytest.approx(sqnr64(back, x), rel=1e-9)  # per (sequence, head) descales
    f = ex.k_heads_vs_e4m3(per_head)
    assert f["binades between largest and smallest head"] == pytest.approx(math.log2(amax.max() / amax.min()))
    assert f["e4m3 binades, smallest subnormal to 448"] == pytest.approx(17.807, abs=1e-3)  # log2(448 / 2^-9)
    assert f["worst head SQNR per tensor (dB)"] == 0.0 and 0 <= f["SQNR spread per KV head (dB)"] < 1.5
    with pytest.raises(KeyError, match="no strategy"):
        ex.k_heads_vs_e4m3(per_head, fine="per token")


def test_descale_layout_table():
    vals = torch.rand(3, generator=torch.Generator().manual_seed(11)) + 0.1
    t = ex.descale_layout_table({
        "scalar": descale_from_scalar(0.25, 5, 3),
        "expand": descale_from_heads(vals, 5, layout="expand"),
        "contiguous": descale_from_heads(vals, 5, layout="contiguous"),
        "transposed": descale_from_heads(vals, 5, layout="transposed"),
    })
    assert t["strides"].tolist() == [(0, 0), (0, 1), (3, 1), (1, 5)]
    assert t["bytes of storage"].tolist() == [4, 3 * 4, 15 * 4, 15 * 4]
    assert t["contiguous"].tolist() == [False, False, True, False]
    assert t["FA3's strided read gives the values"].all()
    assert t["a contiguity-assuming read gives"].tolist() == ["past the storage", "past the storage", "the values",
                                                              "other values"]
    assert (t["shape"] == (5, 3)).all()


def _fa3_inputs(seed: int = 12):
    q, k, v = randn(2, 16, 4, 32, seed=seed), randn(2, 16, 2, 32, seed=seed + 1), randn(2, 16, 2, 32, seed=seed + 2)
    q8, qd = quantize_for_fa3(q * torch.tensor([1.0, 4.0])[:, None, None, None], ScaleStrategy(PerHead(2)), 2)
    k8, kd = quantize_for_fa3(k, ScaleStrategy(PerHead()), 2)
    v8, vd = quantize_for_fa3(v, ScaleStrategy(PerTensor()), 2)
    assert not torch.equal(qd[0], qd[1])  # per-sequence values: a transposed read at b * heads_kv + h differs
    return q8, k8, v8, qd, kd, vd


def test_attention_layouts_agree_catches_a_contiguity_bug():
    q8, k8, v8, qd, kd, vd = _fa3_inputs()

    def strided(q, k, v, **kw):  # reads each descale through its strides, as FA3 does
        return attention_exact(q, k, v, **kw)

    def contiguity_bug(q, k, v, *, q_descale, k_descale, v_descale, **kw):
        """Reads descale[b * heads_kv + h] of the storage (where that stays inside it)."""
        reads = [as_contiguous_reads(d) for d in (q_descale, k_descale, v_descale)]
        reads = [as_kernel_reads(d) if r is None else r for d, r in zip((q_descale, k_descale, v_descale), reads)]
        return attention_exact(q, k, v, q_descale=reads[0], k_descale=reads[1], v_descale=reads[2], **kw)

    good = ex.attention_layouts_agree(q8, k8, v8, qd, kd, vd, backend=strided)
    assert good == {"contiguous = transposed": True, "expand = contiguous": True}
    # sequence 1 reads the transposed storage's wrong element, and past the expanded row into qd's second one
    bad = ex.attention_layouts_agree(q8, k8, v8, qd, kd, vd, backend=contiguity_bug)
    assert bad == {"contiguous = transposed": False, "expand = contiguous": False}
    with pytest.raises(ValueError, match="one value"):
        ex.attention_layouts_agree(q8, k8, v8, qd, kd, kd, backend=strided)


def test_attention_layouts_agree_on_fp8labs_triton_kernel():
    q8, k8, v8, qd, kd, vd = _fa3_inputs(seed=13)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    q8, k8, v8 = (t.to(dev) for t in (q8, k8, v8))
    assert ex.attention_layouts_agree(q8, k8, v8, qd, kd, vd) == {"contiguous = transposed": True,
                                                                   "expand = contiguous": True}


def test_gqa_descale_reads_against_a_loop():
    heads_q, heads_kv = 12, 3
    q = randn(2, 9, heads_q, 8, seed=14)
    q = q / q.abs().amax(dim=(1, 3), keepdim=True) * (torch.arange(heads_q) + 1.0)[None, None, :, None]
    q[1] *= 100  # sequence 1 is not what the table shows
    t = ex.gqa_descale_reads(q, heads_kv)
    group = heads_q // heads_kv
    for h in range(heads_q):
        j = h // group
        assert t.loc[h, "reads KV head"] == j
        assert t.loc[h, "Q amax per query head"] == pytest.approx(h + 1.0)
        top = (j + 1) * group  # the group's largest amax
        assert top / 448 <= t.loc[h, "shared Q descale (group max / 448)"] <= top / 448 * (1 + 2**-23)
    with pytest.raises(ValueError, match="heads_kv: expected a divisor of q.s 12 heads"):
        ex.gqa_descale_reads(q, 5)


def test_gqa_q_scale_cost():
    # two query heads per group, 2^16 apart: the group's shared scale pushes the small one into the subnormals
    q = randn(1, 64, 4, 32, seed=15) * torch.tensor([1.0, 2.0**-16, 1.0, 2.0])[None, None, :, None]
    t = ex.gqa_q_scale_cost(q, 2)
    assert list(t.index) == ["per query head (not FA3)", "per KV group (FA3)"]
    assert t.loc["per query head (not FA3)", "worst head SQNR (dB)"] > t.loc["per KV group (FA3)", "worst head SQNR (dB)"] + 10
    d = [descale32(q[0, :, h].double().abs().max().item()) for h in range(4)]
    back = torch.stack([round_trip64(q[..., h, :], d[h]) for h in range(4)], dim=2)
    assert t.loc["per query head (not FA3)", "SQNR (dB)"] == pytest.approx(sqnr64(back, q), rel=1e-9)


def test_token_reduction_against_a_loop():
    k = randn(2, 30, 4, 16, seed=16)
    k[:, 0] *= 32.0  # a sink
    r = ex.token_reduction(k, heads_kv=2)
    tok_amax = k.double().abs().amax(dim=3)  # (B, S, H)
    lost = r["binades_lost"]
    assert lost.shape == (2, 30, 4)
    for b in range(2):
        for h in range(4):
            group = slice(2 * (h // 2), 2 * (h // 2) + 2)
            head_max = tok_amax[b, :, group].max()  # the reduced descale is the max over tokens and the GQA group
            assert lost[b, :, h].double() == pytest.approx(torch.log2(head_max / tok_amax[b, :, h]), abs=1e-5)
    assert r["median_binades_lost"] == pytest.approx(lost.median().item()) and r["median_binades_lost"] > 3
    s = r["sqnr_db"]
    assert s["per token (not FA3)"] > s["max over tokens (FA3)"]
    x8, d = quantize_for_fa3(k, ScaleStrategy(PerToken()), 2)
    assert s["max over tokens (FA3)"] == pytest.approx(sqnr64(dequantize(x8, d, PerHead(2), dtype=torch.float64), k))


def test_checkpoint_provenance():
    t = ex.checkpoint_provenance({"k, v only": {"k_scale": 0.03, "v_scale": 0.5}, "kv": {"kv_scale": 0.2}})
    assert list(t.index) == [("k, v only", "intended"), ("k, v only", "vllm"), ("kv", "intended"), ("kv", "vllm")]
    assert t.loc[("k, v only", "intended"), "q"] == 0.03 and t.loc[("k, v only", "vllm"), "q"] == 1.0
    assert t.loc[("kv", "vllm"), ["k", "v"]].tolist() == [0.2, 0.2]
    assert "k_scale" in t.loc[("k, v only", "intended"), "q from"]


def test_fallback_q_over_k():
    q, k, v = randn(1, 24, 4, 16, seed=17), randn(1, 24, 2, 16, seed=18), randn(1, 24, 2, 16, seed=19)
    t = ex.fallback_q_over_k(q, k, v, [1.0, 64.0])
    assert len(t) == 6 and sorted(set(t["q_over_k"])) == [1.0, 64.0] and (t["q_amax"] == 10.0).all()
    by = t.set_index(["q_over_k", "mode"])["rel_l2"]
    assert by[1.0, "intended"] == pytest.approx(by[1.0, "ideal"], rel=1e-9)
    assert by[64.0, "intended"] > 5 * by[64.0, "ideal"]
    for amax in (0.0, -10.0, float("nan")):  # 0 was a ZeroDivisionError, -10 a table of negative amaxes
        with pytest.raises(ValueError, match="q_amaxes: expected finite amaxes > 0, got"):
            ex.fallback_q_over_k(q, k, v, [1.0], q_amax=amax)


def test_head_spread_sweep_checks_the_heads():
    q, k, v = randn(1, 8, 6, 16, seed=1), randn(1, 8, 4, 16, seed=2), randn(1, 8, 4, 16, seed=3)
    with pytest.raises(ValueError, match=r"heads_q a multiple of heads_kv, got \(1, 8, 6, 16\)"):  # was a torch
        ex.head_spread_sweep(q, k, v, [0.0])  # RuntimeError from the rescaling, "size of tensor a (6) must match"
    with pytest.raises(ValueError, match="head_spread_sweep: expected q"):
        ex.head_spread_sweep(q[0], k[0], v[0], [0.0])


def test_sweeps_refuse_a_bare_number_or_str():
    # each was "'float' object is not iterable", or a str read letter by letter ("'<' not supported...")
    q, k, v = randn(1, 16, 4, 8, seed=31), randn(1, 16, 2, 8, seed=32), randn(1, 16, 2, 8, seed=33)
    with pytest.raises(ValueError, match=r"q_amaxes: expected one or more numbers such as \[0.1, 1.0, 10.0\], got 10.0"):
        ex.fallback_sweep(q, k, v, 10.0)
    with pytest.raises(ValueError, match="ratios: expected one or more numbers"):
        ex.fallback_q_over_k(q, k, v, "24")
    with pytest.raises(ValueError, match=r"ratios: expected one or more numbers .*, got \[\]"):  # was pandas'
        ex.fallback_q_over_k(q, k, v, [])  # "No objects to concatenate"
    with pytest.raises(ValueError, match="spreads_log2: expected one or more numbers .*, got '12'"):
        ex.head_spread_sweep(q, k, v, "12")
    with pytest.raises(ValueError, match="percentiles: expected one or more numbers .*, got 99.0"):
        ex.percentile_sqnr({"x": q}, {"x": k}, 99.0)


def test_fallback_sweep_checks_q_k_v():
    q, k, v = randn(1, 16, 4, 8, seed=34), randn(1, 16, 2, 8, seed=35), randn(1, 16, 2, 8, seed=36)
    with pytest.raises(ValueError, match="k: expected a tensor with a nonzero value"):  # was a ZeroDivisionError
        ex.fallback_sweep(q, torch.zeros_like(k), v, [1.0])
    q[0, 3, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="q: expected finite values"):  # was "softmax_scale: ... got nan"
        ex.fallback_sweep(q, k, v, [1.0])
    with pytest.raises(ValueError, match="q_over_k: expected a finite number > 0, got '2'"):
        ex.fallback_sweep(k, k, v, [1.0], q_over_k="2")


def test_strategy_tables_check_their_arguments():
    x = randn(1, 16, 4, 8, seed=37, scale=3.0)
    with pytest.raises(TypeError, match=r"strategies: expected a ScaleStrategy per name, got \{'t': 'str'\}"):
        ex.compare_strategies({"x": x}, {"t": "tensor"})  # was AttributeError: 'str' object has no attribute 'source'
    with pytest.raises(TypeError, match="x: expected a float tensor"):  # was 'list' object has no attribute 'double'
        ex.compare_strategies({"x": x.tolist()}, {"t": ScaleStrategy()})
    with pytest.raises(TypeError, match="strategies: expected a dict of name -> ScaleStrategy, got list"):
        ex.per_head_round_trip(x, [ScaleStrategy()])
    # one tensor for the series used to run, silently, one step per batch row
    with pytest.raises(TypeError, match=r"series: expected a list of tensors, one per step, got one tensor of shape "
                                        r"\(1, 16, 4, 8\)"):
        ex.delayed_trace(x, {"t": ScaleStrategy()})
    assert len(ex.delayed_trace([x, 2 * x], {"t": ScaleStrategy()})) == 2


def test_checkpoint_provenance_refuses_a_bare_mode():
    with pytest.raises(ValueError, match=r"modes: expected a tuple of modes .*got the str 'vllm'"):  # was "emulate
        ex.checkpoint_provenance({"ck": {"k_scale": 0.03, "v_scale": 0.5}}, "vllm")  # ... got 'v'"
