"""V stored key-contiguous, as FP8 MMAs read it: one copy of V by a Triton kernel.

An FP8 wgmma takes its B operand K-major only, so P @ V needs V^T's rows (one per head_dim
column) with the keys contiguous, the transpose of FA3's layout. `fp8lab.kernels.pretranspose_v`
and `key_ordered_vt` store V so; on a GPU both run `transpose_keys`: each program loads a tile
of keys x head_dim (coalesced along head_dim), transposes it on chip and stores it along the
keys, optionally with key c of every 32 stored at column `key_order(c)` (where P's registers,
relabelled by `in_key_order`, hold its probability; the Triton kernel instead reads K's rows in the
inverse direction, column c holding key `key_order(c)`: notebook 09 (c)).
torch's strided copy does the same transpose of one-byte elements an order of magnitude slower
(v1: 0.38 ms for 64 MiB).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fp8lab.kernels.attention import in_key_order
from fp8lab.kernels.quantize import GRID_Y_MAX

__all__ = ["transpose_keys"]

BLOCK_S, BLOCK_D = 64, 64


@triton.jit
def _transpose_keys_kernel(V, VT, seqlen, seqlen_out, heads, head_dim,
                           stride_vb, stride_vs, stride_vh,
                           BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, KEY_ORDERED: tl.constexpr, FLAT: tl.constexpr):
    if FLAT:  # more than 65535 (batch, head) pairs, grid axis 1's limit: (key block, pair) on axis 0
        n_s = tl.cdiv(seqlen_out, BLOCK_S)
        pid_s, pid_bh, pid_d = tl.program_id(0) % n_s, tl.program_id(0) // n_s, tl.program_id(2)
    else:
        pid_s, pid_bh, pid_d = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b, h = pid_bh // heads, pid_bh % heads
    offs_s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < head_dim
    src = V + b.to(tl.int64) * stride_vb + h * stride_vh + offs_s.to(tl.int64)[:, None] * stride_vs + offs_d[None, :]
    x = tl.load(src, mask=(offs_s < seqlen)[:, None] & d_ok[None, :], other=0)  # keys past seqlen: zeros
    # key c of every 32 to column key_order(c): the tile's columns renamed on chip, stored in order
    # (a scattered store of single bytes measured 2x slower than torch's copies)
    xt = in_key_order(tl.trans(x), KEY_ORDERED)
    row0 = (b.to(tl.int64) * heads + h) * head_dim
    dst = VT + (row0 + offs_d.to(tl.int64))[:, None] * seqlen_out + offs_s[None, :]
    tl.store(dst, xt, mask=d_ok[:, None] & (offs_s < seqlen_out)[None, :])


def transpose_keys(v: torch.Tensor, seqlen_out: int, key_ordered: bool = False) -> torch.Tensor:
    """V (b, s, h, d), any strides with head_dim contiguous, one byte per element, as a contiguous
    (b, h, d, seqlen_out) buffer of the same dtype: keys past s are zeros; with `key_ordered` key
    c of every 32 at column `key_order(c)` (seqlen_out then a multiple of 32). CUDA, or the CPU
    under TRITON_INTERPRET=1."""
    if v.dim() != 4 or v.element_size() != 1 or v.stride(-1) != 1:
        raise ValueError(f"v: expected a (b, s, h, d) tensor of one-byte elements with head_dim contiguous, got "
                         f"{v.dtype} shape {tuple(v.shape)} strides {v.stride()}")
    b, s, h, d = v.shape
    if seqlen_out < s or (key_ordered and seqlen_out % 32):
        raise ValueError(f"seqlen_out: expected >= {s}{' and a multiple of 32' if key_ordered else ''}, got {seqlen_out}")
    out = torch.empty((b, h, d, seqlen_out), dtype=v.dtype, device=v.device)
    if out.numel():
        n_s, flat = triton.cdiv(seqlen_out, BLOCK_S), b * h > GRID_Y_MAX
        grid = (n_s * b * h, 1, triton.cdiv(d, BLOCK_D)) if flat else (n_s, b * h, triton.cdiv(d, BLOCK_D))
        _transpose_keys_kernel[grid](v.view(torch.uint8), out.view(torch.uint8), s, seqlen_out, h, d,
                                     v.stride(0), v.stride(1), v.stride(2),
                                     BLOCK_S=BLOCK_S, BLOCK_D=BLOCK_D, KEY_ORDERED=bool(key_ordered), FLAT=flat,
                                     num_warps=4)
    return out
