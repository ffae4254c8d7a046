# %% [markdown]
# # 03 · Per-head scales, descale strides, GQA and the q_scale fallback
#
# FlashAttention-3 takes one float32 descale per (sequence, KV head) for each of Q, K
# and V: a `(batch, heads_kv)` tensor. This notebook looks at that tensor from five sides.
#
# **You will learn**
# 1. when per-head scales beat one per-tensor scale, measured on attention itself;
# 2. what `expand()` does to a descale's strides and memory, and why FA3 accepts it
#    (its C++ API checks the shape and hands `stride(0)`/`stride(1)` to the kernel);
# 3. how GQA maps query heads onto KV-head descales, and what Q's shared scale costs;
# 4. what it costs to squeeze per-token scales into FA3's layout;
# 5. how vLLM resolves missing checkpoint scales, the q_scale → k_scale fallback, and
#    what its defect (the fallback overwritten with 1.0) costs in accuracy.

# %% tags=["parameters"]
smoke: bool = False  # small sizes for CI
batch: int = 2  # sequences
seqlen: int = 1024  # tokens per sequence (queries and keys)
kernel_tokens: int = 128  # tokens section 2's kernel runs on (on a CPU it runs interpreted, and slowly)
heads_q: int = 16  # query heads
heads_kv: int = 4  # KV heads (GQA groups of heads_q // heads_kv)
head_dim: int = 128  # channels per head
spreads_log2: tuple = (0, 4, 8, 12, 16, 20)  # head-range spreads to sweep: heads span 2^(-s/2) .. 2^(s/2)
seed: int = 0

# %% [markdown]
# Set-up (safe to skip).

# %%
import math
import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

if not torch.cuda.is_available():  # section 2 runs fp8lab's Triton kernel: on a CPU, in the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")  # (before triton is first imported)

from fp8lab import data  # noqa: E402
from fp8lab.notebooks import exercise_note, record, unanswered  # noqa: E402
from fp8lab.plots import scaling as splots  # noqa: E402
from fp8lab.scaling import (  # noqa: E402
    PerHead,
    PerTensor,
    ScaleStrategy,
    descale_from_heads,
    descale_from_scalar,
    quantize_for_fa3,
    resolve_checkpoint_scales,
)
from fp8lab.scaling.experiments import (  # noqa: E402
    attention_layouts_agree,
    checkpoint_provenance,
    descale_layout_table,
    fallback_q_over_k,
    fallback_sweep,
    gqa_descale_reads,
    gqa_q_scale_cost,
    head_spread_sweep,
    k_heads_vs_e4m3,
    per_head_round_trip,
    token_reduction,
)

if smoke:
    batch, seqlen, heads_q, heads_kv, head_dim, spreads_log2, kernel_tokens = 2, 96, 8, 2, 64, (0, 8, 16, 24), 32
sns.set_theme(style="whitegrid")

# %% [markdown]
# ## 1. Per-head against per-tensor scales
#
# Take N(0,1) inputs and give each KV head its own range: K and V of head `j` are
# multiplied by `f_j`, and the query heads that read it by `1 / f_j`
# (`data.head_factors`, log-spaced over a spread of `s` binades). Scores `q·k` are
# unchanged, so the attention pattern is the same at every spread and each head's output
# just scales with `f_j`: any change in the *relative* error comes from FP8 alone.
# For each spread, Q, K and V are quantized once with one per-tensor descale (expanded to
# `(batch, heads_kv)`, as vLLM does) and once per (sequence, KV head); then exact
# attention runs on the FP8 inputs.

# %%
q0, k0, v0 = data.make_qkv("normal", batch=batch, seqlen_q=seqlen, heads_q=heads_q, heads_kv=heads_kv,
                           head_dim=head_dim, seed=seed, dtype=torch.float64)
sweep = head_spread_sweep(q0, k0, v0, spreads_log2)
fig, ax = plt.subplots(figsize=(9, 4))
sns.lineplot(data=sweep, x="spread (binades)", y="worst head rel_l2", hue="scales", style="scales", markers=True, ax=ax)
ax.set_yscale("log")
ax.set_xlabel("spread of head ranges (binades, log2 of largest / smallest head factor)")
ax.set_ylabel("relative L2 error of the worst head's output")
ax.set_title("One per-tensor scale fails once small heads fall below e4m3's normal range")
plt.show()
record("head_spread_sweep", sweep.to_dict(orient="list"))
sweep.pivot(index="spread (binades)", columns="scales", values=["worst head rel_l2", "largest head rel_l2", "rel_l2"])

