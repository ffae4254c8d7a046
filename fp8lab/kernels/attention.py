"""FP8 flash attention forward in Triton, the way FlashAttention-3 computes it.

What this kernel teaches
------------------------
Flash attention never writes the (seqlen_q x seqlen_k) score matrix: each
program owns BLOCK_M query rows, walks over the keys BLOCK_N at a time, and
keeps a running row maximum ``m``, a running row sum ``l`` and an unnormalised
output ``acc`` (the "online softmax"). FP8 adds five steps, each marked
``# FP8 step n`` below:

1. Descale folding. Q and K arrive as e4m3 codes with per-(batch, kv-head)
   descales. ``q_descale * k_descale`` is folded into the softmax scale (in the
   exp2 domain, ``log2(e) * softmax_scale``), so the QK^T MMA runs on raw codes
   and no element is ever rescaled. ``v_descale`` is applied once, at the end.
2. Max offset. FA3 subtracts ``max - 8`` instead of ``max`` before exp2, so P
   lies in [0, 2^8] = [0, 256] rather than [0, 1] (P is unnormalised: its row max
   is exactly 2^8). A power of two does not change how a normal number rounds, but
   e4m3's normal range ends at 2^-6: without the offset, values below 2^-6 of their
   row's max fall among the subnormals (absolute step 2^-9) or to zero; the offset
   lifts them 8 binades onto the normal grid. The row sum carries the same factor
   2^8, so the output is unchanged; only the logsumexp is corrected.
3. P cast. P is rounded to e4m3 (nearest even; it never saturates, 256 < 448)
   so the PV product is an FP8 MMA too. The row sum uses the float32 P, as FA3.
4. V layout. FP8 tensor-core MMAs (Hopper wgmma) need both operands K-major.
   In P @ V the reduction runs over keys, so V must be key-contiguous. FA3's
   V is head_dim-contiguous; the kernel either transposes tiles on the way to
   shared memory (``v_layout="natural"``) or reads a V that the caller stored
   transposed once (``v_layout="transposed"``, see `pretranspose_v`).
5. P's register layout (GPU). The QK^T accumulator and the e4m3 A operand of the PV
   MMA spread a row's keys over a quad's threads differently, so P would be shuffled
   between threads. With ``permute_keys`` K's rows are loaded in the order `key_order`,
   each thread's scores are then the keys its A registers need, and `in_key_order` is a
   renaming of registers (FA3 permutes V's keys for the same reason). Same keys, same bits.

Pseudo-code (one program = one query block of one head of one sequence)::

    c = softmax_scale * log2(e) * q_descale * k_descale           # FP8 step 1
    m = -inf; l = 0; acc = 0
    for key block j from the last to the first:                    # FA3's order
        s = Q_blk @ K_j^T                          (fp32; masked -> -inf)
        m_new = max(m, rowmax(s))
        p = exp2(s * c - (m_new * c - 8))          in [0, 256]     # FP8 step 2
        alpha = exp2((m - m_new) * c)
        l = l * alpha + rowsum(p)
        acc = acc * alpha + e4m3(p) @ V_j          (fp32 registers)  # steps 3, 4
        m = m_new
    out = acc * v_descale / l                      (bf16)
    lse = ln2 * (m * c - 8 + log2(l))              (natural log; -inf where l == 0)

The accumulator registers are fp32, but on Hopper the FP8 MMA adds its products with
about 13 bits kept (fp8lab.reference's `HOPPER_FP8_MMA`), and by default the PV MMA
accumulates into O itself, over every key block, as upstream FA3 does: the error then
grows with the context (rel. L2 0.024 / 0.19 / 0.44 at 2k / 16k / 64k keys on V + 1
inputs, equal to FA3's and to the emulation's accumulator model, v27).
``fp8_attention(..., pv_flush=True)`` takes each block's P V in a fresh accumulator and adds
it to O in fp32, as vLLM's FA3 library does: 0.0025-0.0033 at every length. The second fp32
tile needs registers (`explain.flush_registers`): it fits beside S and O in tiles of 64 query
rows per warpgroup up to head dim 128, where the flush costs at most 6 % (v28). The flush
defaults of `gpu_config(..., pv_flush=True)` at head dim 64 causal (128 rows on one warpgroup,
48 bytes of spill) and at 256 (where O alone takes 128 registers per thread and no tile fits)
spill, and were kept because they measured fastest anyway; at 256 the flush costs about half the
speed. Under the interpreter both equal fp32 accumulation.

Causal masks are aligned bottom-right. Key blocks are visited in two phases,
both from the last block down: first the blocks that need a mask (the
diagonal band and a ragged tail), then the fully visible ones without any
masking work ("on-band split"); blocks wholly above the diagonal are skipped.
Together the two phases visit the blocks in exactly the reverse order the
FA3 emulation in `fp8lab.reference` uses (``reverse_blocks=True``).

Scheduling: one program per (query block, batch x head), on a 1-D grid that
takes heads in chunks whose K and V fit in L2, longest query blocks first.

Speed on an H200 (docs/kernel-notes.md, notebook 07; the v23 grid, every provider in
interleaved rounds): 0.874-0.949x FA3's FP8 kernel at head dim 64, 0.850-0.882x at 128,
0.758-0.843x at 256, and faster than FA3 bf16 and than vLLM's FP8 varlen path in all 18
cases; the Gluon kernel, `fp8_attention_ws`, is the faster of the two in 17 of them. The
levers that mattered: V pre-transposed (2.1-3.1x in the v1-v3 sweeps), 4-warp programs (two or
three per SM, overlapping one's softmax with another's MMAs), per-head-dim block sizes, no
device syncs in the host-side checks of batched calls (they had cost 0.3-0.6 ms per call; a
varlen call still reads cu_seqlens on the host unless it is captured in a CUDA graph), and
v10's ``permute_keys`` with a one-compare causal mask (+6-11 % at head dim 64, +7-10 % at 128
causal). ``pipeline_qk`` issues the next block's QK^T before this block's
softmax (FA3's intra-warpgroup overlap; the SASS shows the overlap) but lost wherever
registers were short. TMA descriptors (``use_tma``) and Triton's warp specialization
(``warp_specialize``) measured no gain and stay switches.

Under ``TRITON_INTERPRET=1`` (CI on a CPU) P and the output are rounded in
float32 before their casts (`fp8lab.kernels.fp8_rounding`), because the
interpreter's fp32 -> e4m3 and fp32 -> bf16 casts are wrong; the kernel then
equals the emulation bit for bit.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import Literal

import torch
import triton
import triton.language as tl

from fp8lab.env import set_kernels_interpreted, triton_interpret, triton_interpret_note
from fp8lab.kernels.fp8_rounding import round_to_bf16, round_to_e4m3
from fp8lab.layout import (AttentionShape, check_attention_inputs, check_descale, check_flag, check_folded_scale,
                           check_max_offset, check_softmax_scale)

__all__ = [
    "AttentionConfig",
    "attention_configs",
    "default_config",
    "fp8_attention",
    "pretranspose_v",
    "tune_attention",
    "v_layout_of",
]

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): turns the kernel's log2-domain lse into a natural log
FA3_MAX_OFFSET = 8.0  # hopper/softmax.h Max_offset for FP8: P in [0, 2^8]

VLayout = Literal["auto", "natural", "transposed"]


# --------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------
@triton.jit
def _tile_mask(offs_n, seqlen_k, MASKED: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """The load mask of a K/V tile (None when every element is in bounds)."""
    if HEAD_DIM == HEAD_DIM_PAD:  # no column mask: unmasked blocks load without predicates
        if MASKED:
            load_mask = (offs_n < seqlen_k)[:, None]
        else:
            load_mask = None
    else:  # 96, 192: the padded columns read as 0 and are never stored
        d_ok = (tl.arange(0, HEAD_DIM_PAD) < HEAD_DIM)[None, :]
        if MASKED:
            load_mask = (offs_n < seqlen_k)[:, None] & d_ok
        else:
            load_mask = d_ok
    return load_mask


@triton.jit
def key_order(BLOCK_N: tl.constexpr, PERMUTE_KEYS: tl.constexpr):
    """Which key of a block each column of the score tile holds, (BLOCK_N,) int32.

    FP8 step 5 (GPU). The QK^T accumulator gives thread t of each quad the score columns
    {2t, 2t+1, 8+2t, 9+2t, 16+2t, 17+2t, 24+2t, 25+2t} of every 32; the e4m3 A operand of the
    PV wgmma wants {4t..4t+3, 16+4t..19+4t} in its registers. With PERMUTE_KEYS, K's rows are
    loaded in the order tau(c) = 32g + 16a + 4t + 2b + e for c = 32g + 16a + 8b + 2t + e, so the
    columns a thread holds are exactly the keys its A registers need: `in_key_order` is then a
    renaming of registers, and the shuffles of P (3 instructions per 4 values) disappear.
    """
    j = tl.arange(0, BLOCK_N)
    if PERMUTE_KEYS:
        j = (j & -32) | (j & 16) | (((j >> 1) & 3) << 2) | (((j >> 3) & 1) << 1) | (j & 1)
    return j


@triton.jit
def in_key_order(p, PERMUTE_KEYS: tl.constexpr):
    """P with column k holding key k: undoes `key_order` (register renaming on the GPU)."""
    if PERMUTE_KEYS:  # column (a, t, b, e) <- column (a, b, t, e) of every 32
        p = p.reshape(p.shape[0], p.shape[1] // 32, 2, 2, 4, 2).permute(0, 1, 2, 4, 3, 5).reshape(p.shape)
    return p


@triton.jit
def _load_tile(ptrs, n0, stride_s, load_mask):
    """A pointer-loaded K or V tile of key block `n0` (the pointer tile is block 0's)."""
    if load_mask is None:
        tile = tl.load(ptrs + n0.to(tl.int64) * stride_s)
    else:
        tile = tl.load(ptrs + n0.to(tl.int64) * stride_s, mask=load_mask, other=0.0)
    return tile


@triton.jit
def _load_k(K, k_ptrs, stride_ks, tma_b, hk, k_start, n0, load_mask,
            HEAD_DIM_PAD: tl.constexpr, BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr):
    """The K tile of key block `n0`, (BLOCK_N, HEAD_DIM_PAD). TMA: rows past the tensor read as zeros."""
    if USE_TMA:
        k = K.load([tma_b, k_start + n0, hk, 0]).reshape(BLOCK_N, HEAD_DIM_PAD)
    else:
        k = _load_tile(k_ptrs, n0, stride_ks, load_mask)
    return k


@triton.jit
def _load_v(V, v_ptrs, stride_vs, tma_b, hk, k_start, n0, load_mask,
            HEAD_DIM_PAD: tl.constexpr, BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr, V_TRANSPOSED: tl.constexpr):
    """The V tile of key block `n0`, (BLOCK_N, HEAD_DIM_PAD)."""
    # FP8 step 4: the wgmma B operand must be key-contiguous.
    if USE_TMA:
        if V_TRANSPOSED:
            v = tl.trans(V.load([tma_b, hk, 0, k_start + n0]).reshape(HEAD_DIM_PAD, BLOCK_N))
        else:
            v = V.load([tma_b, k_start + n0, hk, 0]).reshape(BLOCK_N, HEAD_DIM_PAD)
    else:
        # One expression for both layouts: Triton specialises strides equal to 1, so with
        # stride_vs == 1 (pre-transposed) the tile lands key-contiguous, and with
        # stride_vd == 1 (natural) the compiler transposes it on its way to shared memory.
        v = _load_tile(v_ptrs, n0, stride_vs, load_mask)
    return v


@triton.jit
def _scores(q, k, n0, offs_m, seqlen_k, diag, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
            PERMUTE_KEYS: tl.constexpr):
    """S = Q K^T on raw e4m3 codes (fp32, descales not applied yet); masked -> -inf.
    Column c holds key n0 + `key_order`[c]."""
    s = tl.dot(q, tl.trans(k))
    if MASKED:
        keys = key_order(BLOCK_N, PERMUTE_KEYS)
        if CAUSAL:  # row i sees key n0 + j iff j <= last(i) - n0 (bottom-right alignment)
            last = tl.minimum(offs_m + diag, seqlen_k - 1) - n0  # one compare per score
            keep = keys[None, :] <= last[:, None]
        else:
            keep = (n0 + keys < seqlen_k)[None, :]
        s = tl.where(keep, s, float("-inf"))
    return s


@triton.jit
def _softmax_pv(acc, l_i, m_i, s, v, scale_log2, MAX_OFFSET: tl.constexpr, ROUND_IN_FP32: tl.constexpr,
                PERMUTE_KEYS: tl.constexpr, PV_FLUSH: tl.constexpr):
    """Online-softmax update with the scores `s` of one key block, P cast to e4m3, acc += P V.
    `s`'s columns are in `key_order`; V's rows in key order. `PV_FLUSH`: see `AttentionConfig`."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked rows so far: avoid inf - inf
    # one FFMA each, one rounding, as FA3's compiled code (and the emulation): a multiply and a subtract
    # rounded apart can move P across an e4m3 rounding boundary (the interpreter does not fuse them)
    max_scaled = tl.fma(m_use, scale_log2, -MAX_OFFSET)  # FP8 step 2: subtract (max - 8), P in [0, 2^8]
    p = tl.math.exp2(tl.fma(s, scale_log2, -max_scaled[:, None]))  # FP8 step 1: scale_log2 holds the descales
    alpha = tl.math.exp2((m_i - m_use) * scale_log2)
    p = in_key_order(p, PERMUTE_KEYS)  # FP8 step 5: no data moves on the GPU
    l_i = l_i * alpha + tl.sum(p, 1)  # the row sum uses the float32 P, as FA3 does
    acc = acc * alpha[:, None]
    # FP8 step 3: P to e4m3, nearest even (P <= 256 < 448: never saturates).
    if ROUND_IN_FP32:  # the interpreter's cast is wrong on carries: pre-round so the cast is exact
        p = round_to_e4m3(p)
    if PV_FLUSH:  # a fresh accumulator per key block, added to O in float32 (vLLM's two levels)
        acc += tl.dot(p.to(tl.float8e4nv), v)
    else:  # O itself accumulates in the FP8 MMA, over every key block (upstream FA3)
        acc = tl.dot(p.to(tl.float8e4nv), v, acc)
    return acc, l_i, m_new


@triton.jit
def _attend_block(
    acc, l_i, m_i, q,  # running state and the resident Q tile
    K, V,  # TMA descriptors when USE_TMA, else unused
    k_ptrs, v_ptrs,  # pointer tiles of key block 0 (pointer loads)
    stride_ks, stride_vs,
    tma_b, hk, k_start,  # TMA coordinates: batch index, kv head, first key token
    n0, offs_m, seqlen_k, diag, scale_log2,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, V_TRANSPOSED: tl.constexpr,
    MAX_OFFSET: tl.constexpr, ROUND_IN_FP32: tl.constexpr, V_FIRST: tl.constexpr, PERMUTE_KEYS: tl.constexpr,
    PV_FLUSH: tl.constexpr,
):
    """One key block: scores, online-softmax update, P cast, PV product.

    `V_FIRST`: issue the V load before the QK^T product, so its latency hides behind the
    MMA and the softmax (for a loop that is not software-pipelined; a pipelined loop
    prefetches V anyway).
    """
    load_mask = _tile_mask(n0 + tl.arange(0, BLOCK_N), seqlen_k, MASKED, HEAD_DIM, HEAD_DIM_PAD)
    if PERMUTE_KEYS and MASKED:  # K's rows are keys in `key_order`
        k_mask = _tile_mask(n0 + key_order(BLOCK_N, PERMUTE_KEYS), seqlen_k, MASKED, HEAD_DIM, HEAD_DIM_PAD)
    else:
        k_mask = load_mask
    k = _load_k(K, k_ptrs, stride_ks, tma_b, hk, k_start, n0, k_mask, HEAD_DIM_PAD, BLOCK_N, USE_TMA)
    if V_FIRST:
        v = _load_v(V, v_ptrs, stride_vs, tma_b, hk, k_start, n0, load_mask,
                    HEAD_DIM_PAD, BLOCK_N, USE_TMA, V_TRANSPOSED)
    s = _scores(q, k, n0, offs_m, seqlen_k, diag, BLOCK_N, MASKED, CAUSAL, PERMUTE_KEYS)
    if not V_FIRST:
        v = _load_v(V, v_ptrs, stride_vs, tma_b, hk, k_start, n0, load_mask,
                    HEAD_DIM_PAD, BLOCK_N, USE_TMA, V_TRANSPOSED)
    return _softmax_pv(acc, l_i, m_i, s, v, scale_log2, MAX_OFFSET, ROUND_IN_FP32, PERMUTE_KEYS, PV_FLUSH)


@triton.jit
def _fp8_attention_fwd(
    # ---- tensors -----------------------------------------------------------------
    Q, K, V,  # e4m3fn; K and V are TMA descriptors when USE_TMA
    O,  # bf16 output, q's layout
    LSE,  # float32 logsumexp, (batch, heads_q, seqlen_q) or (heads_q, total_q)
    Q_DESCALE, K_DESCALE, V_DESCALE,  # float32 (batch, heads_kv), any strides
    CU_SEQLENS_Q, CU_SEQLENS_K,  # int32 (batch + 1,) when VARLEN, else unused
    # ---- strides, in elements (batch strides are 0 for varlen) ---------------------
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh, stride_vd,
    stride_ob, stride_os, stride_oh,
    stride_lb, stride_lh, stride_ls,
    stride_qdb, stride_qdh, stride_kdb, stride_kdh, stride_vdb, stride_vdh,
    # ---- sizes and scale ----------------------------------------------------------
    heads_q, seqlen_q_batched, seqlen_k_batched,  # sequence lengths when not VARLEN
    n_m_blocks, batch_heads, heads_per_chunk,  # the 1-D grid's work: see "Scheduling" below
    softmax_scale_log2,  # softmax_scale * log2(e), before descales
    # ---- compile-time switches ------------------------------------------------------
    GROUP: tl.constexpr,  # query heads per kv head (GQA/MQA)
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,  # padded to a power of two for tl.arange
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
    USE_TMA: tl.constexpr, V_TRANSPOSED: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,  # let Triton split loads and math into warp groups (off-band loop)
    MAX_OFFSET: tl.constexpr,  # 8.0 as FA3; 0.0 gives plain softmax P in [0, 1]
    MASKED_STAGES: tl.constexpr,  # None: the on-band loop is pipelined like the rest (v2); 1: not (v4)
    PIPELINE_QK: tl.constexpr,  # off-band loop: issue the next block's QK^T before this block's softmax (v5)
    PERMUTE_KEYS: tl.constexpr,  # K's rows in `key_order`, so P needs no shuffles (v10; pointer loads only)
    PV_FLUSH: tl.constexpr,  # P V of each key block in a fresh accumulator, added to O in float32 (v27)
    ROUND_IN_FP32: tl.constexpr,  # exact P and output rounding under the interpreter (see fp8_rounding)
):
    # Scheduling: (batch, head) pairs are taken in chunks of `heads_per_chunk`, whose K and V
    # fit in L2 together; inside a chunk, query blocks run last-first across all its heads,
    # so the longest causal rows start first (longest-processing-time order) and the short
    # ones fill the tail.
    pid = tl.program_id(0)
    chunk_size = n_m_blocks * heads_per_chunk
    chunk = pid // chunk_size
    heads_here = tl.minimum(heads_per_chunk, batch_heads - chunk * heads_per_chunk)
    r = pid - chunk * chunk_size
    pid_m = n_m_blocks - 1 - r // heads_here
    pid_bh = chunk * heads_per_chunk + r % heads_here
    b = pid_bh // heads_q
    h = pid_bh % heads_q
    hk = h // GROUP  # query head h reads kv head h // (heads_q // heads_kv)
    if VARLEN:
        q_start = tl.load(CU_SEQLENS_Q + b)
        seqlen_q = tl.load(CU_SEQLENS_Q + b + 1) - q_start
        k_start = tl.load(CU_SEQLENS_K + b)
        seqlen_k = tl.load(CU_SEQLENS_K + b + 1) - k_start
        tma_b = 0
    else:
        q_start = 0
        seqlen_q = seqlen_q_batched
        k_start = 0
        seqlen_k = seqlen_k_batched
        tma_b = b
    m0 = pid_m * BLOCK_M
    if m0 >= seqlen_q:  # varlen: this sequence is shorter than the longest
        return
    b64 = b.to(tl.int64)

    # FP8 step 1: fold q_descale * k_descale into the exp2-domain softmax scale.
    q_descale = tl.load(Q_DESCALE + b * stride_qdb + hk * stride_qdh)
    k_descale = tl.load(K_DESCALE + b * stride_kdb + hk * stride_kdh)
    v_descale = tl.load(V_DESCALE + b * stride_vdb + hk * stride_vdh)
    scale_log2 = softmax_scale_log2 * (q_descale * k_descale)

    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    in_q = offs_m < seqlen_q
    q_ptrs = (Q + b64 * stride_qb + h.to(tl.int64) * stride_qh
              + (q_start + offs_m)[:, None].to(tl.int64) * stride_qs + offs_d[None, :])
    q = tl.load(q_ptrs, mask=in_q[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0)
    offs_n = tl.arange(0, BLOCK_N)
    if USE_TMA:
        k_ptrs = K
        v_ptrs = V
    else:  # pointer tiles of key block 0; block j adds j * BLOCK_N * stride (one scalar)
        k_ptrs = (K + b64 * stride_kb + hk.to(tl.int64) * stride_kh + k_start.to(tl.int64) * stride_ks
                  + key_order(BLOCK_N, PERMUTE_KEYS)[:, None] * stride_ks + offs_d[None, :])
        v_ptrs = (V + b64 * stride_vb + hk.to(tl.int64) * stride_vh + k_start.to(tl.int64) * stride_vs
                  + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd)

    # Which key blocks this query block needs, and which of them need a mask.
    diag = seqlen_k - seqlen_q  # query i sees keys j <= i + diag
    if CAUSAL:
        n_end = tl.minimum(seqlen_k, m0 + BLOCK_M + diag)  # keys the last row of the block sees
        n_blocks = tl.cdiv(tl.maximum(n_end, 0), BLOCK_N)
        n_full = tl.minimum(tl.maximum(m0 + diag + 1, 0), seqlen_k) // BLOCK_N  # seen by the first row
    else:
        n_blocks = tl.cdiv(seqlen_k, BLOCK_N)
        n_full = seqlen_k // BLOCK_N
    n_full = tl.minimum(n_full, n_blocks)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    # Phase 1, on the band: the masked blocks (diagonal band, ragged tail), last first.
    # v4: with MASKED_STAGES set this loop (1-2 blocks for causal, 0-1 otherwise) gets its own,
    # shallower pipeline: no prefetch prologue, and no registers for in-flight tiles competing
    # with the off-band loop's (offline sm_90 compiles: m128n64 causal at head_dim 128 loses its
    # spills); with 1 stage V is loaded before QK^T so its latency overlaps the MMA and softmax.
    for i in tl.range(0, n_blocks - n_full, num_stages=MASKED_STAGES):
        n0 = (n_blocks - 1 - i) * BLOCK_N
        acc, l_i, m_i = _attend_block(
            acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, stride_ks, stride_vs, tma_b, hk, k_start,
            n0, offs_m, seqlen_k, diag, scale_log2,
            HEAD_DIM, HEAD_DIM_PAD, BLOCK_N, True, CAUSAL, USE_TMA, V_TRANSPOSED, MAX_OFFSET, ROUND_IN_FP32,
            MASKED_STAGES == 1, PERMUTE_KEYS, PV_FLUSH,
        )
    # Phase 2, off the band: fully visible blocks, no mask work at all.
    if not PIPELINE_QK:
        for i in tl.range(0, n_full, warp_specialize=WARP_SPECIALIZE):
            n0 = (n_full - 1 - i) * BLOCK_N
            acc, l_i, m_i = _attend_block(
                acc, l_i, m_i, q, K, V, k_ptrs, v_ptrs, stride_ks, stride_vs, tma_b, hk, k_start,
                n0, offs_m, seqlen_k, diag, scale_log2,
                HEAD_DIM, HEAD_DIM_PAD, BLOCK_N, False, CAUSAL, USE_TMA, V_TRANSPOSED, MAX_OFFSET, ROUND_IN_FP32,
                False, PERMUTE_KEYS, PV_FLUSH,
            )
    elif n_full > 0:
        # v5, FA3's intra-warpgroup overlap: the scores of block j-1 are issued (an async
        # wgmma) before the softmax of block j, so the tensor cores work while the same warps
        # compute exp2. Same operations in the same order: the same bits.
        off_mask = _tile_mask(tl.arange(0, BLOCK_N), seqlen_k, False, HEAD_DIM, HEAD_DIM_PAD)
        n0 = (n_full - 1) * BLOCK_N
        k = _load_k(K, k_ptrs, stride_ks, tma_b, hk, k_start, n0, off_mask, HEAD_DIM_PAD, BLOCK_N, USE_TMA)
        s = _scores(q, k, n0, offs_m, seqlen_k, diag, BLOCK_N, False, CAUSAL, PERMUTE_KEYS)
        for i in tl.range(0, n_full - 1):
            n0 = (n_full - 1 - i) * BLOCK_N
            k = _load_k(K, k_ptrs, stride_ks, tma_b, hk, k_start, n0 - BLOCK_N, off_mask,
                        HEAD_DIM_PAD, BLOCK_N, USE_TMA)
            s_next = _scores(q, k, n0 - BLOCK_N, offs_m, seqlen_k, diag, BLOCK_N, False, CAUSAL, PERMUTE_KEYS)
            v = _load_v(V, v_ptrs, stride_vs, tma_b, hk, k_start, n0, off_mask, HEAD_DIM_PAD, BLOCK_N,
                        USE_TMA, V_TRANSPOSED)
            acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, v, scale_log2, MAX_OFFSET, ROUND_IN_FP32, PERMUTE_KEYS,
                                        PV_FLUSH)
            s = s_next
        first = pid * 0  # key block 0, as a tensor (tile offsets are widened to int64)
        v = _load_v(V, v_ptrs, stride_vs, tma_b, hk, k_start, first, off_mask, HEAD_DIM_PAD, BLOCK_N,
                    USE_TMA, V_TRANSPOSED)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, v, scale_log2, MAX_OFFSET, ROUND_IN_FP32, PERMUTE_KEYS,
                                        PV_FLUSH)

    # Epilogue: normalise, apply v_descale once, write bf16 out and the natural-log lse.
    empty = l_i == 0.0  # fully masked rows: out = 0, lse = -inf
    out = acc * ((1.0 / tl.where(empty, 1.0, l_i)) * v_descale)[:, None]  # as FA3: O * (1 / l * v_descale)
    m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
    lse = (m_use * scale_log2 - MAX_OFFSET + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453  # ln 2
    lse = tl.where(empty, float("-inf"), lse)
    o_ptrs = (O + b64 * stride_ob + h.to(tl.int64) * stride_oh
              + (q_start + offs_m)[:, None].to(tl.int64) * stride_os + offs_d[None, :])
    if ROUND_IN_FP32:  # the interpreter truncates float32 -> bf16; round to nearest first
        out = round_to_bf16(out)
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=in_q[:, None] & (offs_d[None, :] < HEAD_DIM))
    l_ptrs = LSE + b64 * stride_lb + h.to(tl.int64) * stride_lh + (q_start + offs_m).to(tl.int64) * stride_ls
    tl.store(l_ptrs, lse, mask=in_q)


# Triton chose interpreted or compiled kernels just now, from TRITON_INTERPRET: for this whole process
set_kernels_interpreted(type(_fp8_attention_fwd).__name__ == "InterpretedFunction")


# --------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionConfig:
    """Launch configuration. `block_n` also fixes the order of the online softmax,
    so pass it to `fp8lab.reference.attention_fa3_fp8(block_n=...)` to compare tightly.

    `use_tma`: load K/V through TMA tensor descriptors (Hopper) where the strides allow
    (16-byte aligned, power-of-two head_dim); otherwise pointer loads are used.
    `masked_stages`: 0 pipelines the on-band (masked) loop like the off-band one (v2);
    n > 0 gives it its own `num_stages=n` (1: no prefetch, V loaded before QK^T; v4 candidate).
    `maxnreg`: cap on registers per thread (ptxas ``.maxnreg``), so more programs share an SM:
    65536 registers / (32 * num_warps * maxnreg) programs, e.g. 3 at 4 warps and 168.
    `pipeline_qk`: in the off-band loop, issue the next key block's QK^T before this block's
    softmax, so the tensor cores and the exp2 units work at once (v5; same bits).
    `permute_keys`: load K's rows of each block in the order that makes the e4m3 P of the
    QK^T accumulator the PV MMA's A operand without moving data between threads (what FA3
    gets from `permute_Cregs_fp8` and its own V transpose, done on K; v10; same bits). Needs
    pointer loads (no `use_tma`) and block_n a multiple of 32.
    `pv_flush`: compute each key block's P V in a fresh accumulator and add it to O in float32,
    as vLLM's FA3 library does, instead of letting O accumulate in the FP8 MMA across all key
    blocks, as upstream FA3 (the default) does. Hopper's FP8 MMA keeps about 13 bits of its
    accumulator, so without the flush the error grows with the context (v27; notebook 05 (e)).
    The block's product needs a second fp32 tile beside O (`explain.flush_registers` counts
    them): up to head dim 128 it fits in tiles of 64 query rows per warpgroup; the flush defaults
    of `gpu_config(..., pv_flush=True)` at head dim 64 causal and at 256 spill a little and were
    kept because they measured fastest (v28).
    The interpreter's products are exact either way: same bits on the CPU.
    """

    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 3
    use_tma: bool = False
    warp_specialize: bool = False
    masked_stages: int = 0
    maxnreg: int | None = None
    pipeline_qk: bool = False
    permute_keys: bool = False
    pv_flush: bool = False

    def label(self) -> str:
        return (f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}"
                + ("-tma" if self.use_tma else "") + ("-ws" if self.warp_specialize else "")
                + (f"-ms{self.masked_stages}" if self.masked_stages else "")
                + (f"-r{self.maxnreg}" if self.maxnreg else "") + ("-pq" if self.pipeline_qk else "")
                + ("-pk" if self.permute_keys else "") + ("-pf" if self.pv_flush else ""))


def attention_configs(head_dim: int) -> list[AttentionConfig]:
    """The small candidate set `tune_attention` times for a head dim (Hopper sizes, from the
    H200 sweeps in docs/kernel-notes.md; TMA and warp specialization measured no gain there).

    The S tile (block_m x block_n fp32) and the accumulator (block_m x head_dim fp32) live in
    registers, so large head dims take smaller key blocks; 4 warps let two programs share an SM.
    """
    C = AttentionConfig
    if head_dim <= 64:
        cands = [_MEASURED_DEFAULTS[(64, False)], _MEASURED_DEFAULTS[(64, True)],
                 C(64, 128, 4, 3, maxnreg=168, permute_keys=True), C(64, 128, 4, 4, maxnreg=168, permute_keys=True),
                 *V4_CANDIDATES[(64, False)],
                 C(64, 64, 4, 4, maxnreg=128), C(128, 64, 4, 3)]
        return list(dict.fromkeys(cands))
    if head_dim <= 128:
        cands = [C(128, 128, 4, 3), C(128, 128, 4, 3, permute_keys=True), C(128, 64, 4, 3, permute_keys=True),
                 C(128, 64, 4, 3), C(64, 64, 4, 3, maxnreg=168), C(64, 128, 4, 3, permute_keys=True)]
        return list(dict.fromkeys(cands))
    return [C(128, 64, 8, 4, permute_keys=True), C(128, 64, 8, 3, permute_keys=True),
            C(128, 128, 8, 2, permute_keys=True), C(128, 64, 8, 3, pipeline_qk=True), C(128, 128, 8, 2),
            C(128, 64, 8, 4)]


# The configs `fp8_attention` uses on a GPU, keyed by (padded head_dim, causal): winners of the
# H200 sweeps (scripts/gpu_bench.py; docs/kernel-notes.md v2, v4, v5, v6, v10, v11). v10 (two runs,
# results/h200/bench_v10_*): `permute_keys` everywhere but head dim 128 non-causal (a tie there),
# block_n 128 at head dim 128 causal (the one-compare mask ended its spills), and at head dim 64
# the 128-row tile (fewer instructions per score than 64 rows once P needs no shuffles; causal, it
# gave up 1-2 % at 4k for 2-5 % at 16k: the better worst case in all three runs). v11 (two runs,
# bench_v11_triton_explore, bench_v11_check256): 128 keys in two stages at head dim 256 causal.
_MEASURED_DEFAULTS: dict[tuple[int, bool], AttentionConfig] = {
    (64, False): AttentionConfig(128, 128, 4, 4, permute_keys=True),  # v10: 0.89-0.94x FA3 (v9: 0.80-0.87x)
    (64, True): AttentionConfig(128, 128, 4, 3, permute_keys=True),  # v10: 0.91-0.95x in three runs (v9: 0.84-0.91x)
    (128, False): AttentionConfig(128, 128, 4, 3),  # v2; with permute_keys within +-1.6 % in two runs
    (128, True): AttentionConfig(128, 128, 4, 3, permute_keys=True),  # v10: 0.88-0.93x (v9: 0.81-0.86x)
    (256, False): AttentionConfig(128, 64, 8, 4, permute_keys=True),  # v10: +1-4 %; the Gluon kernel is faster (v11)
    (256, True): AttentionConfig(128, 128, 8, 2, permute_keys=True),  # v11: +4-8 % over v10's m128n64w8s3-pk
}
# v4 candidates, measured in one quick run (results/h200/bench_v4_quick.*; docs/kernel-notes.md "v4"):
# the head_dim 64 ones won that run (v10's 128-row tiles replaced them as defaults); the head_dim 128 causal ones
# lost to v2 (0.75-0.84x vs 0.83-0.86x) and stay candidates only. Keyed like
# `_MEASURED_DEFAULTS`. Chosen from offline sm_90 compiles (triton 3.9 + its ptxas, no GPU):
# - head_dim 64: 64-row blocks capped at 168 registers, so three 4-warp programs share an SM
#   (v2: two, at 255 registers with spills in the off-band loop); no spills, wgmma not serialized.
# - head_dim 128 causal: m128n64 with the on-band loop unpipelined (its spills go away), and
#   m64n128 (block_n 128 with a 64-row accumulator fits: 243-255 registers, no spills).
# `masked_stages=1` at head_dim 64 made ptxas serialize every wgmma (C7515), so it is not used there.
V4_CANDIDATES: dict[tuple[int, bool], list[AttentionConfig]] = {
    (64, False): [AttentionConfig(64, 128, 4, 3, maxnreg=168)],  # tied with the default (526 vs 524, 548 vs 548)
    (64, True): [AttentionConfig(64, 128, 4, 4, maxnreg=168)],  # 480 vs 487 at 4k, 549 vs 547 at 16k
    (128, True): [AttentionConfig(128, 64, 4, 3, masked_stages=1), AttentionConfig(64, 128, 4, 3),
                  AttentionConfig(64, 128, 4, 3, masked_stages=1)],
}
# v5 candidates: `pipeline_qk` (FA3's intra-warpgroup overlap) with block shapes whose two live
# score tiles fit in registers. Offline sm_90 compiles with the H200 host's own Triton (3.6) and
# ptxas: the v2 default at head_dim 128 (m128n128w4s3) serializes every wgmma (each followed by
# a wait: "insufficient register resources"); with `pipeline_qk` the next block's QK^T wgmmas
# interleave with this block's exp2 and the PV wgmmas are not waited on in the same iteration.
# Spill-free there (stack 0-8 bytes): the configs below; m128n64w4-pq at 128, m128n128w4-pq and
# m64n128w4s4-r168-pq at 64 spill and are left out. Measured (results/h200/bench_v5_raw.*): 5-17 %
# slower than the defaults at head dims 64 and 128 (they need 250+ registers, so fewer programs
# share an SM and the overlap between programs is lost); at 256 causal m128n64w8s3-pq won by
# 0.3-4 % in two runs and was the default there until v10's permute_keys tiles replaced it.
V5_CANDIDATES: dict[int, list[AttentionConfig]] = {  # by padded head_dim, causal or not
    64: [AttentionConfig(64, 128, 4, 3, pipeline_qk=True), AttentionConfig(128, 64, 4, 3, pipeline_qk=True),
         AttentionConfig(64, 128, 4, 2, pipeline_qk=True)],
    128: [AttentionConfig(64, 128, 4, 2, pipeline_qk=True), AttentionConfig(64, 128, 4, 3, pipeline_qk=True),
          AttentionConfig(128, 64, 8, 3, pipeline_qk=True), AttentionConfig(128, 128, 8, 2, pipeline_qk=True)],
    256: [AttentionConfig(128, 64, 8, 3, pipeline_qk=True), AttentionConfig(128, 64, 8, 2, pipeline_qk=True),
          AttentionConfig(64, 64, 4, 2, pipeline_qk=True)],
}
# v28 `pv_flush` tiles. The flush keeps a second fp32 tile (each block's P V) live beside O, so the
# defaults' one-warpgroup tiles spill (offline sm_90 compiles: 48 bytes of stack at d=64, 504-536 at
# 128, 300-500 at 256); the other candidates take 64 query rows per warpgroup (m64 w4, or m128 w8)
# and compiled spill-free. Measured at 2x8192x32xd, three interleaved rounds
# (results/h200/bench_v28_pv_flush.*; TFLOP/s, median): d=64 m64n128w4s3 559 non-causal (default+pf
# 545), default+pf 552 causal (m64 484); d=128 m64n128w4s3 749 / 727 (m128n128w8s3 674 / 667,
# default+pf 448 / 467); at d=256 nothing fits (O alone is 128 registers per thread at 64 rows):
# default+pf 446 / 525, the m64 tiles 433-462.
PV_FLUSH_CANDIDATES: dict[int, list[AttentionConfig]] = {
    64: [AttentionConfig(128, 128, 8, 3, permute_keys=True, pv_flush=True),
         AttentionConfig(64, 128, 4, 3, permute_keys=True, pv_flush=True)],
    128: [AttentionConfig(128, 128, 8, 3, permute_keys=True, pv_flush=True),
          AttentionConfig(128, 128, 8, 2, permute_keys=True, pv_flush=True),
          AttentionConfig(64, 128, 4, 3, permute_keys=True, pv_flush=True)],
    256: [AttentionConfig(64, 64, 8, 3, permute_keys=True, pv_flush=True),
          AttentionConfig(64, 128, 8, 2, permute_keys=True, pv_flush=True)],
}
_PV_FLUSH_DEFAULTS: dict[tuple[int, bool], AttentionConfig] = {
    (64, False): AttentionConfig(64, 128, 4, 3, permute_keys=True, pv_flush=True),
    (64, True): replace(_MEASURED_DEFAULTS[(64, True)], pv_flush=True),
    (128, False): AttentionConfig(64, 128, 4, 3, permute_keys=True, pv_flush=True),
    (128, True): AttentionConfig(64, 128, 4, 3, permute_keys=True, pv_flush=True),
    (256, False): replace(_MEASURED_DEFAULTS[(256, False)], pv_flush=True),
    (256, True): replace(_MEASURED_DEFAULTS[(256, True)], pv_flush=True),
}
_INTERPRETER_CONFIG = AttentionConfig(block_m=16, block_n=16, num_warps=4, num_stages=1)


def default_config(head_dim: int, causal: bool = False, pv_flush: bool = False) -> AttentionConfig:
    """The config `fp8_attention` uses when none is given.

    Under the interpreter: 16 x 16 blocks, so tiny test shapes still span several blocks.
    On a GPU: `gpu_config`'s.
    """
    if triton_interpret():
        return replace(_INTERPRETER_CONFIG, pv_flush=pv_flush)
    return gpu_config(head_dim, causal, pv_flush)


def gpu_config(head_dim: int, causal: bool = False, pv_flush: bool = False) -> AttentionConfig:
    """The config `fp8_attention` uses on a GPU when none is given (on any host, for reading): the
    H200 sweep's winner for this head dim, else 128 x 128 (64 keys from d > 128); with `pv_flush`,
    the winner among `PV_FLUSH_CANDIDATES` and the defaults with the switch on (v28)."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, numbers.Integral) or not 16 <= head_dim <= 256 \
            or head_dim % 16:
        raise ValueError(f"head_dim: expected an int multiple of 16 in [16, 256] (the kernel's), got {head_dim!r}")
    pad = triton.next_power_of_2(int(head_dim))
    table = _PV_FLUSH_DEFAULTS if pv_flush else _MEASURED_DEFAULTS
    if (pad, causal) in table:
        return table[(pad, causal)]
    return AttentionConfig(128, 64 if pad > 128 else 128, 8, 2 if pad > 128 else 3, pv_flush=pv_flush)


