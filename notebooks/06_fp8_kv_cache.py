# %% [markdown]
# # 06 · The FP8 KV cache, the way vLLM writes and reads it
#
# vLLM can store the KV cache in FP8 (`--kv-cache-dtype fp8`). On Hopper its
# FlashAttention backend then runs FA3's FP8 kernel: Q, K and V all in
# `float8_e4m3fn`, with per-tensor scales passed to the kernel as `(num_seqs, num_kv_heads)`
# tensors of *descales* (section 3).
#
# **You will learn**
# 1. what an FP8 cache buys in memory, computed for a real model shape;
# 2. how tokens are written into pages (`slot_mapping`, `reshape_and_cache_flash`) and read back (block tables);
# 3. where the scales come from (checkpoint, the 1.0 default, dynamic amax/200) and what each costs;
# 4. how much of the decode error is storage (K/V in FP8) and how much is FP8 *math* (Q and P in FP8 too),
#    and how that split changes between a sharp softmax (a few keys carry each query) and a mild one;
# 5. why `k_scale.expand(...)` (stride 0) gives exactly the same answer as a materialized descale;
# 6. what a decode step needs to be replayed from a CUDA graph, as vLLM replays it;
# 7. why FA3 splits a decode step's keys when there are few sequences, how many pieces it cuts them
#    into, and what that changes: the bits, not the accuracy.
#
# Everything here runs on a CPU through `fp8lab.kvcache` and the FA3 emulation in `fp8lab.reference`;
# section 7 captures a decode step on a GPU where there is one, and shows the H200's record either way;
# section 8 checks the split-KV emulation against the H200's record of vLLM's library.

# %% tags=["parameters"]
smoke: bool = False  # small sizes for CI
num_layers: int = 32  # memory arithmetic for a Llama-3-8B-like model
heads_q: int = 32  # query heads
heads_kv: int = 8  # KV heads (GQA group of 4)
head_dim: int = 128
block_size: int = 16  # tokens per cache page, vLLM's default
context_lens: tuple = (500, 1500, 4000)  # tokens already in the cache, one decode query each
long_context: int = 8000  # tokens of the long single sequence of section 8
gpu_memory_gib: float = 80.0  # memory left for the cache, for the capacity example
mild_q_std: float = 0.25  # query std of section 4's mild case (the sharp case's queries: std 3)
seed: int = 0

# %% [markdown]
# Set-up (safe to skip).

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from fp8lab import bench, env, kvcache
from fp8lab.notebooks import exercise_note, record, unanswered
from fp8lab.plots import accuracy as plots

if smoke:
    heads_q, heads_kv, head_dim, context_lens, long_context = 8, 2, 64, (37, 70), 1000
g = torch.Generator().manual_seed(seed)
sns.set_theme(style="whitegrid")

# %% [markdown]
# ## 1. What FP8 buys: twice the tokens
#
# Each token stores one K and one V vector per KV head per layer.

# %%
memory = kvcache.memory_table(num_layers, heads_kv, head_dim, gpu_memory_gib, ("auto", "fp8"))
record("tokens_ratio_fp8_vs_bf16", memory["tokens vs first"][1])
memory

# %% [markdown]
# ## 2. Writing pages, reading them back
#
# A sequence's tokens live in pages scattered through the cache; its *block
# table* lists them in order. New tokens arrive with a *slot* each,
# `page * block_size + offset`. We give every sequence random pages, the way
# an allocator after many requests would. `DecodeBatch.draw` draws the pages and the data together.

# %%
lens = list(context_lens)
# the pages draw from their own generator, so that block_size changes where tokens live, not the data
batch = kvcache.DecodeBatch.draw(lens, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, block_size=block_size,
                                 generator=g, page_generator=torch.Generator().manual_seed(seed + 1),
                                 q_std=3.0, k_outlier_channels=4, k_outlier_scale=12.0, v_std=0.5)

ax = sns.heatmap(batch.block_table.numpy(), cmap="viridis", cbar_kws={"label": "page index (-1 = unused)"})
ax.set(xlabel="position in block table (page # of the sequence)", ylabel="sequence", title="Block table: pages per sequence")
plt.show()

