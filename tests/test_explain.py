"""fp8lab.kernels.explain: the tables and figures notebooks 08 and 09 show, on fresh random inputs and
small synthetic records (what each column means), and on the H200's record where the prose quotes them."""

from __future__ import annotations

import dataclasses
import math
import random

import pandas as pd
import pytest
import torch

from fp8lab import bench, env
from fp8lab.kernels import attention as A
from fp8lab.kernels import explain
from fp8lab.reference import FA3Steps, attention_exact, attention_fa3_fp8

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _seed() -> int:
    return int(torch.randint(0, 2**31 - 1, ()).item())


def _rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm())


def _fp8(gen: torch.Generator, *shape: int, scale: float = 2.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * scale).clamp(-448, 448).to(torch.float8_e4m3fn)


# ---------------------------------------------------------------------------------------------
# Notebook 08: the FP8 steps in numbers


def test_kernel_agreement_counts_bits_and_distances():
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    exact = torch.randn(2, 37, 3, 16, generator=gen, dtype=torch.float64)
    out = exact.to(torch.bfloat16)
    emu = out.clone()
    moved = torch.randperm(out.numel(), generator=gen)[:11]
    bits = emu.view(-1).view(torch.int16)
    bits[moved[:10]] += 1  # one bf16 ulp (same sign: one step along the line)
    bits[moved[10]] += 3  # and one element three ulps away
    table = explain.kernel_agreement(out, emu, exact).set_index("pair")
    assert list(table.index) == ["kernel vs emulation", "emulation vs exact", "kernel vs exact"]
    assert (table["elements"] == out.numel()).all()
    assert table.loc["kernel vs emulation", "bitwise_equal"] == out.numel() - 11, seed
    assert table.loc["kernel vs emulation", "max_ulps"] == 3, seed
    assert table[["bitwise_equal", "max_ulps"]].iloc[1:].isna().all().all()  # float64 exact: no ulps
    for pair, x, ref in (("kernel vs emulation", out, emu), ("emulation vs exact", emu, exact),
                         ("kernel vs exact", out, exact)):
        assert table.loc[pair, "rel_l2"] == pytest.approx(_rel_l2(x, ref), rel=1e-12), (seed, pair)
    with pytest.raises(ValueError, match="three outputs of one shape"):
        explain.kernel_agreement(out, emu[:1], exact)


def test_max_offset_errors_runs_each_offset_against_exact_attention():
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    q, k, v = _fp8(gen, 1, 24, 2, 32), _fp8(gen, 1, 41, 1, 32), _fp8(gen, 1, 41, 1, 32)
    qd, kd, vd = (torch.rand(1, 1, generator=gen) * 0.4 + 0.05 for _ in range(3))
    exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=True)
    calls = []

    def fake(q_, k_, v_, qd_, kd_, vd_, *, causal, max_offset):  # exact with offset 8, zeros without
        calls.append((max_offset, causal, qd_ is qd, kd_ is kd, vd_ is vd))
        return exact.to(torch.bfloat16) if max_offset == 8.0 else torch.zeros_like(exact)

    table = explain.max_offset_errors(fake, q, k, v, qd, kd, vd, causal=True)
    assert list(table["max_offset"]) == [0.0, 8.0] and calls == [(0.0, True, True, True, True),
                                                                  (8.0, True, True, True, True)]
    assert table["rel_l2_vs_exact"][0] == pytest.approx(1.0)
    assert table["rel_l2_vs_exact"][1] == pytest.approx(_rel_l2(exact.to(torch.bfloat16), exact), rel=1e-12)
    emu = explain.max_offset_errors(lambda *a, **kw: attention_fa3_fp8(*a, block_n=16, **kw), q, k, v, qd, kd, vd,
                                    causal=True, max_offsets=(8.0,))
    ref = attention_fa3_fp8(q, k, v, qd, kd, vd, causal=True, block_n=16)
    assert emu["rel_l2_vs_exact"][0] == pytest.approx(_rel_l2(ref, exact), rel=1e-12), seed


