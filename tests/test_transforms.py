"""fp8lab.transforms: exact in float64, for every head dim FA3 supports."""

from __future__ import annotations

import pytest
import torch

from fp8lab.reference import attention_exact
from fp8lab.scaling import ScaleStrategy, fake_quantize
from fp8lab.transforms import FA3_HEAD_DIMS, hadamard_matrix, incoherence_matrix, incoherent_processing, rotate, smooth_k


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("n", FA3_HEAD_DIMS + (1, 2, 12, 20, 24, 40, 80, 160))
def test_hadamard_is_exact(n):
    h = hadamard_matrix(n, normalized=False)
    assert bool((h.abs() == 1).all())
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=torch.float64))  # integer sums: exact


def test_hadamard_orders_that_do_not_exist_here_raise():
    with pytest.raises(ValueError, match="block_size"):
        hadamard_matrix(112)  # 112 = 16 * 7: 7+1, 14, 28, 56, 112 minus one are not primes ≡ 3 mod 4
    with pytest.raises(ValueError, match="positive"):
        hadamard_matrix(0)


@pytest.mark.parametrize("d", FA3_HEAD_DIMS)
@pytest.mark.parametrize("block_size", [None, 32])
def test_incoherent_processing_keeps_qk_and_attention(d, block_size):
    q, k, v = randn(2, 37, 4, d, seed=1), randn(2, 53, 2, d, seed=2), randn(2, 53, 2, d, seed=3)
    q[0, 5, 1, 7] = 60.0  # an outlier
    qr, kr, m = incoherent_processing(q, k, seed=d, block_size=block_size)
    torch.testing.assert_close(m @ m.T, torch.eye(d, dtype=torch.float64), rtol=0, atol=1e-14)
    s = torch.einsum("bqhd,bkhd->bhqk", q[:, :, ::2], k)
    sr = torch.einsum("bqhd,bkhd->bhqk", qr[:, :, ::2], kr)
    torch.testing.assert_close(sr, s, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        attention_exact(qr, kr, v, causal=True), attention_exact(q, k, v, causal=True), rtol=1e-12, atol=1e-12
    )
    # the rotation spreads the outlier: the rotated amax is far below 60
    assert qr.abs().max() < 60.0 / 3


def test_incoherence_matrix_signs_depend_on_seed_and_are_reproducible():
    a, b, c = incoherence_matrix(64, seed=1), incoherence_matrix(64, seed=1), incoherence_matrix(64, seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match="block_size"):
        incoherence_matrix(96, block_size=64)
    with pytest.raises(ValueError, match="matrix"):
        rotate(randn(2, 3, 1, 8), torch.eye(4))


def test_rotation_lowers_fp8_score_error_with_outlier_channels():
    from fp8lab.data import make_qkv

    q, k, _ = make_qkv("outlier_channels", seqlen_q=256, heads_q=2, head_dim=128, dtype=torch.float64, seed=4)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k)

    def score_error(q: torch.Tensor, k: torch.Tensor) -> float:
        s8 = torch.einsum("bqhd,bkhd->bhqk", fake_quantize(q, ScaleStrategy()), fake_quantize(k, ScaleStrategy()))
        return ((s8 - s).norm() / s.norm()).item()

    qr, kr, _ = incoherent_processing(q, k, seed=0)
    # an outlier channel dominates every dot product, and with it the rounding error; rotation spreads it
    assert score_error(qr, kr) < score_error(q, k) / 3


def test_smooth_k_keeps_softmax_batched_causal():
    q, k, v = randn(2, 41, 4, 64, seed=5), randn(2, 67, 2, 64, seed=6), randn(2, 67, 2, 64, seed=7)
    k = k + 5.0 * randn(1, 1, 2, 64, seed=8)  # a per-channel bias, as in real keys
    ks, mean = smooth_k(k)
    assert mean.shape == (2, 1, 2, 64)
    torch.testing.assert_close(ks.mean(dim=1), torch.zeros(2, 2, 64, dtype=torch.float64), rtol=0, atol=1e-13)
    o, lse = attention_exact(q, k, v, causal=True, return_lse=True)
    os_, lses = attention_exact(q, ks, v, causal=True, return_lse=True)
    torch.testing.assert_close(os_, o, rtol=1e-12, atol=1e-12)
    # the logsumexp shifts by softmax_scale * q . mean (per query row)
    shift = torch.einsum("bqhd,bhd->bhq", q, mean[:, 0].repeat_interleave(2, dim=1)) * 64**-0.5
    torch.testing.assert_close(lse - lses, shift, rtol=1e-10, atol=1e-10)


def test_smooth_k_varlen_per_sequence():
    cu = torch.tensor([0, 13, 13 + 40, 13 + 40 + 7], dtype=torch.int32)
    q, k, v = randn(60, 4, 64, seed=9), randn(60, 2, 64, seed=10) + 3.0, randn(60, 2, 64, seed=11)
    ks, means = smooth_k(k, cu_seqlens=cu)
    assert means.shape == (3, 2, 64)
    torch.testing.assert_close(ks[13:53].mean(0), torch.zeros(2, 64, dtype=torch.float64), rtol=0, atol=1e-13)
    kw = dict(causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
    torch.testing.assert_close(attention_exact(q, ks, v, **kw), attention_exact(q, k, v, **kw), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="cu_seqlens"):
        smooth_k(k, cu_seqlens=torch.tensor([0, 10, 50], dtype=torch.int32))


def test_bad_inputs_name_what_they_expected() -> None:
    """head_dim (not block_size) is blamed for a bad head dim; cu_seqlens is checked as FA3's (an empty or
    float one crashed, one beside a batched k was ignored); an empty batched k gives a zero mean, not NaN."""
    with pytest.raises(ValueError, match="head_dim: expected an int >= 1, got 0"):
        incoherence_matrix(0)
    with pytest.raises(ValueError, match="n must be a positive int, got True"):
        hadamard_matrix(True)
    k = torch.randn(10, 2, 8)
    for cu, err in ((torch.tensor([], dtype=torch.int32), ValueError), (torch.tensor([0.0, 10.0]), TypeError),
                    ([0, 10], TypeError)):
        with pytest.raises(err, match="cu_seqlens: expected"):
            smooth_k(k, cu_seqlens=cu)
    with pytest.raises(ValueError, match="cu_seqlens: a batched k"):
        smooth_k(k[None], cu_seqlens=torch.tensor([0, 10], dtype=torch.int32))
    ks, mean = smooth_k(torch.randn(2, 0, 3, 8))
    assert ks.shape == (2, 0, 3, 8) and mean.shape == (2, 1, 3, 8) and not mean.any()
    with pytest.raises(TypeError, match="x: expected a floating-point torch.Tensor, got torch.int64"):
        rotate(torch.ones(2, 4, dtype=torch.int64), hadamard_matrix(4))
