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
# - **(e)** what fused FP8 quantization costs against the device copy, which kinds of scaling meet
#   the 85 % target (a table read from the records), and why current per-tensor scaling of an x
#   larger than the chip cannot (a bound you can compute);
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
import json
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
grid_all = grid_all[grid_all["round"].isna()] if "round" in grid_all else grid_all  # v28's flush grid, round by round: (b)
versions = sorted((p.name[6:-10] for p in rdir.glob("bench_v*_grid.json") if p.name[7:-10].isdigit()),
                  key=lambda v: int(v[1:]))
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
# was timed second, right after the Triton kernel, while the clock swung between 1545 and 1875 MHz.

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
# and `torch.mm` at 8192^3, facts file); the datasheet's dense FP8 peak, 1979 TFLOP/s, is drawn
# for scale: no GEMM on this card reaches it. A third kind is a model: every score needs one
# `exp2`, and the SM's special-function unit does 16 per clock, which caps attention at
# `132 SMs x 1.98 GHz x 16 x 4d` FLOP/s, one line per head dim.

# %%
copy_tbps = bench.H200_COPY_TBPS["measured copy (facts file)"]
cases = {c.label(): c for c in bench.bench_grid()}
pts = pd.concat([fastest.assign(provider="fp8lab (faster kernel)"),
                 grid[grid["provider"].isin(["fa3-fwd FP8", "fa3-fwd bf16"])]])
pts["intensity"] = [bench.attention_intensity(cases[c], input_bytes=2 if p == "fa3-fwd bf16" else 1)
                    for c, p in zip(pts["case"], pts["provider"])]
ceilings = {**bench.H200_CEILINGS, **{f"exp2 model, d={d}": bench.exp2_ceiling_tflops(d) for d in (64, 128)}}
plots.plot_roofline(pts, ceilings, copy_tbps)
plt.show()
exp2 = pd.DataFrame({"head_dim": [64, 128, 256]})
exp2["exp2 ceiling (model)"] = [bench.exp2_ceiling_tflops(d) for d in exp2["head_dim"]]
exp2["at the clock measured in (c)"] = [bench.exp2_ceiling_tflops(d, clock_ghz=power.loc[d, "sm_mhz"] / 1000)
                                        for d in exp2["head_dim"]]
exp2["FP8 GEMM ceiling"] = bench.H200_CEILINGS["FP8 GEMM (torch._scaled_mm, 8192^3)"]
exp2["best FA3 FP8"] = [grid[(grid["head_dim"] == d) & (grid["provider"] == "fa3-fwd FP8")]["tflops"].max()
                        for d in exp2["head_dim"]]
exp2["best fp8lab (faster kernel)"] = [fastest[fastest["head_dim"] == d]["tflops"].max() for d in exp2["head_dim"]]
exp2

# %% [markdown]
# At head dim 64 the exp2 model ceiling (about 1070 TFLOP/s) sits below the FP8 GEMM
# ceiling, and the softmax's other per-score work (scale, max, sum, the P cast) runs on the same
# SM. The best kernels reach about 63 % of that model ceiling there (675 TFLOP/s), so neither
# ceiling is reached; what the model says is that at small head dims the softmax, not the tensor
# cores, is the larger share of each score's cost, and only a kernel that overlaps it with the MMAs
# gets close. FA3 does that with ping-pong warpgroups, our Gluon kernel with its own
# producer/consumer warps (notebook 08 (h)); the Triton kernel only gets the overlap that two or
# three co-resident programs per SM give it.
#
# The model assumes the maximum clock. At head dims 128 and 256 the power limit of (c) takes
# 5-12 % of that clock away, and with it the same share of every ceiling, the tensor cores'
# included.

# %% [markdown]
# ## (e) Fused quantization against the copy
#
# A quantization kernel reads bf16 (2 bytes) and writes e4m3 (1 byte). We count those 3
# bytes once and compare with a device copy of the same bf16 tensor (read 2 + write 2).
# These kernels take 4-190 us, so the timings replay CUDA graphs: the kernels alone,
# without the host's launch overhead (v5 onwards; earlier versions timed eagerly).

# %%
quant = bench.records_frame(rdir, "quant")
knobs = ["tile", "tile_words", "part_kib", "part_bytes", "fused_tile_elements", "_fresh_table"]  # knob sweeps' rows
quant = quant.reindex(columns=[*quant.columns, *({"size", "frac_copy_graph", *knobs} - set(quant.columns))])
quant["size"] = quant["size"].fillna("1x16384x32x128 (128 MiB)")  # v5 measured only this size
quant["kernel"] = quant["kernel"].str.replace(" (2 passes)", " two-pass", regex=False)  # v5's names
graph = quant[quant["frac_copy_graph"].notna() & quant[knobs].isna().all(axis=1)
              & ~quant["kernel"].str.contains("tile=|copy", regex=True, na=True)]
