"""Assertions on the key figures the notebooks record (at smoke sizes), with tolerances.

Nobody diffs rendered text: each notebook `record()`s what it teaches, and
these tests check that the lesson still holds.
"""

import pytest
import torch

pytestmark = pytest.mark.notebooks


def figures(executed_notebooks, name: str) -> dict:
    result = executed_notebooks[name]
    if not result.ok:
        pytest.fail(f"{name} did not run: {result.error}")
    return result.figures


def test_quickstart(executed_notebooks):
    f = figures(executed_notebooks, "00_quickstart")
    assert "reference" in f["providers_found"]
    assert 0.005 < f["k_per_tensor_rel_l2"] < 2.0**-4
    assert f["k_max_rel_error_normals"] <= 2.0**-4
    rel = f["attention_rel_l2"]
    assert 0.005 < rel["fp8"] < 0.1, "FP8 attention error on N(0,1) should be a few percent"
    assert rel["bf16"] < rel["fp8"] / 5, "bf16 attention should be far more accurate than FP8"


def test_numerics(executed_notebooks):
    f = figures(executed_notebooks, "01_fp8_numerics")
    assert f["format_table"]["e4m3fn"]["max"] == 448.0 and f["format_table"]["e4m3fnuz"]["max"] == 240.0
    rms = f["rms_rel_error_normal_range"]  # one mantissa bit more halves the error; fnuz keeps the precision
    assert rms["e4m3fn"] == rms["e4m3fnuz"] and 1.9 < rms["e5m2"] / rms["e4m3fn"] < 2.1
    assert f["rms_rel_error_normal_range"]["e4m3fn"] < 2.0**-4 / 2


def test_per_head_scales_and_strides(executed_notebooks):
    f = figures(executed_notebooks, "03_per_head_scales_and_strides")
    broken = f["fallback_q_over_k_rel_l2"]  # the fallback off by Q's range over K's: saturation
    assert broken["64"]["intended"] > 5 * broken["64"]["ideal"]
    assert abs(broken["1"]["intended"] / broken["1"]["ideal"] - 1) < 1e-6
    assert f["layouts_bitwise_equal"] is True
    assert f["descale_strides"]["scalar, expand"] == [0, 0] and f["descale_strides"]["per head, expand"][0] == 0
    sweep = f["head_spread_sweep"]  # one per-tensor scale fails at the widest spread, per-head scales do not
    worst = dict(zip(zip(sweep["spread (binades)"], sweep["scales"]), sweep["worst head rel_l2"]))
    widest = max(sweep["spread (binades)"])
    assert worst[(widest, "per tensor")] > 5 * worst[(widest, "per KV head")]
    largest = dict(zip(zip(sweep["spread (binades)"], sweep["scales"]), sweep["largest head rel_l2"]))
    assert largest[(widest, "per tensor")] > 5 * largest[(widest, "per KV head")]  # its Q flushes, not its output
    assert f["vllm_q_when_missing"] == 1.0
    fallback = f["fallback_rel_l2"]  # the defect costs nothing near Q amax 448 and a lot far from it
    far = fallback[min(fallback, key=float)]
    assert far["vllm"] > 5 * far["intended"] and far["intended"] == pytest.approx(far["ideal"])
    heads = f["k_heads_vs_e4m3"]  # the smallest K head lies further down than e4m3 reaches: per tensor zeroes it
    assert heads["binades between largest and smallest head"] > heads["e4m3 binades, smallest subnormal to 448"]
    assert heads["worst head SQNR per tensor (dB)"] == 0.0 and heads["SQNR spread per KV head (dB)"] < 1.0
    nbytes = f["descale_storage_bytes"]  # expand() stores one float32, or one per KV head; the others a full tensor
    assert nbytes["scalar, expand"] == 4 < nbytes["per head, expand"] < nbytes["per head, contiguous"]
    assert nbytes["per head, contiguous"] == nbytes["per head, transposed view"]
    for sqnr in (f["gqa_q_worst_head_sqnr_db"], f["gqa_q_sqnr_db"]):  # GQA: Q's shared descale costs well under a bit
        assert abs(sqnr["per query head (not FA3)"] - sqnr["per KV group (FA3)"]) < 1.0


