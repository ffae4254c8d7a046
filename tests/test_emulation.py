"""Invariants of the FA3 FP8 emulation (attention_fa3_fp8) and its helpers."""

from __future__ import annotations

import json
import math

import pytest
import torch

from fp8lab.formats import cast_to_fp8
from fp8lab.metrics import rel_l2
from fp8lab.reference import (
    AccumulatorModel,
    FA3Steps,
    attention_exact,
    attention_fa3_fp8,
    attribute_error,
    fa3_block_n,
    mma,
    quantize_qkv,
)


def _qkv(b=2, sq=113, sk=203, hq=4, hkv=2, d=32, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, sq, hq, d, generator=gen) * scale
    k = torch.randn(b, sk, hkv, d, generator=gen) * scale
    v = torch.randn(b, sk, hkv, d, generator=gen) * scale
    return q, k, v


def _descales(b, hkv, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(b, hkv, generator=gen) * 0.02 + 0.003 for _ in range(3)]


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (40, 9)), (True, (25, -1))])
def test_every_step_exact_is_exact_attention(causal, window):
    q, k, v = _qkv(seed=1)
    qd, kd, vd = _descales(2, 2, seed=2)
    ref = attention_exact(q, k, v, causal=causal, window_size=window, return_lse=True)
    out = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, window_size=window, block_n=48,
                            steps=FA3Steps.exact(), return_lse=True)
    assert out[0].dtype == torch.float64
    torch.testing.assert_close(out[0], ref[0], rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(out[1], ref[1], rtol=1e-11, atol=1e-12)
    # float32 arithmetic alone stays within float32 rounding
    out32 = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, window_size=window, steps=FA3Steps.only("fp32"))
    assert out32.dtype == torch.float32
    assert rel_l2(out32, ref[0]) < 1e-6


def test_representable_inputs_at_scale_one_lose_nothing_in_the_casts():
    q, k, v = (cast_to_fp8(x * 4).float() for x in _qkv(seed=3))
    exact = attention_fa3_fp8(q, k, v, steps=FA3Steps.exact(), causal=True)
    cast = attention_fa3_fp8(q, k, v, steps=FA3Steps.only("q", "k", "v"), causal=True)
    torch.testing.assert_close(cast, exact, rtol=0, atol=0)
    # and FP8 tensors of the same values give the same again
    fp8 = attention_fa3_fp8(*(cast_to_fp8(x) for x in (q, k, v)), steps=FA3Steps.exact(), causal=True)
    torch.testing.assert_close(fp8, exact, rtol=0, atol=0)


def test_float_inputs_with_descales_equal_the_quantized_fp8_inputs():
    q, k, v = _qkv(seed=4, scale=3.0)
    qq = quantize_qkv(q, k, v, "head")
    assert not bool((qq.q_descale == 1).all())
    from_float = attention_fa3_fp8(q, k, v, qq.q_descale, qq.k_descale, qq.v_descale, causal=True)
    from_fp8 = attention_fa3_fp8(qq.q, qq.k, qq.v, qq.q_descale, qq.k_descale, qq.v_descale, causal=True)
    assert from_fp8.dtype == torch.bfloat16
    torch.testing.assert_close(from_float, from_fp8, rtol=0, atol=0)


def test_stride0_and_materialized_descales_are_identical():
    q, k, v = _qkv(seed=5)
    qq = quantize_qkv(q, k, v, "tensor")
    assert qq.q_descale.stride() == (0, 0)
    a = attention_fa3_fp8(qq.q, qq.k, qq.v, qq.q_descale, qq.k_descale, qq.v_descale, return_lse=True)
    b = attention_fa3_fp8(qq.q, qq.k, qq.v, *(d.contiguous() for d in (qq.q_descale, qq.k_descale, qq.v_descale)),
                          return_lse=True)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fp8_error_is_in_the_measured_range_and_lse_uses_fp32_p():
    """N(0,1): FA3 measured 0.047-0.054 rel L2 vs exact (facts file); lse comes from the fp32 row sum."""
    q, k, v = _qkv(b=1, sq=256, sk=256, hq=4, hkv=4, d=64, seed=6)
    qq = quantize_qkv(q, k, v)
    out, lse = attention_fa3_fp8(qq.q, qq.k, qq.v, *qq.descales.values(), return_lse=True)
    exact = attention_exact(q, k, v)
    assert 0.03 < rel_l2(out, exact) < 0.07
    _, lse_deq = attention_exact(qq.q, qq.k, qq.v, **qq.descales, return_lse=True)
    assert float((lse.double() - lse_deq).abs().max()) < 1e-4
    _, lse_p8 = attention_fa3_fp8(qq.q, qq.k, qq.v, *qq.descales.values(), rowsum_of_fp8_p=True, return_lse=True)
    assert float((lse_p8.double() - lse_deq).abs().max()) > 1e-3


