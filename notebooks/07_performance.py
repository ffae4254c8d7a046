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
# # 07 · FP8 attention performance on Hopper
#
# How fast are FP8 attention kernels on an H200, how far are they from what the
# chip can do, and where does our own Triton kernel (`fp8lab.kernels`, notebook 08)
# stand? Every number here was measured on one H200 with `scripts/gpu_bench.py`, the probe scripts
# beside it in `scripts/` and, for the profiles, Nsight Compute, and is read back, with its
# context, from `results/h200/`.
#
# "The issue" below is the project's task for its own kernels: at b·s = 16k tokens and 32 heads,
# at least 0.9x FA3 FP8 (fa3-fwd) and faster than FA3 bf16 and vLLM's FP8 varlen path in every
# case, and fused FP8 quantization at 85 % or more of the device copy's bandwidth (4.3 TB/s in the
# facts file, `fp8-attention-facts.md`, whose H200 table of 2026-11-29 part (c) reads).
#
# You will learn:
# - **(a)** to read a benchmark record: providers, cases, medians, and the context they carry;
# - **(b)** how our kernel compares with FA3 FP8, FA3 bf16 and vLLM's FA3 FP8 varlen path, against the 0.9x target;
# - **(c)** how two runs on the same card agree (the facts file's table against our run), and the power limit under them;
# - **(d)** the roofline: why attention is compute-bound, which ceilings apply (FP8 GEMM, bf16 GEMM, the exp2 unit);
# - **(e)** why fused FP8 quantization is measured against the device copy; why current per-head
#   and per-tensor scales need a whole slice before the first cast (two reads, or slices held on
#   chip), and why current per-tensor scaling of an x larger than the chip cannot read it once (a
#   bound you can compute); how delayed scaling needs one pass; and which kinds of scaling meet the
#   85 % target (a table read from the records);
# - **(f)** an open question: why vLLM's FP8 varlen path is slower;
# - **(g)** what the kit's own call, `fp8lab.attention`, adds to our kernels and to FA3's, and how
#   `fp8lab.prepare_attention` takes it away;
# - and on a Hopper GPU, one case of the grid timed live, every provider found on the same inputs.

# %% tags=["parameters"]
smoke: bool = False  # CI: the same recorded data, nothing heavy either way
results_dir: str = "auto"  # auto: results/h200 of this checkout
record_version: str = "v23"  # which run's grid to show (v23: medians of interleaved rounds; v21, v20, v19, v12, v11, v10, v5, v2 one median each)
run_live: bool = True  # on a Hopper GPU (not in smoke runs): time one case of the grid now, about 30 s
live_seqlen: int = 8192  # the live case: 16384 // live_seqlen sequences of this length, 32 heads
live_head_dim: int = 128
live_causal: bool = False

# %% [markdown]
# *Setup (skippable): imports and paths.*

# %%
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch

from fp8lab import bench, env
from fp8lab.kernels import explain
from fp8lab.notebooks import exercise_note, record, unanswered
from fp8lab.plots import perf as plots
from fp8lab.scaling import PerHead, PerTensor, PerToken

rdir = env.results_dir() if results_dir == "auto" else Path(results_dir)
pd.set_option("display.precision", 2)

# %% [markdown]
# *Words used before their sections:* **Gluon** is Triton's lower-level dialect, in which the
# kit's second kernel (`fp8lab ws`, for warp-specialized) spells out FA3's producer and consumer
# warps; **TMA** is Hopper's tensor-memory copy engine; an **mbarrier** is the shared-memory
# barrier that TMA copies and waiting warps meet at (a *try-wait* polls it); **SASS** is the GPU's
# machine code; **varlen** calls pack sequences of different lengths into one tensor with
# `cu_seqlens`; a **descale** is the float32 factor that turns FP8 codes back into values. Notebook
# 08 builds each of them; `pretranspose_v` and `key_ordered_vt` are the two stored layouts of V
# there, (f) and (j).



# %% [markdown]
# ## (a) The record
#
# Each `bench_v*_grid.json` holds rows (case, provider, median ms, TFLOP/s) and a
# `context` block: GPU, driver, torch, triton, fa3-fwd version, date. A number
# without its context is not a result. Up to v21 a grid timed each provider once per case (one
# `do_bench` median). v23's times each case's providers in five interleaved rounds, after 1.5 s of
# running them, and keeps the median of the rounds (`tflops`) with their range (`tflops_min`,
# `tflops_max`); every single timing is in `bench_v23_rounds.json`. Part (c) shows why.

# %%
grid_all = bench.records_frame(rdir, "grid")
versions = sorted(grid_all["version"].unique(), key=lambda v: int(v[1:]))
if record_version not in versions:
    raise ValueError(f"record_version: expected one of {versions} (a bench_<version>_grid.json), got {record_version!r}")
grid = grid_all[(grid_all["version"] == record_version) & grid_all["tflops"].notna()].copy()
ctx = bench.load_results(rdir / f"bench_{record_version}_grid.json")["context"]
print({k: ctx[k] for k in ("gpu", "driver", "torch", "triton", "cuda", "fa3_fwd", "date")})
table = grid.pivot_table(index="case", columns="provider", values="tflops", sort=False)
table

# %% [markdown]
# FLOPs follow FlashAttention's convention, `4·b·s²·h·d`, halved for causal
# masks. `fp8lab` times the Triton kernel with V already pre-transposed (older grids also
# have `fp8lab+transpose`, which pays `pretranspose_v` on every call: notebook 08's V
# layout lesson). `fp8lab ws` is the Gluon kernel: at head dim 256 in v10, at every head dim
# since v11, with V^T from `key_ordered_vt` (notebook 08, sections (j) and (k)).

# %%
for d in (64, 128, 256):
    plots.plot_providers(grid, d)
    plt.show()

# %% [markdown]
# ## (b) Against the targets
#
# The issue asked for at least 0.9x FA3 FP8, and for beating FA3 bf16 and vLLM's FP8
# varlen path everywhere. "fastest fp8lab" is the faster of the two kernels per case (the
# Triton kernel alone where the grid has no Gluon row).

# %%
kernels = [k for k in ("fp8lab", "fp8lab ws") if k in table]
fastest = grid[grid["provider"].isin(kernels)].sort_values("tflops").drop_duplicates("case", keep="last")
rows = grid.to_dict("records") + fastest.assign(provider="fastest fp8lab").to_dict("records")
ratios = pd.DataFrame(bench.ratio_table(rows, "fastest fp8lab", "fa3-fwd FP8"))
meta = grid.drop_duplicates("case").set_index("case")[["head_dim", "seqlen", "causal"]]
ratios = ratios.join(meta, on="case").join(fastest.set_index("case")["provider"].rename("kernel"), on="case")
best = ratios.set_index("case")["fastest fp8lab"]
beats = best.gt(table["fa3-fwd bf16"]).rename("beats FA3 bf16").to_frame()
beats["beats vLLM FP8 varlen"] = best.gt(table["vLLM FA3 FP8 varlen"])
summary = ratios.set_index("case")[["kernel", "ratio"]].join(beats)
for k in kernels:
    print(f"{k:>9}: {(table[k] / table['fa3-fwd FP8']).min():.3f}-{(table[k] / table['fa3-fwd FP8']).max():.3f}x "
          f"FA3 FP8 where timed")
