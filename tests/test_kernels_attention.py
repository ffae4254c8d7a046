"""fp8lab.kernels.fp8_attention against the FA3 emulation and float64 attention.

On a CPU the kernel runs in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before triton is imported), so shapes are tiny, and the kernel
must equal the emulation bit for bit. On a GPU the bound is relative:
|kernel - emulation| well below the emulation's own error against exact attention.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from bounds import fp8_qk_accumulation_term, max_abs_score_terms

from fp8lab.kernels import attention as A
from fp8lab.kernels import fp8_attention, pretranspose_v
from fp8lab.metrics import ulps_apart
from fp8lab.reference.exact import attention_exact
from fp8lab.reference.fa3 import attention_fa3_fp8

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


BN = 16 if DEV == "cpu" else 32  # key block of the switch tests: FP8 MMAs on a GPU reduce over >= 32


def fp8(gen: torch.Generator, *shape: int, scale: float = 2.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).clamp(-448, 448).to(torch.float8_e4m3fn).to(DEV)


def descales(gen: torch.Generator, batch: int, heads_kv: int) -> list[torch.Tensor]:
    """Random per-(batch, kv head) descales in [0.05, 0.45): never all ones."""
    return [(torch.rand(batch, heads_kv, generator=gen) * 0.4 + 0.05).to(DEV) for _ in range(3)]


def assert_emulation_bits(out: torch.Tensor, emu: torch.Tensor) -> None:
    """Under the interpreter the kernel gives the emulation's bits. Its fp32 sums are numpy's (`tl.dot`,
    `tl.sum`) and the emulation's are torch's, whose order follows the CPU's vector width (AVX2 or
    AVX-512): on some machines an element of a shape lands one bf16 ulp apart (11520 elements: one on
    an AVX-512 machine, none on others). Allowed: that, in at most one element per thousand."""
    ulps = ulps_apart(out, emu)
    assert ulps.max().item() <= 1, f"{ulps.max().item()} ulps apart"
    assert (ulps > 0).sum().item() <= max(1, out.numel() // 1000), f"{(ulps > 0).sum().item()} of {out.numel()} differ"


def check_against_emulation(q, k, v, ds, **kw) -> None:
    block_n = A.default_config(q.shape[-1], kw.get("causal", False)).block_n
    out, lse = fp8_attention(q, k, v, *ds, return_lse=True, **kw)
    emu, emu_lse = attention_fa3_fp8(q, k, v, *ds, block_n=block_n, return_lse=True, **kw)
    exact, exact_lse = attention_exact(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], return_lse=True, **kw)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == emu_lse.shape
    assert torch.isfinite(out).all()
    emu_err = rel_l2(emu, exact)
    assert emu_err > 1e-3  # the FP8 steps do cost accuracy: the bound below is not vacuous
    if DEV == "cpu":  # the interpreter, with P and the output rounded in fp32: the same bits
        assert_emulation_bits(out, emu)
    else:  # ex2.approx, FMA contraction, sum order; FA3 itself sits at 0.24-0.70 of emu_err
        assert rel_l2(out, emu) <= 0.6 * emu_err, (rel_l2(out, emu), emu_err)
    # lse is not quantized: it must match exact attention's to float32 accuracy,
    # with -inf exactly where a row sees no key.
    assert torch.equal(torch.isinf(lse), torch.isinf(exact_lse))
    fin = torch.isfinite(exact_lse)
    allowed = 1e-5 * (1 + exact_lse[fin].abs().max().item())
    if DEV != "cpu":  # Hopper's FP8 MMA accumulates Q·K^T with ~13 bits (tests/bounds.py)
        varlen = {key: kw[key] for key in kw if key.startswith(("cu_seqlens", "max_seqlen"))}
        desc = {"q_descale": ds[0], "k_descale": ds[1]}
        allowed += fp8_qk_accumulation_term(max_abs_score_terms(q, k, desc, varlen), q.shape[-1])
    assert (lse[fin].double() - exact_lse[fin].double()).abs().max().item() <= allowed


@pytest.mark.parametrize(
    "b,sq,sk,hq,hk,d,causal",
    [
        (2, 37, 70, 4, 2, 32, True),  # GQA, bottom-right causal with more keys than queries
        (1, 70, 37, 2, 1, 32, True),  # MQA, more queries than keys: the first 33 rows see nothing
        (2, 37, 37, 2, 2, 64, False),  # MHA, non-causal, ragged last block
        (1, 37, 50, 2, 1, 48, False),  # head_dim 48: padded to 64 inside the kernel (like 96, 192)
    ],
)
def test_batched_matches_emulation(b, sq, sk, hq, hk, d, causal):
    gen = torch.Generator().manual_seed(hash((b, sq, sk, hq, hk, d, causal)) % 2**31)
    q, k, v = fp8(gen, b, sq, hq, d), fp8(gen, b, sk, hk, d), fp8(gen, b, sk, hk, d)
    check_against_emulation(q, k, v, descales(gen, b, hk), causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_emulation(causal):
    gen = torch.Generator().manual_seed(7 + causal)
    lens_q, lens_k = [37, 0, 5, 20], [20, 9, 0, 41]  # an empty query set, and queries with no keys
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=DEV)
    q, k, v = fp8(gen, sum(lens_q), 4, 32), fp8(gen, sum(lens_k), 2, 32), fp8(gen, sum(lens_k), 2, 32)
    kw = dict(causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))
    check_against_emulation(q, k, v, descales(gen, len(lens_q), 2), **kw)
    out = fp8_attention(q, k, v, *descales(gen, len(lens_q), 2), **kw)
    assert torch.equal(out[37 + 0 : 37 + 5].float().cpu(), torch.zeros(5, 4, 32))  # sequence 2 has no keys: out = 0


def test_v_layouts_tma_and_scheduling_agree_bitwise(monkeypatch):
    """V natural or pre-transposed, pointer loads or TMA descriptors, any head chunking: same bits."""
    gen = torch.Generator().manual_seed(11)
    q, k, v = fp8(gen, 2, 40, 4, 32), fp8(gen, 2, 48, 2, 32), fp8(gen, 2, 48, 2, 32)
    ds = descales(gen, 2, 2)
    base = A.AttentionConfig(16, BN, 4, 1)
    ref = fp8_attention(q, k, v, *ds, causal=True, config=base)
    vt = pretranspose_v(v)
    assert vt.shape == v.shape and vt.stride(1) == 1 and A.v_layout_of(vt) == "transposed"
    assert torch.equal(fp8_attention(q, k, vt, *ds, causal=True, v_layout="transposed", config=base), ref)
    tma = A.AttentionConfig(16, BN, 4, 1, use_tma=True)
    assert torch.equal(fp8_attention(q, k, v, *ds, causal=True, config=tma), ref)
    monkeypatch.setattr(A, "L2_BUDGET_BYTES", 1)  # one kv head's group per chunk
    assert A.heads_per_chunk(48, 32, 2, 8) == 2
    assert torch.equal(fp8_attention(q, k, vt, *ds, causal=True, config=tma), ref)


def test_unpipelined_on_band_loop_gives_the_same_bits():
    """The v4 switch `masked_stages` changes the schedule only: same bits as v2 and the emulation,
    with a ragged tail, a causal band wider than one block and GQA."""
    gen = torch.Generator().manual_seed(12)
    q, k, v = fp8(gen, 2, 45, 4, 32), fp8(gen, 2, 53, 2, 32), fp8(gen, 2, 53, 2, 32)
    ds = descales(gen, 2, 2)
    for causal in (False, True):
        v2 = A.AttentionConfig(32, BN, 4, 2)
        v4 = A.AttentionConfig(32, BN, 4, 2, masked_stages=1)
        assert v4.label() == f"m32n{BN}w4s2-ms1" and v2.label() == f"m32n{BN}w4s2"
        out2, lse2 = fp8_attention(q, k, v, *ds, causal=causal, config=v2, return_lse=True)
        out4, lse4 = fp8_attention(q, k, pretranspose_v(v), *ds, causal=causal, config=v4, return_lse=True)
        emu = attention_fa3_fp8(q, k, v, *ds, causal=causal, block_n=BN)
        assert torch.equal(out4, out2) and torch.equal(lse4, lse2)
        if DEV == "cpu":
            assert_emulation_bits(out4, emu)
    r168 = A.AttentionConfig(32, BN, 4, 2, maxnreg=168)  # a compile option: same bits
    assert r168.label() == f"m32n{BN}w4s2-r168"
    assert torch.equal(fp8_attention(q, k, v, *ds, causal=True, config=r168), out2)
    for key, cands in A.V4_CANDIDATES.items():  # candidates to time against the measured v2 winner
        assert A._MEASURED_DEFAULTS[key] not in cands and len({c.label() for c in cands}) == len(cands)


def test_pipelined_qk_gives_the_same_bits():
    """The v5 switch `pipeline_qk` (next block's QK^T before this block's softmax) reorders
    issue only: the same bits as the plain loop, with 0, 1 and several off-band blocks, a
    ragged tail, GQA, causal or not, batched and varlen."""
    gen = torch.Generator().manual_seed(13)
    plain, piped = A.AttentionConfig(16, BN, 4, 2), A.AttentionConfig(16, BN, 4, 2, pipeline_qk=True)
    assert piped.label() == f"m16n{BN}w4s2-pq"
    for sq, sk in ((45, 53), (16, 16), (9, 30), (40, 21)):
        q, k, v = fp8(gen, 2, sq, 4, 32), fp8(gen, 2, sk, 2, 32), fp8(gen, 2, sk, 2, 32)
        ds = descales(gen, 2, 2)
        for causal in (False, True):
            out, lse = fp8_attention(q, k, v, *ds, causal=causal, config=plain, return_lse=True)
            out_p, lse_p = fp8_attention(q, k, v, *ds, causal=causal, config=piped, return_lse=True)
            assert torch.equal(out_p, out) and torch.equal(lse_p, lse), (sq, sk, causal)
            assert out.abs().sum() > 0
    lens = torch.tensor([0, 37, 37, 90], dtype=torch.int32, device=DEV)  # one empty sequence
    qv, kv_, vv = fp8(gen, 90, 4, 32), fp8(gen, 90, 2, 32), fp8(gen, 90, 2, 32)
    dv = descales(gen, 3, 2)
    kw = dict(cu_seqlens_q=lens, cu_seqlens_k=lens, max_seqlen_q=53, max_seqlen_k=53, causal=True)
    assert torch.equal(fp8_attention(qv, kv_, vv, *dv, config=piped, **kw), fp8_attention(qv, kv_, vv, *dv, config=plain, **kw))


@pytest.mark.parametrize("causal", [False, True])
def test_permuted_keys_give_the_same_result(causal):
    """v10's `permute_keys` loads K's rows of each 32 in the order that lets P reach the PV MMA
    without shuffles, and relabels P's columns back. Under the interpreter: the same bits as the
    plain kernel and the emulation (ragged tails, a causal band, GQA, padded head dim 48, varlen
    with an empty sequence). On a GPU the row sum may add in another order: within the bound."""
    gen = torch.Generator().manual_seed(20 + causal)
    plain, perm = A.AttentionConfig(16, 32, 4, 2), A.AttentionConfig(16, 32, 4, 2, permute_keys=True)
    assert perm.label() == "m16n32w4s2-pk"
    perm_all = A.AttentionConfig(16, 32, 4, 2, masked_stages=1, pipeline_qk=True, permute_keys=True)  # with v4's, v5's switches
    for sq, sk, d in ((45, 77, 32), (20, 70, 48), (33, 32, 32)):
        q, k, v = fp8(gen, 2, sq, 4, d), fp8(gen, 2, sk, 2, d), fp8(gen, 2, sk, 2, d)
        ds = descales(gen, 2, 2)
        out, lse = fp8_attention(q, k, v, *ds, causal=causal, config=plain, return_lse=True)
        out_p, lse_p = fp8_attention(q, k, pretranspose_v(v), *ds, causal=causal, config=perm, return_lse=True)
        emu = attention_fa3_fp8(q, k, v, *ds, causal=causal, block_n=32)
        if DEV == "cpu":
            assert torch.equal(out_p, out) and torch.equal(lse_p, lse), (sq, sk, d)
            assert_emulation_bits(out_p, emu)
            assert torch.equal(fp8_attention(q, k, v, *ds, causal=causal, config=perm_all), out), (sq, sk, d)
        else:
            exact = attention_exact(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], causal=causal)
            assert rel_l2(out_p, emu) <= 0.6 * rel_l2(emu, exact), (sq, sk, d)
            assert torch.equal(torch.isinf(lse_p), torch.isinf(lse))
    lens = torch.tensor([0, 37, 37, 90], dtype=torch.int32, device=DEV)
    qv, kv_, vv = fp8(gen, 90, 4, 32), fp8(gen, 90, 2, 32), fp8(gen, 90, 2, 32)
    dv = descales(gen, 3, 2)
    kw = dict(cu_seqlens_q=lens, cu_seqlens_k=lens, max_seqlen_q=53, max_seqlen_k=53, causal=causal)
    out, out_p = (fp8_attention(qv, kv_, vv, *dv, config=c, **kw) for c in (plain, perm))
    assert torch.equal(out_p, out) if DEV == "cpu" else rel_l2(out_p, out) < 0.05


def test_descale_strides_are_bitwise_identical():
    """Descales with distinct values per (batch, kv head) in a column-major copy, a per-head row
    expanded over the batch (strides (0, 1)) and one scalar expanded (strides (0, 0)): the same bits
    as the same values contiguous, and the emulation's bits (one value everywhere would hide a misread)."""
    gen = torch.Generator().manual_seed(12)
    q, k, v = fp8(gen, 3, 20, 4, 32), fp8(gen, 3, 20, 2, 32), fp8(gen, 3, 20, 2, 32)
    table = descales(gen, 3, 2)[0]
    row = (torch.rand(1, 2, generator=gen) * 0.4 + 0.05).to(DEV).expand(3, 2)
    scalar = torch.tensor([[0.37]], device=DEV).expand(3, 2)
    strided = (table.t().contiguous().t(), row, scalar)
    assert [d.stride() for d in strided] == [(1, 3), (0, 1), (0, 0)]
    assert all(len(d.unique()) > 1 for d in strided[:2])  # a misread index reads another value
    dense = [d.contiguous() for d in strided]
    ref = fp8_attention(q, k, v, *dense)
    assert ref.abs().sum() > 0
    assert torch.equal(fp8_attention(q, k, v, *strided), ref)
    if DEV == "cpu":
        assert_emulation_bits(ref, attention_fa3_fp8(q, k, v, *dense, block_n=A.default_config(32).block_n))
    # and the per-head values are read per head: permuting heads of k permutes the result
    qd0 = scalar
    kd, vd = descales(gen, 3, 2)[:2]
    swapped = fp8_attention(q, k.flip(2), v.flip(2), qd0, kd.flip(1), vd.flip(1))
    assert torch.equal(swapped, fp8_attention(q.flip(2), k, v, qd0, kd, vd).flip(2))


