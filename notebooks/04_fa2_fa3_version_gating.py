# %% [markdown]
# # 04 · FA2 or FA3? Version gating, providers, and what FP8 needs
#
# `fp8lab.attention(q, k, v, ...)` runs on whatever is installed: vLLM's FA3,
# its bare FA3 library, the fa3-fwd wheel, upstream FA3, FA2 in three forms,
# PyTorch SDPA (cuDNN included), our Triton or Gluon kernel, or the reference. Which one
# runs is decided by a pure function you can call with machines you do not have.
#
# **You will learn**
# 1. the capability matrix: which provider runs which dtype, head dim and GPU;
# 2. what this machine has, and what each kind of call would use here;
# 3. what an Ampere, Ada, Hopper or Blackwell GPU (or a CPU) would use, simulated;
# 4. what happens when FP8 inputs meet FA2: the error, and the `dequantize` fallback;
# 5. how vLLM decides between FA2 and FA3 (`get_flash_attn_version`), rule by rule.
#
# Every table below is computed by `fp8lab.backends` while the notebook runs.

# %% tags=["parameters"]
smoke: bool = False  # small sizes for CI
head_dims: list = [64, 72, 96, 128, 192, 256, 320]  # head dims in the decision tables (72: FP8 needs a multiple of 16; 320 > 256)
seqlen: int = 1024  # tokens per sequence in the FP8 -> FA2 dequantize example
heads_q: int = 8  # query heads in that example; a quarter of them as KV heads
seed: int = 0

# %% [markdown]
# Set-up (safe to skip).

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from fp8lab import metrics, reference
from fp8lab.backends import BackendError, attention, doctor, gating
from fp8lab.backends.gating import PROVIDERS, Device, Request, decide
from fp8lab.notebooks import exercise_note, record, unanswered

if smoke:
    seqlen, head_dims = 128, [64, 72, 128, 320]
torch.manual_seed(seed)
pd.set_option("display.max_colwidth", 200)

# %% [markdown]
# ## 1. The capability matrix
#
# Each provider is one row of data in `gating.PROVIDERS`; the rules it is checked
# against come from the kernels' own sources (FA3's `hopper/flash_api.cpp`:
# head dim at most 256 and a multiple of 8, or of 16 for FP8; FP8 only on
# compute capability 9.x). The table is generated from that data.

# %%
matrix = pd.DataFrame(gating.capability_rows())
matrix

# %% [markdown]
# Columns: **GPU** where the provider runs at all (compute capability), **FP8 needs** where it runs
# FP8 inputs; **head dims** the rule it checks; **varlen** whether it takes packed sequences with
# `cu_seqlens`; **lse** whether it returns the logsumexp of each row (a backward pass or a merge of
# partial results needs it); **FP8 P V sum**: how it adds up the products P·V over the key
# blocks (below).

# %% [markdown]
# Only three things run FP8 attention: FA3 (four ways to get it, all Hopper
# only), our own kernels (the Triton kernel is written for the FP8 tensor cores from
# compute capability 8.9, sm_89, on: Ada, Hopper, Blackwell; measured only on Hopper.
# On Hopper the Gluon kernel comes first, batched calls only), and the reference (slow,
# anywhere). FA2 and SDPA take 16-bit inputs.
#
# The last column says how each sums P·V (the probabilities times V, the second of attention's two
# matrix products) over the key blocks for FP8 inputs (`gating.FP8_PV_ACCUMULATION`). The tensor
# cores' FP8 matrix multiply-accumulate (MMA) on Hopper does not accumulate in full fp32: it keeps
# about 14 significant bits (DeepSeek-V3's report; the model notebook 05 (e) fits to an H200 cuts
# 13 bits below the largest magnitude). Upstream FA3 ("mma") keeps O in it across the whole
# context, so its error grows with the context; vLLM's FA3 adds each block to O in fp32
# ("flush"); our kernels do either ("option"; the switch came in the kernels' version v28,
# docs/kernel-notes.md). `attention(..., pv_flush=True)` passes over the "mma" providers
# (notebook 05 (e), notebook 09 (h)).

# %%
pd.Series(gating.FP8_PV_ACCUMULATION, name="FP8 P V sum")

