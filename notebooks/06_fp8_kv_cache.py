# %% [markdown]
# # 06 · The FP8 KV cache, the way vLLM writes and reads it
#
# vLLM can store the KV cache in FP8 (`--kv-cache-dtype fp8`). On Hopper its
# FlashAttention backend then runs FA3's FP8 kernel: Q, K and V all in
# `float8_e4m3fn`, with per-tensor scales passed as `(num_seqs, num_kv_heads)`
# descales.
#
# **You will learn**
# 1. what an FP8 cache buys in memory, computed for a real model shape;
# 2. how tokens are written into pages (`slot_mapping`, `reshape_and_cache_flash`) and read back (block tables);
# 3. where the scales come from (checkpoint, the 1.0 default, dynamic amax/200) and what each costs;
# 4. how much of the decode error is storage (K/V in FP8) and how much is FP8 *math* (Q and P in FP8 too);
# 5. why `k_scale.expand(...)` (stride 0) gives exactly the same answer as a materialized descale;
# 6. what a decode step needs to be replayed from a CUDA graph, as vLLM replays it;
# 7. why FA3 splits a decode step's keys when there are few sequences, how many pieces it cuts them
#    into, and what that changes: the bits, not the accuracy.
#
# Everything here runs on a CPU through `fp8lab.kvcache` and the FA3 emulation in `fp8lab.reference`;
# section 7 captures a decode step on a GPU where there is one, and shows the H200's record where not;
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
seed: int = 0

# %% [markdown]
# Set-up (safe to skip).

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from fp8lab import bench, env, kvcache, metrics
from fp8lab.notebooks import exercise_note, record, unanswered

if smoke:
    heads_q, heads_kv, head_dim, context_lens, long_context = 8, 2, 64, (37, 70), 1000
g = torch.Generator().manual_seed(seed)
sns.set_theme(style="whitegrid")

# %% [markdown]
# ## 1. What FP8 buys: twice the tokens
#
# Each token stores one K and one V vector per KV head per layer.