# %% [markdown]
# Per-head scales make the error independent of the spread: each head is rescaled to
# its own range. One per-tensor scale holds up while the spread stays inside e4m3's
# normal range (`log2(448 / 2^-6)` ≈ 15 binades, minus the width of each head's own
# distribution); beyond it, the heads at both ends fail. The head with the smallest K and V
# sees them sink into the subnormals and finally to zero (a relative error of 1: its output
# is zero). The head with the largest K and V (`largest head`) has the *smallest* Q, since Q
# was divided by the same factor: its scores sink, and its output drifts toward a plain
# average of V that ignores Q. That head carries most of the output's norm, so the
# whole-output error (`rel_l2`) follows it, not the worst head.
#
# The same thing seen on K alone, per head, at the largest spread:

# %%
_, k, _ = data.make_qkv("head_ranges", batch=batch, seqlen_q=1, seqlen_k=seqlen, heads_q=heads_kv, heads_kv=heads_kv,
                        head_dim=head_dim, seed=seed, head_range_log2=max(spreads_log2) / 2)
per_head = per_head_round_trip(k, {"per tensor": ScaleStrategy(PerTensor()), "per KV head": ScaleStrategy(PerHead())})
splots.plot_per_head_error(per_head)
plt.show()
k_heads = record("k_heads_vs_e4m3", k_heads_vs_e4m3(per_head, coarse="per tensor", fine="per KV head"))
print(f"the smallest head's amax lies {k_heads['binades between largest and smallest head']:.1f} binades below the "
      f"largest's; e4m3 spans {k_heads['e4m3 binades, smallest subnormal to 448']:.1f} binades from its smallest "
      f"subnormal to 448")
per_head.pivot(index="head", columns="strategy", values=["sqnr", "head amax"])

# %% [markdown]
# The heads' ranges come in a fixed shuffled order (`data.head_factors`: a property of the
# "model", not sorted). A bar at 0 dB is a head quantized to all zeros: under the one per-tensor
# scale the smallest head lies more binades below the largest than e4m3 spans from 448 down to its
# smallest subnormal (both printed above), and falls below that subnormal entirely. Per KV head,
# every head keeps the same SQNR.

# %% [markdown]
# ## 2. What `expand` does to strides, and why FA3 accepts it
#
# FA3's `flash_api.cpp` checks a descale's shape `(batch, heads_kv)` and passes its two strides to
# the kernel, which reads `descale[b * stride(0) + h * stride(1)]`. Four descales (a scalar, and
# three layouts of the same per-head values), what that formula reads from each
# (`as_kernel_reads`: always the tensor's own values),
# and what a kernel that assumed contiguity, `descale[b * heads_kv + h]`, would read instead
# (`as_contiguous_reads`):

# %%
per_head_values = torch.rand(heads_kv, generator=torch.Generator().manual_seed(seed)) * 0.05 + 0.01
variants = {
    "scalar, expand": descale_from_scalar(0.0123, batch, heads_kv),
    "per head, expand": descale_from_heads(per_head_values, batch, layout="expand"),
    "per head, contiguous": descale_from_heads(per_head_values, batch, layout="contiguous"),
    "per head, transposed view": descale_from_heads(per_head_values, batch, layout="transposed"),
}
stride_table = descale_layout_table(variants)
record("descale_strides", {k: list(v) for k, v in stride_table["strides"].items()})
record("descale_storage_bytes", stride_table["bytes of storage"].to_dict())
stride_table

# %% [markdown]
# The expanded scalar is one float32 (4 bytes) however large the batch; stride 0 makes
# every `(b, h)` read the same address. A transposed view has strides `(1, batch)`:
# still valid, just another address formula. A kernel that assumed contiguity
# (`b * heads_kv + h`) would read wrong scales from every variant but the contiguous one, and
# past the end of the expanded ones' storage (one float32, or one per KV head: the `bytes of
# storage` column); FA3 does not assume it, and neither does fp8lab's kernel. Identical values
# must give identical attention, bit for bit, whatever the strides. The exact reference indexes
# with torch, which cannot depend on strides, so the test that matters is a kernel's: fp8lab's own
# FP8 kernel (`backend="triton"`; on a CPU the Triton interpreter), on the first `kernel_tokens`
# tokens, with each descale built on the device in its layout:

# %%
q, k, v = data.make_qkv("normal", batch=batch, seqlen_q=seqlen, heads_q=heads_q, heads_kv=heads_kv,
                        head_dim=head_dim, seed=seed)
