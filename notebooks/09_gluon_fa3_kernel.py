# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · FA3's structure, written out: the Gluon kernel
#
# Notebook 08 taught our Triton FP8 attention kernel: the algorithm, its FP8 steps, and how far
# tuning took it (its section (g)). What was left looked structural: FA3 splits its warps into a
# producer that only loads and consumers that only compute, and orders their matrix instructions by
# hand, which Triton's compiler does not build by itself. `fp8lab.kernels.fp8_attention_ws` writes
# that structure out in Gluon, Triton's lower-level language, with the same arithmetic step for step
# (`fp8lab/kernels/attention_ws.py`, written as a lesson). This notebook is the record of how it
# was built and made fast, one version at a time, and of what the Triton kernel learned alongside.
#
# Gluon kernels run only on Hopper, so this notebook reads what the H200 measured (`results/h200/`,
# each run named where it is used) and counts what can be counted anywhere: registers, tiles, where
# each key lands. One cell runs the Triton kernel (on a CPU in Triton's interpreter).
#
# You will learn:
# - **(a)** FA3's warp-specialized structure, written out in Gluon, and why it was not enough alone;
# - **(b)** FP8 step 5, P's register layout: the shuffle FA3 avoids, and the Triton kernel's way round it;
# - **(c)** the Gluon kernel's loop read instruction by instruction: where to cast P, V in key order;
# - **(d)** P packed as the MMA's own words: the registers that let FA3's tiles fit;
# - **(e)** persistent programs: one per SM taking tile after tile, and why causal tiles resist it;
# - **(f)** tiles from a counter, and one tile without a loop;
# - **(g)** how O accumulates in the FP8 MMA: FA3's one level against vLLM's two;
# - **(h)** what the second level costs once its registers fit, in both kernels;
# - **(i)** V transposed inside the Gluon kernel, as FA3 does: where the time goes, why the copy stays.
#
# **Words used below.** A *warp* is 32 threads, a *warpgroup* 4 warps (128 threads): Hopper's
# matrix instruction, **wgmma**, runs on a warpgroup, so register counts are per thread of 128; a
# *quad* is 4 neighbouring threads that share a row of an MMA's result. An MMA computes A B: wgmma's
# *A operand* (Q, or P) may come from registers, its B operand (K^T, V) always from shared memory. A
# thread has at most 255 32-bit registers; values that do not fit *spill* to slow local memory.
# **TMA** is Hopper's copy engine between global and shared memory. A **CTA** or program is one block
# of threads on one SM; an **mbarrier** is a shared-memory barrier that threads and TMA copies arrive
# at; `setmaxnreg` moves registers between warpgroups. A tile's *epilogue* is what follows its last
# MMA: O divided by the row sum and written out. **PTX** is the GPU's portable assembly and **SASS** its
# machine code (**ptxas** compiles one to the other; read offline with `cuobjdump`); PRMT, SHFL,
# SEL and LOP3 are SASS byte-permute, cross-thread shuffle, select and 3-input logic instructions,
# and `ldmatrix` / `stmatrix` load and store matrix fragments between shared memory and registers.
# A case `4x4096x32x128` is batch x sequence length x heads x head dim. **V + 1** is notebook 05's
# long-context input: V's N(0, 1) values plus one, so that P V grows with the context as it does
# with real value vectors (with zero-mean V the sum stays small).
#
# **Reading the record.** Tables name kernels by their config labels:
#
# | label part | meaning |
# |---|---|
# | `m128n64w8s3` (Triton) | `BLOCK_M` = 128 query rows, `BLOCK_N` = 64 keys per block, 8 warps, 3 pipeline stages |
# | `-pk` | `permute_keys`: K's rows loaded in `key_order` (b) |
# | `-pf` | `pv_flush`: each block's P V added to O in fp32 (g), (h) |
# | `ws-n128s3` (Gluon) | the warp-specialized kernel of (a): 128 keys per block, 3 stages of K/V buffers |
# | `-pp`, `-ru` | FA3's ping-pong MMA order, rescale under the next MMA (a) |
# | `-kv`, `-pw` | V^T from `key_ordered_vt` (c); P carried packed, four e4m3 per word (d) |
# | `-c3` | three consumer warpgroups, 192 query rows (d) |
# | `-ps`, `-dy` | persistent programs (e); tiles from an atomic counter (f) |
# | `-h2` | `pv_halves`: O and P V in two 128-column halves at head dim 256 (h) |
# | `-tv2`, `-tv4` | `transpose_v`: V as stored, transposed in the kernel by 2 or 4 transposer warps (i) |
#
# The Triton kernel's other label parts are in notebook 08 (g).

# %% tags=["parameters"]
smoke: bool = False  # CI: tiny shapes (the interpreter is slow)
seqlen_q: int = 96  # queries per sequence, for (b)'s run of the Triton kernel
seqlen_k: int = 113  # keys per sequence
batch: int = 2
heads_q: int = 4
heads_kv: int = 2  # GQA: two query heads per kv head
head_dim: int = 64
causal: bool = True
seed: int = 0
results_dir: str = "auto"  # auto: results/h200 of this checkout

# %% [markdown]
# *Setup (skippable). Without a GPU the Triton kernel runs in Triton's interpreter, which must be
# switched on before Triton is imported.*

# %%
import os
from dataclasses import replace

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fp8lab import env  # noqa: E402
from fp8lab.notebooks import exercise_note, record, unanswered  # noqa: E402
from fp8lab.kernels import attention as A  # noqa: E402
from fp8lab.kernels import WsConfig, default_ws_config, explain, fp8_attention, quantize_fp8  # noqa: E402
from fp8lab.metrics import rel_l2  # noqa: E402
from fp8lab.plots import perf as plots  # noqa: E402

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if smoke:
    seqlen_q, seqlen_k, batch, heads_q, heads_kv, head_dim = 40, 57, 1, 2, 1, 32
rdir = env.results_dir() if results_dir == "auto" else Path(results_dir)
gen = torch.Generator().manual_seed(seed)
pd.set_option("display.precision", 4)
print(f"device {dev}, interpreter {os.environ.get('TRITON_INTERPRET') == '1'}")


def bf16_inputs(*shape, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16).to(dev)