print(f"fastest fp8lab kernel per case: {ratios['ratio'].min():.3f}-{ratios['ratio'].max():.3f}x FA3 FP8; "
      f"cases >= 0.9: {(ratios['ratio'] >= 0.9).sum()} of {len(ratios)}")
print(f"beats FA3 bf16 in {summary['beats FA3 bf16'].sum()} of {len(summary)} cases, "
      f"vLLM FP8 varlen in {summary['beats vLLM FP8 varlen'].sum()}")
record("ratio_to_fa3_fp8", dict(zip(ratios["case"], ratios["ratio"].round(3))))
summary

# %%
for causal in (False, True):
    plots.plot_ratio(ratios[ratios["causal"] == causal])
    part = ratios.loc[ratios["causal"] == causal, "ratio"]
    plt.title(("causal" if causal else "non-causal") + f": fastest fp8lab / FA3 FP8; 0.9 met in {(part >= 0.9).sum()} "
              f"of {len(part)}")
    plt.show()

# %% [markdown]
# This text reads the v23 grid (the default `record_version`); with another record the printed
# numbers rule.
#
# Read honestly: in the v23 grid the target is met in all 18 cases (lowest 0.916), and in three more
# v23 grids of the same code, too (`bench_v23_grid_run2.json` two minutes later, lowest 0.925;
# `_run3` and `_run4` on another machine, 0.928 and 0.913). The
# Gluon kernel is the faster one in 17 of the 18. v12 packed P into the MMA's own words and so made
# room for FA3's tiles (notebook 08, section (k)); v19 made its programs persistent, one per SM
# (section (l)); v20 and v21 hand them tiles from an atomic counter, as FA3 does (section (m)). The
# Triton kernel is the faster one at head dim 64 with 4k-token causal sequences. The kernels are
# v21's: v23 changed how the grid is timed, not what it times.
#
# Before v23 every grid timed each provider once per case, and 2x8192x32x256 non-causal fell below
# the line in 5 of the 14 grids since v12 (0.82-0.89; v21's four grids: 17, 18, 17 and 18 of 18).
# All five timed its Gluon kernel just after a kernel had compiled, with the card idle for
# seconds; four more grids that did so passed at 0.91-0.93, and the five that did not compile
# there measured 0.91-0.98. Part (c) shows the mechanism: the clock swings for about a second after
# the card steps from idle to its power limit. Timed in rounds, the same kernel measured 0.94-0.97
# there in all four v23 grids. vLLM's FP8 varlen
# path and FA3 bf16 are behind in every case. Select `record_version="v21"` (one median each),
# `"v12"`, `"v11"`, `"v10"`, `"v5"` (0.75-0.92x) or `"v2"`. v2 looks
# much worse because its timed calls still held six device syncs in the input checks; the v5 run
# measured that directly (next cell).

# %%
raw = bench.load_results(rdir / "bench_v5_raw.json")["rows"]
host = pd.DataFrame([r for r in raw if r.get("section") == "speed" and r.get("provider") in ("default", "v2 host path")
                     and "tflops" in r])
host = host[host["case"].isin(host.loc[host["provider"] == "v2 host path", "case"])]
host.pivot_table(index="case", columns="provider", values="tflops", sort=False)

# %% [markdown]
# ### Equal work? How O is summed (v28)
#
# The grid compares kernels that add up P·V differently. fa3-fwd (upstream FA3) and, by default,
# both of our kernels add every key block's products into O inside the FP8 MMA, whose accumulator
# keeps about 13 bits; vLLM's FA3 library adds each block's P·V into O in fp32 (two levels). At
# long context that is an accuracy difference: rel L2 against exact attention by number of keys,
# V + 1 inputs, d = 128 (`bench.long_context_headline`; notebook 05 (e), notebook 08 (n) and (o)).
# "ours" is the worse of our two kernels' defaults, "ours, pv_flush" our worst tile with
# the two-level sum:

# %%
_, _, flush_grid = explain.pv_flush(rdir)
headline = bench.long_context_headline(rdir)
with pd.option_context("display.precision", 4):
    display(pd.DataFrame(headline["probe"]).T)  # noqa: F821 - IPython

# %% [markdown]
# So "faster than vLLM's FP8 varlen path" above compares unequal work. With `pv_flush=True` our
# kernels sum as vLLM does. Timed in the same rounds (`bench_v28_pv_flush_grid*.json`, three
# interleaved rounds), the faster of our two flushing kernels per case, against fa3-fwd (which does
# not flush), vLLM's FP8 varlen path (which does) and FA3 bf16:

# %%
flush_ratios = flush_grid[["pv_flush / FA3 FP8", "pv_flush / vLLM FP8 varlen", "pv_flush / FA3 bf16"]]
record("v28_flush_ratio_ranges", {c: [round(float(flush_ratios[c].min()), 3), round(float(flush_ratios[c].max()), 3)]
                                  for c in flush_ratios})
print(f"0.9x fa3-fwd with the flush: {(flush_ratios['pv_flush / FA3 FP8'] >= 0.9).sum()} of {len(flush_ratios)} cases")
flush_ratios.round(3)

# %% [markdown]
# Doing the same work as vLLM, ours is faster in every case (by 11-23 % at head dims 64 and 128,
# 2.3-2.6x at 256), and faster than FA3 bf16 everywhere; against fa3-fwd, which does less, it runs
# at 0.82-0.98x and meets 0.9x in 8 of 18 cases. The issue's 0.9x target is fa3-fwd's own work,
# and the grid above meets it with the kernels summing as fa3-fwd does.

# %% [markdown]
# ## (c) Two runs on one card
#
# `fp8-attention-facts.md` (section 6) holds an earlier table from the same H200.
# Where a case appears in both, FA3's numbers say how much a run-to-run spread
# to expect before calling a difference real.

# %%
facts = pd.DataFrame(bench.FACTS_H200)
ours_fa3 = grid_all[grid_all["provider"] == "fa3-fwd FP8"].pivot_table(
    index="case", columns="version", values="tflops", sort=False)
common = facts[facts["case"] == "1x16384x32x128"][["case", "fa3-fwd FP8", "fa3-fwd bf16", "minimal Triton FP8"]]
print("facts file, 1x16384x32x128 non-causal:")
print(common.to_string(index=False))
print("our runs, FA3 FP8 at 1x16384x32x128:", ours_fa3.loc["1x16384x32x128"].round(0).to_dict())
facts

