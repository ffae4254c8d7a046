"""fp8lab.scaling: strategies, quantize/dequantize, FA3 descale layouts, checkpoint scales."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from fp8lab import formats
from fp8lab.layout import check_descale
from fp8lab.scaling import (
    DelayedAmax,
    PerBlock,
    PerChannel,
    PerHead,
    PerTensor,
    PerToken,
    ScaleFallbackWarning,
    ScaleStrategy,
    StaticAmax,
    calibrate,
    calibration_mse,
    compute_amax,
    dequantize,
    descale_from_amax,
    descale_from_heads,
    descale_from_scalar,
    descale_from_tokens,
    group_max,
    quantize,
    quantize_for_fa3,
    quantize_with_descale,
    resolve_checkpoint_scales,
)

E4M3 = formats.get_format("e4m3fn")
GRANULARITIES = [PerTensor(), PerHead(), PerHead(heads_kv=2), PerToken(), PerBlock(16), PerBlock(128), PerChannel()]


def randn(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def random_descales(*shape: int, seed: int = 1) -> torch.Tensor:
    """Log-uniform descales in [2^-10, 2^2]: random, never all ones."""
    u = torch.rand(shape, generator=torch.Generator().manual_seed(seed))
    return (2.0 ** (-10 + 12 * u)).float()


# --------------------------------------------------------------------------- groups by explicit loops


def loop_amax(x: torch.Tensor, g) -> torch.Tensor:
    """Independent amax per group, written with Python loops over the group definitions."""
    b, s, h, d = x.shape
    a = x.double().abs()
    if isinstance(g, PerTensor):
        return a.max()
    if isinstance(g, PerHead):
        hk = g.heads_kv or h
        gs = h // hk
        return torch.tensor([[a[i, :, j * gs:(j + 1) * gs].max() for j in range(hk)] for i in range(b)], dtype=torch.float64)
    if isinstance(g, PerToken):
        return a.amax(dim=3)
    if isinstance(g, PerBlock):
        n = g.block_size
        return torch.stack([a[:, i:i + n].amax(dim=(1, 3)) for i in range(0, s, n)], dim=1)
    if isinstance(g, PerChannel):
        return a.amax(dim=1)
    raise AssertionError(g)


@pytest.mark.parametrize("g", GRANULARITIES, ids=lambda g: repr(g))
def test_current_scaling_maps_each_group_amax_to_fp8_max(g):
    x = randn(2, 113, 4, 64, seed=3) * randn(1, 1, 4, 1, seed=4).exp()  # heads of different ranges
    x_fp8, descale = quantize(x, ScaleStrategy(g))
    assert x_fp8.dtype == torch.float8_e4m3fn and x_fp8.shape == x.shape
    assert descale.dtype == torch.float32
    amax = loop_amax(x, g)
    assert descale.shape == amax.shape
    # descale = amax / 448, rounded up (never down) to float32
    exact = amax / E4M3.max
    assert bool((descale.double() >= exact).all())
    assert bool((descale.double() <= exact * (1 + 2**-23)).all())
    # every group's largest element lands exactly on 448: the broadcast puts each descale on its own group
    group_max_fp8 = loop_amax(x_fp8.double(), g)
    assert torch.equal(group_max_fp8, torch.full_like(group_max_fp8, E4M3.max))


@pytest.mark.parametrize("g", GRANULARITIES, ids=lambda g: repr(g))
def test_round_trip_error_is_within_half_an_ulp(g):
    x = randn(2, 203, 4, 32, seed=5, scale=3.0)
    x_fp8, descale = quantize(x, ScaleStrategy(g))
    back = dequantize(x_fp8, descale, g, dtype=torch.float64)
    d = g.expand(descale, tuple(x.shape))
    y = x.double() / d
    # error in FP8 units: at most half the spacing of the grid at |y| (plus the float32 division's rounding)
    err_units = (back / d - y).abs()
    assert bool((err_units <= formats.ulp(y, E4M3) / 2 + y.abs() * 2**-23).all())
    # and the FP8 values are exactly the RNE of the float32 quotient x / descale
    assert torch.equal(x_fp8.double(), formats.quantize((x.float() / d.float()).double(), E4M3))


def test_varlen_3d_tensor_is_one_sequence():
    x = randn(301, 4, 64, seed=6)
    x_fp8, descale = quantize(x, ScaleStrategy(PerHead(2)))
    assert descale.shape == (1, 2) and x_fp8.shape == x.shape
    assert torch.allclose(descale.double(), loop_amax(x[None], PerHead(2)) / E4M3.max, rtol=2**-23)


# --------------------------------------------------------------------------- descale layouts


def layouts_of(values: torch.Tensor) -> dict[str, torch.Tensor]:
    """Same (batch, heads_kv) values as contiguous, transposed view and (if batch-constant) expand."""
    out = {
        "contiguous": values.contiguous(),
        "transposed": values.t().contiguous().t(),
    }
    if bool((values == values[:1]).all()):
        out["expand"] = values[0].expand(values.shape)
    return out


def test_layouts_really_differ_in_strides():
    v = random_descales(3, 2)
    assert descale_from_heads(v, 3, layout="contiguous").stride() == (2, 1)
    assert descale_from_heads(v, 3, layout="transposed").stride() == (1, 3)
    assert descale_from_heads(v[0], 3, layout="expand").stride() == (0, 1)
    assert descale_from_scalar(0.37, 3, 2).stride() == (0, 0)


@pytest.mark.parametrize("case", ["scalar", "per_head", "per_seq_head"])
def test_stride0_contiguous_and_transposed_descales_dequantize_identically(case):
    b, s, hq, hk, d = 3, 113, 8, 2, 64
    x_fp8 = formats.cast_to_fp8(randn(b, s, hq, d, seed=7, scale=50.0))
    if case == "scalar":
        base = descale_from_scalar(random_descales(1, seed=8)[0], b, hk)
        variants = {"expand": base, "contiguous": base.contiguous(), "transposed": base.contiguous().t().contiguous().t()}
    elif case == "per_head":
        per_head = random_descales(hk, seed=9)
        variants = {lay: descale_from_heads(per_head, b, layout=lay) for lay in ("expand", "contiguous", "transposed")}
    else:
        variants = layouts_of(random_descales(b, hk, seed=10))
    assert len({v.stride() for v in variants.values()}) == len(variants)  # really different layouts
    assert not bool((next(iter(variants.values())) == 1).all())
    outs = {k: dequantize(x_fp8, v, PerHead(hk), dtype=torch.float64) for k, v in variants.items()}
    ref = next(iter(outs.values()))
    for name, out in outs.items():
        assert torch.equal(out, ref), name
    # and against an explicit per-(sequence, query head) loop: query head h reads KV head h // (hq // hk)
    values = variants["contiguous"]
    for bi in range(b):
        for h in range(hq):
            expect = x_fp8[bi, :, h].double() * values[bi, h // (hq // hk)].double()
            assert torch.equal(ref[bi, :, h], expect)


def test_quantize_with_descale_identical_across_layouts():
    b, hk = 2, 4
    x = randn(b, 77, 8, 64, seed=11, scale=5.0)
    per_head = random_descales(hk, seed=12) * 0 + random_descales(hk, seed=12)
    outs = [quantize_with_descale(x, descale_from_heads(per_head, b, layout=lay), PerHead(hk)) for lay in ("expand", "contiguous", "transposed")]
    for o in outs[1:]:
        assert torch.equal(o.view(torch.uint8), outs[0].view(torch.uint8))


def test_attention_identical_across_descale_layouts_and_matches_dequantize():
    from fp8lab.reference import attention_exact

    b, s, hq, hk, d = 2, 37, 4, 2, 64
    q = randn(b, s, hq, d, seed=13, scale=2.0)
    k = randn(b, 53, hk, d, seed=14, scale=3.0)
    v = randn(b, 53, hk, d, seed=15, scale=0.5)
    qs, ks, vs = ScaleStrategy(PerHead(hk)), ScaleStrategy(PerHead()), ScaleStrategy(PerTensor())
    q8, qd = quantize_for_fa3(q, qs, hk)
    k8, kd = quantize_for_fa3(k, ks, hk)
    results = []
    for lay in ("contiguous", "transposed"):
        v8, vd = quantize_for_fa3(v, vs, hk)  # per-tensor: stride-0 expand
        q_l = descale_from_heads(qd.contiguous(), b, layout=lay)
        k_l = descale_from_heads(kd.contiguous(), b, layout=lay)
        v_l = vd if lay == "transposed" else vd.contiguous()
        results.append(attention_exact(q8, k8, v8, causal=True, q_descale=q_l, k_descale=k_l, v_descale=v_l))
    assert torch.equal(results[0], results[1])
    # the reference's own dequantization agrees with fp8lab.scaling.dequantize
    deq = [dequantize(t, dsc, PerHead(hk), dtype=torch.float64) for t, dsc in ((q8, qd), (k8, kd), (v8, vd))]
    manual = attention_exact(*deq, causal=True)
    torch.testing.assert_close(results[0], manual, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- GQA and per-token reduction


def test_gqa_q_scale_is_the_max_over_each_group():
    q = randn(2, 64, 12, 32, seed=16) * randn(1, 1, 12, 1, seed=17).exp()
    per_q_head = compute_amax(q, PerHead())
    per_group = compute_amax(q, PerHead(heads_kv=3))
    for j in range(3):
        assert torch.equal(per_group[:, j], per_q_head[:, 4 * j:4 * j + 4].amax(dim=1))
    assert torch.equal(group_max(per_q_head, 3), per_group)
    # quantize_for_fa3 with per-query-head scales reduces to the group max and requantizes
    x8, d = quantize_for_fa3(q, ScaleStrategy(PerHead()), heads_kv=3)
    assert d.shape == (2, 3)
    assert torch.equal(d, descale_from_amax(per_group, E4M3.max))
    assert torch.equal(x8.view(torch.uint8), quantize_with_descale(q, d, PerHead(3)).view(torch.uint8))


def test_descale_from_tokens_batched_and_varlen():
    tok = random_descales(2, 29, 4, seed=18)
    red = descale_from_tokens(tok, heads_kv=2)
    assert red.shape == (2, 2)
    assert torch.equal(red, tok.amax(dim=1).reshape(2, 2, 2).amax(dim=2))
    flat = random_descales(40, 2, seed=19)
    cu = torch.tensor([0, 7, 7 + 20, 40], dtype=torch.int32)
    red = descale_from_tokens(flat, 2, cu_seqlens=cu)
    assert torch.equal(red, torch.stack([flat[:7].amax(0), flat[7:27].amax(0), flat[27:].amax(0)]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        descale_from_tokens(flat, 2)
    with pytest.raises(ValueError, match="> 0"):
        descale_from_tokens(-tok, 2)


@pytest.mark.parametrize("g", [PerToken(), PerBlock(32)], ids=repr)
def test_quantize_for_fa3_reduces_token_scales_and_costs_precision(g):
    x = randn(2, 203, 4, 64, seed=20) * (torch.linspace(-6, 6, 203).exp2()[None, :, None, None])
    x8, d = quantize_for_fa3(x, ScaleStrategy(g), heads_kv=4)
    check_descale("d", d, 2, 4)
    fine8, fine_d = quantize(x, ScaleStrategy(g))
    err_fa3 = (dequantize(x8, d, PerHead(4), dtype=torch.float64) - x).norm()
    err_fine = (dequantize(fine8, fine_d, g, dtype=torch.float64) - x).norm()
    assert err_fa3 > err_fine  # the reduction loses precision on the small tokens


@pytest.mark.parametrize("g", [PerTensor(), PerToken(), PerHead()], ids=repr)
def test_fa3_descale_shape_must_fit_x(g):
    """heads_kv must divide x's heads, and a 4-D x's batch is its own, whatever the strategy."""
    x = randn(2, 16, 4, 32, seed=int(torch.randint(1 << 30, ())))
    with pytest.raises(ValueError, match=r"heads_kv: expected a divisor of x's 4 heads .* got 3"):
        quantize_for_fa3(x, ScaleStrategy(g), 3)
    with pytest.raises(ValueError, match=r"batch: a 4-D x has its own batch, 2; got batch=3"):
        quantize_for_fa3(x, ScaleStrategy(g), 2, batch=3)
    _, d = quantize_for_fa3(x.reshape(32, 4, 32), ScaleStrategy(g), 2, batch=3)  # varlen: one row per sequence
    assert d.shape == (3, 2)


def test_per_channel_cannot_go_to_fa3():
    with pytest.raises(ValueError, match="per-channel"):
        quantize_for_fa3(randn(1, 8, 2, 16), ScaleStrategy(PerChannel()), 2)


@pytest.mark.parametrize("g", [PerTensor(), PerToken(), PerBlock(8)], ids=repr)
def test_fa3_descale_dequantized_with_its_strategy_says_to_use_per_head(g):
    """quantize_for_fa3 returns a (batch, heads_kv) descale for every strategy; dequantizing it with the
    strategy (the natural round trip) names the granularity that reads it."""
    x = randn(2, 16, 4, 32, seed=int(torch.randint(1 << 30, ())))
    x8, d = quantize_for_fa3(x, ScaleStrategy(g), heads_kv=2)
    with pytest.raises(ValueError, match=r"x_fp8 descale: shape \(2, 2\) is FA3's \(batch, heads_kv\) layout, which "
                                         rf"{type(g).__name__} does not read; dequantize it with PerHead\(2\)"):
        dequantize(x8, d, ScaleStrategy(g))
    back = dequantize(x8, d, PerHead(2), dtype=torch.float64)
    assert ((back - x).norm() / x.norm()).item() < 2.0 ** -4


def test_per_head_groups_that_straddle_kv_heads_say_what_fa3_needs():
    """PerHead(1) gives one scale per sequence, and FA3 wants one per KV head from scales within one group."""
    x = randn(2, 13, 4, 16, seed=22)
    with pytest.raises(ValueError, match=r"x: expected a PerHead granularity whose number of scales per sequence is "
                                         r"a multiple of heads_kv=2 .*got PerHead\(heads_kv=1\): 1 scale\(s\) per "
                                         r"sequence for x's 4 heads"):
        quantize_for_fa3(x, ScaleStrategy(PerHead(1)), heads_kv=2)
    with pytest.raises(ValueError, match=r"multiple of heads_kv=4 .*PerHead\(heads_kv=2\)"):
        quantize_for_fa3(x, ScaleStrategy(PerHead(2)), heads_kv=4)
    for g in (PerHead(), PerHead(2), PerHead(4)):
        assert quantize_for_fa3(x, ScaleStrategy(g), heads_kv=2)[1].shape == (2, 2)


# --------------------------------------------------------------------------- options


def test_power_of_two_descales():
    x = randn(2, 50, 4, 32, seed=21) * randn(1, 1, 4, 1, seed=22).exp() * 3
    x8, d = quantize(x, ScaleStrategy(PerHead(), power_of_two=True))
    mant, _ = torch.frexp(d)
    assert bool((mant == 0.5).all())
    amax = compute_amax(x, PerHead())
    assert bool((d.double() >= amax / E4M3.max).all()) and bool((d.double() < 2 * amax / E4M3.max).all())
    # exact power-of-two rescaling: dequantized values equal x_fp8 * 2^e exactly in float32
    assert torch.equal(dequantize(x8, d, PerHead()), (x8.float() * PerHead().expand(d, tuple(x.shape)).float()))


def test_exact_power_of_two_amax_is_not_rounded_up():
    d = descale_from_amax(torch.tensor([448.0, 448.0 * 3]), 448.0, power_of_two=True)
    assert d.tolist() == [1.0, 4.0]


def test_zero_tensor_gets_finite_positive_descale():
    for g in GRANULARITIES:
        x = torch.zeros(2, 19, 4, 32)
        x8, d = quantize(x, ScaleStrategy(g, eps=1e-8))
        assert bool(torch.isfinite(d).all()) and bool((d > 0).all())
        assert torch.equal(d, torch.full_like(d, descale_from_amax(0.0, E4M3.max, eps=1e-8).item()))
        assert not bool(dequantize(x8, d, g).any())
    # partly zero: only the zero head takes eps
    x = randn(1, 10, 2, 8, seed=23)
    x[:, :, 1] = 0
    _, d = quantize(x, ScaleStrategy(PerHead()))
    assert d[0, 0] > 1e-3 and d[0, 1] == descale_from_amax(0.0, E4M3.max).item()


def test_fp8_max_option_reproduces_vllm_dynamic_kv_scale():
    x = randn(1, 64, 2, 32, seed=24)
    x8, d = quantize(x, ScaleStrategy(fp8_max=200.0))
    # 200 is not on the e4m3 grid: the amax lands on its RNE neighbour (192, ties to even)
    assert x8.float().abs().max().item() == formats.quantize(torch.tensor(200.0), E4M3).item() == 192.0
    assert d.item() >= x.abs().max().item() / 200


def test_saturation_clamps_and_no_saturation_gives_nan():
    x = randn(1, 64, 2, 32, seed=25, scale=4.0)
    small = StaticAmax(x.abs().max().item() / 4)
    sat8, d = quantize(x, ScaleStrategy(source=small))
    assert sat8.float().abs().max().item() == E4M3.max
    over = (x.double().abs() / d.double()) > 464  # beyond 448's rounding interval
    assert bool(over.any())
    nan8, _ = quantize(x, ScaleStrategy(source=small, saturate=False))
    assert torch.equal(torch.isnan(nan8.float()), over)


def test_other_formats():
    x = randn(1, 64, 2, 32, seed=26, scale=1e3)
    for fmt in ("e5m2", "e4m3fnuz"):
        f = formats.get_format(fmt)
        x8, d = quantize(x, ScaleStrategy(fmt=fmt))
        assert x8.dtype == f.torch_dtype and x8.float().abs().max().item() == f.max


# --------------------------------------------------------------------------- static calibration


def test_calibrate_by_max_percentile_and_mse():
    samples = [randn(2, 97, 4, 32, seed=30 + i) * torch.tensor([1.0, 2.0, 8.0, 0.25])[None, None, :, None] for i in range(3)]
    allx = torch.cat([s.reshape(1, -1, 4, 32) for s in samples], dim=1)
    st = calibrate(samples, PerHead(), "max")
    assert st.amax.shape == (1, 4)
    assert torch.equal(st.amax[0], allx.double().abs().amax(dim=(0, 1, 3)))
    pc = calibrate(samples, PerTensor(), "percentile", percentile=99.0)
    assert math.isclose(pc.amax.item(), torch.quantile(allx.double().abs().flatten(), 0.99).item(), rel_tol=1e-12)
    mse = calibrate(samples, PerHead(), "mse", ratios=(0.25, 0.5, 0.7, 0.8, 0.9, 1.0))
    cands, err = calibration_mse(samples, (0.25, 0.5, 0.7, 0.8, 0.9, 1.0), PerHead())
    best = err.argmin(dim=0)
    assert torch.equal(mse.amax[0], cands[best, torch.arange(4)])
    assert bool((err.min(dim=0).values <= err[-1]).all())  # never worse than the max (ratio 1.0)
    # the calibrated static scale works on a new batch of another size
    x8, d = quantize(randn(5, 11, 4, 32, seed=40), ScaleStrategy(PerHead(), StaticAmax(st.amax)))
    assert d.shape == (1, 4) and x8.shape == (5, 11, 4, 32)


def test_mse_calibration_scores_each_candidate_as_quantize_would():
    """With fp8_max below the format's max (vLLM's amax / 200 headroom) `quantize` saturates at 448, not at
    fp8_max: the MSE scan must score that, or it picks another amax than the one that quantizes best."""
    x = randn(1, 4096, 2, 64, seed=42)
    x[0, :8] *= 20  # a few outlier tokens, so clipping them competes with resolution
    for fp8_max in (None, 200.0):
        cands, err = calibration_mse(x, (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0), PerHead(), fp8_max=fp8_max)
        for i in range(cands.shape[0]):
            st = ScaleStrategy(PerHead(), StaticAmax(cands[i][None]), fp8_max=fp8_max)
            x8, d = quantize(x, st)
            back = x8.double() * d.double()[0][None, None, :, None]  # float64, exact, as the scan measures
            want = (back - x.double()).square().mean(dim=(0, 1, 3))
            torch.testing.assert_close(err[i], want, rtol=1e-12, atol=0)


def test_saturated_fraction_counts_the_format_max_not_fp8_max():
    from fp8lab.scaling.experiments import delayed_trace

    x = torch.tensor([1.0, 150.0, 300.0, 500.0]).reshape(1, 4, 1, 1)
    strat = ScaleStrategy(source=StaticAmax(200.0), fp8_max=200.0)  # descale 1: 300 fits below 448, 500 clamps
    assert delayed_trace([x], {"s": strat})["saturated"].item() == 0.25


def test_percentile_ignores_block_padding():
    x = randn(1, 20, 1, 4, seed=41).abs()
    from fp8lab.scaling import row_percentile

    rows = PerBlock(16).rows(x)  # second block: 4 tokens + 12 NaN padding
    got = row_percentile(rows.abs(), 50.0)
    assert math.isclose(got[1].item(), torch.quantile(x[0, 16:].double().flatten(), 0.5).item(), rel_tol=1e-12)


def test_static_sources_reject_token_granularities():
    with pytest.raises(ValueError, match="token"):
        ScaleStrategy(PerToken(), StaticAmax(1.0))
    with pytest.raises(ValueError, match="cannot be static"):
        calibrate(randn(1, 8, 1, 4), PerBlock(4))
    with pytest.raises(ValueError, match="method"):
        calibrate(randn(1, 8, 1, 4), method="median")


# --------------------------------------------------------------------------- delayed scaling


@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_scaling_follows_transformer_engine(algo):
    hist_len, margin = 3, 1
    strat = ScaleStrategy(PerHead(), DelayedAmax(history_len=hist_len, algo=algo, margin=margin, initial_descale=0.5))
    amaxes = []
    for t in range(7):
        x = randn(2, 31, 2, 16, seed=50 + t) * (1.5 ** t if t != 4 else 0.1)
        x8, d = quantize(x, strat)
        if t == 0:
            expect = torch.full((1, 2), 0.5)
        else:
            window = torch.stack(amaxes[-hist_len:])
            ref = window.amax(dim=0) if algo == "max" else window[-1]
            expect = descale_from_amax(ref, E4M3.max, margin=margin)
        assert torch.equal(d, expect), t
        amaxes.append(compute_amax(x.reshape(1, -1, 2, 16), PerHead()))
        assert torch.equal(x8.view(torch.uint8), quantize_with_descale(x, d, PerHead()).view(torch.uint8))
    assert strat.source.steps == 7
    strat.source.reset()
    _, d = quantize(randn(1, 3, 2, 16), strat)
    assert torch.equal(d, torch.full((1, 2), 0.5))


def test_delayed_scaling_keeps_old_descale_for_zero_amax_and_rejects_new_shapes():
    strat = ScaleStrategy(source=DelayedAmax(history_len=1))
    _, d0 = quantize(randn(1, 8, 2, 4, seed=60), strat)
    _, d1 = quantize(torch.zeros(1, 8, 2, 4), strat)
    _, d2 = quantize(randn(1, 8, 2, 4, seed=61), strat)
    assert d1.item() != 1.0 and d2.item() == d1.item()  # zero amax keeps the previous descale (TE)
    strat_h = ScaleStrategy(PerHead(), DelayedAmax())
    quantize(randn(1, 8, 2, 4), strat_h)
    with pytest.raises(ValueError, match="reset"):
        quantize(randn(1, 8, 3, 4), strat_h)
    with pytest.raises(ValueError, match="algo"):
        DelayedAmax(algo="mean")


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_input_raises_naming_the_tensor(bad):
    x = randn(1, 16, 2, 8, seed=70)
    x[0, 3, 1, 2] = bad
    for strat in (ScaleStrategy(), ScaleStrategy(PerToken()), ScaleStrategy(source=DelayedAmax())):
        with pytest.raises(ValueError, match="k_proj"):
            quantize(x, strat, name="k_proj")
    with pytest.raises(ValueError, match=r"samples\[1\]"):
        calibrate([randn(1, 4, 2, 8), x])
    with pytest.raises(ValueError, match="q"):
        quantize_for_fa3(x, ScaleStrategy(), 2, name="q")


def test_dtypes_and_counts_are_named_before_any_arithmetic():
    """Raw FP8 bits in uint8 would be multiplied as 0..255, an FP8 x re-quantized, a count of 0 or 2.5
    would divide or reshape wrongly: each is a named error."""
    x = randn(1, 4, 4, 16)
    x8, d = quantize(x, ScaleStrategy(PerHead()))
    with pytest.raises(TypeError, match=r"x_fp8: expected an FP8 tensor .* got uint8; .*view\(torch.float8_e4m3fn\)"):
        dequantize(x8.view(torch.uint8), d, PerHead())
    assert torch.equal(dequantize(x8.view(torch.uint8).view(torch.float8_e4m3fn), d, PerHead()), dequantize(x8, d, PerHead()))
    with pytest.raises(TypeError, match=r"x: expected a float tensor .* got float8_e4m3fn \(already FP8\)"):
        quantize(x8, ScaleStrategy(PerHead()))
    with pytest.raises(TypeError, match="got int32"):
        quantize(x.int(), ScaleStrategy())
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="PerHead: heads_kv must be a positive int"):
            PerHead(bad)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="heads_kv: expected an int >= 1"):
            quantize_for_fa3(x, ScaleStrategy(PerHead()), bad)
        with pytest.raises(ValueError, match="heads_kv: expected an int >= 1"):
            group_max(torch.ones(1, 4), bad)
    with pytest.raises(ValueError, match="batch: expected an int >= 0"):
        descale_from_scalar(1.0, -1, 2)
    with pytest.raises(TypeError, match="expected a number or a one-element tensor, got str"):
        descale_from_scalar("1", 1, 2)
    with pytest.raises(ValueError, match="no tokens"):
        descale_from_tokens(torch.ones(1, 0, 2), 2)
    with pytest.raises(ValueError, match="margin must be an int in"):
        DelayedAmax(margin=2000)  # 2**2000 overflows the descale on the second call
    with pytest.raises(ValueError, match="eps: the floor on amax"):
        ScaleStrategy(eps=float("inf"))
    with pytest.raises(ValueError, match="fp8_max must be a number"):
        ScaleStrategy(fp8_max="448")


def test_bad_descales_raise():
    x8 = formats.cast_to_fp8(randn(2, 8, 4, 16))
    good = random_descales(2, 2)
    for bad, match in ((good * 0, "> 0"), (-good, "> 0"), (good * float("nan"), "finite"), (good * float("inf"), "finite")):
        with pytest.raises(ValueError, match=match):
            dequantize(x8, bad, PerHead(2))
        with pytest.raises(ValueError, match=match):
            descale_from_heads(bad, 2)
    with pytest.raises(ValueError, match="shape"):
        dequantize(x8, random_descales(2, 3), PerHead(2))
    with pytest.raises(ValueError, match="shape"):
        dequantize(x8, random_descales(3, 2), PerHead(2))
    with pytest.raises(ValueError, match="shape"):
        dequantize(x8, random_descales(2), PerTensor())
    with pytest.raises(ValueError, match="> 0"):
        descale_from_scalar(0.0, 2, 2)
    with pytest.raises(ValueError, match="> 0"):
        descale_from_scalar(-1.0, 2, 2)
    with pytest.raises(ValueError, match="multiple"):
        quantize(randn(1, 4, 6, 8), ScaleStrategy(PerHead(4)))
    with pytest.raises(ValueError, match="head_dim"):
        quantize(randn(4, 8), ScaleStrategy())
    with pytest.raises(ValueError, match="amax"):
        StaticAmax(float("nan"))
    with pytest.raises(ValueError, match="eps"):
        descale_from_amax(1.0, 448.0, eps=0.0)
    with pytest.raises(ValueError, match="too large"):
        descale_from_amax(1e300, 448.0)
    with pytest.raises(ValueError, match="fp8_max"):
        ScaleStrategy(fp8_max=500.0)
    x = randn(1, 3, 1, 4)  # a float64 descale beyond float32 would divide by 0 or inf there
    with pytest.raises(ValueError, match="> 0 in float32"):
        quantize_with_descale(x, torch.tensor(1e-50, dtype=torch.float64))
    with pytest.raises(ValueError, match="finite in float32"):
        quantize_with_descale(x, torch.tensor(1e300, dtype=torch.float64))
    d64 = torch.tensor(0.1, dtype=torch.float64)  # within range: one float32 value both ways
    x8 = quantize_with_descale(x, d64)
    assert torch.equal(dequantize(x8, d64, dtype=torch.float64), dequantize(x8, d64.float(), dtype=torch.float64))


def test_every_descale_keeps_amax_within_fp8_max():
    amax = (2.0 ** (torch.rand(10000, generator=torch.Generator().manual_seed(80), dtype=torch.float64) * 60 - 30))
    d = descale_from_amax(amax, E4M3.max)
    assert bool((amax / d.double() <= E4M3.max).all())


# --------------------------------------------------------------------------- checkpoint scales


def test_checkpoint_full_and_kv_scale():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScaleFallbackWarning)
        r = resolve_checkpoint_scales({"q_scale": 0.02, "k_scale": 0.03, "v_scale": 0.004, "prob_scale": 0.5})
    assert (r.q, r.k, r.v, r.prob) == (0.02, 0.03, 0.004, 0.5)
    assert r.sources == {"q": "q_scale", "k": "k_scale", "v": "v_scale", "prob": "prob_scale"}
    r = resolve_checkpoint_scales({"q_scale": 0.02, "kv_scale": torch.tensor(0.07), "prob_scale": 1.0})
    f32 = torch.tensor(0.07).item()  # a float32 checkpoint tensor keeps its float32 value
    assert (r.k, r.v) == (f32, f32) and r.sources["v"] == "kv_scale"


def test_checkpoint_missing_kv_defaults_to_one_with_warning():
    with pytest.warns(ScaleFallbackWarning, match="k/v"):
        r = resolve_checkpoint_scales({"q_scale": 0.1, "prob_scale": 0.5})
    assert (r.k, r.v) == (1.0, 1.0) and r.sources["k"] == "default 1.0"


def test_q_scale_fallback_and_vllm_defect():
    scales = {"k_scale": 0.0123, "v_scale": 0.005, "prob_scale": 0.5}
    with pytest.warns(ScaleFallbackWarning, match="k_scale"):
        intended = resolve_checkpoint_scales(scales)
    with pytest.warns(ScaleFallbackWarning, match="overwrites|1.0"):
        vllm = resolve_checkpoint_scales(scales, emulate="vllm")
    assert intended.q == 0.0123 and "k_scale fallback" in intended.sources["q"]
    assert vllm.q == 1.0 and "vLLM" in vllm.sources["q"]
    assert (vllm.k, vllm.v) == (intended.k, intended.v)
    # given q_scale: both modes agree
    a = resolve_checkpoint_scales({**scales, "q_scale": 0.3}, warn=False)
    b = resolve_checkpoint_scales({**scales, "q_scale": 0.3}, emulate="vllm", warn=False)
    assert a.q == b.q == 0.3
    # FA3 descales as vLLM passes them: stride 0
    ds = intended.fa3_descales(3, 2)
    assert ds["q_descale"].stride() == (0, 0) and ds["q_descale"][2, 1].item() == pytest.approx(0.0123)


@pytest.mark.parametrize("q_amax", [0.005, 2000.0])
def test_vllm_defect_costs_accuracy_when_q_range_is_far_from_448(q_amax):
    # The TRT-LLM premise: Q and K have similar ranges, so k_scale is a fair q_scale.
    q = randn(1, 256, 4, 64, seed=90)
    q = q * (q_amax / q.abs().max())
    k_scale = q_amax / E4M3.max
    errs = {}
    for mode in ("intended", "vllm"):
        r = resolve_checkpoint_scales({"k_scale": k_scale, "v_scale": 0.01}, emulate=mode, warn=False)
        d = torch.tensor(r.q, dtype=torch.float32)
        back = dequantize(quantize_with_descale(q, d), d, dtype=torch.float64)
        errs[mode] = ((back - q).norm() / q.norm()).item()
    assert errs["intended"] < 0.03
    assert errs["vllm"] > 10 * errs["intended"]


def test_checkpoint_bad_and_ambiguous_scales():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="k_scale"):
            resolve_checkpoint_scales({"k_scale": bad, "v_scale": 1.0})
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_checkpoint_scales({"k_scale": 0.1, "v_scale": 0.1, "kv_scale": 0.1})
    with pytest.raises(ValueError, match="unknown"):
        resolve_checkpoint_scales({"o_scale": 0.1})
    with pytest.raises(ValueError, match="per-tensor"):
        resolve_checkpoint_scales({"k_scale": torch.ones(2), "v_scale": 1.0})
    with pytest.raises(ValueError, match="not the other"):
        resolve_checkpoint_scales({"v_scale": 0.1})
    with pytest.raises(ValueError, match="not the other"):
        resolve_checkpoint_scales({"v_scale": 0.1}, emulate="vllm")
    r = resolve_checkpoint_scales({"k_scale": 0.1}, emulate="vllm", warn=False)  # vLLM duplicates a lone k_scale
    assert r.v == 0.1
    with pytest.raises(ValueError, match="emulate"):
        resolve_checkpoint_scales({}, emulate="trtllm")


# --------------------------------------------------------------------------- experiments behind the notebooks


def test_compare_strategies_and_delayed_trace():
    from fp8lab.scaling.experiments import compare_strategies, delayed_trace

    x = randn(1, 64, 4, 16, seed=100) * torch.tensor([2.0**-12, 1.0, 2.0**4, 2.0**8])[None, None, :, None]
    table = compare_strategies({"x": x}, {"tensor": ScaleStrategy(), "head": ScaleStrategy(PerHead())})
    assert set(table.columns) >= {"tensor", "strategy", "rmse", "rel_l2", "cosine", "sqnr", "sqnr_worst_head"}
    by = table.set_index("strategy")
    # a 2^20 spread of head ranges: the per-tensor scale flushes the smallest head, per-head does not
    assert by.loc["head", "sqnr_worst_head"] > 25 and by.loc["tensor", "sqnr_worst_head"] < 5
    # each group's largest element is stored as +-448 (exactly but for the descale's rounding): one per tensor, one per head
    ref = x.double()
    assert by.loc["tensor", "energy_exact_at_max"] == pytest.approx(float(ref.abs().max() ** 2 / ref.square().sum()))
    heads_max = ref.abs().amax(dim=(0, 1, 3))
    assert by.loc["head", "energy_exact_at_max"] == pytest.approx(float(heads_max.square().sum() / ref.square().sum()))
    assert by.loc["head", "sqnr_rest"] < by.loc["head", "sqnr"]
    series = [randn(1, 16, 2, 8, seed=101 + t) * s for t, s in enumerate((1.0, 1.0, 16.0, 16.0))]
    trace = delayed_trace(series, {"delayed": ScaleStrategy(source=DelayedAmax(history_len=2, algo="most_recent", initial_descale=0.001))})
    sat = trace["saturated"].tolist()
    # most of the tensor clamps where the range jumped; one step later only the few values above
    # the previous draw's amax do
    assert sat[0] > 0.5 and sat[2] > 0.5 and sat[1] < 0.05 and sat[3] < 0.05


def test_outlier_channels_gain_only_from_their_exact_maxima():
    """In FP8 a scale sets the range, not the precision: per-token scales on outlier channels win the whole-tensor
    SQNR because each token's largest value (an outlier) is stored exactly; every other element keeps its SQNR."""
    from fp8lab import data
    from fp8lab.scaling.experiments import compare_strategies

    x = data.sample("outlier_channels", (1, 512, 8, 128), seed=3)
    table = compare_strategies({"x": x}, {"tensor": ScaleStrategy(), "token": ScaleStrategy(PerToken()),
                                          "channel": ScaleStrategy(PerChannel())}).set_index("strategy")
    assert table.loc["token", "sqnr"] > max(table.loc["channel", "sqnr"], table.loc["tensor", "sqnr"]) + 2
    assert abs(table.loc["channel", "sqnr"] - table.loc["tensor", "sqnr"]) < 0.3  # INT8's remedy buys FP8 nothing
    assert table.loc["token", "energy_exact_at_max"] > 0.3
    assert table["sqnr_rest"].max() - table["sqnr_rest"].min() < 0.3