# %% [markdown]
# ## (a) FA3's structure, written out: the Gluon kernel (v8, v9)
#
# FA3's remaining edge over the Triton kernel (notebook 08 (g)) looked structural, so the next step
# was to build that structure, which Triton's compiler will not build for us:
# `fp8lab.kernels.attention_ws` writes it in Gluon (Triton's lower-level language). One *loader*
# warp only issues TMA copies of K and V^T
# into a ring of shared-memory stages, with mbarriers saying "full" and "free"; two
# *consumer* warpgroups of 64 query rows each (*ping-pong*: while one computes its softmax, the
# other's MMAs keep the tensor cores busy) issue S_j = Q K_j^T and
# O += P_{j-1} V_{j-1} as asynchronous wgmma and wait only for S_j, so the softmax overlaps
# the previous PV product; P stays in registers as the MMA's A operand. The arithmetic is
# notebook 08's, step for step. Gluon does not run in the interpreter:
# `fp8lab.kernels.compile_ws_sm90()` compiles it for sm_90 on a laptop (in a process without
# `TRITON_INTERPRET`), and its `.asm["ptx"]` shows the `setmaxnreg` register hand-over and the
# `wgmma.wait_group 1` of the overlap. The designs measured on the H200 (the plot: v9, the last):

# %%
ws = explain.ws_record(rdir)
plots.plot_ws(ws[ws["version"] == "v9"])
plt.show()
explain.ws_table(ws)

# %% [markdown]
# What it shows (details in `docs/kernel-notes.md`, v8):
# - **v8a**, one 8-warp consumer: Gluon puts a `bar.sync` of the whole partition before every
#   mbarrier operation, so the two warpgroups ran in lock step and never overlapped; 0.54-0.71x.
# - **v8b/v8**, two 4-warp consumers, one barrier pair per stage: each warpgroup waits only for
#   itself. At head dim 256 it edges out the Triton kernel; at 64 and 128 it does not: a CTA
#   now fills the register file (one per SM), and the per-block barrier, P shuffle and softmax
#   on 64 rows are not hidden behind MMAs that short.
# - **v9** tried FA3's remaining details. Ordering the two warpgroups' MMAs (FA3's named
#   barriers, hardware barriers for a chosen set of warps; here a pair of mbarriers:
#   `WsConfig(pingpong=True)`) and rescaling O under the next QK^T (`rescale_under_mma=True`)
#   change no bits and gained nothing consistent (-9 to +5 % per case). FA3's wider key block did:
#   128 keys in two stages at head dim 256 run 0.78-0.88x FA3 FP8, 4-10 % ahead of the Triton kernel
#   in all six cases.
#   At 64 and 128 the Triton kernel, two or three programs per SM overlapping each other,
#   stays ahead: structure alone was not enough (until v11 found what held it back: section (c)).

# %% [markdown]
# ## (b) FP8 step 5: P's register layout (v10)
#
# Back to the Triton kernel of notebook 08, where the next gain came from counting instructions.
# After the softmax, P sits in the registers of the QK^T accumulator, and the PV wgmma takes it
# from registers as its A operand. For bf16 the two layouts match. For e4m3 they do not: wgmma
# gives thread t of each quad the score columns {2t, 2t+1} + 8j, but an 8-bit A operand packs
# four consecutive keys per register, {4t..4t+3} + 16i. So 24 of a quad's 32 P values must come
# from another thread: Triton emits a `SHFL`, a `SEL` and a `PRMT` per 4 values, 10 % of the
# instructions in the kernel's main loop at head dim 64 (the offline SASS counts in
# `docs/kernel-notes.md`). FA3 sidesteps this when it transposes V itself: it only swaps registers
# within each thread (`permute_Cregs_fp8`), so its V transpose must lay the keys out to match;
# given a pre-transposed V it shuffles as we did. Our V comes pre-transposed, so the Triton kernel
# permutes **K** instead: `AttentionConfig(permute_keys=True)` loads K's rows of each 32 in the order
# `key_order`, so the scores a thread holds are exactly the keys its A registers need, and
# `in_key_order` relabels P's columns back, which the compiler turns into a renaming of
# registers. The table runs the kernel's own `key_order`:

# %%
layout = explain.p_register_layout(device=dev)
record("p_fetched_from_other_threads", explain.fetched_counts(layout))
layout

# %% [markdown]
# Same keys, same arithmetic: under the interpreter the permuted kernel gives the same bits as
# the plain one (on a GPU only the order of the row sum's additions may change). Inputs quantized
# per head by `quantize_fp8`, as in notebook 08 (b):

# %%
q8, qd = quantize_fp8(bf16_inputs(batch, seqlen_q, heads_q, head_dim), "head", heads_kv=heads_kv)
k8, kd = quantize_fp8(bf16_inputs(batch, seqlen_k, heads_kv, head_dim), "head")
v8, vd = quantize_fp8(bf16_inputs(batch, seqlen_k, heads_kv, head_dim), "head")
plain_cfg = A.AttentionConfig(16, 32, 4, 1)
perm_cfg = A.AttentionConfig(16, 32, 4, 1, permute_keys=True)
out_plain = fp8_attention(q8, k8, v8, qd, kd, vd, causal=causal, config=plain_cfg)
out_perm = fp8_attention(q8, k8, v8, qd, kd, vd, causal=causal, config=perm_cfg)
print("permute_keys gives the same bits:", torch.equal(out_plain, out_perm),
      f"(rel L2 difference {float(rel_l2(out_perm, out_plain)):.1e})")

# %% [markdown]
# v10 also rewrote the causal mask as one compare per score (`key <= min(row + diag,
# seqlen_k - 1)`), which shortened the on-band loop by 18-30 % and cut the spills that had kept
# 128-key blocks out of causal head dim 128 from 1048 to 96 bytes. Together, measured on the H200
# against v9's kernel in the same run (`results/h200/bench_v10_final.json`; the ratios are to FA3
# FP8, `v10 vs v9` is v10's gain in speed):

# %%
v10 = explain.v10_record(rdir)
plots.plot_ws(v10, title="v10 against v9, the Gluon kernel and vLLM (same run)")
plt.show()
v10_table = explain.kernel_ratios(v10)
record("v10_ratio_to_fa3_fp8", {c: float(r) for c, r in v10_table["v10 (Triton)"].items()})
v10_table.join(explain.kernel_gain(v10, "v10 (Triton)", "v9 (Triton)").round(3).rename("v10 vs v9"))

# %% [markdown]
# Head dim 64 gained 6-11 %, head dim 128 causal 7-10 % (its non-causal tile is unchanged), 256
# 1-3 %; vLLM's FP8 varlen path is now behind in every case. Counting instructions in the SASS
# found what the scheduling experiments of (a) had not.