# %% [markdown]
# FA3 FP8 measured 903 TFLOP/s in the facts run and 872-918 in ours (v3's run did not time it): a few per cent
# between runs (the v6 exploration run, minutes after v5, measured up to 8 % apart on
# single cases). Differences between our kernel versions smaller than that are noise.

# %% [markdown]
# ### The power limit
#
# Since v19 the benchmark stamps each timing with the time it ended. The session also logged the
# card's SM clock and power every 250 ms
# (`nvidia-smi --query-gpu=` `bench.CLOCK_LOG_QUERY` `--format=csv -lms 250`). `bench.clocks_while_timed`
# joins the two: for each timing, the mean clock and the highest power of the samples taken while
# it ran. The run is v19's persistent-programs comparison (`bench_v19_ps2.json`, three rounds of
# every case, `run16/call2/clocks.csv`).

# %%
clock_log = bench.read_clock_log(rdir / "run16" / "call2" / "clocks.csv")
timed = pd.DataFrame([r for r in bench.load_results(rdir / "bench_v19_ps2.json")["rows"]
                      if r.get("section") == "speed" and "tflops" in r])
timed = bench.clocks_while_timed(timed, clock_log)
plots.plot_clocks(timed)
plt.show()
power = timed.groupby("head_dim").agg(sm_mhz=("sm_mhz", "mean"), power_w=("power_w", "max"),
                                      at_power_limit=("power_capped", "mean"))
record("v19_mean_sm_mhz", {f"head_dim {d}": mhz for d, mhz in power["sm_mhz"].round(0).items()})
power

# %% [markdown]
# At head dim 64 the SM clock stays at its 1980 MHz maximum. At 128, and more so at 256, the card
# draws its 700 W limit, and `nvidia-smi` reports the software power cap as active in almost every
# sample. The clock then drops to 1650-1900 MHz. So every kernel here, FA3 included, runs at
# whatever clock the power budget leaves. A more power-efficient kernel gets a higher clock, and
# the clock a timing gets can depend on what ran just before it.
#
# Does the clock explain single timings? Within this run, a timing's clock and its speed relative
# to the same kernel's median are only weakly related (next cell). A 250 ms sample and a
# one-second stamp are too coarse to pin a 100 ms timing. The power limit is a measured condition
# of every d >= 128 number in this notebook, not a proven cause of any one dip.

# %%
busy = timed[timed["head_dim"] >= 128].dropna(subset=["sm_mhz"])
relative = busy["tflops"] / busy.groupby(["case", "provider", "config"])["tflops"].transform("median")
print(f"correlation of SM clock and speed / the kernel's median, head dim 128 and 256: "
      f"{busy['sm_mhz'].corr(relative):.2f} over {len(busy)} timings")

# %% [markdown]
# ### The first timings after an idle compile
#
# The power limit has a second face. A kernel compiles on the host the first time a grid meets its
# config, and for those seconds the card sits idle at about 130 W. When the next timings start, it
# steps to 700 W, and its clock swings for about a second while the driver finds the clock that
# limit allows. Here is v21's first grid at the moment it timed 2x8192x32x256 non-causal, the case
# that measured 0.847 there. The Gluon kernel compiled its causal config in the case before, then
# was timed second, right after the Triton kernel, while the clock swung between 1545 and 1860 MHz.

# %%
window, span = explain.v23_swing(rdir)
plots.plot_clock_trace(window, span)
plt.show()

# %% [markdown]
# Each one-median grid since v12 (the kernel with FA3's tiles) against what ran before that case's
# Gluon timing: after an idle compile it fell below 0.9 five times in nine; with the card busy
# before it, never. v23 times every case in five interleaved rounds after 1.5 s of running its
# providers (`bench.interleaved_times`), so no timing starts in the swing, and each provider is
# timed first in one round of each case. One v23 grid ran the rounds with no load first
# (`_run3`): its first round, in the first half second after idle, came out slightly fast (1.006
# of the medians on average at head dims 128 and 256), the later ones slightly slow; the medians
# met 0.9 everywhere either way. So the swing is fast first, then slow: the one-median grids timed
# this Gluon kernel about 0.7 s after the step, behind five other timings, where the lowest clocks
# fall.

# %%
after = explain.v23_after_compile(rdir)
after = after[~after["grid"].str.startswith(("v10_", "v11_"))]
plots.plot_after_compile(after)
plt.show()
record("v23_after_compile", {g: [round(float(r.min()), 3), round(float(r.max()), 3), int((r < 0.9).sum()), len(r)]
                             for g, r in after.groupby("timed")["ratio"]})
after.round(3)

# %% [markdown]
# Rounds also show the spread a single median hides: over v23's first two grids, how far one provider's
# five rounds on one case lie apart, (max - min) / median. For the Gluon kernel and FA3 FP8 that is
# 2-3 % in the median case and up to 7-8 %: as large as the margins the 0.9 line was missed by. The
# Triton kernel's widest is 17 %, one case in one grid; its median spread is 2.5 %.

# %%
rounds = pd.concat([pd.DataFrame(bench.load_results(rdir / f"bench_v23_rounds{run}.json")["rows"]).assign(grid=g)
                    for g, run in (("v23", ""), ("v23 run 2", "_run2"))])
rounds = rounds[rounds["tflops"].notna()]
by = rounds.groupby(["grid", "case", "provider"])["tflops"]
spread = ((by.max() - by.min()) / by.median()).rename("spread").reset_index()
spread.groupby("provider")["spread"].describe()[["50%", "max"]].rename(columns={"50%": "median"}).round(3)

# %% [markdown]
# ## (d) The roofline
#
# Attention at these lengths performs thousands of FLOPs per byte of HBM traffic
# (Q, K, V read once, in FP8 or bf16, O written in bf16), so bandwidth is never the limit;
# the compute ceilings are. Two are measured on this card (FP8 and bf16 GEMM, `torch._scaled_mm`
# and `torch.mm` at 8192^3, facts file; the clock they ran at was not logged); the datasheet's dense
# FP8 peak, 1979 TFLOP/s, is drawn for scale: no GEMM on this card reaches it. The other two are
# models at one clock, so they compare like for like: the FP8 tensor cores do 8192 FLOP per SM per
# clock (`bench.mma_peak_tflops`; the datasheet's figure is this at 1.83 GHz), and every score needs
# one `exp2`, of which the SM's special-function unit does 16 per clock, which caps attention at
# `132 SMs x clock x 16 x 4d` FLOP/s, one line per head dim.

# %%
copy_tbps = bench.H200_COPY_TBPS["measured copy (facts file)"]
cases = {c.label(): c for c in bench.bench_grid()}
pts = pd.concat([fastest.assign(provider="fp8lab (faster kernel)"),
                 grid[grid["provider"].isin(["fa3-fwd FP8", "fa3-fwd bf16"])]])
