"""One small adapter per attention provider: find it, and call it in its own convention.

Every adapter takes an `AttentionCall` (already validated by
`fp8lab.layout.check_attention_inputs`, softmax_scale resolved) and returns
`(out, lse or None)` in FA3's layouts: out (batch, seqlen_q, heads_q, head_dim_v)
or varlen (total_q, heads_q, head_dim_v); lse float32 (batch, heads_q, seqlen_q)
or varlen (heads_q, total_q).

Descales go to the FA3 kernels untouched: the same tensor objects, strides
included (FA3's flash_api.cpp reads `stride(0)`/`stride(1)`, so an expanded
scalar with strides (0, 0) works as is).

Calling conventions, from the providers' own sources:
- vLLM (`vllm/vllm_flash_attn/flash_attn_interface.py`, vllm 0.33.0, copy in
  `.gpu/flash_attn_interface.py`): `flash_attn_varlen_func(..., fa_version=3)`
  is varlen-only, so batched calls are flattened with cu_seqlens. Its FA3 branch
  calls `torch.ops._vllm_fa3_C.fwd` with 37 positional arguments; `vllm_fa3_fwd`
  below passes the same list (schema in `VLLM_FA3_FWD_ARGS`, read from the
  library's registration string).
- fa3-fwd (`fa3_fwd_interface.py` in fa3_fwd-0.0.3) and upstream FA3
  (Dao-AILab/flash-attention `hopper/flash_attn_interface.py`):
  `flash_attn_func(q, k, v, softmax_scale, causal, qv, q_descale, k_descale,
  v_descale, ..., return_attn_probs)` batched and `flash_attn_varlen_func(q, k,
  v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)` varlen;
  with `return_attn_probs=True` they return `(out, softmax_lse)`.
- flash-attn 2.x: `flash_attn_func(q, k, v, dropout_p, softmax_scale, causal,
  ..., return_attn_probs)` -> `(out, lse, S_dmask)`.
- torch SDPA: (batch, heads, seqlen, dim), no GQA broadcast without
  `enable_gqa`, causal aligned top-left by `is_causal` (bottom-right needs
  `causal_lower_right`), no lse.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import inspect
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import torch

from fp8lab.backends.gating import PROVIDERS, ProviderSpec
from fp8lab.layout import AttentionShape, sequences

__all__ = [
    "AttentionCall",
    "Provider",
    "VLLM_FA3_FWD_ARGS",
    "available_providers",
    "get_provider",
    "probe",
    "probe_all",
    "vllm_fa3_fwd",
]

# Argument names of `_vllm_fa3_C::fwd` in vllm 0.33.0, from the schema string the
# library registers (`strings _vllm_fa3_C.abi3.so | grep 'fwd(Tensor'`). A library
# whose op has other arguments is refused rather than called with a wrong list.
VLLM_FA3_FWD_ARGS = (
    "q", "k", "v", "k_new", "v_new", "q_v", "out", "cu_seqlens_q", "cu_seqlens_k", "cu_seqlens_k_new",
    "seqused_q", "seqused_k", "max_seqlen_q", "max_seqlen_k", "page_table", "kv_batch_idx", "leftpad_k",
    "rotary_cos", "rotary_sin", "seqlens_rotary", "q_descale", "k_descale", "v_descale", "softmax_scale",
    "is_causal", "window_size_left", "window_size_right", "softcap", "is_rotary_interleaved",
    "scheduler_metadata", "num_splits", "pack_gqa", "sm_margin", "s_aux", "cp_world_size", "cp_rank",
    "cp_tot_seqused_k",
)


@dataclass(frozen=True)
class AttentionCall:
    """A validated attention call. Descales are None or float32 (batch, heads_kv) of any strides."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    shape: AttentionShape
    causal: bool
    softmax_scale: float
    q_descale: torch.Tensor | None = None
    k_descale: torch.Tensor | None = None
    v_descale: torch.Tensor | None = None
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    max_seqlen_q: int | None = None
    max_seqlen_k: int | None = None
    return_lse: bool = False
    pv_flush: bool = False  # FP8: each key block's P V added to O in fp32 (providers whose `fp8_pv` is "option")

    @property
    def out_dtype(self) -> torch.dtype:
        """bf16 for FP8 inputs (as FA3), else the input dtype."""
        return torch.bfloat16 if self.shape.fp8 else self.q.dtype

    @property
    def descales(self) -> dict[str, torch.Tensor | None]:
        return {"q_descale": self.q_descale, "k_descale": self.k_descale, "v_descale": self.v_descale}