# %% [markdown]
# ## (c) The Gluon kernel's loop, read instruction by instruction (v11)
#
# The same counting, done on the Gluon kernel of (a), found two things (offline sm_90 compiles,
# `docs/kernel-notes.md`, v11). At head dim 128 its main loop was 826 instructions per 128-key block
# and consumer; 253 of them were `PRMT`/`LOP3`/`SHFL.IDX`/`SEL`:
# - **Where P is cast.** The kernel cast P to e4m3 at the end of the softmax and carried it into
#   the next iteration, whose PV wgmma uses it. A loop-carried e4m3 tensor lives one byte per
#   32-bit register, so every iteration re-packed 64 bytes into the A operand's words. Casting
#   P right before its MMA (P crosses the loop in float32) removes that: 638 instructions.
# - **P's layout, the V side.** The Gluon kernel loads K by TMA, which cannot reorder rows within
#   a tile, so `permute_keys` of (b) is out of reach. The PV product only needs P's columns and
#   V's keys to be in the *same* order, though: relabel P with the same `in_key_order` (free in
#   registers) and store V^T's keys in that order once, when V is transposed anyway.
#   `fp8lab.kernels.key_ordered_vt(v)` is that copy; `fp8_attention_ws` takes it
#   in place of `pretranspose_v(v)`: 589 instructions, and no shuffle left.
#
# Where does each key land? `explain.key_ordered_vt_landing` runs the copy on V = identity, which
# makes V^T a permutation matrix, and reads off each key's column:

# %%
landing = explain.key_ordered_vt_landing(32)
assert torch.equal(landing, explain.key_order_values(32, device=dev).long()), "not the kernel's key_order"
print("key   :", list(range(16)))
print("column:", landing[:16].tolist())

# %% [markdown]
# The same `key_order` τ as (b), now applied to V instead of K, and read the other way round. In
# (b) K's rows move: score column c holds key τ(c), a gather (column 10 holds key 6). Here K stays
# in order, so column c holds key c, and P's registers are relabelled with τ: the value in column
# c becomes the MMA's A operand at position τ(c). V^T must then hold key c at its column τ(c), a
# scatter (key 6 at column 12, as printed above). Either way, each A-operand slot meets the V^T
# row of the same key, which is all the MMA's sum needs. Both changes keep every bit: on the
# H200 the new kernel's outputs equal v10's in all 24 checks of the run below, with and without
# the key-ordered V (the MMA's sum over 32 keys did not depend on their order). Measured against
# v10's Gluon kernel in the same run (`results/h200/bench_v11_ws1.json`; `v11 vs v10` is the gain
# of the key-ordered kernel in speed):

# %%
v11 = explain.v11_record(rdir)
plots.plot_ws(v11, title="v11: the Gluon kernel against v10's and the Triton kernel (same run)")
plt.show()
v11_table = explain.kernel_ratios(v11)
record("v11_gluon_ratio_to_fa3_fp8", {c: float(r) for c, r in v11_table["v11 Gluon, + key-ordered V"].items()})
v11_table.join(explain.kernel_gain(v11, "v11 Gluon, + key-ordered V", "v10 Gluon").round(3).rename("v11 vs v10"))

# %% [markdown]
# +18-21 % at head dim 128, where the Gluon kernel now passes the Triton kernel (0.88-0.92x FA3
# FP8 here; in the next run 0.93-0.96x with four stages non-causal, 0.91-0.97x causal; at 4k tokens
# causal the two kernels trade places from run to run), and +23-27 % at 64, where the Triton kernel
# stays faster. At 256, 128-key tiles hold P in float32 across the loop and spill, so v11 goes back
# to 64 keys: -1 to +7 % over v10, 0.81-0.94x (carrying P as packed e4m3 words keeps 128 keys:
# section (d), where v12 makes that the default).

# %% [markdown]
# ## (d) P as words: the registers that buy FA3's tiles (v12)
#
# v11 carried P across the loop in float32: correct and shuffle-free, but it costs as many
# registers as the scores. Count what one consumer thread holds (64 query rows per warpgroup of 128
# threads; values, before the compiler's temporaries). Its `budget` is what `setmaxnreg` leaves it once
# the loader's warpgroup has given its own registers back down to 24: 240 with two consumers, 160
# with three (`WsConfig.consumer_regs`):

# %%
explain.register_carry_table(((64, 128, 2), (64, 128, 3), (128, 128, 2), (256, 64, 2), (256, 128, 2)))

# %% [markdown]
# FA3's tiles do not fit with float32 P: at head dim 256 its 128-key tile needs 256 registers
# against 240 (v11 measured the spills and went back to 64 keys), and at head dim 64 its 192-row
# tile (three consumer warpgroups, 160 registers each) needs 160 before any temporary. Packed four
# e4m3 per 32-bit word, P takes a quarter. `WsConfig(pack_p=True)` does that, and the way it is
# done decided everything (offline sm_90 compiles, `docs/kernel-notes.md`, v12):
# - **Unpacking byte by byte** (v11's opt-in: each byte taken out with `bfe`, PTX's bit-field
#   extract, and the MMA left to re-pack them) cost
#   145 `PRMT`/`LOP3` per block at head dim 256: ptxas does not see that the bytes go back where
#   they came from.
# - **The word is the operand.** Inline PTX with `pack=4` can return a 32-bit register as four
#   e4m3 values; given the packed word itself, LLVM folds the extract-and-insert away and the
#   wgmma reads the carried registers as they are: 755 -> 659 instructions per block.
# - **Pack after the PV wait, as FA3 does.** Packed right after the softmax, the new words were
#   written while the previous block's PV wgmma, still running, read the old ones *from the same
#   registers*: ptxas then serialized every wgmma of the loop (2 -> 12 `WARPGROUP.DEPBAR`, the SASS
#   wait for a warpgroup's MMAs, per block).
#   FA3 converts P after `warpgroup_wait<0>()`; so does v12: 640 instructions, 2 waits.
#
# Same bits as float32 P in every H200 check. In one run against v11's kernel
# (`results/h200/bench_v12_ws1.json`, medians of two rounds, all with `key_ordered_vt`):

# %%
v12 = explain.v12_record(rdir)
plots.plot_ws(v12, title="v12: P packed as the MMA's own words (same run)")
plt.show()
v12_table = explain.kernel_ratios(v12)
record("v12_packed_ratio_to_fa3_fp8",
       {c: float(r) for c, r in v12_table["P packed, words as the A operand (v12)"].items()})
v12_table

# %% [markdown]
# At head dim 256 the packed words take the kernel from 0.81-0.87x FA3 FP8 (v11's 64-key tile, P in
# float32) to 0.91-1.01x with FA3's 128 keys; v11's byte-by-byte unpack gets part of the way there, and
# at head dim 128 it is slower than float32 P.
#
# With the registers back, the tiles FA3 uses fit: 128 keys in three stages at head dim 256 (the
# new default with `key_ordered_vt`), and at head dim 64 a third consumer warpgroup, 192 query
# rows per CTA (`WsConfig(consumers=3)`), which reads each K/V tile for 1.5x as many rows
# (`results/h200/bench_v12_c3.json`):