def test_p_cast_cost_isolates_the_p_cast():
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    q, k, v = _fp8(gen, 2, 19, 4, 32), _fp8(gen, 2, 53, 2, 32), _fp8(gen, 2, 53, 2, 32)
    qd, kd, vd = (torch.rand(2, 2, generator=gen) * 0.4 + 0.05 for _ in range(3))
    table = explain.p_cast_cost(q, k, v, qd, kd, vd, causal=False, block_n=16).set_index("p_cast")
    exact = attention_exact(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd)
    with_p = attention_fa3_fp8(q, k, v, qd, kd, vd, block_n=16, steps=FA3Steps().without("output"))
    assert table.loc["with the P cast", "rel_l2_vs_exact"] == pytest.approx(_rel_l2(with_p, exact), rel=1e-12)
    assert table.loc["without the P cast", "rel_l2_vs_exact"] < 1e-5 < 1e-3 < table.loc["with the P cast",
                                                                                         "rel_l2_vs_exact"], seed


def test_tuning_and_ws_tables_are_the_records_reshaped():
    rng = random.Random(_seed())
    rows = [dict(version=v, setting=s, tflops=rng.uniform(300, 900), config="m128n128w4s3")
            for v in ("v1", "v2", "v3") for s in ("d=64", "d=128", "d=128 causal") if (v, s) != ("v3", "d=64")]
    table = explain.tuning_table(pd.DataFrame(rows))
    assert list(table.index) == ["d=64", "d=128", "d=128 causal"] and list(table.columns) == ["v1", "v2", "v3"]
    assert math.isnan(table.loc["d=64", "v3"])
    assert all(table.loc[r["setting"], r["version"]] == r["tflops"] for r in rows)
    ws = pd.DataFrame([dict(version=v, case=c, kernel=k, ratio=rng.uniform(0.3, 1.2))
                       for v in ("v8", "v9") for c in ("4x4096x32x64", "2x8192x32x64 causal") for k in ("a", "b")])
    wide = explain.ws_table(ws)
    assert list(wide.index) == ["4x4096x32x64", "2x8192x32x64 causal"] and wide.shape == (2, 4)
    assert all(wide.loc[r.case, (r.version, r.kernel)] == round(r.ratio, 2) for r in ws.itertuples())


# ---------------------------------------------------------------------------------------------
# Notebook 09: registers, tiles, key orders and the record's comparisons


def test_key_ordered_vt_landing_is_where_the_copy_stores_each_key():
    landing = explain.key_ordered_vt_landing(64)
    # key 32g + 16a + 8b + 2t + e sits at column 32g + 16a + 4t + 2b + e (the kernel's in_key_order)
    expected = [32 * g + 16 * a + 4 * t + 2 * b + e for g in range(2) for a in range(2) for b in range(2)
                for t in range(4) for e in range(2)]
    assert landing.tolist() == expected
    from fp8lab.kernels import key_ordered_vt

    gen = torch.Generator().manual_seed(_seed())
    v = _fp8(gen, 1, 64, 2, 8)
    vt = key_ordered_vt(v).data  # (1, 2, 8, 64)
    assert torch.equal(vt[..., landing].view(torch.uint8), v.permute(0, 2, 3, 1).contiguous().view(torch.uint8))
    with pytest.raises(ValueError, match="multiple of 32"):
        explain.key_ordered_vt_landing(48)


def test_transposer_keys_cover_each_group_once():
    landing = explain.key_ordered_vt_landing(32).tolist()
    for group in (0, 1):
        picked = [explain.transposer_keys(t, group) for t in range(4)]
        assert sorted(k for keys in picked for k in keys) == list(range(16 * group, 16 * group + 16))
        for t, keys in enumerate(picked):
            assert keys == sorted(16 * group + 8 * b + 2 * t + e for b in (0, 1) for e in (0, 1))
            assert sorted(landing[k] for k in keys) == list(range(16 * group + 4 * t, 16 * group + 4 * t + 4))
    with pytest.raises(ValueError, match="t in 0..3"):
        explain.transposer_keys(4, 0)


