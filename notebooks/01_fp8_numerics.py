# %% [markdown]
# # 01 · FP8 numerics: formats, grids, rounding
#
# An FP8 number has 8 bits: a sign, a few exponent bits and a few mantissa
# bits. How those 8 bits are split, and what the top codes mean, decides what
# a format can hold. FP8 attention (FlashAttention-3, vLLM's FP8 KV cache)
# stores Q, K, V and the probabilities P in one of them: `float8_e4m3fn`.
#
# **You will learn**
# 1. the five formats fp8lab knows (e4m3fn, e5m2, their AMD `fnuz` cousins, and
#    the e8m0fnu block-scale format), bit by bit;
# 2. where each format has values, and how its relative spacing changes over the range;
# 3. what rounding does to a tensor: nearest-even against stochastic rounding;
# 4. e4m3 against e5m2, range against precision, and why attention's forward pass uses e4m3;
# 5. what subnormals buy at the bottom of the range;
# 6. how the `fnuz` formats differ;
# 7. that libraries disagree on what an overflowing cast gives, probed live on this machine.
#
# Every number below is computed by `fp8lab.formats` while the notebook runs.

# %% tags=["parameters"]
smoke: bool = False  # small sizes for CI
n_samples: int = 1_000_000  # values drawn for the error histograms and the range/precision sweep
stochastic_draws: int = 2000  # stochastic roundings of one value, for the bias check
seed: int = 0

# %% [markdown]
# Set-up (safe to skip).

# %%
import json
import math

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from fp8lab import data, env, formats
from fp8lab.notebooks import exercise_note, record, unanswered
from fp8lab.plots import numerics as plots

if smoke:
    n_samples, stochastic_draws = 20_000, 400
g = torch.Generator().manual_seed(seed)
sns.set_theme(style="whitegrid")
pd.set_option("display.float_format", lambda v: f"{v:.6g}")

# %% [markdown]
# ## 1. The formats at a glance
#
# `eXmY` means X exponent bits and Y mantissa bits. The suffixes say what is
# missing: `fn` = finite (no infinity), `uz` = unsigned zero (no -0), `u` =
# unsigned (no sign bit). `binades` is the dynamic range in powers of two from
# the smallest subnormal to max; `rel_precision`, 2^-(Y+1), bounds the relative error of
# round-to-nearest on normal values (the worst case, half a step just above a power of two,
# is 2^-(Y+1) / (1 + 2^-(Y+1)): 1/17 for e4m3, 1/3 for e8m0fnu).

# %%
table = plots.format_table()
record("format_table", table[["bias", "max", "min_normal", "min_subnormal"]].to_dict(orient="index"))
table

# %% [markdown]
# ## 2. Bits to value
#
# A normal value is `(-1)^s * 1.m * 2^(e - bias)`; with exponent field `e = 0`
# it is subnormal: `(-1)^s * 0.m * 2^(1 - bias)`. In e4m3fn only `S.1111.111`
# is NaN, so the top binade keeps seven finite values and the largest is
# `1.110b * 2^(15 - 7)`. The last rows of the code table:

# %%
e4m3fn = formats.get_format("e4m3fn")
plots.code_table(e4m3fn, range(0x78, 0x80)).set_index("code")

# %% [markdown]
# `encode` and `decode` work on the bit fields directly (not through torch's
# casts), and round-trip every value:

# %%
grid = formats.representable_values(e4m3fn)
assert torch.equal(formats.decode(formats.encode(grid, e4m3fn), e4m3fn), grid)
print(f"e4m3fn has {grid.numel()} distinct finite values (+0 and -0 counted once);",
      f"max = {e4m3fn.max:g} = code 0x{int(formats.encode(torch.tensor(e4m3fn.max), e4m3fn)):02X}")

# %% [markdown]
# ## 3. Where the values lie
#
# On a log scale each binade (power of two) holds `2^Y` values, so the element
# formats are evenly spread in log2(value); the subnormals (orange) thin out
# below `min_normal`.

# %%
plots.plot_value_grid()
plt.show()

# %% [markdown]
# The block-scale format e8m0fnu is only exponent: 255 powers of two, 2^-127 to
# 2^127, no zero, no sign, 0xFF is NaN. MX formats (MXFP8) store one of these
# per 32 elements.

# %%
e8m0 = formats.get_format("e8m0fnu")
v = formats.representable_values(e8m0)
assert torch.equal(v, torch.exp2(torch.round(torch.log2(v))))  # every value is a power of two
print(f"e8m0fnu: {v.numel()} values from 2^{int(math.log2(v[0]))} to 2^{int(math.log2(v[-1]))}")