# %%
c3 = explain.v12_consumers_record(rdir)
plots.plot_ws(c3, title="v12: three consumer warpgroups at head dim 64 (same run)")
plt.show()
explain.kernel_ratios(c3)

# %% [markdown]
# Three consumers run 0.89-0.99x against 0.81-0.84x with two, ahead of the Triton kernel at 8k and
# 16k tokens and behind it at 4k. They give the same bits as two (a GPU test checks it): a CTA's rows
# change, no row's arithmetic does. `fp8_attention_ws(q, k, key_ordered_vt(v), ...)` now picks these
# tiles itself (`default_ws_config(head_dim, causal, key_ordered=True)`). In the v12 grid (notebook
# 07) it is fp8lab's fastest call in 16 of 18 cases, 0.89-1.01x FA3 FP8, and with the Triton kernel
# at head dim 64 and 4k tokens fp8lab reaches 0.9x in all 18 (in that run; other runs dipped to
# 0.878 in single cases).

# %% [markdown]
# ## (e) Persistent programs (v19)
#
# Up to v18 the Gluon kernel launched one program per tile. Its warpgroups (the consumers' and the
# loader's: its one warp launches as a whole warpgroup, because `setmaxnreg` works per warpgroup)
# take all of an SM's 64K registers, so one program fits per SM, and each tile started cold. The
# program had to set up its barriers, load Q and fill the K/V ring before its first MMA. After its
# last MMA it wrote O while the tensor cores waited for the next program.
#
# FA3 instead launches one program per SM, and each program takes tile after tile.
# `WsConfig(persistent=True)` does the same here: program p takes tiles p, p + grid, p + 2 grid, and
# so on. The loader's K/V ring and the consumers' Q buffers run on from one tile to the next. A
# consumer releases its Q rows after the tile's last S = Q K^T (an mbarrier, `q_free`), and the last
# K/V stage after its last PV product. The loader therefore fetches the next tile's Q and first
# key blocks while this tile's last MMA and epilogue still run.
#
# No tile's arithmetic changes, so the bits are those of one program per tile. A GPU test checks
# this on shapes with more tiles than SMs, causal ones included. In the v19 run the bits also
# equalled commit c3b2016's kernel. Two runs timed it against one program per tile, three rounds
# each (`results/h200/bench_v19_ps1.json`, `bench_v19_ps2.json`):

# %%
ps = explain.v19_persistent_record(rdir, run=1)
plots.plot_ws(ps, title="v19: persistent programs against one program per tile (same run)")
plt.show()
gain = explain.kernel_gain(ps, "persistent, one program per SM", "one program per tile").rename("persistent gain")
record("v19_persistent_gain", gain.round(3).to_dict())
explain.kernel_ratios(ps).join(gain.round(3))

# %% [markdown]
# Non-causal, persistent programs were faster in all 9 cases of this run, by 0.4-3.6 %. In the
# second run they were faster in 8 of 9 and 0.1 % slower in the ninth. That is the time the next
# tile's start no longer waits.
#
# Causal was mixed, and at 8k and 16k tokens mostly slower, by up to 5.2 %. Causal tiles differ in
# length, from 1 to 128 key blocks. A fixed list of tiles per program balances them worse than the
# hardware does: with one program per tile, it starts the next tile on whichever SM frees first.
# The second run alternated the order every wave, so that long and short tiles would pair up. It
# helped at head dim 64 with 4k tokens (+9 %) and hurt at 8k and 16k at head dims 64 and 128 (-6 to
# -8.5 %), and was not kept.
#
# FA3 hands causal tiles out dynamically, through an atomic tile counter; v19's kernel did not.
# So v19 made `default_ws_config(head_dim, causal, key_ordered=True)` persistent for non-causal
# attention only. Section (f) adds the counter, and with it causal attention became persistent too
# (v21).
#
# Check the tile arithmetic at 2x8192x32x256 non-causal, 128 query rows per tile (the key-ordered
# default there), on the H200's 132 SMs:

# %%
tiles_256 = explain.persistent_schedule(2, 8192, 32, default_ws_config(256, False, key_ordered=True).block_m)
print(f"{tiles_256['tiles']} tiles = {tiles_256['full_waves']} x {tiles_256['programs']} + {tiles_256['last_wave']}: "
      f"{tiles_256['last_wave']} programs take {tiles_256['busiest']} tiles, the rest {tiles_256['full_waves']}")

# %% [markdown]
# That last partial wave is there with or without persistent programs.

# %% [markdown]
# ## (f) Tiles from a counter, and one tile without a loop (v20)
#
# FA3 gives its persistent programs fixed lists, as v19 does, only for non-causal attention without
# a window (`StaticPersistentTileScheduler` in hopper/tile_scheduler.hpp: tile p, p + grid, ...).
# For causal, local and varlen attention a program asks a global counter for its next tile (one
# atomic add, `DynamicPersistentTileScheduler`), so whichever SM frees first takes the next tile,
# as the hardware does with one program per tile. `WsConfig(persistent=True, dynamic=True)` does
# the same, causal or not:
#
# - Program p starts with tile p. Its loader warp asks the counter at the start of each tile
#   (`gl.atomic_add`), so the answer's latency hides under that tile's loads. Counter value c means
#   tile grid + c, and a number past the last tile means "done".
# - The loader writes the number into shared memory for the consumers. There are two slots, each
#   with its own mbarrier. A slot is reused only after the consumers have released the Q buffers
#   of the tile that last used it, so they have read it.
# - The consumers read the next number after their epilogue.
# - The last program to finish sets the counter back to zero (a second counter of programs done).
#   So no kernel has to clear it before a launch, and a CUDA graph's replays find it at zero. A GPU
#   test replays a captured launch.
#
# The order of the tiles is unchanged (heads in L2-sized chunks, longest query blocks first), and so
# is every tile's arithmetic: the same bits again, which the GPU tests check.
#
# v20 also builds one program per tile without the tile loop. The persistence switch is a
# constexpr, and with it off the kernel is the loop's body, run once. Compiled offline, the causal
# kernel is about 10 % shorter (5362 against 5952 SASS lines at head dim 64, 4146 against 4600 at 128,
# 4986 against 5568 at 256), with the same main loop and no spills in either.
#
# Two runs timed all of this, three interleaved rounds each (`results/h200/bench_v20_dy1.json` for
# head dim 64, `bench_v20_dy2.json` for 128 and 256). Commit 3f90e40's kernel (v19) ran alongside,
# one program per tile. The last three columns are gains in speed (`explain.v20_gains`): the counter
# against v19's fixed lists, one program per tile without the loop against v19's kernel, and the
# counter against one program per tile (the last two causal only):