pts["intensity"] = [bench.attention_intensity(cases[c], input_bytes=2 if p == "fa3-fwd bf16" else 1)
                    for c, p in zip(pts["case"], pts["provider"])]
ceilings = {**bench.H200_CEILINGS, "FP8 MMA peak (model, 1.98 GHz)": bench.mma_peak_tflops(),
            **{f"exp2 model, d={d}": bench.exp2_ceiling_tflops(d) for d in (64, 128)}}
plots.plot_roofline(pts, ceilings, copy_tbps)
plt.show()
exp2 = pd.DataFrame({"head_dim": [64, 128, 256]})
exp2["exp2 ceiling (model)"] = [bench.exp2_ceiling_tflops(d) for d in exp2["head_dim"]]
exp2["at the clock measured in (c)"] = [bench.exp2_ceiling_tflops(d, clock_ghz=power.loc[d, "sm_mhz"] / 1000)
                                        for d in exp2["head_dim"]]
exp2["FP8 MMA peak (model)"] = bench.mma_peak_tflops()
exp2["FP8 GEMM (measured)"] = bench.H200_CEILINGS["FP8 GEMM (torch._scaled_mm, 8192^3)"]
exp2["best FA3 FP8"] = [grid[(grid["head_dim"] == d) & (grid["provider"] == "fa3-fwd FP8")]["tflops"].max()
                        for d in exp2["head_dim"]]
exp2["best fp8lab (faster kernel)"] = [fastest[fastest["head_dim"] == d]["tflops"].max() for d in exp2["head_dim"]]
exp2

# %% [markdown]
# Per clock, a score costs 4d FLOPs of MMA and one exp2: at peak, the exp2s take half the MMAs'
# time at head dim 256, as long at 128, and twice as long at 64, whatever the clock. Add the
# softmax's other per-score work (scale, max, sum, the P cast), which runs on the same SM, and at
# head dims 64 and 128 the softmax is at least as large a share of each score's cost as the tensor
# cores; only a kernel that overlaps it with the MMAs gets close to either ceiling. The best kernels
# reach about 63 % of the exp2 model's ceiling at head dim 64 (675 of about 1070 TFLOP/s), and a
# little over half of the MMA model's peak at 256. FA3 overlaps softmax and MMAs with ping-pong
# warpgroups, our Gluon kernel with its own producer/consumer warps (notebook 08 (h)); the Triton
# kernel only gets the overlap that two or three co-resident programs per SM give it.
#
# The models assume the maximum clock. At head dims 128 and 256 the power limit of (c) takes
# 5-12 % of that clock away, and with it the same share of both modelled ceilings (the second
# column).

# %% [markdown]
# ## (e) Fused quantization against the copy
#
# Quantizing x to e4m3 takes one or two operations per value and moves 3 bytes (bf16 read, e4m3
# written): like a copy, it is bound by memory, not by arithmetic. So we time it against a device
# copy of the same bf16 tensor (read 2 + write 2) and report the *fraction of copy*: the kernel's
# useful bandwidth (its 3 bytes per value) over the copy's. The issue asks for 85 %. The kernels
# take microseconds, so the timings replay CUDA graphs: the kernels alone, without the host's
# launch overhead. The replays run back to back without flushing L2 (50 MiB), for the kernels and
# the copy alike: at 128 MiB little of x survives in L2 from one replay to the next, but at 32 MiB
# and below x and y fit in it together, so the small sizes' fractions (those above 1 included) say
# how fast a kernel runs on data L2 still holds, not on HBM.

# %%
quant = bench.records_frame(rdir, "quant")
knobs = ["tile", "tile_words", "part_kib", "part_bytes", "fused_tile_elements", "_fresh_table"]  # knob sweeps' rows
quant = quant.reindex(columns=[*quant.columns, *({"size", "frac_copy_graph", *knobs} - set(quant.columns))])
quant["size"] = quant["size"].fillna("1x16384x32x128 (128 MiB)")  # v5 measured only this size
quant["kernel"] = quant["kernel"].str.replace(" (2 passes)", " two-pass", regex=False)  # v5's names
graph = quant[quant["frac_copy_graph"].notna() & quant[knobs].isna().all(axis=1)
              & ~quant["kernel"].str.contains("tile=|copy", regex=True, na=True)]
for v in ("v14", "v15"):
    record(f"quant_frac_copy_graph_{v}", {f"{r.kernel} {r.size[:14]}": round(r.frac_copy_graph, 3)
                                          for r in graph[graph["version"] == v].itertuples()})
plots.plot_quant_bandwidth(graph[graph["size"].str.contains("128 MiB")],
                           title="One token-major sequence of 128 MiB, current scales: "
                                 "static and per-token at copy speed, per head below")
plt.show()

# %% [markdown]
# Static scales (vLLM's Q path: the descale is an input) and per-token scales (the amax of one
# row of head_dim values) run at copy speed: each value is cast as soon as it, or its row, has
# been read, so x is read once.
#
# **Current** per-head and per-tensor scales are different: the scale is the amax of a whole
# slice (one sequence's kv head) or of all of x, so no value can be cast before the last value of
# its slice has been read. Either x is read twice, an amax pass then a cast pass
# (`schedule="two-pass"`: 5 bytes moved per 3 useful), or x waits on chip until its amax is known
# (kernel-notes, "Quantization: why per-head needs two reads of each value"). How much must wait?
# With H bytes of x held on chip, a kernel that moves bytes at copy speed reaches at most
# (x + y) / (x + y + (x - H)) of copy (`bench.one_pass_bound`; x in bf16, y in e4m3). For
# per-tensor scaling of the benchmark's 128 MiB, against what the H200 holds:

# %%
x_bytes = 16384 * 32 * 128 * 2  # 128 MiB of bf16
held = pd.DataFrame({"held_mb": [mb for mb in range(0, 141, 2)]})
held["bound"] = [bench.one_pass_bound(x_bytes, mb * 1e6) for mb in held["held_mb"]]
on_chip = {name: b / 1e6 for name, b in bench.H200_ON_CHIP_BYTES.items()}
marks = {"shared memory": on_chip["shared memory (132 x 228 KiB)"],
         "+ registers": on_chip["shared memory (132 x 228 KiB)"] + on_chip["registers (132 x 256 KiB)"],
         "+ L2: everything": sum(on_chip.values())}
needed_mb = bench.held_for(x_bytes, 0.85) / 1e6
plots.plot_one_pass_bound(held, marks)
plt.show()
bound_table = pd.DataFrame({"MB of x held": [0.0, *marks.values(), needed_mb]},
                           index=["nothing (two passes)", *marks, "needed for 85 %"])
