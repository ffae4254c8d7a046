"""fp8lab.bench: FLOP counts, the issue's grid, results with context, ratio tables."""

from __future__ import annotations

import json

import pytest

from fp8lab import bench, env


def test_attention_flops_convention():
    # 2 matmuls x 2 flops per multiply-add x sq x sk x d per head; causal counts half
    assert bench.attention_flops(2, 8192, 8192, 32, 128, False) == 4 * 2 * 8192**2 * 32 * 128
    assert bench.attention_flops(2, 8192, 8192, 32, 128, True) == 2 * 2 * 8192**2 * 32 * 128
    assert bench.tflops(1e12, 1000.0) == pytest.approx(1.0)
    assert bench.tbps(4.3e12, 1000.0) == pytest.approx(4.3)


def test_attention_bytes_count_the_input_width():
    """FP8 inputs are 1 byte, bf16 2; O is bf16 either way: 2x8192x32x128, 8 kv heads."""
    fp8 = bench.attention_bytes(2, 8192, 32, 8, 128)
    assert fp8 == 2 * 8192 * 128 * (32 * (1 + 2) + 8 * 2)
    assert bench.attention_bytes(2, 8192, 32, 8, 128, input_bytes=2) == 2 * 8192 * 128 * (32 * (2 + 2) + 8 * 4)
    case = bench.AttentionCase(2, 8192, 32, 8, 128, False)
    assert bench.attention_intensity(case, input_bytes=2) < bench.attention_intensity(case) < 1e4


def test_one_pass_bound_counts_the_second_read():
    """Per tensor, every byte of x not held on chip is read twice: 3 useful bytes per bf16 value in 5
    moved with nothing held (0.60), copy speed with all of x held, and held_for inverts the bound."""
    import random

    x = random.uniform(1e6, 1e9)
    assert bench.one_pass_bound(x, 0) == pytest.approx(0.6)
    assert bench.one_pass_bound(x, x) == 1.0 == bench.one_pass_bound(x, 2 * x)
    target = random.uniform(0.61, 0.99)
    assert bench.one_pass_bound(x, bench.held_for(x, target)) == pytest.approx(target)
    assert bench.held_for(x, 0.5) == 0.0  # two passes already beat it
    assert bench.one_pass_bound(x, 0, in_bytes=4) == pytest.approx(5 / 9)  # fp32 x: 4 + 1 useful, 4 more read
    with pytest.raises(ValueError, match="fraction"):
        bench.held_for(x, 1.5)
    with pytest.raises(ValueError, match="x_bytes > 0"):
        bench.one_pass_bound(0, 1)


def test_grid_is_16k_tokens_32_heads():
    grid = bench.bench_grid()
    assert len(grid) == 3 * 3 * 2
    assert {c.tokens for c in grid} == {16384} and {c.heads_q for c in grid} == {32}
    assert {c.head_dim for c in grid} == {64, 128, 256} and {c.seqlen for c in grid} == {4096, 8192, 16384}
    assert grid[0].label() == "4x4096x32x64" and grid[1].label().endswith("causal")


def test_results_round_trip_with_context(tmp_path):
    rows = [
        {"case": "a", "provider": "fp8lab", "tflops": 700.0},
        {"case": "a", "provider": "fa3-fwd FP8", "tflops": 875.0},
        {"case": "b", "provider": "fp8lab", "tflops": 500.0},
    ]
    path = bench.write_results(tmp_path / "r.json", rows, {"gpu": "test"}, note="x")
    data = bench.load_results(path)
    assert data["context"] == {"gpu": "test"} and data["meta"] == {"note": "x"} and data["rows"] == rows
    assert (tmp_path / "r.csv").read_text().splitlines()[0] == "case,provider,tflops"
    table = bench.ratio_table(rows, "fp8lab", "fa3-fwd FP8")
    assert table == [{"case": "a", "fp8lab": 700.0, "fa3-fwd FP8": 875.0, "ratio": 0.8}]
    with pytest.raises(ValueError, match="a: expected fa3-fwd FP8's tflops > 0 .* got 0.0"):  # was ZeroDivisionError
        bench.ratio_table([*rows[:1], {**rows[1], "tflops": 0.0}], "fp8lab", "fa3-fwd FP8")
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="context"):
        bench.load_results(tmp_path / "bad.json")