Result = tuple[torch.Tensor, "torch.Tensor | None"]


def as_varlen(call: AttentionCall) -> AttentionCall:
    """A batched call as the equivalent varlen call: tokens flattened, cu_seqlens = 0, s, 2s, ..."""
    if call.shape.varlen:
        return call
    b, sq, sk = call.shape.batch, call.q.shape[1], call.k.shape[1]
    dev = call.q.device
    flat = [t.reshape(t.shape[0] * t.shape[1], *t.shape[2:]) for t in (call.q, call.k, call.v)]
    cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=dev) if sq else torch.zeros(b + 1, dtype=torch.int32, device=dev)
    cu_k = torch.arange(0, (b + 1) * sk, sk, dtype=torch.int32, device=dev) if sk else torch.zeros(b + 1, dtype=torch.int32, device=dev)
    shape = dataclasses.replace(call.shape, varlen=True)
    return AttentionCall(*flat, shape, call.causal, call.softmax_scale, call.q_descale, call.k_descale, call.v_descale,
                         cu_q, cu_k, sq, sk, call.return_lse)


def from_varlen(call: AttentionCall, out: torch.Tensor, lse: torch.Tensor | None) -> Result:
    """Undo `as_varlen` on the results of a batched call: out (b, s, h, dv), lse (h, b*s) -> (b, h, s)."""
    if call.shape.varlen:
        return out, lse
    b, sq = call.shape.batch, call.q.shape[1]
    out = out.reshape(b, sq, *out.shape[1:])
    if lse is not None:
        lse = lse.reshape(lse.shape[0], b, sq).permute(1, 0, 2).contiguous()
    return out, lse


class Provider:
    """Base adapter: `probe()` says whether the provider is here, `run(call)` calls it."""

    name: str = ""

    @property
    def spec(self) -> ProviderSpec:
        return PROVIDERS[self.name]

    def probe(self) -> tuple[bool, str]:
        """(found, detail): a version or location when found, the reason when not."""
        raise NotImplementedError

    def run(self, call: AttentionCall) -> Result:
        raise NotImplementedError


def _import(module: str) -> tuple[object | None, str]:
    try:
        return importlib.import_module(module), ""
    except Exception as e:  # noqa: BLE001 - any import failure is a reason to report
        return None, f"import {module} failed: {type(e).__name__}: {e}"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except Exception:  # noqa: BLE001
        return "unknown version"


# ----------------------------------------------------------------------------- FA3

def vllm_fa3_fwd(op: Callable, call: AttentionCall, num_splits: int = 0) -> Result:
    """Call `_vllm_fa3_C::fwd` exactly as vLLM's `flash_attn_varlen_func(fa_version=3)` does.

    `op` is `torch.ops._vllm_fa3_C.fwd` (tests pass a look-alike with the same schema).
    Batched calls go through `as_varlen`: vLLM's entry point is varlen only.
    """
    c = as_varlen(call)
    out, lse, *_ = op(
        c.q, c.k, c.v,
        None, None,  # k_new, v_new
        None,  # q_v
        None,  # out
        c.cu_seqlens_q, c.cu_seqlens_k,
        None,  # cu_seqlens_k_new
        None, None,  # seqused_q, seqused_k
        c.max_seqlen_q, c.max_seqlen_k,
        None,  # page_table (vLLM's block_table)
        None,  # kv_batch_idx
        None,  # leftpad_k
        None, None, None,  # rotary_cos, rotary_sin, seqlens_rotary
        c.q_descale, c.k_descale, c.v_descale,  # untouched: strides go to the kernel
        c.softmax_scale, c.causal,
        -1, -1,  # window_size_left, window_size_right (vLLM: window_size=None)
        0.0,  # softcap
        True,  # rotary_interleaved
        None,  # scheduler_metadata
        num_splits,  # vLLM's default 0 = let the kernel choose
        None,  # pack_gqa
        0,  # sm_margin
        None,  # s_aux
        1, 0, None,  # cp_world_size, cp_rank, cp_tot_seqused_k
    )
    return from_varlen(call, out, lse)


