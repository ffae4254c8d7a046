"""fp8lab.attention on the CPU: results, the dequantize fallback, bad inputs, and every
provider's calling convention checked against look-alikes with the real signatures."""

from __future__ import annotations

import ast
import inspect
import sys
import types

import pytest
import torch

from fp8lab import env, reference
from fp8lab.backends import api, gating, providers
from fp8lab.backends.api import BackendError, attention, dequantize_inputs
from fp8lab.formats import cast_to_fp8
from fp8lab.layout import check_attention_inputs

GEN = torch.Generator().manual_seed(20261129)


def randn(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=GEN).to(dtype)


def cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def rand_descale(batch: int, heads_kv: int) -> torch.Tensor:
    return (0.5 + torch.rand(batch, heads_kv, generator=GEN)) / 64


def fp8_inputs(batch, sq, sk, hq, hkv, d, varlen_lengths=None):
    """Random FP8 q/k/v with random per-(batch, kv head) descales: x ~ N(0,1) quantized as x/descale."""
    if varlen_lengths:
        shapes = [(sum(varlen_lengths), hq, d), (sum(varlen_lengths), hkv, d), (sum(varlen_lengths), hkv, d)]
        batch = len(varlen_lengths)
    else:
        shapes = [(batch, sq, hq, d), (batch, sk, hkv, d), (batch, sk, hkv, d)]
    ds = [rand_descale(batch, hkv) for _ in range(3)]
    xs = [cast_to_fp8(randn(*s) * 30) for s in shapes]  # values up to ~±100 of the e4m3 grid
    return xs, ds


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


# ----------------------------------------------------------------------------- results

@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_exact_in_fp32(varlen, causal):
    """fp32 SDPA (bottom-right causal, GQA 4, seqlen_q != seqlen_k) equals float64 exact attention to fp32 accuracy."""
    if varlen:
        lq, lk = [113, 7, 40], [203, 7, 29]  # includes seqlen_q > seqlen_k: fully masked causal rows
        q, k, v = randn(sum(lq), 8, 64), randn(sum(lk), 2, 64), randn(sum(lk), 2, 64)
        kw = dict(cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk))
    else:
        q, k, v = randn(2, 113, 8, 64), randn(2, 203, 2, 64), randn(2, 203, 2, 64)
        kw = {}
    out = attention(q, k, v, causal=causal, backend="sdpa", softmax_scale=0.1, **kw)
    ref = reference.attention_exact(q, k, v, causal=causal, softmax_scale=0.1, **kw)
    assert out.dtype == torch.float32
    assert (out.double() - ref).abs().max().item() < 1e-5


def test_auto_on_cpu_picks_sdpa_for_bf16_and_its_error_is_that_of_bf16():
    q, k, v = randn(2, 203, 4, 128, dtype=torch.bfloat16), randn(2, 203, 4, 128, dtype=torch.bfloat16), \
        randn(2, 203, 4, 128, dtype=torch.bfloat16)
    assert api.choose_backend(q, k, v).label() == "sdpa:sdpa"
    out = attention(q, k, v, causal=True)
    exact = reference.attention_exact(q, k, v, causal=True)
    rounding = (exact.to(torch.bfloat16).double() - exact).abs().max().item()
    assert out.dtype == torch.bfloat16
    assert 0 < (out.double() - exact).abs().max().item() <= 8 * rounding


def test_fp8_on_cpu_runs_the_fa3_emulation():
    (q, k, v), (qd, kd, vd) = fp8_inputs(2, 113, 113, 4, 2, 64)
    out, lse = attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=True, return_lse=True)
    ref_out, ref_lse = reference.attention_fa3_fp8(q, k, v, qd, kd, vd, causal=True, return_lse=True)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32 and lse.shape == (2, 4, 113)
    assert torch.equal(out, ref_out.to(torch.bfloat16))
    assert torch.equal(lse, ref_lse.to(torch.float32))


def test_reference_backend_lse_layouts():
    lq = [113, 203]
    q, k, v = randn(sum(lq), 4, 64), randn(sum(lq), 2, 64), randn(sum(lq), 2, 64)
    out, lse = attention(q, k, v, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lq), backend="reference", return_lse=True)
    assert out.shape == (316, 4, 64) and lse.shape == (4, 316)
    out_b, lse_b = attention(q[:113][None], k[:113][None], v[:113][None], backend="reference", return_lse=True)
    assert lse_b.shape == (1, 4, 113)
    assert torch.allclose(lse_b[0], lse[:, :113]) and torch.allclose(out_b[0], out[:113])