def test_version_gating(executed_notebooks):
    f = figures(executed_notebooks, "04_fa2_fa3_version_gating")
    assert f["04.dequantize_fallback_rel_l2"] < f["04.fa3_emulation_rel_l2"] / 2  # bf16 rounding only vs the P cast
    decisions = f["04.decisions_this_machine"]
    assert {f"{d}/{h}" for d in ("fp8", "bf16") for h in (64, 128, 256)} <= set(decisions)
    if not torch.cuda.is_available():  # no FA3 here: FP8 takes the emulation, bf16 PyTorch's SDPA, at every head dim
        assert all(c == ("reference:reference" if k.startswith("fp8/") else "sdpa:sdpa") for k, c in decisions.items())


def test_attention_accuracy(executed_notebooks):
    f = figures(executed_notebooks, "05_fp8_attention_accuracy")
    attr = f["attribution"]  # (b): rel L2 of each step alone against exact attention, per distribution
    q, k, v, p = (attr[step] for step in ("q", "k", "v", "p"))
    own = f["cast_tensor_rel_l2"]  # each cast's error on its own tensor: e4m3's RMS rounding error, alike
    for dist in ("normal", "fa3_outliers"):
        assert all(0.02 < own[f"{n}: tensor"][dist] < 0.03 for n in "qkv")
        assert abs(v[dist] / own["v: tensor"][dist] - 1) < 0.15  # V's cast costs the output what it costs V
        assert p[dist] < min(q[dist], k[dist], v[dist]) and attr["fp32"][dist] < 1e-5
    assert v["normal"] > max(q["normal"], k["normal"])  # N(0,1), causal: V a little more than Q or K
    assert v["fa3_outliers"] < min(q["fa3_outliers"], k["fa3_outliers"])  # outliers sharpen the softmax
    t3 = f["table3_rmse"]  # the two rows with incoherent processing below the two without
    assert max(t3["FA3 FP8 (block quant + incoherent)"], t3["FA3 FP8 without block quant"]) < min(
        t3["FP8 baseline (per-tensor)"], t3["FA3 FP8 without incoherent processing"])
    offset = f["max_offset_p_only"]  # (c): the offset lowers the P cast's own error on the outliers
    assert offset["8"]["fa3_outliers"] < offset["0"]["fa3_outliers"]
    heads = f["scaling_smallest_head"]["head_ranges"]  # (d): per-head scales help the narrowest head, not the pool
    assert heads["smallest head gain"] > 1.03 and abs(heads["whole output gain"] - 1) < 0.05
    assert heads["whole output, per-tensor"] > 5 * heads["smallest head, per-tensor"]  # the widest heads set the pool
    lc = f["long_context_rel_l2"]  # (e): the FP8 MMA's error grows with the keys, two levels do not
    mma, flush = lc["FP8 MMA, 13 bits (upstream FA3)"], lc["two-level, flush every block (vLLM)"]
    longest, shortest = max(mma, key=int), min(mma, key=int)
    assert mma[longest] > mma[shortest] and mma[longest] > 1.5 * flush[longest]
    assert max(f["fidelity_ratio_hopper"].values()) < 0.1  # (f): the emulation within 0.1 of FA3's own error
    head = f["long_context_headline"]  # the H200's record the summaries quote
    probe = head["probe"]
    longest = max(probe["fa3-fwd"], key=int)
    assert min(probe["fa3-fwd"][longest], probe["ours"][longest]) > 0.1 > 0.01 > max(
        probe["vllm-so"][longest], *probe["ours, pv_flush"].values())
    assert head["fidelity"]["fa3-fwd"][max(head["fidelity"]["fa3-fwd"], key=int)] > 0.1
    assert head["fidelity_ratio_hopper"][1] < 0.1