def check_vllm_fa3_schema(op: object) -> str | None:
    """None if `op` (an OpOverloadPacket) takes `VLLM_FA3_FWD_ARGS`, else why not."""
    try:
        names = tuple(a.name for a in op.default._schema.arguments)  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001
        return f"cannot read the op's schema: {e}"
    if names != VLLM_FA3_FWD_ARGS:
        return (f"_vllm_fa3_C.fwd takes {len(names)} arguments {names[:3]}...; the adapter was written for "
                f"vllm 0.33.0's {len(VLLM_FA3_FWD_ARGS)}")
    return None


class VllmFA3(Provider):
    """vLLM's own package: `vllm.vllm_flash_attn.flash_attn_varlen_func(..., fa_version=3)`."""

    name = "vllm"
    fa_version = 3

    def probe(self) -> tuple[bool, str]:
        if importlib.util.find_spec("vllm") is None:
            return False, "vllm is not installed (pip install vllm)"
        mod, err = _import("vllm.vllm_flash_attn.flash_attn_interface")
        if mod is None:
            return False, err
        flag = "FA3_AVAILABLE" if self.fa_version == 3 else "FA2_AVAILABLE"
        if not getattr(mod, flag, False):
            return False, f"vllm {_version('vllm')}: {getattr(mod, flag.replace('AVAILABLE', 'UNAVAILABLE_REASON'), 'unavailable')}"
        return True, f"vllm {_version('vllm')}"

    def run(self, call: AttentionCall) -> Result:
        from vllm.vllm_flash_attn import flash_attn_varlen_func

        c = as_varlen(call)
        res = flash_attn_varlen_func(
            c.q, c.k, c.v,
            max_seqlen_q=c.max_seqlen_q, cu_seqlens_q=c.cu_seqlens_q,
            max_seqlen_k=c.max_seqlen_k, cu_seqlens_k=c.cu_seqlens_k,
            softmax_scale=c.softmax_scale, causal=c.causal,
            **({"q_descale": c.q_descale, "k_descale": c.k_descale, "v_descale": c.v_descale} if self.fa_version == 3 else {}),
            return_softmax_lse=True, fa_version=self.fa_version,
        )
        out, lse = res
        return from_varlen(call, out, lse)


class VllmFA2(VllmFA3):
    name = "vllm-fa2"
    fa_version = 2


class VllmSoFA3(Provider):
    """vLLM's `_vllm_fa3_C.abi3.so` alone, loaded with `torch.ops.load_library` after a checksum check."""

    name = "vllm-so"

    def probe(self) -> tuple[bool, str]:
        return _load_vllm_so()

    def run(self, call: AttentionCall) -> Result:
        ok, why = _load_vllm_so()
        if not ok:
            raise RuntimeError(f"vllm-so: {why}")
        return vllm_fa3_fwd(torch.ops._vllm_fa3_C.fwd, call)


@lru_cache(maxsize=1)
def _load_vllm_so() -> tuple[bool, str]:
    from fp8lab.backends import fetch

    if hasattr(torch.ops, "_vllm_fa3_C") and hasattr(torch.ops._vllm_fa3_C, "fwd"):
        why = check_vllm_fa3_schema(torch.ops._vllm_fa3_C.fwd)
        return (False, why) if why else (True, "torch.ops._vllm_fa3_C already registered (by vllm)")
    path, why = fetch.resolve_library()
    if path is None:
        return False, why
    try:
        torch.ops.load_library(str(path))
    except Exception as e:  # noqa: BLE001
        return False, f"{path} passed its checksum but failed to load: {type(e).__name__}: {str(e)[:300]}"
    why = check_vllm_fa3_schema(torch.ops._vllm_fa3_C.fwd)
    return (False, why) if why else (True, f"{path} (sha256 verified)")