# --------------------------------------------------------------------------------------
# V layouts
# --------------------------------------------------------------------------------------
def pretranspose_v(v: torch.Tensor) -> torch.Tensor:
    """V in FA3's shape but stored key-contiguous (what FP8 MMAs want), for `v_layout="transposed"`.

    Batched (b, s, h, d) -> same shape, strides of a (b, h, d, s) buffer; varlen
    (t, h, d) -> same shape, strides of an (h, d, t) buffer. One copy of V (on a GPU by
    `fp8lab.kernels.vlayout.transpose_keys`, V in FA3's layout).
    """
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"v: expected a torch.Tensor, got {type(v).__name__}")
    if v.is_cuda and v.dim() in (3, 4) and v.element_size() == 1 and v.stride(-1) == 1:
        from fp8lab.kernels.vlayout import transpose_keys

        if v.dim() == 4:
            return transpose_keys(v, v.shape[1]).permute(0, 3, 1, 2)
        return transpose_keys(v.unsqueeze(0), v.shape[0])[0].permute(2, 0, 1)
    if v.dim() == 4:
        return v.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    if v.dim() == 3:
        return v.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    raise ValueError(
        f"v: expected (batch, seqlen, heads, head_dim) or (total, heads, head_dim), got {tuple(v.shape)}"
    )