def test_register_carry_table_sums_what_a_consumer_holds():
    rng = random.Random(_seed())
    tiles = [(rng.choice((64, 128, 256)), rng.choice((64, 128, 256)), rng.choice((2, 3))) for _ in range(5)]
    table = explain.register_carry_table(tiles)
    for (d, n, c), row in zip(tiles, table.itertuples()):
        o, s = 64 * d // 128, 64 * n // 128  # 64 rows per warpgroup of 128 threads
        assert (row.o, row.s, row.p_packed) == (o, s, s // 4)
        assert table.loc[row.Index, "O + S + P float32"] == o + 2 * s
        assert table.loc[row.Index, "O + S + P packed"] == o + s + s // 4
    with pytest.raises(ValueError, match="at least one"):
        explain.register_carry_table([])


def _simulate(tiles: int, programs: int) -> tuple[int, int]:
    """Busiest program under fixed lists, and atomic adds under the counter, by brute force."""
    per_program = [len(range(p, tiles, programs)) for p in range(programs)]
    counter, adds, active = 0, 0, list(range(programs))  # program p starts with tile p
    while active:
        still = []
        for p in active:
            adds += 1  # each tile it takes, it asks for the next
            if programs + counter < tiles:
                still.append(p)
            counter += 1
        active = still
    return max(per_program), adds


def test_persistent_schedule_matches_a_simulation():
    rng = random.Random(_seed())
    for _ in range(20):
        b, s, h, m, g = rng.randint(1, 4), rng.randint(1, 3000), rng.randint(1, 40), rng.choice((64, 128, 192)), 132
        sched = explain.persistent_schedule(b, s, h, m, g)
        tiles = math.ceil(s / m) * b * h
        g = min(g, tiles)
        assert sched["tiles"] == tiles and sched["programs"] == g
        assert sched["full_waves"] * g + sched["last_wave"] == tiles
        assert (sched["busiest"], sched["counter_adds"]) == _simulate(tiles, g), (b, s, h, m)
    with pytest.raises(ValueError, match="positive sizes"):
        explain.persistent_schedule(0, 4096, 32, 128)


def _record(rng: random.Random, kernels: dict[str, bool]) -> pd.DataFrame:
    """A `_round_medians`-shaped record: kernels maps name -> timed on causal cases only."""
    cases = [("4x4096x32x64", False), ("4x4096x32x64 causal", True), ("2x8192x32x128", False),
             ("2x8192x32x128 causal", True)]
    return pd.DataFrame([dict(case=c, head_dim=int(c.split()[0].split("x")[-1]), causal=causal, kernel=k,
                              config="x", tflops=rng.uniform(300, 1100), ratio=rng.uniform(0.5, 1.1))
                         for c, causal in cases for k, only_causal in kernels.items() if causal or not only_causal])


def test_kernel_gain_and_v20_gains():
    rng = random.Random(_seed())
    names = {"persistent, fixed list (v19)": False, "persistent, tile counter (v20)": False,
             "one program per tile": True, "v19's kernel, one program per tile": True}
    rec = _record(rng, names)
    tf = {(r.case, r.kernel): r.tflops for r in rec.itertuples()}
    gain = explain.kernel_gain(rec, "one program per tile", "v19's kernel, one program per tile")
    assert list(gain.index) == ["4x4096x32x64 causal", "2x8192x32x128 causal"]  # only where both ran
    for case, g in gain.items():
        assert g == pytest.approx(tf[(case, "one program per tile")] / tf[(case, "v19's kernel, one program per tile")] - 1)
    with pytest.raises(ValueError, match="no kernel"):
        explain.kernel_gain(rec, "nope", "one program per tile")
    gains = explain.v20_gains(rec)
    assert list(gains.index) == list(dict.fromkeys(rec["case"]))
    for case in gains.index:
        assert gains.loc[case, "counter vs list"] == pytest.approx(
            tf[(case, "persistent, tile counter (v20)")] / tf[(case, "persistent, fixed list (v19)")] - 1)
        if "causal" in case:
            assert gains.loc[case, "counter vs one per tile"] == pytest.approx(
                tf[(case, "persistent, tile counter (v20)")] / tf[(case, "one program per tile")] - 1)
        else:
            assert gains.loc[case, ["no loop vs v19", "counter vs one per tile"]].isna().all()


def test_causal_schedule_table_adds_the_difference_and_the_mean():
    gen = torch.Generator().manual_seed(_seed())
    values = torch.rand(5, 2, generator=gen, dtype=torch.float64) * 0.3 + 0.8
    grids = pd.DataFrame(values.numpy(), index=[f"case {i}" for i in range(5)],
                         columns=["one program per tile", "counter"])
    table = explain.causal_schedule_table(grids)
    assert list(table.index) == [*grids.index, "mean"]
    diff = table["counter - one per tile"]
    assert (diff.iloc[:5] == grids["counter"] - grids["one program per tile"]).all()
    assert table.loc["mean", "counter"] == pytest.approx(float(values[:, 1].mean()))
    assert diff["mean"] == pytest.approx(float((values[:, 1] - values[:, 0]).mean()))
    with pytest.raises(ValueError, match="v21_causal_grids"):
        explain.causal_schedule_table(grids[["counter"]])


def test_pv_accumulation_summary_picks_the_worst_and_the_range():
    gen = torch.Generator().manual_seed(_seed())
    who = ["triton kernel", "triton kernel, pv_flush", "gluon kernel", "fa3-fwd", "emulation, fp32 accumulate"]
    errors = pd.DataFrame(torch.rand(5, 3, generator=gen, dtype=torch.float64).numpy(), index=who,
                          columns=[2048, 16384, 65536])
    s = explain.pv_accumulation_summary(errors)
    one = errors.loc[["triton kernel", "gluon kernel", "fa3-fwd"]]
    assert (s["shortest"], s["longest"]) == (2048, 65536)
    assert s["one level, shortest"] == one[2048].max() and s["one level, longest"] == one[65536].max()
    flush = errors.loc["triton kernel, pv_flush"]
    assert (s["pv_flush, lowest"], s["pv_flush, highest"]) == (flush.min(), flush.max())
    with pytest.raises(ValueError, match="no rows"):
        explain.pv_accumulation_summary(errors.drop(index="fa3-fwd"))


def test_flush_register_table_and_the_speed_a_flush_keeps():
    C = A.AttentionConfig
    configs = (C(128, 128, 4, 3), C(128, 128, 4, 3, pv_flush=True), C(128, 128, 8, 3, permute_keys=True, pv_flush=True))
    table = explain.flush_register_table(configs, 128)
    assert list(table.index) == [c.label() for c in configs]
    assert list(table["total"]) == [256, 384, 192]  # S + O, + the P V tile, and 64 rows per warpgroup
    assert all(table.loc[c.label(), "total"] == explain.flush_registers(c, 128)["total"] for c in configs)
    with pytest.raises(ValueError, match="at least one"):
        explain.flush_register_table([], 128)
    rng = random.Random(_seed())
    flush = configs[2]
    tiles = pd.DataFrame({"fp8lab": [rng.uniform(500, 900)], f"fp8lab {flush.label()}": [rng.uniform(400, 900)]},
                         index=["2x8192x32x128"])
    kept = explain.pv_flush_kept(tiles, "2x8192x32x128", flush)
    assert kept == pytest.approx(tiles.iloc[0, 1] / tiles.iloc[0, 0])
    with pytest.raises(ValueError, match="no timing"):
        explain.pv_flush_kept(tiles, "2x8192x32x128", configs[1])


def test_fetched_counts_sums_the_quad():
    rng = random.Random(_seed())
    plain, perm = [rng.randint(0, 8) for _ in range(4)], [rng.randint(0, 8) for _ in range(4)]
    layout = pd.DataFrame({"fetched from other threads, plain": plain,
                           "fetched from other threads, permute_keys": perm})
    assert explain.fetched_counts(layout) == {"plain": sum(plain), "permute_keys": sum(perm)}


def test_transpose_v_ratios_and_their_words():
    rng = random.Random(_seed())
    cases = ["2x8192x32x64", "2x8192x32x64 causal", "2x8192x32x256"]
    index = pd.MultiIndex.from_tuples([(f, c) for f in ("LDSM.T", "PRMT") for c in cases], names=["form", "case"])
    ready = [rng.uniform(500, 1100) for _ in index]
    forms = pd.DataFrame({"V^T ready": ready, "+ copy": [r * rng.uniform(0.9, 1.0) for r in ready],
                          "transpose_v": [r * rng.uniform(0.5, 0.95) for r in ready],
                          "no transpose": [r * rng.uniform(0.9, 1.0) if "256" not in c else float("nan")
                                           for r, (_, c) in zip(ready, index)]}, index=index)
    ratios = explain.transpose_v_ratios(forms)
    assert ratios.index.equals(forms.index)
    for col, num in (("transpose_v / V^T ready", "transpose_v"), ("+ copy / V^T ready", "+ copy"),
                     ("no transpose / V^T ready", "no transpose")):
        assert ((ratios[col] - forms[num] / forms["V^T ready"]).abs().dropna() < 1e-15).all()
    summary = explain.transpose_v_summary(forms, "LDSM.T")
    lines = explain.describe_transpose_v(summary)
    lo, hi = ratios.loc["LDSM.T"].iloc[:2]["transpose_v / V^T ready"].agg(["min", "max"])

    def span(low: float, high: float) -> str:  # one number where both print the same
        return f"{low:.2f}x" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}x"

    assert lines[0] == (f"d=64: in-kernel transpose {span(lo, hi)}, copy + kernel "
                        f"{span(*summary.loc[64, '+ copy / V^T ready'])}, no transpose (in place) "
                        f"{span(*summary.loc[64, 'no transpose / V^T ready'])}")
    one = summary.copy()
    one[("+ copy / V^T ready", "highest")] = one[("+ copy / V^T ready", "lowest")]
    assert f"copy + kernel {one.loc[64, ('+ copy / V^T ready', 'lowest')]:.2f}x," in explain.describe_transpose_v(one)[0]
    assert lines[1].startswith("d=256:") and "no transpose" not in lines[1]  # not timed at 256
    with pytest.raises(ValueError, match="no form 'shifts'"):
        explain.transpose_v_summary(forms, "shifts")