bound_table["bound (of copy)"] = [bench.one_pass_bound(x_bytes, mb * 1e6) for mb in bound_table["MB of x held"]]
record("per_tensor_bound", {"needed_mb": round(needed_mb, 1), **{k: round(v, 3) for k, v in
                                                                  bound_table["bound (of copy)"].items()}})
print(f"one per-head slice (one sequence's kv head, 16384 tokens x 128): {16384 * 128 * 2 / 1e6:.1f} MB of bf16")
bound_table.round(3)

# %% [markdown]
# Holding nothing is two passes (first row). What 85 % needs (last row) is more than all the SMs'
# shared memory and registers together, and most of the chip with the L2, which must also carry
# the writes and the second read: current per-tensor scaling of an x this large reads it twice.
# Per head the bound does not bite, because a slice is small (printed above): a kernel that holds a
# few slices at a time reads x once, and where all of x fits on chip it does the per-tensor cast in
# one read too (exercise 5: up to which size).
#
# ### The on-chip kernel: slices wait in shared memory
#
# `schedule="onchip"` (Gluon; `"auto"` picks it on Hopper where the slices fit) runs persistent
# programs, two per SM. TMA loads 32 KiB parts of the slices into shared memory; each part's amax
# goes into a table in global memory; a part is cast once every amax of its slice is in. HBM is
# read once. How it was built and what did not help are in `docs/kernel-notes.md`: v13-v15 (the
# kernel, its instructions, one job per warp), v16-v17 (where its time goes, what x's layout
# costs). Two earlier designs lost to it: v7's `schedule="fused"` (one launch whose casts re-read
# x from L2) and v9's tiles waiting in registers.
#
# What matters is the slice. Splitting the same 16k tokens into more sequences makes the slices
# smaller; storing x head-major, (b, h, s, d) as PyTorch's SDPA does, makes each slice contiguous.
# v18 timed every kernel at each split of the same 128 MiB (three repeats, bits checked against two
# passes), as fractions of a copy timed in the same run:

# %%
all_shapes = bench.records_frame(rdir, "quant_shapes")  # v18 here; v25's run, below, timed the same and more
shapes = all_shapes[all_shapes["version"] == "v18"]
plots.plot_quant_shapes(shapes)
plt.show()
span = explain.quant_split_table(shapes)
record("quant_shapes_per_head_onchip", {f"{b}x{16384 // b}": [span.loc["per-head onchip", (b, "min")],
                                                              span.loc["per-head onchip", (b, "max")]]
                                        for b in sorted(shapes["batch"].unique())})
issue = explain.quant_split_table(shapes, copy_tbps=4.3)
record("quant_shapes_of_4_3", {k: [issue.loc[k, (b, "min")] for b in (1, 2, 4, 8, 16)]
                               for k in ("per-head onchip", "per-head onchip, head-major x", "per-token")})
print(f"this run's copy: {shapes['copy_tbps_graph'].min():.3f}-{shapes['copy_tbps_graph'].max():.3f} TB/s")
span

# %% [markdown]
# Read the `per-head onchip` row from left to right: token-major x reaches 85 % only once its
# tokens are split into several sequences, head-major x passes at every split, and with 4 query
# heads per kv head (GQA4) a slice is four times larger and only short sequences pass. Static and
# per-token scaling stay at copy speed; two passes stay below the two-pass ceiling above.
#
# *Which copy?* The issue's 4.3 TB/s is the facts file's device copy, which a copy reaches only at
# gigabytes; this run's copy of 128 MiB (printed above) is slower. The targets table at the end of
# this section reads every timing both ways.
#
# Why one long token-major sequence costs points: Nsight Compute (v22) found that every layout
# reads x from DRAM once and keeps the DRAM equally busy; with one sequence the warps wait longer
# for their parts to land (the try-waits rows). More buffers (v29), L2 prefetches, other part sizes
# and more cast warps (v22) did not help; kernel-notes v22 and v29 have the counters.

# %%
profile = explain.v22_quant_profile(rdir)
record("v22_quant_profile", {shape: {k: float(v) for k, v in col.dropna().items()}
                             for shape, col in profile.items()})
profile

# %% [markdown]
# ### Two passes, the second one backwards (v23)
#
# Where a slice does not fit (per tensor beyond the chip, per head where a slice is too long),
# fp8lab reads x twice. Since v23 the cast pass walks x backwards, so it begins with the blocks the
# amax pass read last, which L2 still holds. Same bits; backward over forward at each size:

# %%
rev = pd.DataFrame(bench.load_results(rdir / "bench_v23_reverse.json")["rows"])
rev_table = rev.pivot_table(index="size", columns="kernel", values="frac_copy_graph", aggfunc="median", sort=False)
record("v23_reverse_gain", {g: [round(float(x), 3) for x in rev_table[f"{g} backward"] / rev_table[f"{g} forward"]]
                            for g in ("tensor", "head")})
print("same bits in every row:", bool(rev["same_bits"].all()))
rev_table.round(3)

# %% [markdown]
# The gain is what L2 still holds of x, largest where that share is largest. Per tensor at 128 MiB
# it brings two passes up to the bound's first row, not towards 85 %.
#
# ### The scale from before: delayed scaling in one pass (v25)
#
# Everything so far is *current* scaling: the scale comes from the tensor being quantized.
# TransformerEngine's *delayed* scaling (notebook 02, section 4) takes the descale from the amaxes
# of earlier calls, so each value is cast as soon as it is read: one read, one write, and x's amax
# recorded on the way for the next call. `fp8lab.kernels.quantize_fp8_delayed(x, descale)` is that
# kernel, and `quantize_delayed(x, strategy)` runs it as `fp8lab.scaling.quantize` runs a
# `DelayedAmax` source: same bits, descales and history. v25 timed it beside everything v18 timed:

# %%
v25 = all_shapes[all_shapes["version"] == "v25"]
plots.plot_quant_shapes(v25, title="A scale from earlier calls needs no split: delayed scaling at 0.9 everywhere")
plt.show()
v25_span = explain.quant_split_table(v25)
v25_issue = explain.quant_split_table(v25, copy_tbps=4.3)
record("v25_quant_shapes_low", {k: [float(v25_span.loc[k, (b, "min")]) for b in (1, 2, 4, 8, 16)]
                                for k in ("per-head delayed", "per-head delayed, head-major x", "per-head GQA4 delayed",
                                          "per-head onchip", "static (vLLM Q)")})
record("v25_quant_shapes_of_4_3_low", {k: [float(v25_issue.loc[k, (b, "min")]) for b in (1, 2, 4, 8, 16)]
                                       for k in ("per-head delayed", "per-head GQA4 delayed", "per-head onchip")})
print(f"this run's copy: {v25['copy_tbps_graph'].min():.3f}-{v25['copy_tbps_graph'].max():.3f} TB/s")
v25_span