def test_max_offset_switch_matches_emulation():
    """max_offset=0 (P in [0, 1]) is FA3 without its offset: the emulation agrees. With peaked
    scores many P fall below e4m3's smallest normal (2^-6) and lose bits without the offset;
    with flat scores the offset changes nothing (scaling by 2^8 commutes with rounding)."""
    gen = torch.Generator().manual_seed(13)
    q, k, v = fp8(gen, 1, 16, 2, 32, scale=3.0), fp8(gen, 1, 128, 2, 32, scale=3.0), fp8(gen, 1, 128, 2, 32)
    ds = [(torch.rand(1, 2, generator=gen) * 0.4 + 0.3).to(DEV) for _ in range(3)]
    out0 = fp8_attention(q, k, v, *ds, max_offset=0.0)
    emu0 = attention_fa3_fp8(q, k, v, *ds, block_n=A.default_config(32).block_n, max_offset=0.0)
    exact = attention_exact(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    assert rel_l2(out0, emu0) <= 0.6 * rel_l2(emu0, exact)  # 0 under the interpreter
    assert rel_l2(out0, exact) > 1.02 * rel_l2(fp8_attention(q, k, v, *ds), exact)


def test_softmax_scale_and_no_descales():
    gen = torch.Generator().manual_seed(14)
    q, k, v = fp8(gen, 1, 20, 2, 32), fp8(gen, 1, 20, 2, 32), fp8(gen, 1, 20, 2, 32)
    out = fp8_attention(q, k, v, softmax_scale=0.05)
    emu = attention_fa3_fp8(q, k, v, softmax_scale=0.05, block_n=A.default_config(32).block_n)
    assert rel_l2(out, emu) <= 0.6 * rel_l2(emu, attention_exact(q, k, v, softmax_scale=0.05))


@pytest.mark.parametrize(
    "mutate,exc,match",
    [
        (lambda q, k, v: (q.float(), k.float(), v.float()), TypeError, "float8_e4m3fn"),
        (lambda q, k, v: (q, k, v[..., :16]), ValueError, "head_dim"),
        (lambda q, k, v: (q[..., :24], k[..., :24], v[..., :24]), ValueError, "multiple of 16"),
        (lambda q, k, v: (q, k, v.transpose(1, 2)), ValueError, "contiguous|v_layout|heads|seqlen"),
        (lambda q, k, v: (q, k[:, :, :1], v), ValueError, "same number of heads"),
    ],
)
def test_bad_inputs_are_rejected_before_launch(mutate, exc, match):
    gen = torch.Generator().manual_seed(15)
    q, k, v = fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32)
    with pytest.raises(exc, match=match):
        fp8_attention(*mutate(q, k, v))