plots.plot_quant_bandwidth(graph[graph["size"].str.contains("128 MiB")],
                           title="v5-v15, one token-major sequence of 128 MiB, current scales: "
                                 "static and per-token at copy speed, per head not yet")
plt.show()
graph[graph["version"].isin(["v14", "v15"])].pivot_table(index="kernel", columns=["size", "version"],
                                                         values="frac_copy_graph", sort=False)

# %% [markdown]
# Static scales (vLLM's Q path) and per-token scales run at copy speed. Per-head and
# per-tensor dynamic scales need the amax of a whole slice (or tensor) before its first
# value can be cast. Four schedules, the same bits:
#
# - `schedule="two-pass"`: an amax kernel, then a cast kernel. Once x outgrows the L2
#   the second kernel reads HBM again: 5 bytes per value, 60 % ceiling. The default per
#   tensor, and per head wherever the on-chip kernel cannot run.
# - `schedule="onchip"` (v13, Gluon, the default on Hopper from 4 MiB where x fits): persistent
#   programs, two per SM, hold 32 KiB parts of the slices in shared memory (TMA fills them),
#   publish each part's amax a part ahead, and cast a part once its slice's amaxes are all in:
#   HBM is read once. v13: 71 % of copy at 128 MiB. v14 counted its compiled instructions (9.5
#   per value: Triton widened every bf16 to float32, and the division paid a select per value),
#   read bf16 two values per instruction, dropped the select, and launched the programs in rounds
#   of whole slices: 77 %, 1.51x two passes. Short of 85 % because the kernel is latency-bound
#   at two warps per scheduler: with the waiting switched off it still stops at 80 %. Per tensor
#   all of x must fit on chip (~25 MiB); there it now beats two passes. v15 split each program's
#   work over warps, as FA3 does (from 64 MiB: a TMA warp, an amax warp, a warp that waits for
#   the table, four warps that only cast), and stopped clearing the table of amaxes before each
#   call (each launch tags its entries): a kernel launch less, 1.0-1.8 us, a tenth of the time at
#   16-32 MiB. 79 % of copy at 128 MiB, 78 % at 32 MiB, 65-67 % with 4 query heads per kv head at
#   128 MiB (v14's kernel: 59 %). The split did not lift the ceiling: with cast warps that do
#   nothing else it stays at 78-81 %, about where v14's kernel without waiting stopped. v16 timed
#   copies of the kernel with one step switched off (`results/h200/run13/`): of its 60 us at
#   128 MiB, reading x, waiting for the table and handing parts over take 40, casting 5 and
#   writing y 15.5, as if writes and reads took turns; per-token quantization moves the same
#   bytes in 49. Reading a slice's table entries in one read gained 3-4 points where slices have
#   129-256 parts (77-79 %); parts spanning two or four kv heads were slower in every form. v17:
#   on the same bytes laid out so that each slice is contiguous memory the kernel reaches 86 %;
#   the token-major layout, not a step of the kernel, holds it at 79 %.
# - `schedule="fused"` (v7): one launch whose cast items trail their amax items by a
#   quarter of the L2, so the cast re-reads from L2. Nsight Compute measured its HBM
#   traffic at 147 MB read for 134 MB of input (two passes: 268 MB), yet it reaches only
#   56 % of copy at 128 MiB and loses at 32 MiB: with the traffic gone, each tile is
#   still loaded into registers twice, and the kernel becomes bound by its instructions
#   and latency (60 % SM throughput at 40 % DRAM throughput, `results/h200/run4/`).
#   Per tensor, every cast must scan every tile's amax: slower than two passes.
# - `"resident"` (v9, measured and removed; code at commit b1c3a16): one program per tile
#   loads it once, publishes its amax and *waits, tile in registers,* until its slice's
#   amax is complete, then casts. Bitwise right on the H200, but 21-30 % of copy. Not
#   profiled; the likely reason: a slice's programs can only leave together, so the GPU
#   advances in slice-sized waves while waiting programs hold their slots and load nothing.
#
# The knobs of the on-chip kernel in v14's run (part size, buffers per program, how far ahead
# amaxes are published, warps, programs per SM; bf16 read as pairs, values per thread, programs
# aligned to slices; `_wait` < 2 switches the waiting off and gives wrong bits: it measures what
# waiting costs). Each row ran once, the first two again at the end; `docs/kernel-notes.md` v13
# and v14 have the exploration:

# %%
sweep = quant[(quant["version"] == "v14") & quant["part_bytes"].notna()].copy()
sweep["part_kib"] = sweep["part_bytes"] // 1024
onchip_knobs = ["part_kib", "buffers", "warps", "ctas_per_sm", "pairs", "vec", "align", "_wait"]
sweep[onchip_knobs] = sweep[onchip_knobs].astype(int)
record("quant_frac_copy_graph_v14", {f"{r.kernel} {r.size[:14]}": round(r.frac_copy_graph, 3)
                                     for r in graph[graph["version"] == "v14"].itertuples()})
sweep.pivot_table(index=onchip_knobs, columns="size", values="frac_copy_graph", sort=False,
                  aggfunc=lambda runs: [round(r, 2) for r in runs])

# %% [markdown]
# v15's run: the warp-specialized kernel (`ws`) at every size (`ws_from_bytes=0`) or at none
# (`ws=False`: v14's kernel), its cast warps and programs per SM, v14's kernel as one program of
# 8 warps with 64 KiB parts, and `_fresh_table` (a zeroed table per call, as v14 made; the same
# bits) against the kept, tagged one. GQA4 rows quantize the same x with 4 query heads per kv head.
# Each row ran once, the first two again at the end:

# %%
v15 = quant[(quant["version"] == "v15") & quant["part_bytes"].notna()].copy()
ws_knobs = ["ws", "ws_from_mib", "warps", "ws_ctas_per_sm", "ws_buffers", "part_kib", "ctas_per_sm", "align",
            "pairs", "vec", "_wait", "_fresh_table"]
v15["ws_from_mib"], v15["part_kib"] = v15["ws_from_bytes"] // 2**20, v15["part_bytes"] // 1024
v15[ws_knobs] = v15[ws_knobs].astype(int)
record("quant_frac_copy_graph_v15", {f"{r.kernel} {r.size[:14]}": round(r.frac_copy_graph, 3)
                                     for r in graph[graph["version"] == "v15"].itertuples()})
v15.pivot_table(index=["kernel", *ws_knobs], columns="size", values="frac_copy_graph", sort=False,
                aggfunc=lambda runs: [round(r, 2) for r in runs])

# %% [markdown]
# At 16 MiB, where the kernel is shortest, the kept table against a zeroed one per call, twice each.
# This run's switch zeroed the table and its counter in two kernels, one more than v14 ran; a
# later call with one (`results/h200/run12/call8`, three interleaved repeats) measured the kept
# table 1.0-1.1 us faster at 16 MiB, 1.8 us at 32 MiB and 0.5 us at 128 MiB, the same bits:

# %%
fresh = quant[(quant["version"] == "v15") & quant["_fresh_table"].notna() & quant["part_bytes"].isna()]
fresh.pivot_table(index="kernel", columns="_fresh_table", values="frac_copy_graph", sort=False,
                  aggfunc=lambda runs: [round(r, 3) for r in runs])

# %% [markdown]
# v16 took the kernel apart instead of tuning it (`results/h200/run13/`, call 1): copies of the
# warp-specialized kernel, each with one step switched off by a source edit (wrong bits by
# design), timed at 128 MiB with one kv head per part, three interleaved repeats. `loads-only`
# keeps the TMA loads, the table waits and the hand-overs to the cast warps; `no-store` adds the
# amaxes and the casts; `no-amax` has everything but the amaxes. What a step costs is the
# difference of two rows:

# %%
split_rows = ["diag loads-only span1", "diag no-store span1", "diag no-amax span1", "ws span1 b6", "per-token",
              "torch amax (reads only)"]
split_path = rdir / "run13" / "call1" / "probe_v16.json"
split = pd.DataFrame(json.loads(split_path.read_text())["rows"]) if split_path.exists() else None
if split is not None:
    split = split[(split["heads_kv"] == 32) & split["kernel"].isin(split_rows)].copy()
    split["us"] = split["ms_graph"] * 1e3
    display(split.pivot_table(index="kernel", columns="rep", values="us").reindex(split_rows))  # noqa: F821 - IPython
else:
    print(f"{split_path} is not in this results directory")

# %% [markdown]
# Reading, waiting and handing over take about 40 us, the casts about 5 more, and the stores of y
# about 15 more: 64 MiB of writes at about a copy's rate, as if writes and reads took turns.
# Per-token quantization moves the same bytes in 49 us.
#
# v17 (`results/h200/run14/`) wrote y by TMA stores from shared memory and with cache hints: no
# faster. Then it ran the same kernel on the same 128 MiB viewed as 1 x 32, 4 x 8, 16 x 2 and
# 32 x 1 sequences x heads (call 2): the plan, the parts and the table waits are the same, only the
# distance between the 256-byte rows of a part changes. In the last view each part is 32 KiB of
# contiguous memory:

# %%
layout_path = rdir / "run14" / "call2" / "probe_layout.json"
layout = pd.DataFrame(json.loads(layout_path.read_text())["rows"]) if layout_path.exists() else None
if layout is not None:
    display(layout.pivot_table(index="kernel", columns="rep", values="frac_copy_graph",  # noqa: F821 - IPython
                               sort=False).round(3))
else:
    print(f"{layout_path} is not in this results directory")

# %% [markdown]
# Where a slice is contiguous the kernel passes the 85 % target; x's token-major layout, the one
# FA3 and vLLM use, costs it about 7 points, and no step of the kernel changes where the bytes
# lie. An x stored head-major, (b, h, s, d) as in PyTorch's SDPA, is that contiguous case:
# `quantize_fp8` now quantizes it through that view and returns a head-major y, at 0.85-0.86 of
# copy per head (`run14/call6`). Loading two or three parts at a time, so that adjacent heads' rows reach DRAM together, was
# slower: the loader then waits for two or three free buffers. v17 also gave Q under GQA (4 query
# heads per kv head) one program of 8 warps per SM with 64 KiB parts below 64 MiB: +4-7 points
# (`run14/call3`).
#
# `quantize_fp8(x, "head")` itself on token-major and head-major x (1 x 16384 x 32 x 128, with 32
# and 8 kv heads; three repeats, `run14/call6`):

# %%
head_major_path = rdir / "run14" / "call6" / "probe_head_major.json"
if head_major_path.exists():
    head_major = pd.DataFrame(json.loads(head_major_path.read_text())["rows"])
    display(head_major.pivot_table(index="layout", columns="heads_kv", values="frac_copy_graph",  # noqa: F821
                                   aggfunc=lambda runs: [round(r, 3) for r in runs]))
else:
    print(f"{head_major_path} is not in this results directory")

# %% [markdown]
# ### How the same tokens are split (v18)
#
# Everything above is one sequence of 16384 tokens. The attention grid splits the same 16k tokens
# into 1, 2 or 4 sequences, and v18 (`results/h200/bench_v18_quant_shapes.*`, `run15/`) timed
# quantization at each split and beyond: 128 MiB each time, three repeats, bits against two passes.
# Per head, a slice is one sequence's kv head. With 16384 tokens its 128 parts lie in all 128
# programs, so at every slice each program waits for every other. With 4096 tokens a slice is 32
# parts, and the programs form four groups that wait only for themselves. That this is what the
# points below pay for was v18's reading; v22 profiled it (below), and found otherwise.

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
# Every fraction here is of a copy of the same 128 MiB timed in the same run: 4.17 TB/s, reads plus
# writes. The issue states its target against the facts file's device copy, 4.3 TB/s, 3 % more. A
# copy reaches that only at gigabytes (4.30 TB/s at 4 GiB), and at 128 MiB even static
# quantization, the simplest one-pass kernel, stops at 4.07 (v23, `bench_v23_copy_sizes.json`).
# The same timings against 4.3:

# %%
issue

# %% [markdown]
# Against this run's copy, token-major x reaches 85 % from 8 sequences of 2048 tokens
# (0.854-0.861), sits at the line with 4 of 4096 (0.846-0.850, 0.852-0.853 in `run15/call3`) and
# misses it with 2 of 8192 (0.81-0.82) and 1 of 16384 (0.78-0.80). Head-major x passes at every
# split (0.85-0.90). With 4 query heads per kv head a slice is 4 times larger, and only short
# sequences pass. Against the issue's 4.3 TB/s the line is 3 % higher: token-major x misses it at
# every split (0.76-0.84), head-major x passes with 4 and 8 sequences (0.857-0.868), is at it with
# 2 and 16 (0.842-0.862) and misses with 1 (0.83-0.84); per-token (0.93-0.96) and static
# quantization (0.97) pass either way.
#
# Three ideas that lost, all in `run15/`:
# - Taking a sequence's kv heads in an interleaved order, so that the slices in flight lie apart
#   in each row (call 2: no gain at any size). The +6 points one call measured at 32 MiB did not
#   repeat in the next.
# - Making one long sequence behave like several, with groups of programs each taking 2 or 4 parts
#   of a slice (call 3: 0.79 and 0.68). A slice then needs 2 or 4 steps to complete, not one.
# - Spreading each slice's table entries over more L2 lines, in case 128 programs polling one
#   slice's 1 KiB of entries delayed the loads that share its L2 slice (call 6: 0.71-0.74 against
#   0.80 for one sequence, and as much slower with four). Why one sequence costs 5-6 points more
#   than four was still open after v18; v22 profiled it, next.
#
# ### One sequence against four, profiled (v22)
#
# Nsight Compute ran the kernel once on each of four layouts of the same 128 MiB (`run18/call3`,
# `scripts/profile_quant.py`): 1, 2 and 4 token-major sequences and the head-major slices. The
# last rows count instructions in the compiled code (SASS) for 1 and 4 sequences. A warp waiting
# on an mbarrier runs a try-wait again and again until the barrier's phase flips, so try-waits per
# wait grow with the wait. Three warps wait on three barriers: the amax and waiter warps for a
# part to land, the cast warps for their hand-over from the waiter, the loader for a free buffer.