@pytest.mark.parametrize("varlen", [False, True])
def test_reference_out_is_contiguous_as_other_providers(varlen):
    """The emulation computes a head-major out; attention returns it contiguous, as SDPA, FA3 and the
    Triton kernel do, so out.view(..., heads * head_dim) works whichever provider ran."""
    lens = [9, 23]
    (q, k, v), (qd, kd, vd) = fp8_inputs(2, 23, 23, 4, 2, 32, varlen_lengths=lens if varlen else None)
    kw = dict(cu_seqlens_q=cu(lens), cu_seqlens_k=cu(lens)) if varlen else {}
    out = attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=True, backend="reference", **kw)
    want = reference.attention_fa3_fp8(q, k, v, qd, kd, vd, causal=True, **kw)
    assert out.is_contiguous() and torch.equal(out, want)
    assert out.view(*out.shape[:-2], -1).shape[-1] == 4 * 32


def test_auto_with_lse_on_cpu_falls_to_the_reference():
    q = randn(1, 16, 2, 64, dtype=torch.bfloat16)
    assert api.choose_backend(q, q, q, return_lse=True).label() == "reference:reference"
    out, lse = attention(q, q, q, return_lse=True)
    assert lse.shape == (1, 2, 16)


def test_choose_backend_takes_attentions_arguments():
    """`choose_backend(**kwargs)` with the kwargs of an `attention` call: the same decision, and the
    same checks; an argument neither takes is named."""
    q = randn(1, 16, 2, 64, dtype=torch.bfloat16)
    assert api.choose_backend(q, q, q, causal=True, softmax_scale=0.1) == api.choose_backend(q, q, q)
    with pytest.raises(TypeError, match="causal: expected a bool"):
        api.choose_backend(q, q, q, causal="yes")
    with pytest.raises(ValueError, match="softmax_scale: expected a number > 0"):
        api.choose_backend(q, q, q, softmax_scale=-1.0)
    with pytest.raises(TypeError, match=r"choose_backend: unexpected argument \(\{'window'\}\)"):
        api.choose_backend(q, q, q, window=4)


# ----------------------------------------------------------------------------- prepare_attention

@pytest.mark.parametrize("varlen", [False, True])
def test_prepared_call_checks_once_and_reads_the_buffers_each_call(monkeypatch, varlen):
    lengths = [37, 70] if varlen else None
    (q, k, v), (qd, kd, vd) = fp8_inputs(2, 37, 37, 4, 2, 64, lengths)
    kw = dict(cu_seqlens_q=cu(lengths), cu_seqlens_k=cu(lengths)) if varlen else {}
    kw.update(q_descale=qd, k_descale=kd, v_descale=vd, causal=True, return_lse=True)
    checks = []
    original = api.check_attention_inputs
    monkeypatch.setattr(api, "check_attention_inputs", lambda *a, **k: checks.append(1) or original(*a, **k))
    prepared = api.prepare_attention(q, k, v, **kw)
    assert prepared.provider == "reference" and len(checks) == 1
    layout = "varlen q (107, 4, 64) k (107, 2, 64)" if varlen else "batched q (2, 37, 4, 64) k (2, 37, 2, 64)"
    assert repr(prepared) == f"PreparedAttention(reference:reference, {layout} float8_e4m3fn, causal=True, return_lse=True)"
    first = prepared()
    q.copy_(cast_to_fp8(randn(*q.shape) * 30))  # a new step's queries, written into the same buffer
    qd.mul_(1.5)
    second = prepared()
    assert len(checks) == 1
    for got, want in zip(second, attention(q, k, v, **kw)):
        assert torch.equal(got, want)
    assert not torch.equal(first[0], second[0])


def test_prepared_dequantize_fallback_dequantizes_each_call():
    (q, k, v), (qd, kd, vd) = fp8_inputs(1, 40, 40, 4, 2, 64)
    kw = dict(q_descale=qd, k_descale=kd, v_descale=vd, backend="sdpa", fp8_fallback="dequantize")
    prepared = api.prepare_attention(q, k, v, **kw)
    assert prepared.decision.dequantize and prepared.provider == "sdpa"
    kd.mul_(2.0)
    assert torch.equal(prepared(), attention(q, k, v, **kw))


# ----------------------------------------------------------------------------- dequantize fallback