q8, qd = quantize_for_fa3(q, ScaleStrategy(PerHead(heads_kv)), heads_kv)
k8, kd = quantize_for_fa3(k, ScaleStrategy(PerHead()), heads_kv)
v8, vd = quantize_for_fa3(v, ScaleStrategy(PerTensor()), heads_kv)
dev = "cuda" if torch.cuda.is_available() else "cpu"
n = min(seqlen, kernel_tokens)
agree = attention_layouts_agree(*(t[:, :n].to(dev) for t in (q8, k8, v8)), qd, kd, vd, backend="triton", causal=True)
record("layouts_bitwise_equal", all(agree.values()))
assert all(agree.values()), agree
print(f"on {n} tokens x {heads_q} query heads x {batch} sequences:")
print("contiguous against transposed per-head Q/K descales (V: a stride-0 scalar against a materialized one):",
      agree["contiguous = transposed"])
print("per-head descales expand()ed over the batch (strides (0, 1)) against the same values materialized:",
      agree["expand = contiguous"])

# %% [markdown]
# (vLLM's own FP8 FA3 test passes descales that are all 1.0, so a stride or indexing bug
# would slip through; fp8lab's tests draw random descales.)
#
# ## 3. GQA: which descale a query head reads
#
# With `heads_q` query heads and `heads_kv` KV heads, query head `h` reads KV head
# `h // (heads_q // heads_kv)`, and FA3 indexes Q's descale by that KV head too. So all
# query heads of a group share one Q descale: the max over the group.

# %%
qr, _, _ = data.make_qkv("head_ranges", batch=1, seqlen_q=seqlen, heads_q=heads_q, heads_kv=heads_kv,
                         head_dim=head_dim, seed=seed, head_range_log2=3.0)
reads = gqa_descale_reads(qr, heads_kv)  # sequence 0
splots.plot_gqa_mapping(heads_q, heads_kv, reads["Q amax per query head"].tolist())
plt.show()
reads

# %% [markdown]
# What sharing costs Q: per-query-head scales (not expressible in FA3) against the group's shared scale.

# %%
gqa = gqa_q_scale_cost(qr, heads_kv)
record("gqa_q_worst_head_sqnr_db", gqa["worst head SQNR (dB)"].to_dict())
record("gqa_q_sqnr_db", gqa["SQNR (dB)"].to_dict())
share = gqa.loc["per query head (not FA3)"] - gqa.loc["per KV group (FA3)"]
print(f"sharing Q's descale costs the worst head {share['worst head SQNR (dB)']:+.2f} dB and the whole Q "
      f"{share['SQNR (dB)']:+.2f} dB; one bit of precision is {20 * math.log10(2):.2f} dB")
gqa

# %% [markdown]
# Here the heads of a group lie within a few binades of each other, and sharing costs a small
# fraction of a bit (printed above). A float format's SQNR does not depend on the scale until values
# reach the subnormals, so what it costs here is only which values happen to round which way (and a
# head's largest value no longer stored as 448 exactly); that luck averages out over more tokens.
# Sharing costs in earnest only when the heads of one group lie far enough apart for the group's max
# scale to push its smallest head below the normal range: section 1's spreads, somewhat under
# e4m3's 15 binades.
#
# ## 4. Per-token scales, squeezed into `(batch, heads_kv)`
#
# A per-token K scale (vLLM's INT8 per-token-head cache does this) cannot be given to
# FA3. `descale_from_tokens` takes the max over each (sequence, KV head); the tokens are
# then requantized with it. With an attention sink (the first token, ×30), every other token
# of the head is quantized with the sink's scale:

# %%
_, ks, _ = data.make_qkv("sinks", batch=batch, seqlen_q=1, seqlen_k=seqlen, heads_q=heads_kv, heads_kv=heads_kv,
                         head_dim=head_dim, seed=seed)
reduction = token_reduction(ks, heads_kv)
fig, ax = plt.subplots(figsize=(8, 3.5))
sns.histplot(reduction["binades_lost"].flatten().numpy(), bins=40, ax=ax)
ax.set_xlabel("binades of FP8 range a token loses (log2 of head max / token amax)")
ax.set_ylabel("tokens x heads")
ax.set_title("Reducing per-token scales to FA3's layout: the sink sets everyone's scale")
plt.show()
record("token_reduction_sqnr_db", reduction["sqnr_db"])
record("token_reduction_median_binades_lost", reduction["median_binades_lost"])
print(f"the median token loses {reduction['median_binades_lost']:.2f} binades; log2(30) = {math.log2(30):.2f}")
pd.Series(reduction["sqnr_db"], name="K SQNR (dB)").to_frame()