def v_layout_of(v: torch.Tensor) -> str:
    """'natural' if head_dim is contiguous, 'transposed' if the key axis is, else 'other'."""
    seq_dim = v.dim() - 3
    if v.stride(-1) == 1:
        return "natural"
    if v.stride(seq_dim) == 1:
        return "transposed"
    return "other"


def _check_v_layout(v: torch.Tensor, v_layout: str) -> bool:
    """Return True when V is pre-transposed; raise if it does not match `v_layout`."""
    if not isinstance(v, torch.Tensor):
        hint = " (key_ordered_vt's V is for fp8_attention_ws)" if type(v).__name__ == "KeyOrderedVt" else ""
        raise TypeError(f"v: expected a torch.Tensor, got {type(v).__name__}{hint}")
    if v_layout not in ("auto", "natural", "transposed"):
        raise ValueError(f"v_layout: expected 'auto', 'natural' or 'transposed', got {v_layout!r}")
    found = v_layout_of(v) if v.dim() in (3, 4) else "natural"
    if found == "other":
        raise ValueError(
            f"v: expected head_dim contiguous (FA3 layout) or keys contiguous (pretranspose_v), got strides {v.stride()}"
        )
    if v_layout != "auto" and found != v_layout:
        raise ValueError(f"v_layout={v_layout!r} but v is laid out {found!r} (strides {v.stride()})")
    return found == "transposed"