@pytest.mark.parametrize("varlen", [False, True])
def test_dequantize_fallback_equals_sdpa_on_dequantized_inputs(varlen):
    lengths = [113, 203] if varlen else None
    (q, k, v), (qd, kd, vd) = fp8_inputs(2, 113, 113, 8, 2, 64, lengths)
    kw = dict(cu_seqlens_q=cu(lengths), cu_seqlens_k=cu(lengths)) if varlen else {}
    with pytest.raises(BackendError, match="not FP8"):
        attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, backend="sdpa", **kw)
    out = attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, backend="sdpa", fp8_fallback="dequantize", **kw)
    shape = check_attention_inputs(q, k, v, **kw)
    qb, kb, vb = dequantize_inputs(q, k, v, shape, qd, kd, vd)
    assert torch.equal(out, attention(qb, kb, vb, backend="sdpa", **kw))
    exact = reference.attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, **kw)
    assert rel_l2(out, exact) < 0.02  # bf16 rounding of inputs and output only


def test_dequantize_inputs_uses_the_kv_head_of_each_query_head():
    q = cast_to_fp8(randn(1, 3, 4, 16) * 10)
    qd = torch.tensor([[0.5, 2.0]])
    qb, _, _ = dequantize_inputs(q, q[:, :, :2], q[:, :, :2], check_attention_inputs(q, q[:, :, :2], q[:, :, :2]), qd, None, None)
    expect = q.float() * torch.tensor([0.5, 0.5, 2.0, 2.0])[None, None, :, None]
    assert torch.equal(qb, expect.to(torch.bfloat16))


# ----------------------------------------------------------------------------- FP8 into FA2

@pytest.fixture
def simulated_ampere_with_fa2(monkeypatch):
    """attention() sees an Ampere GPU with vLLM's FA2 installed: gating runs, no kernel can."""
    monkeypatch.setattr(api, "device_of", lambda t: gating.Device((8, 0), "simulated A100"))
    monkeypatch.setattr(providers, "_PROBES", {n: (n in ("vllm-fa2", "sdpa"), "simulated") for n in gating.PROVIDERS})
    calls = []
    monkeypatch.setattr(providers.VllmFA3, "run", lambda self, call: calls.append(call) or (_ for _ in ()).throw(
        AssertionError("kernel ran")))
    return calls


def test_gpu_only_providers_on_the_cpu_say_so():
    (q, k, v), _ = fp8_inputs(1, 16, 16, 2, 2, 64)
    for backend, names in (("fa3", ("vllm", "fa3-fwd")), ("triton:gluon", ("gluon",))):
        with pytest.raises(BackendError) as e:
            attention(q, k, v, backend=backend)
        for name in names:
            assert e.value.decision.rejected[name] == ("needs a CUDA GPU; this is the CPU",)


def test_fp8_given_to_fa2_raises_before_any_kernel(simulated_ampere_with_fa2):
    (q, k, v), (qd, kd, vd) = fp8_inputs(1, 16, 16, 2, 2, 64)
    for backend in ("fa2", "auto"):
        with pytest.raises(BackendError) as e:
            attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, backend=backend)
        msg = str(e.value)
        assert "FA2 cannot run FP8" in msg and "fp8_fallback='dequantize'" in msg and "A100" in msg
        assert isinstance(e.value, ValueError) and not e.value.decision.ok
    assert simulated_ampere_with_fa2 == []
    # with the fallback FA2 is chosen and gets bf16 inputs and no descales
    with pytest.raises(AssertionError, match="kernel ran"):
        attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, backend="fa2", fp8_fallback="dequantize")
    (call,) = simulated_ampere_with_fa2
    assert call.q.dtype == torch.bfloat16 and call.q_descale is None


# ----------------------------------------------------------------------------- bad input

@pytest.fixture
def no_kernel(monkeypatch):
    """Every provider's run() fails loudly, so a test proves the error came first."""
    def boom(self, call):
        raise AssertionError(f"{self.name} kernel ran")
    for cls in {type(p) for p in providers._ADAPTERS.values()}:
        monkeypatch.setattr(cls, "run", boom)


def _fp8(*shape):
    return cast_to_fp8(randn(*shape))