def test_bad_options_are_rejected():
    gen = torch.Generator().manual_seed(16)
    q, k, v = fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32)
    with pytest.raises(ValueError, match="v_layout"):
        fp8_attention(q, k, v, v_layout="transposed")  # v is natural
    with pytest.raises(ValueError, match="v_layout"):
        fp8_attention(q, k, v, v_layout="columns")
    with pytest.raises(ValueError, match="max_offset"):
        fp8_attention(q, k, v, max_offset=9.0)
    with pytest.raises(ValueError, match="softmax_scale"):
        fp8_attention(q, k, v, softmax_scale=-1.0)
    with pytest.raises(ValueError, match="k_descale"):
        fp8_attention(q, k, v, None, torch.ones(2, 2, device=DEV))
    with pytest.raises(ValueError, match="> 0"):  # values are checked on the CPU, and on a GPU when asked
        fp8_attention(q, k, v, torch.zeros(1, 2, device=DEV), check_descales=True if DEV == "cuda" else None)
    with pytest.raises(ValueError, match="power of two"):
        fp8_attention(q, k, v, config=A.AttentionConfig(48, 64))
    with pytest.raises(ValueError, match=r"config.block_m: expected an int, got 16.0"):
        fp8_attention(q, k, v, config=A.AttentionConfig(16.0, 16, 4, 1))
    for bad in (dict(masked_stages=-1), dict(maxnreg=-5)):  # they failed inside Triton or ptxas on a GPU
        with pytest.raises(ValueError, match="masked_stages >= 0 and maxnreg None or an int >= 1"):
            fp8_attention(q, k, v, config=A.AttentionConfig(16, 16, **bad))
    with pytest.raises(ValueError, match="permute_keys"):
        fp8_attention(q, k, v, config=A.AttentionConfig(16, 16, permute_keys=True))
    with pytest.raises(ValueError, match="permute_keys"):
        fp8_attention(q, k, v, config=A.AttentionConfig(32, 32, use_tma=True, permute_keys=True))
    if DEV == "cuda":  # FP8 MMAs reduce over >= 32 values: a clear error instead of a compiler assertion
        with pytest.raises(ValueError, match="block_n"):
            fp8_attention(q, k, v, config=A.AttentionConfig(64, 16))