def test_recorded_h200_results_carry_context():
    from pathlib import Path

    files = sorted((Path(__file__).parents[1] / "results" / "h200").glob("bench_v*_grid.json"))
    assert files, "results/h200 must hold the recorded benchmark"
    for f in files:
        data = bench.load_results(f)
        assert data["context"]["gpu"] == "NVIDIA H200" and data["context"]["triton"]
        providers = {r["provider"] for r in data["rows"]}
        assert {"fp8lab", "fa3-fwd FP8"} <= providers


CLOCK_LOG = """timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, clocks_event_reasons.active
2026/11/30 14:00:00.000, 345 MHz, 3201 MHz, 79.00 W, 35, 0x0000000000000001
2026/11/30 14:00:00.500, 1980 MHz, 3201 MHz, 420.00 W, 50, 0x0000000000000000
2026/11/30 14:00:01.000, 1700 MHz, 3201 MHz, 699.00 W, 60, 0x0000000000000004
2026/11/30 14:00:01.500, 1760 MHz, 3201 MHz, 701.50 W, 61, 0x0000000000000004
2026/11/30 14:00:05.000, 1980 MHz, 3201 MHz, 300.00 W, 55, 0x0000000000000000
2026/11/30 14:00:05.2
"""


def test_clock_log_read_and_joined_to_timings(tmp_path):
    import pandas as pd

    path = tmp_path / "clocks.csv"
    path.write_text(CLOCK_LOG)
    log = bench.read_clock_log(path)
    assert len(log) == 5  # the cut last line is dropped
    assert log["sm_mhz"].tolist() == [345, 1980, 1700, 1760, 1980] and log["reasons"].tolist() == [1, 0, 4, 4, 0]
    assert log["power_w"].iloc[3] == 701.5 and str(log["time"].iloc[1]) == "2026-11-30 14:00:00.500000"
    rows = pd.DataFrame({"done_at": ["2026/11/30 14:00:01", "2026/11/30 14:00:09"], "compile_and_time_s": [0.6, 0.1],
                         "tflops": [1000.0, 900.0]})
    timed = bench.clocks_while_timed(rows, log)
    # first row ended in 14:00:01.x after 0.6 s: samples from 14:00:00.4 to 14:00:02.0 -> 1980, 1700, 1760 MHz
    # (the idle 345 MHz at 14:00:00.0 is outside, and below 150 W anyway)
    assert timed["sm_mhz"].iloc[0] == (1980 + 1700 + 1760) / 3 and timed["power_w"].iloc[0] == 701.5
    assert timed["power_capped"].iloc[0] == 2 / 3
    assert timed[["sm_mhz", "power_w", "power_capped"]].iloc[1].isna().all()  # no sample while it ran
    assert timed["tflops"].tolist() == [1000.0, 900.0]
    with pytest.raises(ValueError, match="done_at"):
        bench.clocks_while_timed(rows.drop(columns="done_at"), log)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="nvidia-smi"):
        bench.read_clock_log(tmp_path / "other.csv")


def test_clock_log_joined_to_stamped_timings(tmp_path):
    """Rows from `interleaved_times` carry millisecond start and end stamps: the window is exactly
    theirs, widened by pad_s."""
    import pandas as pd

    path = tmp_path / "clocks.csv"
    path.write_text(CLOCK_LOG)
    log = bench.read_clock_log(path)
    rows = pd.DataFrame({"started_at": ["2026/11/30 14:00:00.950", "2026/11/30 14:00:00.400"],
                         "ended_at": ["2026/11/30 14:00:01.100", "2026/11/30 14:00:00.600"]})
    timed = bench.clocks_while_timed(rows, log, pad_s=0.0)
    assert timed["sm_mhz"].tolist() == [1700, 1980] and timed["power_capped"].tolist() == [1.0, 0.0]
    wide = bench.clocks_while_timed(rows, log, pad_s=0.5)
    assert wide["sm_mhz"].iloc[0] == (1980 + 1700 + 1760) / 3
    # the second row's wide window holds the idle sample (345 MHz, 79 W) at 14:00:00.000 too: left out
    assert wide["sm_mhz"].iloc[1] == (1980 + 1700) / 2 and wide["power_w"].iloc[1] == 699.0
    ends = pd.DataFrame({"started_at": ["2026/11/30 14:00:00.500", "2026/11/30 13:59:59.900"],
                         "ended_at": ["2026/11/30 14:00:01.000", "2026/11/30 14:00:00.100"]})
    both = bench.clocks_while_timed(ends, log, pad_s=0.0)  # samples on the window's ends count
    assert both["sm_mhz"].iloc[0] == (1980 + 1700) / 2 and both[["sm_mhz", "power_w"]].iloc[1].isna().all()  # idle only
    with pytest.raises(ValueError, match="started_at"):
        bench.clocks_while_timed(rows.drop(columns="ended_at"), log)