BAD_INPUTS = [
    ("fp8 q with bf16 k", lambda: (_fp8(1, 8, 2, 64), randn(1, 8, 2, 64, dtype=torch.bfloat16),
                                   randn(1, 8, 2, 64, dtype=torch.bfloat16), {}), TypeError, "share one dtype"),
    ("int8 inputs", lambda: (*(torch.zeros(1, 8, 2, 64, dtype=torch.int8),) * 3, {}), TypeError, "expected one of"),
    ("q heads not divisible by kv heads", lambda: (randn(1, 8, 6, 64), randn(1, 8, 4, 64), randn(1, 8, 4, 64), {}),
     ValueError, "multiple of heads_kv"),
    ("descale of the wrong shape", lambda: (_fp8(2, 8, 4, 64), _fp8(2, 8, 2, 64), _fp8(2, 8, 2, 64),
                                            {"k_descale": torch.ones(2, 4)}), ValueError, r"expected shape \(batch, heads_kv\) = \(2, 2\)"),
    ("descale of the wrong dtype", lambda: (_fp8(2, 8, 4, 64), _fp8(2, 8, 2, 64), _fp8(2, 8, 2, 64),
                                            {"q_descale": torch.ones(2, 2, dtype=torch.float64)}), TypeError, "float32"),
    ("descale on another device", lambda: (_fp8(2, 8, 4, 64), _fp8(2, 8, 2, 64), _fp8(2, 8, 2, 64),
                                           {"v_descale": torch.ones(2, 2, device="meta")}), ValueError, "expected it on cpu"),
    ("descale given for bf16", lambda: (*(randn(1, 8, 2, 64, dtype=torch.bfloat16),) * 3, {"q_descale": torch.ones(1, 2)}),
     ValueError, "FP8 inputs only"),
    ("non-contiguous last dim", lambda: (randn(1, 64, 2, 8).transpose(1, 3), randn(1, 8, 2, 64), randn(1, 8, 2, 64), {}),
     ValueError, "must be contiguous"),
    ("cu_seqlens not ending at the token count", lambda: (randn(30, 2, 64), randn(30, 2, 64), randn(30, 2, 64),
                                                          {"cu_seqlens_q": cu([10, 19]), "cu_seqlens_k": cu([10, 20])}),
     ValueError, "last entry must equal the 30 tokens"),
    ("cu_seqlens int64", lambda: (randn(30, 2, 64), randn(30, 2, 64), randn(30, 2, 64),
                                  {"cu_seqlens_q": cu([10, 20]).long(), "cu_seqlens_k": cu([10, 20])}), TypeError, r"expected int32 \(FA3.s\), got int64; pass cu_seqlens_q.to\(torch.int32\)"),
    ("cu_seqlens decreasing", lambda: (randn(30, 2, 64), randn(30, 2, 64), randn(30, 2, 64),
                                       {"cu_seqlens_q": torch.tensor([0, 20, 10, 30], dtype=torch.int32),
                                        "cu_seqlens_k": cu([10, 10, 10])}), ValueError, "non-decreasing"),
    ("max_seqlen smaller than a sequence", lambda: (randn(30, 2, 64), randn(30, 2, 64), randn(30, 2, 64),
                                                    {"cu_seqlens_q": cu([10, 20]), "cu_seqlens_k": cu([10, 20]),
                                                     "max_seqlen_q": 15}), ValueError, "max_seqlen_q"),
    ("head dim the provider cannot take", lambda: (_fp8(1, 8, 2, 72), _fp8(1, 8, 2, 72), _fp8(1, 8, 2, 72),
                                                   {"backend": "triton"}), BackendError, "multiple of 16"),
    ("folded scale beyond float32", lambda: (_fp8(2, 8, 4, 64), _fp8(2, 8, 2, 64), _fp8(2, 8, 2, 64),
                                             {"q_descale": torch.rand(2, 2) + 0.5,
                                              "k_descale": torch.tensor([[1.0, 1e30], [1.0, 1.0]]),
                                              "softmax_scale": 1e15}),
     ValueError, r"expected finite and > 0 in float32.*got inf at \(batch, kv head\) \(0, 1\)"),
    ("NaN softmax_scale", lambda: (*(randn(1, 8, 2, 64),) * 3, {"softmax_scale": float("nan")}), ValueError, "softmax_scale"),
    ("causal not a bool", lambda: (*(randn(1, 8, 2, 64),) * 3, {"causal": "yes"}), TypeError, "causal"),
    ("unknown backend", lambda: (*(randn(1, 8, 2, 64),) * 3, {"backend": "fa4"}), ValueError, "backend"),
    ("unknown fp8_fallback", lambda: (*(_fp8(1, 8, 2, 64),) * 3, {"fp8_fallback": "upcast"}), ValueError, "fp8_fallback"),
    ("lse from a provider without it", lambda: (*(randn(1, 8, 2, 64),) * 3, {"backend": "sdpa", "return_lse": True}),
     BackendError, "logsumexp"),
]


@pytest.mark.parametrize("make, error, match", [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS])
@pytest.mark.parametrize("entry", [attention, api.prepare_attention], ids=["attention", "prepare_attention"])
def test_bad_input_fails_before_any_kernel(no_kernel, make, error, match, entry):
    q, k, v, kw = make()
    with pytest.raises(error, match=match):
        entry(q, k, v, **kw)


