"""Float Q, K, V to FP8 with FA3's `(batch, heads_kv)` descales, for the emulation and the notebooks.

A thin layer over `fp8lab.scaling.quantize_for_fa3`: amax / 448 per (sequence, KV
head) - for Q over every query head of the GQA group, since FA3 indexes Q's
descale by KV head - or one amax for the whole tensor (an expand()ed, stride-0
descale). Varlen inputs get one descale per sequence, as FA3 indexes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp8lab.layout import check_attention_inputs, sequences
from fp8lab.scaling import PerHead, PerTensor, ScaleStrategy, quantize_for_fa3

__all__ = ["GRANULARITIES", "QuantizedQKV", "quantize_qkv"]

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


def quantize_qkv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    granularity: str = "head",
    *,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
) -> QuantizedQKV:
    """Cast float q, k, v to e4m3fn (RNE, saturating) with amax / 448 descales (see the module doc).

    Layouts as FA3 (batched, or varlen with cu_seqlens); granularity "head" or "tensor".
    Returns `QuantizedQKV` with float32 (batch, heads_kv) descales.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity: expected one of {GRANULARITIES}, got {granularity!r}")
    shape = check_attention_inputs(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    if shape.fp8:
        raise TypeError("quantize_qkv: q, k, v are already float8_e4m3fn; pass float tensors")
    hk = shape.heads_kv
    strategy = ScaleStrategy(PerHead(heads_kv=hk) if granularity == "head" else PerTensor())
    if not shape.varlen:
        (q8, qd), (k8, kd), (v8, vd) = (quantize_for_fa3(x, strategy, hk, name=n) for n, x in (("q", q), ("k", k), ("v", v)))
        return QuantizedQKV(q8, k8, v8, qd, kd, vd)
    if granularity == "tensor":  # one amax over all sequences: quantize the token tensors whole
        (q8, qd), (k8, kd), (v8, vd) = (quantize_for_fa3(x[None], strategy, hk, name=n) for n, x in (("q", q), ("k", k), ("v", v)))
        return QuantizedQKV(q8[0], k8[0], v8[0], *(d[:1].expand(shape.batch, hk) for d in (qd, kd, vd)))
    parts: dict[str, list] = {n: [] for n in ("q", "k", "v")}
    for _, iq, ik in sequences(shape):
        for n, x, idx in (("q", q, iq), ("k", k, ik), ("v", v, ik)):
            parts[n].append(quantize_for_fa3(x[idx][None], strategy, hk, name=n))
    cat = {n: (torch.cat([p[0][0] for p in ps]), torch.cat([p[1] for p in ps])) for n, ps in parts.items()}
    return QuantizedQKV(cat["q"][0], cat["k"][0], cat["v"][0], cat["q"][1], cat["k"][1], cat["v"][1])