# %%
dy = explain.v20_dynamic_record(rdir)
plots.plot_ws(dy, title="v20: fixed lists, a tile counter, and one program per tile (same runs)")
plt.show()
gains = explain.v20_gains(dy)
record("v20_counter_gain", gains["counter vs list"].round(3).to_dict())
record("v20_no_loop_gain", gains["no loop vs v19"].dropna().round(3).to_dict())
explain.kernel_ratios(dy).join(gains.round(3))

# %% [markdown]
# What the two runs say:
#
# - **Non-causal, counter against fixed list.** At head dims 128 and 256 it was faster in 5 of 6
#   cases, by 0.6-2.4 %, and 0.4 % slower in the sixth; in a later run it was faster in all 6, by
#   1.2-3.9 %. At 64 it was even at 4k and 8k tokens and 4 % slower at 16k. So
#   `default_ws_config(..., key_ordered=True)` takes tiles from the counter at 128 and 256 and keeps
#   the fixed list at 64. Here we depart from FA3, whose non-causal programs keep fixed lists at
#   every head dim.
# - **Causal.** The counter beat the fixed list in 7 of 9 cases, so it does balance unequal tiles
#   better. Against one program per tile, now built without the loop, it was split: faster in 4
#   cases (head dim 64 with 4k and 8k tokens, by 6.6 % and 2.2 %; 128 with 4k, 1.7 %; 256 with 8k,
#   0.4 %), slower in 5 (by up to 6.5 %, head dim 256 with 4k tokens). A later run
#   (`bench_v20_dy3.json`, two rounds) had the counter ahead in 8 of 9 causal cases and tied in the
#   ninth. Only 4k tokens at head dims 64 and 128, and 8k at 64 and 256, favoured it in both runs.
#   Two grids of each settled it (v21, the cell below): over the 9 causal cases the Gluon kernel
#   reached 0.964x FA3 FP8 on average with the counter, 0.953x with one program per tile, the
#   4k-token cases up by 1.8-6.1 points. So the key-ordered default takes the counter for causal
#   attention too.
# - **The loop, gone.** The same one-program-per-tile tiles ran 0.6-8.9 % faster than in v19's
#   kernel in 8 of the 9 causal cases, most at head dim 256 with 8k tokens. At head dim 128 with 4k
#   tokens they were 0.4 % slower. We did not find why it pays this much; the offline SASS shows only
#   the shorter code around the main loop.
#
# v20's two grids (causal one program per tile) had 0.9x FA3 FP8 in all 18 cases, counting the
# faster of our two kernels per case (where the Gluon kernel fell short, at 4k-token causal head
# dim 64, the Triton kernel made it); v21's, with the counter for causal attention too, 17 and 18
# of 18. v23 timed the same kernels in interleaved rounds, three of its four grids after the card
# settles: 18 of 18 in all four. The one case that had missed was timed, in every grid where it
# missed, right after an idle compile, in the clock's swing (notebook 07 (c)). v21's two grids
# against v20's, per causal case (the ratio to FA3 FP8, each the mean of two grids; last row: the
# mean over the cases):

# %%
causal_grids = explain.v21_causal_grids(rdir)
record("v21_causal_mean_ratio", causal_grids.mean().round(3).to_dict())
explain.causal_schedule_table(causal_grids)

# %% [markdown]
# ## (g) How O accumulates: FA3's one level, vLLM's two (v27)
#
# The accumulator registers are fp32, but Hopper's FP8 MMA adds its products keeping about 13 bits
# (notebook 05 (e) and (f)). The Triton kernel, like upstream FA3, passes O itself to the PV MMA as its
# accumulator (`tl.dot(p, v, acc)`), so every key block's products are added into an O that keeps
# growing, with those 13 bits. vLLM's FA3 library instead computes each block's P V in a fresh
# accumulator and adds it to O in fp32: `AttentionConfig(pv_flush=True)`, `acc += tl.dot(p, v)`.
# (Triton folds such an add back into the MMA for other operand types; for FP8 operands on sm_90
# it keeps the two apart, as the measurement below shows.) The probe's inputs
# (`scripts/probe_long_context.py`: 16 queries, 4 heads, d = 128, V + 1, the kind notebook 05 (e)
# draws with 2 heads) on the H200, against exact attention:

# %%
pv_errors, pv_speed = explain.pv_accumulation(rdir)
record("pv_accumulation_rel_l2", {f"{who} @ {n}": round(float(x), 4) for who, row in pv_errors.iterrows()
                                  for n, x in row.items()})
record("pv_flush_tflops", {f"{case} {cfg}": round(float(x)) for case, row in pv_speed.iterrows()
                           for cfg, x in row.dropna().items()})
display(pv_errors.round(4))  # noqa: F821 - IPython
pv_summary = explain.pv_accumulation_summary(pv_errors)
print(f"one level (both kernels, fa3-fwd): {pv_summary['one level, shortest']:.3f} at {pv_summary['shortest']} keys, "
      f"{pv_summary['one level, longest']:.2f} at {pv_summary['longest']}; "
      f"pv_flush: {pv_summary['pv_flush, lowest']:.4f}-{pv_summary['pv_flush, highest']:.4f} at every length")
pv_speed.round(0)

# %% [markdown]
# Both our kernels and FA3 land on the emulation's 13-bit accumulator model to three or four digits,
# and their error grows with the number of keys, from the shortest context to the longest as the
# line under the table prints. With `pv_flush` the error stays at the fp32-accumulation level (the
# line's last range), which is what the "flush every block" model predicts. The price, in this
# first form (the default tiles with the switch on), was 35-40 % of the speed at 2 x 8192 x 32 heads
# (the last table: `-pf` against the same tile without). Section (h) finds where it went.
#
# Why the error grows with the context: O is unnormalised until the end, a running sum over every
# key block seen so far. With V + 1 inputs (values of mean one) that sum grows with the number of
# keys, and each block's products are added to an ever larger O with a fixed 13 bits, so each add
# loses more of them (notebook 05 (e)).