def test_triton_head_dim_rejection_for_fa3_on_simulated_hopper(monkeypatch, no_kernel):
    monkeypatch.setattr(api, "device_of", lambda t: gating.Device((9, 0), "simulated H100"))
    monkeypatch.setattr(providers, "_PROBES", {n: (n == "fa3-fwd", "simulated") for n in gating.PROVIDERS})
    q = _fp8(1, 8, 2, 72)
    with pytest.raises(BackendError, match=r"fa3-fwd: head_dim 72 is not a multiple of 16 \(required for FP8 inputs\)"):
        attention(q, q, q, backend="fa3")


# ----------------------------------------------------------------------------- calling conventions

# `_vllm_fa3_C::fwd` as vllm 0.33.0's _vllm_fa3_C.abi3.so registers it (strings of the library).
VLLM_FA3_SCHEMA = (
    "fwd(Tensor!  q,    Tensor   k,    Tensor   v,    Tensor?  k_new,    Tensor?  v_new,    Tensor?  q_v,    "
    "Tensor!? out,    Tensor?  cu_seqlens_q,    Tensor?  cu_seqlens_k,    Tensor?  cu_seqlens_k_new,    "
    "Tensor?  seqused_q,    Tensor?  seqused_k,    int?     max_seqlen_q,    int?     max_seqlen_k,    "
    "Tensor?  page_table,    Tensor?  kv_batch_idx,    Tensor?  leftpad_k,    Tensor?  rotary_cos,    "
    "Tensor?  rotary_sin,    Tensor?  seqlens_rotary,    Tensor?  q_descale,    Tensor?  k_descale,    "
    "Tensor?  v_descale,    float    softmax_scale,    bool     is_causal,    int      window_size_left,    "
    "int      window_size_right,    float    softcap,    bool     is_rotary_interleaved,    "
    "Tensor?  scheduler_metadata,    int      num_splits,    bool?    pack_gqa,    int      sm_margin,    "
    "Tensor?  s_aux,    int      cp_world_size,    int      cp_rank,    Tensor?  cp_tot_seqused_k) -> Tensor[]"
)
SEEN: dict[str, object] = {}


def _fake_vllm_fwd(*args):
    a = dict(zip(providers.VLLM_FA3_FWD_ARGS, args))
    SEEN.clear()
    SEEN.update(a)
    assert a["cu_seqlens_q"] is not None, "vLLM's FA3 entry is varlen only"
    descales = {n: a[n] for n in ("q_descale", "k_descale", "v_descale")} if a["q"].dtype == torch.float8_e4m3fn else {}
    fn = reference.attention_fa3_fp8 if descales else reference.attention_exact
    out, lse = fn(a["q"], a["k"], a["v"], **descales, causal=a["is_causal"], softmax_scale=a["softmax_scale"],
                  cu_seqlens_q=a["cu_seqlens_q"], cu_seqlens_k=a["cu_seqlens_k"],
                  max_seqlen_q=a["max_seqlen_q"], max_seqlen_k=a["max_seqlen_k"], return_lse=True)
    out = out.to(torch.bfloat16 if descales else a["q"].dtype)
    return [out, lse.float(), torch.empty(0), torch.empty(0)]


@pytest.fixture(scope="module")
def fake_vllm_op():
    lib = torch.library.Library("fp8lab_test_vllm_fa3", "DEF")
    lib.define(VLLM_FA3_SCHEMA)
    lib.impl("fwd", _fake_vllm_fwd, "CPU")
    yield torch.ops.fp8lab_test_vllm_fa3.fwd
    del lib


def test_vllm_schema_check(fake_vllm_op):
    assert providers.check_vllm_fa3_schema(fake_vllm_op) is None
    lib = torch.library.Library("fp8lab_test_vllm_fa3_old", "DEF")
    lib.define("fwd(Tensor q, Tensor k, Tensor v, Tensor? q_descale) -> Tensor[]")
    assert "adapter was written for vllm 0.33.0" in providers.check_vllm_fa3_schema(torch.ops.fp8lab_test_vllm_fa3_old.fwd)