def test_attributed_errors_add_in_quadrature_to_the_total():
    q, k, v = _qkv(b=1, sq=128, sk=199, hq=4, hkv=2, d=64, seed=7)
    err = attribute_error(q, k, v, causal=True)
    assert set(err) >= {"q", "k", "v", "p", "accumulator", "fp32", "output", "total", "quadrature_sum"}
    for step in ("q", "k", "v", "p"):
        assert 0 < err[step] < err["total"]
    assert err["fp32"] < 1e-5
    assert abs(err["quadrature_sum"] / err["total"] - 1) < 0.15, err


def test_max_offset_changes_the_error_not_the_exact_result():
    """With P in [0, 1] small probabilities fall into e4m3's subnormals; the offset of 8 keeps them normal."""
    q, k, v = _qkv(b=1, sq=64, sk=1024, hq=4, hkv=4, d=64, seed=8)
    gen = torch.Generator().manual_seed(80)
    q, k = (x + torch.randn(x.shape, generator=gen) * 10 * (torch.rand(x.shape, generator=gen) < 0.001) for x in (q, k))
    exact = attention_exact(q, k, v)
    ex0 = attention_fa3_fp8(q, k, v, steps=FA3Steps.exact(), max_offset=0)
    torch.testing.assert_close(ex0, exact, rtol=1e-11, atol=1e-12)
    e8 = rel_l2(attention_fa3_fp8(q, k, v, steps=FA3Steps.only("p"), max_offset=8), exact)
    e0 = rel_l2(attention_fa3_fp8(q, k, v, steps=FA3Steps.only("p"), max_offset=0), exact)
    assert e0 > 1.5 * e8, (e0, e8)


def test_block_order_and_size_matter_only_with_fp8_p():
    q, k, v = _qkv(seed=9)
    qq = quantize_qkv(q, k, v)
    d = qq.descales.values()
    no_p = FA3Steps().without("p", "output")
    a = attention_fa3_fp8(qq.q, qq.k, qq.v, *d, steps=no_p, block_n=64)
    b = attention_fa3_fp8(qq.q, qq.k, qq.v, *d, steps=no_p, block_n=96, reverse_blocks=False)
    assert rel_l2(a, b) < 1e-6
    c = attention_fa3_fp8(qq.q, qq.k, qq.v, *d, block_n=64)
    e = attention_fa3_fp8(qq.q, qq.k, qq.v, *d, block_n=64, reverse_blocks=False)
    assert rel_l2(c, e) > 1e-3