# %% [markdown]
# ## (h) `pv_flush` in tiles that fit, in both kernels (v28)
#
# The flush keeps a second fp32 tile, the key block's P V, live beside O until it is added. Count
# what one thread holds (`explain.flush_registers`): the default tile at head dim 128 puts 128 query
# rows on one warpgroup, so S, O and the new tile are 128 values each, 384 for 255 registers, and
# the compile spills about 500 bytes per thread. Tiles with 64 rows per warpgroup halve every count.

# %%
gpu128 = A.gpu_config(128, False)  # the GPU default at head dim 128 (m128n128w4s3), on any host
flush_tiles = explain.flush_register_table((gpu128, replace(gpu128, pv_flush=True), *A.PV_FLUSH_CANDIDATES[128]), 128)
record("flush_registers_total", flush_tiles["total"].to_dict())
flush_tiles

# %% [markdown]
# (The default without the flush already holds 256 values: ptxas says so, serializing its wgmmas for
# "insufficient register resources", and still it is the fastest tile there; v2-v10.)
#
# The H200 timed every candidate at 2x8192x32xd, with both kernels' defaults and the providers on
# the same inputs (`scripts/probe_pv_flush.py`, three interleaved rounds; `flush_speed` below takes
# head dims 64 and 128 from that run, `bench_v28_pv_flush.json`, and 256 from the run after
# `pv_halves` was added, `bench_v28_pv_halves.json`). The Gluon kernel got the
# same switch: `WsConfig(pv_flush=True)`, a fresh accumulator for each block's PV wgmma
# (`use_acc=False`) and one fp32 add after its wait. Its consumers hold 64 rows each, so its tiles
# needed no change at head dims 64 and 128. (Head dim 256 needed more; below.)

# %%
flush_errors, flush_speed, flush_grid = explain.pv_flush(rdir)
record("v28_long_context_rel_l2", {f"d{d} {who} @ {n}": round(float(x), 4) for (d, who), row in flush_errors.iterrows()
                                   for n, x in row.items()})
record("v28_pv_flush_tflops", {f"{case} | {who}": round(float(x)) for case, row in flush_speed.iterrows()
                               for who, x in row.dropna().items()})
display(flush_errors.round(4))  # noqa: F821 - IPython
flush_speed.T.round(0)

# %% [markdown]
# - Every flushing tile stays at the fp32-accumulation error (0.0023-0.0034, with its own block size),
#   flat with the context, and so does vLLM's FA3 library (`vllm-so`): vLLM flushes every block, as
#   vllm-project/flash-attention#104 says. fa3-fwd, upstream FA3, does not.
# - The Triton kernel keeps 98-100 % of its speed at head dim 128 with 64-row tiles (749 against 767
#   TFLOP/s non-causal, 727 against 726 causal), where v27's form kept 58-64 %. At head dim 64 the
#   flush costs it 0-4 %, and the Gluon kernel 2-4 % at 64 and 128. (Over the whole grid below, the
#   last two columns: at most 6.4 % for the Triton kernel, 1.0-5.4 % for the Gluon kernel.)
# - Head dim 256: O and the flush tile each grow with the head dim, and at 64 rows per warpgroup
#   the two no longer fit in a thread's registers (exercise 7 counts them). Every
#   tile of the Triton kernel lost about half its speed, and the Gluon kernel's consumers spilled
#   (383 TFLOP/s against 1082 without the flush). `WsConfig(pv_halves=True)` holds O as two tiles of
#   128 columns and computes each block's P V half by half after the softmax, waiting for each half
#   before issuing the next: by then the scores are packed into P's 16 registers and nothing else is
#   in flight, so a half tile fits beside O. It gives up the PV product's overlap with
#   the softmax inside a warpgroup (the other consumer's softmax still runs under it): 961 / 895
#   TFLOP/s non-causal / causal, 0.89 / 0.86 of the kernel without the flush (the `-h2` rows; 64-key
#   blocks were slower). The errors at head dim 256 are the same story (second half of the table).
#
# The whole grid, with the faster of the two flushing kernels against fa3-fwd (which does not
# flush), against vLLM's FP8 varlen path (which does) and against FA3 in bf16, and each kernel's
# flushing default against its plain one:

# %%
record("v28_pv_flush_over_fa3", flush_grid["pv_flush / FA3 FP8"].round(3).to_dict())
record("v28_pv_flush_over_vllm", flush_grid["pv_flush / vLLM FP8 varlen"].round(3).to_dict())
plots.plot_pv_flush_grid(flush_grid)
plt.show()
flush_grid.round(3)

# %% [markdown]
# With the flush on, the faster of our kernels runs at 0.92-0.98x fa3-fwd at head dim 64, 0.87-0.94x
# at 128 and 0.82-0.90x at 256 (the Gluon kernel in halves), where fa3-fwd does not flush at all. It
# beats vLLM's flushing path in every case (by 11-23 % at 64 and 128, 2.3-2.6x at 256) and FA3 bf16
# everywhere (by 16-38 %). `pv_flush` stays opt-in: `fp8_attention(..., pv_flush=True)`,
# `fp8_attention_ws(..., pv_flush=True)` and `fp8lab.attention(..., pv_flush=True)` take these tiles
# (`gpu_config(d, causal, pv_flush=True)` and `default_ws_config(d, causal, True, pv_flush=True)` say
# which).

# %% [markdown]
# ## (i) V transposed inside the Gluon kernel (v30, v31)
#
# FA3 takes V as stored and transposes each key block's V in shared memory; the Gluon kernel took
# V^T from a copy (`key_ordered_vt`, (c); notebook 08 (f) times such copies).
# `WsConfig(transpose_v=True)` does what FA3 does. V's stages arrive by TMA in boxes of 128 keys x
# 16 columns, and two (or four) transposer warps write each stage's V^T in `key_ordered_vt`'s key
# order before the consumers may read it. A transposer thread (t = 0..3, from its lane) holds four
# keys of each group of 16: exactly the four that land at positions 4t .. 4t + 3 (exercise 8 finds
# which), so a small transpose in registers gives whole 32-bit words of V^T. The bits equal the
# copy's (a GPU test, every head dim). Three forms were built and timed on the H200, 2x8192x32xd
# (`scripts/probe_transpose_v.py`). In the tables, "V^T ready" is the key-ordered kernel given V^T made before the timed call, "+ copy" the same with
# `key_ordered_vt` inside it (what `fp8lab.attention` runs), and "no transpose" the `transpose_v` tiles
# with a transposer that does no work (wrong results, timed to see what the rest costs):
#
# - **shifts** (v30): 32-bit reads, the 4 x 4 byte transpose in shifts and masks, 32-bit stores; V's
#   boxes in a ring of their own.
# - **PRMT** (v30): the same, with eight byte permutes (`prmt`, inline PTX) per 4 x 4 bytes.
# - **LDSM.T** (v31): FA3's instructions. `ldmatrix.trans` reads 16-bit pairs already half
#   transposed, two PRMTs per pair of words finish it (`_ws_pairs_transposed`), and `stmatrix` writes
#   four 8 x 8 matrices at once: 13 instructions per box and thread (per two boxes 4 LDSM.T, 16 PRMT,
#   4 STSM and 2 barriers), against v30's 27.
#   The boxes land in V^T's own stage and are transposed in place, so head dim 256 gets back its
#   third stage.