class FA3Interface(Provider):
    """fa3-fwd's `fa3_fwd_interface` or upstream `flash_attn_interface`: batched and varlen entry points."""

    module = "fa3_fwd_interface"
    dist = "fa3-fwd"
    name = "fa3-fwd"
    install = "pip install fa3-fwd==0.0.3"

    def probe(self) -> tuple[bool, str]:
        if importlib.util.find_spec(self.module) is None:
            return False, f"{self.module} is not installed ({self.install})"
        mod, err = _import(self.module)
        if mod is None:
            return False, err
        fn = getattr(mod, "flash_attn_func", None)
        if fn is None or "q_descale" not in inspect.signature(fn).parameters:
            return False, f"{self.module}.flash_attn_func takes no q_descale: not an FA3 (hopper) build"
        return True, f"{self.dist} {_version(self.dist)}"

    def run(self, call: AttentionCall) -> Result:
        mod = importlib.import_module(self.module)
        kw = dict(softmax_scale=call.softmax_scale, causal=call.causal, **call.descales)
        if call.shape.varlen:
            fn = mod.flash_attn_varlen_func
            args = (call.q, call.k, call.v, call.cu_seqlens_q, call.cu_seqlens_k, call.max_seqlen_q, call.max_seqlen_k)
        else:
            fn = mod.flash_attn_func
            args = (call.q, call.k, call.v)
        # Older upstream builds always returned (out, lse) and had no return_attn_probs.
        if "return_attn_probs" in inspect.signature(fn).parameters:
            kw["return_attn_probs"] = True
        res = fn(*args, **kw)
        out, lse = (res[0], res[1]) if isinstance(res, (tuple, list)) else (res, None)
        return out, lse


class UpstreamFA3(FA3Interface):
    module = "flash_attn_interface"
    dist = "flash_attn_3"
    name = "flash-attn-3"
    install = "build Dao-AILab/flash-attention hopper/: cd hopper && python setup.py install"


# ----------------------------------------------------------------------------- FA2

class FlashAttn2(Provider):
    """flash-attn 2.x: `flash_attn_func` / `flash_attn_varlen_func`."""

    name = "flash-attn-2"

    def probe(self) -> tuple[bool, str]:
        if importlib.util.find_spec("flash_attn") is None:
            return False, "flash_attn is not installed (pip install flash-attn)"
        mod, err = _import("flash_attn")
        if mod is None:
            return False, err
        version = str(getattr(mod, "__version__", "?"))
        if not version.startswith("2."):
            return False, f"flash_attn {version} is not a 2.x release"
        return True, f"flash_attn {version}"

    def run(self, call: AttentionCall) -> Result:
        import flash_attn

        kw = dict(dropout_p=0.0, softmax_scale=call.softmax_scale, causal=call.causal, return_attn_probs=True)
        if call.shape.varlen:
            out, lse, _ = flash_attn.flash_attn_varlen_func(
                call.q, call.k, call.v, call.cu_seqlens_q, call.cu_seqlens_k, call.max_seqlen_q, call.max_seqlen_k, **kw
            )
            if lse.dim() == 3:  # flash-attn < 2.4 padded varlen lse to (batch, heads, max_seqlen_q)
                if not call.shape.lengths_on_host:
                    raise ValueError("flash-attn < 2.4 pads the varlen lse, which needs the lengths on the host: "
                                     "under CUDA-graph capture call it with return_lse=False, or use flash-attn >= 2.4")
                lse = torch.cat([lse[b, :, : n] for b, n in enumerate(call.shape.seqlens_q)], dim=1)
        else:
            out, lse, _ = flash_attn.flash_attn_func(call.q, call.k, call.v, **kw)
        return out, lse


# ----------------------------------------------------------------------------- SDPA

def _sdpa_backend_context(which: str | None):
    import contextlib

    if which is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, which)])


def _sdpa_batched(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """q (b, sq, hq, d), k/v (b, sk, hkv, d) -> (b, sq, hq, dv) through torch SDPA, bottom-right causal."""
    import torch.nn.functional as F

    b, sq, hq, _ = q.shape
    sk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    if sq == 0 or sk == 0:
        return torch.zeros(b, sq, hq, dv, dtype=q.dtype, device=q.device)
    group = hq // hkv
    qt = q.transpose(1, 2)
    kt = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vt = v.transpose(1, 2).repeat_interleave(group, dim=1)
    if causal and sq != sk:
        from torch.nn.attention.bias import causal_lower_right

        with warnings.catch_warnings():  # "NaNs when seq_len_q > seq_len_kv": those rows are zeroed below
            warnings.simplefilter("ignore", UserWarning)
            mask = causal_lower_right(sq, sk)
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale)
        if sq > sk:  # the first sq - sk queries see no key: FA gives 0 there
            out[:, :, : sq - sk] = 0
    else:
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
    return out.transpose(1, 2)