# --------------------------------------------------------------------------------------
# The wrapper
# --------------------------------------------------------------------------------------
def _descale_or_ones(d: torch.Tensor | None, batch: int, heads_kv: int, device: torch.device) -> torch.Tensor:
    if d is not None:
        return d
    return torch.ones((1, 1), dtype=torch.float32, device=device).expand(batch, heads_kv)


def _tma_ok(t: torch.Tensor, key_major_dims: tuple[int, ...]) -> bool:
    """TMA needs 16-byte aligned base and non-last strides (fp8: 1 byte per element)."""
    return t.data_ptr() % 16 == 0 and all(t.stride(d) % 16 == 0 for d in key_major_dims)


def _descriptors(k4: torch.Tensor, v4: torch.Tensor, v_transposed: bool, cfg: AttentionConfig, d_pad: int):
    """Host TMA descriptors over 4-D views (batch, seqlen, heads, dim) of K and V, or None."""
    if not cfg.use_tma or d_pad != k4.shape[-1]:
        return None
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # older Triton
        return None
    if not _tma_ok(k4, (0, 1, 2)):
        return None
    k_desc = TensorDescriptor(k4, list(k4.shape), list(k4.stride()), [1, cfg.block_n, 1, d_pad])
    if v_transposed:
        vt = v4.permute(0, 2, 3, 1)  # (batch, heads, dim, seqlen), seqlen contiguous
        if vt.stride(-1) != 1 or not _tma_ok(vt, (0, 1, 2)):
            return None
        v_desc = TensorDescriptor(vt, list(vt.shape), list(vt.stride()), [1, 1, d_pad, cfg.block_n])
    else:
        if not _tma_ok(v4, (0, 1, 2)):
            return None
        v_desc = TensorDescriptor(v4, list(v4.shape), list(v4.stride()), [1, cfg.block_n, 1, d_pad])
    return k_desc, v_desc