# %%
tv = explain.transpose_v_forms(rdir)
tv_ratios = explain.transpose_v_ratios(tv)
record("transpose_v_over_ready", {f"{form} {case}": round(float(x), 3)
                                  for (form, case), x in tv_ratios["transpose_v / V^T ready"].items()})
record("no_transpose_over_ready", {f"{form} {case}": round(float(x), 3)
                                   for (form, case), x in tv_ratios["no transpose / V^T ready"].dropna().items()})
record("copy_over_ready", {f"{form} {case}": round(float(x), 3)
                           for (form, case), x in tv_ratios["+ copy / V^T ready"].items()})
tv.round(3)

# %%
plots.plot_transpose_v(tv)
plt.show()

# %% [markdown]
# v31's form (LDSM.T, in place) per head dim, each ratio to the V^T-ready kernel of its own run:

# %%
tv_v31 = explain.transpose_v_summary(tv, "LDSM.T")
record("transpose_v_v31_by_head_dim", {f"{ratio} {end} d={d}": round(float(x), 3)
                                       for (ratio, end), col in tv_v31.items() for d, x in col.dropna().items()})
print("\n".join(explain.describe_transpose_v(tv_v31)))
tv_v31.round(3)

# %% [markdown]
# - **v30: the transposer's instructions looked like the cost.** In the first form each thread moved
#   bytes with about 28 integer instructions per 16 bytes: 10-19 % of the speed at head dims 64 and 128.
#   Eight PRMTs per 16 bytes: 6-15 %. With the transposer doing nothing the v30 tiles ran at the
#   kernel's speed at head dim 128, so the loads and the extra hand-over cost little there. Four
#   transposer warps instead of two helped the first form (+3 to +9 %) and the PRMT form little (-1 to
#   +4 % at 128; `its config` says which won): the reading was issue slots that the consumers' softmax
#   needs, not the transposer's latency.
# - **Head dim 256 needed room.** With a ring of its own for V's boxes only two stages fit in shared
#   memory, and the loads were exposed: 0.44-0.51x in both v30 forms. Transposed in place (v31), three
#   stages fit: 0.72-0.75x.
# - **At 64 and 128 FA3's instructions bought little.** LDSM.T is 1-2 points above PRMT at 64 and 1-3
#   below at 128, within the runs' spread (compare the ratios, each to the V^T-ready kernel of its own
#   run), with half the instructions: fewer instructions did not buy what v30's reading promised.
#   Transposing in place costs something of its own: the "no transpose" tiles are 9 % below the kernel
#   at head dim 128 in place, and were not below it with v30's ring. A stage of V is now held from its
#   load until its V^T is read, so the transposer's hand-over sits inside every stage's turn. Where the
#   rest of the 15 % at 128 goes is not understood (`docs/kernel-notes.md`, v31).
# - **So the copy stays.** `key_ordered_vt` (20-92 us at 16k tokens, notebook 08 (f)) plus the kernel
#   costs 2-6 % (and is within the spread at 256); the in-kernel transpose costs 5-6 % at 64, 15-16 % at
#   128 and 25-28 % at 256. `fp8lab.attention` keeps the copy; `transpose_v` is there for a V that must
#   not be copied, and as this lesson. What FA3 does beyond this: a whole producer warpgroup
#   transposes, and V's columns are permuted (O's un-permuted in the epilogue) so that `stmatrix`
#   meets no bank conflicts.

# %% [markdown]
# The long-context figures the summary quotes, from the H200's record (`explain.long_context_table`:
# rel L2 against exact attention on the probe's V + 1 inputs, d = 128, by number of keys; "ours" is the
# worse of our two kernels, "ours, pv_flush" the worst flushing tile):

# %%
explain.long_context_table(rdir).round(4)


# %% [markdown]
# ## Summary
#
# - FA3's structure written out in Gluon (a loader warp feeding a ring of shared-memory stages, two
#   consumer warpgroups overlapping each softmax with the previous P V product) is not enough by
#   itself: at head dims 64 and 128 the Triton kernel, two or three programs per SM, stayed ahead
#   until the instructions were counted (v8, v9).
# - FP8 MMAs want P's keys in a different register order than the scores come in: loading K's
#   rows permuted makes the change free (`permute_keys`, v10), and so does storing V^T's keys
#   in that order (`key_ordered_vt`, v11, for the Gluon kernel whose K comes by TMA).
# - Count instructions before tuning: a loop-carried e4m3 tensor cost the Gluon kernel a
#   fifth of its loop (v11).
# - Registers decide the tile: P packed four e4m3 per word, written after the PV wait and fed to
#   the MMA as the same words, makes room for FA3's tiles (v12).
# - One program per SM, taking tile after tile, hides each tile's start behind the last one's end:
#   0-4 % for non-causal attention. Causal tiles of unequal length need a dynamic order (v19).
# - FA3's tile counter for causal attention gives that order: one atomic add per tile, reset by the
#   launch's last program (v20). It helped causal attention on average (v21), most at 4k tokens,
#   and, unlike FA3, which keeps fixed lists there, non-causal attention at head dims 128 and 256.
# - On Hopper the FP8 MMA keeps about 13 bits of its accumulator, and O accumulates in it over every
#   key block, as in upstream FA3: the error grows with the context (the `fa3-fwd` and `ours` rows of
#   the table above). `pv_flush=True` adds each block's P V to O in fp32, as vLLM's library does: flat
#   at the `ours, pv_flush` row's level. In tiles with 64 query rows per warpgroup it costs at most
#   6.4 % at head dims 64 and 128; at 256, where O and the flush tile do not fit together, the Gluon
#   kernel takes P V in two halves and keeps 0.83-0.89 of its speed ((h)'s grid; v27, v28).
# - FP8 MMAs want V key-contiguous. Transposed inside the Gluon kernel, with transposer warps and FA3's
#   own instructions, in place (v31), the kernel keeps 0.94-0.95 of the V^T-ready kernel's speed at head
#   dim 64, 0.84-0.85 at 128 and 0.72-0.75 at 256 ((i)'s table by head dim). Part of that loss is the
#   in-place hand-over, not the transposer's instructions: the "no transpose" tiles, whose transposer
#   does no work, are below the V^T-ready kernel too (same table). The copy plus the kernel stays
#   faster at every head dim, so `fp8lab.attention` keeps the copy.
#
# ## Exercises
#
# 1. With `permute_keys` and a block of 64 keys, which key does score column 59 hold? Set
#    `answer_1` (hint: write 59 as 32g + 16a + 8b + 2t + e; (b)'s table shows the first 32).
# 2. In `key_ordered_vt(v)`, at which column of its group of 32 is key 22 stored? Set `answer_2`.
# 3. With `pack_p`, how many 32-bit registers would O, S and P take per consumer thread at head dim
#    128 with blocks of 256 keys (two consumers), and would that fit the consumers' budget? Set
#    `answer_3` to the count.
# 4. With persistent programs on a 132-SM H200, at 4x4096x32x64 non-causal (the default tile of 192
#    query rows at head dim 64), how many tiles does the busiest program take? Set `answer_4`.
# 5. With the tile counter (`dynamic=True`), a launch has T tiles and G < T programs. How many atomic
#    adds on the tile counter does it make in all, counting the last one of each program, which
#    finds no tile? Set `answer_5` for 2x8192x32x128 causal (128 query rows per tile, 132 programs).
# 6. With `pv_flush`, what fraction of its speed does the Triton kernel keep at 2x8192x32x64
#    non-causal, in the tile a GPU runs for it (`A.gpu_config(64, False, pv_flush=True)`, on any host;
#    `default_config` would give the interpreter's tiny tile)? Read the speeds from `flush_speed`
#    (section (h)), not from the grid after it, which is another run. Set `answer_6` to the fraction.
# 7. At head dim 256, how many fp32 values per thread would O and the flush tile need together in a
#    tile of 64 query rows per warpgroup, and is that more than a thread's 255 registers? Set
#    `answer_7` to the count.
# 8. With `transpose_v`, a transposer thread with t = 2 reads four keys of each group of 16 so that its
#    4 x 4 byte transpose gives words of consecutive V^T positions. Which keys of the second group
#    (keys 16-31)? Set `answer_8` to their sorted list (hint: exercise 2's mapping, backwards).