# %% [markdown]
# ## 2. This machine
#
# `fp8lab doctor` (or `doctor.report()`) probes each provider once: found, and
# where, or why not.

# %%
rep = doctor.report()
print(f"device: {rep['device']['name']} ({rep['device']['architecture']}), "
      f"FlashAttention version by vLLM's rule: {rep['flash_attn_version']['version']}")
for note in rep["flash_attn_version"]["notes"]:
    print("  -", note)
found = pd.DataFrame(rep["providers"])[["backend", "name", "found", "detail"]]
found

# %%
here = pd.DataFrame(rep["decisions"]).pivot(index="head_dim", columns="dtype", values="choice")
record("04.decisions_this_machine", {f"{d}/{h}": here.loc[h, d] for h in here.index for d in here.columns})
here

# %% [markdown]
# ## 3. Other machines, simulated
#
# `gating.decide(device, available, request)` needs no GPU: give it a compute
# capability and a set of installed providers. Below, every machine has every
# provider of `gating.PROVIDERS` installed (printed first: every FA3 and FA2 build,
# vLLM's and upstream's, the SDPA providers, our two kernels and the reference), so only
# the GPU differs. `doctor.decision_table` calls `decide` for each dtype and head dim.

# %%
MACHINES = {
    "A100 (8.0)": Device((8, 0)), "L40S (8.9)": Device((8, 9)), "H100 (9.0)": Device((9, 0)),
    "B200 (10.0)": Device((10, 0)), "CPU": Device(None),
}
everything = set(PROVIDERS)
print("installed on every simulated machine:", ", ".join(PROVIDERS))
sim = pd.DataFrame([{"machine": machine, **row} for machine, dev in MACHINES.items()
                    for row in doctor.decision_table(dev, everything, head_dims=tuple(head_dims), env={})])
sim["backend"] = sim.backend.fillna("error")
table = sim.pivot_table(index="machine", columns=["dtype", "head_dim"], values="choice", aggfunc="first")
table.loc[list(MACHINES)]

# %%
codes = {"fa3": 0, "fa2": 1, "triton": 2, "sdpa": 3, "reference": 4, "error": 5}
grid = sim.assign(code=sim.backend.map(codes)).pivot_table(index="machine", columns=["dtype", "head_dim"], values="code")
grid = grid.loc[list(MACHINES)]
fig, ax = plt.subplots(figsize=(1.0 + 0.55 * grid.shape[1], 3.2))
palette = sns.color_palette("Set2", len(codes))
sns.heatmap(grid, cmap=palette, vmin=-0.5, vmax=len(codes) - 0.5, cbar=False, linewidths=0.5,
            annot=sim.pivot_table(index="machine", columns=["dtype", "head_dim"], values="backend", aggfunc="first")
            .loc[list(MACHINES)], fmt="", annot_kws={"fontsize": 7}, ax=ax)
ax.set(xlabel="input dtype - head dim", ylabel="machine (compute capability)",
       title="FP8 attention runs as FP8 only on Hopper's FA3 or our kernels (auto backend, all providers installed)")
plt.tight_layout()
plt.show()

# %% [markdown]
# Read it row by row: Hopper uses FA3 for both dtypes up to head dim 256; Ampere, Ada and Blackwell
# use FA2 for bf16 (Blackwell falls back from FA3, as in vLLM without FA4); FP8 on Ada and Blackwell
# goes to the Triton kernel, on Ampere (no FP8 tensor cores) nowhere; head dim 72 fails every FP8
# kernel's multiple-of-16 rule, and 320 is beyond every FlashAttention, so bf16 there falls to SDPA
# on every GPU and FP8 has no kernel. On the CPU, `auto` ends at the reference, which takes any
# head dim (on a GPU it never picks the slow reference; ask for `backend="reference"`).

# %% [markdown]
# ## 4. FP8 into FA2
#
# vLLM refuses an FP8 KV cache without FA3 ("FlashAttention does not support
# fp8 kv-cache on this device"). fp8lab refuses FP8 inputs to FA2 before any
# kernel runs, and says why and what to do. Here on a simulated A100:

# %%
ampere = decide(MACHINES["A100 (8.0)"], everything, Request("fp8", 128), backend="fa2", env={})
print(ampere.error_message("fa2"))
dequantized = decide(MACHINES["A100 (8.0)"], everything, Request("fp8", 128, fp8_fallback="dequantize"),
                     backend="fa2", env={})