def test_fallback_sweep_shows_the_defect():
    from fp8lab.scaling.experiments import fallback_sweep

    q, k, v = randn(1, 48, 4, 32, seed=110), randn(1, 48, 2, 32, seed=111), randn(1, 48, 2, 32, seed=112)
    df = fallback_sweep(q, k, v, [1e-3, 10.0, 1e4], causal=True).set_index(["q_amax", "mode"])
    for a in (1e-3, 10.0, 1e4):
        assert df.loc[(a, "intended"), "rel_l2"] == pytest.approx(df.loc[(a, "ideal"), "rel_l2"], rel=1e-6)
    assert df.loc[(10.0, "vllm"), "rel_l2"] < 1.5 * df.loc[(10.0, "intended"), "rel_l2"]
    assert df.loc[(1e-3, "vllm"), "rel_l2"] > 5 * df.loc[(1e-3, "intended"), "rel_l2"]
    assert df.loc[(1e4, "vllm"), "rel_l2"] > 5 * df.loc[(1e4, "intended"), "rel_l2"]
    assert df.loc[(1e4, "vllm"), "q_saturated"] > 0.5
    # the premise broken: Q's range 64x K's, the k_scale fallback saturates Q where the ideal does not
    far = fallback_sweep(q, k, v, [10.0], causal=True, q_over_k=64.0).set_index("mode")
    assert far.loc["ideal", "q_saturated"] == 0 < 0.2 < far.loc["intended", "q_saturated"]
    assert far.loc["intended", "rel_l2"] > 5 * far.loc["ideal", "rel_l2"]
    assert (far["q_over_k"] == 64.0).all()
    with pytest.raises(ValueError, match="q_over_k"):
        fallback_sweep(q, k, v, [10.0], q_over_k=0.0)