# %% [markdown]
# The `delayed` rows no longer depend on the split, the layout or GQA, and sit above the line
# everywhere; they stay short of the static cast, whose single multiply is cheaper than an amax and
# an exact division. The same kernels at other sizes of one sequence, per tensor too (one descale
# for all heads), with v25's launch:

# %%
sizes = explain.quant_sizes(rdir / "bench_v25_quant_sizes.json")
plots.plot_quant_sizes(sizes)
plt.show()
size_table = explain.quant_size_table(sizes)
record("v25_quant_sizes_low", {k: {int(m): round(float(v), 3) for m, v in row.items()} for k, row in size_table.iterrows()})
size_table.round(3)

# %% [markdown]
# Below 128 MiB v25's launch ran more programs than fit on the SMs at once, each with few tiles,
# as two short waves; v26 launches one wave there instead:

# %%
sizes26 = explain.quant_sizes(rdir / "bench_v26_quant_sizes.json")
plots.plot_quant_sizes(sizes26, title="One wave of programs below 4 tiles each: delayed scaling near 85 % of copy from 32 MiB")
plt.show()
size_table26 = explain.quant_size_table(sizes26)
record("v26_quant_sizes_low", {k: {int(m): round(float(v), 3) for m, v in row.items()}
                               for k, row in size_table26.iterrows()})
size_table26.round(3)

# %% [markdown]
# From 128 MiB delayed scaling keeps 85 % per head and per tensor, and with v26's launch it is at
# or near the line from 32 MiB. At the smallest sizes every kernel is launch-bound, and L2 serves
# part of the copy, which lowers every fraction. How the kernel got there (the division, its
# registers, the launch) is in kernel-notes v25 and v26. The price is notebook 02's lesson: the scale is one step
# late, so a range that jumps saturates for a step. Current scaling pays in bandwidth instead.
#
# ### Where the 85 % target stands
#
# Every timing above at 128 MiB (16k tokens x 32 heads x 128, one query head per kv head) by kind
# of scaling, read from the records by `bench.quant_targets` (`records` says which a row reads): the
# lowest and highest fraction of a copy timed in the same run, and of the issue's 4.3 TB/s. "met":
# every timing reaches 85 %; "at the line": some do; "not met": none. Kernel-notes' targets table
# has the other sizes.

# %%
targets = bench.quant_targets(rdir)
record("quant_targets", targets.drop(columns=["records", "sequences"]).round(3).to_dict(orient="index"))
with pd.option_context("display.precision", 3):  # three decimals: 0.846 is not 0.85
    display(targets)  # noqa: F821 - IPython

# %% [markdown]
# Read down the verdict columns. Static, per-token and delayed scaling, per head and per tensor,
# meet the target on both readings: each casts a value as soon as it has read it (per token, as
# soon as it has read its row). Current per-head scaling, which must first read the value's whole
# slice, meets it against this run's copy for head-major x and for token-major x split into 8 or
# more sequences, is at the line with 4 and misses it with one or two long sequences; against
# 4.3 TB/s, the stricter reading, head-major x is at the line and token-major x misses it at every
# split. Current per-tensor scaling misses it on both: x is read twice, and the bound above says
# why no kernel can avoid that at this size.

# %% [markdown]
# ## (f) Why is vLLM's FP8 varlen path slower?

# %%
vl = grid.pivot_table(index="case", columns="provider", values="tflops", sort=False).reindex(
    columns=["fa3-fwd FP8", "fa3-fwd FP8 varlen", "vLLM FA3 FP8 varlen"])  # older grids lack some: NaN
vl["vLLM / fa3-fwd"] = vl["vLLM FA3 FP8 varlen"] / vl["fa3-fwd FP8"]
vl["fa3-fwd varlen / batched"] = vl["fa3-fwd FP8 varlen"] / vl["fa3-fwd FP8"]
record("vllm_over_fa3_fp8", dict(zip(vl.index, vl["vLLM / fa3-fwd"].round(3))))
vl

# %% [markdown]
# vLLM's FA3 FP8, called through its varlen entry, runs at 0.32-0.36x fa3-fwd at head dim 256
# and 0.71-0.86x at 64 and 128, on identical inputs (v23 grid; v12: 0.33-0.35x and 0.72-0.86x;
# v10: 0.7-0.85x; v5: 0.69-0.85x at 64 and 128, 0.33-0.37x at 256). fa3-fwd's own varlen entry on the same inputs runs as fast as its
# batched one (0.95-1.01x), so
# the varlen path is not the cause: vLLM 0.33.0's build is. v28 found a candidate (section (b)):
# vLLM's library adds every key block's P·V into O in fp32, and at head dim 256 that second fp32
# tile does not fit beside O in a consumer's registers. Our Gluon kernel flushing the whole width
# there spilled and ran at 383 TFLOP/s, close to vLLM's 350-380; computed in two halves it runs at
# 961. That vLLM's kernel spills for the same reason is our reading; its SASS was not examined.

# %% [markdown]
# ## (g) Through the kit's own call (v24)
#
# Everything above calls each kernel directly, with V already stored the way it wants it. A user
# calls `fp8lab.attention(q, k, v, ..., backend="triton")` with V in FA3's layout (head_dim
# contiguous). On a Hopper GPU that call runs the Gluon kernel for batched inputs at head dims 64,
# 128 and 256 (the `gluon` provider; the Triton kernel otherwise), stores V as `key_ordered_vt(v)`
# in every call (one Triton copy), and first checks every input, the descale values included (one
# device sync). v24 timed the grid that way, next to the same kernels and fa3-fwd called directly,
# and to fa3-fwd through the same call.

# %%
api = explain.v24_api_grid(rdir)
record("v24_api_gluon_over_api_fa3", dict(zip(api.index, api["API Gluon / API FA3"].round(3))))
plots.plot_api_grid(api)
plt.show()
api.round(3)

# %% [markdown]
# Through the API, the Gluon kernel runs at 0.82-1.02x fa3-fwd through the same call; the gap to
# its direct 0.93-0.99x is widest on the short cases. One call taken apart shows why:

# %%
overhead = explain.api_overhead(rdir, "v24")
record("v24_api_extra_ms", {f"{c} {v}": round(x, 3) for c, v, x in
                            zip(overhead["case"], overhead["variant"], overhead["extra ms"])})
overhead.round(3)

# %% [markdown]
# On a 0.94 ms call (4 x 4096 x 32 x 64) the API adds 0.27 ms to the Gluon kernel and 0.21 ms to
# fa3-fwd. For the Gluon kernel most of it is the sync of the descale check (0.15 of its 0.27 ms;
# for fa3-fwd 0.08 of 0.21). Without a sync, the host prepares the next
# call while the GPU still runs this one. With it, the GPU waits for the host: for validation, for
# the backend decision and for the launch, and the Gluon kernel's launch takes more host time than
# FA3's. On an 8 ms call the extra time is within the run's spread. `key_ordered_vt` adds 0.02 ms.
# Otherwise the API's checks are what stop a NaN descale before it becomes a NaN output.
#
# Where a loop calls attention over the same buffers, `fp8lab.prepare_attention` takes the same
# arguments, does the checks and the decision once, and returns a call that runs the provider alone
# (the live timing below uses it). v27 timed it beside v24's variants (`bench_v27_api_overhead.json`,
# same probe, two repeats; the 4 x 4096 x 32 x 64 call):

