"""fp8lab.layout: every bad input gets a clear error before any kernel runs."""

import numpy as np
import pytest
import torch

from fp8lab.layout import check_attention_inputs, check_descale, sequences

E4M3 = torch.float8_e4m3fn


def _qkv(b=2, sq=5, sk=7, hq=8, hkv=2, d=64, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, sq, hq, d, generator=g).to(dtype)
    k = torch.randn(b, sk, hkv, d, generator=g).to(dtype)
    v = torch.randn(b, sk, hkv, d, generator=g).to(dtype)
    return q, k, v


def test_batched_shape():
    s = check_attention_inputs(*_qkv())
    assert (s.batch, s.heads_q, s.heads_kv, s.head_dim, s.group_size) == (2, 8, 2, 64, 4)
    assert s.seqlens_q == (5, 5) and s.seqlens_k == (7, 7) and not s.varlen and not s.fp8


def test_varlen_shape_and_sequences():
    lens_q, lens_k = [3, 0, 4], [5, 2, 6]
    cu_q = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 7, 13], dtype=torch.int32)
    q = torch.randn(7, 4, 64).to(E4M3)
    k = torch.randn(13, 2, 64).to(E4M3)
    desc = torch.rand(3, 2) + 0.5
    s = check_attention_inputs(q, k, k, q_descale=desc, k_descale=desc.t().contiguous().t(),
                               cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert s.varlen and s.fp8 and s.seqlens_q == tuple(lens_q) and s.seqlens_k == tuple(lens_k)
    got = [(b, q[iq].shape[0], k[ik].shape[0]) for b, iq, ik in sequences(s)]
    assert got == [(0, 3, 5), (1, 0, 2), (2, 4, 6)]


def test_stride_zero_descale_is_accepted():
    q, k, v = (t.to(E4M3) for t in _qkv())
    scalar = torch.tensor(0.37)
    check_attention_inputs(q, k, v, q_descale=scalar.expand(2, 2), k_descale=torch.rand(2, 2) + 0.1)


@pytest.mark.parametrize(
    "mutate, error, message",
    [
        (lambda q, k, v: (q.to(E4M3), k, v), TypeError, "share one dtype"),
        (lambda q, k, v: (q, k, v[:, :, :1]), ValueError, "same number of heads"),
        (lambda q, k, v: (q[:, :, :7], k, v), ValueError, "multiple of heads_kv"),
        (lambda q, k, v: (q[..., :32], k, v), ValueError, "share head_dim"),
        (lambda q, k, v: (q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v), ValueError, "contiguous"),
        (lambda q, k, v: (q[0], k, v), ValueError, "(batch, seqlen, heads, head_dim)"),
        (lambda q, k, v: (q.int(), k.int(), v.int()), TypeError, "expected one of"),
        (lambda q, k, v: (q[:1], k, v), ValueError, "batch sizes differ"),
    ],
)
def test_bad_inputs(mutate, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_attention_inputs(*mutate(*_qkv()))


@pytest.mark.parametrize(
    "descale, error, message",
    [
        (torch.rand(2, 3) + 0.1, ValueError, r"expected shape \(batch, heads_kv\) = \(2, 2\), got \(2, 3\)"),
        ((torch.rand(2, 2) + 0.1).double(), TypeError, "expected dtype float32, got float64"),
        (torch.tensor([[1.0, float("nan")], [1.0, 1.0]]), ValueError, "finite"),
        (torch.tensor([[1.0, 0.0], [1.0, 1.0]]), ValueError, "> 0"),
        (torch.tensor([[1.0, -2.0], [1.0, 1.0]]), ValueError, "> 0"),
        (0.5, TypeError, "got float"),
    ],
)
def test_bad_descales_name_the_tensor(descale, error, message):
    q, k, v = (t.to(E4M3) for t in _qkv())
    with pytest.raises(error, match="k_descale: .*" + message):
        check_attention_inputs(q, k, v, k_descale=descale)


def test_descales_rejected_for_float_inputs():
    with pytest.raises(ValueError, match="FP8 inputs only"):
        check_attention_inputs(*_qkv(), q_descale=torch.ones(2, 2) * 0.5)


def test_check_descale_device():
    with pytest.raises(ValueError, match="on meta"):
        check_descale("v_descale", torch.rand(1, 1) + 0.1, 1, 1, torch.device("meta"))


def test_check_descale_without_values_still_checks_the_layout():
    """check_values=False (what the kernels do for GPU descales: no device sync) skips only the values."""
    nan = torch.full((2, 3), float("nan"))
    check_descale("q_descale", nan, 2, 3, check_values=False)
    with pytest.raises(ValueError, match="finite"):
        check_descale("q_descale", nan, 2, 3)
    with pytest.raises(TypeError, match="float32"):
        check_descale("q_descale", nan.double(), 2, 3, check_values=False)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        check_descale("q_descale", nan[:1], 2, 3, check_values=False)
    with pytest.raises(ValueError, match="on meta"):
        check_descale("q_descale", nan, 2, 3, torch.device("meta"), check_values=False)


@pytest.mark.parametrize(
    "cu_q, message",
    [
        ([0, 3, 2, 7], "non-decreasing"),
        ([1, 3, 3, 7], "start at 0"),
        ([0, 3, 3, 8], "equal the 7 tokens"),
        ([0, 7], "same batch"),
    ],
)
def test_bad_cu_seqlens(cu_q, message):
    q = torch.randn(7, 4, 64)
    k = torch.randn(13, 2, 64)
    cu_k = torch.tensor([0, 5, 7, 13], dtype=torch.int32)
    with pytest.raises(ValueError, match=message):
        check_attention_inputs(q, k, k, cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32), cu_seqlens_k=cu_k)


def test_cu_seqlens_dtype_and_pairing():
    q = torch.randn(7, 4, 64)
    with pytest.raises(TypeError, match=r"expected int32 \(FA3's\), got int64; pass cu_seqlens_q.to\(torch.int32\)"):
        check_attention_inputs(q, q, q, cu_seqlens_q=torch.tensor([0, 7]), cu_seqlens_k=torch.tensor([0, 7]))
    with pytest.raises(ValueError, match="both"):
        check_attention_inputs(q, q, q, cu_seqlens_q=torch.tensor([0, 7], dtype=torch.int32))
    cu = torch.tensor([0, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match="max_seqlen_q"):
        check_attention_inputs(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=3)
    with pytest.raises(ValueError, match=r"max_seqlen_k: applies to varlen calls \(with cu_seqlens\) only"):
        check_attention_inputs(q[None], q[None], q[None], max_seqlen_k=7)  # batched: it would be ignored


def test_softmax_scale():
    from fp8lab.layout import check_softmax_scale

    assert check_softmax_scale(None, 64) == 0.125
    assert check_softmax_scale(torch.tensor(0.3), 64) == pytest.approx(0.3)
    for bad in (float("nan"), float("inf"), True, "0.1", torch.ones(2)):
        with pytest.raises(ValueError, match="softmax_scale: expected a finite number"):
            check_softmax_scale(bad, 64)
    # FA3 subtracts the row max of the scaled scores: a scale <= 0 (or one float32 rounds to 0) breaks it
    with pytest.raises(ValueError, match="softmax_scale: expected a finite number"):
        check_softmax_scale(10 ** 400, 64)  # an int beyond float: not an OverflowError
    for bad in (0.0, -0.125, 1e-50, 1e39):
        with pytest.raises(ValueError, match="softmax_scale: expected a number > 0"):
            check_softmax_scale(bad, 64)
    assert check_softmax_scale(np.float32(0.25), 64) == 0.25  # a NumPy number is a number
    for bad in (0, -64):  # head_dim ** -0.5 is undefined: a ValueError, not a ZeroDivisionError
        with pytest.raises(ValueError, match=f"head_dim: expected a positive int .*got {bad}"):
            check_softmax_scale(None, bad)


def test_folded_scale_must_stay_finite_and_positive_in_float32():
    """FA3 folds softmax_scale * log2(e) * q_descale * k_descale into one float32: 0 or inf there is an all-NaN
    output, so it is refused, naming the (batch, kv head) where it happens."""
    from fp8lab.layout import check_folded_scale

    g = torch.Generator().manual_seed(113)
    qd, kd = torch.rand(3, 2, generator=g) + 0.1, torch.rand(3, 2, generator=g) + 0.1
    check_folded_scale(0.125, qd, kd)  # an ordinary call passes
    check_folded_scale(0.125, None, kd)
    tiny, huge = qd.clone(), kd.clone()
    tiny[2, 1], huge[1, 0] = 1e-38, 1e38
    with pytest.raises(ValueError, match=r"expected finite and > 0 in float32.*got 0\.0 at \(batch, kv head\) \(2, 1\)"):
        check_folded_scale(1e-10, tiny, kd)
    with pytest.raises(ValueError, match=r"got inf at \(batch, kv head\) \(1, 0\) from softmax_scale 1.*, q_descale [\d.]+, k_descale 9\.9\d*e\+37"):
        check_folded_scale(1e10, qd, huge)
    for scale in (1e-46, 3e38):  # softmax_scale * log2(e) alone leaves float32
        with pytest.raises(ValueError, match="expected finite and > 0 in float32"):
            check_folded_scale(scale, None, None)
    check_folded_scale(1e-10, tiny, kd, check_values=False)  # the values unread: what a GPU call does by default


def test_descale_values_and_the_folded_scale_are_read_in_one_sync(monkeypatch):
    """`attention` checks the three descales and the scale FA3 folds from them with one read back (a device
    sync on a GPU); a failure still names the descale, or the (batch, kv head) of the folded scale."""
    from fp8lab.layout import check_descale_values

    g = torch.Generator().manual_seed(114)
    q, k = torch.zeros(3, 5, 4, 64).to(torch.float8_e4m3fn), torch.zeros(3, 7, 2, 64).to(torch.float8_e4m3fn)
    qd, kd, vd = (torch.rand(3, 2, generator=g) + 0.1 for _ in range(3))
    shape = check_attention_inputs(q, k, k, q_descale=qd, k_descale=kd, v_descale=vd, check_values=False)
    reads = []
    real_bool = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda t: reads.append(t) or real_bool(t))
    check_descale_values(shape, qd, kd[:1].expand(3, 2), vd, softmax_scale=0.125)  # stride 0 too
    assert len(reads) == 1
    monkeypatch.undo()
    nan_v, huge = vd.clone(), kd.clone()
    nan_v[1, 1], huge[2, 0] = float("nan"), 1e38
    with pytest.raises(ValueError, match=r"v_descale: every descale must be finite, got nan at \(1, 1\)"):
        check_descale_values(shape, qd, kd, nan_v, softmax_scale=0.125)
    with pytest.raises(ValueError, match=r"got inf at \(batch, kv head\) \(2, 0\)"):
        check_descale_values(shape, qd, huge, vd, softmax_scale=1e10)
    check_descale_values(shape, qd, huge, vd)  # without softmax_scale: each descale alone is fine
    with pytest.raises(ValueError, match="k_descale: every descale must be > 0"):
        check_attention_inputs(q, k, k, k_descale=-kd)  # check_values=True: the values, as before


def test_cu_seqlens_must_be_contiguous():
    """The kernels read cu_seqlens[i] at cu + i, as FA3's do: a strided view would be misread."""
    q = torch.randn(7, 4, 64)
    both = torch.tensor([[0, 0], [3, 5], [7, 7]], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q: expected a contiguous tensor"):
        check_attention_inputs(q, q, q, cu_seqlens_q=both[:, 0], cu_seqlens_k=both[:, 1].contiguous())
    shape = check_attention_inputs(q, q, q, cu_seqlens_q=both[:, 0].contiguous(), cu_seqlens_k=both[:, 1].contiguous())
    assert shape.seqlens_q == (3, 4) and shape.seqlens_k == (5, 2)


def test_varlen_under_capture_takes_the_bounds_and_reads_nothing_back(monkeypatch):
    """While a CUDA graph is captured (stood in for here) cu_seqlens may not be read on the host: the check
    takes max_seqlen_q/k as the bounds, checks what it can see, and `sequences` refuses to guess."""
    import fp8lab.layout as layout

    monkeypatch.setattr(layout, "_capturing", lambda t: True)
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: pytest.fail("read back under capture"))
    cu_q = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 7, 13], dtype=torch.int32)
    q, k = torch.randn(7, 4, 64).to(E4M3), torch.randn(13, 2, 64).to(E4M3)
    s = check_attention_inputs(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=9, max_seqlen_k=6)
    assert (s.batch, s.varlen, s.lengths_on_host, s.seqlens_q, s.max_seqlen_q, s.max_seqlen_k) == (3, True, False, None, 9, 6)
    with pytest.raises(ValueError, match="on the device only"):
        list(sequences(s))
    with pytest.raises(ValueError, match="max_seqlen_q and max_seqlen_k"):
        check_attention_inputs(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_k=6)
    with pytest.raises(ValueError, match="max_seqlen_k: expected an int >= 0, got -1"):
        check_attention_inputs(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=9, max_seqlen_k=-1)
    with pytest.raises(ValueError, match="same batch, got 3 and 2"):
        check_attention_inputs(q, k, k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k[:3], max_seqlen_q=9, max_seqlen_k=6)
    with pytest.raises(TypeError, match="expected int32"):
        check_attention_inputs(q, k, k, cu_seqlens_q=cu_q.long(), cu_seqlens_k=cu_k, max_seqlen_q=9, max_seqlen_k=6)


def test_varlen_max_seqlen_must_be_an_integer_bound():
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    q = torch.randn(7, 4, 64)
    check_attention_inputs(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=np.int64(4), max_seqlen_k=9)
    for bad in (3.5, "4", True, -1):
        with pytest.raises(ValueError, match="max_seqlen_q: expected an int >= 0"):
            check_attention_inputs(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=bad)
    with pytest.raises(ValueError, match=r"max_seqlen_k: must be >= the longest sequence \(4\), got 3"):
        check_attention_inputs(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_k=3)