@pytest.mark.skipif(DEV != "cpu", reason="bit-exact: the interpreter")
def test_exp2_arguments_round_once_as_fma():
    """s * scale_log2 - max_scaled is one FFMA in FA3 and in the emulation: rounded as a multiply and a subtract
    (the interpreter does not fuse them) it moved a P across an e4m3 boundary in this case, 152 ulps off."""
    gen = torch.Generator().manual_seed(206)
    q = (torch.randn(1, 50, 2, 64, generator=gen) * 2).to(torch.float8_e4m3fn)
    k = (torch.randn(1, 61, 1, 64, generator=gen) * 2).to(torch.float8_e4m3fn)
    v = (torch.randn(1, 61, 1, 64, generator=gen) * 2).to(torch.float8_e4m3fn)
    ds = [torch.rand(1, 1, generator=gen) * .4 + .05 for _ in range(3)]
    assert_emulation_bits(fp8_attention(q, k, v, *ds), attention_fa3_fp8(q, k, v, *ds, block_n=16))


def test_gating_takes_exactly_the_head_dims_the_kernel_takes():
    """`fp8lab.backends.gating` decides without a device (it also describes simulated machines), so it states the
    kernel's head-dim rule in words of its own: this checks that the two agree, on empty inputs (no launch)."""
    from fp8lab.backends.gating import PROVIDERS, Device, Request, provider_reasons

    device = Device(torch.cuda.get_device_capability() if DEV == "cuda" else None)
    env = {"TRITON_INTERPRET": "1"} if DEV == "cpu" else {}
    for d, dv in [(d, d) for d in range(8, 280, 8)] + [(64, 32), (128, 64), (96, 128)]:
        q = torch.zeros(1, 0, 1, d, device=DEV).to(torch.float8_e4m3fn)
        v = torch.zeros(1, 0, 1, dv, device=DEV).to(torch.float8_e4m3fn)
        try:
            fp8_attention(q, q, v)
            kernel_takes = True
        except ValueError:
            kernel_takes = False
        reasons, _ = provider_reasons(PROVIDERS["triton"], device, Request("fp8", d, dv), env)
        assert kernel_takes == (reasons == []), (d, dv, reasons)