def test_plots_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fp8lab.plots import scaling as splots
    from fp8lab.scaling.experiments import compare_strategies

    table = compare_strategies({"a": randn(1, 8, 2, 8), "b": randn(1, 8, 2, 8, seed=1)}, {"t": ScaleStrategy(), "h": ScaleStrategy(PerHead())})
    for ax in (splots.plot_strategy_heatmap(table, "sqnr"), splots.plot_gqa_mapping(8, 2, list(range(1, 9)))):
        assert ax.get_xlabel() and ax.get_ylabel()
    with pytest.raises(ValueError, match="multiple"):
        splots.plot_gqa_mapping(6, 4)
    plt.close("all")


def test_as_kernel_reads_follows_strides_where_a_contiguity_bug_would_not():
    from fp8lab.scaling import as_contiguous_reads, as_kernel_reads, descale_from_heads, descale_from_scalar

    vals = torch.rand(3, generator=torch.Generator().manual_seed(4)) + 0.1
    for d in (descale_from_scalar(0.3, 2, 3), *(descale_from_heads(vals, 2, layout=lay)
                                              for lay in ("expand", "contiguous", "transposed"))):
        assert torch.equal(as_kernel_reads(d), d) and as_kernel_reads(d).is_contiguous()
    t = descale_from_heads(torch.stack([vals, 2 * vals]), 2, layout="transposed")
    storage = torch.tensor([], dtype=t.dtype).set_(t.untyped_storage())
    assert not torch.equal(storage[:6].reshape(2, 3), t)  # what reading b * heads_kv + h would give
    assert torch.equal(as_contiguous_reads(t), storage[:6].reshape(2, 3))
    assert as_contiguous_reads(descale_from_scalar(0.3, 2, 3)) is None  # 1 float: b * 3 + h runs past it
    assert as_contiguous_reads(descale_from_heads(vals, 2, layout="expand")) is None
    c = descale_from_heads(vals, 2, layout="contiguous")
    assert torch.equal(as_contiguous_reads(c), c)
    with pytest.raises(ValueError, match=r"expected \(batch, heads_kv\)"):
        as_kernel_reads(vals)