def fp8_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    return_lse: bool = False,
    v_layout: VLayout = "auto",
    max_offset: float = FA3_MAX_OFFSET,
    config: AttentionConfig | None = None,
    pv_flush: bool = False,
    round_p_in_fp32: bool | None = None,
    check_descales: bool | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3-style FP8 attention forward.

    q (batch, seqlen_q, heads_q, d) / k, v (batch, seqlen_k, heads_kv, d), all
    float8_e4m3fn; or varlen (total, heads, d) with int32 `cu_seqlens_q/k`.
    Descales: float32 (batch, heads_kv), any strides, None = 1. Returns bf16 `out`
    in q's layout, and with `return_lse` the float32 natural-log logsumexp,
    (batch, heads_q, seqlen_q) or (heads_q, total_q).

    `v_layout`: "natural" (FA3's, head_dim contiguous; tiles are transposed in the
    kernel, 2.1-3.1x slower on the H200 in the v1-v3 sweeps), "transposed" (keys contiguous, from
    `pretranspose_v`: one copy, 20-92 us for 16k tokens x 32 heads), or "auto" to
    take whichever `v` has. `max_offset`: FA3's 8; 0 turns the offset off (a lesson,
    not for use). `config`: block sizes etc. (`default_config`); its block_n sets the
    accumulation order. `pv_flush`: add each key block's P V to O in float32 (see
    `AttentionConfig`), with `default_config(..., pv_flush=True)`'s tiles unless `config` is given,
    whose own `pv_flush` must then agree. `round_p_in_fp32`: round P to e4m3 with float32 bit tricks
    before the cast (default: only under TRITON_INTERPRET=1, where the cast is wrong).
    `check_descales`: also check that descale values are finite and > 0. Default: on the CPU
    always; on a GPU not (reading values back is a device sync, measured at 0.3-0.6 ms per call;
    FA3 does not check either), True checks there too.
    """
    for name, flag in (("causal", causal), ("return_lse", return_lse), ("pv_flush", pv_flush)):
        check_flag(name, flag)
    if check_descales is not None:
        check_flag("check_descales", check_descales)
    if config is not None and not isinstance(config, AttentionConfig):
        raise TypeError(f"config: expected an AttentionConfig (see default_config) or None, got {type(config).__name__}")
    v_transposed = _check_v_layout(v, v_layout)
    v_for_check = v if v.stride(-1) == 1 else torch.empty(v.shape[-1], dtype=v.dtype, device=v.device).expand(v.shape)
    shape = _check_inputs(q, k, v_for_check, (q_descale, k_descale, v_descale),
                          cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_descales)
    _check_kernel_support(q, shape)
    if triton_interpret():
        _check_no_nan_codes(q=q, k=k, v=v)
    d = shape.head_dim
    d_pad = triton.next_power_of_2(d)
    if config is not None and pv_flush and not config.pv_flush:
        raise ValueError(f"pv_flush=True, but config {config.label()} has pv_flush=False: set it in the config, "
                         "or leave config=None for default_config(..., pv_flush=True)")
    cfg = config or default_config(d, causal, pv_flush)
    _check_config(cfg, d_pad, q.device)
    scale = check_softmax_scale(softmax_scale, d)
    # the descale values only where `_check_inputs` read them (no device sync on a GPU by default)
    check_folded_scale(scale, q_descale, k_descale, check_values=q.device.type != "cuda" or bool(check_descales))
    check_max_offset(max_offset)
    round_p = triton_interpret() if round_p_in_fp32 is None else check_flag("round_p_in_fp32", round_p_in_fp32)

    dev = q.device
    qd = _descale_or_ones(q_descale, shape.batch, shape.heads_kv, dev)
    kd = _descale_or_ones(k_descale, shape.batch, shape.heads_kv, dev)
    vd = _descale_or_ones(v_descale, shape.batch, shape.heads_kv, dev)
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=dev)
    if shape.varlen:
        total_q = q.shape[0]
        lse = torch.empty((shape.heads_q, total_q), dtype=torch.float32, device=dev)
        q4, k4, v4, o4 = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), out.unsqueeze(0)
        lse_strides = (0, lse.stride(0), lse.stride(1))
        cu_q, cu_k = cu_seqlens_q, cu_seqlens_k
    else:
        lse = torch.empty((shape.batch, shape.heads_q, shape.max_seqlen_q), dtype=torch.float32, device=dev)
        q4, k4, v4, o4 = q, k, v, out
        lse_strides = lse.stride()
        cu_q = cu_k = qd  # unused placeholders
    batch_strides = (lambda t: 0) if shape.varlen else (lambda t: t.stride(0))

    max_sq = shape.max_seqlen_q
    if max_sq > 0 and out.numel() > 0:
        descs = _descriptors(k4, v4, v_transposed, cfg, d_pad)
        k_arg, v_arg = descs if descs is not None else (k, v)
        n_m = triton.cdiv(max_sq, cfg.block_m)
        bh = shape.batch * shape.heads_q
        grid = (n_m * bh,)
        _fp8_attention_fwd[grid](
            q, k_arg, v_arg, out, lse, qd, kd, vd, cu_q, cu_k,
            batch_strides(q), q4.stride(1), q4.stride(2),
            batch_strides(k), k4.stride(1), k4.stride(2),
            batch_strides(v), v4.stride(1), v4.stride(2), v4.stride(3),
            batch_strides(out), o4.stride(1), o4.stride(2),
            *lse_strides,
            qd.stride(0), qd.stride(1), kd.stride(0), kd.stride(1), vd.stride(0), vd.stride(1),
            shape.heads_q, max_sq, shape.max_seqlen_k,
            n_m, bh, heads_per_chunk(shape.max_seqlen_k, d_pad, shape.group_size, bh),
            scale * LOG2E,
            GROUP=shape.group_size, HEAD_DIM=d, HEAD_DIM_PAD=d_pad,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            CAUSAL=bool(causal), VARLEN=shape.varlen,
            USE_TMA=descs is not None, V_TRANSPOSED=v_transposed, WARP_SPECIALIZE=cfg.warp_specialize,
            MAX_OFFSET=float(max_offset), MASKED_STAGES=cfg.masked_stages or None, PIPELINE_QK=cfg.pipeline_qk,
            PERMUTE_KEYS=cfg.permute_keys, PV_FLUSH=cfg.pv_flush, ROUND_IN_FP32=round_p,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}),
        )
    if shape.max_seqlen_q == 0 or shape.max_seqlen_k == 0:
        out.zero_()
        lse.fill_(float("-inf"))
    return (out, lse) if return_lse else out


L2_BUDGET_BYTES = 24 << 20  # about half the H100/H200 L2 (50 MB): room for K/V of a chunk plus Q/O traffic


def heads_per_chunk(seqlen_k: int, head_dim: int, group: int, batch_heads: int) -> int:
    """Query heads scheduled together: their K and V (e4m3, 2 * seqlen_k * head_dim bytes
    per kv head, shared by `group` query heads) should fit in `L2_BUDGET_BYTES`."""
    per_kv_head = max(1, 2 * seqlen_k * head_dim)
    return int(min(batch_heads, max(1, L2_BUDGET_BYTES // per_kv_head) * group))


def _check_inputs(q, k, v, descales, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                  check_values: bool | None = None) -> AttentionShape:
    """`check_attention_inputs`, without reading GPU descale values back.

    `check_descale` checks that descales are finite and > 0, which on a GPU costs a device
    sync per descale and call (measured: it idles the GPU while Python prepares the launch).
    For CUDA descales we check dtype, shape and device only, as FA3 does, and leave the
    values to the caller; CPU descales (the interpreter) are checked in full.
    """
    on_gpu = q.device.type == "cuda" and not check_values
    shape = check_attention_inputs(
        q, k, v, **({} if on_gpu else dict(zip(("q_descale", "k_descale", "v_descale"), descales))),
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
    )
    if on_gpu:
        for name, d in zip(("q_descale", "k_descale", "v_descale"), descales):
            check_descale(name, d, shape.batch, shape.heads_kv, device=q.device, check_values=False)
    return shape


def _check_config(cfg: AttentionConfig, d_pad: int, device: torch.device) -> None:
    """Block sizes the kernel compiles with: powers of two; on a GPU, FP8 MMAs reduce over
    at least 32 values, so block_n (P V) and the padded head_dim (Q K^T) must be >= 32."""
    for name in ("block_m", "block_n", "num_warps", "num_stages", "masked_stages"):
        val = getattr(cfg, name)
        if isinstance(val, bool) or not isinstance(val, int):
            raise ValueError(f"config.{name}: expected an int, got {val!r}")
    if cfg.masked_stages < 0 or (cfg.maxnreg is not None and (isinstance(cfg.maxnreg, bool)
                                                               or not isinstance(cfg.maxnreg, int) or cfg.maxnreg < 1)):
        raise ValueError(f"config: expected masked_stages >= 0 and maxnreg None or an int >= 1, got "
                         f"masked_stages={cfg.masked_stages!r}, maxnreg={cfg.maxnreg!r}")
    for name in ("block_m", "block_n"):
        val = getattr(cfg, name)
        if val < 16 or val & (val - 1):
            raise ValueError(f"config.{name}: expected a power of two >= 16, got {val}")
    if cfg.num_warps not in (1, 2, 4, 8, 16) or cfg.num_stages < 1:
        raise ValueError(f"config: expected num_warps a power of two up to 16 and num_stages >= 1, got "
                         f"num_warps={cfg.num_warps}, num_stages={cfg.num_stages}")
    if cfg.permute_keys and (cfg.use_tma or cfg.block_n % 32):
        raise ValueError("config.permute_keys: expected pointer loads (use_tma=False) and block_n a multiple "
                         f"of 32, got use_tma={cfg.use_tma}, block_n={cfg.block_n}")
    if device.type == "cuda" and not triton_interpret():
        if cfg.block_n < 32:
            raise ValueError(f"config.block_n: FP8 tensor-core MMAs need >= 32 keys per block, got {cfg.block_n}")
        if d_pad < 32:
            raise ValueError(f"head_dim: FP8 tensor-core MMAs need head_dim >= 32 on a GPU, got {d_pad}")


def _check_no_nan_codes(**tensors: torch.Tensor) -> None:
    """Under TRITON_INTERPRET=1: refuse e4m3fn NaN codes (0x7F, 0xFF), which the interpreter reads
    as +-480 (Triton 3.9) where a GPU reads NaN, so the output would be finite and wrong."""
    for name, t in tensors.items():
        n = int(((t.view(torch.uint8) & 0x7F) == 0x7F).sum()) if t.numel() else 0
        if n:
            raise ValueError(f"{name}: holds {n} NaN code(s); Triton's interpreter reads them as +-480 (a GPU reads "
                             "NaN), so it cannot run this input: run it on a GPU, or use fp8lab.reference")


def _check_kernel_support(q: torch.Tensor, shape: AttentionShape) -> None:
    if not shape.fp8:
        raise TypeError(f"fp8_attention: expected float8_e4m3fn q/k/v, got {str(q.dtype).replace('torch.', '')}")
    if shape.head_dim_v != shape.head_dim:
        raise ValueError(f"fp8_attention: v's head_dim must equal q's ({shape.head_dim}), got {shape.head_dim_v}")
    if shape.head_dim % 16 != 0 or not 16 <= shape.head_dim <= 256:
        raise ValueError(f"fp8_attention: head_dim must be a multiple of 16 in [16, 256], got {shape.head_dim}")
    if q.device.type != "cuda" and not (triton_interpret() and q.device.type == "cpu"):
        raise ValueError(f"fp8_attention: expected CUDA tensors (or TRITON_INTERPRET=1 on the CPU), got "
                         f"{q.device}{triton_interpret_note()}")


# --------------------------------------------------------------------------------------
# Autotuning (times the candidates, keeps the winner per shape class)
# --------------------------------------------------------------------------------------
def tune_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    configs: list[AttentionConfig] | None = None,
    **kwargs,
) -> tuple[AttentionConfig, dict[str, float]]:
    """Time `configs` (default `attention_configs(head_dim)`, or with `pv_flush=True`
    `PV_FLUSH_CANDIDATES`) on these inputs; return the fastest and {label: median ms}. Configs
    that fail to compile are skipped; bad inputs raise as `fp8_attention` raises them.

    The winner becomes `fp8_attention`'s default for (head_dim, causal) in this process, in the
    table of its `pv_flush` (the block size changes the accumulation order, hence the last bits
    of the output).
    """
    from triton.testing import do_bench

    d = q.shape[-1]
    pv_flush = check_flag("pv_flush", kwargs.get("pv_flush", False))
    configs = configs or (PV_FLUSH_CANDIDATES.get(triton.next_power_of_2(d), []) if pv_flush else attention_configs(d))
    mixed = [c.label() for c in configs if c.pv_flush != pv_flush]
    if mixed:
        raise ValueError(f"configs: every config's pv_flush must be {pv_flush} (the call's), got {mixed}")
    if q.device.type != "cuda":
        raise ValueError(f"tune_attention times kernels on a GPU; got tensors on {q.device}")
    fp8_attention(q, k, v, causal=causal, **kwargs)  # the inputs, checked once with the default config
    times: dict[str, float] = {}
    best: AttentionConfig | None = None
    for cfg in configs:
        try:
            ms = do_bench(lambda: fp8_attention(q, k, v, causal=causal, config=cfg, **kwargs),
                          warmup=25, rep=100, return_mode="median")
        except (ValueError, TypeError):  # a config fp8_attention's own checks refuse: the caller's mistake
            raise
        except Exception:  # noqa: BLE001 - a config the compiler or the GPU rejects (e.g. out of shared memory)
            continue
        times[cfg.label()] = ms
        if best is None or ms < times[best.label()]:
            best = cfg
    if best is None:
        raise RuntimeError("tune_attention: no configuration compiled")
    table = _PV_FLUSH_DEFAULTS if pv_flush else _MEASURED_DEFAULTS
    table[(triton.next_power_of_2(d), causal)] = replace(best)
    return best, times