class Sdpa(Provider):
    """torch SDPA with its default dispatch (cuDNN, flash, memory-efficient or math), or one forced kernel."""

    name = "sdpa"
    force: str | None = None

    def probe(self) -> tuple[bool, str]:
        return True, f"torch {torch.__version__}"

    def run(self, call: AttentionCall) -> Result:
        with _sdpa_backend_context(self.force):
            if not call.shape.varlen:
                return _sdpa_batched(call.q, call.k, call.v, call.causal, call.softmax_scale), None
            out = call.q.new_zeros(call.q.shape[0], call.shape.heads_q, call.shape.head_dim_v)
            for _, iq, ik in sequences(call.shape):
                out[iq] = _sdpa_batched(call.q[iq][None], call.k[ik][None], call.v[ik][None], call.causal, call.softmax_scale)[0]
            return out, None


class SdpaFlash(Sdpa):
    name = "sdpa-flash"
    force = "FLASH_ATTENTION"

    def probe(self) -> tuple[bool, str]:
        if not torch.cuda.is_available():
            return False, "no CUDA: SDPA's flash kernel is CUDA-only"
        fn = getattr(torch.backends.cuda, "is_flash_attention_available", None)
        if fn is not None and not fn():
            return False, f"torch {torch.__version__} was built without SDPA flash attention"
        return True, f"torch {torch.__version__} SDPA FLASH_ATTENTION"


class SdpaCudnn(Sdpa):
    name = "sdpa-cudnn"
    force = "CUDNN_ATTENTION"

    def probe(self) -> tuple[bool, str]:
        from torch.nn.attention import SDPBackend

        if not torch.cuda.is_available():
            return False, "no CUDA: cuDNN attention is CUDA-only"
        if not hasattr(SDPBackend, "CUDNN_ATTENTION") or not torch.backends.cudnn.is_available():
            return False, f"torch {torch.__version__} has no cuDNN attention"
        return True, f"torch {torch.__version__} SDPA CUDNN_ATTENTION, cuDNN {torch.backends.cudnn.version()}"


# ----------------------------------------------------------------------------- ours

class TritonKernel(Provider):
    """fp8lab.kernels.fp8_attention (CUDA, or the CPU under TRITON_INTERPRET=1); on CUDA with V
    stored keys-contiguous by `pretranspose_v` first (one copy of V)."""

    name = "triton"

    def probe(self) -> tuple[bool, str]:
        if importlib.util.find_spec("triton") is None:
            return False, "triton is not installed"
        fn, err = _triton_kernel()
        if fn is None:
            return False, err
        return True, f"triton {_version('triton')}"

    def run(self, call: AttentionCall) -> Result:
        fp8_attention, err = _triton_kernel()
        if fp8_attention is None:
            raise RuntimeError(f"triton: {err}")
        v = call.v
        if v.is_cuda:  # one copy to keys-contiguous: the kernel transposing each tile is 1.6-5x slower (H200)
            from fp8lab.kernels import pretranspose_v

            v = pretranspose_v(v)
        res = fp8_attention(
            call.q, call.k, v, call.q_descale, call.k_descale, call.v_descale,
            causal=call.causal, softmax_scale=call.softmax_scale,
            cu_seqlens_q=call.cu_seqlens_q, cu_seqlens_k=call.cu_seqlens_k,
            max_seqlen_q=call.max_seqlen_q, max_seqlen_k=call.max_seqlen_k, return_lse=call.return_lse,
            pv_flush=call.pv_flush,
        )
        return (res[0], res[1]) if call.return_lse else (res, None)


