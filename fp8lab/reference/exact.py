"""Exact attention in float64: the yardstick every FP8 result is measured against.

Supports FA3's batched and varlen layouts, GQA/MQA, bottom-right causal masks,
sliding windows, softmax_scale, and FP8 inputs with `(batch, heads_kv)` descales
(dequantized first, so the answer is "exact attention on what the FP8 inputs hold").
Works on any device; memory is bounded by processing queries in chunks.
"""

from __future__ import annotations

import math

import torch

from fp8lab.layout import AttentionShape, check_attention_inputs, check_descale, check_softmax_scale, sequences
from fp8lab.reference.masks import key_range, normalize_window, visible

__all__ = ["attention_exact", "dequantize", "group_rows", "ungroup_rows"]

# Largest score tile (elements) materialized at once; 2^25 float64 = 256 MiB.
_TILE_ELEMENTS = 1 << 25


def dequantize(x: torch.Tensor, descale: torch.Tensor | None, heads_kv: int) -> torch.Tensor:
    """`x` (batch, seqlen, heads, dim) as float64, times its `(batch, heads_kv)` descale.

    Head `h` uses descale column `h // (heads // heads_kv)` (a GQA group shares Q's descale).
    """
    x64 = x.to(torch.float64)
    if descale is None:
        return x64
    group = x.shape[2] // heads_kv
    factor = descale.to(torch.float64).repeat_interleave(group, dim=1)
    return x64 * factor[:, None, :, None]


def group_rows(x: torch.Tensor, heads_kv: int) -> torch.Tensor:
    """(batch, seqlen, heads, dim) -> (batch, heads_kv, group, seqlen, dim), heads of a GQA group together."""
    b, s, h, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, heads_kv, h // heads_kv, s, d)


def ungroup_rows(x: torch.Tensor) -> torch.Tensor:
    """(batch, heads_kv, group, seqlen, dim) -> (batch, seqlen, heads, dim)."""
    b, hk, g, s, d = x.shape
    return x.reshape(b, hk * g, s, d).permute(0, 2, 1, 3)


def query_chunk(batch: int, heads_q: int, keys: int) -> int:
    """How many query positions to process at once so a score tile stays below `_TILE_ELEMENTS`."""
    return max(1, _TILE_ELEMENTS // max(1, batch * heads_q * max(keys, 1)))


def _exact_batched(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, left: int, right: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 q (b, sq, hq, d), k/v (b, sk, hkv, d) -> out (b, sq, hq, dv), lse (b, hq, sq)."""
    b, sq, hq, _ = q.shape
    sk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    g = hq // hkv
    qg = group_rows(q, hkv)  # (b, hkv, g, sq, d)
    kg = k.permute(0, 2, 1, 3)  # (b, hkv, sk, d)
    vg = v.permute(0, 2, 1, 3)
    out = torch.zeros(b, hkv, g, sq, dv, dtype=torch.float64, device=q.device)
    lse = torch.full((b, hkv, g, sq), -math.inf, dtype=torch.float64, device=q.device)
    step = query_chunk(b, hq, sk)
    for q0 in range(0, sq, step):
        q1 = min(sq, q0 + step)
        lo, hi = key_range(q0, q1, sq, sk, left, right)
        if hi <= lo:
            continue
        c = q1 - q0
        rows = qg[:, :, :, q0:q1].reshape(b, hkv, g * c, q.shape[3])
        s = rows @ kg[:, :, lo:hi].transpose(-1, -2) * scale
        q_pos = torch.arange(q0, q1, device=q.device).repeat(g)
        mask = visible(q_pos, torch.arange(lo, hi, device=q.device), sq, sk, left, right)
        s = s.masked_fill(~mask, -math.inf)
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(s - m)
        l = p.sum(dim=-1, keepdim=True)
        o = (p @ vg[:, :, lo:hi]) / torch.where(l > 0, l, torch.ones_like(l))
        lse_c = torch.where(l > 0, m + torch.log(l), torch.full_like(l, -math.inf))
        out[:, :, :, q0:q1] = o.reshape(b, hkv, g, c, dv)
        lse[:, :, :, q0:q1] = lse_c.reshape(b, hkv, g, c)
    return ungroup_rows(out), lse.reshape(b, hq, sq)


def attention_exact(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention computed in float64, on q's device.

    q: (batch, seqlen_q, heads_q, head_dim) or varlen (total_q, heads_q, head_dim)
    k, v: (batch, seqlen_k, heads_kv, head_dim[_v]) or varlen (total_k, heads_kv, head_dim[_v])
    FP8 (float8_e4m3fn) inputs are dequantized with their float32 (batch, heads_kv)
    descales (None = 1); q's descale is indexed by KV head. window_size=(left, right)
    follows FlashAttention (-1 = unbounded); causal sets right = 0.

    Returns out, float64 in q's layout with head_dim_v, and with return_lse the
    float64 natural-log logsumexp of the scaled scores, (batch, heads_q, seqlen_q)
    batched or (heads_q, total_q) varlen. Fully masked rows give out 0, lse -inf.
    """
    shape = check_attention_inputs(
        q, k, v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
    )
    left, right = normalize_window(causal, window_size)
    scale = check_softmax_scale(softmax_scale, shape.head_dim)
    if not shape.varlen:
        qd = dequantize(q, q_descale, shape.heads_kv)
        kd = dequantize(k, k_descale, shape.heads_kv)
        vd = dequantize(v, v_descale, shape.heads_kv)
        out, lse = _exact_batched(qd, kd, vd, scale, left, right)
        return (out, lse) if return_lse else out
    out = torch.zeros(q.shape[0], shape.heads_q, shape.head_dim_v, dtype=torch.float64, device=q.device)
    lse = torch.full((shape.heads_q, q.shape[0]), -math.inf, dtype=torch.float64, device=q.device)
    for b, iq, ik in sequences(shape):
        sel = slice(b, b + 1)
        qd = dequantize(q[iq][None], None if q_descale is None else q_descale[sel], shape.heads_kv)
        kd = dequantize(k[ik][None], None if k_descale is None else k_descale[sel], shape.heads_kv)
        vd = dequantize(v[ik][None], None if v_descale is None else v_descale[sel], shape.heads_kv)
        o, l = _exact_batched(qd, kd, vd, scale, left, right)
        out[iq] = o[0]
        lse[:, iq] = l[0]
    return (out, lse) if return_lse else out


def shape_of(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, descales: tuple, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k
) -> AttentionShape:
    """`check_attention_inputs`, also accepting descales with float inputs (then they are quantization steps)."""
    fp8 = q.dtype == torch.float8_e4m3fn
    shape = check_attention_inputs(
        q, k, v,
        **({} if not fp8 else dict(zip(("q_descale", "k_descale", "v_descale"), descales))),
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
    )
    if not fp8:
        for name, d in zip(("q_descale", "k_descale", "v_descale"), descales):
            check_descale(name, d, shape.batch, shape.heads_kv, q.device)
    return shape