class _FakeGpu:
    """Callables that log their calls, and a timer that 'times' a callable by calling it once."""

    def __init__(self, names, fail_on_call=None):
        self.calls: list[str] = []
        self.fail_on_call = fail_on_call or {}
        self.fns = {n: self._fn(n) for n in names}
        self.ms = {n: 1.0 + i for i, n in enumerate(names)}
        self.by_fn = {id(f): n for n, f in self.fns.items()}

    def _fn(self, name):
        def fn():
            self.calls.append(name)
            if self.calls.count(name) == self.fail_on_call.get(name):
                raise RuntimeError(f"{name} broke")
        return fn

    def timer(self, fn):
        fn()
        return self.ms[self.by_fn[id(fn)]]


def test_interleaved_times_rotates_and_settles():
    import random

    names = [f"p{i}" for i in range(random.randint(2, 5))]
    gpu = _FakeGpu(names)
    syncs = []
    rows = bench.interleaved_times(gpu.fns, rounds=7, settle_s=0.01, timer=gpu.timer, sync=lambda: syncs.append(1))
    n = len(names)
    assert gpu.calls[:n] == names  # each compiled once, in order
    timed = [r for r in rows if "ms" in r]
    assert len(timed) == 7 * n and all(r["ms"] == gpu.ms[r["provider"]] for r in timed)
    for r in range(7):
        order = [x["provider"] for x in timed if x["round"] == r]
        assert order == names[r % n:] + names[:r % n] and [x["position"] for x in timed if x["round"] == r] == list(range(n))
    settle_calls = len(gpu.calls) - n - 7 * n
    assert settle_calls >= n and settle_calls % n == 0 and len(syncs) == n + settle_calls // n
    first = {p: sum(1 for x in timed if x["provider"] == p and x["position"] == 0) for p in names}
    assert min(first.values()) >= 7 // n  # every provider leads some round
    assert all(x["started_at"] <= x["ended_at"] and len(x["started_at"]) == 23 for x in timed)


def test_interleaved_times_drops_a_failing_provider():
    gpu = _FakeGpu(["a", "b", "c"], fail_on_call={"b": 1, "c": 5})
    rows = bench.interleaved_times(gpu.fns, rounds=4, settle_s=0.0, timer=gpu.timer)
    errors = [r for r in rows if "error" in r]
    assert [(e["provider"], e["round"]) for e in errors] == [("b", None), ("c", 3)] and "b broke" in errors[0]["error"]
    assert not any(r["provider"] == "b" and "ms" in r for r in rows)
    assert [r["provider"] for r in rows if "ms" in r and r["round"] == 3] == ["a"]  # c broke there, leading
    with pytest.raises(ValueError, match="rounds"):
        bench.interleaved_times(gpu.fns, rounds=0)
    with pytest.raises(ValueError, match="at least one"):
        bench.interleaved_times({})


