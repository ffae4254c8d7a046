"""Fused bf16/fp16 -> e4m3fn quantization kernels for attention inputs.

What these kernels teach
------------------------
Quantizing is memory-bound: read 2 bytes, write 1, a few flops in between. The
only question is how many times the data crosses HBM.

- Static scale (what vLLM does for Q, `scaled_fp8_quant`): ``inv = 1 / scale``,
  ``e4m3(clamp(x * inv, -448, 448))``. One pass: read once, write once.
- Dynamic per-token (one scale per ``(token, head)`` row of head_dim values):
  a program holds whole rows, so amax, scale and cast happen in one pass.
- Dynamic per-KV-head / per-tensor: the scale depends on every element of the
  head (or tensor), and no program sees all of them. ``schedule="two-pass"``: an
  amax kernel (``atomic_max`` into a ``(batch, heads_kv)`` table), then a
  scale-and-cast kernel; the second reads HBM again once x outgrows the L2: 2 reads
  + 1 write, less what L2 still holds of the first (the cast walks x backwards, so it
  starts there: v23). ``schedule="fused"``: one launch whose casts trail their amaxes by a
  quarter of the L2, so the second read hits L2 (HBM traffic measured within 10 %
  of one read + one write) -- and the kernel then runs into its instruction and
  latency costs instead (docs/kernel-notes.md, v7). ``schedule="onchip"``
  (`fp8lab.kernels.quantize_onchip`, Gluon, Hopper): every SM holds parts of the
  slices in shared memory until their amax is known; one read, one write (v13).

- Delayed scaling (TransformerEngine's, `quantize_fp8_delayed` / `quantize_delayed`): the
  descale comes from earlier calls' amaxes, so nothing waits for this x: one pass casts it and
  records its per-(sequence, kv head) amax for the next call (0.90 of copy per head at 128 MiB
  on the H200, v25; 0.84-0.86 at 32 MiB since v26 launches one wave there; docs/kernel-notes.md).

Conventions (FA3's): ``descale = amax / 448`` (float32), ``x ~= x_fp8 * descale``,
per-head and per-tensor descales are ``(batch, heads_kv)``; the per-tensor one is
a stride-0 expand of one value. A zero amax gives descale 1 (nothing to scale).
Values are divided by the descale, correctly rounded (one reciprocal per scale and
Markstein's two-FMA correction per value on the GPU, IEEE ``div_rn`` under the
interpreter: the same bits), clamped to +-448 (NaN stays NaN and is left out of the
amax, so a slice with no number gets descale 1; an inf makes its slice's descale inf)
and rounded to nearest even; under ``TRITON_INTERPRET=1`` the rounding is done in
float32 first (`round_to_e4m3`), because the interpreter's own cast is wrong on carries.

Measured on an H200 (docs/kernel-notes.md v5, v7, v13-v17; 128 MiB of bf16, CUDA-graph
replays so the host's launch overhead is out; copy = 4.15 TB/s), in useful bytes (3 per
value) against the copy: static 100 %, per-token 99 % (95 % at 32 MiB, 68-69 % at 16 MiB, a
6 us kernel), per-head 79 % on chip (65 % with 4 query heads per kv head; 77-79 % for slices of
129-256 parts, as with 2 query heads per kv head or 32k-token sequences, v16; 85-86 % for x
stored head-major, whose slices are contiguous memory, v17), 54 % two-pass (51 % before v23
walked pass 2 backwards) and 54 % fused, per-tensor 60 % two-pass (56 % before v23) and 34 %
fused (its casts scan every tile's amax; x does not fit on chip). The default, "auto", takes
the on-chip kernel wherever it can run on an x of 4 MiB or more (per head it won at every size
from 4 to 128 MiB; per tensor, where x fits on chip, from 8 to 24 MiB), and two passes
otherwise.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Literal

import torch
import triton
import triton.language as tl

from fp8lab.env import triton_interpret, triton_interpret_note
from fp8lab.layout import check_cu_seqlens, check_flag
from fp8lab.scaling import DelayedAmax, PerHead, PerTensor, ScaleStrategy
from fp8lab.kernels._gluon import sm_count
from fp8lab.kernels.fp8_rounding import TINY_DESCALE, round_to_e4m3
from fp8lab.kernels.quantize_onchip import OnchipPlan, onchip_plan, quantize_onchip

__all__ = ["E4M3_MAX", "quantize_delayed", "quantize_fp8", "quantize_fp8_delayed", "quantize_fp8_static"]

E4M3_MAX = 448.0  # largest finite e4m3fn value: 1.75 * 2^8
Granularity = Literal["tensor", "head", "token"]
Schedule = Literal["auto", "onchip", "fused", "two-pass"]


@triton.jit
def _to_e4m3(y, ROUND_IN_FP32: tl.constexpr):
    # saturate (a plain cast may give NaN past 448); NaN stays NaN, as in fp8lab.formats
    return _cast_e4m3(tl.clamp(y, -448.0, 448.0, propagate_nan=tl.PropagateNan.ALL), ROUND_IN_FP32)


@triton.jit
def _cast_e4m3(y, ROUND_IN_FP32: tl.constexpr):
    """y, NaN or within 448 by float32 rounding (448.00003 is 448), to e4m3fn, nearest even."""
    if ROUND_IN_FP32:  # the interpreter's own cast is wrong on carries, and turns NaN into +-384
        nan = tl.full(y.shape, 0x7F, tl.uint8).to(tl.float8e4nv, bitcast=True)  # e4m3fn's NaN, as the GPU gives
        return tl.where(y != y, nan, round_to_e4m3(y).to(tl.float8e4nv))
    return y.to(tl.float8e4nv)


@triton.jit
def _divide(x, d, r, exact, EXACT_DIV: tl.constexpr):
    """x / d correctly rounded, for d of any shape that broadcasts to x's. EXACT_DIV (a constexpr,
    under the interpreter) or `exact` (a runtime scalar, set where a d of the tile is below
    TINY_DESCALE): IEEE division per element. Else Markstein's correction: with
    r = RN(1/d) computed once per scale, q = x * r is within an ulp, fma(q, d, -x) is its exact
    residual negated, and q - residual * r rounds to RN(x / d): one FMUL and two FFMA per value
    instead of a division sequence.
    - x = -0 keeps its sign: the last FMA adds +0 * -r = -0 to q = -0 (fma(fma(-q, d, x), r, q)
      would add +0 and give +0; v13 and before paid a compare and select per value for it).
    - d = inf (an inf in the slice): r = 0 and q = x * 0 is the answer (+-0, NaN for inf);
      the residual is taken with 0 for d, so that inf * 0 does not make it NaN.
    - Below TINY_DESCALE the residual may underflow (`fp8lab.kernels.fp8_rounding` says when), and
      the tile divides exactly: a uniform branch, code rather than time."""
    if EXACT_DIV:
        return tl.math.div_rn(x, d)
    if exact:
        y = tl.math.div_rn(x, d)
    else:
        q = x * r
        d_res = tl.where(d == float("inf"), 0.0, d)
        y = tl.fma(tl.fma(q, d_res, x * -1.0), r * -1.0, q)  # y * -1.0 is a true negation; Triton's -y is 0 - y
    return y


@triton.jit
def _tile(pid_t, b, CU, seqlen_batched, stride_b, stride_s, stride_h,
          BLOCK_T: tl.constexpr, H_PAD: tl.constexpr, H: tl.constexpr, D_PAD: tl.constexpr, D: tl.constexpr,
          VARLEN: tl.constexpr, h0=0):
    """Offsets (BLOCK_T, H_PAD, D_PAD) of token block pid_t of sequence b, heads h0 .. h0+H-1,
    and their mask. With all heads, in FA3's layout, these values are one contiguous run."""
    if VARLEN:
        start = tl.load(CU + b)
        seqlen = tl.load(CU + b + 1) - start
    else:
        start = 0
        seqlen = seqlen_batched
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_h = tl.arange(0, H_PAD)
    offs_d = tl.arange(0, D_PAD)
    mask = (offs_t[:, None, None] < seqlen) & (offs_h[None, :, None] < H) & (offs_d[None, None, :] < D)
    offs = (b.to(tl.int64) * stride_b + (start + offs_t)[:, None, None].to(tl.int64) * stride_s
            + (h0 + offs_h)[None, :, None] * stride_h + offs_d[None, None, :])
    return offs, mask