print("with fp8_fallback='dequantize':", dequantized.label())

# %% [markdown]
# The same through `attention()` on this machine, caught and shown. On a CPU the only reason given
# is that FA2 needs a GPU: a provider this machine cannot run is not examined further. On any GPU,
# Hopper included, the reason is the FP8 refusal above (`backend="fa2"` never runs FP8):

# %%
heads_kv = max(1, heads_q // 4)
qkv = reference.quantize_qkv(torch.randn(1, seqlen, heads_q, 128), torch.randn(1, seqlen, heads_kv, 128),
                             torch.randn(1, seqlen, heads_kv, 128), "head")  # e4m3 + per-head descales
q8, k8, v8, qd, kd, vd = qkv.q, qkv.k, qkv.v, qkv.q_descale, qkv.k_descale, qkv.v_descale
try:
    attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd, backend="fa2")
except BackendError as e:
    print(f"{type(e).__name__}: {e}")

# %% [markdown]
# With `fp8_fallback="dequantize"` a bf16-only provider runs on
# `q8.float() * q_descale` rounded to bf16. It is correct, but it is no longer
# FP8 attention: no FP8 MMA, no P cast, no speed-up. Here SDPA stands in for FA2
# (same bf16 inputs; it runs on any machine). Compare both against exact attention on
# the FP8 inputs (the dequantized values, in float64):

# %%
descales = dict(q_descale=qd, k_descale=kd, v_descale=vd)
exact = reference.attention_exact(q8, k8, v8, **descales)
fallback = attention(q8, k8, v8, **descales, backend="sdpa", fp8_fallback="dequantize")
fa3_like = reference.attention_fa3_fp8(q8, k8, v8, **descales)
errors = pd.Series({
    "a bf16 provider (here SDPA, standing in for FA2) on dequantized bf16 (fp8_fallback='dequantize')":
        record("04.dequantize_fallback_rel_l2", metrics.rel_l2(fallback, exact)),
    "FA3's FP8 forward (emulated: P cast to e4m3)": record("04.fa3_emulation_rel_l2", metrics.rel_l2(fa3_like, exact)),
}, name="rel L2 vs exact")
errors.to_frame()

# %% [markdown]
# The fallback is *more* accurate than FP8 attention: it only rounds to bf16,
# while FA3 also casts P to e4m3. What FP8 attention buys is speed, which the
# fallback gives up.

# %% [markdown]
# ## 5. How vLLM decides
#
# `vllm/v1/attention/backends/fa_utils.py::get_flash_attn_version`
# (vllm-project/vllm; summarized in the facts file, section 2):
#
# 1. default: FA3 if the major capability is 9 and FA3 is supported, else FA2
#    (today: FA4 on major 10 when available);
# 2. an override (`VLLM_FLASH_ATTN_VERSION`, now `attention_config.flash_attn_version`);
# 3. Blackwell (major >= 10) falls back from FA3; ALiBi forces FA2;
# 4. if the result is not supported (`_is_fa2_supported`: capability >= 8.0;
#    `_is_fa3_supported`: 9.x, in `vllm_flash_attn/flash_attn_interface.py`),
#    it returns None: no FlashAttention.
#
# `flash_attn_supports_fp8()` is "the version is 3 and the device is 9.x".
# fp8lab mirrors these rules in `gating.flash_attn_version` with
# `FP8LAB_FLASH_ATTN_VERSION` as the override, without FA4 and without ALiBi (fp8lab's calls take
# no ALiBi slopes):

# %%
pd.DataFrame(gating.flash_attn_version_rows(MACHINES, everything))