def test_long_context_table_reads_the_probe(tmp_path):
    rows = [dict(seqlen_k=n, who=who, rel_l2=x) for who, (short, long) in {
        "fa3-fwd": (0.02, 0.4), "triton m128n128w4s3": (0.021, 0.39), "gluon ws-n128s4": (0.019, 0.41),
        "triton m64n128w4s3-pk-pf": (0.0031, 0.0024), "gluon ws-n128s4-pf": (0.003, 0.0026),
        "vllm-so": (0.0029, 0.0023)}.items() for n, x in ((2048, short), (65536, long))]
    bench.write_results(tmp_path / "bench_v28_long_context.json", rows, {"gpu": "test"})
    (tmp_path / "fidelity.json").write_text('{"context": {}, "cases": [], "long_context": []}')
    table = explain.long_context_table(tmp_path)
    assert list(table.index) == ["fa3-fwd", "ours", "ours, pv_flush", "vllm-so"] and list(table.columns) == [2048, 65536]
    assert table.loc["ours", 65536] == 0.41 and table.loc["ours, pv_flush", 2048] == 0.0031  # the worse ones


def test_bad_arguments_are_named():
    """Each was a crash further in (an IndexError, "not enough values to unpack", "'ScaleStrategy' object is not
    callable", the interpreter's "arange's range must be a power of 2") or a silently odd table."""
    from fp8lab.scaling import DelayedAmax, PerTensor, ScaleStrategy

    with pytest.raises(ValueError, match=r"sink: expected a key index in \[-8, 8\)"):
        explain.sink_inputs(1, 4, 8, 2, 2, 16, 4.0, torch.Generator().manual_seed(0), sink=8)
    for offsets in ((0.0,), (0.0, 4.0, 8.0)):  # one was an IndexError; three left the third out of the ratio
        with pytest.raises(ValueError, match="max_offsets: expected two offsets"):
            explain.max_offset_sinks(attention_fa3_fp8, seqlen_q=4, seqlen_k=16, heads_q=2, heads_kv=2, head_dim=16,
                                     max_offsets=offsets)
    with pytest.raises(ValueError, match=r"case: expected one Gluon timing of '2x8192x32x255' .* its cases: \["):
        explain.v23_swing(env.results_dir(), case="2x8192x32x255")
    with pytest.raises(ValueError, match=r"version: expected one of \['v1', .* got 'v99'"):
        explain.v_layout_costs(env.results_dir(), "v99")
    with pytest.raises(TypeError, match=r"strategies\['delayed'\]: expected a factory"):
        explain.delayed_kernel_check([torch.ones(4, 8)], {"delayed": ScaleStrategy(PerTensor(), DelayedAmax())})
    with pytest.raises(ValueError, match="block_n: expected a power of two >= 16"):
        explain.key_order_values(96)
    with pytest.raises(ValueError, match=r"values: expected numbers with \|x\| <= 448 .* got 500.0"):
        explain.cast_demo([1.0, 500.0])  # the casts then disagree with the saturating reference, GPU or not
    shapes = pd.DataFrame({"kernel": ["a"], "batch": [1], "frac_copy_graph": [0.5], "copy_tbps_graph": [4.0]})
    with pytest.raises(ValueError, match="copy_tbps: expected TB/s, a finite number > 0"):  # 0 was inf fractions
        explain.quant_split_table(shapes, copy_tbps=0)