@triton.jit
def _tile_of(n_tiles, FLAT: tl.constexpr, REVERSED: tl.constexpr):
    """This program's (token block, sequence). The grid is (token blocks, sequences), or with FLAT
    (more than 65535 sequences, grid axis 1's limit) one axis of n_tiles * sequences programs, whose
    division measured 2-5 % slower (v32) and so is kept for where it is needed. REVERSED: walk the
    programs last to first."""
    if FLAT:
        pid = tl.program_id(0)
        if REVERSED:
            pid = tl.num_programs(0) - 1 - pid
        pid_t, b = pid % n_tiles, pid // n_tiles
    else:
        pid_t, b = tl.program_id(0), tl.program_id(1)
        if REVERSED:
            pid_t, b = tl.num_programs(0) - 1 - pid_t, tl.num_programs(1) - 1 - b
    return pid_t, b


@triton.jit
def _tile_max_abs(x):
    """max |x| over the last axis of a 3-D tile, as float32. The max skips NaN (maxnum) unless every
    value is NaN; then it is 0 here, so a run of NaN cannot make its slice's amax NaN (or, through
    the integer order of float bits in the atomic max and the fused table, larger than every number)."""
    a = tl.max(tl.abs(x.to(tl.float32)), 2)
    return tl.where(a == a, a, 0.0)