# %% [markdown]
# The data, drawn with the pages above: real K activations have a few large channels (here the
# first 4, 12 times the rest), V is tamer, and Q's values are typically larger than V's and than
# K's ordinary channels. We draw them so, with a fixed seed. The table gives each one's RMS and
# amax: K's outlier channels give K the largest amax, and at a small head dim, where 4 channels are
# a larger share, the largest RMS too. The cache holds one *varlen* batch: the sequences' tokens one
# after the other, with `cu_seqlens` marking where each starts.

# %%
kvcache.value_ranges(Q=batch.q, K=batch.k, V=batch.v)

# %% [markdown]
# ## 3. Where the scales come from
#
# * **checkpoint**: calibrated offline, here amax/448 of this very data (the best a static scale can do);
# * **checkpoint, k/v only**: many checkpoints ship `k_scale` and `v_scale` but no `q_scale`. vLLM
#   means Q to fall back to `k_scale`, then overwrites the fallback with 1.0 (notebook 03, section
#   5): both rows below, as vLLM runs it and as intended;
# * **1.0**: what vLLM uses when a checkpoint has no scales (k and v default to 1.0);
# * **dynamic**: vLLM's `calc_kv_scales` (deprecated 2026-03), amax/200 for Q and K, amax/100 for V,
#   from the first batch.
#
# All of them are *descales*: the FP8 codes times the scale give the values back.
#
# e4m3 saturates at 448 and its smallest subnormal is 2⁻⁹: a scale that is
# too small clips, one that is too large flushes small values to zero. The second table stores K and
# V with each choice and reads them back; `rel L2` is this notebook's error measure, ‖x̂ − x‖ / ‖x‖.

# %%
choices = kvcache.scale_choices(batch.q, batch.k, batch.v)  # label -> (q_scale, k_scale, v_scale)
caches = kvcache.caches_for(batch, choices)  # label -> (q_scale, the batch's K and V in an FP8 cache)
pd.DataFrame(choices, index=["q_scale", "k_scale", "v_scale"]).T

# %%
storage = kvcache.storage_table(batch, caches)
storage

# %% [markdown]
# ## 4. Decode: storage error against FP8 math
#
# One new query per sequence attends to its cached tokens.
# * **dequantized**: K/V read from FP8 and upcast, Q and the math stay high-precision (FlashInfer's approach): the storage error alone.
# * **fa3_fp8**: what vLLM runs on Hopper: Q quantized with the static q_scale, P cast to e4m3 inside the kernel, bf16 out.
#
# Both against exact float64 attention on the original data.

# %%
decode = kvcache.decode_error_table(batch, caches)  # against batch.exact(), float64 attention on the original data
record("decode_rel_l2", {f"{scales} | {math}": decode.loc[scales, math] for scales in decode.index
                         for math in kvcache.DECODE_MATH})
plots.plot_decode_errors(decode)
plt.show()
decode[["dequantized", "fa3_fp8"]]

# %% [markdown]
# The same table pair by pair, with what FA3's FP8 math adds to each row's storage error, and the
# error of each row's Q cast by itself (Q rounded with that row's `q_scale`, against Q):

# %%
ranges = kvcache.decode_error_summary(decode, storage)  # (min, max) over the rows
added, amplified, q_cast = ranges["fa3_fp8 adds"], ranges["dequantized / storage"], ranges["Q cast rel L2"]
print(f"fa3_fp8 adds {added[0]:+.0%} to {added[1]:+.0%} to the dequantized error; the dequantized "
      f"decode errors are {amplified[0]:.1f}x to {amplified[1]:.1f}x the largest storage error of section 3; "
      f"the Q casts' own errors span {q_cast[0]:.4f}-{q_cast[1]:.4f}")
record("decode_fa3_fp8_adds", decode["fa3_fp8 adds"].to_dict())
record("decode_fa3_fp8_vs_dequantized", decode["fa3_fp8 vs dequantized"].to_dict())
moved, storage_alone = ranges["fa3_fp8 vs dequantized"], ranges["dequantized"]
print(f"fa3_fp8 moves the output {moved[0]:.3f}-{moved[1]:.3f} (rel L2) from the dequantized output, against "
      f"{storage_alone[0]:.3f}-{storage_alone[1]:.3f} for storage alone from exact")