# %%
profile = explain.v22_quant_profile(rdir)
record("v22_quant_profile", {shape: {k: float(v) for k, v in col.dropna().items()}
                             for shape, col in profile.items()})
profile

# %% [markdown]
# - Every layout reads x from DRAM exactly once (134.3 MB), and the DRAM is busy for the same
#   number of cycles in all four (within 0.5 %). The longer runs are DRAM time left idle, not
#   more DRAM work.
# - The table is not the difference. One sequence reads it 8.5 times per part, four sequences
#   8.2 times. Its polls hit in L2, whose read hit rate is 0.7-2.1 %.
# - What one sequence does more is wait for parts to land: 3.0 try-waits per wait against 1.9
#   (amax and waiter warps). Its cast warps also wait longer for their hand-overs (7.6 against
#   5.7). The loader waits for a free buffer almost all the time in both.
# - So the buffers are full of parts that have been asked for and have not arrived. When every
#   program reads the same 256-byte column of 16384 rows, the parts land later than when four
#   groups read four adjacent columns of 4096 rows. Which DRAM mechanism causes that, Nsight
#   Compute's counters do not say: on the H200 they count DRAM bytes and busy cycles, not rows
#   or banks (`run18/call6`).
#
# Three things that did not help (v22, `run18/`):
# - Asking L2 for parts beyond the buffers, so that more of x is on its way.
#   - With `cp.async.bulk.prefetch.L2` (one per row) it halved the speed (0.40-0.49 of copy) with
#     one query head per kv head.
#   - With `prefetch.global.L2` (one per 128-byte line), it cost 3-5 points two parts ahead and
#     6-21 points four to eight parts ahead.
#   - Only with 8 kv heads, two parts ahead, was it even (line form) or 1 point faster (bulk form).
# - Other parts and buffers: 16 KiB x 12 and 64 KiB x 3 against 32 KiB x 6 (0.67-0.79 against
#   0.80-0.85).
# - 8 cast warps instead of 4. Over three interleaved repeats at 128 MiB without GQA, the change
#   ran from 1 point slower to 3 points faster; 2 x 8192 gained most (+1.7 to +2.2). At 64 MiB it
#   ran from 2.4 points slower to 0.9 faster. With 4 query heads per kv head in one sequence it was
#   5-8 points slower.
#
# And v29 (`bench_v29_quant_buffers.*`, `run25/call1`) asked whether the buffers bound the kernel,
# as the loader's waits suggest: a seventh 32 KiB buffer per program (224 KiB of the 227 a program
# may take) bought 0.3-0.9 points at 128 MiB (one sequence 0.79-0.80) and nothing at 64 MiB, and a
# fifth cost 1.5-4 points. Six are enough; what is left for one long sequence lies in how its
# 256-byte pieces of 8 KiB rows reach the SMs, which no experiment here has changed.
#
# And the fused kernel's (v7: tile size, warps, how far the casts trail):

# %%
sweep = quant[(quant["version"] == "v7") & quant["tile"].notna()]
sweep.pivot_table(index=["kernel", "tile", "warps"], columns="lag_mib", values="frac_copy_graph")

# %% [markdown]
# ### Two passes, the second one backwards (v23)
#
# Where x is too large for the SMs (per tensor beyond ~25 MiB, per head where a slice is), fp8lab
# quantizes in two passes: an amax kernel, then a cast kernel. The second read of x comes from HBM,
# except for what L2 (50 MiB on the H200) still holds of the first. Until v23 both passes walked x
# forwards, so pass 2 began with the blocks pass 1 had read first: long gone from L2. Since v23 the
# cast kernel walks the blocks backwards and begins with those pass 1 read last. Same bits
# (`scripts/probe_quant_reverse.py`, `run19/call4`: three interleaved repeats, CUDA-graph replays,
# of a copy of the same tensor in the same run):

# %%
rev = pd.DataFrame(bench.load_results(rdir / "bench_v23_reverse.json")["rows"])
rev_table = rev.pivot_table(index="size", columns="kernel", values="frac_copy_graph", aggfunc="median", sort=False)
record("v23_reverse_gain", {g: [round(float(x), 3) for x in rev_table[f"{g} backward"] / rev_table[f"{g} forward"]]
                            for g in ("tensor", "head")})
