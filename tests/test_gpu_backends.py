"""Every attention provider found on this GPU against the references (marker `gpu`).

Grid (issue 4): bf16 and FP8; head dims 64, 96, 128, 192, 256; GQA ratios 1, 4, 8;
causal and not; batched (2 x 203) and varlen with lengths 113, 203, 799. FP8
inputs carry per-(sequence, KV head) descales that differ per head (inputs drawn
with a random range per head, quantized per head).

Tolerance, FA3's way (Dao-AILab/flash-attention hopper/test_flash_attn.py): the
provider's max error against exact float64 attention on the same inputs (FP8:
on the dequantized FP8 inputs) must be at most twice the error of a PyTorch
reference at kernel precision, plus twice the output dtype's rounding at 0.3:
- bf16: fp32 scores and softmax, P rounded to bf16 for P @ V, bf16 output;
- FP8: `fp8lab.reference.attention_fa3_fp8`, FA3's FP8 forward emulated.

Descale layouts (stride 0 from a scalar, contiguous, transposed view) holding the
same values must give bitwise identical outputs. Scales from vLLM's q_scale
fallback (q quantized with k's scale) are checked the same way.

Set FP8LAB_GPU_TEST_DEADLINE (unix time) to skip what would start after it, and
FP8LAB_GPU_TEST_LOG (a path) to append one JSON line of measured errors per case.
"""

from __future__ import annotations

import functools
import json
import os
import time
import zlib

import pytest
import torch
from bounds import fp8_qk_accumulation_term, max_abs_score_terms

from fp8lab import bench, reference
from fp8lab.backends import BackendError, attention, gating
from fp8lab.layout import check_attention_inputs, sequences

pytestmark = pytest.mark.gpu
# "cpu" lets the suite's logic be dry-run without a GPU (sdpa, reference, Triton interpreter).
DEVICE = os.environ.get("FP8LAB_GPU_TEST_DEVICE", "cuda")

HEAD_DIMS = (64, 96, 128, 192, 256)
GQA = (1, 4, 8)
HEADS_KV = 2
BATCHED = (2, 203)  # batch, seqlen
VARLEN = (113, 203, 799)
# Search order for the run: production FA3 first, our kernels (many compiles) last.
ORDER = ("vllm-so", "fa3-fwd", "vllm", "flash-attn-3", "vllm-fa2", "flash-attn-2", "sdpa-flash", "sdpa-cudnn", "sdpa",
         "gluon", "triton")
assert set(ORDER) == set(gating.PROVIDERS) - {"reference"}


def _deadline() -> None:
    deadline = float(os.environ.get("FP8LAB_GPU_TEST_DEADLINE", "inf"))
    if time.time() > deadline:
        pytest.skip("time budget of this run exhausted (FP8LAB_GPU_TEST_DEADLINE)")