def test_kv_cache(executed_notebooks):
    f = figures(executed_notebooks, "06_fp8_kv_cache")
    assert f["tokens_ratio_fp8_vs_bf16"] == pytest.approx(2.0, rel=1e-3)
    assert f["stride0_equals_materialized"] is True
    err = f["decode_rel_l2"]
    q_cast = f["decode_q_cast_rel_l2"]  # every Q scale, k/v-only checkpoints too, leaves Q's rounding alike
    assert len(q_cast) == 5 and min(q_cast.values()) > 0.85 * max(q_cast.values())
    assert set(f["decode_fa3_fp8_adds"]) == set(q_cast)
    for scales in ("checkpoint (amax/448)", "default 1.0", "dynamic (amax/200, /100)"):
        # FA3's FP8 math adds Q and P quantization on top of the storage error.
        assert err[f"{scales} | dequantized"] < err[f"{scales} | fa3_fp8"] < 1.0
    moved = f["decode_fa3_fp8_vs_dequantized"]  # FP8 math moves the output by no small share of storage's error
    assert set(moved) == set(q_cast) and all(0.2 < moved[s] / err[f"{s} | dequantized"] < 3 for s in moved)
    sharp, mild = (f["decode_sharp_vs_mild"][c] for c in ("sharp", "mild"))  # the same K and V, other queries
    assert sharp["storage rel L2"] == mild["storage rel L2"] and mild["effective keys"] > 5 * sharp["effective keys"]
    assert sharp["dequantized / storage"] > 1.5 * mild["dequantized / storage"]  # a sharp softmax amplifies storage's
    for r in ("dequantized / storage", "fa3_fp8 vs dequantized / storage"):  # a mild one: about one rounding each
        assert 0.7 < mild[r] < 2
    assert sharp["fa3_fp8 vs dequantized / storage"] > mild["fa3_fp8 vs dequantized / storage"]
    # under CUDA-graph capture only providers that read cu_seqlens on the device take a varlen FP8 call
    assert set(f["captured_varlen_fp8_providers"]) == {"vllm", "vllm-so", "fa3-fwd", "flash-attn-3", "triton"}
    h200 = f["graph_h200_captured"]  # the H200's record: every capture replayed the eager call's bits
    assert all(h200.values()) and {"fa3:fa3-fwd varlen", "fa3:vllm-so varlen", "triton:triton varlen"} <= set(h200)
    splits = {k.split(" | ", 1)[1]: v for k, v in f.items() if k.startswith("decode_splits | ")}
    assert len(splits["one long sequence"]) == 1 and splits["one long sequence"][0] > 1  # one sequence: FA3 splits it
    assert max(splits["16 long sequences"]) < splits["one long sequence"][0]  # a fuller batch: fewer splits each
    for case, effect in f["decode_split_effect"].items():  # splitting moves bits, not the error against exact
        split = max(splits[case]) > 1
        assert (effect["bf16 outputs equal"] < 1) if split else (effect["bf16 outputs equal"] == 1)
        assert abs(effect["rel L2, FA3's splits"] / effect["rel L2, no split"] - 1) < 0.1
    rec = f["decode_split_h200"]  # the H200's record: splitting as predicted is what gives the library's bits
    per_seq = list(zip(rec["predicted_splits"], rec["equal_at_predicted"], rec["equal_without_split"]))
    assert any(k > 1 for k, _, _ in per_seq)
    for k, at, without in per_seq:
        assert (at > without + 0.4) if k > 1 else (at == without)


def test_scale_strategies(executed_notebooks):
    f = figures(executed_notebooks, "02_scale_strategies")
    rest, exact = f["sqnr_rest_db"], f["energy_exact_at_max"]  # FP8: a finer scale's SQNR gain is its exact maxima
    assert exact["outlier_channels|token / current (not FA3)"] > 0.3 > exact["outlier_channels|channel / current (not FA3)"]
    assert abs(rest["outlier_channels|token / current (not FA3)"] - rest["outlier_channels|channel / current (not FA3)"]) < 0.5
    same = f["delayed_kernel_same"]  # the one-pass kernel against the reference, every step through a jump
    assert len(same["same_bits"]) == 2 and all(v == 1.0 for col in same.values() for v in col.values())
    sat = f["delayed_summary"]["steps_with_saturation"]  # most_recent clamps on sampling noise, max less often
    (hist_max,) = [v for k, v in sat.items() if k.startswith("delayed max") and "margin" not in k]
    assert sat["delayed most_recent"] > hist_max
    cost = f["pow2_cost_db"]  # power-of-two descales: well under a bit (6.02 dB) on every distribution
    assert len(cost) == 5 and max(abs(c) for c in cost.values()) < 3.0 and abs(cost["normal"]) < 0.3