record("decode_q_cast_rel_l2", decode["Q cast rel L2"].to_dict())
decode

# %% [markdown]
# Read it pair by pair. `fa3_fp8 adds` compares two errors against exact attention: at the full
# sizes `fa3_fp8`'s is only a little larger than storage's. That does not mean FP8 math changes the
# output little: errors do not add, and `fa3_fp8 vs dequantized` (the second printed line) measures
# the change directly, at the full sizes a little under half the size of the storage error, mostly
# in directions that do not lengthen the distance from exact. (At the smoke sizes' two short
# sequences both figures move more with the draw; the first can even come out negative, where
# roundings happen to cancel.) The decode error is several times the storage error of section 3
# (the first line's second range): these queries give sharp softmaxes, in which a few keys carry
# each query's weight, and a small change to K moves weight between them (the mild case below
# measures how much that matters). The differences between the rows are within what another seed
# changes (their order moves from seed to seed).
#
# The k/v-only checkpoint is no exception, either way: its Q casts lose what every other row's does
# (the last range, `Q cast rel L2`), because Q's values sit inside e4m3's normal range unscaled, and
# `k_scale` (set by K's outlier channels) keeps them inside it too. Where its decode errors differ
# from the full checkpoint's, it is by which values happened to round which way, as between any two
# rows. Where Q lies far from that range, vLLM's 1.0 does cost; notebook 03, section 5 sweeps Q's
# range to show where.
#
# ### A sharp softmax and a mild one
#
# How the decode error splits between storage and FP8 math depends on how many keys carry each
# query's weight. Beside the batch above (the *sharp* case), the *mild* case keeps its cache and
# pages and draws new queries, N(0, `mild_q_std`²) instead of N(0, 9): smaller scores, attention
# spread over many keys. Both get checkpoint scales (amax/448 of their own Q, K and V: the same K
# and V, so the same storage error). `effective keys` is 1 / Σ p² of the exact softmax, the median
# over queries and heads; the last two columns give the two errors in units of the storage
# rounding (`storage rel L2`): what storage alone costs the output, and how far FP8 math moves it.

# %%
mild = batch.with_random_queries(mild_q_std, torch.Generator().manual_seed(seed + 3))  # its own generator
sharp_mild = kvcache.decode_error_split({"sharp": batch, "mild": mild})
record("decode_sharp_vs_mild", sharp_mild.to_dict(orient="index"))
for case, r in sharp_mild.iterrows():
    print(f"{case}: {r['effective keys']:.1f} effective keys of {r['keys per query']:.0f} per query; storage alone costs "
          f"the output {r['dequantized / storage']:.1f}x its own rounding, FP8 math moves it "
          f"{r['fa3_fp8 vs dequantized / storage']:.1f}x that rounding")
sharp_mild

# %% [markdown]
# In the sharp case the softmax amplifies both errors. A few keys carry each query, so K's rounding
# moves weight between them and storage costs the output several times its own rounding; FP8 math
# adds Q's rounding, which moves the scores the same way (the P cast costs little there: the
# row's largest P, a power of two, is exact; notebook 05 (b)). At the full sizes storage's share
# is the larger, FP8 math moving the output about half as far; at the smoke sizes' two short
# sequences the two come closer and their order moves with the draw. In the mild case nothing
# amplifies: each output averages many V rows, whose rounding errors average down with it, so
# storage costs the output about one rounding; and FP8 math moves it about one rounding as well,
# its Q and P casts each perturbing the many weights by about a rounding, which the output averages
# as it averages V's. There FP8 math costs about as much as storage does, where with a sharp
# softmax it is storage, amplified, that sets the error.

# %% [markdown]
# ## 5. Stride 0 is not a special case
#
# vLLM passes `layer._k_scale.expand((num_seqs, num_kv_heads))`: a view whose
# strides are `(0, 0)`. FA3 reads `descale[b * stride0 + h * stride1]`, so the
# view and a materialized copy hold the same values at the same indices. The emulation below
# reads descales through torch indexing, so for it the equality holds by construction: it shows
# the contract with a *non-trivial* scale. Whether a kernel keeps it, reading raw pointers with
# strides, is what the GPU suite's `test_descale_layouts_agree_bitwise` checks (stride-0,
# transposed and materialized descales, bit for bit, for every FP8 provider on the H200:
# fa3-fwd, vLLM's library and our kernels, `results/h200/run25/call2`), and notebook 03
# (section 2) runs our kernel with each layout here.