def _log(**row: object) -> None:
    path = os.environ.get("FP8LAB_GPU_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def _runnable(provider: str, dtype: str, head_dim: int, varlen: bool = False) -> tuple[str, bool]:
    """The backend string for `provider`, and whether it returns lse; skips with gating's reasons."""
    from fp8lab.backends import api, providers

    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    spec = gating.PROVIDERS[provider]
    device = api.device_of(torch.empty(0, device=DEVICE))
    found, detail = providers.probe(provider)
    if not found:
        pytest.skip(f"{provider} not found: {detail}")
    reasons, _ = gating.provider_reasons(spec, device, gating.Request(dtype, head_dim, varlen=varlen))
    if reasons:
        pytest.skip(f"{provider} cannot run {dtype} d={head_dim}{' varlen' if varlen else ''} here: {'; '.join(reasons)}")
    return f"{spec.backend}:{provider}", spec.returns_lse


# ----------------------------------------------------------------------------- inputs and references

@functools.lru_cache(maxsize=2)
def _case(dtype: str, head_dim: int, gqa: int, causal: bool, varlen: bool) -> dict:
    """Inputs of one grid point and both references, computed once for all providers."""
    g = torch.Generator(device=DEVICE).manual_seed(zlib.crc32(repr((dtype, head_dim, gqa, causal, varlen)).encode()))
    hq = HEADS_KV * gqa
    if varlen:
        total = sum(VARLEN)
        shapes = ((total, hq, head_dim), (total, HEADS_KV, head_dim), (total, HEADS_KV, head_dim))
        cu = torch.tensor([0, *torch.tensor(VARLEN).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
        kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(VARLEN), max_seqlen_k=max(VARLEN))
    else:
        b, s = BATCHED
        shapes = ((b, s, hq, head_dim), (b, s, HEADS_KV, head_dim), (b, s, HEADS_KV, head_dim))
        kw = {}
    # a random range per head so per-head descales differ by up to ~20x
    xs = [torch.randn(*sh, generator=g, device=DEVICE) * torch.exp(torch.randn(sh[-2], generator=g, device=DEVICE))
          [:, None] for sh in shapes]
    if dtype == "bf16":
        q, k, v = (x.to(torch.bfloat16) for x in xs)
        descales: dict = {}
        exact, lse_exact = reference.attention_exact(q, k, v, causal=causal, return_lse=True, **kw)
        pt, lse_pt = _attention_lowp(q, k, v, causal, kw)
    else:
        qq = reference.quantize_qkv(*xs, "head", cu_seqlens_q=kw.get("cu_seqlens_q"), cu_seqlens_k=kw.get("cu_seqlens_k"))
        q, k, v = qq.q, qq.k, qq.v
        descales = dict(q_descale=qq.q_descale, k_descale=qq.k_descale, v_descale=qq.v_descale)
        exact, lse_exact = reference.attention_exact(q, k, v, causal=causal, return_lse=True, **descales, **kw)
        pt, lse_pt = reference.attention_fa3_fp8(q, k, v, causal=causal, return_lse=True, **descales, **kw)
    return dict(qk_abs=max_abs_score_terms(q, k, descales, kw), q=q, k=k, v=v, descales=descales, kw=kw, exact=exact, lse_exact=lse_exact, pt=pt, lse_pt=lse_pt)


def _attention_lowp(q, k, v, causal: bool, kw: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 attention at kernel precision: fp32 scores/softmax, P in bf16, fp32 P @ V, bf16 out; lse fp32."""
    shape = check_attention_inputs(q, k, v, **kw)
    out = torch.zeros(*q.shape[:-1], shape.head_dim_v, dtype=q.dtype, device=q.device)
    lse_rows = []
    qs, ks, vs = (q, k, v) if shape.varlen else (q, k, v)
    for _, iq, ik in sequences(shape):
        qi, ki, vi = qs[iq], ks[ik], vs[ik]  # (s, h, d)
        ki = ki.repeat_interleave(shape.group_size, dim=1)
        vi = vi.repeat_interleave(shape.group_size, dim=1)
        s = torch.einsum("qhd,khd->hqk", qi.float(), ki.float()) * shape.head_dim ** -0.5
        if causal:
            sq, sk = s.shape[1], s.shape[2]
            keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
            s = s.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)  # (h, sq)
        p = torch.exp(s - lse[..., None]).to(torch.bfloat16)
        out[iq] = torch.einsum("hqk,khd->qhd", p.float(), vi.float()).to(q.dtype)
        lse_rows.append(lse)
    lse = torch.cat(lse_rows, dim=1) if shape.varlen else torch.stack(lse_rows)
    return out, lse


def _lse_bound(case: dict, dtype: str, head_dim: int) -> float:
    ref = (case["lse_pt"].double() - case["lse_exact"].double()).abs().max().item()
    acc = fp8_qk_accumulation_term(case["qk_abs"], head_dim) if dtype == "fp8" else 0.0
    return 2 * ref + acc + 1e-3


def _bound(case: dict) -> tuple[float, float]:
    """(allowed max error, the reference's own max error) for a case."""
    exact, pt = case["exact"], case["pt"]
    ref_err = (pt.double() - exact).abs().max().item()
    rounding = ((exact + 0.3 - 0.3).to(torch.bfloat16).double() - exact).abs().max().item()
    return 2 * ref_err + 2 * rounding, ref_err


# ----------------------------------------------------------------------------- the grid

# Grid point outermost, provider innermost: each point's references are computed once (`_case` cache).
GRID = [
    (p, dt, d, g, c, vl)
    for dt in ("bf16", "fp8") for d in HEAD_DIMS for g in GQA for c in (False, True) for vl in (False, True) for p in ORDER
]


@pytest.mark.parametrize("provider, dtype, head_dim, gqa, causal, varlen", GRID,
                         ids=[f"{p}-{dt}-d{d}-gqa{g}-{'causal' if c else 'full'}-{'varlen' if vl else 'batched'}"
                              for p, dt, d, g, c, vl in GRID])
def test_provider_against_references(provider, dtype, head_dim, gqa, causal, varlen):
    backend, has_lse = _runnable(provider, dtype, head_dim, varlen)
    _deadline()
    case = _case(dtype, head_dim, gqa, causal, varlen)
    res = attention(case["q"], case["k"], case["v"], causal=causal, backend=backend, return_lse=has_lse,
                    **case["descales"], **case["kw"])
    out, lse = res if has_lse else (res, None)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16 and out.shape == case["exact"].shape
    assert bool(torch.isfinite(out).all())
    err = (out.double() - case["exact"]).abs().max().item()
    allowed, ref_err = _bound(case)
    lse_err = lse_allowed = None
    if lse is not None:
        lse_err = (lse.double() - case["lse_exact"].double()).abs().max().item()
        lse_allowed = _lse_bound(case, dtype, head_dim)
    _log(test="grid", provider=provider, dtype=dtype, head_dim=head_dim, gqa=gqa, causal=causal, varlen=varlen,
         err=err, ref_err=ref_err, allowed=allowed, lse_err=lse_err, lse_allowed=lse_allowed, qk_abs=case["qk_abs"])
    assert err <= allowed, f"max error {err:.3e} > {allowed:.3e} (2 x reference error {ref_err:.3e} + rounding)"
    if lse is not None:
        assert lse_err <= lse_allowed, f"lse error {lse_err:.3e} > {lse_allowed:.3e}"


# ----------------------------------------------------------------------------- descale layouts

FP8_PROVIDERS = [p for p in ORDER if "fp8" in gating.PROVIDERS[p].dtypes]


def _layouts(values: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same (batch, heads_kv) values as a contiguous tensor, a transposed view and a strided slice."""
    b, h = values.shape
    wide = torch.zeros(b, 2 * h, device=values.device)
    wide[:, ::2] = values
    return {"contiguous": values.contiguous(), "transposed": values.t().contiguous().t(), "strided": wide[:, ::2]}


@pytest.mark.parametrize("provider", FP8_PROVIDERS)
@pytest.mark.parametrize("varlen", [False, True])
def test_descale_layouts_agree_bitwise(provider, varlen):
    backend, _ = _runnable(provider, "fp8", 128, varlen)
    _deadline()
    case = _case("fp8", 128, 4, True, varlen)
    q, k, v, kw = case["q"], case["k"], case["v"], case["kw"]
    per_head = {n: _layouts(d) for n, d in case["descales"].items()}
    outs = {name: attention(q, k, v, causal=True, backend=backend, **{n: per_head[n][name] for n in per_head}, **kw)
            for name in ("contiguous", "transposed", "strided")}
    assert per_head["q_descale"]["transposed"].stride() != per_head["q_descale"]["contiguous"].stride()
    for name, out in outs.items():
        assert torch.equal(out, outs["contiguous"]), f"{name} descales give another output than contiguous ones"
    # one number per tensor: stride 0 from a scalar vs the same number materialized
    b = case["descales"]["q_descale"].shape[0]
    scalars = {n: d.max().reshape(()) for n, d in case["descales"].items()}
    outs = {}
    for name in ("expand", "contiguous", "transposed"):
        ds = {}
        for n, s in scalars.items():
            e = s.expand(b, HEADS_KV)
            ds[n] = e if name == "expand" else _layouts(e)[name]
        outs[name] = attention(q, k, v, causal=True, backend=backend, **ds, **kw)
    assert ds["q_descale"].stride() == (1, b) and scalars["q_descale"].expand(b, HEADS_KV).stride() == (0, 0)
    for name, out in outs.items():
        assert torch.equal(out, outs["expand"]), f"{name} scalar descales differ from stride-0 ones"
    # and the per-head descales matter: the scalar run is a different (worse-scaled) computation
    assert not torch.equal(outs["expand"], attention(q, k, v, causal=True, backend=backend, **case["descales"], **kw))


@pytest.mark.parametrize("provider", FP8_PROVIDERS)
def test_q_scale_fallback_scales(provider):
    """vLLM's missing-q_scale fallback: q quantized with k's per-tensor scale, descales expanded (stride 0)."""
    from fp8lab.formats import cast_to_fp8
    from fp8lab.scaling import resolve_checkpoint_scales

    backend, _ = _runnable(provider, "fp8", 128)
    _deadline()
    g = torch.Generator(device=DEVICE).manual_seed(4)
    b, s, hq, d = 2, 203, 8, 128
    q = torch.randn(b, s, hq, d, generator=g, device=DEVICE) * 3  # q's range exceeds k's: some saturation
    k = torch.randn(b, s, HEADS_KV, d, generator=g, device=DEVICE)
    v = torch.randn(b, s, HEADS_KV, d, generator=g, device=DEVICE)
    scales = resolve_checkpoint_scales({"k_scale": k.abs().max().item() / 448, "v_scale": v.abs().max().item() / 448},
                                       warn=False)
    assert scales.q == scales.k and "fallback" in scales.sources["q"]
    ds = scales.fa3_descales(b, HEADS_KV, device=DEVICE)
    assert ds["q_descale"].stride() == (0, 0)
    q8, k8, v8 = (cast_to_fp8(x / sc) for x, sc in ((q, scales.q), (k, scales.k), (v, scales.v)))
    out = attention(q8, k8, v8, causal=True, backend=backend, **ds)
    exact = reference.attention_exact(q8, k8, v8, causal=True, **ds)
    pt = reference.attention_fa3_fp8(q8, k8, v8, causal=True, **ds)
    err = (out.double() - exact).abs().max().item()
    allowed, ref_err = _bound({"exact": exact, "pt": pt})
    _log(test="q_scale_fallback", provider=provider, err=err, ref_err=ref_err, allowed=allowed)
    assert err <= allowed


@pytest.mark.parametrize("varlen", [False, True], ids=["batched", "varlen"])
@pytest.mark.parametrize("provider", FP8_PROVIDERS)
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # the capture the ValueError ends before a kernel
def test_fp8_call_captures_in_a_cuda_graph(provider, varlen):
    """As vLLM captures its decode steps: an FP8 call captured in a CUDA graph, replayed on new values
    copied into its inputs and descales, gives the eager call's bits on those values. A varlen call
    is captured with max_seqlen_q/k as bounds, and its replay follows new lengths copied into
    cu_seqlens (same token counts); without the bounds it is a clear ValueError."""
    backend, _ = _runnable(provider, "fp8", 128, varlen)
    _deadline()
    if DEVICE != "cuda":
        pytest.skip("CUDA graphs need a CUDA GPU")
    g = torch.Generator(device=DEVICE).manual_seed(6)

    def inputs(lengths):
        q, k, v = (torch.randn(2, 203, h, 128, generator=g, device=DEVICE).mul(3).to(torch.float8_e4m3fn)
                   for h in (4 * HEADS_KV, HEADS_KV, HEADS_KV))
        if varlen:
            q, k, v = (t.reshape(-1, *t.shape[2:]) for t in (q, k, v))
        cu = torch.tensor([0, lengths[0], sum(lengths)], dtype=torch.int32, device=DEVICE)
        return [q, k, v, *(torch.rand(2, HEADS_KV, generator=g, device=DEVICE) * 0.1 + 0.01 for _ in range(3)), cu]

    live = inputs([150, 256])

    def call(**bounds):
        q, k, v, dq, dk, dv, cu = live
        lens = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, **bounds) if varlen else {}
        return attention(q, k, v, causal=True, backend=backend, q_descale=dq, k_descale=dk, v_descale=dv, **lens)

    graph, out = bench.capture_graph(lambda: call(max_seqlen_q=256, max_seqlen_k=256))
    for dst, src in zip(live, inputs([203, 203] if varlen else [150, 256])):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, call())
    if varlen:
        with pytest.raises(ValueError, match="needs max_seqlen_q and max_seqlen_k"):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                call()


def test_fp8_into_fa2_on_this_gpu_is_a_clear_error():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q = torch.zeros(1, 8, 2, 64, device=DEVICE).to(torch.float8_e4m3fn)
    with pytest.raises(BackendError, match="FA2 cannot run FP8|not installed|not found"):
        attention(q, q, q, backend="fa2")


def test_fp8_head_dim_16_is_passed_over_by_our_kernel_on_this_gpu():
    """The Triton kernel's FP8 MMAs need head_dim >= 32 on a GPU: gating says so before the kernel would,
    and auto takes another FP8 provider where one is installed, with the reference's answer."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    g = torch.Generator(device=DEVICE).manual_seed(16)
    q, k, v = (torch.randn(1, 40, h, 16, generator=g, device=DEVICE).to(torch.float8_e4m3fn) for h in (4, 2, 2))
    with pytest.raises(BackendError, match=r"need head_dim >= 32.*got 16"):
        attention(q, k, v, backend="triton")
    try:
        out = attention(q, k, v, causal=True)
    except BackendError as e:  # no FP8 provider for head_dim 16 here: the error says why for each
        assert "triton" in str(e) and "got 16" in str(e)
        return
    assert torch.isfinite(out).all()
    ref = reference.attention_exact(q, k, v, causal=True)  # float64, on the FP8 values
    assert ((out.double() - ref).norm() / ref.norm()).item() < 0.05  # P in e4m3: a few per cent


@pytest.mark.parametrize("provider", FP8_PROVIDERS)
def test_prepared_call_equals_attention(provider):
    """`prepare_attention` checks once; its calls give `attention`'s bits, and follow in-place writes."""
    from fp8lab.backends import prepare_attention

    backend, _ = _runnable(provider, "fp8", 128, False)
    _deadline()
    g = torch.Generator(device=DEVICE).manual_seed(7)
    q, k, v = (torch.randn(2, 203, h, 128, generator=g, device=DEVICE).mul(3).to(torch.float8_e4m3fn)
               for h in (4 * HEADS_KV, HEADS_KV, HEADS_KV))
    kw = dict(causal=True, backend=backend, **{n: torch.rand(2, HEADS_KV, generator=g, device=DEVICE) * 0.1 + 0.01
                                               for n in ("q_descale", "k_descale", "v_descale")})
    prepared = prepare_attention(q, k, v, **kw)
    assert torch.equal(prepared(), attention(q, k, v, **kw))
    kw["k_descale"].mul_(2.0)
    assert torch.equal(prepared(), attention(q, k, v, **kw))


@pytest.mark.parametrize("provider", ["gluon", "triton"])
def test_pv_flush_through_the_api_runs_our_kernels_with_the_flush(provider):
    """pv_flush=True (v28) reaches our kernels: the API's bits are those of the kernel called with the flush,
    and at 16k keys on V + 1 inputs its error is the fp32 one, where fa3-fwd's is not."""
    from fp8lab.data import make_qkv
    from fp8lab.kernels import fp8_attention, key_ordered_vt, pretranspose_v
    from fp8lab.kernels.attention_ws import fp8_attention_ws
    from fp8lab.reference import attention_exact, quantize_qkv

    backend, _ = _runnable(provider, "fp8", 128, False)
    _deadline()
    q, k, v = make_qkv("normal", seqlen_q=16, seqlen_k=16384, heads_q=4, head_dim=128, seed=11, device=DEVICE)
    exact = attention_exact(q, k, v + 1.0)
    qq = quantize_qkv(q, k, v + 1.0)
    ds = qq.descales
    out = attention(qq.q, qq.k, qq.v, backend=backend, pv_flush=True, **ds)
    if provider == "gluon":
        direct = fp8_attention_ws(qq.q, qq.k, key_ordered_vt(qq.v), pv_flush=True, **ds)[0]
    else:
        direct = fp8_attention(qq.q, qq.k, pretranspose_v(qq.v), *ds.values(), pv_flush=True)
    assert torch.equal(out, direct)
    plain = attention(qq.q, qq.k, qq.v, backend=backend, **ds)
    err = lambda o: ((o.double() - exact.double()).norm() / exact.double().norm()).item()  # noqa: E731
    assert err(out) < 0.005 < 0.1 < err(plain)  # v28: 0.0026 against 0.185


@pytest.mark.hopper
def test_case_calls_run_every_provider_on_the_same_inputs():
    """notebook 07's live timing: every FP8 call of one grid case computes the same attention."""
    if DEVICE != "cuda":
        pytest.skip("needs the GPU")
    calls = bench.case_calls(bench.AttentionCase(2, 512, 4, 4, 128, True))
    assert {"fp8lab", "fp8lab ws"} <= set(calls)
    outs = {name: (r[0] if isinstance(r, tuple) else r) for name, r in ((n, fn()) for n, fn in calls.items())}
    ours = outs["fp8lab"].double()
    for name, out in outs.items():
        assert out.shape == (2, 512, 4, 128) and out.dtype == torch.bfloat16, name
        if "bf16" not in name:
            assert ((out.double() - ours).norm() / ours.norm()).item() < 0.02, name