# %%
rows = []
for name in ("auto", "fp8"):
    dtype = kvcache.cache_torch_dtype(name)
    per_token = kvcache.kv_bytes_per_token(num_layers, heads_kv, head_dim, dtype)
    rows.append({"kv_cache_dtype": name, "stored as": str(dtype).replace("torch.", ""),
                 "bytes/token": per_token, "tokens in cache": int(gpu_memory_gib * 2**30 // per_token)})
memory = pd.DataFrame(rows)
record("tokens_ratio_fp8_vs_bf16", memory["tokens in cache"][1] / memory["tokens in cache"][0])
memory

# %% [markdown]
# ## 2. Writing pages, reading them back
#
# A sequence's tokens live in pages scattered through the cache; its *block
# table* lists them in order. New tokens arrive with a *slot* each,
# `page * block_size + offset`. We give every sequence random pages, the way
# an allocator after many requests would.

# %%
lens = list(context_lens)
# the pages draw from their own generator, so that block_size changes where tokens live, not the data
block_table, slot_mapping, num_blocks = kvcache.random_pages(lens, block_size, torch.Generator().manual_seed(seed + 1))

ax = sns.heatmap(block_table.numpy(), cmap="viridis", cbar_kws={"label": "page index (-1 = unused)"})
ax.set(xlabel="position in block table (page # of the sequence)", ylabel="sequence", title="Block table: pages per sequence")
plt.show()

# %% [markdown]
# The data: real K activations have a few large channels, V is tamer, and Q's values are
# typically larger than both (in RMS; K's outlier channels give K the largest amax). We draw them
# so, with a fixed seed. The cache holds one *varlen* batch: the sequences' tokens one after the
# other, with `cu_seqlens` marking where each starts.

# %%
total = sum(lens)
k = torch.randn(total, heads_kv, head_dim, generator=g, dtype=torch.float64)
k[..., :4] *= 12  # outlier channels in K
v = torch.randn(total, heads_kv, head_dim, generator=g, dtype=torch.float64) * 0.5
q = torch.randn(len(lens), heads_q, head_dim, generator=g, dtype=torch.float64) * 3

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
# too small clips, one that is too large flushes small values to zero.

# %%
dyn_q, dyn_k, dyn_v = kvcache.vllm_dynamic_scales(q, k, v)
ck = (q.abs().max().item() / 448, k.abs().max().item() / 448, v.abs().max().item() / 448)
scale_choices = {
    "checkpoint (amax/448)": ck,
    "checkpoint k/v only, vLLM (q 1.0)": (1.0, ck[1], ck[2]),
    "checkpoint k/v only, intended (q = k_scale)": (ck[1], ck[1], ck[2]),
    "default 1.0": (1.0, 1.0, 1.0),
    "dynamic (amax/200, /100)": (dyn_q, dyn_k, dyn_v),
}
caches = {}
for label, (qs, ks, vs) in scale_choices.items():
    cache = kvcache.PagedKVCache.allocate(num_blocks, block_size, heads_kv, head_dim, k_scale=ks, v_scale=vs)
    cache.write(k, v, slot_mapping)
    caches[label] = (qs, cache)

# %%
rows = []
for label, (qs, cache) in caches.items():
    k8, v8, _ = cache.gather(block_table, lens)
    for name, x, x8, s in (("K", k, k8, cache.k_scale), ("V", v, v8, cache.v_scale)):
        stored = x8.double() * s.double()
        rows.append({"scales": label, "tensor": name, "scale": s.item(),
                     "clipped %": 100 * ((x / s.double()).abs() > 448 * (1 + 2**-20)).double().mean().item(),  # past rounding
                     "stored as ±448 %": 100 * (x8.double().abs() == 448).double().mean().item(),
                     "flushed to 0 %": 100 * ((x8.double() == 0) & (x != 0)).double().mean().item(),
                     "rel L2 of storage": metrics.rel_l2(stored, x)})
storage = pd.DataFrame(rows)
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
from fp8lab.reference import attention_exact

# k and v were written sequence after sequence, so they are already a varlen batch.
cu_q = torch.arange(len(lens) + 1, dtype=torch.int32)
cu_k = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
exact = attention_exact(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
rows, outs = [], {}
for label, (qs, cache) in caches.items():
    for math in kvcache.DECODE_MATH:
        out = outs[label, math] = kvcache.paged_decode(q, cache, block_table, lens, math=math, q_scale=qs).double()
        rows.append({"scales": label, "math": math, "rel L2 vs exact": metrics.rel_l2(out, exact)})
decode = pd.DataFrame(rows)
record("decode_rel_l2", {f"{r['scales']} | {r['math']}": r["rel L2 vs exact"] for r in rows})
ax = sns.barplot(decode, y="scales", x="rel L2 vs exact", hue="math")
ax.set(xscale="log", xlabel="relative L2 error of the decode output (log scale)", ylabel="",
       title="Decode error: FP8 storage alone vs FA3's FP8 math")
decode

# %% [markdown]
# The same table pair by pair, with what FA3's FP8 math adds to each row's storage error, and the
# error of each row's Q cast by itself (Q rounded with that row's `q_scale`, against Q):

# %%
pairs = decode.pivot_table(index="scales", columns="math", values="rel L2 vs exact", sort=False)[["dequantized", "fa3_fp8"]]
pairs["fa3_fp8 adds"] = pairs["fa3_fp8"] / pairs["dequantized"] - 1
pairs["fa3_fp8 vs dequantized"] = [metrics.rel_l2(outs[label, "fa3_fp8"], outs[label, "dequantized"]) for label in pairs.index]
pairs["Q cast rel L2"] = [metrics.rel_l2(kvcache.scaled_fp8_quant(q, qs).double() * qs, q)
                          for qs in (scale_choices[label][0] for label in pairs.index)]
worst_storage = storage["rel L2 of storage"].max()
added = pairs["fa3_fp8 adds"]
print(f"fa3_fp8 adds {added.min():+.0%} to {added.max():+.0%} to the dequantized error; the dequantized "
      f"decode errors are {pairs['dequantized'].min() / worst_storage:.1f}x to "
      f"{pairs['dequantized'].max() / worst_storage:.1f}x the largest storage error of section 3; "
      f"the Q casts' own errors span {pairs['Q cast rel L2'].min():.4f}-{pairs['Q cast rel L2'].max():.4f}")
record("decode_fa3_fp8_adds", added.to_dict())
record("decode_fa3_fp8_vs_dequantized", pairs["fa3_fp8 vs dequantized"].to_dict())
print(f"fa3_fp8 moves the output {pairs['fa3_fp8 vs dequantized'].min():.3f}-{pairs['fa3_fp8 vs dequantized'].max():.3f} "
      f"(rel L2) from the dequantized output, against {pairs['dequantized'].min():.3f}-{pairs['dequantized'].max():.3f} "
      "for storage alone from exact")
record("decode_q_cast_rel_l2", pairs["Q cast rel L2"].to_dict())
pairs

# %% [markdown]
# Read it pair by pair. `fa3_fp8 adds` compares two errors against exact attention: at the full
# sizes `fa3_fp8`'s is only a little larger than storage's. That does not mean FP8 math changes the
# output little: errors do not add, and `fa3_fp8 vs dequantized` (the second printed line) measures
# the change directly, a little under half the size of the storage error, mostly in directions
# that do not lengthen the distance from exact. (At the smoke sizes' two short sequences the first
# figure moves more with the draw; it can even come out negative, where roundings happen to
# cancel.) The decode error is several times the storage error of section 3 (the first line's
# second range) because these random Q and K give sharp softmaxes, in which a few keys carry each
# query's weight, and a small change to K moves weight between them. The differences between
# the rows are within what another seed changes (their order moves from seed to seed).
#
# The k/v-only checkpoint is no exception, either way: its Q casts lose what every other row's does
# (the last range, `Q cast rel L2`), because Q's values sit inside e4m3's normal range unscaled, and
# `k_scale` (set by K's outlier channels) keeps them inside it too. Where its decode errors differ
# from the full checkpoint's, it is by which values happened to round which way, as between any two
# rows. Where Q lies far from that range, vLLM's 1.0 does cost; notebook 03, section 5 sweeps Q's
# range to show where.

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
qs, cache = caches["checkpoint (amax/448)"]
k_desc, v_desc = cache.descales(len(lens))
print("k_descale strides:", k_desc.stride(), "  materialized:", k_desc.contiguous().stride())
from fp8lab.reference import attention_fa3_fp8

k8, v8, _ = cache.gather(block_table, lens)
q8 = kvcache.scaled_fp8_quant(q, qs)
q_desc = torch.tensor(qs, dtype=torch.float32).expand(len(lens), heads_kv)
args = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
out_view = attention_fa3_fp8(q8, k8, v8, q_desc, k_desc, v_desc, **args)
out_copy = attention_fa3_fp8(q8, k8, v8, q_desc.contiguous(), k_desc.contiguous(), v_desc.contiguous(), **args)
record("stride0_equals_materialized", bool(torch.equal(out_view, out_copy)))
assert torch.equal(out_view, out_copy)

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
#   scheduler metadata ahead of the step and caps the splits under CUDA graphs
#   (`VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH`, 32 by default), so that each replay fits what
#   was captured.
#
# `fp8lab.attention` does the same. Under capture a varlen call needs both bounds, and it runs only
# on providers that read the lengths on the device. Gating says which, here on a simulated Hopper
# with every provider installed:

# %%
from fp8lab.backends import gating

hopper = gating.Device((9, 0), "simulated H100")
eager = gating.Request("fp8", head_dim, varlen=True)
captured = gating.Request("fp8", head_dim, varlen=True, lengths_on_device=True)
rows = []
for name, spec in gating.PROVIDERS.items():
    before, _ = gating.provider_reasons(spec, hopper, eager, env={})
    after, _ = gating.provider_reasons(spec, hopper, captured, env={})
    rows.append({"provider": name, "backend": spec.backend, "eager": "runs" if not before else "no",
                 "captured": "runs" if not after else "no", "why not, eager": "; ".join(before),
                 "what capture adds": "; ".join(r for r in after if r not in before)})
capture_table = pd.DataFrame(rows)
record("captured_varlen_fp8_providers", [r["provider"] for r in rows if r["captured"] == "runs"])
with pd.option_context("display.max_colwidth", 100):
    display(capture_table)  # noqa: F821 - IPython

# %% [markdown]
# On a GPU, the cell below captures this notebook's decode step (section 5's FP8 inputs, stride-0
# descales, one query per sequence), replays it on a new query, and compares it with an eager call.
# Without a GPU it shows what the H200 recorded (`results/h200/bench_v26_api_graph.*`, made by
# `scripts/probe_api_graph.py`): each provider captured a varlen call with lengths 412 and 612 under
# bounds of 612. The replay then ran with lengths 512 and 512 copied into `cu_seqlens` (the last
# column), and its output had the eager call's bits.

# %%
import fp8lab

if torch.cuda.is_available():
    n = len(lens)  # stride-0 descales made on the device, as vLLM's expand() makes them
    stride0 = [torch.tensor(float(x), dtype=torch.float32, device="cuda").expand(n, heads_kv)
               for x in (qs, cache.k_scale, cache.v_scale)]
    dev_args = [t.cuda() for t in (q8, k8, v8)] + stride0
    cu_args = dict(cu_seqlens_q=cu_q.cuda(), cu_seqlens_k=cu_k.cuda(), max_seqlen_q=1, max_seqlen_k=max(lens))

    def decode_step():
        q_, k_, v_, dq, dk, dv = dev_args
        return fp8lab.attention(q_, k_, v_, q_descale=dq, k_descale=dk, v_descale=dv, causal=True, **cu_args)

    try:
        graph, replayed = bench.capture_graph(decode_step)  # an eager warm-up call, then the capture
        dev_args[0].copy_(kvcache.scaled_fp8_quant(torch.randn(q.shape, generator=g), qs))  # the next step's query
        new_lens = lens[::-1]  # other lengths, the same tokens and bound: read from cu_seqlens at the replay
        cu_args["cu_seqlens_k"].copy_(torch.tensor([0, *torch.tensor(new_lens).cumsum(0).tolist()], dtype=torch.int32))
        graph.replay()
        same = bool(torch.equal(replayed, decode_step()))
        record("graph_live_replay_equals_eager", same)
        print("replay equals the eager call:", same)
    except fp8lab.BackendError as err:  # a GPU without an FP8 attention provider
        print(err)
recorded = pd.DataFrame(bench.load_results(env.results_dir() / "bench_v26_api_graph.json")["rows"])
recorded = recorded[recorded["result"] != "eager failed"]
record("graph_h200_captured", {f"{r.backend} {'varlen' if r.varlen else 'batched'}": bool(r.replay_equals_eager)
                               for r in recorded.itertuples()})
recorded[["backend", "varlen", "result", "replay_equals_eager", "eager_lengths"]].rename(
    columns={"eager_lengths": "cu_seqlens at the replay"})

# %% [markdown]
# Capture costs only the reference: it loops over the sequences on the host. SDPA's providers
# already refuse FP8 inputs eagerly, FA2's too, and the Gluon kernel takes batched calls only (the
# `why not, eager` column), which is also why the H200's record has no varlen row for it.

# %% [markdown]
# ## 8. Split-KV decode: few sequences, keys cut into pieces
#
# FA3 runs one tile of work per (sequence, KV head), each on one SM. A decode step has one query
# token per sequence, so a batch of a few sequences gives a few tiles, and most of an H200's 132 SMs
# would sit idle. FA3 then *splits* each sequence's keys: the splits run as tiles of their own, each
# over a run of key blocks, and a second kernel combines their partial outputs.
# `fp8lab.reference.fa3_decode_splits` gives the count each sequence gets in vLLM's eager call:
# FA3's heuristic (`num_splits_heuristic`, which counts a varlen batch as one sequence) sets a cap,
# and its scheduler gives each sequence `ceil(its key blocks / blocks_per_sm)` splits, with
# `blocks_per_sm = ceil(1.1 × heads_kv × all key blocks / SMs)`. The key block is vLLM's for decode
# at this head dim (`fa3_block_n(..., decode=True)`). This notebook's batch, one long sequence, and
# batches of it:

# %%
from fp8lab.reference import fa3_block_n, fa3_decode_splits

NUM_SMS = 132  # an H100 or H200 SXM
decode_block = fa3_block_n(head_dim, flavor="vllm", decode=True)


def runs(xs: list[int]) -> str:
    """A list as text, `x × n` where it repeats one value."""
    return f"{xs[0]} × {len(xs)}" if len(xs) > 1 and len(set(xs)) == 1 else ", ".join(map(str, xs))


split_cases = {"this notebook's batch": lens, "one long sequence": [long_context],
               "4 long sequences": [long_context] * 4, "16 long sequences": [long_context] * 16}
rows = []
for label, case_lens in split_cases.items():
    splits = fa3_decode_splits(case_lens, heads_kv, decode_block, num_sms=NUM_SMS)
    rows.append({"case": label, "keys per sequence": runs(case_lens),
                 "key blocks": runs([-(-n // decode_block) for n in case_lens]),
                 "tiles without splits": len(case_lens) * heads_kv, "splits per sequence": runs(splits),
                 "tiles with splits": heads_kv * sum(splits)})
    record(f"decode_splits | {label}", splits)
print(f"{heads_kv} KV heads, head dim {head_dim}: {decode_block} keys per block, {NUM_SMS} SMs")
pd.DataFrame(rows).set_index("case")

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
g_long = torch.Generator().manual_seed(seed + 2)  # its own generator: the rest of the notebook draws as before
long_table, long_slots, long_blocks = kvcache.random_pages([long_context], block_size, g_long)
k_long = torch.randn(long_context, heads_kv, head_dim, generator=g_long, dtype=torch.float64)
k_long[..., :4] *= 12  # outlier channels in K, as in section 2
v_long = torch.randn(long_context, heads_kv, head_dim, generator=g_long, dtype=torch.float64) * 0.5
q_long = torch.randn(1, heads_q, head_dim, generator=g_long, dtype=torch.float64) * 3
long_cache = kvcache.PagedKVCache.allocate(long_blocks, block_size, heads_kv, head_dim,
                                           k_scale=k_long.abs().max().item() / 448, v_scale=v_long.abs().max().item() / 448)
long_cache.write(k_long, v_long, long_slots)
exact_long = attention_exact(q_long, k_long, v_long, causal=True, cu_seqlens_q=torch.tensor([0, 1], dtype=torch.int32),
                             cu_seqlens_k=torch.tensor([0, long_context], dtype=torch.int32))
split_inputs = {  # q, cache, block table, lengths, q_scale, exact attention
    "this notebook's batch": (q, caches["checkpoint (amax/448)"][1], block_table, lens, ck[0], exact),
    "one long sequence": (q_long, long_cache, long_table, [long_context], q_long.abs().max().item() / 448, exact_long),
}
rows = []
for label, (q_, cache_, table_, lens_, qs_, exact_) in split_inputs.items():
    with_splits = kvcache.paged_decode(q_, cache_, table_, lens_, q_scale=qs_)  # FA3's splits: the default
    no_split = kvcache.paged_decode(q_, cache_, table_, lens_, q_scale=qs_, num_splits=1)
    rows.append({"case": label, "splits per sequence": runs(fa3_decode_splits(lens_, heads_kv, decode_block)),
                 "rel L2, FA3's splits": metrics.rel_l2(with_splits.double(), exact_),
                 "rel L2, no split": metrics.rel_l2(no_split.double(), exact_),
                 "bf16 outputs equal": (with_splits == no_split).double().mean().item()})
split_effect = pd.DataFrame(rows).set_index("case")
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

validation = decode_split_record(env.results_dir())
eager_splits = validation[validation.num_splits == 0]
points = eager_splits.melt(id_vars=["case", "head_dim", "predicted_splits"], value_vars=["equal_at_predicted", "equal_without_split"],
                    var_name="emulation", value_name="equal")
points["emulation"] = points["emulation"].map({"equal_at_predicted": "split as predicted", "equal_without_split": "not split"})
fig, ax = plt.subplots(figsize=(9, 4))
sns.scatterplot(points, x="predicted_splits", y="equal", hue="emulation", style="emulation", s=60, ax=ax)
ax.set(xlabel="splits FA3 gives the sequence (fa3_decode_splits)", ylabel="fraction of bf16 outputs bit-equal\nto vLLM's library",
       ylim=(0, 1), title="H200, paged FP8 decode, one point per sequence: vLLM's bits need FA3's splits")
plt.show()
split_seqs = eager_splits[eager_splits.predicted_splits > 1]
record("decode_split_h200", {"predicted_splits": eager_splits.predicted_splits.tolist(),
                             "equal_at_predicted": eager_splits.equal_at_predicted.tolist(),
                             "equal_without_split": eager_splits.equal_without_split.tolist()})
forced = validation[validation.num_splits > 0]
print(f"split sequences: {split_seqs.equal_at_predicted.min():.0%}-{split_seqs.equal_at_predicted.max():.0%} of the "
      f"bf16 outputs equal split as predicted, {split_seqs.equal_without_split.min():.0%}-"
      f"{split_seqs.equal_without_split.max():.0%} without splitting; with num_splits "
      f"{' or '.join(map(str, sorted(set(forced.num_splits))))} passed (a cap on the count; vLLM passes one under "
      f"CUDA graphs), at least {forced.equal_at_predicted.min():.0%} split as predicted")
by_case = eager_splits.groupby(["case", "head_dim"], sort=False)
summary = by_case.agg(sequences=("sequence", "size"), splits=("predicted_splits", lambda x: runs(list(x))))
means = split_seqs.groupby(["case", "head_dim"], sort=False)[["equal_at_predicted", "equal_without_split"]].mean()
summary.join(means.add_suffix(" (split sequences, mean)"))

# %% [markdown]
# Where FA3 splits, the emulation gives the library's bits on most outputs only when it splits the
# same way (the table: means over the sequences FA3 splits); where FA3 does not split (1 on the x axis),
# the two emulations are one and the same. The rest of the outputs differ from the library's by
# roundings inside its kernel that the emulation does not reproduce.

# %% [markdown]
# The long-context figures of the summary, from the H200's record (`bench.long_context_headline`;
# notebook 05 (e) and notebook 08 (n), (o)): rel L2 against exact attention on V + 1 inputs, d = 128,
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
# * FA3's FP8 path adds Q's and P's quantization on top of the storage error (section 4: it moves
#   the output a little under half as far as storage does, though the error against exact grows
#   less), where every Q scale keeps Q in range (vLLM's 1.0 for k/v-only checkpoints included). Over long contexts it adds one more: Hopper's FP8 MMA keeps about
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
#    Keep the scales of section 3 and quantize `v * 100` with them: which choices saturate V? Set
#    `answer_1` to the set of their labels.
# 2. Set `block_size = 64` in the parameters and rerun (vLLM's FlashAttention backend takes
#    multiples of 16). Does any error change, and why? (No cell: compare the tables. Hint: which
#    block sets the emulation's key blocks, the page or FA3's tile?)
# 3. Pass `q_scale=qs / 8` to `kvcache.paged_decode` for the checkpoint scales: by what factor does
#    `fa3_fp8`'s error grow? Set `answer_3`. What fraction of Q's values saturate at 448?
# 4. A decode batch holds sequences of 2000 tokens each, with 8 KV heads at head dim 128 (vLLM's
#    decode key block there: `fa3_block_n(128, flavor="vllm", decode=True)`), on an H200's 132 SMs.
#    From how many sequences on does FA3 split none of them? Use section 8's formula; set `answer_4`.

# %%
answer_1 = None  # a set of scale_choices labels
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
if answer_1 is None:
    answer_1 = {label for label, (_, _, vs) in scale_choices.items() if (v * 100 / vs).abs().max() > 448}
qs_ck, cache_ck = caches["checkpoint (amax/448)"]
if answer_3 is None:
    small = kvcache.paged_decode(q, cache_ck, block_table, lens, q_scale=qs_ck / 8)
    answer_3 = metrics.rel_l2(small.double(), exact) / decode.set_index(["scales", "math"]).loc[
        ("checkpoint (amax/448)", "fa3_fp8"), "rel L2 vs exact"]
if answer_4 is None:
    blocks_each = -(-2000 // fa3_block_n(128, flavor="vllm", decode=True))  # key blocks per sequence
    answer_4 = next(b for b in range(1, 1000) if -(-(1.1 * 8 * blocks_each * b) // 132) >= blocks_each)

# %%
saturating = {label for label, (_, _, vs) in scale_choices.items() if bool((v * 100 / vs).abs().max() > 448)}
assert set(answer_1) == saturating, f"exercise 1: expected {sorted(saturating)}"
base = metrics.rel_l2(kvcache.paged_decode(q, cache_ck, block_table, lens, q_scale=qs_ck).double(), exact)
grown = metrics.rel_l2(kvcache.paged_decode(q, cache_ck, block_table, lens, q_scale=qs_ck / 8).double(), exact)
assert abs(answer_3 - grown / base) < 1e-6 * grown / base, f"exercise 3: expected {grown / base:.2f}"
block_128 = fa3_block_n(128, flavor="vllm", decode=True)
splits_by_batch = {b: fa3_decode_splits([2000] * b, 8, block_128, num_sms=132) for b in range(1, 65)}
solution_4 = min(b for b in splits_by_batch if all(max(splits_by_batch[c]) == 1 for c in splits_by_batch if c >= b))
assert answer_4 == solution_4, f"exercise 4: expected {solution_4} (splits per sequence by batch size: " \
    f"{ {b: s[0] for b, s in splits_by_batch.items()} })"
print(f"1: {sorted(answer_1)} saturate   3: the error grows {answer_3:.1f}x; "
      f"{float(((q / (qs_ck / 8)).abs() > 448).double().mean()):.0%} of Q's values saturate   "
      f"4: from {answer_4} sequences of 2000 tokens on, none is split "
      f"({splits_by_batch[answer_4 - 1][0]} splits each at {answer_4 - 1})")
print(exercise_note(_by_solution))