# %%
answer_1 = None  # a key index in 0..63
answer_2 = None  # a column in 0..31
answer_3 = None  # registers
answer_4 = None  # tiles
answer_5 = None  # atomic adds
answer_6 = None  # fraction of the speed kept
answer_7 = None  # fp32 values per thread
answer_8 = None  # four key indices

# %% tags=["solution", "hide-input"]
# Solution (collapsed): computed, not typed in.
_by_solution = unanswered(globals(), 1, 2, 3, 4, 5, 6, 7, 8)  # before filling them in
if answer_1 is None:  # 59 = 32g + 16a + 8b + 2t + e, all 1 -> 32g + 16a + 4t + 2b + e
    answer_1 = int(explain.key_order_values(64, device=dev)[59])
if answer_2 is None:  # key 22 = 16a + 8b + 2t + e with a=1, t=3 -> column 16a + 4t + 2b + e
    answer_2 = int(explain.key_ordered_vt_landing(32)[22])
if answer_3 is None:  # O + S + packed P: 64 + 128 + 32
    regs = explain.consumer_registers(128, 256, consumers=2)
    answer_3 = regs["o"] + regs["s"] + regs["p_packed"]
if answer_4 is None:  # 22 query blocks x 4 x 32 = 2816 tiles over 132 programs
    answer_4 = explain.persistent_schedule(4, 4096, 32, default_ws_config(64, False, key_ordered=True).block_m)["busiest"]
if answer_5 is None:  # T - G tiles taken after the first G, plus G adds that find none: T
    answer_5 = explain.persistent_schedule(2, 8192, 32, 128)["counter_adds"]
if answer_6 is None:  # flush_speed's column for this tile over the "fp8lab" column (the default, no flush)
    answer_6 = explain.pv_flush_kept(flush_speed, "2x8192x32x64", A.gpu_config(64, False, pv_flush=True))
if answer_7 is None:  # O and the P V tile: 64 rows x 256 columns over 128 threads, each
    regs = explain.flush_registers(replace(A.gpu_config(256, False), pv_flush=True), 256)
    answer_7 = regs["o"] + regs["pv_tile"]
if answer_8 is None:  # positions 16 + 4t + 2b + e with t = 2
    answer_8 = explain.transposer_keys(2, 1)

# %%
assert answer_1 == int(explain.key_order_values(64, device=dev)[59]), "the kernel's key_order puts another key in column 59"
assert answer_2 == int(landing[22]), "key_ordered_vt stores key 22 elsewhere ((c)'s `landing`)"
regs3 = explain.consumer_registers(128, 256, consumers=2)
assert answer_3 == regs3["o"] + regs3["s"] + regs3["p_packed"], "O's, S's and packed P's values per thread (P: /4)"
cfg4 = WsConfig(block_n=128, stages=3, pack_p=True, consumers=3, persistent=True)
assert cfg4 == default_ws_config(64, False, key_ordered=True), "not the default tile any more: update exercise 4"
assert answer_4 == explain.persistent_schedule(4, 4096, 32, cfg4.block_m)["busiest"], "tiles = query blocks x batch x heads"
sched5 = explain.persistent_schedule(2, 8192, 32, WsConfig().block_m)
assert answer_5 == sched5["counter_adds"], "one add per tile after the first G, and one per program that finds none"
flush_cfg = A.gpu_config(64, False, pv_flush=True)
kept = explain.pv_flush_kept(flush_speed, "2x8192x32x64", flush_cfg)
assert abs(answer_6 - kept) < 0.005, "the tile's TFLOP/s over the default's, both from flush_speed (`flush_cfg.label()`)"
regs7 = explain.flush_registers(replace(A.gpu_config(256, False), pv_flush=True), 256)
assert answer_7 == regs7["o"] + regs7["pv_tile"] > regs7["budget"], "O's and the P V tile's values, per thread"
assert list(answer_8) == sorted(key for key in range(16, 32) if int(landing[key]) in range(24, 28)), \
    "the keys key_ordered_vt stores at positions 24 .. 27"
print(f"1: key {answer_1}   2: column {answer_2}   3: {answer_3} registers of {regs3['budget']}   4: {answer_4} tiles   "
      f"5: {answer_5} atomic adds")
print(f"6: {answer_6:.3f} of the speed   7: {answer_7} values for 255 registers   8: keys {list(answer_8)}")
print(exercise_note(_by_solution))