def test_varlen_equals_batched_per_sequence():
    gen = torch.Generator().manual_seed(10)
    lens_q, lens_k, hq, hkv, d = [17, 64, 1], [33, 64, 90], 4, 1, 32
    qs = [cast_to_fp8(torch.randn(n, hq, d, generator=gen)) for n in lens_q]
    ks = [cast_to_fp8(torch.randn(n, hkv, d, generator=gen)) for n in lens_k]
    vs = [cast_to_fp8(torch.randn(n, hkv, d, generator=gen)) for n in lens_k]
    qd, kd, vd = _descales(3, hkv, seed=11)
    cu_q = torch.tensor([0, 17, 81, 82], dtype=torch.int32)
    cu_k = torch.tensor([0, 33, 97, 187], dtype=torch.int32)
    out, lse = attention_fa3_fp8(torch.cat(qs), torch.cat(ks), torch.cat(vs), qd, kd, vd, causal=True,
                                 cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    for i in range(3):
        o, l = attention_fa3_fp8(qs[i][None], ks[i][None], vs[i][None], qd[i:i + 1], kd[i:i + 1], vd[i:i + 1],
                                 causal=True, return_lse=True)
        sl = slice(int(cu_q[i]), int(cu_q[i + 1]))
        torch.testing.assert_close(out[sl], o[0], rtol=0, atol=0)
        torch.testing.assert_close(lse[:, sl], l[0], rtol=0, atol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_split_kv_combines_to_exact_attention_and_follows_fa3_partition(causal):
    """Split-KV (FA3's decode path): each split's out and lse, combined, is attention again. With every step
    exact that holds to float64 rounding for any split count, empty splits included (7 blocks in 9 splits)."""
    q, k, v = _qkv(b=2, sq=3, sk=203, seed=40)
    qd, kd, vd = _descales(2, 2, seed=41)
    ref, ref_lse = attention_exact(q, k, v, causal=causal, return_lse=True)
    for n in (2, 3, 9):
        out, lse = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=causal, block_n=32, steps=FA3Steps.exact(),
                                     num_splits=n, return_lse=True)
        torch.testing.assert_close(out, ref, rtol=1e-11, atol=1e-12)
        torch.testing.assert_close(lse, ref_lse, rtol=1e-11, atol=1e-12)
    # with FP8 P the partition shows: each split rescales from its own row max
    q8, k8, v8 = (cast_to_fp8(x) for x in (q, k, v))
    one = attention_fa3_fp8(q8, k8, v8, qd, kd, vd, causal=causal, block_n=32, steps=FA3Steps().without("output"))
    two = attention_fa3_fp8(q8, k8, v8, qd, kd, vd, causal=causal, block_n=32, steps=FA3Steps().without("output"),
                            num_splits=2)
    assert 0 < rel_l2(two, one) < 0.05
    # split 0 takes blocks 0-3 of 7, split 1 blocks 4-6: the same as running them as two sequences' parts
    o_a, l_a = attention_fa3_fp8(q8, k8[:, :128], v8[:, :128], qd, kd, vd, block_n=32, return_lse=True,
                                 steps=FA3Steps().without("output"))
    o_b, l_b = attention_fa3_fp8(q8, k8[:, 128:], v8[:, 128:], qd, kd, vd, block_n=32, return_lse=True,
                                 steps=FA3Steps().without("output"))
    if not causal:
        lse_all = torch.logaddexp(l_a, l_b)
        want = torch.exp(l_a - lse_all).transpose(1, 2)[..., None] * o_a.double() + \
            torch.exp(l_b - lse_all).transpose(1, 2)[..., None] * o_b.double()
        torch.testing.assert_close(two.double(), want, rtol=1e-5, atol=1e-6)


def test_split_kv_varlen_takes_one_count_per_sequence():
    gen = torch.Generator().manual_seed(42)
    lens_k, hq, hkv, d = [33, 300, 90], 4, 2, 32
    q = cast_to_fp8(torch.randn(3, hq, d, generator=gen))
    k, v = (cast_to_fp8(torch.randn(sum(lens_k), hkv, d, generator=gen)) for _ in range(2))
    qd, kd, vd = _descales(3, hkv, seed=43)
    cu_q = torch.arange(4, dtype=torch.int32)
    cu_k = torch.tensor([0, 33, 333, 423], dtype=torch.int32)
    args = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, block_n=64, return_lse=True)
    mixed, mixed_lse = attention_fa3_fp8(q, k, v, qd, kd, vd, num_splits=[1, 3, 2], **args)
    for i, n in enumerate((1, 3, 2)):
        o, l = attention_fa3_fp8(q, k, v, qd, kd, vd, num_splits=n, **args)
        assert torch.equal(mixed[i], o[i]) and torch.equal(mixed_lse[:, i], l[:, i])