def test_scores_helpers_check_descales_and_the_softmax_scale():
    """folded_scale_error read the descales before any check (None: "'NoneType' object has no attribute 'double'",
    one dim: an IndexError); a NaN, zero or negative softmax_scale gave NaN or wrong fractions of P."""
    gen = torch.Generator().manual_seed(_seed())
    q, k = _fp8(gen, 1, 37, 4, 16), _fp8(gen, 1, 29, 2, 16)
    qd, kd = torch.rand(1, 2, generator=gen) + 0.5, torch.rand(1, 2, generator=gen) + 0.5
    assert explain.folded_scale_error(q, k, qd, kd) < 1e-12
    assert explain.folded_scale_error(q, k, None, kd) < 1e-12  # None is 1, as everywhere else
    with pytest.raises(ValueError, match=r"q_descale: expected shape \(batch, heads_kv\) = \(1, 2\), got \(2,\)"):
        explain.folded_scale_error(q, k, qd[0], kd)
    for scale in (float("nan"), 0.0, -0.25):
        with pytest.raises(ValueError, match="softmax_scale: expected"):
            explain.p_grid_fractions(q, k, qd, kd, softmax_scale=scale)


def test_counts_and_records_are_checked_before_use():
    """Each was a silently odd answer (programs=132.5 gave 30.0 full waves, head_dim 0 or a negative block_n
    counted 0 or negative registers, every version's repeats in one min/max, an empty frame for a case no grid
    timed) or a crash further in (randn's "invalid combination of arguments", torch.eye's "must be int")."""
    rng = random.Random(_seed())
    b, s, h = rng.randint(1, 4), rng.randint(1, 3000), rng.randint(1, 40)
    for bad in (dict(programs=132.5), dict(seqlen_q=float(s)), dict(heads=str(h))):
        sizes = dict(batch=b, seqlen_q=s, heads=h, block_m=128, programs=132) | bad
        with pytest.raises(ValueError, match=r"expected positive sizes \(ints >= 1\)"):
            explain.persistent_schedule(**sizes)
    with pytest.raises(ValueError, match="head_dim: expected an int >= 1, got 0"):
        explain.consumer_registers(0, 128)
    with pytest.raises(ValueError, match="block_n: expected an int >= 1, got -64"):
        explain.consumer_registers(128, -64)
    with pytest.raises(ValueError, match="head_dim: expected an int >= 1, got '128'"):
        explain.flush_registers(A.AttentionConfig(), "128")
    with pytest.raises(ValueError, match="block: expected an int >= 32, got 32.0"):
        explain.key_ordered_vt_landing(32.0)
    with pytest.raises(TypeError, match="generator: expected a torch.Generator .* got int"):
        explain.sink_inputs(1, 4, 8, 2, 2, 16, 4.0, 0)
    shapes = pd.DataFrame([dict(version=v, kernel="per-token", batch=batch, frac_copy_graph=rng.uniform(0.7, 1.0),
                                copy_tbps_graph=4.0) for v in ("v18", "v25") for batch in (1, 2)])
    assert explain.quant_split_table(shapes[shapes["version"] == "v25"]).shape == (1, 4)
    with pytest.raises(ValueError, match=r"shapes: expected one version's record, got versions \['v18', 'v25'\]"):
        explain.quant_split_table(shapes)
    with pytest.raises(ValueError, match="case: expected a case that a grid under .* timed .* got '2x8192x32x255'"):
        explain.v23_after_compile(env.results_dir(), "2x8192x32x255")