print("same bits in every row:", bool(rev["same_bits"].all()))
rev_table.round(3)

# %% [markdown]
# Per tensor at 128 MiB: 0.559 to 0.602 of copy (86.3 to 80.2 us), so about 25 MB of pass 2's
# 134 MB came from L2 instead of HBM. The gain is largest at 64 MiB (+15 %), where L2 holds the
# largest share of x, and smallest at 256 MiB (+4 %). That lifts the ceiling two passes seemed to
# have (5 bytes moved per 3 useful, 60 %) only by what L2 holds, so per tensor stays far from 85 %.

# %% [markdown]
# ### The scale from before: delayed scaling in one pass (v25)
#
# Everything in this section so far computes the scale from the tensor being quantized: *current*
# scaling. Per head and per tensor that is what costs, because no value can be cast before the
# last value of its slice has been read. TransformerEngine's *delayed* scaling (notebook 02,
# section 4) takes the descale from the amaxes of earlier calls instead, so the cast needs nothing
# from this call: one read, one write, and x's amax recorded on the way for the next call.
# `fp8lab.kernels.quantize_fp8_delayed(x, descale)` is that kernel: any `(batch, heads_kv)`
# descale, the division correctly rounded as `fp8lab.scaling` divides, and the per-(sequence, kv
# head) amax, which keeps NaN so a caller cannot miss one. `quantize_delayed(x, strategy)` runs it
# as `fp8lab.scaling.quantize` runs a `DelayedAmax` source: the same bits, descales and history,
# step after step (the tests compare five steps of a jumping range).
#
# v25 timed it in `gpu_bench.py --quant-shapes`, next to everything v18 timed, on the same 128 MiB
# split the same ways (`results/h200/bench_v25_quant_shapes.*`, `run21/call5`):

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
# Per head, delayed scaling runs at 0.89-0.90 of copy at every split, token-major or head-major,
# with 4 query heads per kv head too: above 85 % of this run's copy everywhere, and of the issue's
# 4.3 TB/s too, where current scaling on chip stays at 0.78-0.80 for one sequence of 16384 tokens.
# It is 10 % short of the static cast (1.01): the amax and an exact division (three operations
# per value instead of one multiply) cost issue slots. Current scaling's rows in the same run
# repeat v18's within a point or two. Against the issue's 4.3 TB/s:

# %%
v25_issue

# %% [markdown]
# At other sizes (`results/h200/bench_v25_quant_sizes.*`, `run21/call8`; one sequence, 3 rounds, bits
# against torch at every size), per tensor too, with one descale for all heads (a stride-0 expand):

# %%
sizes = explain.quant_sizes(rdir / "bench_v25_quant_sizes.json")
plots.plot_quant_sizes(sizes)
plt.show()
size_table = explain.quant_size_table(sizes)
record("v25_quant_sizes_low", {k: {int(m): round(float(v), 3) for m, v in row.items()} for k, row in size_table.iterrows()})
size_table.round(3)

# %% [markdown]
# From 128 MiB, the benchmark's size, delayed scaling keeps 85 % per head and per tensor; at 64 MiB
# it is near it, and at 32 MiB and below it falls behind the static cast. There each program has only
# 2-4 tiles, and at 128 registers 4 programs fit per SM (v25 did not tune the launch for small
# tensors; v26, next, does). Below 16 MiB every kernel is launch-bound, and the 16 MiB copy is partly served by L2
# (5.8 TB/s), which lowers every fraction there.

# %% [markdown]
# v26 tuned that launch (`probe_quant_delayed.py --tune`, `results/h200/bench_v26_quant_tune.*`,
# `run22/`). At 32 MiB each of the 1056 programs (8 per SM) had 2 tiles, but only 4 fit per SM at
# 128 registers, so they ran as two short waves. The launch now takes 8 programs per SM only while
# each keeps at least 4 tiles, and otherwise one wave of 4 per SM (`_delayed_programs`). Two ways to
# keep more loads in flight gained nothing at any size from 16 to 128 MiB. One was the tile loop as
# a software pipeline (`tl.range(num_stages=2-4)`, call 1: at best 0.79 at 32 MiB, against 0.87
# without). The other issued the next tile's load before this tile's casts (168 registers, so 3
# programs per SM; call 3: at best 0.75 at 32 MiB, against 0.84 without). The size sweep again,
# after the change (`bench_v26_quant_sizes.*`, call 2):

