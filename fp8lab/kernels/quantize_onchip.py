"""Per-head / per-tensor dynamic quantization that reads x once: each slice held on chip (Gluon).

`fp8lab.kernels.quantize` explains why these granularities need two reads of every value: the
scale of a (sequence, kv head) depends on all its values, and no program sees them all. This
kernel makes the whole GPU see a slice at once. Its programs are persistent (CTAS_PER_SM per
SM); each works through *parts* (``part_rows`` tokens of one slice's heads, 32 KiB), dealt
round-robin in slice order (per head, the programs are a multiple of a slice's parts where that
idles at most 1/16 of them, so that each round of parts covers whole slices), and holds
``buffers`` of them in shared memory, where TMA put them:

1. TMA copies part k + buffers - 1 into the buffer part k - 1 has left (loads run ahead).
2. The amax of part k + lead, read from shared memory, goes into a table: one int64 per part,
   ``tag << 32 | amax bits`` (tag and value in one word, so no fence orders them; the tag is the
   launch's, so the table, kept per stream, is never cleared: v15). Published a part ahead of
   its cast, a slice's entries are usually all there when its parts are cast. bf16 is read as
   int32 words of two values and reduced two at a time (``max.xorsign.abs.bf16x2``).
3. Part k waits until every part of its slice has an entry (per tensor: every part of x).
4. descale = amax / 448; part k is cast from shared memory, two values per cvt, and stored. HBM
   saw x once.

Per head from WS_FROM_BYTES (64 MiB) of x, the same steps run warp-specialized (v15, one program
per SM with 6 buffers): a loader warp issues the TMA copies, an amax warp publishes each part as
it lands (up to 5 parts ahead of its cast), a waiter warp watches the table and hands each part's
descale to WS_WARPS (4) cast warps, which only cast and store; mbarriers link them per buffer, and
the cast warps meet no CTA-wide barrier.

A slice may have at most (lead + 1) x programs parts, so that the parts a program waits for are
held by programs with nothing unpublished before them: no deadlock, as long as every program is
resident. The launch makes that so on an idle GPU (one program per buffer set, registers capped
by ``maxnreg``), but CUDA does not promise it: after ``spins`` table reads a program computes its
slice's amax from x itself, which gives the same bits (tests force it; a config that did not fit
took this path in v13's exploration and ran about 470x slower, bit for bit right).

Same numerics as the Triton kernels, bit for bit (every GPU test, and 24 of 24 bench checks
against two passes): the amax skips NaN (maxnum), descale = amax / 448 correctly rounded (1 for a
zero amax), x / descale by Markstein's two-FMA correction of x * (1 / descale), saturation to
+-448 with NaN kept (sm_90's ``cvt.rn.satfinite``, which the Triton kernels' clamp reproduces),
round to nearest even.

Measured on the H200 (docs/kernel-notes.md v13-v15, `results/h200/bench_v15_quant.*`; CUDA-graph
replays against a copy of the same bf16 tensor in the same run, 4.17 TB/s at 128 MiB, which the
issue's 4.3 TB/s exceeds by 3 %; v14's recorded run in brackets): per head 0.79 of
copy at 128 MiB (0.77; two passes 0.51), 0.78 at 32 MiB (0.73; two passes 0.59), 0.49 at 16 MiB
(0.50); with 4 query heads per kv head 0.65-0.67 at 128 MiB (v14's kernel in the same run 0.59; two
passes 0.47). Nsight Compute counts 134 MB of HBM reads for 134 MB of x (v13). The 85 % target is
not reached: at 128 MiB v14's kernel with no waiting for other programs at all stops at 0.77-0.80,
and the warp-specialized form, whose cast warps only cast, at 0.78-0.81 (v15). Per tensor, x must
fit on chip whole (up to ~25 MiB); there it beats two passes (0.50 against 0.39 at 16 MiB, v15).
v16 split the 60 us at 128 MiB with copies of the kernel missing one step: loads, table waits and
hand-overs 40, casts 5, writes of y 15.5 (per-token quantization moves the same bytes in 49); and
reading a slice of 129-256 parts' table entries in one read, not 128 at a time, gained 3-4 points.
v17 found where the rest of the 85 % goes: on the same bytes laid out so that each slice is
contiguous memory (viewed as 32 sequences x 1 head) the same kernel, plan and waits reach 0.86; a
part of token-major x is 256 bytes of every row (0.82 with rows 2 KiB apart, 0.79 with x's 8 KiB).
TMA stores of y and cache hints did not help. `quantize_fp8` gives head-major x (stored as
(b, h, s, d)) this kernel as such contiguous slices: 0.85-0.86 of copy at 128 MiB through the call.
With 4 or more query heads per part (GROUP_FROM), below WS_FROM_BYTES, one program of 8 warps per
SM with 64 KiB parts: +4-7 points (0.66-0.71 of copy at 32 MiB, 0.44-0.46 at 16 MiB with 4 query
heads per kv head).
v18 split the same 128 MiB of token-major x (16k tokens x 32 x 128) into b = 1, 2, 4, 8, 16
sequences (`results/h200/bench_v18_quant_shapes.*`): per head 0.78-0.80, 0.81-0.82, 0.85, 0.86,
0.85-0.86 of copy, and 0.85-0.90 head-major at every split. v22 profiled 1, 2 and 4 sequences
(Nsight Compute, `results/h200/run18/call3`, `explain.v22_quant_profile`): x is read from DRAM
once and the DRAM is busy for the same cycles in each; the table is polled as often per part; one
sequence waits longer for its parts to land (3.0 try-waits per wait against 1.9). Asking L2 for
parts beyond the buffers, other part sizes and 8 cast warps did not help (v22).
`quantize_fp8(schedule="auto")` uses this kernel wherever it can run on an x of 4 MiB or more
(faster at every size measured, v14).

Boxes of a part are whole multiples of 128 bytes: TMA writes shared memory at 128-byte aligned
addresses, and a 64-byte box (per tensor, one token of 32 bf16 values) crashed v13's last GPU run
with a misaligned address; the tiny-shape test that found it passes since (v14).

It needs what TMA needs: an sm_90 GPU, x readable as rows of (heads x head_dim) with 16-byte
aligned rows, a power-of-two head_dim of at most 256, and slices (per tensor: all of x) that the
SMs' shared memory can hold: (lead + 1) x 2 x 132 parts of 32 KiB, 16.5 MiB per slice on an H200
(at 16k tokens and head_dim 128, up to 4 query heads per kv head); warp-specialized 6 x 132
parts, 24.75 MiB. `onchip_plan` says which of these a tensor misses.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
import triton

from fp8lab.env import triton_interpret
from fp8lab.kernels._gluon import HAVE_GLUON, compile_sm90, sm_count
from fp8lab.kernels.fp8_rounding import TINY_DESCALE

if HAVE_GLUON:
    from fp8lab.kernels._gluon import (
        TensorDescriptor,
        fence_async_shared,
        gl,
        gluon,
        mbarrier,
        smem_reinterpret,
    )
    from fp8lab.kernels._gluon import thread_barrier as _thread_barrier
    from fp8lab.kernels._gluon import tma_load as _tma_load

    _NAN_ALL = gl.constexpr(triton.language.PropagateNan.ALL)  # Gluon does not re-export the enum

__all__ = ["OnchipPlan", "compile_onchip_sm90", "onchip_plan", "quantize_onchip"]

# Per head: bytes of x per part, shared-memory buffers per program, how many parts ahead of its cast
# a part's amax is published (< BUFFERS), warps, and table reads before a program computes its slice's
# amax itself. Per tensor: one buffer of up to SMEM_BYTES per program.
PART_BYTES = 32 << 10
BUFFERS = 3
LEAD = 1
WARPS = 4
CTAS_PER_SM = 2  # programs resident per SM (per head), each with BUFFERS parts
VEC = 8  # values of a row per thread and shared-memory load
PAIRS = True  # bf16: two values per instruction where Triton would widen each (v14)
ALIGN = True  # per head: programs in a multiple of a slice's parts where that idles at most 1/16 of them (v14)
# per head from WS_FROM_BYTES of x: WS_WARPS cast warps fed by three one-warp partitions (TMA loads, amaxes,
# table waits), WS_CTAS_PER_SM programs per SM with WS_BUFFERS parts each (v15: 0.65 of copy against 0.54 at
# 128 MiB with 4 query heads per kv head, 0.78 against 0.77 without; slower below 64 MiB; v22: 8 cast warps
# -1 to +3 points at 128 MiB without GQA, -2.4 to +0.9 at 64 MiB, 5-8 slower with 4 query heads per kv head)
WS = True
WS_FROM_BYTES = 64 << 20
WS_CTAS_PER_SM = 1
WS_BUFFERS = 6
WS_WARPS = 4
WS_WORKER_REGS = 128  # registers per thread of each one-warp partition (setmaxnreg; 80 spilled a few)
# per head below WS_FROM_BYTES, parts of GROUP_FROM or more query heads (GQA): GROUP_PART_BYTES parts, GROUP_WARPS
# warps and one program per SM (v17: 4 query heads per kv head +4-7 points from 8 to 32 MiB, 0.66-0.71 of copy
# at 32 MiB against 0.61-0.64; 2 query heads no better; one, 0.74 against 0.82 at 32 MiB)
GROUP_FROM = 4
GROUP_PART_BYTES = 64 << 10
GROUP_WARPS = 8
TENSOR_WARPS = 8  # per tensor (one program per SM): at 16 MiB 0.36-0.38 of copy with 8, 0.24 with 4 (v13); 0.49 (v14)
SPINS = 4000
# WS: a slice of 129 to WAIT_CHUNK (a power of two) parts is read from the table in one read by the waiter warp,
# others 128 entries at a time (v15's; v16: 0.77-0.79 of copy against 0.74-0.76 for slices of 256 parts, slower for 512)
WAIT_CHUNK = 256
# the bench's measure of what waiting for a slice's amax costs, never set otherwise: 2 waits (right bits);
# 1 reads the table once and casts with whatever is there; 0 reads no table (descale 1); wrong bits
_WAIT = 2
_FRESH_TABLE = False  # the bench's: a new zeroed table per call, as v14 made (the same bits, one kernel more;
# v15's recorded run zeroed the counter in a second kernel, run12/call8 in the same one)
SMEM_BYTES = 192 << 10  # of the H100/H200's 227 KB per block, leaving room for the reductions' scratch
SCRATCH_BYTES = 2 << 10  # shared memory per program besides its buffers (barriers, reductions)
SM90_SMEM_PER_SM = 228 << 10
SM90_SMS = 132  # the H100/H200 SXM's SM count (used when compiling without a GPU)


@dataclass(frozen=True)
class OnchipPlan:
    """How `quantize_onchip` splits x. A part: `part_rows` tokens x `group` heads x head_dim,
    as `row_boxes` TMA boxes of `box_rows` tokens per head. `parts` per slice (per tensor: one
    slice of every part), `items` parts in all, `grid` programs of `buffers` parts each."""

    box_rows: int
    row_boxes: int
    group: int
    head_dim: int
    parts: int
    items: int
    grid: int
    buffers: int
    lead: int
    warps: int
    vec: int
    maxnreg: int
    pairs: bool = False  # bf16 x read as int32 words of two values, y written two e4m3 at a time
    ws: bool = False  # warp-specialized (v15): `warps` cast warps and three one-warp partitions

    @property
    def part_rows(self) -> int:
        return self.box_rows * self.row_boxes

    @property
    def sub_rows(self) -> int:
        """Rows of a part read into registers at a time (by `warps` warps): 16 values per thread."""
        return _sub_rows(self.box_rows, self.head_dim, self.warps)

    @property
    def sub_rows_one(self) -> int:
        """The same for one warp (`ws`: the amax and waiter partitions)."""
        return _sub_rows(self.box_rows, self.head_dim, 1)

    def smem_bytes(self, element_size: int) -> int:
        return self.buffers * self.part_rows * self.group * self.head_dim * element_size


def _sub_rows(box_rows: int, head_dim: int, warps: int) -> int:
    return max(1, min(box_rows, 16 * 32 * warps // head_dim))


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def onchip_plan(x: torch.Tensor, batch: int, seqlen: int, heads: int, head_dim: int, heads_kv: int,
                per_tensor: bool, varlen: bool, sms: int | None = None) -> OnchipPlan | str:
    """The launch for x (batched (b, s, h, d) or varlen (total, h, d), `seqlen` its longest
    sequence), or a sentence saying why x cannot be quantized on chip. sms: SMs to plan for
    (default: x's device's)."""
    if not HAVE_GLUON:
        return f"it needs Gluon (triton >= 3.5); this triton is {triton.__version__}"
    if sms is None:
        if triton_interpret():
            return "Gluon does not run under TRITON_INTERPRET=1"
        if x.device.type != "cuda" or torch.cuda.get_device_capability(x.device) != (9, 0):
            got = torch.cuda.get_device_capability(x.device) if x.device.type == "cuda" else x.device.type
            return f"it needs an sm_90 (Hopper) GPU, got {got}"
        sms = sm_count(x.device)
    es = x.element_size()
    if head_dim & (head_dim - 1) or not 16 <= head_dim <= 256:
        return f"head_dim must be a power of two in 16..256 (a TMA box row), got {head_dim}"
    row_stride = x.stride(-3)
    rows_uniform = varlen or batch == 1 or x.stride(0) == seqlen * row_stride
    if x.stride(-1) != 1 or x.stride(-2) != head_dim or not rows_uniform:
        return f"x must be rows of (heads x head_dim), got strides {tuple(x.stride())}"
    if (row_stride * es) % 16 or x.data_ptr() % 16:
        return f"TMA needs 16-byte aligned rows, got a row of {row_stride * es} bytes at {x.data_ptr() % 16} mod 16"
    group = heads // heads_kv
    row_bytes = group * head_dim * es
    slices = batch * heads_kv
    longest = max(seqlen, 1)
    ws = WS and not per_tensor and x.numel() * es >= WS_FROM_BYTES
    wide = not per_tensor and not ws and group >= GROUP_FROM  # GQA parts: GROUP_* (v17)
    ctas = 1 if per_tensor or wide else WS_CTAS_PER_SM if ws else CTAS_PER_SM
    sms *= ctas
    if per_tensor:  # one round: all of x on chip at once, in parts spread over as many SMs as there are
        if slices > sms:
            return f"x has {slices} (sequence, kv head) slices, more than the {sms} SMs"
        buffers, budget = 1, SMEM_BYTES
        part_rows = triton.cdiv(longest, sms // slices)
    else:
        buffers, budget = WS_BUFFERS if ws else BUFFERS, GROUP_PART_BYTES if wide else PART_BYTES
        part_rows = budget // row_bytes
    if row_bytes > budget:
        return f"one token's {group} heads ({row_bytes} bytes) exceed a part ({budget} bytes)"
    box_rows = min(256, triton.next_power_of_2(part_rows) if per_tensor else _pow2_floor(part_rows),
                   triton.next_power_of_2(longest))  # a TMA box has at most 256 rows
    box_rows = max(box_rows, 128 // (head_dim * es))  # each box lands 128-byte aligned in shared memory
    row_boxes = min(triton.cdiv(part_rows, box_rows) if per_tensor else max(1, part_rows // box_rows),
                    triton.cdiv(longest, box_rows))
    part_rows = box_rows * row_boxes
    parts = triton.cdiv(longest, part_rows)
    # how many parts ahead of its cast a program's amaxes can be published (WS: every loaded buffer)
    lead = 0 if per_tensor else buffers - 1 if ws else min(LEAD, buffers - 1)
    held = sms * (lead + 1)  # parts of one wait set the programs can hold (module doc)
    need = slices * parts if per_tensor else parts
    if part_rows * row_bytes > budget or need > held:
        what, size = ("x", longest * row_bytes * slices) if per_tensor else ("a (sequence, kv head) slice",
                                                                             longest * row_bytes)
        return (f"{what} ({size >> 10} KiB) does not fit in the SMs' shared memory: {sms} programs hold "
                f"{held} parts of at most {budget >> 10} KiB at once")
    if ctas * (buffers * part_rows * row_bytes + SCRATCH_BYTES) > SM90_SMEM_PER_SM:
        return (f"{ctas} programs per SM with {buffers} parts of {part_rows * row_bytes >> 10} KiB exceed an SM's "
                f"{SM90_SMEM_PER_SM >> 10} KiB of shared memory")
    items = slices * parts
    warps = TENSOR_WARPS if per_tensor else GROUP_WARPS if wide else WS_WARPS if ws else WARPS
    grid = min(items, sms)
    if ALIGN and not per_tensor and grid // parts * parts * 16 >= grid * 15:
        grid = grid // parts * parts  # each round of parts then covers whole slices: fewer programs wait across rounds
    pairs = PAIRS and x.dtype == torch.bfloat16
    # WS: three one-warp partitions besides the cast warps, launched as whole warpgroups (setmaxnreg)
    threads = 128 * triton.cdiv(warps + 3, 4) if ws else 32 * warps
    return OnchipPlan(box_rows=box_rows, row_boxes=row_boxes, group=group, head_dim=head_dim, parts=parts,
                      items=items, grid=grid, buffers=buffers, lead=lead, warps=warps,
                      vec=min(VEC, head_dim), maxnreg=min(255, 65536 // (ctas * threads)) // 8 * 8,
                      pairs=pairs, ws=ws)


if HAVE_GLUON:

    @gluon.jit
    def _sequence(CU, b, seqlen, VARLEN: gl.constexpr):
        """(first row, tokens) of sequence b."""
        if VARLEN:
            start = gl.load(CU + b)
            n = gl.load(CU + b + 1) - start
        else:
            start = b * seqlen
            n = seqlen
        return start, n

    @gluon.jit
    def _slice_part(s, p, geo, PART_ROWS: gl.constexpr, VARLEN: gl.constexpr):
        """Part p of slice s -> (sequence b, kv head g, first row of the part in x's rows, rows of the
        sequence left from there; <= 0: the part is past the sequence)."""
        _, n_kv, _, CU, seqlen = geo
        b = s // n_kv
        g = s - b * n_kv
        start, n = _sequence(CU, b, seqlen, VARLEN)
        return b, g, start + p * PART_ROWS, n - p * PART_ROWS

    @gluon.jit
    def _part(item, geo, PART_ROWS: gl.constexpr, VARLEN: gl.constexpr):
        """Work item -> (b, g, slice s, part p, first row, rows left); item = s * parts + p is also the
        part's TABLE index."""
        parts, _, _, _, _ = geo
        s = item // parts
        p = item - s * parts
        b, g, row0, left = _slice_part(s, p, geo, PART_ROWS, VARLEN)
        return b, g, s, p, row0, left

    @gluon.jit
    def _issue(x_desc, bufs, bar, buf, item, geo, BOX_ROWS: gl.constexpr, ROW_BOXES: gl.constexpr,
               G: gl.constexpr, D: gl.constexpr, VARLEN: gl.constexpr):
        """TMA copies of part `item` into buffer `buf` (boxes of BOX_ROWS tokens x one head); an empty
        part (past its sequence) just completes the buffer's barrier phase."""
        _, g, _, _, row0, left = _part(item, geo, BOX_ROWS * ROW_BOXES, VARLEN)
        if left > 0:
            mbarrier.expect(bar, ROW_BOXES * G * x_desc.block_type.nbytes)
            for rb in gl.static_range(ROW_BOXES):
                for j in gl.static_range(G):
                    _tma_load(x_desc, [row0 + rb * BOX_ROWS, (g * G + j) * D], bar,
                              bufs.index((buf * ROW_BOXES + rb) * G + j))
        else:
            mbarrier.arrive(bar, count=1)

    @gluon.jit
    def _abs_max(v, keep):
        """max |v| over `keep` as float32, NaN left out (0 when nothing is left): the Triton kernels' amax."""
        a = gl.abs(v.to(gl.float32))
        a = gl.where(keep & (a == a), a, 0.0)
        return gl.max(gl.max(a, 1), 0)

    @gluon.jit
    def _words(bufs, W: gl.constexpr):
        """The buffers' bf16 values as int32 words of two (row-major either way: the boxes are not swizzled)."""
        n: gl.constexpr = bufs.shape[0]
        rows: gl.constexpr = bufs.shape[1]
        d: gl.constexpr = bufs.shape[2]
        return smem_reinterpret(bufs, gl.int32, [n, rows, d // 2], W)

    @gluon.jit
    def _halves(w):
        """int32 words of two bf16 values -> (first, second) as float32: a shift and a mask, exact."""
        return (w << 16).to(gl.float32, bitcast=True), (w & -65536).to(gl.float32, bitcast=True)

    @gluon.jit
    def _divisor(d):
        """(d, d_res, rcp, nrcp) for `_divide`: rcp = RN(1 / d), and d_res = 0 for an infinite d."""
        rcp = gl.div_rn(1.0, d)
        return d, gl.where(d == float("inf"), 0.0, d), rcp, rcp * -1.0

    @gluon.jit
    def _divide(v, dv, TINY: gl.constexpr):
        """RN(v / d) by Markstein's correction of v * rcp (dv: `_divisor`'s values), as
        `fp8lab.kernels.quantize`'s _divide, which says why -0 and inf come out right. TINY (d
        below TINY_DESCALE, where the residual may underflow): IEEE division, as there."""
        d, d_res, rcp, nrcp = dv
        if TINY:
            return gl.div_rn(v, d)
        q = v * rcp
        return gl.fma(gl.fma(q, d_res, v * -1.0), nrcp, q)  # x * -1.0 is a true negation; Triton's -x is 0 - x

    @gluon.jit
    def _part_amax(bufs, buf, left, layout: gl.constexpr, BOX_ROWS: gl.constexpr, ROW_BOXES: gl.constexpr,
                   G: gl.constexpr, D: gl.constexpr, SUB: gl.constexpr, MASKED: gl.constexpr,
                   PAIRS: gl.constexpr, W: gl.constexpr):
        """amax of the part in buffer `buf` (its first `left` rows when MASKED): an elementwise running
        max of |x| in x's dtype (exact), then one reduction; NaN left out (maxnum), an all-NaN part
        gives 0, as `_abs_max`. PAIRS: bf16 read as int32 words, two values per sm_86
        max.xorsign.abs (max(|a|, |b|), the sign dropped at the end); Triton widens each value first."""
        rows = gl.arange(0, SUB, layout=gl.SliceLayout(1, layout))
        if PAIRS:
            src = _words(bufs, W)
            acc = gl.zeros([SUB, D // 2], gl.int32, layout)
        else:
            src = bufs
            acc = gl.zeros([SUB, D], bufs.dtype, layout)
        for rb in gl.static_range(ROW_BOXES):
            for j in gl.static_range(G):
                box = src.index((buf * ROW_BOXES + rb) * G + j)
                for r in gl.static_range(0, BOX_ROWS, SUB):
                    v = box.slice(r, SUB).load(layout)
                    if MASKED:
                        v = gl.where(gl.expand_dims(rb * BOX_ROWS + r + rows < left, 1), v, 0)
                    if PAIRS:
                        acc = gl.inline_asm_elementwise("max.xorsign.abs.bf16x2 $0, $1, $2;", "=r,r,r", [acc, v],
                                                        dtype=gl.int32, is_pure=True, pack=1)
                    else:
                        acc = gl.maximum(acc, gl.abs(v))
        if PAIRS:
            lo, hi = _halves(acc)
            a = gl.maximum(gl.abs(lo), gl.abs(hi))
        else:
            a = gl.abs(acc).to(gl.float32)
        return gl.max(gl.max(a, 1), 0)

    @gluon.jit
    def _cast_part(bufs, buf, Y, stride_yr, g, left, d, layout: gl.constexpr, BOX_ROWS: gl.constexpr,
                   ROW_BOXES: gl.constexpr, G: gl.constexpr, D: gl.constexpr, SUB: gl.constexpr,
                   PAIRS: gl.constexpr, W: gl.constexpr, EXACT: gl.constexpr):
        """y = e4m3(x / d) for the part in buffer `buf`; Y: the part's first row (PAIRS: int16, two
        e4m3 per store element; stride_yr in Y's elements). sm_90's cvt.rn.satfinite saturates to
        +-448 and keeps NaN: the Triton kernels' clamp. EXACT: d below TINY_DESCALE (`_divide`)."""
        dv = _divisor(d)
        rows = gl.arange(0, SUB, layout=gl.SliceLayout(1, layout))
        if PAIRS:
            src = _words(bufs, W)
            width: gl.constexpr = D // 2
        else:
            src = bufs
            width: gl.constexpr = D
        cols = gl.arange(0, width, layout=gl.SliceLayout(0, layout))
        for rb in gl.static_range(ROW_BOXES):
            for j in gl.static_range(G):
                box = src.index((buf * ROW_BOXES + rb) * G + j)
                for r in gl.static_range(0, BOX_ROWS, SUB):
                    row = rb * BOX_ROWS + r + rows
                    v = box.slice(r, SUB).load(layout)
                    if PAIRS:
                        lo, hi = _halves(v)
                        q = gl.inline_asm_elementwise(
                            "cvt.rn.satfinite.e4m3x2.f32 $0, $2, $1;", "=h,r,r",
                            [_divide(lo, dv, EXACT), _divide(hi, dv, EXACT)],
                            dtype=gl.int16, is_pure=True, pack=1)
                    else:
                        q = _divide(v.to(gl.float32), dv, EXACT).to(gl.float8e4nv)
                    offs = gl.expand_dims(row * stride_yr, 1) + gl.expand_dims(cols, 0) + (g * G + j) * width
                    gl.store(Y + offs, q, mask=gl.expand_dims(row < left, 1))

    @gluon.jit
    def _cast(bufs, buf, Y, stride_yr, g, left, d, layout: gl.constexpr, BOX_ROWS: gl.constexpr,
              ROW_BOXES: gl.constexpr, G: gl.constexpr, D: gl.constexpr, SUB: gl.constexpr, PAIRS: gl.constexpr,
              W: gl.constexpr):
        """`_cast_part`, exact for descales below TINY_DESCALE (fp8_rounding says why): a uniform
        branch per part, code rather than time."""
        if d < TINY_DESCALE:
            _cast_part(bufs, buf, Y, stride_yr, g, left, d, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, PAIRS, W, True)
        else:
            _cast_part(bufs, buf, Y, stride_yr, g, left, d, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, PAIRS, W, False)

    @gluon.jit
    def _publish(bufs, bars, tab, k, pid, grid, geo, layout: gl.constexpr, BOX_ROWS: gl.constexpr,
                 ROW_BOXES: gl.constexpr, G: gl.constexpr, D: gl.constexpr, BUFFERS: gl.constexpr,
                 SUB: gl.constexpr, VARLEN: gl.constexpr, PAIRS: gl.constexpr, W: gl.constexpr):
        """Wait for this program's k-th part to land, and write its entry in the table (tab: the
        table and this launch's tag, `_launch_tag`)."""
        TABLE, tag = tab
        buf = k % BUFFERS
        item = pid + k * grid
        _, _, _, _, _, left = _part(item, geo, BOX_ROWS * ROW_BOXES, VARLEN)
        mbarrier.wait(bars.index(buf), (k // BUFFERS) & 1)
        if left >= BOX_ROWS * ROW_BOXES:
            a = _part_amax(bufs, buf, left, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, False, PAIRS, W)
        else:
            a = _part_amax(bufs, buf, left, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, True, PAIRS, W)
        gl.store(TABLE + item, (tag << 32) | a.to(gl.int32, bitcast=True).to(gl.int64))

    @gluon.jit
    def _table_load(tab, first, n, CHUNK: gl.constexpr, NUM_WARPS: gl.constexpr):
        """The first CHUNK entries of the table's [first, first + n), read past L1, as amax bits, or
        1 << 40 for an entry this launch has not set (another tag; the table is not cleared between
        launches); CHUNK / (32 x NUM_WARPS) entries per thread."""
        TABLE, tag = tab
        offs = gl.arange(0, CHUNK, layout=gl.BlockedLayout([CHUNK // (32 * NUM_WARPS)], [32], [NUM_WARPS], [0]))
        e = gl.load(TABLE + first + offs, mask=offs < n, other=0, volatile=True)
        return gl.where(offs < n, gl.where((e >> 32) == tag, e & 0xFFFFFFFF, 1 << 40), 0)

    @gluon.jit
    def _table_amax(e, tab, first, n, CHUNK: gl.constexpr, NUM_WARPS: gl.constexpr):
        """(every entry of the table's [first, first + n) is set, the max of their amaxes); e: the
        first CHUNK entries, as `_table_load` read them. One reduction: an unset entry counts as
        1 << 40, above every amax's bits (which order as the amaxes do)."""
        top = e
        for c in range(CHUNK, n, CHUNK):
            top = gl.maximum(top, _table_load(tab, first + c, n - c, CHUNK, NUM_WARPS))
        top = gl.max(top, 0)
        return top < (1 << 40), top.to(gl.int32).to(gl.float32, bitcast=True)

    @gluon.jit
    def _launch_tag(TICKET, pid, grid):
        """This launch's tag for its table entries, from a counter every launch on the stream raises
        by exactly 2^16 (program 0 by 2^16 - grid + 1, the others by 1; grid < 2^16), so every program
        of a launch reads a value in the same [k 2^16, (k + 1) 2^16) whatever their order: tag k + 1,
        never 0 (a new table's zeros). Entries of earlier launches carry other tags, so the table is
        never cleared: no kernel before this one, and safe under CUDA graphs (each replay raises the
        counter again). One atomic per program, its latency under the first TMA loads'."""
        inc = gl.where(pid == 0, 65536 - grid + 1, 1).to(gl.int64)
        old = gl.atomic_add(TICKET, inc)
        return ((old >> 16) & 0x7FFFFFFF) + 1

    @gluon.jit
    def _x_amax(X, stride_xr, s0, s1, geo, PART_ROWS: gl.constexpr, SUB: gl.constexpr, G: gl.constexpr,
                D: gl.constexpr, VARLEN: gl.constexpr, layout: gl.constexpr):
        """amax of slices s0 .. s1-1 read from x: the fallback of a program whose slice's other parts
        have not reported (the same value as the table's)."""
        parts, _, _, _, _ = geo
        rows = gl.arange(0, SUB, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
        m = gl.max(gl.zeros([SUB], gl.float32, gl.SliceLayout(1, layout)), 0)
        for s in range(s0, s1):
            for p in range(parts):
                _, g, row0, left = _slice_part(s, p, geo, PART_ROWS, VARLEN)
                for r in range(0, PART_ROWS, SUB):
                    keep = gl.expand_dims(r + rows < left, 1)
                    offs = gl.expand_dims((row0 + r + rows).to(gl.int64) * stride_xr, 1) + gl.expand_dims(cols, 0)
                    for j in gl.static_range(G):
                        v = gl.load(X + (g * G + j) * D + offs, mask=keep, other=0.0)
                        m = gl.maximum(m, _abs_max(v, keep))
        return m

    @gluon.jit
    def _slice_descale(e, tab, X, stride_xr, s0, s1, spins, geo, layout: gl.constexpr, PART_ROWS: gl.constexpr,
                       SUB: gl.constexpr, G: gl.constexpr, D: gl.constexpr, VARLEN: gl.constexpr,
                       CHUNK: gl.constexpr, NUM_WARPS: gl.constexpr, WAIT: gl.constexpr):
        """Descale of slices s0 .. s1-1 (amax / 448, correctly rounded; 1 for a zero amax) once the
        table has all their parts' entries (e: its first read, `_table_load`'s), rereading it up to
        `spins` times, then from x itself (`_x_amax`). WAIT < 2: the bench's `_WAIT`."""
        parts, _, _, _, _ = geo
        done, amax = _table_amax(e, tab, s0 * parts, (s1 - s0) * parts, CHUNK, NUM_WARPS)
        if WAIT == 0:
            done, amax = True, 448.0
        elif WAIT == 1:
            done = True
        tries = 0
        while (done == 0) & (tries < spins):
            e = _table_load(tab, s0 * parts, (s1 - s0) * parts, CHUNK, NUM_WARPS)
            done, amax = _table_amax(e, tab, s0 * parts, (s1 - s0) * parts, CHUNK, NUM_WARPS)
            tries += 1
        if done == 0:
            amax = _x_amax(X, stride_xr, s0, s1, geo, PART_ROWS, SUB, G, D, VARLEN, layout)
        return gl.where(amax > 0, gl.div_rn(amax, 448.0), 1.0)

    @gluon.jit
    def _onchip_kernel(x_desc, X, Y, DESCALE, TABLE, TICKET, CU, stride_xr, stride_yr, stride_db, stride_dh,
                       items, parts, n_kv, slices, seqlen, spins,
                       BOX_ROWS: gl.constexpr, ROW_BOXES: gl.constexpr, G: gl.constexpr, D: gl.constexpr,
                       BUFFERS: gl.constexpr, LEAD: gl.constexpr, SUB: gl.constexpr, VARLEN: gl.constexpr,
                       PER_TENSOR: gl.constexpr, NUM_WARPS: gl.constexpr, VEC: gl.constexpr, PAIRS: gl.constexpr,
                       WAIT: gl.constexpr):
        """Program i quantizes its parts i, i + grid, ... (k-th: item i + k * grid) in BUFFERS
        shared-memory buffers: TMA loads run BUFFERS parts ahead of the casts, TABLE entries LEAD
        parts ahead (so a slice's entries are usually all there when its parts are cast). Cast k:
        wait for its slice's (per tensor: every) entry, descale = amax / 448, y = e4m3(x / descale)
        from shared memory; the first part of a slice also stores its descale (DESCALE (batch, kv
        heads); (1, 1) per tensor). PAIRS: x is bf16, read from shared memory as int32 words of two
        values, and Y is int16, two e4m3 per element. WAIT < 2 only measures what waiting costs (`_WAIT`)."""
        PART_ROWS: gl.constexpr = BOX_ROWS * ROW_BOXES
        CHUNK: gl.constexpr = 32 * NUM_WARPS
        layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 * VEC // D, D // VEC], [NUM_WARPS, 1], [1, 0])
        # what the buffers are read as: VEC values of a row per thread, as VEC / 2 words with PAIRS
        data: gl.constexpr = gl.BlockedLayout([1, VEC // 2 if PAIRS else VEC], [32 * VEC // D, D // VEC],
                                              [NUM_WARPS, 1], [1, 0])
        W: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])  # rank 2 over the buffers, as x_desc.layout
        pid = gl.program_id(0)
        grid = gl.num_programs(0)
        geo = (parts, n_kv, slices, CU, seqlen)
        bufs = gl.allocate_shared_memory(x_desc.dtype, [BUFFERS * ROW_BOXES * G, BOX_ROWS, D], x_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [BUFFERS, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(BUFFERS):
            mbarrier.init(bars.index(i), count=1)
        fence_async_shared()

        mine = (items - pid + grid - 1) // grid
        for k in gl.static_range(BUFFERS):
            if k < mine:
                _issue(x_desc, bufs, bars.index(k), k, pid + k * grid, geo, BOX_ROWS, ROW_BOXES, G, D, VARLEN)
        tab = (TABLE, _launch_tag(TICKET, pid, grid))
        for k in gl.static_range(LEAD):
            if k < mine:
                _publish(bufs, bars, tab, k, pid, grid, geo, data, BOX_ROWS, ROW_BOXES, G, D, BUFFERS,
                         SUB, VARLEN, PAIRS, W)
        for k in range(mine):
            buf = k % BUFFERS
            b, g, s, p, row0, left = _part(pid + k * grid, geo, PART_ROWS, VARLEN)
            if PER_TENSOR:
                s0, s1 = 0, slices
            else:
                s0, s1 = s, s + 1
            if LEAD == 0:
                _publish(bufs, bars, tab, k, pid, grid, geo, data, BOX_ROWS, ROW_BOXES, G, D, BUFFERS,
                         SUB, VARLEN, PAIRS, W)
                e = _table_load(tab, s0 * parts, (s1 - s0) * parts, CHUNK, NUM_WARPS)
            else:  # the table's round trip runs under the next part's amax
                e = _table_load(tab, s0 * parts, (s1 - s0) * parts, CHUNK, NUM_WARPS)
                if k + LEAD < mine:
                    _publish(bufs, bars, tab, k + LEAD, pid, grid, geo, data, BOX_ROWS, ROW_BOXES, G, D,
                             BUFFERS, SUB, VARLEN, PAIRS, W)
            d = _slice_descale(e, tab, X, stride_xr, s0, s1, spins, geo, layout, PART_ROWS, SUB, G, D, VARLEN,
                               CHUNK, NUM_WARPS, WAIT)
            y_part = Y + row0.to(gl.int64) * stride_yr  # offsets within a part fit in int32
            _cast(bufs, buf, y_part, stride_yr, g, left, d, data, BOX_ROWS, ROW_BOXES, G, D, SUB, PAIRS, W)
            if PER_TENSOR:
                if (s == 0) & (p == 0):
                    gl.store(DESCALE, d)
            else:
                if p == 0:
                    gl.store(DESCALE + b * stride_db + g * stride_dh, d)
            _thread_barrier()  # every warp is done with buffer `buf` before TMA refills it
            if k + BUFFERS < mine:
                _issue(x_desc, bufs, bars.index(buf), buf, pid + (k + BUFFERS) * grid, geo, BOX_ROWS, ROW_BOXES,
                       G, D, VARLEN)

    @gluon.jit
    def _ws_loader(x_desc, bufs, full, empty, pid, grid, mine, geo, BOX_ROWS: gl.constexpr, ROW_BOXES: gl.constexpr,
                   G: gl.constexpr, D: gl.constexpr, BUFFERS: gl.constexpr, VARLEN: gl.constexpr):
        """One warp: part k into buffer k % BUFFERS by TMA, once the cast warps have left it."""
        for k in range(mine):
            buf = k % BUFFERS
            mbarrier.wait(empty.index(buf), ((k // BUFFERS) & 1) ^ 1)  # a fresh mbarrier counts as phase 1 done
            _issue(x_desc, bufs, full.index(buf), buf, pid + k * grid, geo, BOX_ROWS, ROW_BOXES, G, D, VARLEN)

    @gluon.jit
    def _ws_amax(bufs, full, TABLE, TICKET, tag_slot, tag_bar, pid, grid, mine, geo, layout: gl.constexpr,
                 BOX_ROWS: gl.constexpr, ROW_BOXES: gl.constexpr, G: gl.constexpr, D: gl.constexpr,
                 BUFFERS: gl.constexpr, SUB: gl.constexpr, VARLEN: gl.constexpr, PAIRS: gl.constexpr,
                 W: gl.constexpr):
        """One warp: takes the launch's tag (handing it to the waiter through `tag_slot`), then
        each part's amax into TABLE as soon as the part lands (up to BUFFERS parts ahead of its
        cast); one warp's reduction is shuffles only."""
        tag = _launch_tag(TICKET, pid, grid)
        tag_slot.store(gl.full([1], tag, gl.int64, layout=gl.BlockedLayout([1], [32], [1], [0])))
        mbarrier.arrive(tag_bar, count=1)
        tab = (TABLE, tag)
        for k in range(mine):
            _publish(bufs, full, tab, k, pid, grid, geo, layout, BOX_ROWS, ROW_BOXES, G, D, BUFFERS, SUB, VARLEN,
                     PAIRS, W)

    @gluon.jit
    def _ws_waiter(X, DESCALE, TABLE, tag_slot, tag_bar, full, ready, info, stride_xr, stride_db, stride_dh,
                   pid, grid, mine, spins, geo, x_layout: gl.constexpr, i_layout: gl.constexpr,
                   PART_ROWS: gl.constexpr, SUB: gl.constexpr, G: gl.constexpr, D: gl.constexpr,
                   BUFFERS: gl.constexpr, VARLEN: gl.constexpr, CHUNK: gl.constexpr):
        """One warp: takes the launch's tag from the amax warp; for part k, once it has landed (so
        its own entry is on the way), waits until its slice's TABLE entries are all set, stores the
        slice's descale (its first part), and hands the cast warps (descale bits, kv head, rows
        left, first row) in `info[k % BUFFERS]`. CHUNK: table entries read at once (v16: a slice of
        up to WAIT_CHUNK parts in one read; v15 read 128 at a time, one read after another)."""
        parts, _, _, _, _ = geo
        i = gl.arange(0, 4, layout=i_layout)
        mbarrier.wait(tag_bar, 0)
        tab = (TABLE, gl.sum(tag_slot.load(gl.BlockedLayout([1], [32], [1], [0])), 0))
        for k in range(mine):
            buf = k % BUFFERS
            b, g, s, p, row0, left = _part(pid + k * grid, geo, PART_ROWS, VARLEN)
            mbarrier.wait(full.index(buf), (k // BUFFERS) & 1)
            e = _table_load(tab, s * parts, parts, CHUNK, 1)
            d = _slice_descale(e, tab, X, stride_xr, s, s + 1, spins, geo, x_layout, PART_ROWS, SUB, G, D, VARLEN,
                               CHUNK, 1, 2)
            if p == 0:
                gl.store(DESCALE + b * stride_db + g * stride_dh, d)
            fields = gl.where(i == 0, d.to(gl.int32, bitcast=True), gl.where(i == 1, g, gl.where(i == 2, left, row0)))
            info.index(buf).store(fields)
            mbarrier.arrive(ready.index(buf), count=1)

    @gluon.jit
    def _field(fields, i, n: gl.constexpr):
        """fields[n], every thread holding all four (a reduction within each thread)."""
        return gl.sum(gl.where(i == n, fields, 0), 0)

    @gluon.jit
    def _ws_cast(bufs, ready, empty, info, Y, stride_yr, mine, layout: gl.constexpr, i_layout: gl.constexpr,
                 BOX_ROWS: gl.constexpr, ROW_BOXES: gl.constexpr, G: gl.constexpr, D: gl.constexpr,
                 BUFFERS: gl.constexpr, SUB: gl.constexpr, PAIRS: gl.constexpr, W: gl.constexpr):
        """The cast warps: part k from shared memory once the waiter has its descale, then the buffer
        goes back to the loader."""
        i = gl.arange(0, 4, layout=i_layout)
        for k in range(mine):
            buf = k % BUFFERS
            mbarrier.wait(ready.index(buf), (k // BUFFERS) & 1)
            fields = info.index(buf).load(i_layout)
            d = _field(fields, i, 0).to(gl.float32, bitcast=True)
            g = _field(fields, i, 1)
            left = _field(fields, i, 2)
            y_part = Y + _field(fields, i, 3).to(gl.int64) * stride_yr  # offsets within a part fit in int32
            _cast(bufs, buf, y_part, stride_yr, g, left, d, layout, BOX_ROWS, ROW_BOXES, G, D, SUB, PAIRS, W)
            _thread_barrier()  # every cast warp is done with buffer `buf` (a barrier of this partition's warps)
            mbarrier.arrive(empty.index(buf), count=1)

    @gluon.jit
    def _onchip_ws_kernel(x_desc, X, Y, DESCALE, TABLE, TICKET, CU, stride_xr, stride_yr, stride_db, stride_dh,
                          items, parts, n_kv, slices, seqlen, spins,
                          BOX_ROWS: gl.constexpr, ROW_BOXES: gl.constexpr, G: gl.constexpr, D: gl.constexpr,
                          BUFFERS: gl.constexpr, SUB: gl.constexpr, SUB_ONE: gl.constexpr, VARLEN: gl.constexpr,
                          NUM_WARPS: gl.constexpr, VEC: gl.constexpr, PAIRS: gl.constexpr, WORKER_REGS: gl.constexpr,
                          CHUNK: gl.constexpr):
        """Per head, warp-specialized (v15): the same parts, table and bits as `_onchip_kernel`, each
        step in its own warps, linked by mbarriers per buffer. A loader warp issues the TMA copies;
        an amax warp publishes each part's amax as soon as it lands; a waiter warp waits for the
        part's slice in the table and hands its descale to the NUM_WARPS cast warps (the default
        partition), which only cast and store. No step waits for another's unrelated work: the
        amaxes run up to BUFFERS parts ahead, the table's round trips overlap the casts, and the
        cast warps meet no CTA-wide barrier."""
        PART_ROWS: gl.constexpr = BOX_ROWS * ROW_BOXES
        WIDTH: gl.constexpr = VEC // 2 if PAIRS else VEC
        cast_layout: gl.constexpr = gl.BlockedLayout([1, WIDTH], [32 * VEC // D, D // VEC], [NUM_WARPS, 1], [1, 0])
        amax_layout: gl.constexpr = gl.BlockedLayout([1, WIDTH], [32 * VEC // D, D // VEC], [1, 1], [1, 0])
        x_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 * VEC // D, D // VEC], [1, 1], [1, 0])
        i_cast: gl.constexpr = gl.BlockedLayout([4], [32], [NUM_WARPS], [0])
        i_one: gl.constexpr = gl.BlockedLayout([4], [32], [1], [0])
        W: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        pid = gl.program_id(0)
        grid = gl.num_programs(0)
        geo = (parts, n_kv, slices, CU, seqlen)
        bufs = gl.allocate_shared_memory(x_desc.dtype, [BUFFERS * ROW_BOXES * G, BOX_ROWS, D], x_desc.layout)
        full = gl.allocate_shared_memory(gl.int64, [BUFFERS, 1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [BUFFERS, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [BUFFERS, 1], mbarrier.MBarrierLayout())
        info = gl.allocate_shared_memory(gl.int32, [BUFFERS, 4], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        tag_slot = gl.allocate_shared_memory(gl.int64, [1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        tag_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(tag_bar, count=1)
        for j in gl.static_range(BUFFERS):
            mbarrier.init(full.index(j), count=1)
            mbarrier.init(ready.index(j), count=1)
            mbarrier.init(empty.index(j), count=1)
        fence_async_shared()
        mine = (items - pid + grid - 1) // grid
        gl.warp_specialize([
            (_ws_cast, (bufs, ready, empty, info, Y, stride_yr, mine, cast_layout, i_cast, BOX_ROWS, ROW_BOXES, G, D,
                        BUFFERS, SUB, PAIRS, W)),
            (_ws_loader, (x_desc, bufs, full, empty, pid, grid, mine, geo, BOX_ROWS, ROW_BOXES, G, D, BUFFERS,
                          VARLEN)),
            (_ws_amax, (bufs, full, TABLE, TICKET, tag_slot, tag_bar, pid, grid, mine, geo, amax_layout, BOX_ROWS,
                        ROW_BOXES, G, D, BUFFERS, SUB_ONE, VARLEN, PAIRS, W)),
            (_ws_waiter, (X, DESCALE, TABLE, tag_slot, tag_bar, full, ready, info, stride_xr, stride_db, stride_dh,
                          pid, grid, mine, spins, geo, x_layout, i_one, PART_ROWS, SUB_ONE, G, D, BUFFERS, VARLEN,
                          CHUNK)),
        ], [1, 1, 1], [WORKER_REGS, WORKER_REGS, WORKER_REGS])


def _descriptor(x: torch.Tensor, plan: OnchipPlan, rows: int, heads: int):
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8 * x.element_size(), rank=2)
    return TensorDescriptor(x, [rows, heads * plan.head_dim], [x.stride(-3), 1], [plan.box_rows, plan.head_dim],
                            layout)


# Per (device, stream), the most recent STREAMS_KEPT: the table of part amaxes and the launch counter
# (`_launch_tag`) its launches share. Tables a CUDA graph captured stay alive with it (its replays hold
# their addresses); the others are freed when their stream falls out (the allocator orders the reuse
# after their last launch on that stream).
STREAMS_KEPT = 8
_TABLES: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
_CAPTURED: list[tuple[torch.Tensor, torch.Tensor]] = []


def _table_and_ticket(device: torch.device, items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A table of at least `items` int64 entries (tag << 32 | amax bits) and its counter, shared by
    the launches on the current stream: launches never clear it (each has its own tag), so no
    kernel runs before `quantize_onchip`'s (v15; v14 zeroed a new table per call). A graph captured
    on a stream uses that stream's table: replay it on another stream only while no launch uses
    the capture stream's (two launches at once on one table could share tags). The first launch on
    a stream inside a capture also captures the zeroing of its new table (warm up outside it)."""
    if _FRESH_TABLE:  # the bench's measure of what v14's per-call table cost: one zeroing kernel, as v14's
        fresh = torch.zeros(items + 1, dtype=torch.int64, device=device)
        return fresh[:items], fresh[items:]
    key = (device, torch.cuda.current_stream(device).cuda_stream)
    entry = _TABLES.pop(key, None)
    if entry is None or entry[0].numel() < items:
        entry = (torch.zeros(triton.next_power_of_2(max(items, 1024)), dtype=torch.int64, device=device),
                 torch.zeros(1, dtype=torch.int64, device=device))
    _TABLES[key] = entry  # the most recent last
    if torch.cuda.is_current_stream_capturing() and not any(entry[0] is t for t, _ in _CAPTURED):
        _CAPTURED.append(entry)
    while len(_TABLES) > STREAMS_KEPT:
        _TABLES.popitem(last=False)
    return entry


def _kernel_and_constants(plan: OnchipPlan, per_tensor: bool, varlen: bool):
    """The kernel `plan` runs and its constexprs."""
    const = dict(BOX_ROWS=plan.box_rows, ROW_BOXES=plan.row_boxes, G=plan.group, D=plan.head_dim,
                 BUFFERS=plan.buffers, SUB=plan.sub_rows, VARLEN=varlen, NUM_WARPS=plan.warps, VEC=plan.vec,
                 PAIRS=plan.pairs)
    if plan.ws:
        chunk = WAIT_CHUNK if 128 < plan.parts <= WAIT_CHUNK else 128
        return _onchip_ws_kernel, dict(const, SUB_ONE=plan.sub_rows_one, WORKER_REGS=WS_WORKER_REGS, CHUNK=chunk)
    return _onchip_kernel, dict(const, LEAD=plan.lead, PER_TENSOR=per_tensor, WAIT=_WAIT)


def quantize_onchip(x: torch.Tensor, y: torch.Tensor, cu: torch.Tensor, batch: int, seqlen: int, heads: int,
                    heads_kv: int, per_tensor: bool, plan: OnchipPlan, spins: int | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x into y (contiguous, x's shape, float8_e4m3fn) as `plan` says; returns (y, descale
    float32 (batch, heads_kv), stride 0 per tensor). `quantize_fp8(schedule="onchip")` checks x
    first; call that. spins: table reads before the fallback (None: SPINS; 0: every program computes its
    slice's amax from x, a test of the fallback)."""
    varlen = x.dim() == 3
    rows = x.shape[0] if varlen else batch * seqlen
    descale = torch.empty((1, 1) if per_tensor else (batch, heads_kv), dtype=torch.float32, device=x.device)
    table, ticket = _table_and_ticket(x.device, plan.items)
    y_out = y.view(torch.int16) if plan.pairs else y
    kernel, const = _kernel_and_constants(plan, per_tensor, varlen)
    kernel[(plan.grid,)](
        _descriptor(x, plan, rows, heads), x, y_out, descale, table, ticket, cu, x.stride(-3), y_out.stride(-3),
        *descale.stride(),
        plan.items, plan.parts, heads_kv, batch * heads_kv, seqlen, SPINS if spins is None else spins,
        **const, num_warps=plan.warps, maxnreg=plan.maxnreg)  # registers for CTAS_PER_SM programs per SM, all resident
    return y, descale.expand(batch, heads_kv) if per_tensor else descale


def compile_onchip_sm90(head_dim: int = 128, group: int = 1, per_tensor: bool = False, dtype: str = "bf16",
                        seqlen: int = 16384, heads_kv: int = 1):
    """Compile the kernel for sm_90 without a GPU (triton's bundled ptxas), planned for one sequence
    of `seqlen` tokens, `heads_kv` kv heads and `group` query heads per kv head on 132 SMs (from
    WS_FROM_BYTES per head, the warp-specialized kernel); returns triton's compiled kernel
    (`.asm["ptx"]`, `.asm["cubin"]`, `.metadata.shared`)."""
    if not HAVE_GLUON:
        raise RuntimeError(f"compile_onchip_sm90 needs Gluon (triton >= 3.5); this triton is {triton.__version__}")
    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    stand_in = torch.empty((1, seqlen, group * heads_kv, head_dim), dtype=tdtype, device="meta")
    plan = onchip_plan(stand_in, 1, seqlen, group * heads_kv, head_dim, heads_kv, per_tensor, False, sms=SM90_SMS)
    if isinstance(plan, str):
        raise ValueError(plan)
    shape = [plan.box_rows, head_dim]
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8 * stand_in.element_size(), rank=2)
    kernel, const = _kernel_and_constants(plan, per_tensor, False)
    types = dict(x_desc=f"tensordesc<{dtype}[{shape[0]}, {shape[1]}],{layout!r}>", X=f"*{dtype}",
                 Y="*i16" if plan.pairs else "*fp8e4nv",
                 DESCALE="*fp32", TABLE="*i64", TICKET="*i64", CU="*i32")
    # what the JIT sees on a GPU: 16-byte aligned pointers and row strides
    return compile_sm90(kernel, types, const, ("X", "Y", "TABLE", "stride_xr", "stride_yr"),
                        num_warps=plan.warps, maxnreg=plan.maxnreg)