# %% [markdown]
# Two places where the rule has teeth: forcing FA3 on an A100 gives *no*
# FlashAttention (vLLM's check asserts, the assertion is caught and the rule returns None;
# fp8lab falls through to the next backend), and forcing FA2 on an H100 turns FA3's FP8 off even
# though the GPU could run it: vLLM would then have no FP8 attention at all (where fp8lab's `auto`
# goes instead is exercise 2).
#
# ## Summary
#
# - FP8 attention needs FP8 tensor cores and a kernel that uses them: FA3 on
#   Hopper, or our kernels: the Triton one from 8.9 (Ada, Hopper, Blackwell), the Gluon one on Hopper
#   (batched calls). FA2 never runs FP8.
# - `gating.decide` is a pure function of device, installed providers and
#   request; `fp8lab doctor` prints its table for this machine, and
#   `--simulate 8.9 --providers a,b` for any other.
# - vLLM's FA version rule: FA3 on 9.x if available, else FA2; an override;
#   Blackwell falls back; unsupported means none.
# - Bad inputs (dtype mixes, head dims, descales, cu_seqlens) fail before any
#   kernel runs, with the reason.
#
# ## Exercises
#
# Each exercise has a cell for your answer, a hidden solution cell (it fills in only an answer
# left at None), and a check, which says whether it checked your answer or the solution's.
#
# **1.** An H100 has only the fa3-fwd wheel installed, and for this exercise nothing else, not even
# PyTorch's SDPA or fp8lab's own kernels (`available={"fa3-fwd"}`). Which `backend:provider`
# runs FP8 inputs with head dim 80? And fp16 inputs instead?

# %%
answer_1 = None  # (fp8 label, fp16 label), two labels such as "fa2:flash-attn-2" or "error"

# %% tags=["solution", "hide-input"]
# Solution: 80 is a multiple of 16, so FA3 takes FP8 at d=80 (padded to the 96 tile);
# fa3-fwd is built without fp16 (FLASHATTENTION_DISABLE_FP16) and nothing else is installed.
_by_solution = unanswered(globals(), 1)  # before filling them in
if answer_1 is None:  # fills in only an answer you left at None
    answer_1 = ("fa3:fa3-fwd", "error")

# %%
only_fa3_fwd = {"fa3-fwd"}
assert answer_1 == (decide(MACHINES["H100 (9.0)"], only_fa3_fwd, Request("fp8", 80), env={}).label(),
                    decide(MACHINES["H100 (9.0)"], only_fa3_fwd, Request("fp16", 80), env={}).label()), answer_1
print("1: correct")
print(exercise_note(_by_solution))

# %% [markdown]
# **2.** On an H100 with everything installed, `FP8LAB_FLASH_ATTN_VERSION=2` is
# set. Where do FP8 inputs with head dim 128 go under `backend="auto"`?

# %%
answer_2 = None  # a label such as "fa3:vllm"

# %% tags=["solution", "hide-input"]
# Solution: the override makes the FlashAttention choice FA2, which cannot run FP8;
# auto moves on to fp8lab's own kernels, and on 9.x a batched call at head dim 128
# goes to the first of them, the Gluon kernel.
_by_solution = unanswered(globals(), 2)  # before filling them in
if answer_2 is None:  # fills in only an answer you left at None
    answer_2 = "triton:gluon"

# %%
assert answer_2 == decide(MACHINES["H100 (9.0)"], everything, Request("fp8", 128),
                          env={"FP8LAB_FLASH_ATTN_VERSION": "2"}).label(), answer_2
print("2: correct")
print(exercise_note(_by_solution))

# %% [markdown]
# **3.** A B200 (10.0) has vLLM and SDPA but not our kernel. What happens to
# FP8 inputs, and which option makes the call run (give the resulting label, written as section 4
# prints one with that option)?

# %%
answer_3 = None  # (label without the option, label with it)

# %% tags=["solution", "hide-input"]
# Solution: Blackwell falls back from FA3 to FA2, FA2 cannot run FP8: error.
# fp8_fallback="dequantize" runs vLLM's FA2 on dequantized bf16.
_by_solution = unanswered(globals(), 3)  # before filling them in
if answer_3 is None:  # fills in only an answer you left at None
    answer_3 = ("error", "fa2:vllm-fa2 (dequantized)")

# %%
b200 = {"vllm", "vllm-fa2", "sdpa"}
assert answer_3 == (decide(MACHINES["B200 (10.0)"], b200, Request("fp8", 128), env={}).label(),
                    decide(MACHINES["B200 (10.0)"], b200, Request("fp8", 128, fp8_fallback="dequantize"), env={}).label()), answer_3
print("3: correct")
print(exercise_note(_by_solution))