# %% [markdown]
# Most tokens lose about `log2(30)` ≈ 5 binades. In a float format that costs little
# while they stay in the normal range, which is why the SQNR drop is small here; with
# larger sinks or smaller tokens, they reach the subnormals.
#
# ## 5. Checkpoint scales, the q_scale fallback and vLLM's defect
#
# vLLM resolves a checkpoint's optional `q_scale`, `k_scale`, `v_scale`, `kv_scale`,
# `prob_scale` (all descales) in `BaseKVCacheMethod.process_weights_after_loading`:
# (with an FP8 cache and scales not computed at run time) both k and v missing → 1.0; one
# kv_scale → both; missing q → k_scale, with a warning. A later block of the same function then sets q to 1.0 because the
# checkpoint had none, overwriting the fallback (vLLM PRs #38975 and #51534).
# `resolve_checkpoint_scales(..., emulate="vllm")` reproduces that; the default is the intended behaviour.

# %%
checkpoints = {
    "q, k, v": {"q_scale": 0.011, "k_scale": 0.023, "v_scale": 0.004},
    "k, v only": {"k_scale": 0.023, "v_scale": 0.004},
    "kv_scale only": {"kv_scale": 0.02},
    "nothing": {},
}
provenance = checkpoint_provenance(checkpoints, ("intended", "vllm"))
record("vllm_q_when_missing", provenance.loc[("k, v only", "vllm"), "q"])
provenance

# %% [markdown]
# What the defect costs. The premise of the fallback is that a layer's Q and K have
# similar ranges, so K's calibrated scale suits Q. Sweep that shared range over many
# orders of magnitude (Q and K each rescaled to it, and the softmax scale divided by the
# product of their two factors, so the exact attention stays the same at every point and
# only what FP8 sees changes), and
# quantize Q with the ideal descale (amax/448), the k_scale fallback, and vLLM's 1.0. (Because Q
# and K are rescaled to the same amax here, the fallback equals the ideal descale at every point:
# the two lines coincide by construction. This sweep tests the premise holding; where Q's range
# differs from K's, the fallback is off by that ratio and behaves like a mis-set static scale.)

# %%
q, k, v = data.make_qkv("normal", batch=1, seqlen_q=seqlen, heads_q=heads_q, heads_kv=heads_kv,
                        head_dim=head_dim, seed=seed, dtype=torch.float64)
q_amaxes = [float(a) for a in np.logspace(-3, 4, 8 if smoke else 15)]
fallback = fallback_sweep(q, k, v, q_amaxes, causal=True)
splots.plot_fallback_sweep(fallback)
plt.show()
pivot = fallback.pivot(index="q_amax", columns="mode", values="rel_l2")
record("fallback_rel_l2", {f"{a:.3g}": row.to_dict() for a, row in pivot.iterrows()})
display(fallback.pivot(index="q_amax", columns="mode", values=["rel_l2", "q_saturated"]))  # noqa: F821 - IPython

# %% [markdown]
# * Between roughly 0.1 and 448 the three agree: with descale 1.0, Q's values are
#   already inside e4m3's normal range, and a float format does not care where.
# * Above 448, a descale of 1.0 saturates every value beyond 448 (`q_saturated`): the
#   scores, and with them the attention, are wrong. The k_scale fallback would have
#   scaled Q into range.
# * Below about 0.1, Q's values fall into e4m3's subnormals and then to zero with a
#   descale of 1.0; the error climbs to the level of an attention that ignores Q.
#
# So the defect is silent for checkpoints whose activations happen to fit FP8 unscaled,
# and costly for those whose Q lives far from that range, which is exactly when a
# calibrated fallback matters.
#
# And the fallback itself has a cost where its premise fails. Keep Q's range at 10 and give K a
# range `q_over_k` times smaller or larger: the k_scale fallback is then off by that ratio.

# %%
ratios = [1 / 64, 1 / 8, 1.0, 8.0, 64.0]
broken = fallback_q_over_k(q, k, v, ratios, q_amax=10.0, causal=True)
record("fallback_q_over_k_rel_l2", {f"{r:g}": row.to_dict() for r, row in
                                    broken.pivot(index="q_over_k", columns="mode", values="rel_l2").iterrows()})
broken.pivot(index="q_over_k", columns="mode", values=["rel_l2", "q_saturated"])