def test_a_folded_scale_that_leaves_float32_is_refused():
    """softmax_scale * log2(e) * q_descale * k_descale is one float32 in the kernel: 0 or inf there would give an
    all-NaN output without a word. The descale values are checked where they are read (the CPU, check_descales)."""
    gen = torch.Generator().manual_seed(27)
    q, k, v = fp8(gen, 2, 13, 4, 32), fp8(gen, 2, 21, 2, 32), fp8(gen, 2, 21, 2, 32)
    qd, kd, vd = descales(gen, 2, 2)
    check = True if DEV == "cuda" else None
    tiny, huge = qd.clone(), kd.clone()
    tiny[1, 0], huge[0, 1] = 1e-30, 1e30
    with pytest.raises(ValueError, match=r"expected finite and > 0 in float32.*got 0\.0 at \(batch, kv head\) \(1, 0\)"):
        fp8_attention(q, k, v, tiny, kd, vd, softmax_scale=1e-15, check_descales=check)
    with pytest.raises(ValueError, match=r"got inf at \(batch, kv head\) \(0, 1\)"):
        fp8_attention(q, k, v, qd, huge, vd, softmax_scale=1e15, check_descales=check)
    with pytest.raises(ValueError, match="got inf from softmax_scale 3e"):  # float32 holds it, not times log2(e)
        fp8_attention(q, k, v, softmax_scale=3e38)
    assert torch.isfinite(fp8_attention(q, k, v, qd, kd, vd, softmax_scale=1e-15)).all()  # small, but a float32


def test_switches_configs_and_cu_seqlens_are_checked_as_given():
    """A string flag is truthy, a dict has no block_m, a strided cu_seqlens is read as if contiguous:
    each would run and be wrong or crash inside. Each is a named error instead."""
    gen = torch.Generator().manual_seed(26)
    q, k, v = fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32)
    for name in ("causal", "return_lse", "pv_flush"):
        with pytest.raises(TypeError, match=f"{name}: expected a bool, got str"):
            fp8_attention(q, k, v, **{name: "False"})
    with pytest.raises(TypeError, match="config: expected an AttentionConfig"):
        fp8_attention(q, k, v, config={"block_m": 16})
    with pytest.raises(ValueError, match="max_offset: expected a number"):
        fp8_attention(q, k, v, max_offset="8")
    with pytest.raises(ValueError, match="num_warps"):
        fp8_attention(q, k, v, config=A.AttentionConfig(16, 16, num_warps=3))
    for bad in (0, -5, 4096, 80.5, True):
        with pytest.raises(ValueError, match="head_dim: expected an int multiple of 16"):
            A.gpu_config(bad)
    cu = torch.tensor([[0, 0], [3, 5], [8, 8]], dtype=torch.int32, device=DEV)  # columns: stride 2
    qv, kv = fp8(gen, 8, 2, 32), fp8(gen, 8, 2, 32)
    with pytest.raises(ValueError, match="cu_seqlens_q: expected a contiguous tensor"):
        fp8_attention(qv, kv, kv, cu_seqlens_q=cu[:, 0], cu_seqlens_k=cu[:, 1])
    out = fp8_attention(qv, kv, kv, cu_seqlens_q=cu[:, 0].contiguous(), cu_seqlens_k=cu[:, 1].contiguous())
    assert out.shape == qv.shape