class GluonKernel(Provider):
    """fp8lab.kernels.fp8_attention_ws: FA3's warp-specialized schedule (Hopper, batched).

    V arrives in FA3's layout; the adapter stores it as `key_ordered_vt(v)` (one copy of V;
    FA3 reads V as it is) and passes q and k contiguous (a copy only where they are not).
    """

    name = "gluon"

    def probe(self) -> tuple[bool, str]:
        if importlib.util.find_spec("triton") is None:
            return False, "triton is not installed"
        mod, err = _import("fp8lab.kernels.attention_ws")
        if mod is None:
            return False, err
        if not mod.ws_supported():
            return False, f"needs Gluon (triton >= 3.5, here {_version('triton')}) and an sm_90 (Hopper) GPU"
        return True, f"triton {_version('triton')} (Gluon)"

    def run(self, call: AttentionCall) -> Result:
        from fp8lab.kernels import attention_ws

        b, s_q, h, d = call.q.shape
        s_k = call.k.shape[1]
        if s_q == 0 or s_k == 0:  # the Triton kernel's answer: zeros, and lse -inf where no key is seen
            out = call.q.new_zeros(call.q.shape, dtype=torch.bfloat16)
            lse = torch.full((b, h, s_q), float("-inf"), dtype=torch.float32, device=call.q.device)
            return out, (lse if call.return_lse else None)
        out, lse = attention_ws.fp8_attention_ws(
            call.q.contiguous(), call.k.contiguous(), attention_ws.key_ordered_vt(call.v),
            q_descale=call.q_descale, k_descale=call.k_descale, v_descale=call.v_descale,
            causal=call.causal, softmax_scale=call.softmax_scale, pv_flush=call.pv_flush,
        )
        return out, (lse if call.return_lse else None)


def _triton_kernel() -> tuple[Callable | None, str]:
    """`fp8lab.kernels.fp8_attention` (or its home module before the package re-exports it)."""
    for module in ("fp8lab.kernels", "fp8lab.kernels.attention"):
        mod, err = _import(module)
        if mod is not None and hasattr(mod, "fp8_attention"):
            return mod.fp8_attention, ""
    return None, f"fp8lab.kernels.fp8_attention is not importable{': ' + err if err else ''}"


class Reference(Provider):
    """fp8lab.reference: FA3's FP8 forward emulated step by step, or exact float64 attention."""

    name = "reference"

    def probe(self) -> tuple[bool, str]:
        mod, err = _import("fp8lab.reference")
        if mod is None:
            return False, err
        missing = [f for f in ("attention_exact", "attention_fa3_fp8") if not hasattr(mod, f)]
        if "attention_exact" in missing:
            return False, "fp8lab.reference has no attention_exact"
        return True, "fp8lab.reference" + (f" (missing {missing}: FP8 calls fail)" if missing else "")

    def run(self, call: AttentionCall) -> Result:
        from fp8lab import reference

        fn = reference.attention_fa3_fp8 if call.shape.fp8 else reference.attention_exact
        res = fn(
            call.q, call.k, call.v, causal=call.causal, softmax_scale=call.softmax_scale, **call.descales,
            cu_seqlens_q=call.cu_seqlens_q, cu_seqlens_k=call.cu_seqlens_k,
            max_seqlen_q=call.max_seqlen_q, max_seqlen_k=call.max_seqlen_k, return_lse=True,
        )
        out, lse = res
        # the emulation's out is a head-major view; contiguous as every other provider's (out.view(b, s, -1) works)
        return out.to(call.out_dtype).contiguous(), lse.to(torch.float32)


_ADAPTERS: dict[str, Provider] = {
    p.name: p
    for p in (VllmFA3(), VllmSoFA3(), FA3Interface(), UpstreamFA3(), VllmFA2(), FlashAttn2(), SdpaFlash(),
              Sdpa(), SdpaCudnn(), GluonKernel(), TritonKernel(), Reference())
}
assert set(_ADAPTERS) == set(PROVIDERS), "every ProviderSpec needs an adapter"


def get_provider(name: str) -> Provider:
    if name not in _ADAPTERS:
        raise ValueError(f"unknown provider {name!r}; known: {list(_ADAPTERS)}")
    return _ADAPTERS[name]


_PROBES: dict[str, tuple[bool, str]] = {}


def probe(name: str, refresh: bool = False) -> tuple[bool, str]:
    """`(found, detail)` for one provider, probed once per process unless `refresh`."""
    if refresh or name not in _PROBES:
        if refresh and name == "vllm-so":
            _load_vllm_so.cache_clear()
        _PROBES[name] = get_provider(name).probe()
    return _PROBES[name]


def probe_all(refresh: bool = False, names: list[str] | None = None) -> dict[str, tuple[bool, str]]:
    """`{provider: (found, detail)}` for `names` (default: every provider)."""
    return {n: probe(n, refresh) for n in (names or list(_ADAPTERS))}


def available_providers(refresh: bool = False, names: list[str] | None = None) -> set[str]:
    return {n for n, (found, _) in probe_all(refresh, names).items() if found}