def test_triton_kernel_lesson(executed_notebooks):
    f = figures(executed_notebooks, "08_triton_fp8_attention")
    assert f["kernel_vs_emulation_rel_l2"] < 0.01  # (b): 0 in the interpreter; on a GPU a fraction of the error (~0.02)
    off = f["max_offset_errors"]  # (d): the offset lifts P off the subnormals, yet the output gains a few per cent
    assert off["8.0"] < off["0.0"] < 1.2 * off["8.0"]
    assert f["online_softmax_max_abs_diff"] < 1e-10  # (a): the block-by-block softmax is softmax
    sinks = f["max_offset_sinks"]  # (d): no sink, no gain; a sink seen first (the last key) gains the most
    last = max(int(k.split()[1]) for k in sinks)
    assert all(abs(sinks[f"key {key} gap 0"] - 1) < 0.05 for key in (0, last))
    assert 1.5 < sinks["key 0 gap 8"] < sinks[f"key {last} gap 8"]
    layout = f["v_layout_ms"]  # (f): V transposed per tile costs the kernel 2.6x; once, about a tenth of a call
    ready = layout["attention, pre-transposed V"]
    assert layout["attention, natural V (transposed per tile in the kernel)"] > 2 * ready
    assert 0.05 * ready < layout["pretranspose_v(V) once"] < 0.2 * ready
    copies = f["v24_v_copy_us"]  # the Triton copy of V against torch's, at every head dim
    for d in (64, 128, 256):
        assert copies[f"d={d} pretranspose_v"] * 5 < copies[f"d={d} torch pretranspose"]
        assert copies[f"d={d} key_ordered_vt"] * 5 < copies[f"d={d} torch key_ordered"]


def test_gluon_fa3_kernel(executed_notebooks):
    f = figures(executed_notebooks, "09_gluon_fa3_kernel")
    pv = f["pv_accumulation_rel_l2"]  # v27: O accumulated in the FP8 MMA grows with the context, pv_flush does not
    assert pv["triton kernel @ 65536"] > 100 * pv["triton kernel, pv_flush @ 65536"]
    assert abs(pv["triton kernel @ 65536"] - pv["emulation, FP8 MMA 13 bits @ 65536"]) < 1e-3
    assert abs(pv["fa3-fwd @ 16384"] - pv["gluon kernel @ 16384"]) < 1e-3
    regs = f["flush_registers_total"]  # v28: the flush's second fp32 tile fits only with 64 rows per warpgroup
    assert regs["m128n128w4s3-pf"] > 255 >= max(v for k, v in regs.items() if k.endswith("-pk-pf"))
    lc = f["v28_long_context_rel_l2"]  # every flushing tile, both kernels, and vLLM's library stay flat
    for d in (128, 256):
        assert lc[f"d{d} vllm-so @ 65536"] < 0.01 < 0.1 < lc[f"d{d} fa3-fwd @ 65536"]
    flushed = {k: v for k, v in lc.items() if "-pf" in k}  # 4 tiles at d=128, 6 at 256 (3 in halves)
    assert len(flushed) == 3 * 10 and max(flushed.values()) < 0.01
    over_vllm, over_fa3 = f["v28_pv_flush_over_vllm"], f["v28_pv_flush_over_fa3"]
    assert len(over_vllm) == 18 and min(over_vllm.values()) > 1  # beats vLLM's flushing path everywhere
    assert len(over_fa3) == 18 and min(over_fa3.values()) > 0.8  # d=256 too, with pv_halves
    assert f["p_fetched_from_other_threads"] == {"plain": 24, "permute_keys": 0}
    ratios = f["v10_ratio_to_fa3_fp8"]
    assert len(ratios) == 18 and all(0.3 < r < 1.5 for r in ratios.values())
    gain = f["v19_persistent_gain"]  # persistent programs against one per tile, v19's first run
    assert len(gain) == 18 and all(g > 0 for case, g in gain.items() if "causal" not in case)
    counter = f["v20_counter_gain"]  # the tile counter against fixed lists: ahead at head dims 128 and 256 on the whole
    assert len(counter) == 18 and sum(g for case, g in counter.items() if "x64" not in case) > 0
    no_loop = f["v20_no_loop_gain"]  # one program per tile without the tile loop, against v19's kernel (causal)
    assert len(no_loop) == 9 and sorted(no_loop.values())[4] > 0
    causal = f["v21_causal_mean_ratio"]  # the counter for causal attention, over two grids of each schedule
    assert causal["counter"] > causal["one program per tile"] > 0.85
    tv = f["transpose_v_over_ready"]  # V transposed in the Gluon kernel: slower than V^T made before
    forms = {form: {k.split(" ", 1)[1]: v for k, v in tv.items() if k.startswith(form + " ")}
             for form in ("shifts", "PRMT", "LDSM.T")}
    assert all(len(f_) == 6 for f_ in forms.values())
    assert all(forms["PRMT"][k] > forms["shifts"][k] for k in forms["PRMT"])  # eight PRMTs beat shifts and masks
    assert all(0.8 < v < 1 for k, v in forms["PRMT"].items() if "x256" not in k)
    for k, v in forms["LDSM.T"].items():  # in place, three stages fit at 256: far above v30's two
        assert (v > forms["PRMT"][k] + 0.15) if "x256" in k else (0.8 < v < 1)
    rest = f["no_transpose_over_ready"]  # without the transposer's work: the loads cost little (v30's ring)
    assert rest["PRMT 2x8192x32x128"] > 0.97 and min(rest.values()) > 0.85
    copy = f["copy_over_ready"]  # key_ordered_vt's copy plus the kernel: faster than transposing inside
    assert all(copy[k] > tv[k] for k in tv)
    v31 = f["transpose_v_v31_by_head_dim"]  # the summary: v31's fraction falls with the head dim, ...
    fraction = {d: (v31[f"transpose_v / V^T ready lowest d={d}"], v31[f"transpose_v / V^T ready highest d={d}"])
                for d in (64, 128, 256)}
    assert fraction[64][0] > fraction[128][1] and fraction[128][0] > fraction[256][1]
    for d in (64, 128):  # ... part of it the in-place hand-over (no transposer work, still below) ...
        assert v31[f"no transpose / V^T ready highest d={d}"] < 1
    assert v31["no transpose / V^T ready highest d=128"] < 0.95
    for d in (64, 128, 256):  # ... and the copy stays faster
        assert v31[f"+ copy / V^T ready lowest d={d}"] > fraction[d][1]