# %%
qs, cache = caches[kvcache.CHECKPOINT]
call = kvcache.fa3_decode_call(batch, cache, qs)  # FP8 Q, K, V, the scales, cu_seqlens: what FA3 is handed
q_desc, k_desc, v_desc = call.descales()  # scalars expand()ed, as vLLM makes them
print("k_descale strides:", k_desc.stride(), "  materialized:", k_desc.contiguous().stride())
same = kvcache.stride0_equals_materialized(call)
record("stride0_equals_materialized", same)
assert same

# %% [markdown]
# ## 6. Why not e5m2?
#
# e5m2 has more range but one mantissa bit less. FA3's FP8 kernel takes e4m3
# only, so vLLM refuses `fp8_e5m2` for the FlashAttention backend
# (`FlashAttentionBackend.get_fp8_dtype_for_flashattn` in vllm/v1/attention/backends/flash_attn.py
# maps "fp8" and "fp8_e4m3" to `torch.float8_e4m3fn` and raises "Unrecognized FP8 dtype" for the
# rest). `kvcache.cache_torch_dtype` follows that rule:

# %%
try:
    kvcache.cache_torch_dtype("fp8_e5m2")
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# ## 7. Decode steps in a CUDA graph
#
# vLLM replays its decode steps from CUDA graphs: the launches are recorded once, and each step
# copies new values into the same tensors and replays them. Two things follow for the attention call.
# * Nothing may be read back to the host while a graph is captured (no `.item()`, no `.tolist()`):
#   the descale values cannot be checked, and the lengths in `cu_seqlens` cannot be read.
# * Each launch is fixed when it is captured: its grid and the buffers it writes. FA2's and our
#   Triton kernel's grids are sized from `max_seqlen_q` and `max_seqlen_k`, bounds that every replay
#   must stay within. FA3 on Hopper runs a varlen call on persistent programs, one grid of SMs that
#   reads the lengths on the device (`VarlenDynamicPersistentTileScheduler`); it uses the bounds on
#   the host, to pick the number of KV splits and size their buffers (section 8). vLLM, which calls
#   decode with `seqused_k` and a block table rather than `cu_seqlens_k`, therefore computes FA3's
#   scheduler metadata ahead of the step and caps the splits under CUDA graphs (32 by default:
#   `VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH` in 2025, now the attention config's
#   `flash_attn_max_num_splits_for_cuda_graph`), so that each replay fits what was captured.
#
# `fp8lab.attention` does the same. Under capture a varlen call needs both bounds, and it runs only
# on providers that read the lengths on the device. Gating says which, here on a simulated Hopper
# with every provider installed:

# %%
capture_table = kvcache.captured_varlen_providers(head_dim)  # a simulated H100, every provider installed
record("captured_varlen_fp8_providers", capture_table.loc[capture_table["captured"] == "runs", "provider"].tolist())
with pd.option_context("display.max_colwidth", 100):
    display(capture_table)  # noqa: F821 - IPython

# %% [markdown]
# On a GPU, the cell below captures this notebook's decode step (section 5's FP8 inputs, stride-0
# descales, one query per sequence), replays it on a new query, and compares it with an eager call.
# On any machine it then shows what the H200 recorded (`results/h200/bench_v26_api_graph.*`, made by
# `scripts/probe_api_graph.py`): each provider captured a varlen call with lengths 412 and 612 under
# bounds of 612. The replay then ran with lengths 512 and 512 copied into `cu_seqlens` (the last
# column), and its output had the eager call's bits.

# %%
import fp8lab

if torch.cuda.is_available():
    try:  # section 5's call on the GPU; the next step's query, and other lengths over the same tokens and bound
        next_q8 = kvcache.scaled_fp8_quant(torch.randn(batch.q.shape, generator=g), qs)
        same = kvcache.graph_replay_equals_eager(call, next_q8, lens[::-1], device="cuda")
        record("graph_live_replay_equals_eager", same)
        print("replay equals the eager call:", same)
    except fp8lab.BackendError as err:  # a GPU without an FP8 attention provider
        print(err)