def test_a_row_no_split_sees_keeps_minus_inf_and_zero():
    """FA3's combine (hopper) keeps lse = log(0) + -inf = -inf for a row with no visible key, as without splits."""
    q, k, v = (cast_to_fp8(x) for x in _qkv(b=1, sq=40, sk=16, seed=12))
    out, lse = attention_fa3_fp8(q, k, v, causal=True, num_splits=2, block_n=8, return_lse=True)
    assert bool((out[:, :24] == 0).all()) and bool(torch.isneginf(lse[:, :, :24]).all())
    assert bool(torch.isfinite(lse[:, :, 24:]).all())


def test_decode_splits_say_what_they_expected():
    from fp8lab.reference import fa3_decode_splits

    for kwargs, match in ((dict(block_n=0), "block_n"), (dict(heads_kv=0), "heads_kv"), (dict(num_sms=0), "num_sms"),
                          (dict(num_splits=-5), "num_splits"), (dict(num_splits=True), "num_splits"),
                          (dict(group=0), "group"), (dict(seqlens_k=[5, -1]), "seqlens_k")):
        args = dict(seqlens_k=[100, 300], heads_kv=8, block_n=96) | kwargs
        with pytest.raises(ValueError, match=match):
            fa3_decode_splits(**args)
    assert fa3_decode_splits([], 8, 96) == []
    # FA3's float32 arithmetic: 20 blocks at 2 kv heads sit on the 0.85 threshold, where float64 says 17
    assert fa3_decode_splits([1920], 2, 96) == [18]


def test_fully_masked_rows_give_zero_and_minus_inf():
    q, k, v = (cast_to_fp8(x) for x in _qkv(b=1, sq=40, sk=16, seed=12))
    out, lse = attention_fa3_fp8(q, k, v, causal=True, return_lse=True)
    assert bool((out[:, :24] == 0).all()) and bool(torch.isneginf(lse[:, :, :24]).all())
    assert bool(torch.isfinite(out).all())