def test_performance_record(executed_notebooks):
    f = figures(executed_notebooks, "07_performance")
    bound = f["per_tensor_bound"]  # current per-tensor scaling at 128 MiB: two reads cap it, on-chip memory cannot lift it
    assert abs(bound["nothing (two passes)"] - 0.6) < 1e-3 and bound["+ L2: everything"] > 0.85 > bound["+ registers"]
    assert 90 < bound["needed_mb"] < 110
    flushed = f["v34_quant_flush_low"]  # (e.4) with L2 flushed: delayed meets the line from 128 MiB only
    assert flushed["L2 flushed 32"]["per-head delayed"] < 0.85 < flushed["L2 flushed 128"]["per-head delayed"]
    assert flushed["L2 flushed 128"]["per-head current (auto)"] < flushed["back to back 128"]["per-head current (auto)"]
    assert f["v34_copy_tbps"]["L2 flushed 128"] < f["v34_copy_tbps"]["back to back 128"]
    added = f["v35_added_us_128"]  # (e.4) v35: only the flush and evicted translations cost the on-chip kernel more
    head, copy = "per-head current (auto)", "copy bf16"
    assert added[f"flushed / {head}"][0] > added[f"flushed / {copy}"][1] + 4
    assert added[f"flushed, x touched / {head}"][0] >= added[f"flushed / {head}"][0]  # x's translations buy nothing
    assert all(abs(v) < 1.5 for k, v in ((k, x) for k, lohi in added.items() for x in lohi) if k.startswith("after"))
    added = f["v36_added_us_128"]  # (e.4) v36: a read costs the writing kernels, a write before them does not
    assert min(added[f"flushed / {head}"][0], added[f"512 MiB read / {head}"][0]) > added[f"flushed / {copy}"][1] + 4
    assert all(abs(x) <= 0.5 for k in (head, copy) for x in added[f"256 MiB copied / {k}"])  # "within half a microsecond"
    assert max(abs(x) for x in added["flushed / read x (amax)"]) < 1 and 6 <= added["256 MiB written / read x (amax)"][0]
    targets = f["quant_targets"]  # (e)'s targets table at 128 MiB, as its prose and the summary read it
    for kind in ("static (vLLM's Q)", "per token", "delayed, per head", "delayed, per tensor"):
        assert targets[kind]["verdict"] == targets[kind]["verdict of 4.3 TB/s"] == "met", kind
    assert targets["current, per head, head-major x"]["verdict"] == "met"
    token_major = [targets[f"current, per head, token-major x, {b} sequence{'s' if b > 1 else ''}"]
                   for b in (1, 2, 4, 8, 16)]
    assert [t["verdict"] for t in token_major] == ["not met", "not met", "at the line", "met", "met"]
    assert all(t["verdict of 4.3 TB/s"] == "not met" for t in token_major)
    per_tensor = targets["current, per tensor"]
    assert per_tensor["verdict"] == per_tensor["verdict of 4.3 TB/s"] == "not met"
    assert abs(per_tensor["high"] - bound["nothing (two passes)"]) < 0.02  # two reads, at their ceiling
    ratios = f["ratio_to_fa3_fp8"]
    assert len(ratios) == 18 and all(0.3 < r < 1.5 for r in ratios.values())
    clock = f["v19_mean_sm_mhz"]  # the power limit: full clock at head dim 64, less at 256
    assert clock["head_dim 64"] > 1950 > 1850 > clock["head_dim 256"]
    claims = f["v37_claims"]  # (e.2) v37: claimed parts are paced by the counter, below dealt at every split
    assert claims["bits"] is True
    for split in ("1x16384", "2x8192", "4x4096"):
        assert float(claims[split]["claimed"].split("-")[-1]) < 0.7 < float(claims[split]["dealt (plan)"].split("-")[0])
    prof = f["v22_quant_profile"]  # Nsight Compute: x read once everywhere; one sequence waits longer for landings
    assert all(abs(col["DRAM read (MB)"] - 134.3) < 0.3 for col in prof.values()) and len(prof) == 4
    land = "try-waits per wait for a part to land (amax, waiter)"
    assert prof["token-1x16384"][land] > prof["token-4x4096"][land]
    of_4_3 = f["quant_shapes_of_4_3"]  # lowest repeat per split (1, 2, 4, 8, 16 sequences) against 4.3 TB/s
    assert min(of_4_3["per-token"]) > 0.85 > max(of_4_3["per-head onchip"])
    assert of_4_3["per-head onchip, head-major x"][2] > 0.85 > of_4_3["per-head onchip, head-major x"][0]
    low = f["v25_quant_shapes_low"]  # lowest repeat per split (1, 2, 4, 8, 16 sequences) of this run's copy
    assert min(low["per-head delayed"] + low["per-head GQA4 delayed"]) > 0.85 > low["per-head onchip"][0]
    assert min(low["static (vLLM Q)"]) > max(low["per-head delayed"])
    assert min(f["v25_quant_shapes_of_4_3_low"]["per-head delayed"]) > 0.85
    sizes = f["v25_quant_sizes_low"]  # lowest round per MiB: delayed keeps 85 % from 128 MiB, per tensor too
    assert min(sizes["per-tensor delayed"]["128"], sizes["per-head delayed"]["256"]) > 0.85
    assert sizes["per-tensor delayed"]["128"] > sizes["per-tensor current (auto)"]["128"] + 0.2
    sizes26 = f["v26_quant_sizes_low"]  # v26's launch: one wave below 4 tiles per program lifts 32 MiB
    assert sizes26["per-head delayed"]["32"] > sizes["per-head delayed"]["32"] + 0.05
    assert min(sizes26["per-head delayed"]["32"], sizes26["per-tensor delayed"]["32"]) > 0.83
    reverse = f["v23_reverse_gain"]  # pass 2 backwards over forwards, per size (32, 64, 128, 256 MiB)
    assert all(len(r) == 4 and min(r) > 1.0 for r in reverse.values())
    api = f["v24_api_gluon_over_api_fa3"]  # the Gluon kernel over fa3-fwd, both through fp8lab.attention
    assert len(api) == 18 and 0.8 < min(api.values()) and max(api.values()) < 1.1
    extra = f["v24_api_extra_ms"]  # the API's cost on a 0.94 ms call, and on an 8 ms one within the spread
    assert 0.1 < extra["4x4096x32x64 api triton:gluon"] < 0.5 and extra["4x4096x32x64 key_ordered_vt + ws"] < 0.05
    assert abs(extra["1x16384x32x256 api triton:gluon"]) < 0.3
    prepared = f["v27_prepared_extra_ms"]  # prepare_attention: the direct call's cost, not the API's
    assert abs(prepared["prepared fa3:fa3-fwd"]) < 0.05 < 0.3 < prepared["api fa3:fa3-fwd"]
    after = f["v23_after_compile"]  # [lowest, highest ratio, grids below 0.9, grids] per way of timing
    assert after["after a compile"][2] >= 1 and after["card busy before"][2] == 0
    assert after["card busy before"][0] > after["after a compile"][0]
    rounds = [v for k, v in after.items() if "rounds" in k]
    assert all(r[2] == 0 for r in rounds) and sum(r[3] for r in rounds) == 4
