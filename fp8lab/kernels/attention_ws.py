"""FA3's schedule in Gluon: a warp-specialized FP8 attention forward for Hopper (sm_90).

`fp8lab.kernels.attention` is the kernel to read: plain Triton, runs under the
interpreter, bit for bit equal to the emulation. This module computes the same
thing (same quantization points, same block order, same online softmax) with the
structure FlashAttention-3 uses and Triton's compiler does not build by itself:

- **Warp specialization.** One *loader* warp only issues TMA copies: each consumer's
  Q rows once, then K_j and V^T_j, last key block first, into a ring of ``STAGES``
  shared-memory stages; per stage one mbarrier says it is full (``ready``, TMA byte
  count) and one that every consumer is done with it (``empty``). The loader keeps
  24 registers per thread and gives the rest to the consumers (setmaxnreg).
- **Ping-pong consumers.** Two consumer warpgroups (three with ``WsConfig(consumers=3)``),
  each a partition of its own with 64 query rows, run the same code on the same K/V
  stages; while one computes its softmax the other's MMAs keep the tensor cores busy.
  By default the warp schedulers interleave them; ``WsConfig(pingpong=True)`` orders
  their MMAs as FA3's named barriers do, with a pair of mbarriers (Gluon exposes no
  named barriers).
- **Asynchronous wgmma and FA3's intra-warpgroup overlap.** In each iteration a
  consumer issues S_j = Q K_j^T, then O += P_{j-1} V_{j-1}, and waits only for S_j:
  the softmax of block j runs on the CUDA cores while the tensor cores finish the
  previous block's PV product.
- **P stays in registers.** e4m3(P) is the register A operand of the PV wgmma
  (FA3's ``MmaPV_is_RS``); V^T's tile is K-major in shared memory as FP8 wgmma
  requires, so V comes pre-transposed (`fp8lab.kernels.pretranspose_v`, `key_ordered_vt`) or,
  with ``WsConfig(transpose_v=True)``, as stored: transposer warps then write each stage's
  V^T in shared memory, as FA3 does, with ``ldmatrix.trans`` and ``stmatrix`` (v31: the same
  bits, 0.94-0.95x the speed at head dim 64, 0.84-0.85x at 128, 0.72-0.75x at 256, so a copy
  of V plus the kernel is the faster way). P crosses
  the loop to that MMA either in float32, cast next to the MMA (carried as e4m3 it
  would live one byte per register and be re-packed every iteration, v11), or with
  ``WsConfig(pack_p=True)`` packed four e4m3 per 32-bit word: written after the PV
  wait, as FA3 does, and given to the wgmma as the same words (v12).
- **P without shuffles (FP8 step 5).** With V^T from `key_ordered_vt` (keys of each
  32 stored in the order P's registers hold them), P reaches the A operand's layout
  by a renaming of registers. The Triton kernel gets the same by loading K's rows
  permuted (`permute_keys`); here K comes by TMA, which cannot reorder rows.
- **FA3's tiles.** Packed P frees the registers for them: 128 keys in three stages at
  head dim 256, and three consumer warpgroups (192 query rows) at 64.
- **Persistent programs.** With ``WsConfig(persistent=True)`` one program per SM takes tiles
  p, p + grid, ...; the K/V ring and Q's buffers run on across tiles (Q is released after a
  tile's last QK^T, the last stage after its last PV), so the next tile's loads overlap this
  tile's last MMA and epilogue (v19). With ``dynamic=True`` the next tile is the next one nobody
  has taken, from an atomic counter as FA3 does for causal, local and varlen attention (its
  non-causal programs take fixed lists) (v20): the loader asks at the start of a tile and
  hands the number to the consumers through shared memory; the launch's last program sets the
  counter back to zero. The key-ordered default: the counter, except non-causal at head dim 64
  (fixed lists) (v20, v21). One program per tile, the default for plain V^T, is built without
  the tile loop (a constexpr; v20: up to 9 % faster than the loop run once).
- **How O sums P V.** By default O itself is the PV wgmma's accumulator, as in upstream FA3;
  Hopper's FP8 MMA keeps about 13 bits of it, so the error grows with the context (v27).
  ``WsConfig(pv_flush=True)`` (``fp8_attention_ws(..., pv_flush=True)``) gives each block's P V a
  fresh accumulator and adds it to O in fp32 after its wait, as vLLM's FA3 does; at head dim 256,
  where O alone fills half a consumer's registers, ``pv_halves`` holds O as two 128-column tiles
  and computes each half of P V in turn after the softmax (v28).

Measured on an H200 (docs/kernel-notes.md, v8-v12, v19-v21, v23; `results/h200/bench_v12_*`,
`bench_v19_*` to `bench_v21_*`, `bench_v23_grid*`): with `key_ordered_vt` and its defaults (packed
P, persistent programs), 0.93-0.98x FA3 FP8 at head dim 64, 0.93-0.96x at 128 and 0.92-1.02x at 256
in the v23 grid (medians of interleaved rounds; the faster fp8lab kernel at 0.91x or more in all 18
cases of its three reruns), the faster of fp8lab's two kernels in 17 of its 18 cases (the Triton
kernel at 4k-token causal sequences, head dim 64). Every change since v10 kept the bits of v10's
kernel. FA3's ping-pong ordering and its rescale under the next MMA (`WsConfig` switches) gave
nothing consistent here. `fp8_attention` (Triton) stays the general entry point (varlen, natural V,
the interpreter); this kernel is the faster one on Hopper, and the lesson in what FA3's structure
is made of.

Scope: batched (not varlen) inputs on an sm_90 GPU, head_dim 64, 128 or 256, V
pre-transposed, key-ordered or (``transpose_v``) as stored, Q/K/out with head_dim contiguous and
rows of (heads x head_dim).
`fp8_attention_ws` says what it got when an input is outside that scope.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton

from fp8lab.kernels._gluon import HAVE_GLUON, compile_sm90, sm_count
from fp8lab.kernels.attention import heads_per_chunk
from fp8lab.kernels.vlayout import transpose_keys
from fp8lab.layout import (check_attention_inputs, check_descale, check_flag, check_folded_scale, check_max_offset,
                           check_softmax_scale)

if HAVE_GLUON:
    from fp8lab.kernels._gluon import (
        TensorDescriptor,
        fence_async_shared,
        gl,
        gluon,
        mbarrier,
        smem_reinterpret,
        thread_barrier,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from fp8lab.kernels._gluon import tma_load as _tma_load

__all__ = ["HAVE_GLUON", "KeyOrderedVt", "WsConfig", "compile_ws_sm90", "default_ws_config", "fp8_attention_ws",
           "key_ordered_vt", "ws_supported"]

LOG2E = 1.4426950408889634
FA3_MAX_OFFSET = 8.0
TRANSPOSER_REGS = 40  # per transposer thread (`transpose_v`; the loader's too where they share a warpgroup)
SMEM_LIMIT = 227 << 10  # shared memory one program may take on sm_90


@dataclass(frozen=True)
class WsConfig:
    """Tiles of the warp-specialized kernel: `consumers` warpgroups of 64 query rows each (2: 128
    rows per CTA; 3: FA3's 192 rows, at head_dim 64 with `pack_p`), `block_n` keys per stage,
    `stages` K/V buffers in the ring, two of FA3's scheduling details (same bits with or without
    them), and how P crosses the loop."""

    block_n: int = 128
    stages: int = 2
    pingpong: bool = False  # FA3's ordering of the two consumers' MMAs (mbarriers standing in for its named barriers)
    rescale_under_mma: bool = False  # FA3's place for O's rescale: under the next QK^T MMA
    pack_p: bool = False  # carry P across the loop as packed e4m3 words, not float32 (needs key_ordered_vt)
    consumers: int = 2
    persistent: bool = False  # one program per SM, each taking tiles in turn; else one program per tile
    dynamic: bool = False  # persistent programs take the next untaken tile from a counter (FA3's), not a fixed list
    pv_flush: bool = False  # each block's P V in a fresh accumulator, added to O in float32 (AttentionConfig's)
    pv_halves: bool = False  # with pv_flush at head_dim 256: O and P V in two halves of head_dim, waited for in turn
    transpose_v: bool = False  # V in FA3's layout, each stage transposed in shared memory by transposer warps (v30, v31)
    transposer_warps: int = 2  # transpose_v: 2 (in the loader warp's warpgroup) or 4 (a warpgroup of their own)

    def __post_init__(self) -> None:
        if self.block_n not in (32, 64, 128, 256) or not 1 <= self.stages <= 8:
            # a power-of-two key block that an FP8 MMA can reduce over (>= 32), and a real ring of buffers
            raise ValueError(f"WsConfig: block_n must be 32, 64, 128 or 256 and stages 1..8, got block_n="
                             f"{self.block_n}, stages={self.stages}")
        if self.consumers not in (2, 3):
            raise ValueError(f"WsConfig: consumers must be 2 or 3, got {self.consumers}")
        if self.consumers == 3 and self.pingpong:
            raise ValueError("WsConfig: pingpong orders two consumers; got consumers=3")
        if self.dynamic and not self.persistent:
            raise ValueError("WsConfig: dynamic hands tiles to persistent programs; got persistent=False")
        if self.transpose_v and self.block_n != 128:
            raise ValueError(f"WsConfig: transpose_v's warps transpose stages of 128 keys, got block_n={self.block_n}")
        if self.transposer_warps not in (2, 4) or (self.transposer_warps == 4 and self.consumers != 2):
            raise ValueError(f"WsConfig: transposer_warps must be 2, or 4 with two consumers (registers), got "
                             f"{self.transposer_warps} with consumers={self.consumers}")
        if self.pv_halves and (not self.pv_flush or self.pingpong):
            raise ValueError("WsConfig: pv_halves splits pv_flush's product and waits for it outside pingpong's turns; "
                             f"got pv_flush={self.pv_flush}, pingpong={self.pingpong}")

    @property
    def block_m(self) -> int:
        return 64 * self.consumers

    @property
    def maxnreg(self) -> int:
        """Registers per thread at launch. The one-warp loader launches as a whole warpgroup (setmaxnreg
        works per warpgroup), so a CTA is consumers + 1 warpgroups of 128 threads: (2 + 1) x 128 x 168
        and (3 + 1) x 128 x 128 both fit an SM's 64K registers."""
        if self.transpose_v and self.transposer_warps == 4:  # a fourth warpgroup: 4 x 128 x 128
            return 128
        return 168 if self.consumers == 2 else 128

    @property
    def consumer_regs(self) -> int:
        """Registers per consumer thread once the loader's warpgroup has given its own back down to 24:
        2 x 128 x 240 + 128 x 24 and 3 x 128 x 160 + 128 x 24 fit 64K. With `transpose_v` the
        transposer keeps TRANSPOSER_REGS: two warps share the loader's warpgroup at that count
        (2 x 128 x 232 + 128 x 40, 3 x 128 x 152 + 128 x 40), four have their own (2 x 128 x 224 +
        128 x 40 + 128 x 24)."""
        if self.transpose_v:
            return 224 if self.transposer_warps == 4 else 232 if self.consumers == 2 else 152
        return 240 if self.consumers == 2 else 160

    def smem_bytes(self, head_dim: int) -> int:
        """Shared memory of the tiles at head_dim (FP8): Q's rows and the K and V^T ring (with
        `transpose_v` V arrives in V^T's stages and is transposed there, v31)."""
        return (self.block_m + 2 * self.stages * self.block_n) * head_dim

    def fits(self, head_dim: int) -> bool:
        """The tiles fit an sm_90 program's shared memory at head_dim, with 1 KiB left for the barriers."""
        return self.smem_bytes(head_dim) <= SMEM_LIMIT - 1024

    def label(self) -> str:
        return (f"ws-n{self.block_n}s{self.stages}" + "-pp" * self.pingpong + "-ru" * self.rescale_under_mma
                + "-pw" * self.pack_p + f"-c{self.consumers}" * (self.consumers != 2) + "-ps" * self.persistent
                + "-dy" * self.dynamic + "-pf" * self.pv_flush + "-h2" * self.pv_halves
                + (f"-tv{self.transposer_warps}" if self.transpose_v else ""))