recorded = kvcache.recorded_graph_replays(env.results_dir())
record("graph_h200_captured", dict(zip(recorded["call"], recorded["replay_equals_eager"].astype(bool))))
recorded

# %% [markdown]
# Capture costs only the reference: it loops over the sequences on the host. SDPA's providers
# already refuse FP8 inputs eagerly, FA2's too, and the Gluon kernel takes batched calls only (the
# `why not, eager` column), which is also why the H200's record has no varlen row for it.

# %% [markdown]
# ## 8. Split-KV decode: few sequences, keys cut into pieces
#
# FA3 runs one tile of work per (sequence, KV head), each on one SM (streaming multiprocessor, the
# GPU's unit of compute; an H200 has 132). A decode step has one query token per sequence, so a
# batch of a few sequences gives a few tiles, and most of the SMs would sit idle. FA3 then *splits*
# each sequence's keys: the splits run as tiles of their own, each over a run of key blocks, and a
# second kernel combines their partial outputs.
# `fp8lab.reference.fa3_decode_splits` gives the count each sequence gets in vLLM's eager call:
# FA3's heuristic (`num_splits_heuristic`, which counts a varlen batch as one sequence) sets a cap,
# and its scheduler gives each sequence `ceil(its key blocks / blocks_per_sm)` splits, with
# `blocks_per_sm = ceil(1.1 × heads_kv × all key blocks / SMs)`. The key block is vLLM's for decode
# at this head dim (`fa3_block_n(..., decode=True)`). This notebook's batch, one long sequence, and
# batches of it:

# %%
from fp8lab.reference import fa3_block_n

NUM_SMS = 132  # an H100 or H200 SXM
decode_block = fa3_block_n(head_dim, flavor="vllm", decode=True)
split_cases = {"this notebook's batch": lens, "one long sequence": [long_context],
               "4 long sequences": [long_context] * 4, "16 long sequences": [long_context] * 16}
split_counts = kvcache.split_counts_table(split_cases, heads_kv, decode_block, num_sms=NUM_SMS)
for label, splits in split_counts["splits"].items():
    record(f"decode_splits | {label}", splits)
print(f"{heads_kv} KV heads, head dim {head_dim}: {decode_block} keys per block, {NUM_SMS} SMs")
split_counts.drop(columns="splits")

# %% [markdown]
# Alone, the long sequence gets the most splits; the more sequences share the step, the fewer each
# gets, and none once their tiles alone keep the SMs busy.
#
# Each split runs its key blocks from scratch, with its own running max and sum (so its own scale for
# P's e4m3 cast), and writes an fp32 partial output `out_i` with its log-sum-exp `lse_i`. FA3's
# combine kernel then merges them: `lse = log Σ exp(lse_i - max) + max`, `out = Σ exp(lse_i - lse) ·
# out_i`. `attention_fa3_fp8(..., num_splits=...)` emulates that, and `paged_decode` splits as FA3
# would unless told `num_splits=1`. Does splitting cost accuracy? Both against exact attention, on
# section 4's batch (checkpoint scales) and on a long sequence drawn the same way:

# %%
g_long = torch.Generator().manual_seed(seed + 2)  # its own generators: the rest of the notebook draws as before
long_batch = kvcache.DecodeBatch.draw([long_context], heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim,
                                      block_size=block_size, generator=g_long,
                                      page_generator=torch.Generator().manual_seed(seed + 4),  # as section 2's
                                      q_std=3.0, k_outlier_channels=4, k_outlier_scale=12.0, v_std=0.5)
long_qs, long_ks, long_vs = kvcache.scale_choices(long_batch.q, long_batch.k, long_batch.v)[kvcache.CHECKPOINT]
split_effect = kvcache.split_effect_table({  # name -> (batch, its FP8 cache, q_scale)
    "this notebook's batch": (batch, caches[kvcache.CHECKPOINT][1], caches[kvcache.CHECKPOINT][0]),
    "one long sequence": (long_batch, long_batch.cache(long_ks, long_vs), long_qs),
})
record("decode_split_effect", split_effect.drop(columns="splits per sequence").to_dict(orient="index"))
split_effect

