# %% [markdown]
# # 00 · A ten-minute tour of fp8lab
#
# FlashAttention-3 can run attention with Q, K and V in 8-bit floats
# (`float8_e4m3fn`), each scaled by a *descale* per (sequence, KV head). This
# notebook takes you once around the kit.
#
# **You will learn**
# 1. what this machine offers: device, versions, and the attention kernels fp8lab finds;
# 2. how a tensor becomes FP8 (a scale, a cast) and what it loses;
# 3. how FP8 attention compares with exact attention, and with bf16 attention;
# 4. where to go next.
#
# **Words used here.** *amax*: the largest absolute value of a tensor (or of a slice of it).
# *Scale and descale*: to use e4m3's range, x is divided by `descale = amax / 448` before the
# cast, and the FP8 codes times the descale give x back. FA3's `q_descale`, `k_descale`,
# `v_descale` are such descales, and so are vLLM's `q_scale`, `k_scale`, `v_scale`; libraries
# that *multiply* by a scale (TransformerEngine, torchao) use `s = 1 / descale`. *bf16*: the 16-bit
# float with float32's exponent range, the usual baseline. *GQA*: grouped-query attention,
# several query heads sharing one K/V head. *rel L2*: `‖out - ref‖ / ‖ref‖`, the error measure of
# every table here (the others in `fp8lab.metrics`: rmse, max_abs, rel_l1, cosine, and SQNR,
# `10 log10(signal power / noise power)` in dB).

# %% tags=["parameters"]
smoke: bool = False  # small sizes for CI
seqlen: int = 1024  # tokens per sequence
heads_q: int = 8  # query heads
heads_kv: int = 2  # KV heads (GQA group of 4)
head_dim: int = 128
distribution: str = "normal"  # see fp8lab.data: normal, fa3_outliers, outlier_channels, sinks, head_ranges
seed: int = 0

# %% [markdown]
# Set-up (safe to skip).

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

import fp8lab
from fp8lab import data, env, formats, metrics, scaling
from fp8lab.backends import doctor
from fp8lab.notebooks import exercise_note, record, unanswered
from fp8lab.reference import attention_exact

if smoke:
    seqlen, head_dim = 64, 64
device = env.device()
sns.set_theme(style="whitegrid")

# %% [markdown]
# ## 1. This machine
#
# `fp8lab info` and `fp8lab doctor` print the same from a shell.

# %%
pd.Series(env.context(), name="value").to_frame()

# %% [markdown]
# The attention providers fp8lab looks for, and whether each was found. The
# production FA3 FP8 kernels need a Hopper GPU (compute capability 9.x) and
# one of vLLM (or its FA3 library alone), the `fa3-fwd` wheel or an upstream FA3 build.

# %%
report = doctor.report()
providers = pd.DataFrame(report["providers"])[["backend", "name", "found", "detail"]]
record("providers_found", providers[providers.found].name.tolist())
with pd.option_context("display.max_colwidth", None):  # the whole reason, not its first 50 characters
    display(providers)  # noqa: F821 - IPython

# %% [markdown]
# Which backend `fp8lab.attention(..., backend="auto")` would pick here, for
# bf16 and for FP8 inputs at each head dim:

# %%
decisions = pd.DataFrame(report["decisions"]).pivot(index="head_dim", columns="dtype", values="choice")
decisions

# %% [markdown]
# ## 2. A tensor in FP8
#
# e4m3 keeps 3 mantissa bits and reaches ±448. To use that range, a tensor is
# divided by its descale first: `descale = amax / 448`, `x_fp8 = cast(x / descale)`,
# and `x ≈ x_fp8 · descale`.

# %%
e4m3 = formats.get_format("e4m3fn")
print(f"e4m3fn: max {e4m3.max}, smallest normal {e4m3.min_normal}, smallest subnormal {e4m3.min_subnormal}, "
      f"{formats.representable_values(e4m3).numel()} finite values")

q, k, v = data.make_qkv(distribution, seqlen_q=seqlen, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim,
                        seed=seed, device=device)
strategy = scaling.ScaleStrategy(scaling.PerTensor())
k8_pt, k_descale_pt = scaling.quantize(k, strategy)  # "pt": per tensor (section 3 quantizes per head)
k_back = scaling.dequantize(k8_pt, k_descale_pt, strategy.granularity)
print("K in FP8:", k8_pt.dtype, tuple(k8_pt.shape), " descale:", float(k_descale_pt.flatten()[0]))
table = metrics.error_table(k_back, k)
record("k_per_tensor_rel_l2", table["rel_l2"])
pd.Series(table, name="K after FP8 round trip").to_frame()

# %% [markdown]
# Every value lands on the e4m3 grid, so the error of one value is at most half a step. A step
# is 2⁻³ of the value's power of two, so half a step is 2⁻⁴ of it, and relative to the value
# itself at most 2⁻⁴ / (1 + 2⁻⁴) = 1/17 ≈ 5.9 % for normal numbers (just above a power of two).
# Most errors are far smaller:

# %%
normal = (k / k_descale_pt).abs() >= e4m3.min_normal  # elements that land in e4m3's normal range
rel = ((k_back - k)[normal] / k[normal]).double().cpu()
max_rel = record("k_max_rel_error_normals", rel.abs().max().item())
assert max_rel <= 1 / 17 + 1e-12, max_rel
print(f"largest relative error of an element: {max_rel:.4f} (bound 1/17 = {1 / 17:.4f})")
ax = sns.histplot(rel.numpy(), bins=80, stat="percent")
ax.set(xlabel="relative rounding error of one element (k_back - k) / k", ylabel="% of elements",
       title="FP8 e4m3 rounding error of K (per-tensor scale, normal range)")