def test_case_rows_record_tflops_or_the_error():
    import random

    case = bench.AttentionCase(2, 8192, 32, 32, random.choice([64, 128, 256]), random.choice([False, True]))
    gpu = _FakeGpu(["a", "b", "c"], fail_on_call={"c": 3})
    timed = bench.interleaved_times(gpu.fns, rounds=3, settle_s=0.0, timer=gpu.timer)
    rows = bench.case_rows(case, timed, {"b": "ws-n128s3"})
    assert len(rows) == len(timed)
    for row, r in zip(rows, timed):
        assert (row["case"], row["head_dim"], row["causal"], row["provider"]) == (case.label(), case.head_dim,
                                                                                 case.causal, r["provider"])
        assert row.get("config") == ("ws-n128s3" if r["provider"] == "b" else None)
        if "ms" in r:
            assert row["tflops"] == pytest.approx(case.flops() / (r["ms"] * 1e-3) / 1e12)
        else:
            assert "c broke" in row["error"] and "tflops" not in row
    medians = bench.case_medians(rows, case)
    assert set(medians) == {"a", "b", "c"}  # c was timed once before it broke
    assert all(medians[p] == round(case.flops() / (gpu.ms[p] * 1e-3) / 1e12) for p in medians)


def test_median_over_rounds():
    import random

    tf = {("x", "a"): [random.uniform(500, 1000) for _ in range(5)], ("x", "b"): [random.uniform(500, 1000)],
          ("y", "a"): [random.uniform(500, 1000) for _ in range(4)]}
    rows = [dict(case=c, provider=p, round=i, position=0, started_at="s", ended_at="e", ms=1e3 / t, tflops=t,
                 head_dim=64) for (c, p), ts in tf.items() for i, t in enumerate(ts)]
    rows.append(dict(case="y", provider="c", round=None, error="RuntimeError()"))
    random.shuffle(rows)
    out = {(r["case"], r["provider"]): r for r in bench.median_over_rounds(rows)}
    assert len(out) == 4 and out[("y", "c")]["error"] == "RuntimeError()"
    for key, ts in tf.items():
        r, s = out[key], sorted(ts)
        mid = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
        assert r["tflops"] == pytest.approx(mid) and r["rounds"] == len(ts) and r["head_dim"] == 64
        ms = sorted(1e3 / t for t in ts)  # the median time, not the time of one round
        mid_ms = ms[len(ms) // 2] if len(ms) % 2 else (ms[len(ms) // 2 - 1] + ms[len(ms) // 2]) / 2
        assert r["ms"] == pytest.approx(mid_ms)
        assert (r["tflops_min"], r["tflops_max"]) == (s[0], s[-1])
        assert not {"round", "position", "started_at", "ended_at"} & set(r)
    assert bench.ratio_table(list(out.values()), "a", "b")[0]["ratio"] == pytest.approx(out[("x", "a")]["tflops"]
                                                                                        / out[("x", "b")]["tflops"])


def test_recorded_power_limit_of_v19():
    """The v19 session's clock log and timings read back: head dim 64 ran at the maximum clock,
    256 at the power limit and a lower clock."""
    from pathlib import Path

    import pandas as pd

    rdir = Path(__file__).parents[1] / "results" / "h200"
    log = bench.read_clock_log(rdir / "run16" / "call2" / "clocks.csv")
    rows = pd.DataFrame([r for r in bench.load_results(rdir / "bench_v19_ps2.json")["rows"]
                         if r.get("section") == "speed" and "tflops" in r])
    timed = bench.clocks_while_timed(rows, log)
    assert timed["sm_mhz"].notna().all(), "every timing should find clock samples"
    by_dim = timed.groupby("head_dim")[["sm_mhz", "power_capped"]].mean()
    assert by_dim.loc[64, "sm_mhz"] > 1950 and by_dim.loc[256, "sm_mhz"] < 1850
    assert by_dim.loc[256, "power_capped"] > 0.8 > by_dim.loc[64, "power_capped"]


NCU_RAW = '''"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"
"","","us","Mbyte"
"0","_onchip_ws_kernel","63.424000","1,134.337792"
'''
NCU_SASS = '''"Kernel Name","_onchip_ws_kernel",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"
"0x10","      SYNCS.ARRIVE.TRANS64 RZ, [UR17+0x30120], R2","0","4096"
"0x20","      SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R20+URZ+0x30120], R3","1","4096"
"0x30","      @!P0  BRA 0x40","700","4096"
"0x40","      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R20+URZ+0x30120], R3","0","9000"
"0x50","      @!P0  SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R58+URZ+0x30180], RZ","93","16384"
"0x60","      LDG.E.128.STRONG.SYS R12, desc[UR12][R38.64]","0","30685"
'''


def test_nsight_compute_exports_read(tmp_path):
    """`ncu --page raw --csv` and `--page source --csv --print-source sass`, read back; the mbarrier
    table sums try-waits and arrivals per array offset."""
    (tmp_path / "raw.csv").write_text(NCU_RAW)
    raw = bench.read_ncu_raw(tmp_path / "raw.csv")
    assert raw.loc["gpu__time_duration.sum", "value"] == 63.424 and raw.loc["gpu__time_duration.sum", "unit"] == "us"
    assert raw.loc["dram__bytes_read.sum", "value"] == 1134.337792  # thousands separators dropped
    assert raw["value"].isna()["Kernel Name"] and raw.loc["Kernel Name", "text"] == "_onchip_ws_kernel"
    (tmp_path / "sass.csv").write_text(NCU_SASS)
    sass = bench.read_ncu_sass(tmp_path / "sass.csv")
    assert sass["executed"].tolist() == [4096, 4096, 4096, 9000, 16384, 30685] and sass["samples"].sum() == 794
    assert sass["sass"].iloc[2] == "@!P0  BRA 0x40"
    bars = bench.mbarrier_waits(sass)
    assert bars.loc["0x30120"].tolist() == [4096 + 9000, 0, 4096] and bars.loc["0x30180"].tolist() == [0, 16384, 0]
    for page, reader in (("raw", bench.read_ncu_sass), ("sass", bench.read_ncu_raw)):  # each refuses the other
        with pytest.raises(ValueError, match="Nsight Compute"):
            reader(tmp_path / f"{page}.csv")


@pytest.mark.skipif(not env.triton_interpret(), reason="runs the Triton kernel on CPU tensors: needs TRITON_INTERPRET=1 "
                    "(conftest sets it where there is no GPU); on a GPU the GPU-marked tests cover it")
def test_case_calls_on_the_cpu_run_the_triton_kernel_on_seeded_inputs():
    case = bench.AttentionCase(1, 40, 2, 1, 32, True)
    calls = bench.case_calls(case, device="cpu")
    assert set(calls) == {"fp8lab"}  # the Gluon kernel and the production kernels need a GPU
    out = calls["fp8lab"]()
    assert out.shape == (1, 40, 2, 32) and out.dtype.is_floating_point and bool(out.float().isfinite().all())
    assert bench.case_calls(case, device="cpu")["fp8lab"]().equal(out)
    assert not bench.case_calls(case, device="cpu", seed=1)["fp8lab"]().equal(out)
    from fp8lab.kernels import AttentionConfig, WsConfig

    more = bench.case_calls(case, device="cpu", configs={"m16n16": AttentionConfig(16, 16, 4, 1),
                                                        "ws": WsConfig(pv_flush=True)})
    assert set(more) == {"fp8lab", "m16n16"}  # the Gluon config is left out off Hopper
    assert more["m16n16"]().equal(out)  # the interpreter's default is the same 16 x 16 tile
    with pytest.raises(TypeError, match="configs\\['x'\\]: expected an AttentionConfig or a WsConfig, got dict"):
        bench.case_calls(case, device="cpu", configs={"x": {}})


def test_mma_peak_and_exp2_ceiling_meet_at_head_dim_128():
    """The datasheet's dense peaks are 8192 (FP8) and 4096 (bf16) FLOP per SM per clock at 1.83 GHz;
    at any one clock the exp2 unit (16 per clock, one per score of 4d FLOPs) matches FP8 at d=128."""
    from fp8lab import bench

    assert bench.mma_peak_tflops(clock_ghz=1.83) == pytest.approx(1979, rel=1e-3)
    assert bench.mma_peak_tflops(clock_ghz=1.83, flop_per_clock=4096) == pytest.approx(989, rel=1e-3)
    for ghz in (1.98, 1.65):
        assert bench.exp2_ceiling_tflops(128, clock_ghz=ghz) == pytest.approx(bench.mma_peak_tflops(clock_ghz=ghz))
        assert bench.exp2_ceiling_tflops(64, clock_ghz=ghz) < bench.mma_peak_tflops(clock_ghz=ghz)


def test_records_frame_reads_exact_names_only():
    """`records_frame(d, "grid")` reads bench_v<N>_grid.json, not another section whose name ends
    alike (bench_v28_pv_flush_grid.json) nor a rerun (bench_v23_grid_run2.json); letter suffixes
    of a version (v8a) stay."""
    rdir = env.results_dir()
    grid = bench.records_frame(rdir, "grid")
    assert "v23" in set(grid["version"]) and "v28" not in set(grid["version"])
    assert len(grid[grid["version"] == "v23"]) == len(bench.load_results(rdir / "bench_v23_grid.json")["rows"])
    assert {"v8", "v8a", "v8b", "v9"} <= set(bench.records_frame(rdir, "ws")["version"])


def test_one_pass_limit_inverts_the_bound():
    """The largest x the bound still carries to the target: at it the bound is the target, just
    beyond it below; x up to what is held is read once."""
    import random

    held = random.uniform(1e6, 1e8)
    target = random.uniform(0.65, 0.99)
    limit = bench.one_pass_limit(held, target)
    assert bench.one_pass_bound(limit, held) == pytest.approx(target)
    assert bench.one_pass_bound(limit * 1.01, held) < target <= bench.one_pass_bound(limit * 0.99, held)
    assert limit > held and bench.one_pass_bound(held, held) == 1.0
    assert bench.one_pass_limit(held, 0.6) == float("inf")  # two passes reach 0.60 at any size
    assert bench.one_pass_limit(held, 1.0) == held  # copy speed only while all of x fits
    with pytest.raises(ValueError, match="target"):
        bench.one_pass_limit(held, 0.0)
    with pytest.raises(ValueError, match="held_bytes >= 0, got target=0.8, held_bytes=nan"):  # was NaN returned
        bench.one_pass_limit(float("nan"), 0.8)
    for x, held in ((float("nan"), 0), (1e8, float("nan")), (float("inf"), 0)):  # were NaN bounds
        with pytest.raises(ValueError, match="x_bytes > 0 .*and held_bytes >= 0"):
            bench.one_pass_bound(x, held)
    with pytest.raises(ValueError, match="x_bytes > 0"):
        bench.one_pass_bound_table(float("nan"))


def test_one_pass_bound_table_on_what_the_chip_holds():
    import random

    x = random.uniform(5e7, 5e8)
    chip = {"shared memory (a)": 3_000_000, "registers (b)": 5_000_000, "L2 (c)": 7_000_000}
    table = bench.one_pass_bound_table(x, 0.8, chip)
    assert list(table.index) == ["nothing (two passes)", "shared memory", "+ registers", "+ L2: everything",
                                 "needed for 80 %"]
    assert table["MB of x held"].tolist()[:4] == pytest.approx([0, 3, 8, 15])
    assert table["MB of x held"].iloc[-1] == pytest.approx(bench.held_for(x, 0.8) / 1e6)
    assert table["bound (of copy)"].tolist() == pytest.approx([bench.one_pass_bound(x, mb * 1e6) for mb in
                                                                table["MB of x held"]])
    assert table["bound (of copy)"].iloc[-1] == pytest.approx(0.8) and table["bound (of copy)"].iloc[0] == pytest.approx(0.6)
    h200 = bench.one_pass_bound_table(128 * 2**20)
    assert h200.index[-1] == "needed for 85 %" and h200["MB of x held"].iloc[3] == bench.on_chip_bytes(l2=True) / 1e6
    sweep = bench.one_pass_bound_sweep(x, [0, 10, 20])
    assert sweep["held_mb"].tolist() == [0, 10, 20] and sweep["bound"].iloc[0] == pytest.approx(0.6)
    assert sweep["bound"].is_monotonic_increasing


def test_on_chip_bytes_of_the_h200():
    sms = 132 * (228 + 256) * 1024
    assert bench.on_chip_bytes() == sms and bench.on_chip_bytes(l2=True) == sms + 50 * 2**20


def test_first_cast_waits_by_kind_of_scaling():
    """With current scaling a kernel must read every value one descale covers before its first
    cast: a row per token, a (sequence, head) slice per head, all of x per tensor."""
    import random

    from fp8lab.scaling import PerHead

    shape = (random.randint(1, 4), random.choice([113, 203, 799]), random.choice([8, 32]), random.choice([64, 128]))
    b, s, h, d = shape
    assert bench.first_cast_waits(shape) == {"delayed": 0, "per token": d, "per head": s * d, "per tensor": b * s * h * d}
    assert bench.values_per_descale(shape, PerHead(heads_kv=h // 4)) == s * 4 * d  # GQA: a group shares a scale
    assert bench.first_cast_waits()["per tensor"] * 2 == 128 * 2**20  # QUANT_X_SHAPE: 128 MiB of bf16
    with pytest.raises(ValueError, match="batch, tokens, heads, head_dim"):
        bench.values_per_descale((4, 5), PerHead())
    with pytest.raises(TypeError, match=r"granularity: expected .* such as PerHead\(\) \(an instance\), got <class"):
        bench.values_per_descale(shape, PerHead)  # the class: was "compact_shape() missing 1 required argument"
    with pytest.raises(ValueError, match="x_shape: expected an int >= 1, got 0"):  # was a ZeroDivisionError
        bench.values_per_descale((1, 0, 8, 64), PerHead())


def test_quant_floor_and_exp2_balance():
    import random

    x, copy = random.uniform(1e6, 1e9), random.uniform(1.0, 5.0)
    assert bench.quant_floor_us(x, copy) == pytest.approx(1.5 * x / (copy * 1e12) * 1e6)
    assert bench.quant_floor_us(x, copy, in_bytes=4) == pytest.approx(1.25 * x / (copy * 1e12) * 1e6)
    with pytest.raises(ValueError, match="copy_tbps > 0"):
        bench.quant_floor_us(x, 0)
    for bad in ((float("nan"), copy), (x, float("nan")), (float("inf"), copy)):  # were NaN or inf microseconds
        with pytest.raises(ValueError, match="x_bytes > 0 and copy_tbps > 0, finite"):
            bench.quant_floor_us(*bad)
    for flop, d in ((8192, 128), (4096, 64)):
        assert bench.exp2_balance_head_dim(flop) == d
        for ghz in (1.98, random.uniform(1.4, 1.9)):  # the clock cancels
            assert bench.exp2_ceiling_tflops(d, clock_ghz=ghz) == pytest.approx(
                bench.mma_peak_tflops(clock_ghz=ghz, flop_per_clock=flop))
    ceilings = bench.roofline_ceilings(1.5, (64,))
    assert set(ceilings) == {*bench.H200_CEILINGS, "FP8 MMA peak (model, 1.5 GHz)", "exp2 model, d=64"}
    assert ceilings["exp2 model, d=64"] == pytest.approx(132 * 1.5e9 * 16 * 256 / 1e12)
    for mhz in (1980, 0, -1.98):  # MHz for GHz was a ceiling 1000 times too high, without a word
        with pytest.raises(ValueError, match=r"clock_ghz: expected GHz, a number in \(0, 10\]"):
            bench.roofline_ceilings(mhz)


def test_parse_case_inverts_label():
    import random

    for _ in range(5):
        hq = random.choice([8, 32])
        case = bench.AttentionCase(random.randint(1, 8), random.choice([113, 4096]), hq, random.choice([hq, hq // 4]),
                                   random.choice([64, 128, 256]), random.choice([False, True]))
        assert bench.parse_case(case.label()) == case
    assert bench.parse_case("2x8192x32/8x128 causal") == bench.AttentionCase(2, 8192, 32, 8, 128, True)
    with pytest.raises(ValueError, match="case label"):
        bench.parse_case("2x8192x32")
    with pytest.raises(ValueError, match="heads_q must be a multiple"):
        bench.parse_case("2x8192x32/12x128")
    with pytest.raises(TypeError, match="case label: expected a str .* got int 123"):
        bench.parse_case(123)


@pytest.mark.parametrize("args, match", [
    ((2, 8192, 32, 0, 128, False), r"AttentionCase.heads_kv: expected an int >= 1, got 0"),
    ((0, 8192, 32, 32, 128, False), r"AttentionCase.batch: expected an int >= 1, got 0"),
    ((2, 81.5, 32, 32, 128, False), r"AttentionCase.seqlen: expected an int >= 1, got 81.5"),
    ((2, 8192, 32, 32, True, False), r"AttentionCase.head_dim: expected an int >= 1, got True"),
    ((2, 8192, 32, 12, 128, False), r"heads_q must be a multiple of heads_kv .* heads_q=32, heads_kv=12"),
])
def test_attention_case_refuses_shapes_no_attention_has(args, match):
    with pytest.raises(ValueError, match=match):
        bench.AttentionCase(*args)


def test_on_chip_marks_are_cumulative():
    marks = bench.on_chip_marks({"shared memory (x)": 2_000_000, "registers (y)": 1_000_000, "L2 (z)": 500_000})
    assert marks == {"shared memory": 2.0, "+ registers": 3.0, "+ L2: everything": 3.5}
    assert bench.on_chip_marks({"shared memory (x)": 1_000_000}) == {"shared memory": 1.0}
    assert list(bench.on_chip_marks()) == ["shared memory", "+ registers", "+ L2: everything"]
    with pytest.raises(ValueError, match="at least one"):
        bench.on_chip_marks({})


def test_rates_and_ceilings_refuse_bad_input() -> None:
    """No ZeroDivisionError, silent NaN/negative rate, MHz-for-GHz slip or uneven grid: each names what it expected."""
    import math
    import random

    ms = random.uniform(0.01, 10.0)
    assert bench.tflops(2e12 * ms * 1e-3, ms) == pytest.approx(2.0)
    for bad in (0, -ms, float("nan"), float("inf")):  # 0 was a ZeroDivisionError, the rest a rate
        for fn in (bench.tflops, bench.tbps):
            with pytest.raises(ValueError, match="ms: expected a finite number > 0"):
                fn(1e12, bad)
    intensity = random.uniform(1.0, 1e3)
    assert bench.roofline_tflops(intensity, 1979.0, 4.8) == min(1979.0, 4.8 * intensity)
    for args in ((float("nan"), 1979.0, 4.8), (-intensity, 1979.0, 4.8), (intensity, 1979.0, float("nan"))):
        with pytest.raises(ValueError, match="expected a finite number > 0"):  # NaN gave the peak, -x a negative
            bench.roofline_tflops(*args)
    ghz = random.uniform(1.0, 2.0)
    assert bench.mma_peak_tflops(clock_ghz=ghz) == pytest.approx(132 * ghz * 8192 / 1e3)
    for fn in (lambda c: bench.mma_peak_tflops(clock_ghz=c), lambda c: bench.exp2_ceiling_tflops(128, clock_ghz=c)):
        for bad in (1980.0, 0.0, float("nan")):  # 1980 (MHz) gave 2.1 million TFLOP/s
            with pytest.raises(ValueError, match="clock_ghz: expected GHz"):
                fn(bad)
    with pytest.raises(ValueError, match="head_dim: expected a finite number > 0"):
        bench.exp2_ceiling_tflops(0)
    balance = bench.exp2_balance_head_dim(flop_per_clock=4096)  # a float: the model takes fractional head dims
    assert bench.exp2_ceiling_tflops(balance, clock_ghz=ghz) == pytest.approx(
        bench.mma_peak_tflops(clock_ghz=ghz, flop_per_clock=4096))
    for bad in (float("nan"), -1e6):  # were 0.0 bytes held
        with pytest.raises(ValueError, match="x_bytes > 0"):
            bench.held_for(bad, 0.85)
    with pytest.raises(ValueError, match="batch: expected an int >= 0"):
        bench.attention_flops(-1, 128, 128, 8, 64, False)
    with pytest.raises(ValueError, match="seqlen: expected an int >= 0"):
        bench.attention_bytes(1, -128, 8, 8, 64)
    with pytest.raises(ValueError, match=r"divide tokens=16384 .*\[3000\]"):  # was 5 x 3000 = 15000 tokens
        bench.bench_grid(seqlens=(4096, 3000))
    assert all(c.tokens == 16384 for c in bench.bench_grid()) and not math.isnan(bench.held_for(1e8, 0.85))