@dataclass(frozen=True)
class KeyOrderedVt:
    """V^T with the keys of every 32 in the order P's registers hold them (`key_ordered_vt`).

    data: float8_e4m3fn (batch, heads_kv, head_dim, seqlen_k rounded up to 32), contiguous; the
    padding keys are zeros. seqlen_k: the real number of keys.
    """

    data: torch.Tensor
    seqlen_k: int


def key_ordered_vt(v: torch.Tensor) -> KeyOrderedVt:
    """V (b, s_k, hk, d), in FA3's layout or pre-transposed, as the V^T operand that lets
    `fp8_attention_ws` feed e4m3(P) to its PV wgmma without moving any register (FP8 step 5).

    The Triton kernel loads K's rows of each 32 in `key_order`, so its score columns come out
    permuted and `in_key_order` puts P back in key order for free. The Gluon kernel's K arrives
    by TMA, which cannot reorder rows within a tile, so here the *V* side is permuted instead:
    P's columns are relabelled with the same `in_key_order` (free), and V^T's keys are stored in
    that same order, so the PV product sums the same products. One copy of V, like
    `pretranspose_v` (on a GPU by `fp8lab.kernels.vlayout.transpose_keys`, V in FA3's layout)."""
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"v: expected a torch.Tensor, got {type(v).__name__}")
    if v.dim() != 4:
        raise ValueError(f"v: expected (batch, seqlen_k, heads_kv, head_dim), got {tuple(v.shape)}")
    b, s_k, hk, d = v.shape
    s_pad = -(-s_k // 32) * 32
    if v.is_cuda and v.element_size() == 1 and v.stride(-1) == 1:
        return KeyOrderedVt(transpose_keys(v, s_pad, key_ordered=True), s_k)
    vt = torch.zeros((b, hk, d, s_pad), dtype=v.dtype, device=v.device)
    vt[..., :s_k] = v.permute(0, 2, 3, 1)
    # column 16a + 4t + 2b + e of every 32 <- column 16a + 8b + 2t + e: `in_key_order` on the key axis
    vt = vt.reshape(b, hk, d, s_pad // 32, 2, 2, 4, 2).permute(0, 1, 2, 3, 4, 6, 5, 7).reshape(b, hk, d, s_pad)
    return KeyOrderedVt(vt.contiguous(), s_k)


# v28 `pv_flush` at head_dim 256: O is 128 fp32 values per consumer thread there, and a flushed P V
# tile beside it spills (offline sm_90 compile: 800 bytes of stack). `pv_halves` holds O as two
# 128-column tiles and computes each block's P V half by half after the softmax (144-392 bytes).
# H200, 2x8192x32x256, three interleaved rounds (results/h200/bench_v28_pv_halves.*), TFLOP/s
# non-causal / causal: n128s3 961 / 895, n64s4 803 / 760, n64s3 800 / 760; the whole product 383 / 370,
# no flush 1082 / 1036, fa3-fwd 1045 / 1021.
WS_PV_HALVES_CANDIDATES: list[WsConfig] = [
    WsConfig(block_n=128, stages=3, pack_p=True, persistent=True, dynamic=True, pv_flush=True, pv_halves=True),
    WsConfig(block_n=64, stages=4, pack_p=True, persistent=True, dynamic=True, pv_flush=True, pv_halves=True),
    WsConfig(block_n=64, stages=3, pack_p=True, persistent=True, dynamic=True, pv_flush=True, pv_halves=True),
]


def _four_transposer_warps_unbuildable(config: WsConfig | None, head_dim: int) -> bool:
    """True for a `transpose_v` config with four transposer warps at head_dim 256, which ptxas cannot
    build (the launch's 128 registers per thread are too few for that head dim's wgmma)."""
    return config is not None and config.transpose_v and config.transposer_warps == 4 and head_dim > 128


def default_ws_config(head_dim: int, causal: bool = False, key_ordered: bool = False,
                      pv_flush: bool = False, transpose_v: bool = False) -> WsConfig:
    """The tiles that measured best on the H200 (docs/kernel-notes.md v8-v12, v19-v21).

    key_ordered (V^T from `key_ordered_vt`): P crosses the loop packed four e4m3 per word
    (`pack_p`, v12), which frees the registers for FA3's tiles: 192 query rows (three consumers)
    at head_dim 64, 128 keys in three stages at 256; one persistent program per SM (v19: 0-4 %
    faster non-causal), taking its tiles from an atomic counter (FA3's for causal attention; FA3
    keeps fixed lists non-causal), except non-causal at 64 (v20:
    up to 3.9 % faster than fixed lists at 128 and 256, even or slower at 64). Causal tiles differ
    in length; the counter balanced them better than fixed lists (v20) and, over two grids each,
    than one program per tile (v21: 0.964 against 0.953 of FA3 on average). Plain V^T: P crosses in
    float32, two consumers, 128 keys at 64 and 128 (v11's stage counts), 64 keys in four stages at
    256 (128 keys spill there). `pv_flush`: the same tiles with each block's P V added to O in
    float32 (v28), at head_dim 256 in halves (`pv_halves`: 961 / 895 TFLOP/s non-causal / causal at
    2x8192x32x256 with key-ordered V, against 383 / 370 for the whole product; v28). `transpose_v`
    (V as stored, transposed in the kernel; v30, v31): the key-ordered tiles with two transposer warps
    and the stage counts that measured best at 2x8192x32xd in v31 (four / three at head_dim 64
    non-causal / causal, four at 128, three at 256: 597 / 552, 704 / 677, 790 / 749 TFLOP/s; the
    stage count moves these by up to 5 %)."""
    if transpose_v:
        cfg = replace(default_ws_config(head_dim, causal, True, pv_flush), transpose_v=True)
        if head_dim <= 64:
            return replace(cfg, stages=3 if causal else 4)
        if head_dim <= 128:
            return replace(cfg, stages=4)
        return cfg
    if pv_flush:
        return replace(default_ws_config(head_dim, causal, key_ordered), pv_flush=True, pv_halves=head_dim > 128)
    if key_ordered:
        if head_dim <= 64:  # non-causal: fixed lists (the counter was even, or 4 % slower with 16k tokens)
            return WsConfig(block_n=128, stages=3, pack_p=True, consumers=3, persistent=True, dynamic=causal)
        if head_dim <= 128:
            return WsConfig(block_n=128, stages=3 if causal else 4, pack_p=True, persistent=True, dynamic=True)
        return WsConfig(block_n=128, stages=3, pack_p=True, persistent=True, dynamic=True)
    if head_dim <= 64:
        return WsConfig(block_n=128, stages=4 if causal else 3)
    if head_dim <= 128:
        return WsConfig(block_n=128, stages=3 if causal else 4)
    return WsConfig(block_n=64, stages=4)


if HAVE_GLUON:

    @gluon.jit
    def _ws_tile(tile, sched, seqlen_q, seqlen_k, GROUP: gl.constexpr, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        """Tile number -> (b, h, hk, m0, key blocks, masked key blocks). Tiles are numbered in the
        teaching kernel's order: heads in L2-sized chunks, longest query blocks first."""
        n_m_blocks, batch_heads, heads_per_chunk, heads_q = sched
        chunk_size = n_m_blocks * heads_per_chunk
        chunk = tile // chunk_size
        heads_here = gl.minimum(heads_per_chunk, batch_heads - chunk * heads_per_chunk)
        r = tile - chunk * chunk_size
        m0 = (n_m_blocks - 1 - r // heads_here) * BLOCK_M
        bh = chunk * heads_per_chunk + r % heads_here
        h = bh % heads_q
        diag = seqlen_k - seqlen_q
        if CAUSAL:
            n_end = gl.minimum(seqlen_k, m0 + BLOCK_M + diag)
            n_blocks = (gl.maximum(n_end, 0) + BLOCK_N - 1) // BLOCK_N
            n_full = gl.minimum(gl.maximum(m0 + diag + 1, 0), seqlen_k) // BLOCK_N
        else:
            n_blocks = (seqlen_k + BLOCK_N - 1) // BLOCK_N
            n_full = seqlen_k // BLOCK_N
        n_full = gl.minimum(n_full, n_blocks)
        return bh // heads_q, h, h // GROUP, m0, n_blocks, n_blocks - n_full

    @gluon.jit
    def _ws_next_tile(tile, COUNTER, DYNAMIC: gl.constexpr):
        """The tile a persistent program takes after `tile`: the next of its fixed list (tile + grid),
        or, DYNAMIC, the next one nobody has taken (FA3's atomic tile counter for causal attention;
        programs start with tiles 0 .. grid-1, so counter value c means tile grid + c)."""
        if DYNAMIC:
            nxt = gl.atomic_add(COUNTER, 1) + gl.num_programs(0)
        else:
            nxt = tile + gl.num_programs(0)
        return nxt

    @gluon.jit
    def _ws_counter_done(COUNTER):
        """A program has taken its last (out of range) number from the tile counter: the last of the
        launch to say so sets the counter back to zero for the next launch on the stream (no kernel
        before the attention's, safe under CUDA graphs)."""
        if gl.atomic_add(COUNTER + 1, 1) == gl.num_programs(0) - 1:
            gl.store(COUNTER, 0)
            gl.store(COUNTER + 1, 0)

    @gluon.jit
    def _ws_load_tile(q_desc, k_desc, vt_desc, bufs, bars, tile, w, g, sched, seqlen_q, seqlen_k, heads_kv,
                      GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                      CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr, TRANSPOSE_V: gl.constexpr):
        """The loads of one tile, the program's w-th: its consumers' Q rows once they are done with
        the last tile's (`q_free`), then K_j and V^T_j (one stage, one barrier) for j = last .. 0 at
        ring positions g, g + 1, ...; returns the ring position after them. TRANSPOSE_V: V_j as it
        is stored, in HEAD_DIM / 16 boxes of 128 keys x 16 columns, to the transposer (`raw_ready`)."""
        q_bufs, k_bufs, v_bufs, raw_bufs = bufs
        q_bar, q_free, ready, empty, raw_ready = bars[0], bars[1], bars[2], bars[3], bars[7]
        b, h, hk, m0, n_blocks, n_masked = _ws_tile(tile, sched, seqlen_q, seqlen_k, GROUP, 64 * CONSUMERS,
                                                    BLOCK_N, CAUSAL)
        mbarrier.wait(q_free, (w & 1) ^ 1)  # a fresh mbarrier counts as phase 1 done
        mbarrier.expect(q_bar, CONSUMERS * q_desc.block_type.nbytes)
        for c in gl.static_range(CONSUMERS):
            _tma_load(q_desc, [b * seqlen_q + m0 + c * 64, h * HEAD_DIM], q_bar, q_bufs.index(c))
        for it in range(n_blocks):
            n0 = (n_blocks - 1 - it) * BLOCK_N
            st = (g + it) % STAGES
            mbarrier.wait(empty.index(st), (((g + it) // STAGES) & 1) ^ 1)
            if TRANSPOSE_V:  # V's stage goes to the transposer, whose arrive is `ready`'s second
                mbarrier.expect(ready.index(st), k_desc.block_type.nbytes)
                _tma_load(k_desc, [b * seqlen_k + n0, hk * HEAD_DIM], ready.index(st), k_bufs.index(st))
                mbarrier.expect(raw_ready.index(st), (HEAD_DIM // 16) * vt_desc.block_type.nbytes)
                for c in gl.static_range(HEAD_DIM // 16):
                    _tma_load(vt_desc, [b, n0, hk * HEAD_DIM + c * 16], raw_ready.index(st),
                              raw_bufs.index(st * (HEAD_DIM // 16) + c))
            else:
                mbarrier.expect(ready.index(st), k_desc.block_type.nbytes + vt_desc.block_type.nbytes)
                _tma_load(k_desc, [b * seqlen_k + n0, hk * HEAD_DIM], ready.index(st), k_bufs.index(st))
                _tma_load(vt_desc, [(b * heads_kv + hk) * HEAD_DIM, n0], ready.index(st), v_bufs.index(st))
        return g + n_blocks

    @gluon.jit
    def _ws_loader(q_desc, k_desc, vt_desc, bufs, bars, sched, seqlen_q, seqlen_k, heads_kv, COUNTER,
                   GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                   CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr, DYNAMIC: gl.constexpr,
                   TRANSPOSE_V: gl.constexpr):
        """One warp: the TMA copies of the program's tile (`_ws_load_tile`), or, PERSISTENT, of each
        of its tiles in turn. The ring runs on across tiles: the next tile's Q and first key blocks
        load while the consumers finish the last one. DYNAMIC: the next tile's number comes from the
        counter (asked at the start of a tile, its latency under the loads) and goes to the
        consumers through `tile_slot`, double-buffered, one mbarrier per slot. TRANSPOSE_V: at the
        end, the ring position after the last stage goes to the transposer (`_ws_stop_transposer`)."""
        tile = gl.program_id(0)
        if PERSISTENT:
            tile_slot, tile_bar = bars[5], bars[6]
            n_tiles = sched[0] * sched[1]
            g = 0  # key blocks loaded so far, over the program's tiles: the ring's position
            w = 0
            while tile < n_tiles:
                nxt = _ws_next_tile(tile, COUNTER, DYNAMIC)
                g = _ws_load_tile(q_desc, k_desc, vt_desc, bufs, bars, tile, w, g, sched, seqlen_q, seqlen_k,
                                  heads_kv, GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, TRANSPOSE_V)
                if DYNAMIC:  # slot (w+1)&1 last held tile w-1's number, read before the q_free waited for above
                    tile_slot.index((w + 1) & 1).store(gl.full([1], nxt, gl.int32, gl.BlockedLayout([1], [32], [1], [0])))
                    mbarrier.arrive(tile_bar.index((w + 1) & 1), count=1)
                tile = nxt
                w += 1
            if DYNAMIC:
                _ws_counter_done(COUNTER)
        else:
            g = _ws_load_tile(q_desc, k_desc, vt_desc, bufs, bars, tile, 0, 0, sched, seqlen_q, seqlen_k, heads_kv,
                              GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, TRANSPOSE_V)
        if TRANSPOSE_V:
            _ws_stop_transposer(bars, g, STAGES)

    @gluon.jit
    def _ws_stop_transposer(bars, g, STAGES: gl.constexpr):
        """Tell the transposer that ring position g holds no stage: its number in `v_stop`, then an
        arrive without bytes on that position's `raw_ready`, once the consumers are done with the
        stage that held it before (as a load would wait)."""
        empty, raw_ready, v_stop = bars[3], bars[7], bars[8]
        st = g % STAGES
        mbarrier.wait(empty.index(st), ((g // STAGES) & 1) ^ 1)
        v_stop.store(gl.full([1], g, gl.int32, gl.BlockedLayout([1], [32], [1], [0])))
        mbarrier.arrive(raw_ready.index(st), count=1)

    @gluon.jit
    def _ws_pairs_transposed(a, b):
        """Two columns of V^T from the 16-bit pairs `ldmatrix.trans` gives a thread: a holds columns 2c
        and 2c + 1 of keys 2t and 2t + 1 (one word: key 2t's two bytes, then key 2t + 1's), b the same
        of keys 2t + 8 and 2t + 9. Returns, as the same kind of word, column 2c's bytes of the four
        keys, low byte first, and column 2c + 1's: two PRMTs (FA3's byte_perm 0x6420 and 0x7531)."""
        return gl.inline_asm_elementwise(
            "prmt.b32 $0, $2, $3, 0x6420; prmt.b32 $1, $2, $3, 0x7531;",
            "=r,=r,r,r", [a, b], dtype=(gl.int16, gl.int16), is_pure=True, pack=2)

    @gluon.jit
    def _ws_box_columns(raw, pairs: gl.constexpr, box_pairs: gl.constexpr, BLOCK_N: gl.constexpr):
        """One box of V (BLOCK_N keys x 16 columns, e4m3, in shared memory) as the 16 rows of V^T it
        becomes, int16 pairs of positions [16, BLOCK_N // 2] in `key_ordered_vt`'s key order: read in the
        `pairs` layout (the compiler makes it `ldmatrix.trans`), then `_ws_pairs_transposed`."""
        box = smem_reinterpret(raw, gl.int16, [BLOCK_N, 8], box_pairs)
        x = box.load(pairs)
        x = x.reshape(BLOCK_N // 16, 2, 4, 2, 8).permute(0, 2, 4, 3, 1)
        a, b = x.split()
        even, odd = _ws_pairs_transposed(a, b)
        return gl.join(even, odd).permute(2, 4, 0, 1, 3).reshape(16, BLOCK_N // 2)

    @gluon.jit
    def _ws_transposer(bufs, bars, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                       WARPS: gl.constexpr):
        """WARPS warps (TRANSPOSE_V): V^T_j from V_j in shared memory, as `key_ordered_vt` stores
        it, for each ring position until the loader says stop (`_ws_stop_transposer`).

        A stage of V arrives as HEAD_DIM / 16 boxes of 128 keys x 16 columns, box c on the 2 KiB that
        V^T's rows 16c .. 16c + 15 take: the stage is transposed in place, two boxes a step. `ldmatrix.trans`
        gives each thread, as 16-bit pairs, columns 2c and 2c + 1 of keys 2t, 2t + 1 and (another
        matrix) 2t + 8, 2t + 9 of a group of 16 (t = 0..3): `key_ordered_vt` puts exactly those four
        at positions 4t .. 4t + 3. Two PRMTs (`_ws_pairs_transposed`) make them the words of columns 2c
        and 2c + 1 at those positions, and `stmatrix` writes them; a barrier of the transposer's warps
        between two boxes' reads and the writes over their bytes. Then a fence (the wgmma reads through the async proxy)
        and the second arrive on the stage's `ready`."""
        CH: gl.constexpr = HEAD_DIM // 16
        v_bufs, raw_bufs = bufs[2], bufs[3]
        ready, raw_ready, v_stop = bars[2], bars[7], bars[8]
        # (key, column pair) of a box: registers key bit 0 (the two halves of a word), bit 3 and bit 4,
        # (with two warps) bit 5; lanes key bits 1-2 (t) and the pair (c); warps the rest
        if WARPS == 4:
            pairs: gl.constexpr = gl.DistributedLinearLayout(
                reg_bases=[[1, 0], [8, 0], [16, 0]], lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
                warp_bases=[[32, 0], [64, 0]], block_bases=[], shape=[BLOCK_N, 8])
        else:
            pairs: gl.constexpr = gl.DistributedLinearLayout(
                reg_bases=[[1, 0], [8, 0], [16, 0], [32, 0]], lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
                warp_bases=[[64, 0]], block_bases=[], shape=[BLOCK_N, 8])
        box_pairs: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
        vt_pairs: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        g = 0
        go = True
        while go:
            st = g % STAGES
            mbarrier.wait(raw_ready.index(st), (g // STAGES) & 1)
            go = g < gl.max(v_stop.load(gl.BlockedLayout([1], [32], [WARPS], [0])), 0)
            if go:
                for c2 in gl.static_range(CH // 2):
                    y0 = _ws_box_columns(raw_bufs.index(st * CH + 2 * c2), pairs, box_pairs, BLOCK_N)
                    y1 = _ws_box_columns(raw_bufs.index(st * CH + 2 * c2 + 1), pairs, box_pairs, BLOCK_N)
                    thread_barrier()
                    rows = smem_reinterpret(v_bufs.index(st).slice(c2 * 32, 32, dim=0), gl.int16, [32, BLOCK_N // 2],
                                            vt_pairs)
                    rows.store(gl.join(y0, y1).permute(2, 0, 1).reshape(32, BLOCK_N // 2))
                fence_async_shared()  # every thread's stores, before the wgmma's async-proxy reads
                # one arrive for all: Gluon puts a barrier of this partition's warps before it
                mbarrier.arrive(ready.index(st), count=1)
            g += 1

    @gluon.jit
    def _ws_mask(s, n0, offs_m, seqlen_k, diag, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                 s_layout: gl.constexpr):
        """Keys past the sequence (and, causal, right of the bottom-right diagonal) -> -inf."""
        offs_n = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        if CAUSAL:  # row i sees key n iff n <= last(i): one compare per score
            last = gl.minimum(offs_m + diag, seqlen_k - 1)
            keep = gl.expand_dims(offs_n, 0) <= gl.expand_dims(last, 1)
        else:
            keep = gl.expand_dims(offs_n < seqlen_k, 0)
        return gl.where(keep, s, float("-inf"))

    @gluon.jit
    def _ws_softmax(s, m_i, l_i, scale_log2, MAX_OFFSET: gl.constexpr):
        """The online-softmax update of `fp8lab.kernels.attention._softmax_pv`, without the PV product."""
        m_new = gl.maximum(m_i, gl.max(s, 1))
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
        # each a multiply-add the compiler contracts to one FFMA (one rounding), as _softmax_pv's tl.fma
        max_scaled = m_use * scale_log2 - MAX_OFFSET
        p = gl.exp2(s * scale_log2 - gl.expand_dims(max_scaled, 1))
        alpha = gl.exp2((m_i - m_use) * scale_log2)
        l_i = l_i * alpha + gl.sum(p, 1)
        return p, alpha, l_i, m_new

    @gluon.jit
    def _ws_in_key_order(x):
        """Columns relabelled as `fp8lab.kernels.attention.in_key_order` does (a register renaming)."""
        return x.reshape(x.shape[0], x.shape[1] // 32, 2, 2, 4, 2).permute(0, 1, 2, 4, 3, 5).reshape(x.shape)

    @gluon.jit
    def _ws_carry(p, PACK_P: gl.constexpr):
        """What of P crosses the loop's back edge to its PV MMA in the next iteration: P itself
        (float32), or with PACK_P e4m3(P) packed four per int32 by inline PTX, in key order (Gluon
        represents a loop-carried e4m3 tensor one byte per register and would re-pack it, v11).
        Called after the previous PV MMA has finished: the packed words become that MMA's operand
        registers as they are, and written while it still ran they would make ptxas serialize
        every wgmma of the loop (v12)."""
        if PACK_P:
            x = _ws_in_key_order(p).reshape(p.shape[0], p.shape[1] // 4, 2, 2)  # column 4g + 2i + j
            x_j0, x_j1 = x.split()
            e0, e2 = x_j0.split()
            e1, e3 = x_j1.split()
            carried = gl.inline_asm_elementwise(
                "{.reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; "
                "mov.b32 $0, {lo, hi};}", "=r,f,f,f,f", [e0, e1, e2, e3], dtype=gl.int32, is_pure=True, pack=1)
        else:
            carried = p
        return carried

    @gluon.jit
    def _ws_p_operand(pc, p_layout: gl.constexpr, PERMUTE_KEYS: gl.constexpr, PACK_P: gl.constexpr):
        """e4m3(P) as the register A operand of the PV wgmma, from what `_ws_carry` kept. Float32
        P is cast here, next to its MMA (v11). PERMUTE_KEYS (V^T from `key_ordered_vt`): columns
        relabelled so that the conversion to the A layout moves no data. PACK_P: each word is
        already four e4m3 in operand order; the inline asm (pack=4) hands it over as they are,
        so no byte is moved (v11's byte-by-byte unpack cost 145 PRMT/LOP3 per block at d=256)."""
        if PACK_P:
            w = gl.join(pc, pc)
            w = gl.join(w, w)
            w = w.reshape(w.shape[0], w.shape[1] * 4)  # every word four times, once per byte it holds
            w = gl.convert_layout(w, p_layout, assert_trivial=True)
            p8 = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r,r,r", [w], dtype=gl.float8e4nv,
                                           is_pure=True, pack=4)
        elif PERMUTE_KEYS:
            p8 = gl.convert_layout(_ws_in_key_order(pc.to(gl.float8e4nv)), p_layout, assert_trivial=True)
        else:
            p8 = gl.convert_layout(pc.to(gl.float8e4nv), p_layout)
        return p8

    @gluon.jit
    def _ws_turn(turn, wg, rnd, PINGPONG: gl.constexpr):
        """FA3's ping-pong order (its warp-scheduler barriers): a consumer issues its MMAs of round
        `rnd` only after the other consumer issued its own of the round before; consumer 0 goes first."""
        if PINGPONG:
            mbarrier.wait(turn.index(wg), (rnd & 1) ^ (1 - wg))  # a fresh mbarrier counts as phase 1 done

    @gluon.jit
    def _ws_pass(turn, wg, PINGPONG: gl.constexpr):
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - wg), count=1)

    @gluon.jit
    def _ws_rescale(acc, alpha, o_layout: gl.constexpr):
        """O (or one half of it) times the online softmax's alpha, row by row."""
        return acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)

    @gluon.jit
    def _ws_pv_halves(p8, vt, zero_o, acc, acc_hi, O_COLS: gl.constexpr):
        """PV_HALVES: P V^T's two column halves, each into a fresh accumulator, waited for and added to
        its half of O in fp32 before the next is issued. vt: V^T's (head_dim, block_n) stage."""
        pv = warpgroup_mma(p8, vt.slice(0, O_COLS, dim=0).permute((1, 0)), zero_o, use_acc=False, is_async=True)
        acc += warpgroup_mma_wait(0, deps=[pv])
        pv = warpgroup_mma(p8, vt.slice(O_COLS, O_COLS, dim=0).permute((1, 0)), zero_o, use_acc=False, is_async=True)
        acc_hi += warpgroup_mma_wait(0, deps=[pv])
        return acc, acc_hi

    @gluon.jit
    def _ws_consume_tile(bufs, bars, wg, tile, w, g, rnd, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                         GROUP: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                         CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr, MAX_OFFSET: gl.constexpr,
                         PINGPONG: gl.constexpr, RESCALE_UNDER_MMA: gl.constexpr, PERMUTE_KEYS: gl.constexpr,
                         PACK_P: gl.constexpr, PV_FLUSH: gl.constexpr, PV_HALVES: gl.constexpr):
        """One warpgroup's 64 query rows of one tile, the program's w-th, its key blocks at ring
        positions g, g + 1, ... and its MMA rounds from rnd: S = Q K^T and O += e4m3(P) V^T as async
        wgmma, the softmax in between, then the epilogue; returns (g, rnd) after it.

        Per key block: issue S_j, issue P_{j-1} V_{j-1}, wait for S_j only, softmax of block j, wait
        for the PV product, keep P_j for the next block (`_ws_carry`). Q is released after the last
        S, the last stage after the last PV product, so the loader fills both for the next tile under
        this one's last MMA and epilogue. RESCALE_UNDER_MMA (FA3's order): O's rescale by the last
        softmax's alpha runs after S_j is issued, under that MMA, instead of before the loop turns;
        same bits. PV_FLUSH: each P V in a fresh accumulator, added to O in fp32 after its wait.
        PV_HALVES (with PV_FLUSH, v28): O held as two tiles of head_dim / 2 columns, each block's P V
        computed half by half after the softmax, each half waited for before the next, so that no
        product is in flight beside the scores (the registers of head dim 256)."""
        ROWS: gl.constexpr = 64
        O_COLS: gl.constexpr = HEAD_DIM // 2 if PV_HALVES else HEAD_DIM
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 32])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, O_COLS, 32])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
        q_bufs, k_bufs, v_bufs = bufs[0], bufs[1], bufs[2]
        q_bar, q_free, ready, empty, turn = bars[0], bars[1], bars[2], bars[3], bars[4]
        Q_DESCALE, K_DESCALE, V_DESCALE, stride_qdb, stride_qdh, stride_kdb, stride_kdh, stride_vdb, stride_vdh = (
            descales)
        O, LSE, stride_ob, stride_os, stride_oh, stride_lb, stride_lh = outs
        q_smem = q_bufs.index(wg)
        zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
        zero_o = gl.zeros([ROWS, O_COLS], gl.float32, o_layout)  # PV_FLUSH's fresh accumulator (never read)
        diag = seqlen_k - seqlen_q
        b, h, hk, m0, n_blocks, n_masked = _ws_tile(tile, sched, seqlen_q, seqlen_k, GROUP, ROWS * CONSUMERS,
                                                    BLOCK_N, CAUSAL)
        scale_log2 = softmax_scale_log2 * (gl.load(Q_DESCALE + b * stride_qdb + hk * stride_qdh)
                                           * gl.load(K_DESCALE + b * stride_kdb + hk * stride_kdh))
        v_descale = gl.load(V_DESCALE + b * stride_vdb + hk * stride_vdh)
        r0 = m0 + wg * ROWS
        offs_m = r0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
        m_i = gl.full([ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, s_layout))
        acc = gl.zeros([ROWS, O_COLS], gl.float32, o_layout)
        acc_hi = gl.zeros([ROWS, O_COLS], gl.float32, o_layout)  # PV_HALVES: O's columns O_COLS.. (else unused)
        mbarrier.wait(q_bar, w & 1)
        if n_blocks > 0:
            # Block 0 (the last key block): scores and softmax only; its PV runs in the next step.
            mbarrier.wait(ready.index(g % STAGES), (g // STAGES) & 1)
            _ws_turn(turn, wg, rnd, PINGPONG)
            s = warpgroup_mma(q_smem, k_bufs.index(g % STAGES).permute((1, 0)), zero_s, use_acc=False,
                              is_async=True)
            _ws_pass(turn, wg, PINGPONG)
            s = warpgroup_mma_wait(0, deps=[s])
            if n_masked > 0:
                s = _ws_mask(s, (n_blocks - 1) * BLOCK_N, offs_m, seqlen_k, diag, BLOCK_N, CAUSAL, s_layout)
            p, alpha, l_i, m_i = _ws_softmax(s, m_i, l_i, scale_log2, MAX_OFFSET)
            pc = _ws_carry(p, PACK_P)
            for it in range(1, n_blocks):
                st = (g + it) % STAGES
                prev = (g + it - 1) % STAGES
                mbarrier.wait(ready.index(st), ((g + it) // STAGES) & 1)  # K_j and V_j
                _ws_turn(turn, wg, rnd + it, PINGPONG)
                s = warpgroup_mma(q_smem, k_bufs.index(st).permute((1, 0)), zero_s, use_acc=False, is_async=True)
                if RESCALE_UNDER_MMA:
                    acc = _ws_rescale(acc, alpha, o_layout)
                    if PV_HALVES:  # (assigned only here, so that acc_hi is carried only then)
                        acc_hi = _ws_rescale(acc_hi, alpha, o_layout)
                p8 = _ws_p_operand(pc, p_layout, PERMUTE_KEYS, PACK_P)
                if not PV_HALVES:  # (PV_HALVES issues its products after the softmax)
                    if PV_FLUSH:  # P_{j-1} V_{j-1} in a fresh accumulator, added to O in float32 below
                        pv = warpgroup_mma(p8, v_bufs.index(prev).permute((1, 0)), zero_o, use_acc=False,
                                           is_async=True)
                    else:  # O itself accumulates in the FP8 MMA (upstream FA3)
                        acc = warpgroup_mma(p8, v_bufs.index(prev).permute((1, 0)), acc, is_async=True)
                _ws_pass(turn, wg, PINGPONG)
                s = warpgroup_mma_wait(0 if PV_HALVES else 1, deps=[s])  # S_j done; the PV of block j-1 may run
                if it < n_masked:
                    s = _ws_mask(s, (n_blocks - 1 - it) * BLOCK_N, offs_m, seqlen_k, diag, BLOCK_N, CAUSAL,
                                 s_layout)
                p, alpha, l_i, m_i = _ws_softmax(s, m_i, l_i, scale_log2, MAX_OFFSET)
                if PV_HALVES:  # P_j packed first: its float32 registers are free before the products
                    pc_next = _ws_carry(p, PACK_P)
                    acc, acc_hi = _ws_pv_halves(p8, v_bufs.index(prev), zero_o, acc, acc_hi, O_COLS)
                    pc = pc_next
                else:
                    if PV_FLUSH:
                        acc += warpgroup_mma_wait(0, deps=[pv])
                    else:
                        acc = warpgroup_mma_wait(0, deps=[acc])
                    pc = _ws_carry(p, PACK_P)
                mbarrier.arrive(empty.index(prev), count=1)  # K_{j-1} and V_{j-1} are free
                if not RESCALE_UNDER_MMA:
                    acc = _ws_rescale(acc, alpha, o_layout)
                    if PV_HALVES:  # (assigned only here, so that acc_hi is carried only then)
                        acc_hi = _ws_rescale(acc_hi, alpha, o_layout)
            mbarrier.arrive(q_free, count=1)  # every S of this tile is done: the next tile's Q may come
            last = (g + n_blocks - 1) % STAGES
            if RESCALE_UNDER_MMA:
                acc = _ws_rescale(acc, alpha, o_layout)
                if PV_HALVES:
                    acc_hi = _ws_rescale(acc_hi, alpha, o_layout)
            _ws_turn(turn, wg, rnd + n_blocks, PINGPONG)
            p8 = _ws_p_operand(pc, p_layout, PERMUTE_KEYS, PACK_P)
            if PV_HALVES:
                acc, acc_hi = _ws_pv_halves(p8, v_bufs.index(last), zero_o, acc, acc_hi, O_COLS)
                _ws_pass(turn, wg, PINGPONG)
            elif PV_FLUSH:
                pv = warpgroup_mma(p8, v_bufs.index(last).permute((1, 0)), zero_o, use_acc=False, is_async=True)
                _ws_pass(turn, wg, PINGPONG)
                acc += warpgroup_mma_wait(0, deps=[pv])
            else:
                acc = warpgroup_mma(p8, v_bufs.index(last).permute((1, 0)), acc, is_async=True)
                _ws_pass(turn, wg, PINGPONG)
                acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(empty.index(last), count=1)
        else:
            mbarrier.arrive(q_free, count=1)
        g += n_blocks

        # Epilogue (as the teaching kernel): normalise, v_descale, bf16 out, natural-log lse.
        l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
        m_o = gl.convert_layout(m_i, gl.SliceLayout(1, o_layout))
        no_keys = l_o == 0.0
        out = acc * gl.expand_dims((1.0 / gl.where(no_keys, 1.0, l_o)) * v_descale, 1)
        m_use = gl.where(m_o == float("-inf"), 0.0, m_o)
        lse = (m_use * scale_log2 - MAX_OFFSET + gl.log2(gl.where(no_keys, 1.0, l_o))) * 0.6931471805599453
        lse = gl.where(no_keys, float("-inf"), lse)
        rows = r0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
        offs_d = gl.arange(0, O_COLS, layout=gl.SliceLayout(0, o_layout))
        in_q = rows < seqlen_q
        o_base = O + b.to(gl.int64) * stride_ob + h.to(gl.int64) * stride_oh
        o_ptrs = o_base + gl.expand_dims(rows.to(gl.int64) * stride_os, 1) + gl.expand_dims(offs_d, 0)
        gl.store(o_ptrs, out.to(gl.bfloat16), mask=gl.expand_dims(in_q, 1))
        if PV_HALVES:
            out_hi = acc_hi * gl.expand_dims((1.0 / gl.where(no_keys, 1.0, l_o)) * v_descale, 1)
            gl.store(o_ptrs + O_COLS, out_hi.to(gl.bfloat16), mask=gl.expand_dims(in_q, 1))
        gl.store(LSE + b.to(gl.int64) * stride_lb + h.to(gl.int64) * stride_lh + rows, lse, mask=in_q)
        return g, rnd + n_blocks + gl.minimum(n_blocks, 1)  # a tile with keys has n_blocks + 1 MMA rounds

    @gluon.jit
    def _ws_consumer(bufs, bars, wg, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                     GROUP: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                     CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr, MAX_OFFSET: gl.constexpr, PINGPONG: gl.constexpr,
                     RESCALE_UNDER_MMA: gl.constexpr, PERMUTE_KEYS: gl.constexpr, PACK_P: gl.constexpr,
                     PV_FLUSH: gl.constexpr, PV_HALVES: gl.constexpr, PERSISTENT: gl.constexpr,
                     DYNAMIC: gl.constexpr):
        """One warpgroup, 64 query rows of the program's tile (`_ws_consume_tile`), or, PERSISTENT,
        of each of its tiles in turn: tile + grid, or, DYNAMIC, the number the loader took from the
        counter (`tile_slot`). Several run side by side on the same K/V ring."""
        tile = gl.program_id(0)
        if PERSISTENT:
            tile_slot, tile_bar = bars[5], bars[6]
            n_tiles = sched[0] * sched[1]
            g = 0  # key blocks consumed so far, over the program's tiles: the ring's position (as the loader's)
            rnd = 0  # MMA rounds so far (PINGPONG's turns)
            w = 0
            while tile < n_tiles:
                g, rnd = _ws_consume_tile(bufs, bars, wg, tile, w, g, rnd, sched, seqlen_q, seqlen_k, descales, outs,
                                          softmax_scale_log2, GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL,
                                          MAX_OFFSET, PINGPONG, RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH,
                                          PV_HALVES)
                if DYNAMIC:
                    mbarrier.wait(tile_bar.index((w + 1) & 1), (w >> 1) & 1)
                    tile = gl.sum(tile_slot.index((w + 1) & 1).load(gl.BlockedLayout([1], [32], [4], [0])), 0)
                else:
                    tile += gl.num_programs(0)
                w += 1
        else:
            _ws_consume_tile(bufs, bars, wg, tile, 0, 0, 0, sched, seqlen_q, seqlen_k, descales, outs,
                             softmax_scale_log2, GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET,
                             PINGPONG, RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES)

    @gluon.jit
    def _fp8_attention_ws_fwd(
        q_desc, k_desc, vt_desc,  # TMA descriptors: Q (b*s_q, h*d), K (b*s_k, hk*d), V^T (b*hk*d, s_k)
        O, LSE,  # bf16 (batch, seqlen_q, heads_q, head_dim); float32 (batch, heads_q, seqlen_q)
        COUNTER,  # int32 (2,), zeros: DYNAMIC's tile counter and its count of programs done (`_ws_counter_done`)
        Q_DESCALE, K_DESCALE, V_DESCALE,  # float32 (batch, heads_kv), any strides
        stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
        stride_qdb, stride_qdh, stride_kdb, stride_kdh, stride_vdb, stride_vdh,
        heads_q, heads_kv, seqlen_q, seqlen_k, n_m_blocks, batch_heads, heads_per_chunk,
        softmax_scale_log2,
        GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
        CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr, CAUSAL: gl.constexpr, MAX_OFFSET: gl.constexpr,
        PINGPONG: gl.constexpr, RESCALE_UNDER_MMA: gl.constexpr, PERMUTE_KEYS: gl.constexpr, PACK_P: gl.constexpr,
        PV_FLUSH: gl.constexpr, PV_HALVES: gl.constexpr, PERSISTENT: gl.constexpr, DYNAMIC: gl.constexpr,
        TRANSPOSE_V: gl.constexpr, TRANSPOSER_WARPS: gl.constexpr, TRANSPOSER_REGS: gl.constexpr,
    ):
        """Program p takes tile p (`_ws_tile`); PERSISTENT (a grid of one program per SM, `WsConfig`),
        then tiles p + grid, p + 2 grid, ..., or, DYNAMIC, the tiles no other program has taken yet.
        TRANSPOSE_V: vt_desc is V itself, (b, s_k, hk*d) in boxes of (1, 128, 16), and
        TRANSPOSER_WARPS transposer warps write V^T's stages (`_ws_transposer`)."""
        q_bufs = gl.allocate_shared_memory(q_desc.dtype, [CONSUMERS] + q_desc.block_type.shape, q_desc.layout)
        k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
        if TRANSPOSE_V:
            v_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, HEAD_DIM, BLOCK_N],
                                               gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2))
            # V's boxes land on the bytes they become in V^T (box c: rows 16c .. 16c + 15), for the transposer
            raw_bufs = smem_reinterpret(v_bufs, gl.float8e4nv, [STAGES * (HEAD_DIM // 16), 1, BLOCK_N, 16],
                                        gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=3))
            raw_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
            v_stop = gl.allocate_shared_memory(gl.int32, [1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
            v_stop.store(gl.full([1], 1 << 30, gl.int32, gl.BlockedLayout([1], [32], [4], [0])))
        else:
            v_bufs = gl.allocate_shared_memory(vt_desc.dtype, [STAGES] + vt_desc.block_type.shape, vt_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
        tile_slot = gl.allocate_shared_memory(gl.int32, [2, 1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        tile_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        mbarrier.init(q_free, count=CONSUMERS)  # every consumer is done with its Q rows
        for i in gl.static_range(CONSUMERS):
            mbarrier.init(turn.index(i), count=1)
        for i in gl.static_range(2):
            mbarrier.init(tile_bar.index(i), count=1)  # the loader wrote the next tile's number
        for i in gl.static_range(STAGES):
            # TRANSPOSE_V: K's bytes and the transposer's arrive
            mbarrier.init(ready.index(i), count=2 if TRANSPOSE_V else 1)
            mbarrier.init(empty.index(i), count=CONSUMERS)  # every consumer releases every stage
            if TRANSPOSE_V:
                mbarrier.init(raw_ready.index(i), count=1)
        fence_async_shared()

        if TRANSPOSE_V:
            bufs = (q_bufs, k_bufs, v_bufs, raw_bufs)
            bars = (q_bar, q_free, ready, empty, turn, tile_slot, tile_bar, raw_ready, v_stop)
        else:  # (the same tuples' shapes; the last entries are not used)
            bufs = (q_bufs, k_bufs, v_bufs, v_bufs)
            bars = (q_bar, q_free, ready, empty, turn, tile_slot, tile_bar, ready, tile_slot)
        sched = (n_m_blocks, batch_heads, heads_per_chunk, heads_q)
        descales = (Q_DESCALE, K_DESCALE, V_DESCALE, stride_qdb, stride_qdh, stride_kdb, stride_kdh, stride_vdb,
                    stride_vdh)
        outs = (O, LSE, stride_ob, stride_os, stride_oh, stride_lb, stride_lh)
        # Consumer 0 is the default partition (num_warps=4), the others workers with the same code on
        # the next 64 rows each; then, TRANSPOSE_V, the transposer's warpgroup; the loader warp (last,
        # so that the others fill whole warpgroups) keeps 24 registers. Gluon's lists are static:
        # each combination is spelled out.
        if CONSUMERS == 2:
            if TRANSPOSE_V:
                gl.warp_specialize([
                    (_ws_consumer, (bufs, bars, 0, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_consumer, (bufs, bars, 1, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_transposer, (bufs, bars, HEAD_DIM, BLOCK_N, STAGES, TRANSPOSER_WARPS)),
                    (_ws_loader, (q_desc, k_desc, vt_desc, bufs, bars, sched, seqlen_q, seqlen_k, heads_kv, COUNTER,
                                  GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, PERSISTENT, DYNAMIC,
                                  TRANSPOSE_V)),
                ], [4, TRANSPOSER_WARPS, 1],
                    [CONSUMER_REGS, TRANSPOSER_REGS, TRANSPOSER_REGS if TRANSPOSER_WARPS == 2 else 24])
            else:
                gl.warp_specialize([
                    (_ws_consumer, (bufs, bars, 0, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_consumer, (bufs, bars, 1, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_loader, (q_desc, k_desc, vt_desc, bufs, bars, sched, seqlen_q, seqlen_k, heads_kv, COUNTER,
                                  GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, PERSISTENT, DYNAMIC,
                                  TRANSPOSE_V)),
                ], [4, 1], [CONSUMER_REGS, 24])
        else:  # FA3's 192-row tile
            if TRANSPOSE_V:
                gl.warp_specialize([
                    (_ws_consumer, (bufs, bars, 0, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_consumer, (bufs, bars, 1, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_consumer, (bufs, bars, 2, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_transposer, (bufs, bars, HEAD_DIM, BLOCK_N, STAGES, TRANSPOSER_WARPS)),
                    (_ws_loader, (q_desc, k_desc, vt_desc, bufs, bars, sched, seqlen_q, seqlen_k, heads_kv, COUNTER,
                                  GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, PERSISTENT, DYNAMIC,
                                  TRANSPOSE_V)),
                ], [4, 4, TRANSPOSER_WARPS, 1], [CONSUMER_REGS, CONSUMER_REGS, TRANSPOSER_REGS, TRANSPOSER_REGS])
            else:
                gl.warp_specialize([
                    (_ws_consumer, (bufs, bars, 0, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_consumer, (bufs, bars, 1, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_consumer, (bufs, bars, 2, sched, seqlen_q, seqlen_k, descales, outs, softmax_scale_log2,
                                    GROUP, BLOCK_N, HEAD_DIM, STAGES, CONSUMERS, CAUSAL, MAX_OFFSET, PINGPONG,
                                    RESCALE_UNDER_MMA, PERMUTE_KEYS, PACK_P, PV_FLUSH, PV_HALVES, PERSISTENT,
                                    DYNAMIC)),
                    (_ws_loader, (q_desc, k_desc, vt_desc, bufs, bars, sched, seqlen_q, seqlen_k, heads_kv, COUNTER,
                                  GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, PERSISTENT, DYNAMIC,
                                  TRANSPOSE_V)),
                ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])


def ws_supported(device: torch.device | None = None) -> bool:
    """True when Gluon is importable and the GPU is a Hopper (sm_90)."""
    if not HAVE_GLUON or not torch.cuda.is_available():
        return False
    dev = torch.device("cuda") if device is None else device
    return dev.type == "cuda" and torch.cuda.get_device_capability(dev) == (9, 0)


_COUNTERS: dict[tuple[torch.device, int], torch.Tensor] = {}


def _tile_counter(device: torch.device) -> torch.Tensor:
    """The dynamic scheduler's counter for launches on the current stream: int32 (2,), zero before
    and after every launch (the launch's last program sets it back, `_ws_counter_done`), so no
    kernel runs before the attention's and a CUDA graph's replays find it zero. One per stream, as
    launches on two streams may overlap; kept for the process (8 bytes each; a graph captured on
    a stream holds its address). The first call on a stream allocates: warm up outside a capture."""
    key = (device, torch.cuda.current_stream(device).cuda_stream)
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = _COUNTERS[key] = torch.zeros(2, dtype=torch.int32, device=device)
    return counter


def _row_view(x: torch.Tensor, name: str) -> tuple[int, int]:
    """(rows, row stride) of a (b, s, h, d) tensor read as a 2-D (b*s, h*d) matrix."""
    b, s, h, d = x.shape
    if x.stride(3) != 1 or x.stride(2) != d or (b > 1 and x.stride(0) != s * x.stride(1)):
        raise ValueError(
            f"{name}: the warp-specialized kernel reads {name} as rows of (heads x head_dim); expected strides "
            f"(s*row, row, {d}, 1) with row >= heads*head_dim, got {tuple(x.stride())}"
        )
    if x.stride(1) % 16 or x.data_ptr() % 16:
        raise ValueError(f"{name}: TMA needs a 16-byte aligned base and row stride, got stride {x.stride(1)}")
    return b * s, x.stride(1)


def fp8_attention_ws(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor | KeyOrderedVt,
    *,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    causal: bool = False,
    softmax_scale: float | None = None,
    max_offset: float = FA3_MAX_OFFSET,
    config: WsConfig | None = None,
    pv_flush: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 attention with FA3's warp-specialized schedule (Hopper only); the same inputs, checks and
    results as `fp8lab.kernels.fp8_attention` for batched inputs, except: the descales are keyword
    arguments, the call always returns `(out, lse)`, V comes pre-transposed (below), and descale
    values are not read back (no device sync; `fp8_attention(..., check_descales=True)` does).

    q (b, s_q, h, d), k (b, s_k, hk, d): float8_e4m3fn, head_dim contiguous; v (b, s_k, hk, d)
    pre-transposed (`pretranspose_v`), or `key_ordered_vt(v)`: the same values with the keys
    ordered as P's registers hold them, so P reaches its MMA without shuffles (faster); or, with
    a `WsConfig(transpose_v=True)` config (`default_ws_config(d, causal, transpose_v=True)`), V as
    stored (head_dim contiguous, heads adjacent), transposed in the kernel: the same bits as
    `key_ordered_vt(v)`, slower than that copy plus the kernel (v31).
    Descales float32 (b, hk), any strides (None = ones). `pv_flush`: as `fp8_attention`'s.
    Returns out bf16 (b, s_q, h, d) and lse float32 (b, h, s_q).
    """
    if not HAVE_GLUON:
        raise RuntimeError(f"fp8_attention_ws needs Gluon (triton >= 3.5); this triton is {triton.__version__}")
    for name, flag in (("causal", causal), ("pv_flush", pv_flush)):
        check_flag(name, flag)
    check_max_offset(max_offset)
    if config is not None and not isinstance(config, WsConfig):
        raise TypeError(f"config: expected a WsConfig (see default_ws_config) or None, got {type(config).__name__}")
    keyed = isinstance(v, KeyOrderedVt)
    natural = config is not None and config.transpose_v
    if natural and keyed:
        raise ValueError(f"config {config.label()}: transpose_v takes V as it is stored, (b, s_k, hk, d) with head_dim "
                         "contiguous; got key_ordered_vt's V^T")
    if config is not None and config.pack_p and not (keyed or natural):
        raise ValueError("config: pack_p=True packs P in key order and needs V^T from key_ordered_vt(v) (or "
                         "transpose_v=True, which writes that order), got a tensor")
    vt = v.data if keyed else v
    if keyed:
        if vt.dim() != 4 or vt.shape[-1] % 32 or not vt.is_contiguous() or vt.shape[-1] - v.seqlen_k not in range(32):
            raise ValueError(f"v: expected key_ordered_vt's (b, hk, d, seqlen_k rounded up to 32) buffer, got "
                             f"shape {tuple(vt.shape)} strides {vt.stride()} for seqlen_k={v.seqlen_k}")
        b_, hk_, d_, _ = vt.shape
        v_shape = (b_, v.seqlen_k, hk_, d_)
    else:
        v_shape = tuple(vt.shape)
    # V arrives pre-transposed; the layout check wants FA3's layout, so it sees a stand-in of v's shape
    shape = check_attention_inputs(q, k, torch.empty(v_shape[-1], dtype=vt.dtype, device=vt.device).expand(v_shape))
    if not shape.fp8:
        raise TypeError(f"fp8_attention_ws: expected float8_e4m3fn q, k, v, got {q.dtype}")
    if not (q.is_cuda and ws_supported(q.device)):
        got = torch.cuda.get_device_capability(q.device) if q.is_cuda else q.device.type
        raise RuntimeError(f"fp8_attention_ws: expected tensors on an sm_90 (Hopper) GPU, got {got}")
    b, s_q, h, d = q.shape
    s_k, hk = k.shape[1], k.shape[2]
    if d not in (64, 128, 256):
        raise ValueError(f"fp8_attention_ws: head_dim must be 64, 128 or 256, got {d}")
    if config is not None and config.pv_halves and d != 256:
        raise ValueError(f"config {config.label()}: pv_halves is for head_dim 256 (O and the flushed P V do not fit "
                         f"in a consumer's registers there), got head_dim {d}")
    if config is not None and not config.fits(d):
        raise ValueError(f"config {config.label()}: its tiles take {config.smem_bytes(d)} bytes of shared memory at "
                         f"head_dim {d}, more than an sm_90 program's {SMEM_LIMIT} (less 1 KiB for barriers); use "
                         "fewer stages")
    if natural and _four_transposer_warps_unbuildable(config, d):
        raise ValueError(f"config {config.label()}: four transposer warps take a fourth warpgroup, whose launch "
                         f"registers (128) the wgmma of head_dim {d} does not fit; use transposer_warps=2")
    if natural:
        if s_k and (vt.stride(3) != 1 or vt.stride(2) != d or (vt.stride(1) % 16) or (b > 1 and vt.stride(0) % 16)):
            raise ValueError(f"v: transpose_v reads V by TMA as (b, s_k, hk * d): head_dim contiguous, heads "
                             f"adjacent and 16-byte aligned rows, strides (*, multiple of 16, {d}, 1); got "
                             f"{tuple(vt.stride())}")
        if vt.data_ptr() % 16:
            raise ValueError(f"v: TMA needs V's start 16-byte aligned, got an address {vt.data_ptr() % 16} mod 16 (a "
                             "view that starts mid-row; pass a copy)")
    elif keyed:
        vt_keys = vt.shape[-1]  # V^T rows of seqlen_k rounded up to 32 keys
    else:
        if s_k and (vt.stride(1) != 1 or vt.stride(3) != s_k or vt.stride(2) != d * s_k or (
                b > 1 and vt.stride(0) != hk * d * s_k)):  # (no keys: nothing is read, any strides)
            raise ValueError(
                f"v: the warp-specialized kernel needs V pre-transposed (pretranspose_v: strides of a (b, hk, d, "
                f"s_k) buffer, {(hk * d * s_k, 1, d * s_k, s_k)}), or key_ordered_vt(v), or V as stored with "
                f"WsConfig(transpose_v=True); got {tuple(vt.stride())}"
            )
        vt_keys = s_k
    if not natural and ((vt_keys % 16) or vt.data_ptr() % 16):
        raise ValueError(f"v: TMA needs 16-byte aligned rows of V^T: seqlen_k % 16 == 0 (or key_ordered_vt(v), which "
                         f"pads), got seqlen_k={s_k}")
    scale = check_softmax_scale(softmax_scale, d)
    check_folded_scale(scale, q_descale, k_descale, check_values=False)  # softmax_scale's part: no device sync
    descales = []
    for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if t is None:
            t = torch.ones((1, 1), dtype=torch.float32, device=q.device).expand(b, hk)
        check_descale(name, t, b, hk, device=q.device, check_values=False)  # no device sync
        descales.append(t)
    if config is not None and pv_flush and not config.pv_flush:
        raise ValueError(f"pv_flush=True, but config {config.label()} has pv_flush=False: set it in the config, "
                         "or leave config=None for default_ws_config(..., pv_flush=True)")
    cfg = config or default_ws_config(d, causal, keyed, pv_flush)
    if q.numel() == 0 or s_k == 0:  # no TMA descriptor may have a zero size: fp8_attention's zeros and -inf
        out = torch.zeros((b, s_q, h, d), dtype=torch.bfloat16, device=q.device)
        return out, torch.full((b, h, s_q), float("-inf"), dtype=torch.float32, device=q.device)
    q_rows, q_stride = _row_view(q, "q")
    k_rows, k_stride = _row_view(k, "k")

    fp8 = gl.float8e4nv
    q_smem = gl.NVMMASharedLayout.get_default_for([64, d], fp8)  # shared-memory layouts of the TMA tiles
    k_smem = gl.NVMMASharedLayout.get_default_for([cfg.block_n, d], fp8)
    q_desc = TensorDescriptor(q, [q_rows, h * d], [q_stride, 1], [64, d], q_smem)
    k_desc = TensorDescriptor(k, [k_rows, hk * d], [k_stride, 1], [cfg.block_n, d], k_smem)
    if natural:  # V's boxes of 128 keys x 16 columns, zeros past each sequence's keys (a 3-d box per batch)
        v_smem = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=3)
        batch_stride = vt.stride(0) if b > 1 else s_k * vt.stride(1)
        vt_desc = TensorDescriptor(vt, [b, s_k, hk * d], [batch_stride, vt.stride(1), 1], [1, cfg.block_n, 16], v_smem)
    else:
        vt_smem = gl.NVMMASharedLayout.get_default_for([d, cfg.block_n], fp8)
        vt_desc = TensorDescriptor(vt, [b * hk * d, vt_keys], [vt_keys, 1], [d, cfg.block_n], vt_smem)

    out = torch.empty((b, s_q, h, d), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, h, s_q), dtype=torch.float32, device=q.device)
    n_m_blocks = triton.cdiv(s_q, cfg.block_m)
    batch_heads = b * h
    per_chunk = heads_per_chunk(s_k, d, h // hk, batch_heads)  # the Triton kernel's L2 chunks
    n_tiles = n_m_blocks * batch_heads
    grid = (min(n_tiles, sm_count(q.device)) if cfg.persistent else n_tiles,)
    qd, kd, vd = descales
    _fp8_attention_ws_fwd[grid](
        q_desc, k_desc, vt_desc, out, lse, _tile_counter(q.device), qd, kd, vd,
        out.stride(0), out.stride(1), out.stride(2), lse.stride(0), lse.stride(1),
        qd.stride(0), qd.stride(1), kd.stride(0), kd.stride(1), vd.stride(0), vd.stride(1),
        h, hk, s_q, s_k, n_m_blocks, batch_heads, per_chunk,
        scale * LOG2E,
        GROUP=h // hk, HEAD_DIM=d, BLOCK_N=cfg.block_n, STAGES=cfg.stages, CONSUMERS=cfg.consumers,
        CONSUMER_REGS=cfg.consumer_regs, CAUSAL=bool(causal), MAX_OFFSET=float(max_offset),
        PINGPONG=cfg.pingpong, RESCALE_UNDER_MMA=cfg.rescale_under_mma, PERMUTE_KEYS=keyed or natural,
        PACK_P=cfg.pack_p, PV_FLUSH=cfg.pv_flush, PV_HALVES=cfg.pv_halves, PERSISTENT=cfg.persistent,
        DYNAMIC=cfg.dynamic, TRANSPOSE_V=cfg.transpose_v, TRANSPOSER_WARPS=cfg.transposer_warps,
        TRANSPOSER_REGS=TRANSPOSER_REGS,
        num_warps=4,
        maxnreg=cfg.maxnreg,
    )
    return out, lse



def compile_ws_sm90(head_dim: int = 128, causal: bool = False, config: WsConfig | None = None,
                    permute_keys: bool = False):
    """Compile the kernel for sm_90 without a GPU (triton's bundled ptxas) and return triton's
    compiled kernel: `.asm["ptx"]`, `.asm["cubin"]`, `.metadata.shared` (bytes of shared memory).
    permute_keys: the build `fp8_attention_ws` runs for a `key_ordered_vt` V.

    For reading what the compiler made of the schedule (setmaxnreg, wgmma waits, mbarriers) on
    a laptop; the grid shapes' integer arguments are specialised as on the H200.
    """
    if not HAVE_GLUON:
        raise RuntimeError(f"compile_ws_sm90 needs Gluon (triton >= 3.5); this triton is {triton.__version__}")
    cfg = config or default_ws_config(head_dim, causal, permute_keys)
    if _four_transposer_warps_unbuildable(cfg, head_dim):
        raise ValueError(f"config {cfg.label()}: four transposer warps do not build at head_dim {head_dim}; use "
                         "transposer_warps=2")
    fp8 = gl.float8e4nv
    shapes = {"q_desc": [64, head_dim], "k_desc": [cfg.block_n, head_dim], "vt_desc": [head_dim, cfg.block_n]}
    descs = {name: f"tensordesc<fp8e4nv[{shp[0]}, {shp[1]}],{gl.NVMMASharedLayout.get_default_for(shp, fp8)!r}>"
             for name, shp in shapes.items()}
    if cfg.transpose_v:
        v_smem = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=3)
        descs["vt_desc"] = f"tensordesc<fp8e4nv[1, {cfg.block_n}, 16],{v_smem!r}>"
    types = dict(descs, O="*bf16", LSE="*fp32", COUNTER="*i32", Q_DESCALE="*fp32", K_DESCALE="*fp32", V_DESCALE="*fp32",
                 softmax_scale_log2="fp32")
    const = dict(GROUP=1, HEAD_DIM=head_dim, BLOCK_N=cfg.block_n, STAGES=cfg.stages, CONSUMERS=cfg.consumers,
                 CONSUMER_REGS=cfg.consumer_regs, CAUSAL=causal, MAX_OFFSET=FA3_MAX_OFFSET, PINGPONG=cfg.pingpong,
                 RESCALE_UNDER_MMA=cfg.rescale_under_mma, PERMUTE_KEYS=permute_keys, PACK_P=cfg.pack_p,
                 PV_FLUSH=cfg.pv_flush, PV_HALVES=cfg.pv_halves, PERSISTENT=cfg.persistent, DYNAMIC=cfg.dynamic,
                 TRANSPOSE_V=cfg.transpose_v, TRANSPOSER_WARPS=cfg.transposer_warps, TRANSPOSER_REGS=TRANSPOSER_REGS)
    if cfg.transpose_v:
        const["PERMUTE_KEYS"] = True
    return compile_sm90(_fp8_attention_ws_fwd, types, const, num_warps=4, maxnreg=cfg.maxnreg)