def test_tune_attention_keeps_each_accumulation_in_its_own_table():
    """Timing flushing configs for a plain call would make every later plain call flush."""
    gen = torch.Generator().manual_seed(28)
    q = fp8(gen, 1, 8, 2, 32)
    flushing = [A.AttentionConfig(16, 32, pv_flush=True)]
    with pytest.raises(ValueError, match="every config's pv_flush must be False"):
        A.tune_attention(q, q, q, configs=flushing)
    with pytest.raises(ValueError, match="every config's pv_flush must be True"):
        A.tune_attention(q, q, q, configs=[A.AttentionConfig(16, 32)], pv_flush=True)
    with pytest.raises(TypeError, match="round_p_in_fp32: expected a bool"):
        fp8_attention(q, q, q, round_p_in_fp32="yes")
    with pytest.raises(TypeError, match="check_descales: expected a bool"):
        fp8_attention(q, q, q, check_descales="no")


@pytest.mark.skipif(DEV == "cuda", reason="the interpreter's decoding of e4m3fn NaN codes")
def test_nan_codes_are_refused_under_the_interpreter():
    """Triton 3.9's interpreter reads e4m3fn's NaN (0x7F) as 480, so a NaN input would give a finite,
    wrong output where a GPU gives NaN: the kernel refuses such inputs there."""
    gen = torch.Generator().manual_seed(27)
    q, k, v = fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32), fp8(gen, 1, 8, 2, 32)
    v.view(torch.uint8)[0, 3, 1, 5] = 0xFF
    with pytest.raises(ValueError, match="v: holds 1 NaN code"):
        fp8_attention(q, k, v)
    assert torch.isnan(attention_fa3_fp8(q, k, v)).any()  # the reference keeps the NaN


def test_explain_helpers():
    from pathlib import Path

    from fp8lab.kernels import explain

    gen = torch.Generator().manual_seed(17)
    q, k = fp8(gen, 1, 16, 2, 32, scale=3.0), fp8(gen, 1, 64, 1, 32, scale=3.0)
    qd, kd = torch.full((1, 1), 0.5, device=DEV), torch.full((1, 1), 0.7, device=DEV)  # peaked scores
    frac = explain.p_grid_fractions(q, k, qd, kd)
    assert frac.loc[0, "zero"] > frac.loc[1, "zero"]  # the offset rescues underflowing P
    assert abs(frac[["zero", "subnormal", "normal"]].sum(axis=1) - 1).max() < 1e-12
    assert explain.folded_scale_error(q, k, qd, kd) < 1e-12
    assert "from the last to the first" in explain.pseudo_code()
    v = fp8(gen, 1, 64, 1, 32)
    online = explain.online_softmax_check(q, k, v, qd, kd, kd, causal=True, block_ns=(16, 48))
    assert len(online) == 4 and online["max_abs_diff"].max() < 1e-10  # float64: exact up to rounding
    corr = explain.correctness_record(Path(__file__).parents[1] / "results" / "h200", "v2")
    assert len(corr) == 11 and corr["ratio"].between(0.05, 0.6).all()  # within the emulation's own error
    assert (corr["fa3_ratio"].dropna() > corr["ratio"][corr["fa3_ratio"].notna()]).all()  # FA3 sits further away
    with pytest.raises(ValueError, match="no correctness record"):
        explain.correctness_record(Path(__file__).parents[1] / "results" / "h200", "v99")
    rec = explain.tuning_record(Path(__file__).parents[1] / "results" / "h200")
    assert {"v1", "v2"} <= set(rec["version"]) and (rec["tflops"] > 100).all()
    ws = explain.ws_record(Path(__file__).parents[1] / "results" / "h200")
    v8 = ws[ws["version"] == "v8"]
    assert len(v8) == 36 and set(v8["kernel"]) == {"ws (Gluon)", "Triton default"}
    assert v8["ratio"].between(0.3, 1.5).all()
    v10 = explain.v10_record(Path(__file__).parents[1] / "results" / "h200")
    assert v10["case"].nunique() == 18 and (v10["kernel"] == "Gluon (ws)").sum() == 6
    assert v10["ratio"].between(0.3, 1.5).all()


