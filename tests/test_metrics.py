"""fp8lab.metrics against hand-computed values and their per-head breakdowns."""

from __future__ import annotations

import math

import pytest
import torch

from fp8lab.formats import cast_to_fp8
from fp8lab.metrics import (METRICS, cosine, error_table, max_abs, rel_l1, rel_l2, resolve_metric, rmse, sqnr,
                            ulps_apart)


def test_values_on_a_small_example():
    ref = torch.tensor([3.0, -4.0, 0.0, 12.0])
    x = torch.tensor([3.0, -2.0, 1.0, 12.0])
    # diff = [0, 2, 1, 0]
    assert rmse(x, ref) == pytest.approx(math.sqrt(5 / 4))
    assert rel_l2(x, ref) == pytest.approx(math.sqrt(5) / 13)
    assert max_abs(x, ref) == 2.0
    assert rel_l1(x, ref) == pytest.approx(3 / 19)
    assert cosine(x, ref) == pytest.approx((9 + 8 + 144) / (math.sqrt(158) * 13))
    assert sqnr(x, ref) == pytest.approx(10 * math.log10(169 / 5))


def test_perfect_and_degenerate_cases():
    ref = torch.randn(5, 7, 3, 4, dtype=torch.float64)
    assert rmse(ref, ref) == 0 and rel_l2(ref, ref) == 0 and max_abs(ref, ref) == 0
    assert cosine(ref, ref) == pytest.approx(1.0) and sqnr(ref, ref) == math.inf
    assert cosine(-ref, ref) == pytest.approx(-1.0)


def test_an_all_zero_reference_scores_a_match_perfect_and_anything_else_worst():
    """0 / 0 is not NaN here: against an all-zero ref (a masked row, a zero head) an all-zero x is perfect and
    any other x the worst, head by head."""
    gen = torch.Generator().manual_seed(19)
    x = torch.randn(3, 11, 2, 8, generator=gen, dtype=torch.float64)
    zero = torch.zeros_like(x)
    assert (rel_l2(zero, zero), rel_l1(zero, zero), cosine(zero, zero), sqnr(zero, zero)) == (0.0, 0.0, 1.0, math.inf)
    assert (rel_l2(x, zero), rel_l1(x, zero), cosine(x, zero), sqnr(x, zero)) == (math.inf, math.inf, 0.0, -math.inf)
    assert cosine(zero, x) == 0.0 and rel_l2(zero, x) == 1.0 and sqnr(zero, x) == 0.0
    ref = x.clone()
    ref[:, :, 1] = 0  # head 1 all zero in ref; x matches it there
    got = x.clone()
    got[:, :, 1] = 0
    for fn, perfect in ((rel_l2, 0.0), (rel_l1, 0.0), (cosine, 1.0), (sqnr, math.inf)):
        per = fn(got, ref, per_head=True)
        assert float(per[1]) == perfect and float(per[0]) == pytest.approx(perfect), fn.__name__
    nan = x.clone()
    nan[0, 0, 0, 0] = math.nan  # NaN still shows
    assert all(math.isnan(fn(nan, zero)) for fn in (rel_l2, rel_l1, cosine, sqnr))


@pytest.mark.parametrize("name", list(METRICS))
def test_per_head_matches_each_head_alone(name):
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(2, 37, 5, 16, generator=gen, dtype=torch.float64)
    x = ref + torch.randn(ref.shape, generator=gen, dtype=torch.float64) * torch.linspace(0.01, 0.5, 5)[:, None]
    fn = METRICS[name]
    per = fn(x, ref, per_head=True)
    assert per.shape == (5,) and per.dtype == torch.float64
    for h in range(5):
        assert float(per[h]) == pytest.approx(fn(x[:, :, h], ref[:, :, h]), rel=1e-12)
    # varlen layout (total, heads, dim): the heads axis is -2 there too
    per_v = fn(x.reshape(-1, 5, 16), ref.reshape(-1, 5, 16), per_head=True)
    torch.testing.assert_close(per_v, per, rtol=1e-12, atol=0)


def test_low_precision_inputs_are_upcast():
    ref = torch.randn(64, 4, 8, dtype=torch.float64)
    x = ref.to(torch.bfloat16)
    assert rel_l2(x, ref) == pytest.approx(rel_l2(x.double(), ref))
    assert 0 < rel_l2(x, ref) < 2 ** -8


def test_error_table_and_bad_input():
    ref = torch.randn(10, 2, 4)
    table = error_table(ref * 1.01, ref)
    assert set(table) == set(METRICS) and table["rel_l2"] == pytest.approx(0.01, rel=1e-5)
    with pytest.raises(ValueError, match="same shape"):
        rmse(ref[:5], ref)
    with pytest.raises(TypeError, match="dequantize FP8"):
        rmse(cast_to_fp8(ref), ref)
    with pytest.raises(ValueError, match="empty"):
        rmse(ref[:0], ref[:0])
    with pytest.raises(ValueError, match="unknown metric"):
        error_table(ref, ref, ("psnr",))
    with pytest.raises(ValueError, match="head_axis"):
        rmse(ref, ref, per_head=True, head_axis=5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ulps_apart_counts_representable_values(dtype):
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(1000, generator=gen) * 10).to(dtype)
    up = torch.nextafter(x, torch.full_like(x, float("inf")))
    down = torch.nextafter(x, torch.full_like(x, float("-inf")))
    assert (ulps_apart(x, x) == 0).all() and (ulps_apart(up, x) == 1).all() and (ulps_apart(down, up) == 2).all()
    assert ulps_apart(x, -x)[x != 0].min() >= 2  # across zero, both halves count
    zeros = torch.tensor([0.0, -0.0], dtype=dtype)
    assert ulps_apart(zeros, zeros.flip(0)).tolist() == [0, 0]
    tiny = torch.tensor([torch.finfo(dtype).smallest_normal], dtype=dtype)
    sub = torch.nextafter(torch.zeros(1, dtype=dtype), torch.ones(1, dtype=dtype))  # the smallest subnormal
    assert ulps_apart(sub, -sub).item() == 2 and ulps_apart(tiny, sub).item() > 1
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        ulps_apart(x.float(), x.float())
    with pytest.raises(ValueError, match="one shape"):
        ulps_apart(x, x[:5])


def test_ulps_apart_names_a_non_tensor() -> None:
    x = torch.randn(4).bfloat16()
    assert int(ulps_apart(x, x).max()) == 0
    with pytest.raises(TypeError, match="ref: expected a bfloat16 or float16 torch.Tensor, got list"):
        ulps_apart(x, [1.0] * 4)


def test_metric_names_are_checked_as_names() -> None:
    ref = torch.randn(8, 2, 4)
    x = ref + 0.01 * torch.randn(8, 2, 4)
    assert error_table(x, ref, ("rmse",)) == {"rmse": rmse(x, ref)}
    with pytest.raises(TypeError, match=r"metrics: expected a tuple of metric names .* pass \('rmse',\)"):
        error_table(x, ref, "rmse")  # asked for metrics 'r', 'm', 's', 'e'
    with pytest.raises(ValueError, match=r"unknown metric \['rmse'\]"):
        resolve_metric(["rmse"])  # was "unhashable type: 'list'"