# %% [markdown]
# ## 4. Relative spacing
#
# `ulp(x)` is the gap between the grid values around x. Relative to |x| it is
# a sawtooth between `2^-Y` and `2^-(Y+1)` over the normal range: precision is
# the same at 0.1 and at 100 (for e4m3fn; 0.01 is below its smallest normal, 2^-6 ≈ 0.0156, and
# keeps fewer bits). Below `min_normal` the gap stops shrinking and
# the relative spacing climbs to 1 at the smallest subnormal.

# %%
plots.plot_relative_spacing()
plt.show()
spacing = plots.relative_spacing_frame()
spacing[spacing.x >= 1].groupby("format").rel_spacing.agg(["min", "max"])

# %% [markdown]
# ## 5. Rounding errors
#
# `quantize(x, fmt)` rounds onto the grid in exact float64 arithmetic. With
# round-to-nearest-even the error is at most half a ulp, uniform in
# [-0.5, 0.5] ulp for smooth inputs. Stochastic rounding rounds up with
# probability equal to the distance from the lower neighbour divided by the gap: errors up to one
# ulp, larger on average, but unbiased (the mean error is zero), which matters
# when many small updates are summed.

# %%
x = torch.randn(n_samples, generator=g, dtype=torch.float64)
errors = plots.rounding_error_frame(x, ["e4m3fn"], roundings=("nearest", "stochastic"), generator=g)
plots.plot_rounding_errors(errors, "error_ulps")
plt.show()
plots.rounding_summary(errors, "rounding")

# %% [markdown]
# The bias check, on one value: 1.03 lies between e4m3fn's 1.0 and 1.125.
# Nearest always gives 1.0 (error -0.03 every time); stochastic rounding gives
# 1.125 with probability 0.03 / 0.125 = 0.24, and its mean converges to 1.03.

# %%
one = torch.full((stochastic_draws,), 1.03, dtype=torch.float64)
sr = formats.quantize(one, e4m3fn, rounding="stochastic", generator=g)
gap = formats.ulp(1.03, e4m3fn).item()  # 1.125 - 1.0
p_up = (1.03 - 1.0) / gap
sigma = gap * math.sqrt(p_up * (1 - p_up) / stochastic_draws)  # standard error of the mean
print(f"nearest: {formats.quantize(one[:1], e4m3fn).item()}, P(round up) = {p_up:.2f}, stochastic mean over",
      f"{stochastic_draws} draws: {sr.mean().item():.4f} (expected 1.03 +- {sigma:.4f}), values seen: {sorted(set(sr.tolist()))}")

# %% [markdown]
# (`rms_rel_error` above includes the N(0,1) draws below e4m3's normal range, 2^-6, whose relative
# error is larger: a subnormal keeps fewer bits. The table below keeps the normal range only,
# hence its smaller e4m3 figure.) Across the element formats, in relative terms: e5m2 has one
# mantissa bit fewer, so its relative error is twice e4m3's.

# %%
errors_all = plots.rounding_error_frame(x[x.abs() > 2**-6], plots.ELEMENT_FORMATS)  # normal range of all four
plots.plot_rounding_errors(errors_all, "rel_error")
plt.show()
rms_rel = plots.rounding_summary(errors_all, "format")["rms_rel_error"]
record("rms_rel_error_normal_range", rms_rel.to_dict())
rms_rel.to_frame("rms relative error")

# %% [markdown]
# ## 6. e4m3 against e5m2: range against precision
#
# Attention quantizes a tensor with a scale: `x_fp8 = cast(x * s)`, and
# dequantizes with the descale `1/s`. Sweep the scale over powers of two on
# attention-like data (the FA3 paper's N(0,1) with 0.1 % outliers of std 10):
# too small a scale flushes values to zero, too large a scale saturates them.
# Between the two walls lies a window; inside it only precision matters.