# %% [markdown]
# With Q's range 8 or 64 times K's, K's descale clamps most of Q at 448 and the error climbs far
# above the ideal descale's; with Q's range smaller than K's it only wastes binades at the top,
# which e4m3 barely notices until Q's values reach the subnormals. vLLM's 1.0 does well here only
# because Q's range of 10 happens to fit e4m3 unscaled.
#
# ## Summary
#
# * Per-head descales are free in FA3 and make the error independent of how far apart
#   head ranges are; a per-tensor descale breaks once the spread approaches e4m3's range.
# * `expand()` gives stride 0: one float for a whole `(batch, heads_kv)` tensor (one per KV head
#   for per-head values). FA3
#   reads `b * stride(0) + h * stride(1)`, so expanded, contiguous and transposed descales
#   with the same values give bit-identical results.
# * Under GQA, Q's descale is the max over the query heads of a group.
# * Per-token scales reduce to FA3's layout by a max over tokens; the largest token
#   (a sink) then sets every token's scale.
# * vLLM's q_scale fallback to k_scale is overwritten with 1.0; that costs nothing while
#   Q fits e4m3 unscaled, and a lot when it does not.
#
# ## Exercises
#
# 1. A batch of 6 sequences and a model with 4 KV heads: its per-head K descale is stored as
#    `descale_from_heads(values, 6, layout="transposed")`. What are its strides, and how many bytes of
#    storage does it hold? Put `(strides, bytes)` in `answer_1`.
# 2. A model has 40 query heads and 8 KV heads, and Q's amax over query head `h` is `h + 1` (1 to 40).
#    Which KV head does query head 23 read, and what Q descale does FA3 use for it (per KV head, as
#    section 3 builds it)? Put `(kv_head, descale)` in `answer_2`.
# 3. A checkpoint holds `q_scale = 0.011` and one `kv_scale = 0.02` (a case the table of section 5
#    does not show). Which q, k and v descales does vLLM use, and does its defect touch them? Put
#    `(q, k, v)` as vLLM resolves them in `answer_3`.

# %%
answer_1 = None  # (strides, bytes of storage): replace None with your answer
answer_2 = None  # (kv head index, Q descale)
answer_3 = None  # (q, k, v)

# %% tags=["solution", "hide-input"]
# Solution (collapsed; it fills in only the answers you left at None):
# 1. A transposed view stores the (heads_kv, batch) = (4, 6) tensor row by row: the next sequence is
#    the next float and the next KV head 6 floats further, strides (1, 6); all 24 float32 are stored,
#    96 bytes (an expand() of the 4 per-head values would hold 16).
# 2. Query head h reads KV head h // (40 // 8): 23 // 5 = 4. Q's descale per KV head is the max amax
#    over its group, query heads 20 to 24, over 448: 25 / 448.
# 3. A kv_scale goes to both k and v, and a q_scale the checkpoint has is kept: the defect overwrites
#    only a fallback, so it does not touch this checkpoint.
_by_solution = unanswered(globals(), 1, 2, 3)  # before filling them in
if answer_1 is None:
    answer_1 = ((1, 6), 6 * 4 * 4)
if answer_2 is None:
    answer_2 = (23 // (40 // 8), 25 / 448)
if answer_3 is None:
    answer_3 = (0.011, 0.02, 0.02)

# %% [markdown]
# Check (the solutions are computed by the package):

# %%
layout_1 = descale_layout_table({"K": descale_from_heads(torch.rand(4) + 0.01, 6, layout="transposed")}).loc["K"]
solution_1 = (tuple(layout_1["strides"]), int(layout_1["bytes of storage"]))
assert (tuple(answer_1[0]), answer_1[1]) == solution_1, f"exercise 1: expected {solution_1}"
q40 = torch.arange(1.0, 41.0)[None, None, :, None].expand(1, 2, 40, 4)  # amax h + 1 over query head h
reads_2 = gqa_descale_reads(q40, 8).loc[23]
solution_2 = (int(reads_2["reads KV head"]), float(reads_2["shared Q descale (group max / 448)"]))
assert answer_2[0] == solution_2[0] and abs(answer_2[1] - solution_2[1]) <= 1e-6 * solution_2[1], \
    f"exercise 2: expected {solution_2}"
vllm3, intended3 = (resolve_checkpoint_scales({"q_scale": 0.011, "kv_scale": 0.02}, emulate=m, warn=False)
                    for m in ("vllm", "intended"))
solution_3 = (vllm3.q, vllm3.k, vllm3.v)
assert solution_3 == (intended3.q, intended3.k, intended3.v)  # the defect needs a missing q_scale
assert answer_3 == solution_3, f"exercise 3: expected {solution_3}"
print("exercises 1-3: correct")
print(exercise_note(_by_solution))