def test_head_spread_sweep_breaks_one_per_tensor_scale_only():
    from fp8lab import data, metrics
    from fp8lab.reference import attention_exact
    from fp8lab.scaling.experiments import head_spread_sweep

    q, k, v = data.make_qkv("normal", batch=1, seqlen_q=64, heads_q=4, heads_kv=2, head_dim=32, seed=1,
                            dtype=torch.float64)
    sweep = head_spread_sweep(q, k, v, (0, 24)).set_index(["spread (binades)", "scales"])["worst head rel_l2"]
    assert sweep[0, "per tensor"] == pytest.approx(sweep[0, "per KV head"], rel=0.05)
    assert sweep[24, "per KV head"] == pytest.approx(sweep[0, "per KV head"], rel=0.05)  # scores unchanged
    assert sweep[24, "per tensor"] > 10 * sweep[24, "per KV head"]  # the small heads flush to zero
    # the head with the largest K and V has the smallest Q: its scores flush, its output does not
    table = head_spread_sweep(q, k, v, (0, 24)).set_index(["spread (binades)", "scales"])
    largest = table["largest head rel_l2"]
    assert largest[0, "per tensor"] <= table.loc[(0, "per tensor"), "worst head rel_l2"]
    assert largest[24, "per KV head"] == pytest.approx(largest[0, "per KV head"], rel=0.05)
    assert 10 * largest[24, "per KV head"] < largest[24, "per tensor"] < sweep[24, "per tensor"] == 1.0
    f = data.head_factors(2, 12.0).double()  # against that head's attention with its Q zeroed, in float64
    j = int(f.argmax())
    qs, ks, vs = q / f.repeat_interleave(2)[None, None, :, None], k * f[None, None, :, None], v * f[None, None, :, None]
    ref = attention_exact(qs, ks, vs, causal=True)[:, :, 2 * j:2 * j + 2]
    no_q = attention_exact(torch.zeros_like(qs), ks, vs, causal=True)[:, :, 2 * j:2 * j + 2]
    assert largest[24, "per tensor"] == pytest.approx(metrics.rel_l2(no_q, ref, per_head=True).max().item(), rel=0.05)


def test_checkpoint_scales_refuse_non_dicts_and_bools():
    # a str was read letter by letter ("unknown checkpoint scale(s) ['_', 'a', ...]"), None was "not iterable"
    for bad in ("k_scale", None, [0.1, 0.2]):
        with pytest.raises(TypeError, match="scales: expected a dict of checkpoint scales"):
            resolve_checkpoint_scales(bad)
    with pytest.raises(TypeError, match="k_scale: expected a number or a one-element tensor, got bool True"):
        resolve_checkpoint_scales({"k_scale": True, "v_scale": 0.2})  # was k_scale = 1.0