# ---------------------------------------------------------------------------------------------
# The H200's record, where notebook 09's prose quotes it


def test_h200_record_figures_notebook_09_quotes():
    rdir = env.results_dir()
    _, tiles, grid = explain.pv_flush(rdir)
    assert ((grid["Triton pv_flush / Triton"] - grid["Triton pv_flush"] / grid["Triton"]).abs() < 1e-12).all()
    small = grid.index.str.contains(r"x(?:64|128)(?: |$)")
    assert grid.loc[small, "Triton pv_flush / Triton"].min() > 0.935  # (h): "at most 6.4 %"
    assert grid.loc[small, "Gluon pv_flush / Gluon"].between(0.945, 0.99).all()  # "1.0-5.4 %"
    assert grid.loc[~small, "Gluon pv_flush / Gluon"].between(0.83, 0.895).all()  # summary: "0.83-0.89"
    assert explain.pv_flush_kept(tiles, "2x8192x32x128", A.gpu_config(128, False, pv_flush=True)) > 0.97
    gains = explain.v20_gains(explain.v20_dynamic_record(rdir))["counter vs one per tile"].dropna()
    assert len(gains) == 9 and (gains > 0).sum() == 4 and gains.min() > -0.066  # (f): "faster in 4 ... up to 6.5 %"
    persistent = explain.kernel_gain(explain.v19_persistent_record(rdir, run=1), "persistent, one program per SM",
                                     "one program per tile")
    plain = persistent[~persistent.index.str.endswith("causal")]
    assert len(plain) == 9 and plain.between(0.004, 0.036).all()  # (e): "by 0.4-3.6 %"
    # (d): the packed words at head dim 256, from v11's tile; v11's unpack slower than float32 P at 128
    v12 = explain.kernel_ratios(explain.v12_record(rdir))
    at256 = v12.index.str.contains("x256")
    f32, unpack, words = (v12[c] for c in ("P in float32 (v11 default)", "P packed, v11's unpack",
                                            "P packed, words as the A operand (v12)"))
    assert f32[at256].between(0.81, 0.87).all() and words[at256].between(0.91, 1.01).all()
    assert (unpack[~at256] < f32[~at256]).all()
    c3 = explain.kernel_ratios(explain.v12_consumers_record(rdir))  # (d): three consumers against two and Triton
    three, two, triton = (c3[c] for c in ("Gluon, 3 consumers (192 rows, v12)", "Gluon, 2 consumers (128 rows)",
                                           "Triton default"))
    assert three.between(0.89, 0.99).all() and two.between(0.81, 0.84).all()
    short = c3.index.str.startswith("4x4096")
    assert (three[short] < triton[short]).all() and (three[~short] > triton[~short]).all()
    # summary: v31's in-kernel transpose per head dim, "0.94-0.95 ... 0.84-0.85 ... 0.72-0.75"
    kept = explain.transpose_v_summary(explain.transpose_v_forms(rdir), "LDSM.T")["transpose_v / V^T ready"].round(2)
    assert kept.to_dict("index") == {64: {"lowest": 0.94, "highest": 0.95}, 128: {"lowest": 0.84, "highest": 0.85},
                                     256: {"lowest": 0.72, "highest": 0.75}}
    # exercise 6 can fail: the GPU's flushing tile at 2x8192x32x64 keeps a fraction that neither the v27 form
    # (the default tile with the flush) nor the grid's other run gives within the check's 0.005
    tile, v27_tile = A.gpu_config(64, False, pv_flush=True), dataclasses.replace(A.gpu_config(64, False), pv_flush=True)
    assert tile != v27_tile
    flush64, v27_form = (explain.pv_flush_kept(tiles, "2x8192x32x64", c) for c in (tile, v27_tile))
    assert min(abs(flush64 - v27_form), abs(flush64 - grid.loc["2x8192x32x64", "Triton pv_flush / Triton"])) > 0.01