def test_max_offset_sinks_shows_where_the_offset_pays():
    """No dominant key: the offset changes ~nothing. A sink: it cuts the error several times, most
    when the sink is among the keys visited first (the last ones; FA3 walks the blocks backwards)."""
    from functools import partial

    from fp8lab.kernels import explain

    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    emu = partial(attention_fa3_fp8, block_n=128)
    df = explain.max_offset_sinks(emu, (0.0, 8.0), seqlen_q=16, seqlen_k=640, heads_q=2, heads_kv=1,
                                  head_dim=64, seed=seed).set_index(["sink", "gap"])
    assert df.loc[(0, 0.0), "ratio"] == pytest.approx(1, abs=0.05)
    assert df.loc[(639, 0.0), "ratio"] == pytest.approx(1, abs=0.05)
    assert 1.5 < df.loc[(0, 8.0), "ratio"] < df.loc[(639, 8.0), "ratio"], (seed, df)
    assert df.loc[(0, 0.0), "sink_weight"] < 0.05 < 0.5 < df.loc[(0, 8.0), "sink_weight"]
    # the callable under test is what runs: the Triton kernel's figures are the emulation's at its block
    cfg = A.default_config(32)
    kernel = explain.max_offset_sinks(fp8_attention, (8.0,), sinks=(-1,), seqlen_q=8, seqlen_k=40, heads_q=2,
                                      heads_kv=1, head_dim=32, seed=seed, device=DEV)
    emu_k = explain.max_offset_sinks(partial(attention_fa3_fp8, block_n=cfg.block_n), (8.0,), sinks=(-1,),
                                     seqlen_q=8, seqlen_k=40, heads_q=2, heads_kv=1, head_dim=32, seed=seed, device=DEV)
    tol = 1e-3 if DEV == "cpu" else 0.15  # the interpreter gives the emulation's bits; a GPU ex2.approx and FMAs
    for col in ("rel_l2, offset 0", "rel_l2, offset 8"):
        assert kernel[col][0] == pytest.approx(emu_k[col][0], rel=tol), (seed, col)


def test_permuted_keys_make_p_a_register_renaming():
    """FP8 step 5 on the kernel's own `key_order`: with it, each thread's accumulator columns hold
    exactly the keys the e4m3 A operand needs from it; without, 24 of a quad's 32 come from other threads."""
    from fp8lab.kernels import explain

    layout = explain.p_register_layout(device=DEV)
    assert layout["fetched from other threads, plain"].tolist() == [4, 8, 8, 4]
    assert (layout["fetched from other threads, permute_keys"] == 0).all()
    held = [k for keys in layout["keys held, permute_keys"] for k in keys]
    assert sorted(held) == list(range(32))  # a permutation of the 32 keys


def test_configs_are_named_and_small():
    for d in (64, 128, 256):
        cands = A.attention_configs(d)
        assert 1 < len(cands) <= 16 and len({c.label() for c in cands}) == len(cands)
        assert A.default_config(d).block_n in (16, 32, 64, 128)
    assert A.FA3_MAX_OFFSET == 8.0 and math.isclose(A.LOG2E * A.LN2, 1.0)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_matches_emulation_at_kernel_sizes(d, causal):
    gen = torch.Generator().manual_seed(d + causal)
    q, k, v = fp8(gen, 2, 203, 8, d), fp8(gen, 2, 203, 2, d), fp8(gen, 2, 203, 2, d)
    check_against_emulation(q, k, v, descales(gen, 2, 2), causal=causal)
    ref = fp8_attention(q, k, v, causal=causal)
    assert torch.equal(ref, fp8_attention(q, k, pretranspose_v(v), causal=causal))
    assert torch.equal(ref, fp8_attention(q, k, v, causal=causal, round_p_in_fp32=True))


def test_pv_flush_gives_the_same_bits_under_the_interpreter_and_a_label():
    """`pv_flush` changes only how the FP8 MMA accumulates P V on Hopper; the interpreter's products are
    exact either way, so on the CPU it gives the plain kernel's (and the emulation's) bits."""
    gen = torch.Generator().manual_seed(27)
    q, k, v = fp8(gen, 2, 45, 4, 32), fp8(gen, 2, 70, 2, 32), fp8(gen, 2, 70, 2, 32)
    ds = descales(gen, 2, 2)
    plain = A.AttentionConfig(32, BN, 4, 2)
    flush = A.AttentionConfig(32, BN, 4, 2, pv_flush=True)
    assert flush.label() == f"m32n{BN}w4s2-pf"
    for causal in (False, True):
        out, lse = fp8_attention(q, k, v, *ds, causal=causal, config=flush, return_lse=True)
        ref, ref_lse = fp8_attention(q, k, v, *ds, causal=causal, config=plain, return_lse=True)
        assert torch.equal(lse, ref_lse)
        if DEV == "cpu":
            assert torch.equal(out, ref)
            assert_emulation_bits(out, attention_fa3_fp8(q, k, v, *ds, causal=causal, block_n=BN))