@pytest.mark.parametrize("varlen", [False, True])
def test_vllm_fa3_adapter_matches_the_reference(fake_vllm_op, varlen):
    """Batched calls go in as varlen with cu_seqlens 0, s, 2s; descales reach the op untouched (strides too)."""
    lengths = [113, 203] if varlen else None
    (q, k, v), (qd, kd, vd) = fp8_inputs(2, 113, 113, 8, 2, 64, lengths)
    kd = kd.t().contiguous().t()  # transposed view: strides (1, 2)
    qd = torch.tensor(0.02).expand(2, 2)  # stride 0
    kw = dict(cu_seqlens_q=cu(lengths), cu_seqlens_k=cu(lengths), max_seqlen_q=203, max_seqlen_k=203) if varlen else {}
    shape = check_attention_inputs(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, **kw)
    call = providers.AttentionCall(q, k, v, shape, True, 0.125, qd, kd, vd, return_lse=True, **kw)
    out, lse = providers.vllm_fa3_fwd(fake_vllm_op, call)
    for name, d in (("q_descale", qd), ("k_descale", kd), ("v_descale", vd)):
        got = SEEN[name]
        assert got.data_ptr() == d.data_ptr() and got.stride() == d.stride(), name
    assert SEEN["num_splits"] == 0 and SEEN["window_size_left"] == -1 and SEEN["cp_world_size"] == 1
    if not varlen:
        assert SEEN["cu_seqlens_q"].tolist() == [0, 113, 226] and SEEN["max_seqlen_q"] == 113
        assert SEEN["q"].shape == (226, 8, 64)
    ref_out, ref_lse = reference.attention_fa3_fp8(q, k, v, qd, kd, vd, causal=True, softmax_scale=0.125,
                                                   return_lse=True, **kw)
    assert out.shape == q.shape and lse.shape == ref_lse.shape
    assert torch.equal(out, ref_out.to(torch.bfloat16)) and torch.equal(lse, ref_lse.float())


def _fake_fa3_module(name: str) -> tuple[types.ModuleType, list]:
    """A module with fa3_fwd_interface's two entry points (same parameters), computing with the reference."""
    log: list = []

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                        v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                        pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
        log.append(("batched", dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)))
        o, l = reference.attention_fa3_fp8(q, k, v, q_descale, k_descale, v_descale, causal=causal,
                                           softmax_scale=softmax_scale, return_lse=True)
        return (o.to(torch.bfloat16), l.float()) if return_attn_probs else o.to(torch.bfloat16)

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                               seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                               k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                               num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
        log.append(("varlen", dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)))
        o, l = reference.attention_fa3_fp8(q, k, v, q_descale, k_descale, v_descale, causal=causal,
                                           softmax_scale=softmax_scale, cu_seqlens_q=cu_seqlens_q,
                                           cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                                           max_seqlen_k=max_seqlen_k, return_lse=True)
        return (o.to(torch.bfloat16), l.float()) if return_attn_probs else o.to(torch.bfloat16)

    mod = types.ModuleType(name)
    mod.flash_attn_func, mod.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    return mod, log


def test_fake_module_has_the_real_signatures():
    """The look-alike's parameters are fa3_fwd_interface's (read from the wheel when it is here)."""
    import zipfile
    from pathlib import Path

    wheel = next(Path(__file__).resolve().parents[1].glob(".gpu/fa3_fwd-*.whl"), None)
    if wheel is None:
        pytest.skip("fa3-fwd wheel not in .gpu/")
    tree = ast.parse(zipfile.ZipFile(wheel).read("fa3_fwd_interface.py").decode())
    real = {f.name: [a.arg for a in f.args.args] for f in tree.body if isinstance(f, ast.FunctionDef)}
    mod, _ = _fake_fa3_module("x")
    for fn in (mod.flash_attn_func, mod.flash_attn_varlen_func):
        assert list(inspect.signature(fn).parameters) == real[fn.__name__]


@pytest.mark.parametrize("provider, module", [("fa3-fwd", "fa3_fwd_interface"), ("flash-attn-3", "flash_attn_interface")])
@pytest.mark.parametrize("varlen", [False, True])
def test_fa3_interface_adapters_end_to_end(monkeypatch, provider, module, varlen):
    """attention(backend='fa3') on a simulated Hopper reaches the provider's entry point with descales untouched."""
    mod, log = _fake_fa3_module(module)
    monkeypatch.setitem(sys.modules, module, mod)
    monkeypatch.setattr(api, "device_of", lambda t: gating.Device((9, 0), "simulated H100"))
    monkeypatch.setattr(providers, "_PROBES", {n: (n == provider, "simulated") for n in gating.PROVIDERS})
    lengths = [113, 203] if varlen else None
    (q, k, v), (qd, kd, vd) = fp8_inputs(2, 113, 113, 8, 2, 128, lengths)
    vd = vd.t().contiguous().t()
    kw = dict(cu_seqlens_q=cu(lengths), cu_seqlens_k=cu(lengths)) if varlen else {}
    out, lse = attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=True, backend="fa3",
                         softmax_scale=0.1, return_lse=True, **kw)  # not head_dim ** -0.5: the scale must get there
    (kind, got), = log
    assert kind == ("varlen" if varlen else "batched")
    assert got["q_descale"] is qd and got["k_descale"] is kd and got["v_descale"] is vd
    ref, ref_lse = reference.attention_fa3_fp8(q, k, v, qd, kd, vd, causal=True, softmax_scale=0.1, return_lse=True,
                                               **kw)
    assert torch.equal(out, ref.to(torch.bfloat16)) and torch.equal(lse, ref_lse.float())


