"""`attention(...)`: one call for every attention implementation fp8lab knows.

    out = attention(q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)

Layouts are FA3's (see `fp8lab.layout`): batched q (batch, seqlen_q, heads_q,
head_dim), k/v (batch, seqlen_k, heads_kv, head_dim), or varlen (total, heads,
head_dim) with int32 cu_seqlens. FP8 inputs are float8_e4m3fn with float32
(batch, heads_kv) descales of any strides and give a bf16 output, like FA3.

Order of work: validate everything (`check_attention_inputs`, then the chosen
provider's rules in `gating`), and only then call a kernel, so a bad input is
a clear `TypeError`/`ValueError` and never a crash inside a kernel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from fp8lab.backends import gating, providers
from fp8lab.backends.gating import Decision, Device, Request
from fp8lab.layout import (AttentionShape, check_attention_inputs, check_descale_values, check_flag,
                           check_softmax_scale)

__all__ = [
    "BackendError", "PreparedAttention", "attention", "choose_backend", "device_of", "dequantize_inputs",
    "prepare_attention", "request_of",
]

_DTYPE_NAMES = {
    torch.float8_e4m3fn: "fp8",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp64",
}


class BackendError(ValueError):
    """No provider of the requested backend can run this call here; `.decision` holds every reason."""

    def __init__(self, message: str, decision: Decision):
        super().__init__(message)
        self.decision = decision


def device_of(t: torch.Tensor) -> Device:
    """The gating `Device` of a tensor: its CUDA capability, or None off CUDA."""
    if t.device.type != "cuda":
        return Device(None, t.device.type.upper())
    return Device(torch.cuda.get_device_capability(t.device), torch.cuda.get_device_name(t.device))


def request_of(q: torch.Tensor, shape: AttentionShape, return_lse: bool, fp8_fallback: str,
               pv_flush: bool = False) -> Request:
    return Request(_DTYPE_NAMES[q.dtype], shape.head_dim, shape.head_dim_v, bool(return_lse), fp8_fallback,
                   varlen=shape.varlen, lengths_on_device=not shape.lengths_on_host, pv_flush=pv_flush)


def _available(device: Device) -> tuple[set[str], dict[str, str]]:
    """Providers found here (only those that could run on `device` are probed) and why the rest are not."""
    names = [n for n, s in gating.PROVIDERS.items() if device.is_cuda or s.cpu]
    found = providers.probe_all(names=names)
    why_not = {n: "needs a CUDA GPU; this is the CPU" for n in gating.PROVIDERS if n not in names}
    why_not.update({n: why for n, (ok, why) in found.items() if not ok})
    return {n for n, (ok, _) in found.items() if ok}, why_not


def _decide(q: torch.Tensor, shape: AttentionShape, backend: str, return_lse: bool, fp8_fallback: str,
            pv_flush: bool = False) -> Decision:
    device = device_of(q)
    available, why_not = _available(device)
    return gating.decide(device, available, request_of(q, shape, return_lse, fp8_fallback, pv_flush), backend,
                         unavailable_reasons=why_not)


_LAYOUT_ARGS = ("q_descale", "k_descale", "v_descale", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")


def choose_backend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    backend: str = "auto",
    return_lse: bool = False,
    fp8_fallback: str = "error",
    pv_flush: bool = False,
    **layout_kwargs: object,
) -> Decision:
    """The `Decision` `attention` would take for these inputs (nothing runs). `layout_kwargs`: descales,
    cu_seqlens, max_seqlen. `causal` and `softmax_scale` are checked as `attention` checks them, so its
    arguments can be passed unchanged; no provider's choice depends on them."""
    try:
        shape = check_attention_inputs(q, k, v, **layout_kwargs)  # type: ignore[arg-type]
    except TypeError as e:
        if "unexpected keyword" not in str(e):
            raise
        raise TypeError(f"choose_backend: unexpected argument ({set(layout_kwargs) - set(_LAYOUT_ARGS)}); it takes "
                        f"attention's arguments: q, k, v, {', '.join(_LAYOUT_ARGS)}, causal, softmax_scale, "
                        "backend, return_lse, fp8_fallback, pv_flush") from None
    check_flag("causal", causal)
    check_softmax_scale(softmax_scale, shape.head_dim)
    return _decide(q, shape, backend, return_lse, fp8_fallback, check_flag("pv_flush", pv_flush))