plt.show()

# %% [markdown]
# ## 3. FP8 attention
#
# FA3 takes FP8 Q, K, V and float32 descales of shape `(batch, heads_kv)`.
# We quantize per KV head (Q too: the query heads of a GQA group share the descale of their KV
# head) and call `fp8lab.attention`. What runs depends on the machine (notebook 04): on a Hopper
# GPU with FA3 installed, the production kernel; on a Hopper GPU without it, or on Ada or Blackwell,
# fp8lab's own FP8 kernels; on a CPU, `reference`: the FA3 emulation, which follows the kernel's
# FP8 numerics step by step in PyTorch. A GPU without FP8 tensor cores (Ampere) has no FP8 kernel
# at all; the cell then says so and runs the emulation.

# %%
per_head = scaling.ScaleStrategy(scaling.PerHead(heads_kv=heads_kv))
q8, q_descale = scaling.quantize_for_fa3(q, per_head, heads_kv)
k8, k_descale = scaling.quantize_for_fa3(k, per_head, heads_kv)
v8, v_descale = scaling.quantize_for_fa3(v, per_head, heads_kv)
print("descale shape:", tuple(q_descale.shape), "dtype:", q_descale.dtype)

exact = attention_exact(q, k, v, causal=True)
fp8_args = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, causal=True)
try:
    fp8_call = fp8lab.prepare_attention(q8, k8, v8, **fp8_args)  # checks and picks the provider once
except fp8lab.BackendError as e:
    print(f"no FP8 attention kernel on this machine ({str(e).splitlines()[0][:120]}...): the emulation instead")
    fp8_call = fp8lab.prepare_attention(q8, k8, v8, **fp8_args, backend="reference")
print("FP8 attention runs on:", fp8_call.decision.label())
out_fp8 = fp8_call()
out_bf16 = fp8lab.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
errors = pd.DataFrame({
    "bf16 attention": metrics.error_table(out_bf16, exact),
    "FP8 attention": metrics.error_table(out_fp8, exact),
}).T
record("attention_rel_l2", {"bf16": errors.loc["bf16 attention", "rel_l2"], "fp8": errors.loc["FP8 attention", "rel_l2"]})
errors

# %%
ax = sns.barplot(x=errors.index, y=errors["rel_l2"])
ax.set(yscale="log", ylabel="relative L2 error vs float64 (log scale)", xlabel="",
       title=f"Attention error, {distribution} inputs, head_dim {head_dim}")
plt.show()

# %% [markdown]
# ## Summary
# * One FP8 value keeps 3 mantissa bits: rounding costs up to 1/17 ≈ 5.9 % per element, about 2–3 % RMS.
# * Attention in FP8 is roughly an order of magnitude less accurate than in bf16, and the error
#   depends on the scales and on the inputs' outliers.
# * Next: `01_fp8_numerics` (the formats), `02_scale_strategies` and `03_per_head_scales_and_strides`
#   (scales), `04_fa2_fa3_version_gating` (which kernel runs where), `05_fp8_attention_accuracy`
#   (where the error comes from), `06_fp8_kv_cache`, `07_performance`, `08_triton_fp8_attention` and
#   `09_gluon_fa3_kernel` (our own kernels).
#
# ## Exercises
# 1. Set `distribution = "fa3_outliers"` in the parameters cell and rerun. By what factor does each
#    error grow, bf16's and FP8's? (Compare ratios, not differences; notebook 05 (a) measures the
#    FA3 paper's table on these inputs.)
# 2. Replace `PerHead` by `PerTensor` in section 3. Does the FP8 error change on `normal` inputs,
#    whose heads all have alike ranges? Notebook 03 (section 1) shows where per-head scales pay:
#    once the heads' ranges span more binades than e4m3's normal range, and in the worst head's
#    error rather than the whole output's, which the large heads dominate.
# 3. e5m2 keeps 2 mantissa bits instead of 3. Following section 2's argument, what is the largest
#    relative error round-to-nearest can cause for a value in e5m2's normal range? Put it in
#    `answer_3` below; the cell after it has a hidden solution, the last one checks.

# %%
answer_3 = None  # a number, e.g. 0.05 or a fraction such as 1 / 20

# %% tags=["solution", "hide-input"]
# Solution: a step is 2^-2 of the value's power of two, half a step 2^-3; the worst case is the tie
# just above a power of two, 1 + 2^-3 (times 2^e), which rounds down: 2^-3 / (1 + 2^-3) = 1/9.
_by_solution = unanswered(globals(), 3)  # before filling it in
if answer_3 is None:  # fills in only an answer you left at None
    answer_3 = 2**-3 / (1 + 2**-3)

# %%
one_binade = torch.linspace(1, 2, 2**12 + 1, dtype=torch.float64)  # every tie of e5m2 in [1, 2] included
worst = ((formats.quantize(one_binade, "e5m2") - one_binade).abs() / one_binade).max().item()
assert abs(answer_3 - worst) < 1e-9, f"{answer_3} is not the largest relative error"
print(f"3: correct ({worst:.4f}); every binade of the normal range scales the same way")
print(exercise_note(_by_solution))