# %%
sizes26 = explain.quant_sizes(rdir / "bench_v26_quant_sizes.json")
plots.plot_quant_sizes(sizes26, title="One wave of programs below 4 tiles each: delayed scaling keeps up from 32 MiB")
plt.show()
size_table26 = explain.quant_size_table(sizes26)
record("v26_quant_sizes_low", {k: {int(m): round(float(v), 3) for m, v in row.items()}
                               for k, row in size_table26.iterrows()})
size_table26.round(3)

# %% [markdown]
# Delayed scaling per head now runs at 0.84-0.86 of copy at 32 MiB (0.76-0.77 in v25; 0.83-0.87 over
# the three calls of run22), 0.84-0.85 at 64 MiB, at the line, and as before from 128 MiB. Per tensor
# it runs at 0.85-0.90 and 0.86. At 16 MiB every kernel but the static cast and per-token scaling
# stays near half the copy, which L2 partly serves there (5.7 TB/s). This delayed kernel needs 2 registers per value in
# flight, where the static cast needs less than 1, so fewer of its loads are in flight at once.

# %% [markdown]
# How it got there (`scripts/probe_quant_delayed.py`, `run21/`, CUDA-graph replays, 3 rounds):
# - Programs loop over consecutive tiles and keep each head's running amax in registers, with one
#   atomic max per sequence at the end. An atomic per tile would put thousands of updates on the
#   same 32 words.
# - First cut (call 1): 0.85 at best, with 16 programs per SM and 4096-value tiles.
# - Call 2 fixed a GPU-only bug: Markstein's division turns an inf x into NaN, not 448. Selecting
#   inf after the division cost 15 points (0.70).
# - Offline SASS showed the cause: the branch to IEEE division for descales below 2^-90 called a
#   slow-path subroutine, and the kernel needed 183 registers against the static cast's 55. Now x
#   is clamped to +-RN(448 d) before the division. That changes no result (every |x / d| above
#   432 gives 448), keeps inf and huge x finite, and replaces the clamp to +-448 after it. A tile
#   whose descale is that small scales d and x by 2^64 instead (uniform branch, no call).
# - Call 3: 72-128 registers, 0.90 with 8 programs per SM and 8192-value tiles, the default. One
#   tile per program (the static cast's launch) gave 0.69-0.80.
# - With 4 query heads per kv head it measured 0.80 until the group size became a compile-time
#   constant (call 4 against call 5). Per tensor, a stride-0 descale, it measured 0.80 until a
#   compile-time switch loaded one descale per sequence (call 7 against call 8).
#
# The price is the lesson of notebook 02, section 4. The scale is one step late: a range that
# jumps saturates for a step, and `max` over a long history holds a stale scale after a drop.
# Current scaling pays in bandwidth instead.

# %% [markdown]
# ### Where the 85 % target stands
#
# Every timing above at 128 MiB (16k tokens x 32 heads x 128, one query head per kv head) by kind
# of scaling: the lowest and highest fraction of a copy of the same bytes timed in the same run,
# and of the issue's 4.3 TB/s, read from the records by `bench.quant_targets` (v18's and v25's
# splits, v23's two passes, v25's and v26's size sweeps; `records` says which a row reads). "met":
# every timing reaches 85 %; "at the line": some do; "not met": none. Kernel-notes' targets table
# has every reading, the other sizes too.

# %%
targets = bench.quant_targets(rdir)
record("quant_targets", targets.drop(columns=["records", "sequences"]).round(3).to_dict(orient="index"))
with pd.option_context("display.precision", 3):  # three decimals: 0.846 is not 0.85
    display(targets)  # noqa: F821 - IPython

# %% [markdown]
# Read down the verdict columns. Static, per-token and delayed scaling, per head and per tensor,
# meet the target on both readings: each casts a value as soon as it has read it (per token, as
# soon as it has read its row of 128). Current per-head scaling, which must first read the value's
# whole slice, meets it against this run's copy for head-major x and for token-major x split into
# 8 or more sequences, is at the line with 4 and misses it with one or two long sequences; against
# 4.3 TB/s, the stricter reading, token-major x misses it at every split. Current per-tensor scaling
# misses it on both: x is read twice, and the bound below says why no kernel can avoid that at this
# size.

# %% [markdown]
# **Why current per-tensor scaling cannot meet it at this size (a bound, not a measurement).** The
# cast of the first value needs the amax of the last. Every byte of x that is no longer on chip when
# the amax is known must be read from HBM a second time. With H MB of x held on chip, a kernel that
# moves bytes at copy speed reaches at most (x + y) / (x + y + (x - H)) of copy
# (`bench.one_pass_bound`; x = 134 MB of bf16, y = 67 MB of e4m3):

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
bound_table.round(3)