def dequantize_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: AttentionShape,
    q_descale: torch.Tensor | None, k_descale: torch.Tensor | None, v_descale: torch.Tensor | None,
    dtype: torch.dtype = torch.bfloat16,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FP8 q, k, v times their (batch, heads_kv) descales, rounded to `dtype` (what FA2 can take).

    Query head h uses descale column h // (heads_q // heads_kv); varlen tokens use their sequence's row.
    """
    def one(x: torch.Tensor, descale: torch.Tensor | None, seqlens: tuple[int, ...]) -> torch.Tensor:
        if descale is None:
            return x.to(dtype)
        per_head = descale.to(torch.float32).repeat_interleave(x.shape[-2] // shape.heads_kv, dim=1)
        if shape.varlen:
            rows = per_head.repeat_interleave(torch.tensor(seqlens, device=x.device), dim=0)  # (total, heads)
            return (x.to(torch.float32) * rows[:, :, None]).to(dtype)
        return (x.to(torch.float32) * per_head[:, None, :, None]).to(dtype)

    return one(q, q_descale, shape.seqlens_q), one(k, k_descale, shape.seqlens_k), one(v, v_descale, shape.seqlens_k)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    backend: str = "auto",
    return_lse: bool = False,
    fp8_fallback: str = "error",
    pv_flush: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention through the best provider here, or the one `backend` names.

    q: (batch, seqlen_q, heads_q, head_dim) or varlen (total_q, heads_q, head_dim);
    k, v: (batch, seqlen_k, heads_kv, head_dim[_v]) or varlen (total_k, heads_kv, head_dim[_v]);
    heads_q a multiple of heads_kv (GQA/MQA); causal masks aligned bottom-right.
    q/k/v dtype: float8_e4m3fn (with optional float32 (batch, heads_kv) descales), bf16, fp16, fp32, fp64.
    backend: "auto", "fa3", "fa2", "sdpa", "triton", "reference", or "<backend>:<provider>"
        (e.g. "fa3:fa3-fwd"); see `fp8lab.backends.gating` for how "auto" decides.
    fp8_fallback: "error" (default: FP8 inputs only run where FP8 runs) or "dequantize"
        (a bf16-only provider such as FA2 runs on the dequantized inputs).
    pv_flush: FP8 inputs: add each key block's P V to O in fp32 (vLLM's two-level accumulation),
        not in the FP8 MMA's 13-bit accumulator across all blocks as upstream FA3 does, whose error
        grows with the context. Providers that cannot (fa3-fwd, flash-attn-3) are passed over;
        vLLM's FA3 always flushes; fp8lab's kernels ("triton") do it when asked: the Gluon kernel
        (batched calls on Hopper) 1-5 % slower at head dims 64 and 128, 11-17 % at 256; the Triton
        kernel (varlen, other GPUs) up to 6 % at 64 and 128, about half the speed at 256 (v28).
        Other dtypes accumulate in fp32 anyway.

    Returns out (bf16 for FP8 inputs, else q's dtype) in q's layout with head_dim_v,
    and with return_lse=True also lse, float32 (batch, heads_q, seqlen_q) batched or
    (heads_q, total_q) varlen. Raises TypeError/ValueError for bad inputs and
    `BackendError` (a ValueError) when no provider can run the call, before any kernel runs.
    Calls can be captured in a CUDA graph (`torch.cuda.graph`), as vLLM captures its decode steps;
    the descale values are then not checked (that needs a sync). A captured varlen call needs
    max_seqlen_q and max_seqlen_k (the lengths stay in cu_seqlens on the device; replays may
    change cu_seqlens within those bounds and the token counts) and a provider that reads them
    there (fa3, fa2, triton; `BackendError` names the others).
    `prepare_attention` takes the same arguments and does the checks and the decision once.
    """
    return prepare_attention(
        q, k, v, causal=causal, softmax_scale=softmax_scale, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k, backend=backend, return_lse=return_lse, fp8_fallback=fp8_fallback,
        pv_flush=pv_flush,
    )()


