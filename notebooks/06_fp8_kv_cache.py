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
# 6. what a decode step needs to be replayed from a CUDA graph, as vLLM replays it.
#
# Everything here runs on a CPU through `fp8lab.kvcache` and the FA3 emulation in `fp8lab.reference`;
# section 7 captures a decode step on a GPU where there is one, and shows the H200's record where not.

# %% tags=["parameters"]
smoke: bool = False  # small sizes for CI
num_layers: int = 32  # memory arithmetic for a Llama-3-8B-like model
heads_q: int = 32  # query heads
heads_kv: int = 8  # KV heads (GQA group of 4)
head_dim: int = 128
block_size: int = 16  # tokens per cache page, vLLM's default
context_lens: tuple = (500, 1500, 4000)  # tokens already in the cache, one decode query each
gpu_memory_gib: float = 80.0  # memory left for the cache, for the capacity example
seed: int = 0

# %% [markdown]
# Set-up (safe to skip).

# %%
import pandas as pd
import seaborn as sns
import torch

from fp8lab import kvcache, metrics
from fp8lab.notebooks import exercise_note, record, unanswered

if smoke:
    heads_q, heads_kv, head_dim, context_lens = 8, 2, 64, (37, 70)
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
rows = []
for label, (qs, cache) in caches.items():
    for math in kvcache.DECODE_MATH:
        out = kvcache.paged_decode(q, cache, block_table, lens, math=math, q_scale=qs)
        rows.append({"scales": label, "math": math, "rel L2 vs exact": metrics.rel_l2(out.double(), exact)})
decode = pd.DataFrame(rows)
record("decode_rel_l2", {f"{r['scales']} | {r['math']}": r["rel L2 vs exact"] for r in rows})
ax = sns.barplot(decode, y="scales", x="rel L2 vs exact", hue="math")
ax.set(xscale="log", xlabel="relative L2 error of the decode output (log scale)", ylabel="",
       title="Decode error: FP8 storage alone vs FA3's FP8 math")
decode

# %% [markdown]
# Read it pair by pair: `fa3_fp8` adds 1-11 % to each row's `dequantized` error, so storage is most
# of the decode error and Q's and P's casts add the rest. The decode error is several times the
# storage error of section 3 because these random Q and K give sharp softmaxes, in which a few keys
# carry each query's weight, and a small change to K moves weight between them. The differences
# between the rows are within what another seed changes (their order moves from seed to seed).
# The k/v-only checkpoint costs nothing here either way: Q's values sit inside e4m3's normal range
# unscaled, and `k_scale` (set by K's outlier channels) keeps them inside it too. Where Q lies far
# from that range, vLLM's 1.0 does cost; notebook 03, section 5 sweeps Q's range to show where.

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
# only, so vLLM refuses `fp8_e5m2` for the FlashAttention backend:

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
# * Each kernel's grid is fixed when it is captured. It is sized from `max_seqlen_q` and
#   `max_seqlen_k`, bounds that every replay must stay within. That is why FA3's varlen entry point
#   takes them next to `cu_seqlens`.
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
from fp8lab import bench, env

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
# ## Summary
# * An FP8 cache holds twice the tokens of a bf16 one.
# * Scales decide the storage error only where they push values out of e4m3's normal range: a
#   scale of 1.0 would saturate values beyond 448 and send those below 2^-6 into the subnormals.
#   These K and V lie inside the range even unscaled, so every choice leaves the same e4m3 rounding
#   error here (a rel. L2 of about 0.026, 2^-5.3: e4m3 rounds by at most 1/17 of a value, about
#   half that in RMS terms). Storing a value as ±448 is not clipping it: with amax/448, each tensor's largest
#   value lands there exactly (`clipped %` counts the values beyond 448 before the cast).
# * FA3's FP8 path adds Q's and P's quantization on top of the storage error: a few per cent of it
#   here, where every Q scale keeps Q in range (vLLM's 1.0 for k/v-only checkpoints included). Over long contexts it
#   adds one more: Hopper's FP8 MMA keeps about 13 bits of O's running sum, so upstream FA3
#   (fa3-fwd) reaches a rel. L2 of 0.44 at 64k keys on V + 1 inputs, where vLLM's FA3, which adds
#   each key block to O in fp32, stays at 0.0024; `fp8lab.attention(..., pv_flush=True)` does the
#   same with our kernels (notebook 05 (e), notebook 08 (o)).
# * Stride-0 descales are exactly as good as materialized ones.
# * A decode step replayed from a CUDA graph reads nothing back: its kernels are sized by
#   `max_seqlen_q/k` at capture, and read the lengths from `cu_seqlens` on the device at each replay.
#
# ## Exercises
# 1. A checkpoint's scales were calibrated on V, but the V it meets in serving is 100 times larger.
#    Keep the scales of section 3 and quantize `v * 100` with them: which choices saturate V? Set
#    `answer_1` to the set of their labels.
# 2. Set `block_size = 1` in the parameters and rerun. Does any error change, and why? (No cell:
#    compare the tables.)
# 3. Pass `q_scale=qs / 8` to `kvcache.paged_decode` for the checkpoint scales: by what factor does
#    `fa3_fp8`'s error grow? Set `answer_3`. What fraction of Q's values saturate at 448?

# %%
answer_1 = None  # a set of scale_choices labels
answer_3 = None  # a factor

# %% tags=["solution", "hide-input"]
# Solution (collapsed; it fills in only an answer left at None): static scales do not follow the
# data, so every choice computed from the old V saturates; 1.0 still fits wherever 100·V stays
# below 448. A Q descale 8 times too small clips every Q value above 448 · qs / 8, and with them the
# largest scores, which the softmax weighs most. (Exercise 2: no error changes; pages change where
# tokens live, never their values, and the pages draw from their own generator.)
_by_solution = unanswered(globals(), 1, 3)  # before filling them in
if answer_1 is None:
    answer_1 = {label for label, (_, _, vs) in scale_choices.items() if (v * 100 / vs).abs().max() > 448}
qs_ck, cache_ck = caches["checkpoint (amax/448)"]
if answer_3 is None:
    small = kvcache.paged_decode(q, cache_ck, block_table, lens, q_scale=qs_ck / 8)
    answer_3 = metrics.rel_l2(small.double(), exact) / decode.set_index(["scales", "math"]).loc[
        ("checkpoint (amax/448)", "fa3_fp8"), "rel L2 vs exact"]

# %%
saturating = {label for label, (_, _, vs) in scale_choices.items() if bool((v * 100 / vs).abs().max() > 448)}
assert set(answer_1) == saturating, f"exercise 1: expected {sorted(saturating)}"
base = metrics.rel_l2(kvcache.paged_decode(q, cache_ck, block_table, lens, q_scale=qs_ck).double(), exact)
grown = metrics.rel_l2(kvcache.paged_decode(q, cache_ck, block_table, lens, q_scale=qs_ck / 8).double(), exact)
assert abs(answer_3 - grown / base) < 1e-6 * grown / base, f"exercise 3: expected {grown / base:.2f}"
print(f"1: {sorted(answer_1)} saturate   3: the error grows {answer_3:.1f}x; "
      f"{float(((q / (qs_ck / 8)).abs() > 448).double().mean()):.0%} of Q's values saturate")
print(exercise_note(_by_solution))

