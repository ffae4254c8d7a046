"""fp8lab.bench: FLOP counts, the issue's grid, results with context, ratio tables."""

from __future__ import annotations

import json

import pytest

from fp8lab import bench


def test_attention_flops_convention():
    # 2 matmuls x 2 flops per multiply-add x sq x sk x d per head; causal counts half
    assert bench.attention_flops(2, 8192, 8192, 32, 128, False) == 4 * 2 * 8192**2 * 32 * 128
    assert bench.attention_flops(2, 8192, 8192, 32, 128, True) == 2 * 2 * 8192**2 * 32 * 128
    assert bench.tflops(1e12, 1000.0) == pytest.approx(1.0)
    assert bench.tbps(4.3e12, 1000.0) == pytest.approx(4.3)


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
