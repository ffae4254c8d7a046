"""FlashAttention-3's FP8 forward pass, emulated step by step on any device.

What FA3 does for one query row (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp,
hopper/softmax.h), and what this module does, vectorized over batch, heads
and queries with a loop over key blocks only:

    scale_log2 = softmax_scale * log2(e) * (q_descale * k_descale)   # fp32
    m = -inf; l = 0; O = 0
    for each key block of kBlockN keys, LAST block first:
        S   = Q8 @ K8^T                      # FP8 MMA, fp32 accumulator
        m'  = max(m, rowmax(S))              # raw scores, running max
        r   = exp2((m - m') * scale_log2)    # rescale of what came before
        P   = exp2(S * scale_log2 - (m' * scale_log2 - 8))   # in [0, 256]
        l   = l * r + rowsum(P)              # fp32 P, BEFORE the e4m3 cast
        O   = O * r + e4m3(P) @ V8           # FP8 MMA into the fp32 O
        m   = m'
    out = bf16(O * (1 / l * v_descale));  lse = m * scale_log2 * ln2 + log(l / 2^8)

Each step can be made exact (`FA3Steps`), so the error of each is measurable
alone, and `AccumulatorModel` models the FP8 MMA accumulator of Hopper, which
keeps fewer bits than fp32, with optional two-level accumulation (vLLM).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal

import numpy as np
import torch

from fp8lab.formats import cast_to_fp8
from fp8lab.layout import check_flag, check_folded_scale, check_max_offset, check_softmax_scale, sequences
from fp8lab.reference.exact import group_rows, query_chunk, shape_of, ungroup_rows
from fp8lab.reference.masks import key_range, normalize_window, visible

__all__ = ["HOPPER_FP8_MMA", "AccumulatorModel", "FA3Steps", "attention_fa3_fp8", "fa3_block_n", "fa3_decode_splits",
           "mma"]

LOG2E = 1.4426950408889634  # M_LOG2E, FA3 folds it into the softmax scale to use exp2
LN2 = 0.6931471805599453  # M_LN2, turns the exp2-domain max back into a natural-log lse


@dataclass(frozen=True)
class FA3Steps:
    """Which steps follow FA3's FP8 arithmetic (True) and which are exact (False).

    q, k, v: cast the input to e4m3 (float inputs only; FP8 inputs are already cast).
    fp32:    scores, softmax statistics and the O accumulator in float32 (else float64).
    p:       P rounded to e4m3 (RNE, saturating) before the P.V product.
    output:  output rounded to bf16.
    """

    q: bool = True
    k: bool = True
    v: bool = True
    fp32: bool = True
    p: bool = True
    output: bool = True

    @classmethod
    def exact(cls) -> FA3Steps:
        """Every step exact: the emulation then computes exact attention."""
        return cls(**{f.name: False for f in fields(cls)})

    @classmethod
    def only(cls, *names: str) -> FA3Steps:
        """Only the named steps in FP8 arithmetic, the rest exact."""
        _check_names(names)
        return replace(cls.exact(), **{n: True for n in names})

    def without(self, *names: str) -> FA3Steps:
        """These steps, with the named ones made exact."""
        _check_names(names)
        return replace(self, **{n: False for n in names})


STEP_NAMES: tuple[str, ...] = tuple(f.name for f in fields(FA3Steps))


def _check_names(names: tuple[str, ...]) -> None:
    bad = [n for n in names if n not in STEP_NAMES]
    if bad:
        raise ValueError(f"unknown step(s) {bad}; expected names from {STEP_NAMES}")


@dataclass(frozen=True)
class AccumulatorModel:
    """A model of Hopper's FP8 tensor-core accumulator.

    Each MMA step adds `k_chunk` products (WGMMA's K is 32 for FP8) to the
    accumulator C, aligned to the largest magnitude involved and kept to
    `mantissa_bits` bits below that leading bit, cut toward zero ("truncate"),
    toward -inf ("floor") or rounded to nearest ("nearest").
    alignment="product": C and every product are aligned to the exponent of
    max(|C|, max|a*b|) and cut one by one, then summed exactly (how tensor
    cores are described to add: fixed-point after alignment; memory grows with
    k_chunk x the output tile). alignment="sum": the exact chunk sum is cut
    once, aligned to max(|C|, sum|a*b|) (cheaper, loses less).

    promote_every: None: the accumulator is FA3's O itself, across all key
    blocks (upstream FA3). An int n: two-level accumulation, a fresh
    accumulator flushed into an fp32 O every n keys, rounded up to whole key
    blocks (vLLM flushes every block, or every 4 blocks since PR #122).
    apply_to_qk: model the Q.K^T MMA too (its sum runs over head_dim).
    """

    mantissa_bits: int = 13
    k_chunk: int = 32
    promote_every: int | None = None
    rounding: Literal["truncate", "floor", "nearest"] = "truncate"
    apply_to_qk: bool = True
    alignment: Literal["product", "sum"] = "product"

    def __post_init__(self) -> None:
        if not (isinstance(self.mantissa_bits, int) and 1 <= self.mantissa_bits <= 52):
            raise ValueError(f"mantissa_bits: expected an int in [1, 52], got {self.mantissa_bits!r}")
        if not (isinstance(self.k_chunk, int) and self.k_chunk >= 1):
            raise ValueError(f"k_chunk: expected an int >= 1, got {self.k_chunk!r}")
        if self.promote_every is not None and not (isinstance(self.promote_every, int) and self.promote_every >= 1):
            raise ValueError(f"promote_every: expected None or an int >= 1, got {self.promote_every!r}")
        if self.rounding not in _ROUND:
            raise ValueError(f"rounding: expected one of {tuple(_ROUND)}, got {self.rounding!r}")
        if self.alignment not in ("product", "sum"):
            raise ValueError(f"alignment: expected 'product' or 'sum', got {self.alignment!r}")


_ROUND = {"truncate": torch.trunc, "floor": torch.floor, "nearest": torch.round}
# Largest product tensor (elements) that alignment="product" materializes at once:
# small on the CPU (cache-sized pieces are faster there), large on a GPU (fewer launches).
_PRODUCT_ELEMENTS = 1 << 24
_PRODUCT_ELEMENTS_CUDA = 1 << 26


def _quantum(ref: torch.Tensor, bits: int) -> torch.Tensor:
    """2^(e - bits) where 2^e is the leading bit of ref (ref > 0), float64."""
    _, e = torch.frexp(ref)  # ref = mant * 2^e, mant in [0.5, 1): leading bit 2^(e-1)
    # below fp32's range nothing is cut; the clamp keeps 1/quantum finite in float64
    return torch.ldexp(torch.ones_like(ref), (e - 1 - bits).clamp(min=-1022).to(torch.float64))


# Hopper's FP8 MMA as measured on an H200 (results/h200/fidelity.json, accumulator_study):
# per-product alignment, 13 bits kept below the leading bit, cut toward zero. Upstream FA3
# (fa3-fwd) accumulates O in it across all key blocks; vLLM's library flushes it into an fp32
# O every key block: AccumulatorModel(13, promote_every=fa3_block_n(d, flavor="vllm")).
HOPPER_FP8_MMA = AccumulatorModel(13)


def mma(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor | None, model: AccumulatorModel) -> torch.Tensor:
    """acc + a @ b through the accumulator model; float64 in and out.

    a: (..., rows, K), b: (..., K, cols), acc: (..., rows, cols) or None (zero).
    """
    out = torch.zeros(*a.shape[:-1], b.shape[-1], dtype=torch.float64, device=a.device) if acc is None else acc
    rnd = _ROUND[model.rounding]
    kk, rows = a.shape[-1], a.shape[-2]
    for c0 in range(0, kk, model.k_chunk):
        ac, bc = a[..., c0:c0 + model.k_chunk], b[..., c0:c0 + model.k_chunk, :]
        if model.alignment == "sum":
            ref = torch.maximum(out.abs(), ac.abs() @ bc.abs())
            q = _quantum(ref, model.mantissa_bits)
            total = out + ac @ bc
            out = torch.where(ref > 0, rnd(total / q) * q, total)
            continue
        per_row = max(1, out[..., :1, :].numel() * ac.shape[-1])  # product elements per output row
        step = max(1, (_PRODUCT_ELEMENTS_CUDA if a.is_cuda else _PRODUCT_ELEMENTS) // per_row)
        parts = []
        for r0 in range(0, rows, step):
            o = out[..., r0:r0 + step, :]
            prods = ac[..., r0:r0 + step, :, None] * bc[..., None, :, :]  # (..., r, k, cols), exact
            ref = torch.maximum(o.abs(), torch.maximum(prods.amax(dim=-2), -prods.amin(dim=-2)))
            q = _quantum(torch.where(ref > 0, ref, torch.ones_like(ref)), model.mantissa_bits)
            inv = 1.0 / q  # a power of two: multiplying by it is exact
            prods.mul_(inv[..., None, :])
            # the cut values are integers (units of q) below 2^(bits + 6): their sum is exact
            parts.append((rnd(o * inv) + rnd(prods).sum(dim=-2)) * q)
        out = torch.cat(parts, dim=-2)
    return out


def fa3_block_n(
    head_dim: int,
    head_dim_v: int | None = None,
    *,
    causal: bool = False,
    local: bool = False,
    fp8: bool = True,
    flavor: Literal["upstream", "vllm"] = "upstream",
    decode: bool = False,
) -> int:
    """FA3's kBlockN on Hopper (hopper/tile_size.h, `tile_size_fwd_sm90`).

    For the plain path: TMA K/V (not paged), V row-major, no softcap, two MMA
    warpgroups. flavor="vllm": the FP8 block sizes of vLLM's FA3 library (vllm 0.33),
    which differ at head dims 64 and 128 - MEASURED on an H200 as the block size that
    brings the emulation closest to the library (results/h200/fidelity.json), not read
    from its source. decode=True (vllm flavor, FP8): a call whose query tile holds at most
    64 rows (seqlen_q * heads_q / heads_kv <= 64, as in decode), where vLLM's library runs
    one MMA warpgroup at head dim 128 (FA3's `use_one_mma_wg`): 96 keys, measured as above on
    paged decode (results/h200/decode_fidelity.json). vLLM's fork takes this tile in its
    tile_size.h (FP8, `use_one_mma_wg`: 64 x 96 at head dim 128), and newer FA3 sources may; the
    "upstream" flavor keeps the plain tile (fa3-fwd 0.0.3's, measured on prefill in fidelity.json;
    its decode tile was not measured).
    """
    d, dv = head_dim, head_dim if head_dim_v is None else head_dim_v
    if flavor not in ("upstream", "vllm"):
        raise ValueError(f"flavor: expected 'upstream' or 'vllm', got {flavor!r}")
    if fp8 and flavor == "vllm" and not local and d in (64, 128):
        return {64: 128, 128: 96 if decode else 192}[d]
    if fp8:
        if d <= 64:
            return 160
        if d <= 96:
            return 128
        if d <= 128:
            return 224
        if d <= 192:
            return 160
        return 64 if local else 128
    if d <= 64:
        if dv == 512:
            return 64
        if dv == 256:
            return 112
        return 128 if causal else (160 if local else 192)
    if d <= 96:
        return 128 if local else 144
    if d <= 128:
        return 128 if (causal or local) else 176
    if d <= 192:
        return 96 if local else (128 if dv <= 128 else 112)
    return 64 if local else 80


def fa3_decode_splits(
    seqlens_k: Sequence[int],
    heads_kv: int,
    block_n: int,
    *,
    num_splits: int = 0,
    num_sms: int = 132,
    group: int = 1,
) -> list[int]:
    """The split-KV count FA3 gives each sequence of a varlen decode call, as vLLM calls it (one
    query token per sequence; `group` query heads per kv head share a tile, FA3's PackGQA).

    num_splits: what the caller passes (vLLM: 0 eagerly, its CUDA-graph cap otherwise); 0 = FA3's
    heuristic (hopper/heuristics.h `num_splits_heuristic`, with a varlen batch counted as one
    sequence, flash_api.cpp), in float32 as FA3 computes it. Up to 992 sequences FA3 then splits
    each sequence dynamically (flash_prepare_scheduler.cu): ceil(its key blocks / blocks_per_sm),
    blocks_per_sm = ceil(1.1 * heads_kv * all key blocks / num_sms) (float32; FA3 builds with fast
    math, whose division this takes as exact), at most the static count. num_sms: 132 on an
    H100/H200 SXM. Read from upstream's source and checked bit for bit against vLLM's library on an
    H200 at 2-8 kv heads and groups of 4-16 (results/h200/decode_fidelity.json,
    decode_fidelity_validate.json).
    """
    for name, val, least in (("heads_kv", heads_kv, 1), ("block_n", block_n, 1), ("num_sms", num_sms, 1),
                             ("group", group, 1), ("num_splits", num_splits, 0)):
        if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < least:
            raise ValueError(f"{name}: expected an int >= {least}, got {val!r}")
    lens = list(seqlens_k)
    if any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in lens):
        raise ValueError(f"seqlens_k: expected token counts, ints >= 0, got {lens}")
    if not lens:
        return []
    f32 = np.float32
    m_blocks = -(-group // (64 if group <= 64 else 128))  # query tiles per (sequence, kv head): one MMA warpgroup to 64 rows
    n_blocks = [-(-int(n) // block_n) for n in lens]
    if num_splits == 0:  # the heuristic, for a varlen batch "pretending that batch = 1"
        total_mblocks = heads_kv * m_blocks * (1 if len(lens) <= 992 else len(lens))
        most = max(n_blocks)
        if total_mblocks >= 0.8 * num_sms or most <= 4:
            num_splits = 1
        else:
            cap = min(128, num_sms, most)
            waves = [f32(total_mblocks * k) / f32(num_sms) for k in range(1, cap + 1)]
            eff = [w / f32(np.ceil(w)) for w in waves]
            best = max(eff)
            num_splits = next(k for k in range(1, cap + 1) if float(eff[k - 1]) >= 0.85 * float(best))
    if len(lens) > 992:  # no dynamic split: every sequence takes the static count
        return [num_splits] * len(lens)
    total = sum(m_blocks * n for n in n_blocks)
    per_sm = max(1, int(np.ceil(f32(total) * f32(1.1) * f32(heads_kv) / f32(num_sms))))
    return [max(1, min(-(-n // per_sm), num_splits)) for n in n_blocks]


def _to_units(x: torch.Tensor, descale: torch.Tensor | None, heads_kv: int, cast: bool) -> torch.Tensor:
    """float64 values in FP8 units (x = units * descale): the FP8 values, or float x / descale (cast if asked).

    x: (batch, seqlen, heads, dim), descale (batch, heads_kv) or None.
    """
    if x.dtype == torch.float8_e4m3fn:
        return x.to(torch.float64)
    # the cast divides in float32 as vLLM's KV-cache write does; the exact path in float64
    dt = torch.float32 if cast else torch.float64
    units = x.to(dt)
    if descale is not None:
        g = x.shape[2] // heads_kv
        units = units / descale.to(dt).repeat_interleave(g, dim=1)[:, None, :, None]
    return cast_to_fp8(units).to(torch.float64) if cast else units


def _fa3_batched(
    qu: torch.Tensor,
    ku: torch.Tensor,
    vu: torch.Tensor,
    qd: torch.Tensor,
    kd: torch.Tensor,
    vd: torch.Tensor,
    scale: float,
    left: int,
    right: int,
    block_n: int,
    reverse_blocks: bool,
    max_offset: float,
    steps: FA3Steps,
    accumulator: AccumulatorModel | None,
    rowsum_of_fp8_p: bool,
    num_splits: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Units qu (b, sq, hq, d), ku/vu (b, sk, hkv, d), float64 descales (b, hkv) -> out (b, sq, hq, dv), lse (b, hq, sq)."""
    b, sq, hq, _ = qu.shape
    sk, hkv, dv = ku.shape[1], ku.shape[2], vu.shape[3]
    g = hq // hkv
    ct = torch.float32 if steps.fp32 else torch.float64
    dev = qu.device
    # softmax_scale_log2 * (q_descale * k_descale), one fp32 value per (batch, kv head)
    sl2 = (torch.tensor(scale * LOG2E, dtype=torch.float64).to(ct) * (qd.to(ct) * kd.to(ct))).to(ct)
    sl2 = sl2[:, :, None, None].to(dev)
    sl2_64 = sl2.to(torch.float64)
    factor_v = vd.to(ct)[:, :, None, None].to(dev)
    qg = group_rows(qu, hkv)  # (b, hkv, g, sq, d)
    kt = ku.permute(0, 2, 3, 1)  # (b, hkv, d, sk)
    vg = vu.permute(0, 2, 1, 3)  # (b, hkv, sk, dv)
    out = torch.zeros(b, hkv, g, sq, dv, dtype=ct, device=dev)
    lse = torch.full((b, hkv, g, sq), -math.inf, dtype=ct, device=dev)
    qk_model = accumulator if accumulator is not None and accumulator.apply_to_qk else None

    def key_blocks(rows: torch.Tensor, q_pos: torch.Tensor, blocks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """FA3's main loop over `blocks` for one tile of rows: its out (normalized, times v_descale) and lse."""
        m = torch.full((*rows.shape[:-1], 1), -math.inf, dtype=ct, device=dev)
        l = torch.zeros_like(m)
        o = torch.zeros(*rows.shape[:-1], dv, dtype=ct, device=dev)
        pending = None  # two-level accumulation: the MMA accumulator not yet flushed into o
        keys_pending = 0
        for j in (blocks[::-1] if reverse_blocks else blocks):
            k0, k1 = j * block_n, min(sk, (j + 1) * block_n)
            if qk_model is not None:
                s = mma(rows, kt[..., k0:k1], None, qk_model).to(ct)
            else:
                s = (rows @ kt[..., k0:k1]).to(ct)
            mask = visible(q_pos, torch.arange(k0, k1, device=dev), sq, sk, left, right)
            s = s.masked_fill(~mask, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)  # FA3's Check_inf
            rescale = torch.exp2((m - m_use) * sl2)
            max_scaled = (m_use.to(torch.float64) * sl2_64 - max_offset).to(ct)
            # exp2f(s * scale_log2 - max_scaled): one FFMA, so one rounding of the argument
            p = torch.exp2((s.to(torch.float64) * sl2_64 - max_scaled.to(torch.float64)).to(ct))
            p8 = cast_to_fp8(p).to(ct) if steps.p else p
            l = l * rescale + (p8 if rowsum_of_fp8_p else p).sum(dim=-1, keepdim=True)
            o = o * rescale
            vb = vg[:, :, k0:k1]
            if accumulator is None:
                o = o + (p8 @ vb.to(ct))
            elif accumulator.promote_every is None:
                o = mma(p8.to(torch.float64), vb, o.to(torch.float64), accumulator).to(ct)
            else:
                pending = None if pending is None else (pending * rescale.to(torch.float64)).to(ct).to(torch.float64)
                pending = mma(p8.to(torch.float64), vb, pending, accumulator).to(ct).to(torch.float64)
                keys_pending += k1 - k0
                if keys_pending >= accumulator.promote_every:
                    o, pending, keys_pending = o + pending.to(ct), None, 0
            m = m_new
        if pending is not None:
            o = o + pending.to(ct)
        ok = (l > 0) & ~torch.isnan(l)
        inv = torch.where(ok, 1.0 / torch.where(ok, l, torch.ones_like(l)), torch.zeros_like(l))
        lse_t = m * (sl2 * LN2) + torch.log(l * 2.0 ** -max_offset)
        return o * (inv * factor_v), torch.where(ok, lse_t, torch.full_like(lse_t, -math.inf))

    step = query_chunk(b, hq, block_n)
    for q0 in range(0, sq, step):
        q1 = min(sq, q0 + step)
        c = q1 - q0
        rows = qg[:, :, :, q0:q1].reshape(b, hkv, g * c, qu.shape[3])
        q_pos = torch.arange(q0, q1, device=dev).repeat(g)
        lo, hi = key_range(q0, q1, sq, sk, left, right)
        blocks = list(range(lo // block_n, -(-hi // block_n))) if hi > lo else []
        if num_splits == 1:
            o_t, lse_t = key_blocks(rows, q_pos, blocks)
        else:
            o_t, lse_t = _combine_splits([key_blocks(rows, q_pos, part) for part in _split_blocks(blocks, num_splits)])
        out[:, :, :, q0:q1] = o_t.reshape(b, hkv, g, c, dv)
        lse[:, :, :, q0:q1] = lse_t.reshape(b, hkv, g, c)
    out = ungroup_rows(out)
    if steps.output:
        out = out.to(torch.bfloat16)
    return out, lse.reshape(b, hq, sq)


def _check_num_splits(num_splits: int | Sequence[int], batch: int) -> list[int]:
    """num_splits as one count per sequence: an int >= 1, or a sequence of `batch` of them."""
    many = not isinstance(num_splits, numbers.Integral) and isinstance(num_splits, Sequence)
    counts = list(num_splits) if many else [num_splits] * batch
    if len(counts) != batch or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1 for n in counts):
        raise ValueError(f"num_splits: expected an int >= 1, or one per sequence ({batch}), got {num_splits!r}")
    return [int(n) for n in counts]


def _split_blocks(blocks: list[int], num_splits: int) -> list[list[int]]:
    """FA3's split-KV partition (hopper/block.h): split i takes the i-th run of ceil(n / num_splits) blocks
    (later splits may be empty)."""
    per = -(-len(blocks) // num_splits)
    return [blocks[i * per:(i + 1) * per] for i in range(num_splits)]


def _combine_splits(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """FA3's combine kernel (hopper/flash_fwd_combine_kernel.h), in the partial outputs' dtype (fp32):
    w_i = exp(lse_i - max) / sum_j exp(lse_j - max), lse = log(sum_j exp(lse_j - max)) + max,
    out = sum_i w_i * out_i, split by split, one FFMA each. A row no split sees keeps lse = -inf, out = 0."""
    lses = torch.stack([lse for _, lse in parts])  # (splits, ..., rows, 1)
    lse_max = lses.amax(dim=0)
    lse_max_cur = torch.where(lse_max == -math.inf, torch.zeros_like(lse_max), lse_max)
    scales = torch.exp(lses - lse_max_cur)
    lse_sum = torch.zeros_like(lse_max)
    for sc in scales:
        lse_sum = lse_sum + sc
    lse_all = torch.log(lse_sum) + lse_max  # log(0) + -inf = -inf where no split saw the row
    bad = (lse_sum == 0) | torch.isnan(lse_sum)
    scales = scales * torch.where(bad, torch.zeros_like(lse_sum), 1.0 / torch.where(bad, torch.ones_like(lse_sum), lse_sum))
    out = torch.zeros_like(parts[0][0])
    for (o_i, _), w in zip(parts, scales):
        out = (out.double() + w.double() * o_i.double()).to(out.dtype)  # an FFMA: one rounding
    return out, lse_all


def attention_fa3_fp8(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    block_n: int | None = None,
    reverse_blocks: bool = True,
    max_offset: float = 8.0,
    steps: FA3Steps = FA3Steps(),
    accumulator: AccumulatorModel | None = None,
    rowsum_of_fp8_p: bool = False,
    num_splits: int | Sequence[int] = 1,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's FP8 forward, emulated (see the module docstring for the algorithm).

    q, k, v: FA3 layouts (batched or varlen with cu_seqlens). Either float8_e4m3fn
    with float32 (batch, heads_kv) descales (None = 1), or float tensors, where a
    descale is the quantization step: x is cast as e4m3(x / descale) when the
    step is on, and kept exact (x / descale in float32) when it is off.
    block_n: keys per block, None = FA3's kBlockN for this head dim (`fa3_block_n`).
    reverse_blocks: visit the last key block first, as FA3 does.
    max_offset: FA3's Max_offset (8 for FP8: P in [0, 2^8]); 0 gives P in [0, 1].
    steps: which steps are emulated (`FA3Steps`); accumulator: None = exact fp32
    accumulation, or an `AccumulatorModel` (`HOPPER_FP8_MMA` matches an H200 bit for bit
    on most outputs; add promote_every=block_n for vLLM's two-level accumulation).
    rowsum_of_fp8_p: sum P after the e4m3 cast (FA3 sums the fp32 P: False).
    num_splits: FA3's split-KV (decode with few sequences): each query tile's key blocks split
    into num_splits runs of ceil(n / num_splits) blocks, each run's out (fp32) and lse
    combined as FA3's combine kernel does. An int, or for varlen one per sequence (FA3 picks a
    count per sequence).
    FA3 partitions each query tile's own key range: exact for decode and for non-causal calls;
    with a causal or local mask and several query tiles per sequence the emulation's query chunks
    (sized for memory) need not be FA3's tiles, so their partitions can differ.

    Returns out in q's layout (bf16 with steps.output, else float32 with
    steps.fp32, else float64) and with return_lse the natural-log lse,
    (batch, heads_q, seqlen_q) or (heads_q, total_q) varlen.
    """
    descales = (q_descale, k_descale, v_descale)
    shape = shape_of(q, k, v, descales, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    left, right = normalize_window(causal, window_size)
    scale = check_softmax_scale(softmax_scale, shape.head_dim)
    check_folded_scale(scale, q_descale, k_descale)
    if block_n is None:
        block_n = fa3_block_n(shape.head_dim, shape.head_dim_v, causal=causal, local=left >= 0 or right > 0)
    if isinstance(block_n, bool) or not isinstance(block_n, int) or block_n < 1:
        raise ValueError(f"block_n: expected a positive int or None, got {block_n!r}")
    check_max_offset(max_offset)
    for name, flag in (("reverse_blocks", reverse_blocks), ("rowsum_of_fp8_p", rowsum_of_fp8_p),
                       ("return_lse", return_lse)):
        check_flag(name, flag)
    if not isinstance(steps, FA3Steps):
        raise TypeError(f"steps: expected an FA3Steps, got {type(steps).__name__}")
    if accumulator is not None and not isinstance(accumulator, AccumulatorModel):
        raise TypeError(f"accumulator: expected None or an AccumulatorModel, got {type(accumulator).__name__}")
    options = (scale, left, right, block_n, reverse_blocks, float(max_offset), steps, accumulator, rowsum_of_fp8_p)
    splits = _check_num_splits(num_splits, shape.batch)

    def run(qs, ks, vs, sel):
        hk = shape.heads_kv
        dsc = [None if d is None else d[sel] for d in descales]
        qu = _to_units(qs, dsc[0], hk, steps.q)
        ku = _to_units(ks, dsc[1], hk, steps.k)
        vu = _to_units(vs, dsc[2], hk, steps.v)
        ones = torch.ones(qu.shape[0], hk, dtype=torch.float64, device=q.device)
        d64 = [ones if d is None else d.to(torch.float64) for d in dsc]
        return _fa3_batched(qu, ku, vu, *d64, *options, num_splits=splits[sel.start or 0] if splits else 1)

    if not shape.varlen:
        if len(set(splits)) > 1:
            raise ValueError(f"num_splits: one count per sequence is for varlen inputs; batched takes an int, got "
                             f"{list(num_splits)}")
        out, lse = run(q, k, v, slice(None))
        return (out, lse) if return_lse else out
    out = lse = None
    for b, iq, ik in sequences(shape):
        o, l = run(q[iq][None], k[ik][None], v[ik][None], slice(b, b + 1))
        if out is None:
            out = torch.zeros(q.shape[0], shape.heads_q, shape.head_dim_v, dtype=o.dtype, device=q.device)
            lse = torch.full((shape.heads_q, q.shape[0]), -math.inf, dtype=l.dtype, device=q.device)
        out[iq] = o[0]
        lse[:, iq] = l[0]
    return (out, lse) if return_lse else out