# %% [markdown]
# Where a sequence is split, a share of its bf16 outputs changes (the last column): each split casts
# its P against its own running max, and the combine rounds once more in fp32. Where none is, the
# outputs are the same bits. Either way the error against exact attention stays where it was: the
# splits move outputs by a rounding, up or down, and the error does not grow with them. So an
# emulation that measures accuracy need not split, but one that is to give vLLM's bits must split as
# FA3 does. The H200's record says how closely it then does
# (`results/h200/decode_fidelity_validate.json`, `scripts/gpu_decode_fidelity.py`): paged FP8 decode
# through vLLM's FA3 library, against the emulation split as `fa3_decode_splits` predicts and not
# split, as the fraction of each sequence's bf16 outputs equal bit for bit, in vLLM's eager call
# (`num_splits=0`):

# %%
from fp8lab.reference.experiments import decode_split_record

validation = decode_split_record(env.results_dir())  # one row per (case, num_splits passed, sequence)
plots.plot_decode_splits(kvcache.decode_split_points(validation))
plt.show()
record("decode_split_h200", kvcache.decode_split_eager_record(validation))
h200 = kvcache.decode_split_ranges(validation)
print(f"split sequences: {h200['at predicted'][0]:.0%}-{h200['at predicted'][1]:.0%} of the bf16 outputs equal split "
      f"as predicted, {h200['without split'][0]:.0%}-{h200['without split'][1]:.0%} without splitting; with num_splits "
      f"{' or '.join(map(str, h200['forced num_splits']))} passed (a cap on the count; vLLM passes one under "
      f"CUDA graphs), at least {h200['forced at predicted']:.0%} split as predicted")
kvcache.decode_split_summary(validation)

# %% [markdown]
# Where FA3 splits, the emulation gives the library's bits on most outputs only when it splits the
# same way (the table: means over the sequences FA3 splits); where FA3 does not split (1 on the x axis),
# the two emulations are one and the same. The rest of the outputs differ from the library's by
# roundings inside its kernel that the emulation does not reproduce.

# %% [markdown]
# The long-context figures of the summary, from the H200's record (`bench.long_context_headline`;
# notebook 05 (e) and notebook 09 (g), (h)): rel L2 against exact attention on V + 1 inputs, d = 128,
# by number of keys, for upstream FA3 (fa3-fwd), the worse of our kernels, our worst tile with
# `pv_flush=True`, and vLLM's FA3 library (`vllm-so`):

# %%
headline = bench.long_context_headline(env.results_dir())
pd.DataFrame(headline["probe"]).T

