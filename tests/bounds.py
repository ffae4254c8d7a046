"""Error bounds shared by the GPU tests: what Hopper's FP8 tensor cores may add to the lse.

Hopper's FP8 MMA keeps about 13 mantissa bits of its accumulator (facts file
section 1; `fp8lab.reference.AccumulatorModel`'s default is 13), cut once per
32-wide K chunk. The emulation accumulates Q·K^T in exact fp32, so an FP8
kernel's lse may differ from it by up to 2^-13 per chunk of the largest sum of
|q_d k_d| terms (softmax-scaled). Measured on the H200: FA3 (both providers)
and our Triton kernel sit inside it; the exact-fp32 bound alone failed.
"""

from __future__ import annotations

import torch

from fp8lab.backends.api import dequantize_inputs
from fp8lab.layout import check_attention_inputs, sequences

FP8_ACC_BITS = 13
MMA_K = 32  # one FP8 wgmma step reduces 32 products


def max_abs_score_terms(q: torch.Tensor, k: torch.Tensor, descales: dict, kw: dict) -> float:
    """max over (query, key) of softmax_scale * sum_d |q_d k_d| on the dequantized inputs.

    kw: the varlen keywords (cu_seqlens_*, max_seqlen_*) or {}.
    """
    shape = check_attention_inputs(q, k, k, **kw)
    qf, kf, _ = dequantize_inputs(q, k, k, shape, descales.get("q_descale"), descales.get("k_descale"), None,
                                  dtype=torch.float32)
    worst = 0.0
    for _, iq, ik in sequences(shape):
        terms = torch.einsum("qhd,khd->hqk", qf[iq].abs(), kf[ik].abs().repeat_interleave(shape.group_size, dim=1))
        if terms.numel():  # an empty sequence has no scores
            worst = max(worst, terms.max().item())
    return worst * shape.head_dim ** -0.5


def fp8_qk_accumulation_term(qk_abs: float, head_dim: int) -> float:
    """The lse error Hopper's FP8 accumulator may add: 2^-13 x ceil(head_dim / 32) x `qk_abs`."""
    return 2.0 ** -FP8_ACC_BITS * -(-head_dim // MMA_K) * qk_abs