def test_pv_flush_keyword_takes_its_own_default_tiles_and_refuses_a_config_that_disagrees():
    """`fp8_attention(..., pv_flush=True)` runs `default_config(..., pv_flush=True)` (v28: on Hopper, tiles
    whose second fp32 tile fits in registers); a config given with it must flush too."""
    from fp8lab.kernels import explain

    gen = torch.Generator().manual_seed(28)
    q, k, v = fp8(gen, 1, 33, 2, 64), fp8(gen, 1, 50, 2, 64), fp8(gen, 1, 50, 2, 64)
    ds = descales(gen, 1, 2)
    for d in (64, 96, 128, 256):
        for causal in (False, True):
            for pick in (A.default_config, A.gpu_config):
                assert pick(d, causal, pv_flush=True).pv_flush and not pick(d, causal).pv_flush
            flush = A.gpu_config(d, causal, pv_flush=True)  # v28: 64 query rows per warpgroup where that fits
            assert flush in A.PV_FLUSH_CANDIDATES[64 if d <= 64 else 128 if d <= 128 else 256] or (
                flush == replace(A.gpu_config(d, causal), pv_flush=True))
            if d == 128:
                assert explain.flush_registers(flush, d)["total"] <= 255
    assert all(c.pv_flush for cands in A.PV_FLUSH_CANDIDATES.values() for c in cands)
    out = fp8_attention(q, k, v, *ds, pv_flush=True)
    assert torch.equal(out, fp8_attention(q, k, v, *ds, config=A.default_config(64, False, pv_flush=True)))
    with pytest.raises(ValueError, match="pv_flush=True, but config m32n.*has pv_flush=False"):
        fp8_attention(q, k, v, *ds, pv_flush=True, config=A.AttentionConfig(32, BN, 4, 2))


def test_flush_registers_counts_whole_rows_per_warpgroup():
    from fp8lab.kernels import explain

    C = A.AttentionConfig
    one_group = explain.flush_registers(C(128, 128, 4, 3, pv_flush=True), 128)  # 128 rows on one warpgroup
    assert (one_group["s"], one_group["o"], one_group["pv_tile"], one_group["total"]) == (128, 128, 128, 384)
    two_groups = explain.flush_registers(C(128, 64, 8, 4), 256)  # 64 rows each; no flush tile
    assert (two_groups["rows_per_warpgroup"], two_groups["s"], two_groups["o"], two_groups["pv_tile"]) == (64, 32, 128, 0)
    with pytest.raises(ValueError, match="whole query rows.*block_m=64, num_warps=8"):
        explain.flush_registers(C(64, 64, 8, 3), 256)  # Triton splits such a tile's columns between warpgroups


@pytest.mark.gpu
@pytest.mark.hopper
def test_gpu_pv_accumulation_follows_the_fp8_mma_model_and_pv_flush_stays_flat():
    """Hopper's FP8 MMA keeps ~13 bits of its accumulator: with O accumulated across all key blocks (the
    default, upstream FA3's) the error grows with the context as the emulation's accumulator model says;
    `pv_flush` (vLLM's two levels) stays at the fp32-accumulation error in every tile the kit offers for it, and
    in the Gluon kernel (v27, v28; scripts/probe_long_context.py, scripts/probe_pv_flush.py)."""
    from fp8lab.data import make_qkv
    from fp8lab.kernels.attention_ws import fp8_attention_ws, key_ordered_vt, ws_supported
    from fp8lab.reference import AccumulatorModel, quantize_qkv

    q, k, v = make_qkv("normal", seqlen_q=16, seqlen_k=16384, heads_q=4, head_dim=128, seed=5, device=DEV)
    v = v + 1.0  # P V grows with the context, as with real value vectors
    exact = attention_exact(q, k, v)
    qq = quantize_qkv(q, k, v)
    ds = list(qq.descales.values())
    cfg = A.default_config(128, False)
    vt = pretranspose_v(qq.v)
    plain = rel_l2(fp8_attention(qq.q, qq.k, vt, *ds, config=cfg), exact)
    model = rel_l2(attention_fa3_fp8(qq.q, qq.k, qq.v, *ds, block_n=cfg.block_n,
                                     accumulator=AccumulatorModel(13, apply_to_qk=False)), exact)
    fp32 = rel_l2(attention_fa3_fp8(qq.q, qq.k, qq.v, *ds, block_n=cfg.block_n), exact)
    assert abs(plain - model) < 0.05 * model and model > 20 * fp32
    flushed = {c.label(): fp8_attention(qq.q, qq.k, vt, *ds, config=c)
               for c in (replace(cfg, pv_flush=True), *A.PV_FLUSH_CANDIDATES[128])}
    flushed["pv_flush=True"] = fp8_attention(qq.q, qq.k, vt, *ds, pv_flush=True)
    if ws_supported():  # the Gluon kernel: the same model without the flush, flat with it
        vk = key_ordered_vt(qq.v)
        ws = {f: fp8_attention_ws(qq.q, qq.k, vk, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], pv_flush=f)[0]
              for f in (False, True)}
        assert abs(rel_l2(ws[False], exact) - model) < 0.05 * model
        flushed["gluon pv_flush=True"] = ws[True]
    for label, out in flushed.items():
        assert rel_l2(out, exact) < 1.5 * fp32, label