# %% [markdown]
# ## Summary
# * An FP8 cache holds twice the tokens of a bf16 one.
# * Scales decide the storage error only where they push values out of e4m3's normal range: a
#   scale of 1.0 would saturate values beyond 448 and send those below 2^-6 into the subnormals.
#   These K and V lie inside the range even unscaled, so every choice leaves the same e4m3 rounding
#   error here (a rel. L2 of about 0.026, 2^-5.3: e4m3 rounds by at most 1/17 of a value, about
#   half that in RMS terms). Storing a value as ±448 is not clipping it: with amax/448, each tensor's largest
#   value lands there exactly (`clipped %` counts the values beyond 448 before the cast).
# * FA3's FP8 path adds Q's and P's quantization on top of the storage error, where every Q scale
#   keeps Q in range (vLLM's 1.0 for k/v-only checkpoints included). How the two compare depends on
#   the softmax (section 4): where a few keys carry each query, the softmax amplifies both and the
#   storage error sets the decode error (at full size FP8 math moves the output about half as far,
#   and the error against exact grows less); where attention spreads over many keys, each costs the
#   output about one e4m3 rounding, FP8 math about as much as storage. Over long contexts FA3 adds
#   one more error: Hopper's FP8 MMA keeps about
#   13 bits of O's running sum, so upstream FA3's error (fa3-fwd) grows with the keys, where vLLM's
#   FA3, which adds each key block to O in fp32, stays flat (the table above the summary);
#   `fp8lab.attention(..., pv_flush=True)` does the same with our kernels.
# * Stride-0 descales are exactly as good as materialized ones.
# * A decode step replayed from a CUDA graph reads nothing back: what its kernels launch is fixed at
#   capture (from `max_seqlen_q/k`, and for FA3 the split count), and they read the lengths on the
#   device at each replay.
# * With few sequences a decode step has too few (sequence, KV head) tiles for the SMs, so FA3 splits
#   each sequence's keys and combines the partial outputs by their log-sum-exps: a long sequence alone
#   gets many splits, a batch that fills the SMs none. Splitting moves bits, not accuracy, and an
#   emulation gives vLLM's bits only if it splits the same way (section 8, the H200's record).
#
# ## Exercises
# 1. A checkpoint's scales were calibrated on V, but the V it meets in serving is 100 times larger.
#    Keep the scales of section 3 (`choices`) and quantize `batch.v * 100` with them: which choices
#    saturate V? Set `answer_1` to the set of their labels.
# 2. Set `block_size = 64` in the parameters and rerun (vLLM's FlashAttention backend takes
#    multiples of 16). Does any error change, and why? (No cell: compare the tables. Hint: which
#    block sets the emulation's key blocks, the page or FA3's tile?)
# 3. Pass `q_scale=qs / 8` to `kvcache.paged_decode` for the checkpoint scales (`qs` and `cache` of
#    section 5): by what factor does `fa3_fp8`'s error against `batch.exact()` grow? Set `answer_3`.
#    What fraction of Q's values saturate at 448?
# 4. A decode batch holds sequences of 2000 tokens each, with 8 KV heads at head dim 128 (vLLM's
#    decode key block there: `fa3_block_n(128, flavor="vllm", decode=True)`), on an H200's 132 SMs.
#    From how many sequences on does FA3 split none of them? Use section 8's formula; set `answer_4`.

# %%
answer_1 = None  # a set of labels of `choices`
answer_3 = None  # a factor
answer_4 = None  # a number of sequences

# %% tags=["solution", "hide-input"]
# Solution (collapsed; it fills in only an answer left at None): static scales do not follow the
# data, so every choice computed from the old V saturates; 1.0 still fits wherever 100·V stays
# below 448. A Q descale 8 times too small clips every Q value above 448 · qs / 8, and with them the
# largest scores, which the softmax weighs most. (Exercise 2: no error changes; pages change where
# tokens live, never their values, and the pages draw from their own generator.) A sequence stays
# whole once blocks_per_sm = ceil(1.1 * heads_kv * all key blocks / SMs) reaches its own key blocks:
# with B sequences of n blocks each, once 1.1 * 8 * n * B / 132 > n - 1.
_by_solution = unanswered(globals(), 1, 3, 4)  # before filling them in
saturating_1 = kvcache.saturating_scales(choices, batch.v, factor=100)
misset_3 = kvcache.q_scale_misset(batch, caches[kvcache.CHECKPOINT][1], caches[kvcache.CHECKPOINT][0], factor=8)
first_4, splits_4 = kvcache.first_batch_without_splits(2000, 8, fa3_block_n(128, flavor="vllm", decode=True),
                                                       num_sms=132, max_batch=64)
if answer_1 is None:
    answer_1 = saturating_1
if answer_3 is None:
    answer_3 = misset_3["growth"]
if answer_4 is None:
    answer_4 = first_4

# %%
assert set(answer_1) == saturating_1, f"exercise 1: expected {sorted(saturating_1)}"
assert abs(answer_3 / misset_3["growth"] - 1) < 0.02, f"exercise 3: expected {misset_3['growth']:.2f}"  # 2 digits do
assert answer_4 == first_4, f"exercise 4: expected {first_4} (splits per sequence by batch size: {splits_4})"
print(f"1: {sorted(answer_1)} saturate   3: the error grows {answer_3:.1f}x; {misset_3['saturated']:.0%} of Q's values "
      f"saturate   4: from {answer_4} sequences of 2000 tokens on, none is split "
      f"({splits_4.get(first_4 - 1, 1)} splits each at {first_4 - 1})")
print(exercise_note(_by_solution))
