"""Float Q, K, V to FP8 with FA3's `(batch, heads_kv)` descales, for the emulation and the notebooks.

The descale of a (sequence, KV head) is amax / 448 over that head's tokens
(for Q, over every query head of the GQA group, since FA3 indexes Q's descale
by KV head), or one amax over the whole tensor with granularity="tensor".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp8lab.formats import cast_to_fp8, get_format
from fp8lab.layout import check_attention_inputs

__all__ = ["QuantizedQKV", "fp8_descale", "quantize_qkv"]

_E4M3_MAX = get_format("e4m3fn").max
GRANULARITIES = ("head", "tensor")


@dataclass(frozen=True)
class QuantizedQKV:
    """FP8 inputs and their float32 (batch, heads_kv) descales: `q.float() * q_descale ~ q_original`."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_descale: torch.Tensor
    k_descale: torch.Tensor
    v_descale: torch.Tensor

    @property
    def descales(self) -> dict[str, torch.Tensor]:
        return {"q_descale": self.q_descale, "k_descale": self.k_descale, "v_descale": self.v_descale}


def fp8_descale(
    x: torch.Tensor,
    heads_kv: int,
    granularity: str = "head",
    *,
    cu_seqlens: torch.Tensor | None = None,
    margin: float = 1.0,
) -> torch.Tensor:
    """float32 (batch, heads_kv) descales amax / (448 / margin) for `x` in FA3 layout.

    x: (batch, seqlen, heads, dim), or (total, heads, dim) with `cu_seqlens`.
    granularity: "head" (one per sequence and KV head) or "tensor" (one for all, expanded, stride 0).
    An all-zero slice gets descale 1 (anything works for zeros).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: expected one of {GRANULARITIES}, got {granularity!r}")
    if not margin > 0:
        raise ValueError(f"margin: expected > 0, got {margin}")
    a = x.detach().abs().to(torch.float32)
    if cu_seqlens is None:
        if a.dim() != 4:
            raise ValueError(f"x: expected (batch, seqlen, heads, dim) without cu_seqlens, got shape {tuple(a.shape)}")
        b, _, h, _ = a.shape
        amax = a.reshape(b, a.shape[1], heads_kv, h // heads_kv, -1).amax(dim=(1, 3, 4))
    else:
        bounds = cu_seqlens.tolist()
        h = a.shape[1]
        amax = torch.stack(
            [a[s:e].reshape(e - s, heads_kv, -1).amax(dim=(0, 2)) if e > s else a.new_zeros(heads_kv)
             for s, e in zip(bounds[:-1], bounds[1:])]
        )
    shape = amax.shape
    if granularity == "tensor":
        amax = amax.amax()
    descale = amax * (margin / _E4M3_MAX)
    descale = torch.where(descale > 0, descale, torch.ones_like(descale))
    return descale.expand(shape) if granularity == "tensor" else descale


def quantize_qkv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    granularity: str = "head",
    *,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
) -> QuantizedQKV:
    """Cast float q, k, v to e4m3fn (RNE, saturating) with amax-based descales (see module doc).

    Layouts as FA3 (batched, or varlen with cu_seqlens). Returns `QuantizedQKV`.
    """
    shape = check_attention_inputs(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    if shape.fp8:
        raise TypeError("quantize_qkv: q, k, v are already float8_e4m3fn; pass float tensors")
    out = {}
    for name, x, cu in (("q", q, cu_seqlens_q), ("k", k, cu_seqlens_k), ("v", v, cu_seqlens_k)):
        d = fp8_descale(x, shape.heads_kv, granularity, cu_seqlens=cu)
        out[name] = (_cast(x, d, shape, cu is not None, name == "q"), d)
    return QuantizedQKV(out["q"][0], out["k"][0], out["v"][0], out["q"][1], out["k"][1], out["v"][1])


def _cast(x: torch.Tensor, descale: torch.Tensor, shape, varlen: bool, is_q: bool) -> torch.Tensor:
    """cast_to_fp8(x / descale), dividing in float32 as production quantizers do, per (sequence, KV head)."""
    g = shape.group_size if is_q else 1
    per_head = descale.to(torch.float32).repeat_interleave(g, dim=1)  # (batch, heads)
    if not varlen:
        return cast_to_fp8(x.to(torch.float32) / per_head[:, None, :, None])
    lengths = torch.tensor(shape.seqlens_q if is_q else shape.seqlens_k, device=x.device)
    per_token = per_head.repeat_interleave(lengths, dim=0)  # (total, heads)
    return cast_to_fp8(x.to(torch.float32) / per_token[:, :, None])