@dataclass(frozen=True, repr=False)
class PreparedAttention:
    """An attention call checked and decided once. Calling it runs `provider` on the same tensors.

    The tensors are held, not copied: values written into them in place (a new decode step's
    q, say) are used by the next call, as in a CUDA graph's replay, but are not checked again
    (a NaN descale written later reaches the kernel). Made by `prepare_attention`.
    """

    decision: Decision
    call: providers.AttentionCall

    @property
    def provider(self) -> str:
        """The provider that runs, e.g. "fa3-fwd"."""
        return self.decision.provider  # type: ignore[return-value]

    def __repr__(self) -> str:
        c = self.call
        layout = "varlen" if c.shape.varlen else "batched"
        return (f"PreparedAttention({self.decision.label()}, {layout} q {tuple(c.q.shape)} k {tuple(c.k.shape)} "
                f"{str(c.q.dtype).removeprefix('torch.')}, causal={c.causal}, return_lse={c.return_lse}"
                + (", pv_flush=True" if c.pv_flush else "") + ")")

    def __call__(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """out, or (out, lse) when prepared with return_lse=True (shapes as `attention`)."""
        call = self.call
        if self.decision.dequantize:
            q, k, v = dequantize_inputs(call.q, call.k, call.v, call.shape, *call.descales.values())
            shape = check_attention_inputs(q, k, v, cu_seqlens_q=call.cu_seqlens_q, cu_seqlens_k=call.cu_seqlens_k)
            call = dataclasses.replace(call, q=q, k=k, v=v, shape=shape, q_descale=None, k_descale=None,
                                       v_descale=None)
        out, lse = providers.get_provider(self.provider).run(call)
        expected = (*call.q.shape[:-1], call.shape.head_dim_v)
        if tuple(out.shape) != expected or out.dtype != call.out_dtype:
            raise RuntimeError(f"provider {self.provider} returned out {tuple(out.shape)} {out.dtype}, "
                               f"expected {expected} {call.out_dtype}")
        if not call.return_lse:
            return out
        if lse is None:
            raise RuntimeError(f"provider {self.provider} returned no lse although gating said it does")
        return out, lse


def prepare_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    backend: str = "auto",
    return_lse: bool = False,
    fp8_fallback: str = "error",
    pv_flush: bool = False,
) -> PreparedAttention:
    """`attention`'s checks and decision, done once: the returned object runs the call each time it is called.

    Arguments, errors and results as `attention` (`prepare_attention(...)()` is `attention(...)`).
    For timing a provider without the checks (the descale check syncs the device) and for loops
    over the same buffers. `.provider` says which provider it chose.
    """
    shape = check_attention_inputs(
        q, k, v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
        check_values=False,
    )
    for name, flag in (("causal", causal), ("return_lse", return_lse), ("pv_flush", pv_flush)):
        check_flag(name, flag)
    scale = check_softmax_scale(softmax_scale, shape.head_dim)
    # the descale values and the scale FA3 folds from them: one device sync
    check_descale_values(shape, q_descale, k_descale, v_descale, softmax_scale=scale if shape.fp8 else None)
    decision = _decide(q, shape, backend, return_lse, fp8_fallback, pv_flush)
    if not decision.ok:
        raise BackendError(decision.error_message(backend), decision)
    if shape.varlen:
        max_seqlen_q = shape.max_seqlen_q if max_seqlen_q is None else int(max_seqlen_q)  # checked: an integer
        max_seqlen_k = shape.max_seqlen_k if max_seqlen_k is None else int(max_seqlen_k)
    call = providers.AttentionCall(q, k, v, shape, causal, scale, q_descale, k_descale, v_descale,
                                   cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, return_lse,
                                   pv_flush=pv_flush and shape.fp8 and not decision.dequantize)
    return PreparedAttention(decision, call)