def test_vllm_package_adapter_is_varlen_with_fa_version(monkeypatch):
    seen = {}

    def flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None,
                               q_v=None, dropout_p=0.0, softmax_scale=None, causal=False, window_size=None,
                               softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                               block_table=None, return_softmax_lse=False, out=None, scheduler_metadata=None,
                               q_descale=None, k_descale=None, v_descale=None, num_splits=0, output_scale=None,
                               fa_version=2, **rest):
        seen.update(fa_version=fa_version, cu=cu_seqlens_q.tolist(), q_descale=q_descale)
        o, l = reference.attention_exact(q, k, v, causal=causal, softmax_scale=softmax_scale, cu_seqlens_q=cu_seqlens_q,
                                         cu_seqlens_k=cu_seqlens_k, return_lse=True)
        return o.to(q.dtype), l.float()

    pkg = types.ModuleType("vllm.vllm_flash_attn")
    pkg.flash_attn_varlen_func = flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.vllm_flash_attn", pkg)
    q, k, v = randn(2, 16, 4, 64, dtype=torch.bfloat16), randn(2, 16, 2, 64, dtype=torch.bfloat16), \
        randn(2, 16, 2, 64, dtype=torch.bfloat16)
    shape = check_attention_inputs(q, k, v)
    want, want_lse = reference.attention_exact(q, k, v, causal=True, softmax_scale=0.1, return_lse=True)
    for prov, version in ((providers.VllmFA3(), 3), (providers.VllmFA2(), 2)):
        out, lse = prov.run(providers.AttentionCall(q, k, v, shape, True, 0.1, return_lse=True))
        assert seen["fa_version"] == version and seen["cu"] == [0, 16, 32]
        assert out.shape == q.shape and lse.shape == (2, 4, 16)
        # causal and a scale other than head_dim ** -0.5: both must reach the entry point
        assert torch.equal(out, want.to(torch.bfloat16)) and torch.equal(lse, want_lse.float())


def test_flash_attn_2_adapter(monkeypatch):
    """flash-attn 2.x's entry points get the call's causal and softmax_scale; a varlen lse padded to
    (batch, heads, max_seqlen_q), as flash-attn < 2.4 returns it, comes back packed (heads, total)."""
    mod = types.ModuleType("flash_attn")
    mod.__version__ = "2.7.4"
    pad_lse = [False]

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                        alibi_slopes=None, deterministic=False, return_attn_probs=False):
        o, l = reference.attention_exact(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
        return o.to(q.dtype), l.float(), None

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=False, return_attn_probs=False, block_table=None):
        o, l = reference.attention_exact(q, k, v, causal=causal, softmax_scale=softmax_scale, cu_seqlens_q=cu_seqlens_q,
                                         cu_seqlens_k=cu_seqlens_k, return_lse=True)
        if pad_lse[0]:  # NaN past each sequence's end: none of it may come back
            starts, lens = cu_seqlens_q[:-1].tolist(), cu_seqlens_q.diff().tolist()
            padded = torch.full((len(lens), l.shape[0], max_seqlen_q), float("nan"), dtype=l.dtype)
            for b, (s, n) in enumerate(zip(starts, lens)):
                padded[b, :, :n] = l[:, s:s + n]
            l = padded
        return o.to(q.dtype), l.float(), None

    mod.flash_attn_func, mod.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "flash_attn", mod)
    monkeypatch.setattr(providers.importlib.util, "find_spec", lambda name: object())
    assert providers.FlashAttn2().probe() == (True, "flash_attn 2.7.4")
    q, k, v = randn(1, 16, 4, 64, dtype=torch.float16), randn(1, 16, 2, 64, dtype=torch.float16), \
        randn(1, 16, 2, 64, dtype=torch.float16)
    out, lse = providers.FlashAttn2().run(providers.AttentionCall(q, k, v, check_attention_inputs(q, k, v), True, 0.1,
                                                                  return_lse=True))
    want, want_lse = reference.attention_exact(q, k, v, causal=True, softmax_scale=0.1, return_lse=True)
    assert out.dtype == torch.float16 and torch.equal(out, want.to(torch.float16))
    assert lse.shape == (1, 4, 16) and torch.equal(lse, want_lse.float())
    lens = [7, 13]
    q, k, v = randn(20, 4, 64, dtype=torch.float16), randn(20, 2, 64, dtype=torch.float16), \
        randn(20, 2, 64, dtype=torch.float16)
    kw = dict(cu_seqlens_q=cu(lens), cu_seqlens_k=cu(lens))
    want, want_lse = reference.attention_exact(q, k, v, causal=True, softmax_scale=0.1, return_lse=True, **kw)
    for pad_lse[0] in (False, True):
        call = providers.AttentionCall(q, k, v, check_attention_inputs(q, k, v, **kw), True, 0.1, return_lse=True,
                                       max_seqlen_q=13, max_seqlen_k=13, **kw)
        out, lse = providers.FlashAttn2().run(call)
        assert torch.equal(out, want.to(torch.float16)), pad_lse
        assert lse.shape == (4, 20) and torch.equal(lse, want_lse.float()), pad_lse