# %%
k = data.sample("fa3_outliers", (1, max(n_samples // (8 * 128), 16), 8, 128), seed=seed).double()
sweep = plots.scale_sweep_frame(k, ["e4m3fn", "e5m2"], range(-24, 25))
plots.plot_scale_sweep(sweep)
plt.show()
best = sweep.loc[sweep.groupby("format").rel_l2.idxmin()].set_index("format")
best

# %% [markdown]
# The usual per-tensor scale maps the tensor's amax onto the format's max: x is multiplied by
# `s = max / amax` (as torchao and TransformerEngine do), or, the same thing, divided by the
# descale `amax / max` (FA3's `*_descale`; vLLM's `k_scale` is such a descale, though its dynamic
# ones divide amax by 200 or 100, not 448, to leave headroom). `window` counts the binades of
# scales whose error is within 2x of the format's best:

# %%
amax_scaling = plots.amax_scale_table(k, sweep)
record("rel_l2_amax_scale", amax_scaling["rel_l2 at amax scale"].to_dict())
amax_scaling

# %% [markdown]
# e4m3's window (about 11 binades within 2x of its best error) already covers any scale error a
# per-tensor amax leaves, so e5m2's wider window buys nothing once a scale is chosen, while
# e4m3's extra mantissa bit halves the error everywhere inside the window. That is why the
# forward pass (activations, Q, K, V and the softmax probabilities P, which
# FA3 keeps in [0, 256]) uses e4m3; e5m2's range is for gradients, whose
# magnitudes spread over many more binades and change from step to step.

# %% [markdown]
# ## 7. Subnormals
#
# Without subnormals (flush-to-zero) everything below `min_normal` would be 0.
# The subnormals fill the gap with evenly spaced values, `min_subnormal`
# apart (linear axis):

# %%
plots.plot_value_grid(["e4m3fn", "e4m3fnuz"], log2=False, xlim=(0, 2 * e4m3fn.min_normal))
plt.show()
sub = grid[(grid > 0) & (grid < e4m3fn.min_normal)]
print(f"e4m3fn subnormals: {sub.numel()} values, {sub[0].item()} .. {sub[-1].item()}, step {formats.ulp(0.0, e4m3fn).item()}")

# %% [markdown]
# How much of a scaled tensor lands there? At the amax scale, take the share of
# K's entries whose magnitude is below `min_normal` after scaling:

# %%
s = amax_scaling.loc["e4m3fn", "scale"]
scaled = (k * s).abs()
share = {
    "subnormal": ((scaled > 0) & (scaled < e4m3fn.min_normal)).double().mean().item(),
    "flushed to zero": ((formats.quantize(k * s, e4m3fn) == 0) & (k != 0)).double().mean().item(),
}
record("e4m3fn_subnormal_share_at_amax_scale", share["subnormal"])
pd.Series(share, name="share of entries").to_frame()

# %% [markdown]
# A tiny share: at the amax scale this tensor spans fewer binades than e4m3's normal range, so
# subnormals rarely matter. They do once a tensor holds parts of very different magnitudes under
# one scale (notebook 03, section 1: heads whose ranges differ by many binades).

# %% [markdown]
# ## 8. The fnuz formats (AMD MI300)
#
# `e4m3fnuz` and `e5m2fnuz` spend their codes differently: the one NaN is
# `0x80` (the code that would be -0), there is no -0 and no infinity, and the
# bias is one larger. Every e4m3fnuz value is half the e4m3fn value with the
# same code, and the top code 0x7F, NaN in e4m3fn, is the finite max 240.

# %%
codes = torch.arange(256).to(torch.uint8)
fn, fnuz = formats.decode(codes, "e4m3fn"), formats.decode(codes, "e4m3fnuz")
both = torch.isfinite(fn) & torch.isfinite(fnuz) & (fn != 0)
assert torch.equal(fnuz[both], fn[both] / 2)
side_by_side = pd.DataFrame({
    "code": [f"0x{c:02X}" for c in range(256)], "e4m3fn": fn.numpy(), "e4m3fnuz": fnuz.numpy(),
}).set_index("code")
side_by_side.loc[["0x00", "0x01", "0x08", "0x7E", "0x7F", "0x80", "0x81", "0xFF"]]

# %% [markdown]
# Same-code values differ by 2x, so a bit pattern written as one format and
# read as the other is wrong by a factor of two (or NaN). Rounding -0.0 or a
# tiny negative number gives +0 in the fnuz formats:

# %%
tiny = torch.tensor([-0.0, -1e-9])
pd.DataFrame({name: [f"{z:+.1f}" for z in formats.quantize(tiny, name).tolist()] for name in ("e4m3fn", "e4m3fnuz")},
             index=["-0.0", "-1e-9"])

# %% [markdown]
# ## 9. Libraries disagree at the edges: probed live
#
# What does `x.to(torch.float8_e4m3fn)` give for 500, or for inf? The format
# has no infinity; a cast may saturate to 448 or give NaN. `probe_torch_casts`
# casts boundary inputs with the installed torch and compares each result with
# `quantize` under both overflow policies. This machine:

# %%
probe = formats.probe_torch_casts("cpu")
verdicts = pd.DataFrame(probe["formats"]).T[["supported", "rounding", "overflow", "infinity", "nan"]]
print(f"torch {probe['torch']} on {probe['device']}")
record("torch_cpu_cast_overflow", verdicts["overflow"].to_dict())
verdicts

# %%
rows = pd.DataFrame(probe["rows"])
rows[(rows.format == "e4m3fn") & rows.kind.isin(["overflow", "infinity", "nan"])].set_index("case")

# %% [markdown]
# On a GPU the same probe runs on CUDA, and the kit keeps one such run: torch 2.11 on an H200
# (`results/h200/cast_probe_h200.json`, made with `scripts/probe_casts.py`), shown below beside
# this machine's. ml_dtypes (JAX's FP8 types, when installed) gives NaN too; Hopper's conversion
# instruction used inside kernels (`cvt.rn.satfinite`) saturates. The recorded run and this one
# differ in torch version *and* device at once, so the table shows that casts disagree, not which
# of the two decides.

# %%
others = {}
if torch.cuda.is_available():
    others["torch cuda"] = formats.probe_torch_casts("cuda")
ml = formats.probe_ml_dtypes()
if ml is not None:
    others[f"ml_dtypes {ml['version']}"] = ml
recorded = env.results_dir() / "cast_probe_h200.json"
if recorded.exists():
    rec = json.loads(recorded.read_text())
    others[f"recorded: torch {rec['torch']} on {rec['context']['gpu']} ({rec['context']['date'][:10]})"] = rec
if not others:
    print("no CUDA device, no ml_dtypes and no recorded GPU probe here: only torch's CPU cast was probed")
others[f"torch {probe['torch']} cpu"] = probe
pd.DataFrame({lib: {n: i.get("overflow") for n, i in p["formats"].items()} for lib, p in others.items()})

# %% [markdown]
# Two more findings of the probe. First, torch's cast may round a float64 input twice (to
# float32, then to FP8) and so miss the nearest value; the probe checks whether this torch does:

# %%
x64 = torch.tensor([1 + 2**-4 + 2**-40], dtype=torch.float64)  # just above the tie between 1 and 1.125
print(f"torch cast: {x64.to(torch.float8_e4m3fn).item()}, exact nearest: {formats.quantize(x64, e4m3fn).item()},",
      f"double rounding detected by the probe: {probe['formats']['e4m3fn'].get('float64_double_rounding')}")

# %% [markdown]
# Second, the e8m0fnu cast. torch 2.13 on a CPU rounds ties `1.5 * 2^e` up, ignores the sign
# (-3 becomes 4) and rounds float32 subnormals its own way; `quantize` follows its ties but
# gives NaN (or 2^-127 when saturating) for negative inputs. This machine's torch:

# %%
rows[(rows.format == "e8m0fnu") & rows.kind.isin(["in_range", "negative", "float32_subnormal"])].set_index("case")

# %% [markdown]
# The kit never relies on a library's overflow policy. `cast_to_fp8` clamps
# to ±max before torch's cast (and sends float64 through the exact reference),
# so it saturates identically on every torch version and device, and agrees
# with `quantize` bit for bit:

# %%
edge = torch.tensor([500.0, -1e6, math.inf, 470.0, math.nan, 1e-3, -1e-4])
cast = formats.cast_to_fp8(edge)
ref = formats.quantize(edge, e4m3fn)
assert torch.equal(formats.encode(ref, e4m3fn), cast.view(torch.uint8))  # bit for bit, NaN included
pd.DataFrame({"input": edge.tolist(), "cast_to_fp8": cast.float().tolist(), "quantize": ref.tolist()})

# %% [markdown]
# ## Summary
#
# - An FP8 format is a grid: `2^Y` values per binade between `min_normal` and
#   max, evenly spaced subnormals below. All its constants follow from the bit
#   rules; `fp8lab.formats` derives them and the tests hold them against the
#   specifications and torch.
# - Round-to-nearest-even errs by at most half a ulp; stochastic rounding by up
#   to one ulp but without bias.
# - e4m3 trades range for one more mantissa bit. Once a scale puts a tensor in
#   the window, precision is all that matters, so attention's forward pass uses
#   e4m3 (half the error of e5m2).
# - fnuz formats: bias + 1 (values halved), one NaN at 0x80, no -0, no inf.
# - Casts disagree on overflow (saturate or NaN) by library, version and device: torch 2.13 on a
#   CPU saturated e4m3fn, torch 2.11 on an H200 gave NaN (section 9 shows what this machine does).
#   Clamp before casting (`cast_to_fp8`), and never feed float64 to a torch FP8 cast directly.
#
# ## Exercises
#
# Each exercise has a cell for your answer, a hidden solution cell (it fills in only an answer
# left at None), and a check.
#
# **1.** Section 1's table gives e5m2 and e5m2fnuz the same max, 57344, although e5m2fnuz's bias
# is one larger. What is the code of the max in each format? (Hint: which exponent fields are
# reserved for infinity and NaN?)

# %%
answer_1 = None  # (code of e5m2's max, code of e5m2fnuz's max), as ints such as 0x7C

# %% tags=["solution", "hide-input"]
# Solution: e5m2 reserves exponent field 11111 for inf and NaN, so its max is
# 1.11b * 2^(30 - 15), code 0 11110 11 = 0x7B. In e5m2fnuz 11111 is finite: 1.11b * 2^(31 - 16),
# the same value, code 0 11111 11 = 0x7F. The larger bias halves every value; the extra binade
# at the top gives the factor back.
_by_solution = unanswered(globals(), 1)  # before filling them in
if answer_1 is None:  # fills in only an answer you left at None
    answer_1 = (0b0_11110_11, 0b0_11111_11)

# %%
maxima = [formats.get_format(n) for n in ("e5m2", "e5m2fnuz")]
assert tuple(answer_1) == tuple(int(formats.encode(torch.tensor(f.max), f)) for f in maxima), answer_1
print("1: correct")
print(exercise_note(_by_solution))

# %% [markdown]
# **2.** To which e4m3fn value does 0.0029296875 (= 1.5 x 2^-9) round, and why
# does it not round to 2^-9?

# %%
answer_2 = None  # the rounded value

# %% tags=["solution", "hide-input"]
# Solution: 1.5 * 2^-9 is exactly halfway between the subnormals 1 * 2^-9 (code 0x01,
# odd) and 2 * 2^-9 (code 0x02, even); ties go to the even code.
_by_solution = unanswered(globals(), 2)  # before filling them in
if answer_2 is None:  # fills in only an answer you left at None
    answer_2 = 2 * 2.0**-9

# %%
assert answer_2 == formats.quantize(torch.tensor(0.0029296875, dtype=torch.float64), "e4m3fn").item()
print("2: correct")
print(exercise_note(_by_solution))

# %% [markdown]
# **3.** What is the smallest positive number that overflows e5m2 under
# round-to-nearest-even (it becomes inf with `overflow="nonfinite"`)? And for
# e4m3fn, is 464 (halfway between 448 and 480) an overflow?

# %%
answer_3 = None  # (smallest e5m2 overflow, does 464 overflow e4m3fn: True/False)

# %% tags=["solution", "hide-input"]
# Solution: e5m2's max 57344 = 1.11b * 2^15 has an odd mantissa, so the tie 61440 rounds
# to the even 2^16 and overflows. e4m3fn's max 448 = 1.110b * 2^8 is even: 464 rounds to 448.
_by_solution = unanswered(globals(), 3)  # before filling them in
if answer_3 is None:  # fills in only an answer you left at None
    answer_3 = (61440.0, False)

# %%
e5m2 = formats.get_format("e5m2")
t = torch.tensor([answer_3[0], torch.nextafter(torch.tensor(answer_3[0]), torch.tensor(0.0)).item()])
q = formats.quantize(t, e5m2, overflow="nonfinite")
assert math.isinf(q[0]) and math.isfinite(q[1]), "not the smallest overflowing value"
assert answer_3[1] == (not math.isfinite(formats.quantize(torch.tensor(464.0), e4m3fn, overflow="nonfinite").item()))
print("3: correct")
print(exercise_note(_by_solution))

# %% [markdown]
# **4.** How many e4m3fn values lie in [1, 2), and how many in [2^-8, 1)?
# (Count by hand from the bit layout, then check.)

# %%
answer_4 = None  # (count in [1, 2), count in [2^-8, 1))

# %% tags=["solution", "hide-input"]
# Solution: a binade holds 2^3 = 8 values. [2^-8, 1) holds the subnormals k * 2^-9 with
# k = 2..7 (6 values) and the six normal binades 2^-6 .. 2^-1 (48 values): 54.
_by_solution = unanswered(globals(), 4)  # before filling them in
if answer_4 is None:  # fills in only an answer you left at None
    answer_4 = (8, 54)

# %%
counts = (int(((grid >= 1) & (grid < 2)).sum()), int(((grid >= 2**-8) & (grid < 1)).sum()))
assert tuple(answer_4) == counts, answer_4
print("4: correct")
print(exercise_note(_by_solution))