# %%
v27 = explain.api_overhead(rdir, "v27")
v27 = v27[(v27["case"] == "4x4096x32x64") & v27["variant"].isin(
    ["ws direct", "key_ordered_vt + ws", "api triton:gluon", "prepared triton:gluon",
     "fa3 direct", "api fa3:fa3-fwd", "prepared fa3:fa3-fwd"])]
record("v27_prepared_extra_ms", {v: round(x, 3) for v, x in zip(v27["variant"], v27["extra ms"])})
v27.round(3)

# %% [markdown]
# The prepared fa3-fwd call costs what fa3-fwd called directly costs, and the prepared Gluon call
# what the kernel costs with its `key_ordered_vt` copy of V (0.02 ms), while the API's own call
# added 0.4-0.6 ms in this run (0.2-0.3 ms in v24's: the host's share varies from run to run).

# %% [markdown]
# ## Live (Hopper only)
#
# One case of the grid, timed now as v23 timed it: every provider found here on the same inputs
# (`bench.case_calls`: our two kernels, and fa3-fwd and vLLM's FA3 where installed, each checked
# once by `prepare_attention` and then called alone), five interleaved rounds after 1.5 s of load
# (`bench.interleaved_times`), medians, beside the recorded grid.

# %%
if run_live and not smoke and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9:
    live_case = bench.AttentionCase(16384 // live_seqlen, live_seqlen, 32, 32, live_head_dim, live_causal)
    live = pd.DataFrame(bench.interleaved_times(bench.case_calls(live_case), sync=torch.cuda.synchronize))
    if "error" in live:
        for row in live[live["error"].notna()].itertuples():
            print(f"{row.provider} failed: {row.error}")
    live["tflops"] = bench.tflops(live_case.flops(), live["ms"])
    live_tflops = live.groupby("provider", sort=False)["tflops"].median()
    recorded = grid[grid["case"] == live_case.label()].set_index("provider")["tflops"]
    live_table = pd.concat([live_tflops.rename("live, median of 5 rounds"),
                            recorded.rename(f"recorded ({record_version})")], axis=1)
    if "fa3-fwd FP8" in live_tflops:
        live_table["live / FA3 FP8"] = live_tflops / live_tflops["fa3-fwd FP8"]
    record("live_tflops", {"case": live_case.label(), **live_tflops.round(1).to_dict()})
    print(f"{live_case.label()} on {env.context().get('gpu')}")
    display(live_table.round(3))  # noqa: F821 - IPython
else:
    print("live timing skipped (needs a Hopper GPU, run_live=True and smoke=False)")

# %% [markdown]
# ## Summary
#
# - Benchmark rows carry their context; medians of many runs; FA3 repeats within a few per cent.
#   At head dim 128 and 256 the H200 runs at its 700 W limit, 1650-1900 MHz instead of 1980, so
#   every number there depends on the power budget too (v19).
# - fp8lab's faster kernel per case reaches 0.916-1.025x FA3 FP8 in the v23 grid: 0.9x in all 18
#   cases, and in three more v23 grids (lowest 0.913-0.928). Both kernels beat FA3 bf16 and vLLM's
#   FP8 varlen path everywhere. vLLM's path does more, though: it adds each key block's P·V to O
#   in fp32, which keeps long contexts accurate (the `vllm-so` row of the long-context table in (b)
#   against `fa3-fwd`'s and ours). With
#   the same two-level sum (`pv_flush=True`, v28) ours still beats it everywhere (1.11-1.23x,
#   2.3-2.6x at head dim 256) and runs at 0.82-0.98x fa3-fwd.
# - The one-median grids before v23 missed one case about a third of the time, each time having
#   timed it in the clock's swing after an idle compile; benchmarks on a power-limited card need
#   interleaved rounds after the load settles. The older v2 grid understated
#   ours: device syncs sat inside its timed calls.
# - Attention is compute-bound. Per clock, the exp2 unit and the FP8 tensor cores take equal time
#   per score at head dim 128, the exp2 unit more below it; no kernel here reaches either ceiling.
# - Quantization against 85 % of the copy, at 128 MiB (the targets table in (e), `bench.quant_targets`,
#   on both readings of "copy": one timed in the same run, and the issue's 4.3 TB/s): static,
#   per-token and delayed scaling (the descale from earlier calls, per head and per tensor, v25-v26)
#   meet it, because each casts a value as soon as it has read it. Current per-head scales must wait
#   for their slice, which the on-chip kernel holds in shared memory so that x is read once: met
#   (against the run's copy) for head-major x and for token-major x split into 8 or more sequences,
#   not for one or two long sequences (kernel-notes v16-v17, v22, v29: the layout, not a step of
#   the kernel). Current per-tensor scales wait for all of x, which no H200 holds at this size: two
#   reads, not met, and `bench.one_pass_bound` shows no kernel could meet it.
# - vLLM's slow FP8 path at head dim 256 is its build, not the varlen entry: fa3-fwd's varlen is fast.
# - The API's checks cost 0.2-0.6 ms per call (mostly the descale check's sync), which matters on
#   calls of about a millisecond; `prepare_attention` does them once and then costs what the
#   provider called directly costs (v27).
#
# ## Exercises
#
# 1. What is the arithmetic intensity (FLOP per HBM byte) of the case `4x4096x32x64`
#    (non-causal; FP8 Q, K, V each read once, bf16 O written once)? Set `answer_1` (a number).
# 2. With bf16 inputs the tensor cores do 4096 FLOP per SM per clock (`bench.mma_peak_tflops(
#    flop_per_clock=4096)`). At which head dim would the exp2 unit take as long per score as the
#    bf16 MMAs? Does the clock change the answer? Set `answer_2`.
# 3. In how many of the record's cases does the Triton kernel alone (the `fp8lab` column of the
#    table in (a)) beat FA3 bf16? Set `answer_3`.
# 4. Before a kernel casts the first value of x (1 x 16384 x 32 x 128 bf16, 128 MiB, 32 kv heads),
#    its descale must be known. On how many of this call's values of x does that descale depend
#    with delayed scaling (the descale from earlier calls), and with current scaling per token, per
#    head and per tensor (`compact_shape` of `fp8lab.scaling`'s granularities gives the number of
#    descales)? Set `answer_4` to the four counts. Which of them fit in what the 132 SMs hold
#    (`bench.H200_ON_CHIP_BYTES`), and what does that say about reading x once?
# 5. Current per-tensor scaling can read x once only if x waits on chip until its amax is known.
#    Holding all the SMs' shared memory and registers (`bench.H200_ON_CHIP_BYTES` without the L2,
#    which also carries the traffic), what does `bench.one_pass_bound` (read its docstring) give
#    for x of 32 MiB and of 512 MiB of bf16? Set `answer_5` to the two bounds. From which size of x
#    is 85 % out of reach (`bench.held_for`), and towards what does the bound fall as x grows?
# 6. At the copy rate of v25's run (printed above its split table in (e)), how long does moving the
#    bytes of quantizing 128 MiB of bf16 to e4m3 take, reads plus writes (a floor at the copy's rate,
#    not the HBM's: the datasheet's 4.8 TB/s would give less)? How
#    many times that is the fastest v25 timing at 128 MiB (hint: a fraction of copy is the copy's
#    time for the same bytes over the kernel's)? Set `answer_6` to (microseconds, that ratio).

# %%
answer_1 = None  # FLOP per byte
answer_2 = None  # a head dim
answer_3 = None  # a count
answer_4 = None  # (delayed, per token, per head, per tensor): counts of values
answer_5 = None  # (bound at 32 MiB, bound at 512 MiB): fractions of copy
answer_6 = None  # (microseconds, fastest time over that floor)

# %% tags=["solution", "hide-input"]
# Solution (collapsed): computed, not typed in.
_by_solution = unanswered(globals(), 1, 2, 3, 4, 5, 6)  # before filling them in
if answer_1 is None:
    answer_1 = bench.attention_intensity(cases["4x4096x32x64"])
if answer_2 is None:
    answer_2 = 4096 // (16 * 4)  # 4d FLOPs per exp2: 16 exp2 x 4d = 4096 per clock; the clock cancels
if answer_3 is None:
    answer_3 = int((table["fp8lab"] > table["fa3-fwd bf16"]).sum())
x_shape = (1, 16384, 32, 128)  # the exercises' x: batch, tokens, heads, head_dim (x_bytes of (e)'s bound)
if answer_4 is None:  # delayed: the descale was fixed before this call read anything
    answer_4 = (0, *(math.prod(x_shape) // math.prod(g.compact_shape(x_shape))
                     for g in (PerToken(), PerHead(), PerTensor())))
sm_bytes = sum(b for name, b in bench.H200_ON_CHIP_BYTES.items() if not name.startswith("L2"))  # shared memory, registers
if answer_5 is None:
    answer_5 = tuple(bench.one_pass_bound(mib * 2**20, sm_bytes) for mib in (32, 512))
if answer_6 is None:
    floor_us = (x_bytes + x_bytes // 2) / (v25["copy_tbps_graph"].mean() * 1e12) * 1e6  # bf16 in, e4m3 out
    answer_6 = (floor_us, v25["ms_graph"].min() * 1e3 / floor_us)

# %%
c = cases["4x4096x32x64"]
assert abs(answer_1 / (c.flops() / bench.attention_bytes(c.batch, c.seqlen, c.heads_q, c.heads_kv, c.head_dim)) - 1) < 1e-3
for ghz in (1.98, power.loc[256, "sm_mhz"] / 1000):  # at the maximum clock and at (c)'s power-limited one
    assert abs(bench.exp2_ceiling_tflops(answer_2, clock_ghz=ghz)
               / bench.mma_peak_tflops(clock_ghz=ghz, flop_per_clock=4096) - 1) < 1e-9, "exp2 time = MMA time per score"
assert answer_3 == int((table["fp8lab"] > table["fa3-fwd bf16"]).sum())
print(f"1: {answer_1:.0f} FLOP/byte   2: head_dim {answer_2}   3: {answer_3} cases")

values = dict(zip(["delayed", "per token", "per head", "per tensor"], (
    0, x_shape[3], x_shape[1] * x_shape[3], math.prod(x_shape))))  # nothing; a row; a slice; all of x
assert tuple(answer_4) == tuple(values.values()), f"exercise 4: expected {tuple(values.values())}"
for kind, n in values.items():
    fits = "fits on chip: one read" if 2 * n <= sm_bytes else "more than the SMs hold: x is read twice"
    print(f"4: {kind:>10}: the first cast waits for {n:>10,} values ({2 * n / 1e6:8.3f} MB of bf16; {fits})")
print(f"   (the SMs' shared memory and registers: {sm_bytes / 1e6:.0f} MB. Measured at 128 MiB, of copy: " + ", ".join(
    f"{k} {targets.loc[k, 'low']:.2f}-{targets.loc[k, 'high']:.2f}" for k in
    ("delayed, per head", "per token", "current, per head, head-major x", "current, per tensor")) + ")")

bounds = {mib: bench.one_pass_bound(mib * 2**20, sm_bytes) for mib in (32, 512)}
assert all(abs(a - b) < 1e-3 for a, b in zip(answer_5, bounds.values())), f"exercise 5: expected {bounds}"
out_of_reach = sm_bytes / (bench.held_for(x_bytes, 0.85) / x_bytes)  # held_for grows in proportion to x
print(f"5: bound {answer_5[0]:.3f} at 32 MiB{' (x fits: one read)' if bounds[32] == 1 else ''}, "
      f"{answer_5[1]:.3f} at 512 MiB; one read at best up to "
      f"{sm_bytes / 2**20:.0f} MiB, 85 % out of reach beyond {out_of_reach / 2**20:.0f} MiB; as x grows the bound "
      f"falls to two passes' {bench.one_pass_bound(x_bytes, 0):.2f} (5 bytes moved per 3 useful)")

floor = (x_bytes + x_bytes // 2) / (v25["copy_tbps_graph"].mean() * 1e12) * 1e6
fastest = v25.loc[v25["ms_graph"].idxmin()]
assert abs(answer_6[0] / floor - 1) < 0.01, f"exercise 6: the floor is {floor:.1f} us"
assert abs(answer_6[1] - fastest["ms_graph"] * 1e3 / floor) < 0.01, "exercise 6: the fastest time over the floor"
print(f"6: {answer_6[0]:.1f} us at the copy rate, {v25['copy_tbps_graph'].mean():.2f} TB/s; the fastest, {fastest['kernel']} "
      f"({fastest['size']}), takes {fastest['ms_graph'] * 1e3:.1f} us = {answer_6[1]:.3f}x that: 1 / its fraction of "
      f"copy ({fastest['frac_copy_graph']:.3f}). A fraction of copy is the floor over the time"
      + ("; below 1 because the floor is the copy's rate, not the HBM's: this kernel moves its 3 bytes a value a "
         "little faster than the copy moves its 4." if answer_6[1] < 1 else "."))
print(exercise_note(_by_solution))