def test_every_provider_has_an_adapter_and_a_probe_that_answers():
    found = providers.probe_all(names=["sdpa", "reference", "triton", "fa3-fwd", "vllm-so"])
    assert found["sdpa"][0] and found["reference"][0]
    for name, (ok, detail) in found.items():
        assert isinstance(ok, bool) and detail, name


@pytest.mark.skipif(not env.triton_interpret(), reason="runs the Triton kernel on CPU tensors: needs TRITON_INTERPRET=1 "
                    "(conftest sets it where there is no GPU); on a GPU the GPU-marked tests cover it")
def test_captured_varlen_call_runs_our_kernel_from_the_bounds(monkeypatch):
    """A varlen call checked as under CUDA-graph capture (stood in for: nothing may be read back) runs the
    Triton kernel from max_seqlen_q/k alone, with the eager call's bits; without the bounds, or through a
    provider that needs the lengths on the host, it is a clear error before any kernel runs."""
    import fp8lab.layout as layout

    lengths = [5, 0, 11]
    (q, k, v), ds = fp8_inputs(3, 0, 0, 4, 2, 64, lengths)
    kw = dict(cu_seqlens_q=cu(lengths), cu_seqlens_k=cu(lengths), causal=True, return_lse=True,
              q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    eager_out, eager_lse = attention(q, k, v, backend="triton", **kw)
    monkeypatch.setattr(layout, "_capturing", lambda t: True)
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: pytest.fail("read back under capture"))
    out, lse = attention(q, k, v, backend="triton", max_seqlen_q=16, max_seqlen_k=11, **kw)
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)
    with pytest.raises(ValueError, match="needs max_seqlen_q and max_seqlen_k"):
        attention(q, k, v, backend="triton", **kw)
    with pytest.raises(BackendError, match="reads the varlen sequence lengths on the host"):
        attention(q, k, v, backend="reference", max_seqlen_q=16, max_seqlen_k=11, **kw)


@pytest.mark.skipif(not env.triton_interpret(), reason="runs the Triton kernel on CPU tensors: needs TRITON_INTERPRET=1 "
                    "(conftest sets it where there is no GPU); on a GPU the GPU-marked tests cover it")
def test_pv_flush_reaches_our_kernel_and_is_checked(monkeypatch):
    """pv_flush=True (v28) reaches `fp8_attention` through the API; under the interpreter the products are
    exact either way, so the bits are the plain call's. The flag is checked, and shown in the prepared call."""
    import fp8lab.kernels as kernels

    (q, k, v), ds = fp8_inputs(1, 21, 30, 4, 2, 64)
    kw = dict(q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], causal=True, backend="triton")
    seen = []
    original = kernels.fp8_attention
    monkeypatch.setattr(kernels, "fp8_attention", lambda *a, **k: seen.append(k["pv_flush"]) or original(*a, **k))
    prepared = api.prepare_attention(q, k, v, pv_flush=True, **kw)
    assert repr(prepared).endswith("causal=True, return_lse=False, pv_flush=True)")
    assert torch.equal(prepared(), attention(q, k, v, **kw)) and seen == [True, False]
    with pytest.raises(TypeError, match="pv_flush: expected a bool, got str"):
        attention(q, k, v, pv_flush="yes", **kw)
    bf16 = [x.to(torch.bfloat16) for x in (q, k, v)]  # no FP8: nothing to flush, the call is the plain one
    assert not api.prepare_attention(*bf16, pv_flush=True, backend="sdpa").call.pv_flush