# %% [markdown]
# Two passes (nothing held) cannot beat 0.60, and the kit's measured 0.60 is at that ceiling. 85 %
# needs about 99 MB of x held across a grid-wide wait: more than all the shared memory and registers
# of the 132 SMs together (65 MB), and 84 % of everything on the chip with the L2 (118 MB). The L2
# also caches the writes and the second read itself, and registers hold a kernel's own work, so the
# line is out of reach in practice (the register-resident kernel of v9 ran at 21-30 %). Per head the bound does not
# bite: a slice of one sequence's kv head is 4 MB at 16k tokens, and the on-chip kernel holds six at
# once. Where x fits on chip (up to ~25 MiB) the on-chip kernel does the per-tensor cast in one read.

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
# v10: 0.7-0.85x; v5: 0.75-0.9x). fa3-fwd's own varlen entry on the same inputs runs as fast as its
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
# fa3-fwd. Most of it is the sync of the descale check. Without a sync, the host prepares the next
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
# - Attention is compute-bound. At small head dims the exp2 model's ceiling lies below the FP8
#   GEMM's, so the softmax is the larger share of each score's cost; no kernel here reaches either.
# - Quantization against 85 % of the copy, at 128 MiB (the targets table in (e), `bench.quant_targets`,
#   on both readings of "copy": one timed in the same run, and the issue's 4.3 TB/s): static,
#   per-token and delayed scaling (the descale from earlier calls, per head and per tensor, v25-v26)
#   meet it, because each casts a value as soon as it has read it. Current per-head scales must wait
#   for their slice, which the on-chip kernel holds so that x is read once: met for head-major x and
#   for token-major x split into 8 or more sequences, not for one or two long sequences, where the
#   token-major layout, not a step of the kernel (v16, v17, v22; a seventh buffer in v29 did not
#   help), holds it back. Current per-tensor scales wait for all of x, which no H200 holds at this
#   size: two reads, not met, and `bench.one_pass_bound` shows no kernel could meet it.
# - vLLM's slow FP8 path at head dim 256 is its build, not the varlen entry: fa3-fwd's varlen is fast.
# - The API's checks cost 0.2-0.6 ms per call (mostly the descale check's sync), which matters on
#   calls of about a millisecond; `prepare_attention` does them once and then costs what the
#   provider called directly costs (v27).
#
# ## Exercises
#
# 1. What is the arithmetic intensity (FLOP per HBM byte) of the case `4x4096x32x64`
#    (non-causal)? Set `answer_1` (a number).
# 2. What is the largest power-of-two head dim for which the exp2 model ceiling lies below the
#    measured FP8 GEMM ceiling, at the SM clock (c) measured at head dim 256 (the GEMM ceiling
#    scaled by the same clock over 1.98 GHz)? Does the lower clock change the answer, and why?
#    Set `answer_2`.
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
# 6. At the copy rate of v25's run (printed under its table in (e)), what is the least time in which
#    any kernel can quantize 128 MiB of bf16 to e4m3, counting the bytes read plus written? How
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
    ghz = power.loc[256, "sm_mhz"] / 1000
    gemm = bench.H200_CEILINGS["FP8 GEMM (torch._scaled_mm, 8192^3)"] * ghz / 1.98
    answer_2 = max(d for d in (16, 32, 64, 128, 256) if bench.exp2_ceiling_tflops(d, clock_ghz=ghz) < gemm)
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
assert abs(answer_1 - c.flops() / bench.attention_bytes(c.batch, c.seqlen, c.heads_q, c.heads_kv, c.head_dim)) < 1e-6
ghz_256 = power.loc[256, "sm_mhz"] / 1000
gemm_256 = bench.H200_CEILINGS["FP8 GEMM (torch._scaled_mm, 8192^3)"] * ghz_256 / 1.98
assert bench.exp2_ceiling_tflops(answer_2, clock_ghz=ghz_256) < gemm_256 \
    <= bench.exp2_ceiling_tflops(2 * answer_2, clock_ghz=ghz_256), "the largest such head dim, at that clock"
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
print(f"6: at least {answer_6[0]:.1f} us at {v25['copy_tbps_graph'].mean():.2f} TB/s; the fastest, {fastest['kernel']} "
      f"({fastest['size']}), takes {fastest['ms_graph'] * 1e3:.1f} us = {answer_6[1]:.3f}x that: 1 / its fraction of "
      f"copy ({fastest['frac_copy_graph']:.3f}). A fraction of copy is the floor over the time"
      + ("; below 1 because the floor is the copy's rate, not the HBM's: this kernel moves its 3 bytes a value a "
         "little faster than the copy moves its 4." if answer_6[1] < 1 else "."))
print(exercise_note(_by_solution))