def test_mma_model_bounds_and_limits():
    gen = torch.Generator().manual_seed(13)
    a = cast_to_fp8(torch.rand(8, 256, generator=gen) * 200).double()
    b = cast_to_fp8(torch.randn(256, 16, generator=gen)).double()
    exact = a @ b
    # 52 bits kept, rounded: float64 arithmetic
    torch.testing.assert_close(mma(a, b, None, AccumulatorModel(52, rounding="nearest")), exact, rtol=1e-13, atol=1e-9)
    m = AccumulatorModel(10)
    approx = mma(a, b, None, m)
    bound = (256 // 32) * 2.0 ** -10 * ((a.abs() @ b.abs()))
    assert bool(((approx - exact).abs() <= bound).all())
    assert float((approx - exact).abs().max()) > 0
    # truncation moves every partial sum toward zero
    pos = mma(a, b.abs(), None, m)
    assert bool((pos <= a @ b.abs()).all())


def test_two_level_accumulation_reduces_long_context_error():
    q, k, v = _qkv(b=1, sq=16, sk=4096, hq=2, hkv=2, d=32, seed=14)
    v = v + 1.0
    qq = quantize_qkv(q, k, v)
    ref = attention_fa3_fp8(qq.q, qq.k, qq.v, *qq.descales.values())
    args = (qq.q, qq.k, qq.v, *qq.descales.values())
    one = rel_l2(attention_fa3_fp8(*args, accumulator=AccumulatorModel(10, apply_to_qk=False)), ref)
    two = rel_l2(attention_fa3_fp8(*args, accumulator=AccumulatorModel(10, promote_every=128, apply_to_qk=False)), ref)
    assert two < 0.5 * one, (one, two)


def test_fa3_block_n_follows_tile_size_h():
    assert [fa3_block_n(d) for d in (64, 96, 128, 192, 256)] == [160, 128, 224, 160, 128]
    assert fa3_block_n(256, local=True) == 64
    assert fa3_block_n(128, causal=True, fp8=False) == 128 and fa3_block_n(128, fp8=False) == 176


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(block_n=0), ValueError, "block_n"),
        (dict(max_offset=-1.0), ValueError, "max_offset"),
        (dict(max_offset=20), ValueError, r"max_offset: expected a number in \[0, 8\]"),  # P would pass 448
        (dict(return_lse="no"), TypeError, "return_lse: expected a bool"),
        (dict(reverse_blocks=1), TypeError, "reverse_blocks: expected a bool"),
        (dict(rowsum_of_fp8_p="yes"), TypeError, "rowsum_of_fp8_p: expected a bool"),
        (dict(softmax_scale=0.0), ValueError, "softmax_scale: expected a number > 0"),
        (dict(steps="exact"), TypeError, "FA3Steps"),
        (dict(accumulator=13), TypeError, "AccumulatorModel"),
        (dict(q_descale=torch.ones(3, 2)), ValueError, r"q_descale: expected shape \(batch, heads_kv\)"),
        (dict(k_descale=torch.ones(2, 2, dtype=torch.float64)), TypeError, "float32"),
        (dict(num_splits=0), ValueError, r"num_splits: expected an int >= 1, or one per sequence \(2\)"),
        (dict(num_splits=[1, 2, 3]), ValueError, "num_splits"),
        (dict(num_splits=[1, 2]), ValueError, "one count per sequence is for varlen"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    q, k, v = (cast_to_fp8(x) for x in _qkv(sq=8, sk=8, seed=15))
    with pytest.raises(exc, match=match):
        attention_fa3_fp8(q, k, v, **kwargs)


def test_a_folded_scale_that_leaves_float32_is_refused():
    """FA3 folds softmax_scale * log2(e) * q_descale * k_descale into one float32: where it underflows to 0 or
    overflows to inf every output would be NaN, so the emulation refuses it, as the kernels do."""
    q, k, v = (cast_to_fp8(x) for x in _qkv(sq=9, sk=17, seed=17))
    qd, kd, vd = _descales(2, 2, seed=18)
    for name, scale, value in (("q_descale", 1e-20, 1e-30), ("k_descale", 1e20, 1e30)):
        ds = {"q_descale": qd, "k_descale": kd, "v_descale": vd}
        ds[name] = ds[name].clone()
        ds[name][1, 1] = value
        with pytest.raises(ValueError, match=r"q_descale \* k_descale: expected finite and > 0 in float32.*"
                                             r"at \(batch, kv head\) \(1, 1\)"):
            attention_fa3_fp8(q, k, v, softmax_scale=scale, **ds)
    with pytest.raises(ValueError, match="got inf from softmax_scale 3e"):  # float32 holds it, not times log2(e)
        attention_fa3_fp8(q, k, v, softmax_scale=3e38)


def test_an_empty_batch_gives_empty_outputs():
    q, k, v = (cast_to_fp8(x)[:0] for x in _qkv(sq=8, sk=8, seed=16))
    assert attention_fa3_fp8(q, k, v).shape == q.shape
    assert attention_exact(q, k, v).shape == q.shape


def test_bad_step_names_and_models():
    with pytest.raises(ValueError, match="unknown step"):
        FA3Steps.only("softmax")
    with pytest.raises(ValueError, match="mantissa_bits"):
        AccumulatorModel(0)
    with pytest.raises(ValueError, match="promote_every"):
        AccumulatorModel(13, promote_every=0)


@pytest.mark.gpu
def test_emulation_on_gpu_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q, k, v = _qkv(seed=16)
    qq = quantize_qkv(q, k, v)
    cpu = attention_fa3_fp8(qq.q, qq.k, qq.v, *qq.descales.values(), causal=True).float()
    gpu = attention_fa3_fp8(qq.q.cuda(), qq.k.cuda(), qq.v.cuda(), *(d.cuda() for d in qq.descales.values()),
                            causal=True).float().cpu()
    assert rel_l2(gpu, cpu) < 1e-3 and math.isfinite(rel_l2(gpu, cpu))


def test_mma_product_alignment_is_chunked_without_changing_the_answer(monkeypatch):
    import fp8lab.reference.fa3 as fa3

    gen = torch.Generator().manual_seed(17)
    a = cast_to_fp8(torch.randn(3, 50, 64, generator=gen) * 30).double()
    b = cast_to_fp8(torch.randn(3, 64, 24, generator=gen)).double()
    acc = torch.randn(3, 50, 24, generator=gen, dtype=torch.float64) * 1000
    whole = mma(a, b, acc, AccumulatorModel(11, rounding="floor"))
    monkeypatch.setattr(fa3, "_PRODUCT_ELEMENTS", 3 * 24 * 32 * 7)
    torch.testing.assert_close(mma(a, b, acc, AccumulatorModel(11, rounding="floor")), whole, rtol=0, atol=0)
    # every product is cut below 2^-11 of the largest magnitude of its step, so the loss is bounded
    exact = acc + a @ b
    bound = 2 * 33 * 2.0 ** -11 * torch.maximum(acc.abs() + (a.abs() @ b.abs()), torch.ones(()))
    assert bool(((whole - exact).abs() <= bound).all())


def test_quantize_qkv_varlen_gives_one_descale_per_sequence():
    gen = torch.Generator().manual_seed(18)
    lens = [5, 40, 17]
    scales = torch.tensor([1.0, 10.0, 0.1]).repeat_interleave(torch.tensor(lens))
    q = torch.randn(sum(lens), 4, 16, generator=gen) * scales[:, None, None]
    k = torch.randn(sum(lens), 2, 16, generator=gen) * scales[:, None, None]
    cu = torch.tensor([0, 5, 45, 62], dtype=torch.int32)
    qq = quantize_qkv(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=cu)
    assert qq.q_descale.shape == (3, 2)
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        amax = q[s:e].reshape(e - s, 2, -1).abs().amax(dim=(0, 2))
        torch.testing.assert_close(qq.q_descale[i], amax / 448, rtol=1e-6, atol=0)
        back = qq.q[s:e].float() * qq.q_descale[i].repeat_interleave(2)[None, :, None]
        assert rel_l2(back, q[s:e]) < 0.05
    with pytest.raises(ValueError, match="granularity"):
        quantize_qkv(q, k, k, "channel", cu_seqlens_q=cu, cu_seqlens_k=cu)


def test_fa3_block_n_vllm_flavor():
    assert fa3_block_n(64, flavor="vllm") == 128 and fa3_block_n(128, flavor="vllm") == 192
    assert fa3_block_n(256, flavor="vllm") == fa3_block_n(256) == 128
    with pytest.raises(ValueError, match="flavor"):
        fa3_block_n(128, flavor="sglang")


def test_recorded_fidelity_parses_and_meets_the_target_with_the_accumulator_model():
    """The H200 record (scripts/gpu_fidelity.py): every case within 10 % of FA3's own error."""
    from pathlib import Path

    from fp8lab.reference.experiments import fidelity_table, load_fidelity, long_context_record

    path = Path(__file__).resolve().parent.parent / "results" / "h200" / "fidelity.json"
    if not path.exists():
        pytest.skip("no recorded fidelity measurement")
    rec = load_fidelity(path)
    assert rec["context"]["gpu"] and rec["context"]["torch"]
    plain = fidelity_table(rec, "plain")
    assert set(plain["provider"]) == {"fa3-fwd", "vllm-fa3"} and len(plain) == 28
    assert set(plain["head_dim"]) == {64, 128, 256} and set(plain["causal"]) == {True, False}
    hopper = fidelity_table(rec["accumulator_study"], "hopper")
    assert len(hopper) == 8 and float(hopper["ratio"].max()) < 0.1
    from fp8lab.reference.experiments import accumulator_study

    assert accumulator_study({"cases": []}, rec) is rec["hopper_all"] and accumulator_study(None) == {}
    every = fidelity_table(rec["hopper_all"], "hopper")  # every case, both providers
    keys = ["provider", "dist", "head_dim", "causal", "heads"]  # notebook 05 (f) pairs the two models on these
    assert not every.duplicated(keys).any()
    assert len(every) == 28 and set(every["head_dim"]) == {64, 128, 256} and set(every["dist"]) == {"normal", "outliers"}
    assert float(every["ratio"].max()) < 0.1
    lr = long_context_record(rec)
    fa3, emu = lr.loc[("v_offset", "fa3-fwd")], lr.loc[("v_offset", "emulation acc_m13_pv")]
    assert float(((fa3 - emu).abs() / fa3).max()) < 0.01


def test_recorded_decode_fidelity_agrees_with_the_decode_model():
    """vLLM's library on paged FP8 decode (H200): the key block that matched it best is `fa3_block_n(decode=True)`,
    and each sequence's split count, where the sweep reached it, is `fa3_decode_splits`'s (the validation run's
    record: tests/test_record_headlines.py)."""
    from pathlib import Path

    from fp8lab.reference import fa3_decode_splits

    root = Path(__file__).resolve().parents[1] / "results" / "h200"
    sweep = json.loads((root / "decode_fidelity.json").read_text())
    hk = sweep["heads_kv"]
    for case in sweep["cases"]:
        bn = fa3_block_n(case["head_dim"], flavor="vllm", decode=True)
        assert case["best_block_n"] == bn, case["case"]
        for ns, rec in case["splits"].items():
            want = fa3_decode_splits(case["lens"], hk, bn, num_splits=int(ns))
            reached = [w <= 12 for w in want]  # the sweep tried 1..12 splits
            assert [k for k, r in zip(rec["best_k_per_seq"], reached) if r] == [w for w, r in zip(want, reached) if r]


def test_mma_with_tiny_float64_values_stays_finite():
    a = torch.tensor([[1e-300, 2e-310, 0.0]], dtype=torch.float64)
    b = torch.tensor([[1.0], [3.0], [5.0]], dtype=torch.float64)
    for alignment in ("product", "sum"):
        out = mma(a, b, None, AccumulatorModel(13, alignment=alignment))
        assert bool(torch.isfinite(out).all())
        torch.testing.assert_close(out, a @ b, rtol=1e-3, atol=0)


def test_measure_fidelity_runs_the_script_and_loads_its_record(tmp_path):
    """The dry run (CPU, the emulation standing in for FA3) goes through the notebook's live path."""
    from fp8lab.reference.experiments import measure_fidelity

    rec = measure_fidelity(tmp_path / "f.json", budget_s=2, dry_run=True)
    assert (tmp_path / "f.json").is_file() and rec["context"]["torch"]
    measured = [c for c in rec["cases"] if c.get("providers")]
    assert measured and set(measured[0]["providers"]) == {"emulation-as-provider"}


def _fake_script(tmp_path, body: str):
    script = tmp_path / "fake_fidelity.py"
    script.write_text("import json, sys\nout = sys.argv[sys.argv.index('--out') + 1]\n" + body)
    return script


@pytest.mark.parametrize("body, match", [
    ("print('kernel blew up'); sys.exit(3)", "exited with 3 and wrote no record:\nkernel blew up"),
    ("json.dump({'cases': [{'providers': {}}], 'notes': ['fa3-fwd unavailable: ImportError']}, open(out, 'w'))",
     "no production FA3 kernel was measured: fa3-fwd unavailable: ImportError"),
])
def test_measure_fidelity_says_why_it_has_no_measurement(tmp_path, monkeypatch, body, match):
    from fp8lab.reference import experiments

    monkeypatch.setattr(experiments, "FIDELITY_SCRIPT", _fake_script(tmp_path, body))
    with pytest.raises(RuntimeError, match=match):
        experiments.measure_fidelity(tmp_path / "f.json")
    monkeypatch.setattr(experiments, "FIDELITY_SCRIPT", tmp_path / "missing.py")
    with pytest.raises(FileNotFoundError, match="missing.py, which comes with a clone"):
        experiments.measure_fidelity(tmp_path / "f.json")
    with pytest.raises(ValueError, match="budget_s: expected seconds > 0, got 0"):
        experiments.measure_fidelity(tmp_path / "f.json", budget_s=0)
