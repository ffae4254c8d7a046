"""attention_exact against an independent float64 computation (explicit per-head loops, torch.softmax)."""

from __future__ import annotations

import math

import pytest
import torch

from fp8lab.formats import cast_to_fp8
from fp8lab.reference import attention_exact


def _naive(q, k, v, *, scale, causal=False, window=(-1, -1)):
    """Per-sequence, per-head loops; q (sq, hq, d), k/v (sk, hkv, d) float64 -> out (sq, hq, dv), lse (hq, sq)."""
    sq, hq, _ = q.shape
    sk, hkv, dv = v.shape
    left, right = window
    if causal:
        right = 0
    out = torch.zeros(sq, hq, dv, dtype=torch.float64)
    lse = torch.full((hq, sq), -math.inf, dtype=torch.float64)
    for h in range(hq):
        kh = h // (hq // hkv)
        for i in range(sq):
            keys = [j for j in range(sk)
                    if (right < 0 or j <= i + sk - sq + right) and (left < 0 or j >= i + sk - sq - left)]
            if not keys:
                continue
            s = (k[keys, kh] @ q[i, h]) * scale
            out[i, h] = torch.softmax(s, dim=0) @ v[keys, kh]
            lse[h, i] = torch.logsumexp(s, dim=0)
    return out, lse


def _rand(*shape, gen):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize(
    "sq,sk,hq,hkv,causal,window",
    [
        (37, 37, 4, 4, False, (-1, -1)),
        (29, 53, 6, 2, True, (-1, -1)),  # GQA, bottom-right causal with sq < sk
        (53, 29, 3, 1, True, (-1, -1)),  # MQA, sq > sk: the first rows see nothing
        (41, 41, 4, 2, False, (7, 3)),  # sliding window
        (33, 47, 2, 1, True, (5, -1)),  # causal + left window
    ],
)
def test_exact_matches_naive_loops(sq, sk, hq, hkv, causal, window):
    gen = torch.Generator().manual_seed(sq * 1000 + sk)
    b, d = 2, 16
    q, k, v = _rand(b, sq, hq, d, gen=gen), _rand(b, sk, hkv, d, gen=gen), _rand(b, sk, hkv, d, gen=gen)
    scale = 0.3
    out, lse = attention_exact(q, k, v, causal=causal, window_size=window, softmax_scale=scale, return_lse=True)
    assert out.dtype == torch.float64 and out.shape == (b, sq, hq, d) and lse.shape == (b, hq, sq)
    for i in range(b):
        ref_out, ref_lse = _naive(q[i], k[i], v[i], scale=scale, causal=causal, window=window)
        torch.testing.assert_close(out[i], ref_out, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse[i], ref_lse, rtol=1e-12, atol=1e-12)
    if sq > sk and causal:
        assert bool((out[:, : sq - sk] == 0).all()) and bool(torch.isneginf(lse[:, :, : sq - sk]).all())


def test_varlen_equals_per_sequence_batched():
    gen = torch.Generator().manual_seed(5)
    lens_q, lens_k = [13, 1, 30], [21, 7, 30]
    hq, hkv, d = 4, 2, 8
    qs = [_rand(n, hq, d, gen=gen) for n in lens_q]
    ks = [_rand(n, hkv, d, gen=gen) for n in lens_k]
    vs = [_rand(n, hkv, d, gen=gen) for n in lens_k]
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    out, lse = attention_exact(torch.cat(qs), torch.cat(ks), torch.cat(vs), causal=True,
                               cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    assert out.shape == (sum(lens_q), hq, d) and lse.shape == (hq, sum(lens_q))
    for i in range(3):
        ref_out, ref_lse = _naive(qs[i], ks[i], vs[i], scale=d ** -0.5, causal=True)
        sl = slice(int(cu_q[i]), int(cu_q[i + 1]))
        torch.testing.assert_close(out[sl], ref_out, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse[:, sl], ref_lse, rtol=1e-12, atol=1e-12)


def test_fp8_inputs_are_dequantized_with_kv_head_descales():
    gen = torch.Generator().manual_seed(11)
    b, s, hq, hkv, d = 2, 19, 4, 2, 16
    q8, k8, v8 = (cast_to_fp8(torch.randn(b, s, h, d, generator=gen) * 3) for h in (hq, hkv, hkv))
    qd, kd, vd = (torch.rand(b, hkv, generator=gen) * 0.5 + 0.05 for _ in range(3))
    out = attention_exact(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)
    g = hq // hkv
    deq = [x.double() * dsc.double().repeat_interleave(n, 1)[:, None, :, None]
           for x, dsc, n in ((q8, qd, g), (k8, kd, 1), (v8, vd, 1))]
    torch.testing.assert_close(out, attention_exact(*deq), rtol=1e-12, atol=1e-12)
    # a stride-0 (expand()ed) descale equals the same values materialized
    qd0 = qd[:, :1].expand(b, hkv)
    torch.testing.assert_close(
        attention_exact(q8, k8, v8, q_descale=qd0, k_descale=kd, v_descale=vd),
        attention_exact(q8, k8, v8, q_descale=qd0.contiguous(), k_descale=kd, v_descale=vd), rtol=0, atol=0)


def test_long_rows_use_query_chunks(monkeypatch):
    """Chunking the queries to bound memory changes nothing."""
    import fp8lab.reference.exact as exact

    gen = torch.Generator().manual_seed(3)
    q, k, v = _rand(1, 113, 2, 8, gen=gen), _rand(1, 203, 1, 8, gen=gen), _rand(1, 203, 1, 8, gen=gen)
    whole = attention_exact(q, k, v, causal=True, window_size=(50, -1))
    monkeypatch.setattr(exact, "_TILE_ELEMENTS", 2 * 203 * 7)
    torch.testing.assert_close(attention_exact(q, k, v, causal=True, window_size=(50, -1)), whole, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(window_size=(3,)), ValueError, "window_size"),
        (dict(window_size=(-2, 0)), ValueError, ">= -1"),
        (dict(softmax_scale=float("nan")), ValueError, "softmax_scale"),
        (dict(causal=1), TypeError, "causal"),
    ],
)
def test_bad_options(kwargs, exc, match):
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(exc, match=match):
        attention_exact(q, q, q, **kwargs)


def test_bad_inputs_are_reported_by_layout():
    q = torch.randn(1, 8, 3, 16)
    k = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        attention_exact(q, k, k)
    q8 = cast_to_fp8(torch.randn(1, 8, 2, 16))
    with pytest.raises(ValueError, match="q_descale"):
        attention_exact(q8, q8, q8, q_descale=torch.ones(2, 2))
    with pytest.raises(TypeError, match="one dtype"):
        attention_exact(q8, q8.float(), q8.float())


@pytest.mark.gpu
def test_exact_on_gpu_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(7)
    q, k, v = _rand(2, 113, 4, 32, gen=gen), _rand(2, 203, 2, 32, gen=gen), _rand(2, 203, 2, 32, gen=gen)
    cpu = attention_exact(q, k, v, causal=True)
    gpu = attention_exact(q.cuda(), k.cuda(), v.cuda(), causal=True)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-10, atol=1e-12)