@triton.jit
def _amax_kernel(X, AMAX, CU, group, seqlen, n_tiles, stride_b, stride_s, stride_h, stride_ab, stride_ah,
                 BLOCK_T: tl.constexpr, H_PAD: tl.constexpr, H: tl.constexpr, D_PAD: tl.constexpr,
                 D: tl.constexpr, VARLEN: tl.constexpr, PER_TENSOR: tl.constexpr, FLAT: tl.constexpr):
    """Pass 1 (per head / per tensor): amax of a tile, atomically maxed into AMAX[b, h // group]."""
    pid_t, b = _tile_of(n_tiles, FLAT, False)
    offs, mask = _tile(pid_t, b, CU, seqlen, stride_b, stride_s, stride_h, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    a = tl.max(_tile_max_abs(tl.load(X + offs, mask=mask, other=0.0)), 0)  # (H_PAD,)
    if PER_TENSOR:
        tl.atomic_max(AMAX, tl.max(a, 0))  # |x| >= 0, so a float atomic max is exact
    else:
        offs_h = tl.arange(0, H_PAD)
        tl.atomic_max(AMAX + b * stride_ab + (offs_h // group) * stride_ah, a, mask=offs_h < H)


@triton.jit
def _scale_cast_kernel(X, Y, DESCALE, AMAX, CU, group, seqlen, n_tiles, stride_b, stride_s, stride_h,
                       stride_yb, stride_ys, stride_yh, stride_db, stride_dh,
                       BLOCK_T: tl.constexpr, H_PAD: tl.constexpr, H: tl.constexpr, D_PAD: tl.constexpr,
                       D: tl.constexpr, VARLEN: tl.constexpr, STATIC: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
                       FLAT: tl.constexpr):
    """Pass 2 (per head / per tensor), or the only pass (static): y = e4m3(x / descale).

    Dynamic: the descale is computed here from pass 1's AMAX (same strides as DESCALE):
    amax / 448 correctly rounded, 1 for a zero amax; the programs of token block 0 store it.
    Pass 2 walks the blocks backwards, so that it starts with those pass 1 read last, which
    may still be in L2 (programs start roughly in launch order).
    """
    pid_t, b = _tile_of(n_tiles, FLAT, not STATIC)
    offs, mask = _tile(pid_t, b, CU, seqlen, stride_b, stride_s, stride_h, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    y_offs, _ = _tile(pid_t, b, CU, seqlen, stride_yb, stride_ys, stride_yh, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    offs_h = tl.arange(0, H_PAD)
    d_offs = b * stride_db + (offs_h // group) * stride_dh
    if STATIC:
        d = tl.load(DESCALE + d_offs, mask=offs_h < H, other=1.0)
    else:
        amax = tl.load(AMAX + d_offs, mask=offs_h < H, other=0.0)
        d = tl.where(amax > 0, tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32)), 1.0)
        if pid_t == 0:  # query heads of one kv head store the same value
            tl.store(DESCALE + d_offs, d, mask=offs_h < H)
    r = tl.math.div_rn(tl.full(d.shape, 1.0, tl.float32), d)  # one reciprocal per head
    if STATIC:  # vLLM's scaled_fp8_quant: multiply by the reciprocal
        y = x * r[None, :, None]
    else:
        y = _divide(x, d[None, :, None], r[None, :, None], tl.min(d, 0) < TINY_DESCALE, ROUND_IN_FP32)
    tl.store(Y + y_offs, _to_e4m3(y, ROUND_IN_FP32), mask=mask)


@triton.jit
def _per_token_kernel(X, Y, DESCALE, CU, seqlen, n_tiles, stride_b, stride_s, stride_h,
                      stride_yb, stride_ys, stride_yh, stride_db, stride_ds, stride_dh,
                      BLOCK_T: tl.constexpr, H_PAD: tl.constexpr, H: tl.constexpr, D_PAD: tl.constexpr,
                      D: tl.constexpr, VARLEN: tl.constexpr, ROUND_IN_FP32: tl.constexpr, FLAT: tl.constexpr):
    """One pass: each (token, head) row's amax, descale = amax / 448 (1 for a zero row), cast, store both."""
    pid_t, b = _tile_of(n_tiles, FLAT, False)
    offs, mask = _tile(pid_t, b, CU, seqlen, stride_b, stride_s, stride_h, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    y_offs, _ = _tile(pid_t, b, CU, seqlen, stride_yb, stride_ys, stride_yh, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
    d_offs, row_mask = _tile(pid_t, b, CU, seqlen, stride_db, stride_ds, stride_dh, BLOCK_T, H_PAD, H, 1, 1, VARLEN)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), 2)  # (BLOCK_T, H_PAD)
    d = tl.where(amax > 0, tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32)), 1.0)
    r = tl.math.div_rn(tl.full(d.shape, 1.0, tl.float32), d)  # one reciprocal per row
    y = _divide(x, d[:, :, None], r[:, :, None], tl.min(tl.min(d, 1), 0) < TINY_DESCALE, ROUND_IN_FP32)
    tl.store(Y + y_offs, _to_e4m3(y, ROUND_IN_FP32), mask=mask)
    tl.store(DESCALE + d_offs, d[:, :, None], mask=row_mask)


@triton.jit
def _slice_tile(s, i, n_kv, CU, seqlen_batched, stride_b, stride_s, stride_h, BLOCK_T: tl.constexpr,
                G_PAD: tl.constexpr, G: tl.constexpr, D_PAD: tl.constexpr, D: tl.constexpr, VARLEN: tl.constexpr):
    """Offsets and mask (BLOCK_T, G_PAD, D_PAD) of token block i of slice s: sequence b = s // n_kv,
    its G query heads of kv head s % n_kv. Returns (offs, mask, b, kvh)."""
    b = s // n_kv
    kvh = s - b * n_kv
    offs, mask = _tile(i, b, CU, seqlen_batched, stride_b, stride_s, stride_h, BLOCK_T, G_PAD, G, D_PAD, D,
                       VARLEN, kvh * G)
    return offs, mask, b, kvh


@triton.jit
def _work_item(t, slices, lag, nblocks):
    """Work item t -> (is_cast, slice, token block). Items run: the amaxes of slices 0 .. lag-1;
    then per slice k >= lag its amaxes interleaved with the casts of slice k - lag; then the casts
    of the last `lag` slices, last tile first (the most recently read, most likely in L2)."""
    n1 = lag * nblocks
    u2 = tl.maximum(t - n1, 0)
    u3 = t - n1 - (slices - lag) * 2 * nblocks
    j = u2 % (2 * nblocks)
    first, last = t < n1, u3 >= 0
    u3 = tl.maximum(u3, 0)
    is_cast = last | ((t >= n1) & (j % 2 == 1))
    s = tl.where(first, t // nblocks,
                 tl.where(last, slices - 1 - u3 // nblocks, lag + u2 // (2 * nblocks) - tl.where(j % 2 == 1, lag, 0)))
    i = tl.where(first, t % nblocks, tl.where(last, nblocks - 1 - u3 % nblocks, j // 2))
    return is_cast, s, i


@triton.jit
def _table_amax(TABLE, start, n, CHUNK: tl.constexpr):
    """(every entry of TABLE[start:start+n] is set, the max of their amaxes). An entry is one int64,
    1 << 32 | amax's float32 bits, written once by its amax item: flag and value in one word, so
    no fence is needed to order them."""
    flags = tl.full((CHUNK,), 1, tl.int64)
    best = tl.zeros((CHUNK,), tl.int64)
    for c in range(0, n, CHUNK):
        offs = c + tl.arange(0, CHUNK)
        e = tl.load(TABLE + start + offs, mask=offs < n, other=1 << 32, volatile=True)  # not from L1
        flags = tl.minimum(flags, e >> 32)
        best = tl.maximum(best, e & 0xFFFFFFFF)
    return tl.min(flags, 0) > 0, tl.max(best, 0).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _slices_amax(X, CU, s0, s1, nblocks, n_kv, seqlen, stride_b, stride_s, stride_h, BLOCK_T: tl.constexpr,
                 G_PAD: tl.constexpr, G: tl.constexpr, D_PAD: tl.constexpr, D: tl.constexpr, VARLEN: tl.constexpr):
    """amax of slices s0 .. s1-1, read directly: the fallback of a cast whose amax items have not run."""
    m = 0.0
    for s in range(s0, s1):
        for i in range(0, nblocks):
            offs, mask, _, _ = _slice_tile(s, i, n_kv, CU, seqlen, stride_b, stride_s, stride_h,
                                           BLOCK_T, G_PAD, G, D_PAD, D, VARLEN)
            m = tl.maximum(m, tl.max(tl.max(_tile_max_abs(tl.load(X + offs, mask=mask, other=0.0)), 1), 0))
    return m


@triton.jit
def _fused_kernel(X, Y, DESCALE, TABLE, CU, slices, lag, nblocks, n_kv, seqlen, spins,
                  stride_b, stride_s, stride_h, stride_yb, stride_ys, stride_yh, stride_db, stride_dh,
                  BLOCK_T: tl.constexpr, G_PAD: tl.constexpr, G: tl.constexpr, D_PAD: tl.constexpr,
                  D: tl.constexpr, VARLEN: tl.constexpr, PER_TENSOR: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
                  CHUNK: tl.constexpr, REVERSED: tl.constexpr):
    """Per-head / per-tensor quantization in one launch that reads HBM about once.

    Program t runs work item t of `_work_item`: the amax of a tile, or its cast, which comes about
    `lag` slices after the amax so that the tile is re-read from L2. An amax item writes its
    TABLE entry. A cast reads its slice's entries (per tensor: all of them); if some are still
    unset after `spins` re-reads, it computes the amax from x itself. That fallback only runs if
    programs start far out of order (CUDA does not promise the order), and gives the same bits:
    no program ever waits on one that may not have started. REVERSED runs the items last to
    first (a test of the fallback). A slice: one sequence's query heads of one kv head;
    DESCALE is (batch, kv heads), (1, 1) per tensor."""
    t = tl.program_id(0)
    if REVERSED:
        t = 2 * slices * nblocks - 1 - t
    is_cast, s, i = _work_item(t, slices, lag, nblocks)
    offs, mask, b, kvh = _slice_tile(s, i, n_kv, CU, seqlen, stride_b, stride_s, stride_h,
                                     BLOCK_T, G_PAD, G, D_PAD, D, VARLEN)
    x = tl.load(X + offs, mask=mask, other=0.0)
    if is_cast:
        s0, s1 = (0, slices) if PER_TENSOR else (s, s + 1)
        done, amax = _table_amax(TABLE, s0 * nblocks, (s1 - s0) * nblocks, CHUNK)
        k = 0
        while (done == 0) & (k < spins):
            done, amax = _table_amax(TABLE, s0 * nblocks, (s1 - s0) * nblocks, CHUNK)
            k += 1
        if done == 0:
            amax = _slices_amax(X, CU, s0, s1, nblocks, n_kv, seqlen, stride_b, stride_s, stride_h,
                                BLOCK_T, G_PAD, G, D_PAD, D, VARLEN)
            x = tl.load(X + offs, mask=mask, other=0.0)  # again: x need not be live in the loop above
        d = tl.where(amax > 0, tl.math.div_rn(amax, 448.0), 1.0)
        r = tl.math.div_rn(1.0, d)
        y_offs, _, _, _ = _slice_tile(s, i, n_kv, CU, seqlen, stride_yb, stride_ys, stride_yh,
                                      BLOCK_T, G_PAD, G, D_PAD, D, VARLEN)
        y = _divide(x.to(tl.float32), d, r, d < TINY_DESCALE, ROUND_IN_FP32)
        tl.store(Y + y_offs, _to_e4m3(y, ROUND_IN_FP32), mask=mask)
        if PER_TENSOR:
            if (i == 0) & (s == 0):
                tl.store(DESCALE, d)
        else:
            if i == 0:
                tl.store(DESCALE + b * stride_db + kvh * stride_dh, d)
    else:
        a = tl.max(tl.max(_tile_max_abs(x), 1), 0)
        tl.store(TABLE + s * nblocks + i, (1 << 32) | a.to(tl.int32, bitcast=True).to(tl.int64))


@triton.jit
def _max_keep_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _delayed_kernel(X, Y, DESCALE, AMAX, CU, seqlen, ntiles, nitems, per_program,
                    stride_b, stride_s, stride_h, stride_yb, stride_ys, stride_yh, stride_db, stride_dh,
                    stride_ab, stride_ah, GROUP: tl.constexpr, D_SCALAR: tl.constexpr, BLOCK_T: tl.constexpr, H_PAD: tl.constexpr, H: tl.constexpr,
                    D_PAD: tl.constexpr, D: tl.constexpr, VARLEN: tl.constexpr, ROUND_IN_FP32: tl.constexpr):
    """Delayed scaling in one pass: y = e4m3(x / DESCALE) with a given descale, and x's amax.

    A program casts `per_program` consecutive tiles (item = b * ntiles + token block), keeps a
    running amax per head in registers and max-es it into AMAX[b, h // GROUP] once per sequence
    it touched (an atomic per tile would queue thousands on the same few words). The amax keeps
    NaN (max.NaN), so a slice holding one reports NaN. AMAX holds float32 bits as int32: for |x|
    and NaN (sign bit clear) the integer order is the float order, NaN above inf (Triton's float
    atomic_max drops NaN). GROUP (query heads per kv head) is a constexpr: as a runtime integer,
    4 query heads per kv head ran at 0.80 of copy instead of 0.89; D_SCALAR (a descale whose
    kv-head stride is 0, as per tensor) loads one value per sequence (v25).

    The division, correctly rounded for any finite descale d > 0: x is clamped to +-RN(448 d)
    first, which changes no result (every |x / d| above 432 gives 448) and keeps Markstein's
    x * RN(1/d) + correction (`_divide`) finite for an inf or huge x, and makes the clamp to
    +-448 after it unneeded. A tile with a d below TINY_DESCALE (a uniform branch) scales those
    heads' d and x by 2^64 first (exact; an x that overflows saturates either way).
    """
    first = tl.program_id(0) * per_program
    last = tl.minimum(first + per_program, nitems)
    offs_h = tl.arange(0, H_PAD)
    h_mask = offs_h < H
    a_offs = (offs_h // GROUP) * stride_ah
    d_offs = (offs_h // GROUP) * stride_dh
    acc = tl.zeros((H_PAD,), tl.float32)
    acc_b = first // ntiles
    for item in range(first, last):
        b = item // ntiles
        if b != acc_b:  # a new sequence: publish the last one's amax
            tl.atomic_max(AMAX + acc_b * stride_ab + a_offs, acc.to(tl.int32, bitcast=True), mask=h_mask)
            acc = tl.zeros((H_PAD,), tl.float32)
            acc_b = b
        t = item - b * ntiles
        offs, mask = _tile(t, b, CU, seqlen, stride_b, stride_s, stride_h, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
        y_offs, _ = _tile(t, b, CU, seqlen, stride_yb, stride_ys, stride_yh, BLOCK_T, H_PAD, H, D_PAD, D, VARLEN)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        acc = _max_keep_nan(acc, tl.reduce(tl.reduce(tl.abs(x), 2, _max_keep_nan), 0, _max_keep_nan))
        if D_SCALAR:
            d = tl.full((H_PAD,), tl.load(DESCALE + b * stride_db), tl.float32)
        else:
            d = tl.load(DESCALE + b * stride_db + d_offs, mask=h_mask, other=1.0)
        if tl.min(d, 0) < TINY_DESCALE:
            k = tl.where(d < TINY_DESCALE, 18446744073709551616.0, 1.0)  # 2^64
            d = d * k
            x = x * k[None, :, None]
        r = tl.math.div_rn(tl.full(d.shape, 1.0, tl.float32), d)
        bound = (d * 448.0)[None, :, None]
        x = tl.clamp(x, -bound, bound, propagate_nan=tl.PropagateNan.ALL)
        y = _divide(x, d[None, :, None], r[None, :, None], False, ROUND_IN_FP32)
        tl.store(Y + y_offs, _cast_e4m3(y, ROUND_IN_FP32), mask=mask)
    if first < last:
        tl.atomic_max(AMAX + acc_b * stride_ab + a_offs, acc.to(tl.int32, bitcast=True), mask=h_mask)


def _layout(x: torch.Tensor, cu_seqlens: torch.Tensor | None):
    """(batch, seqlen, heads, d) strides for batched or varlen x, and the launch sizes."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"x: expected bfloat16, float16 or float32, got {str(x.dtype).replace('torch.', '')}")
    if x.device.type != "cuda" and not (triton_interpret() and x.device.type == "cpu"):
        raise ValueError(f"x: expected a CUDA tensor (or TRITON_INTERPRET=1 on the CPU), got {x.device}"
                         f"{triton_interpret_note()}")
    if x.numel() and x.stride(-1) != 1:
        raise ValueError(f"x: the last dim (head_dim) must be contiguous, got stride {x.stride(-1)}")
    if x.dim() in (3, 4) and (x.shape[-2] < 1 or x.shape[-1] < 1):  # no slice to scale; tokens may be 0
        raise ValueError(f"x: expected at least one head and head_dim >= 1, got shape {tuple(x.shape)}")
    if cu_seqlens is None:
        if x.dim() != 4:
            raise ValueError(f"x: expected (batch, seqlen, heads, head_dim), or 3-D with cu_seqlens, got {tuple(x.shape)}")
        batch, seqlen, heads, d = x.shape
        return batch, seqlen, heads, d, (x.stride(0), x.stride(1), x.stride(2))
    if x.dim() != 3:
        raise ValueError(f"x: varlen expects (total_tokens, heads, head_dim), got {tuple(x.shape)}")
    lengths = check_cu_seqlens("cu_seqlens", cu_seqlens, x.shape[0], x.device)
    return len(lengths), max(lengths), x.shape[1], x.shape[2], (0, x.stride(0), x.stride(1))


def _head_major(x: torch.Tensor, cu_seqlens: torch.Tensor | None) -> bool:
    """Batched x (b, s, h, d) stored as a contiguous (b, h, s, d), e.g. PyTorch SDPA's layout
    transposed: each (sequence, head) is then one contiguous block."""
    return (cu_seqlens is None and x.dim() == 4 and x.numel() > 0 and not x.is_contiguous()
            and x.permute(0, 2, 1, 3).is_contiguous())


def _empty_fp8(x: torch.Tensor, cu_seqlens: torch.Tensor | None) -> torch.Tensor:
    """y for x: float8_e4m3fn in x's shape, head-major where x is (`_head_major`), else contiguous."""
    if _head_major(x, cu_seqlens):
        b, s, h, d = x.shape
        return torch.empty((b, h, s, d), dtype=torch.float8_e4m3fn, device=x.device).permute(0, 2, 1, 3)
    return torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)


def _heads_kv(heads: int, heads_kv: int | None) -> int:
    if heads_kv is None:
        return heads
    try:
        hk = operator.index(heads_kv)  # Python and NumPy integers, not 2.5 or True
    except TypeError:
        hk = None
    if isinstance(heads_kv, bool) or hk is None or hk < 1 or heads % hk:
        raise ValueError(f"heads_kv: expected a positive int dividing the {heads} heads, got {heads_kv!r}")
    return hk


# schedule="auto" runs the on-chip kernel from this size of x up, wherever it can run: where it was
# measured faster than two passes, per head at 4-128 MiB and per tensor at 8-24 MiB (v14); smaller
# inputs take two passes.
AUTO_ONCHIP_BYTES = 4 << 20

# Values per program on a GPU (scripts/gpu_bench.py sweeps them; docs/kernel-notes.md v3):
TILE_ELEMENTS = 8192  # static / per-head / per-tensor: 16 KB of bf16 per program
TILE_ELEMENTS_PER_TOKEN = 4096  # per-token keeps a row max per (token, head): smaller tiles won


def _block_t(heads: int, d: int, elements: int | None = None) -> int:
    """Tokens per program: about `elements` values on a GPU, 16 tokens in the interpreter."""
    if triton_interpret():
        return 16
    per_token = triton.next_power_of_2(heads) * triton.next_power_of_2(d)
    return max(1, triton.next_power_of_2(max(1, (elements or TILE_ELEMENTS) // per_token)))


GRID_Y_MAX = 65535  # CUDA's limit on grid axis 1 (and 2)


def _launch_sizes(x, heads, d, seqlen, batch, elements=None):
    """The kernels' block sizes (FLAT: see `_tile_of`), the token blocks per sequence and the grid."""
    h_pad, d_pad = triton.next_power_of_2(max(heads, 1)), triton.next_power_of_2(max(d, 1))
    bt = _block_t(heads, d, elements)
    n_tiles = triton.cdiv(max(seqlen, 1), bt)
    flat = batch > GRID_Y_MAX
    grid = (n_tiles * batch,) if flat else (n_tiles, batch)
    return dict(BLOCK_T=bt, H_PAD=h_pad, H=heads, D_PAD=d_pad, D=d, FLAT=flat), n_tiles, grid


# The fused kernel (per head / per tensor): values per tile, warps, the bytes of x read ahead of
# the casts (None: a quarter of the L2; the casts' writes pass through it too), and table re-reads
# before a cast computes its amax itself. _FUSED_REVERSED (tests): items run last to first.
FUSED_TILE_ELEMENTS = 8192
FUSED_WARPS = 4
FUSED_LAG_BYTES: int | None = None
FUSED_SPINS = 2000
_FUSED_REVERSED = False


def _fused_lag_bytes(device: torch.device) -> int:
    if FUSED_LAG_BYTES is not None:
        return FUSED_LAG_BYTES
    if device.type != "cuda":
        return 1 << 22
    return max(1 << 20, getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) // 4)


def _quantize_fused(x, y, y_strides, cu, batch, seqlen, heads, d, hk, strides, varlen, per_tensor, round_p):
    """Launch `_fused_kernel`; returns (y, descale) like `quantize_fp8`."""
    group = heads // hk
    g_pad, d_pad = triton.next_power_of_2(group), triton.next_power_of_2(max(d, 1))
    block_t = min(_block_t(group, d, FUSED_TILE_ELEMENTS), triton.next_power_of_2(max(seqlen, 1)))
    nblocks = triton.cdiv(max(seqlen, 1), block_t)
    slices = batch * hk
    slice_bytes = max(seqlen, 1) * group * d * x.element_size()
    lag = slices if per_tensor else min(slices, max(1, _fused_lag_bytes(x.device) // slice_bytes))
    table = torch.zeros(slices * nblocks, dtype=torch.int64, device=x.device)  # (amax | set flag) per tile
    descale = (torch.ones if not x.numel() else torch.empty)(
        (1, 1) if per_tensor else (batch, hk), dtype=torch.float32, device=x.device)
    if x.numel():
        _fused_kernel[(2 * slices * nblocks,)](
            x, y, descale, table, cu, slices, lag, nblocks, hk, seqlen, 0 if _FUSED_REVERSED else FUSED_SPINS,
            *strides, *y_strides, *descale.stride(), BLOCK_T=block_t, G_PAD=g_pad, G=group, D_PAD=d_pad, D=d,
            VARLEN=varlen, PER_TENSOR=per_tensor, ROUND_IN_FP32=round_p, CHUNK=256, REVERSED=_FUSED_REVERSED,
            num_warps=FUSED_WARPS)
    return y, descale.expand(batch, hk) if per_tensor else descale


def quantize_fp8(
    x: torch.Tensor,
    granularity: Granularity = "head",
    *,
    cu_seqlens: torch.Tensor | None = None,
    heads_kv: int | None = None,
    round_in_fp32: bool | None = None,
    schedule: Schedule = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic e4m3fn quantization with fused amax, scale and cast.

    x: bf16/fp16/fp32 (batch, seqlen, heads, d) or varlen (total, heads, d) with int32
    `cu_seqlens`. granularity:
      "head"   descale (batch, heads_kv) from each (sequence, kv head)'s amax; with
               `heads_kv` < heads (Q under GQA) the query heads of a group share one.
      "tensor" one amax; descale (batch, heads_kv) as a stride-0 expand of it.
      "token"  one descale per (token, head) row: shape x.shape[:-1] (not an FA3 layout).
    schedule ("head" and "tensor"; all give the same bits):
      "auto"     "onchip" where it can run and x has at least AUTO_ONCHIP_BYTES (4 MiB: measured
                 faster from there, module doc), else "two-pass".
      "onchip"   one launch that reads HBM once: each slice (per tensor: all of x) is held in
                 the SMs' shared memory until its amax is known (`quantize_onchip`; Hopper,
                 power-of-two head_dim <= 256, slices that fit: `onchip_plan` says why not;
                 raises where it cannot run).
      "two-pass" an amax kernel, then a cast kernel: HBM is read twice once x outgrows L2.
      "fused"    one launch: each tile's cast trails its amax by about a quarter of the L2,
                 so HBM is read about once (per tensor: only when x fits in L2). Faster per
                 head at 128 MiB on an H200, slower at 32 MiB and per tensor (module doc).
    Returns (x_fp8 float8_e4m3fn in x's shape, descale float32), x ~= x_fp8 * descale. A
    batched x stored head-major, as (b, h, s, d) (`x = t.transpose(1, 2)`), is quantized as the
    contiguous slices it is (batch x kv heads sequences of one head: one pass reads contiguous
    blocks, v17), and x_fp8 is head-major too; any other x gives a contiguous x_fp8.

    Unlike `fp8lab.scaling.quantize`, which refuses NaN and inf and rounds each descale up, a
    kernel reads x once and decides nothing on the host: descale = amax / 448 rounded to nearest
    (so amax / descale may pass 448 by an ulp; the clamp keeps the code at 448), 1 for a slice of
    zeros, NaN stays NaN (left out of the amax), an inf makes its slice's descale inf.
    """
    if granularity not in ("tensor", "head", "token"):
        raise ValueError(f"granularity: expected 'tensor', 'head' or 'token', got {granularity!r}")
    if schedule not in ("auto", "onchip", "fused", "two-pass"):
        raise ValueError(f"schedule: expected 'auto', 'onchip', 'fused' or 'two-pass', got {schedule!r}")
    batch, seqlen, heads, d, strides = _layout(x, cu_seqlens)
    hk = _heads_kv(heads, heads_kv)
    round_p = _round_in_fp32(round_in_fp32)
    if _head_major(x, cu_seqlens):
        return _quantize_head_major(x, granularity, hk, round_in_fp32, schedule)
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    y_strides = (0,) + y.stride()[:2] if cu_seqlens is not None else y.stride()[:3]
    cu = cu_seqlens if cu_seqlens is not None else x  # an unused placeholder when batched
    sizes, n_tiles, grid = _launch_sizes(x, heads, d, seqlen, batch)
    varlen = cu_seqlens is not None
    if granularity == "token":
        sizes, n_tiles, grid = _launch_sizes(x, heads, d, seqlen, batch, TILE_ELEMENTS_PER_TOKEN)
        descale = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
        d_strides = (0,) + descale.stride() if varlen else descale.stride()
        if x.numel():
            _per_token_kernel[grid](x, y, descale, cu, seqlen, n_tiles, *strides, *y_strides, *d_strides,
                                    **sizes, VARLEN=varlen, ROUND_IN_FP32=round_p)
        return y, descale
    per_tensor = granularity == "tensor"
    # "auto", as measured (module doc): on chip from AUTO_ONCHIP_BYTES, where it can run
    big = x.numel() * x.element_size() >= AUTO_ONCHIP_BYTES
    if schedule == "onchip" or (schedule == "auto" and big):
        plan = ("x is empty" if not x.numel() else "it has no float32-rounding path (round_in_fp32)" if round_p
                else onchip_plan(x, batch, seqlen, heads, d, hk, per_tensor, varlen))
        if isinstance(plan, OnchipPlan):
            return quantize_onchip(x, y, cu, batch, seqlen, heads, hk, per_tensor, plan)
        if schedule == "onchip":
            raise ValueError(f"schedule='onchip' cannot take this x: {plan}")
    if schedule == "auto":
        schedule = "two-pass"
    if schedule == "fused":
        return _quantize_fused(x, y, y_strides, cu, batch, seqlen, heads, d, hk, strides, varlen, per_tensor, round_p)
    amax = torch.zeros((1, 1) if per_tensor else (batch, hk), dtype=torch.float32, device=x.device)
    group = heads // hk
    if x.numel():
        _amax_kernel[grid](x, amax, cu, group, seqlen, n_tiles, *strides, *amax.stride(),
                           **sizes, VARLEN=varlen, PER_TENSOR=per_tensor)
    # descale = amax / 448 (correctly rounded; 1 where amax is 0), written by the cast kernel
    descale = torch.ones_like(amax) if not x.numel() else torch.empty_like(amax)
    if per_tensor:
        descale, amax = descale.expand(batch, hk), amax.expand(batch, hk)
    if x.numel():
        _scale_cast_kernel[grid](x, y, descale, amax, cu, group, seqlen, n_tiles, *strides, *y_strides, *descale.stride(),
                                 **sizes, VARLEN=varlen, STATIC=False, ROUND_IN_FP32=round_p)
    return y, descale


def _round_in_fp32(flag: bool | None) -> bool:
    """`round_in_fp32` as the kernels take it: None = whether the Triton interpreter runs them (its fp8
    conversion rounds wrongly where rounding carries into the exponent), else a bool."""
    return triton_interpret() if flag is None else check_flag("round_in_fp32", flag)


def _quantize_head_major(x: torch.Tensor, granularity: Granularity, hk: int, round_in_fp32: bool | None,
                         schedule: Schedule) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize_fp8` of head-major x (`_head_major`) as a contiguous x of b * hk sequences of
    group * s tokens and one head (a view): each such sequence is one (sequence, kv head) slice,
    so every schedule reads contiguous blocks, and y, the same view back, is head-major."""
    b, s, h, d = x.shape
    g = h // hk
    flat = x.permute(0, 2, 1, 3).reshape(b * hk, g * s, 1, d)
    y, descale = quantize_fp8(flat, granularity, round_in_fp32=round_in_fp32, schedule=schedule)
    y = y.view(b, h, s, d).permute(0, 2, 1, 3)
    if granularity == "token":  # (b * hk, g * s, 1) -> (b, s, h)
        return y, descale.view(b, h, s).permute(0, 2, 1)
    if granularity == "tensor":  # a stride-0 expand of one value
        return y, descale[:1, :1].expand(b, hk)
    return y, descale.view(b, hk)


def _check_static_scale(scale: object) -> None:
    """A float32 scale in the normal range: 1 / scale must not overflow (0 * inf would be a NaN code)."""
    f32 = torch.finfo(torch.float32)
    if (isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale)
            or not f32.tiny <= scale <= f32.max):
        raise ValueError(f"scale: expected a number > 0 in float32's normal range [{f32.tiny:.3g}, "
                         f"{f32.max:.3g}], got {scale!r}")


def quantize_fp8_static(
    x: torch.Tensor,
    scale: torch.Tensor | float,
    *,
    cu_seqlens: torch.Tensor | None = None,
    heads_kv: int | None = None,
    round_in_fp32: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's static per-tensor quantization of Q: e4m3(clamp(x * (1 / scale), +-448)), one pass.

    scale: a positive float or one-element float32 tensor (the checkpoint's q_scale).
    Returns (x_fp8, descale) with descale = scale expanded to (batch, heads_kv), stride 0,
    exactly what vLLM passes to FA3 as q_descale; x_fp8 is head-major where x is (as in
    `quantize_fp8`), else contiguous.
    """
    batch, seqlen, heads, d, strides = _layout(x, cu_seqlens)
    hk = _heads_kv(heads, heads_kv)
    if isinstance(scale, torch.Tensor):
        if scale.dtype != torch.float32 or scale.numel() != 1 or scale.device != x.device:
            raise ValueError(
                f"scale: expected a one-element float32 tensor on {x.device}, got {scale.dtype} "
                f"{tuple(scale.shape)} on {scale.device}"
            )
        s = scale.reshape(1, 1)
        if s.device.type == "cpu":  # a GPU tensor's value is not read back: that would cost a device sync per call
            _check_static_scale(s.item())
    else:
        _check_static_scale(scale)
        s = torch.full((1, 1), float(scale), dtype=torch.float32, device=x.device)
    descale = s.expand(batch, hk)
    round_p = _round_in_fp32(round_in_fp32)
    y = _empty_fp8(x, cu_seqlens)
    y_strides = (0,) + y.stride()[:2] if cu_seqlens is not None else y.stride()[:3]
    cu = cu_seqlens if cu_seqlens is not None else x  # an unused placeholder when batched
    sizes, n_tiles, grid = _launch_sizes(x, heads, d, seqlen, batch)
    if x.numel():
        _scale_cast_kernel[grid](x, y, descale, descale, cu, heads // hk, seqlen, n_tiles, *strides, *y_strides, 0, 0,
                                 **sizes, VARLEN=cu_seqlens is not None, STATIC=True, ROUND_IN_FP32=round_p)
    return y, descale


# quantize_fp8_delayed: programs per SM (each loops over consecutive tiles; 0: one tile per program), values
# per tile, warps (v25, run21 call 3: 0.90 of copy at 128 MiB; 16 x 2048 values x 2 warps 0.89, 16 x 4096 x 4
# 0.86, one tile per program 0.69-0.80); DELAYED_SMALL_PROGRAMS_PER_SM where DELAYED_PROGRAMS_PER_SM would give
# a program fewer than DELAYED_MIN_TILES tiles: all programs then run in one wave (4 fit per SM at 128
# registers; v26, run22: 0.83-0.87 of copy at 32 MiB against 0.77); and programs on the CPU (the
# interpreter: few, so that a program's tiles cross sequences, which the tests need)
DELAYED_PROGRAMS_PER_SM = 8
DELAYED_SMALL_PROGRAMS_PER_SM = 4
DELAYED_MIN_TILES = 4
DELAYED_TILE_ELEMENTS = 8192
DELAYED_WARPS = 4
DELAYED_CPU_PROGRAMS = 2


def _delayed_programs(items: int, sms: int | None) -> int:
    """Programs for `items` tiles on `sms` SMs (None: the interpreter); 0 means one per tile."""
    if sms is None:
        return DELAYED_CPU_PROGRAMS
    if items < DELAYED_MIN_TILES * DELAYED_PROGRAMS_PER_SM * sms:
        return DELAYED_SMALL_PROGRAMS_PER_SM * sms
    return DELAYED_PROGRAMS_PER_SM * sms


def quantize_fp8_delayed(
    x: torch.Tensor,
    descale: torch.Tensor,
    *,
    cu_seqlens: torch.Tensor | None = None,
    heads_kv: int | None = None,
    round_in_fp32: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Delayed scaling (TransformerEngine's) in one pass: cast with a descale known before x, and
    return x's amax for the next call's descale.

    x: bf16/fp16/fp32 (batch, seqlen, heads, d), or varlen (total, heads, d) with int32
    `cu_seqlens`. descale: float32 (batch, heads_kv), any strides (a stride-0 expand of one
    value is per tensor), e.g. `DelayedAmax.descale` expanded. Returns (x_fp8, amax):
    x_fp8 = e4m3(clamp(x / descale, +-448)), the division correctly rounded as in
    `fp8lab.scaling.quantize_with_descale` (values past the descale's range saturate), head-major
    where x is; amax float32 (batch, heads_kv), the max |x| of each (sequence, kv head), NaN
    where that slice holds a NaN (`amax.amax()` is the per-tensor one).

    One read of x and one write, as a static scale: a dynamic (current) per-head or per-tensor
    scale needs every value of a slice before the first cast (`quantize_fp8`). A GPU descale's
    values are not read back (a device sync per call); on the CPU they must be finite and > 0.

    `quantize_delayed(x, strategy)` runs it as `fp8lab.scaling.quantize` runs a `DelayedAmax`.
    """
    batch, seqlen, heads, d, strides = _layout(x, cu_seqlens)
    hk = _heads_kv(heads, heads_kv)
    if not isinstance(descale, torch.Tensor):
        raise TypeError(f"descale: expected a float32 tensor of shape ({batch}, {hk}), got {type(descale).__name__}")
    if descale.dtype != torch.float32 or tuple(descale.shape) != (batch, hk) or descale.device != x.device:
        raise ValueError(f"descale: expected float32 ({batch}, {hk}) on {x.device}, got "
                         f"{str(descale.dtype).replace('torch.', '')} {tuple(descale.shape)} on {descale.device}")
    if descale.device.type == "cpu" and descale.numel() and not bool((descale.isfinite() & (descale > 0)).all()):
        raise ValueError(f"descale: expected finite values > 0, got {descale.flatten()[:8].tolist()}")
    round_p = _round_in_fp32(round_in_fp32)
    y = _empty_fp8(x, cu_seqlens)
    y_strides = (0,) + y.stride()[:2] if cu_seqlens is not None else y.stride()[:3]
    amax = torch.zeros((batch, hk), dtype=torch.float32, device=x.device)
    if not x.numel():
        return y, amax
    sizes, ntiles, _ = _launch_sizes(x, heads, d, seqlen, batch, DELAYED_TILE_ELEMENTS)
    del sizes["FLAT"]  # its programs walk a 1-D list of items already
    items = batch * ntiles
    programs = _delayed_programs(items, sm_count(x.device) if x.device.type == "cuda" else None) or items
    per_program = triton.cdiv(items, min(items, programs))
    cu = cu_seqlens if cu_seqlens is not None else x  # an unused placeholder when batched
    _delayed_kernel[(triton.cdiv(items, per_program),)](
        x, y, descale, amax.view(torch.int32), cu, seqlen, ntiles, items, per_program,
        *strides, *y_strides, *descale.stride(), *amax.stride(), GROUP=heads // hk,
        D_SCALAR=descale.stride(1) == 0, **sizes, VARLEN=cu_seqlens is not None, ROUND_IN_FP32=round_p,
        num_warps=DELAYED_WARPS)
    return y, amax


def quantize_delayed(x: torch.Tensor, strategy: ScaleStrategy) -> tuple[torch.Tensor, torch.Tensor]:
    """`fp8lab.scaling.quantize(x, strategy)` for a `DelayedAmax` source, in one kernel pass.

    x: (batch, seqlen, heads, d), or (tokens, heads, d) as one sequence, on the GPU (or the CPU
    under TRITON_INTERPRET=1). strategy: `PerTensor()` or `PerHead(heads_kv)` granularity,
    `DelayedAmax` source, e4m3fn with saturation. Returns (x_fp8, descale) as the reference does,
    descale in the compact shape ((1, heads_kv) or ()), and records x's amax in
    `strategy.source` the same way: the same bits and descales, call after call (tests). A NaN
    or inf in x raises ValueError and leaves the history as it was, as the reference does
    (checked on the kernel's amax: one small read-back per call, which `record` needs anyway).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if not isinstance(strategy, ScaleStrategy) or not isinstance(strategy.source, DelayedAmax):
        raise ValueError(f"strategy: expected a ScaleStrategy with a DelayedAmax source, got {strategy!r}")
    g = strategy.granularity
    if not isinstance(g, (PerTensor, PerHead)) or strategy.format.name != "e4m3fn" or not strategy.saturate:
        raise ValueError(f"strategy: the kernel casts to saturating e4m3fn per tensor or per head, got "
                         f"{type(g).__name__}, {strategy.format.name}, saturate={strategy.saturate}")
    x4 = x[None] if x.dim() == 3 else x
    if x4.dim() != 4:
        raise ValueError(f"x: expected (batch, seqlen, heads, head_dim) or (tokens, heads, head_dim), got {tuple(x.shape)}")
    b, _, h, _ = x4.shape
    hk = 1 if isinstance(g, PerTensor) else (g.heads_kv or h)
    compact = g.compact_shape((1, x4.shape[0] * x4.shape[1], h, x4.shape[3]))
    descale = strategy.source.current_descale(compact, x.device)
    y, amax = quantize_fp8_delayed(x4, descale.reshape(1, -1).expand(b, hk).float(), heads_kv=hk)
    folded = amax.amax() if isinstance(g, PerTensor) else amax.amax(0, keepdim=True)
    if not bool(torch.isfinite(folded).all()):
        raise ValueError(f"x: cannot compute a scale from a tensor with NaN or inf values (amax {folded.tolist()})")
    strategy.source.record(folded.double(), strategy.max, eps=strategy.eps, power_of_two=strategy.power_of_two)
    return y.reshape(x.shape), descale
