"""The recorded figures the notebooks quote instead of typing them: `bench.long_context_headline`
(notebooks 05-07 and 09) and `explain.transpose_v_summary` (notebook 09 (i) and its summary)."""

import json

import pandas as pd
import pytest

from fp8lab import bench, env


def _probe_rows() -> list[dict]:
    rows = [dict(seqlen_k=n, who=who, rel_l2=x) for who, (short, long) in {
        "fa3-fwd": (0.02, 0.4),
        "triton m128n128w4s3": (0.021, 0.39),  # our kernels without the flush: the worse one counts
        "gluon ws-n128s4-pw-ps-dy": (0.019, 0.41),
        "triton m64n128w4s3-pk-pf": (0.0031, 0.0024),  # flushing tiles: the worst one counts
        "gluon ws-n128s4-pw-ps-dy-pf": (0.0030, 0.0026),
        "vllm-so": (0.0029, 0.0023),
        "emulation, fp32 accumulate": (0.001, 0.001),  # not a kernel
    }.items() for n, x in ((2048, short), (65536, long))]
    return rows + [dict(seqlen_k=2048, who="triton m64n64w4s3-pk-pf", error="RuntimeError(...)")]  # no rel_l2


def test_long_context_headline_reads_both_records(tmp_path):
    bench.write_results(tmp_path / "bench_v28_long_context.json", _probe_rows(), {"gpu": "test"})
    fidelity = {"context": {}, "cases": [], "long_context": [
        {"dist": "v_offset", "seqlen_k": 8192, "providers": {"fa3-fwd": {"err_vs_exact": 0.1},
                                                             "vllm-fa3": {"err_vs_exact": 0.003}}},
        {"dist": "v_offset", "seqlen_k": 131072, "providers": {"fa3-fwd": {"err_vs_exact": 0.57}}},
        {"dist": "normal", "seqlen_k": 8192, "providers": {"fa3-fwd": {"err_vs_exact": 0.05}}},  # not V + 1
    ]}
    (tmp_path / "fidelity.json").write_text(json.dumps(fidelity))
    head = bench.long_context_headline(tmp_path)
    assert head["probe"] == {"fa3-fwd": {2048: 0.02, 65536: 0.4}, "ours": {2048: 0.021, 65536: 0.41},
                             "ours, pv_flush": {2048: 0.0031, 65536: 0.0026}, "vllm-so": {2048: 0.0029, 65536: 0.0023}}
    assert head["fidelity"] == {"fa3-fwd": {8192: 0.1, 131072: 0.57}, "vllm-fa3": {8192: 0.003}}
    assert head["fidelity_ratio_hopper"] is None  # this record holds no accumulator study


def test_long_context_headline_says_what_is_missing(tmp_path):
    rows = [r for r in _probe_rows() if r["who"] != "vllm-so"]
    bench.write_results(tmp_path / "bench_v28_long_context.json", rows, {"gpu": "test"})
    with pytest.raises(ValueError, match="no rel_l2 rows for 'vllm-so'"):
        bench.long_context_headline(tmp_path)


def test_long_context_headline_of_the_h200_record():
    head = bench.long_context_headline(env.results_dir())
    probe, longest = head["probe"], 65536
    assert set(probe) == {"fa3-fwd", "ours", "ours, pv_flush", "vllm-so"} and max(probe["ours"]) == longest
    # one level: our kernels land on fa3-fwd's error, which grows with the keys; two levels stay flat
    assert probe["ours"][longest] == pytest.approx(probe["fa3-fwd"][longest], abs=1e-3)
    assert probe["fa3-fwd"][longest] > 10 * probe["fa3-fwd"][min(probe["fa3-fwd"])]
    assert max(*probe["ours, pv_flush"].values(), *probe["vllm-so"].values()) < 0.005
    fa3 = head["fidelity"]["fa3-fwd"]
    assert max(fa3) == 131072 and fa3[131072] > fa3[min(fa3)] and max(head["fidelity"]["vllm-fa3"].values()) < 0.005
    low, high = head["fidelity_ratio_hopper"]
    assert 0 < low < high < 0.1


def test_transpose_v_summary_by_head_dim():
    from fp8lab.kernels import explain

    cases = ["2x8192x32x64", "2x8192x32x64 causal", "2x8192x32x256"]
    index = pd.MultiIndex.from_tuples([(form, c) for form in ("LDSM.T", "PRMT") for c in cases], names=["form", "case"])
    forms = pd.DataFrame({"V^T ready": [100.0, 200.0, 400.0] * 2, "+ copy": [98.0, 192.0, 396.0] * 2,
                          "transpose_v": [94.0, 190.0, 300.0, 10.0, 10.0, 10.0],
                          "no transpose": [97.0, 198.0, float("nan")] * 2}, index=index)
    table = explain.transpose_v_summary(forms)  # LDSM.T only
    assert list(table.index) == [64, 256]
    assert tuple(table.loc[64, "transpose_v / V^T ready"]) == (0.94, 0.95)
    assert tuple(table.loc[64, "+ copy / V^T ready"]) == (0.96, 0.98)
    assert tuple(table.loc[64, "no transpose / V^T ready"]) == (0.97, 0.99)
    assert table.loc[256, ("transpose_v / V^T ready", "lowest")] == 0.75
    assert table.loc[256, "no transpose / V^T ready"].isna().all()  # not timed at 256


def test_transpose_v_summary_of_the_h200_record():
    from fp8lab.kernels import explain

    table = explain.transpose_v_summary(explain.transpose_v_forms(env.results_dir()))
    fraction = table["transpose_v / V^T ready"]
    assert list(table.index) == [64, 128, 256] and (fraction["highest"] < 1).all()
    assert (table[("+ copy / V^T ready", "lowest")] > fraction["highest"]).all()  # the copy stays faster


def test_decode_split_record_one_row_per_sequence(tmp_path):
    from fp8lab.reference import experiments

    record = {"context": {"gpu": "test"}, "heads_kv": 8, "cases": [], "validation": [
        {"head_dim": 128, "case": "2 mixed", "lens": [12000, 300], "block_n": 96, "by_num_splits": {  # heads_kv: the file's
            "0": {"predicted_splits": [14, 1], "equal_at_predicted": [0.78, 0.87], "equal_without_split": [0.1, 0.87]},
            "5": {"predicted_splits": [5, 1], "equal_at_predicted": [0.76, 0.87], "equal_without_split": [0.11, 0.87]}}},
        {"head_dim": 256, "heads_kv": 4, "case": "1 seq", "lens": [2508], "block_n": 128, "by_num_splits": {
            "0": {"predicted_splits": [10], "equal_at_predicted": [0.88], "equal_without_split": [0.12]}}},
    ]}
    (tmp_path / "decode_fidelity_validate.json").write_text(json.dumps(record))
    df = experiments.decode_split_record(tmp_path)
    assert len(df) == 5 and list(df.num_splits) == [0, 0, 5, 5, 0]
    assert list(df.heads_kv) == [8, 8, 8, 8, 4] and list(df.seqlen_k) == [12000, 300, 12000, 300, 2508]
    row = df[(df.case == "2 mixed") & (df.num_splits == 5) & (df.sequence == 0)].iloc[0]
    assert (row.predicted_splits, row.equal_at_predicted, row.equal_without_split) == (5, 0.76, 0.11)
    (tmp_path / "decode_fidelity_validate.json").write_text(json.dumps({"context": {}, "cases": []}))
    with pytest.raises(ValueError, match="'validation'"):
        experiments.decode_split_record(tmp_path)


def test_decode_split_record_of_the_h200_record():
    from fp8lab.reference import experiments
    from fp8lab.reference import fa3_decode_splits

    df = experiments.decode_split_record(env.results_dir())
    assert len(df) > 0 and set(df.num_splits) >= {0}
    for (case, d, passed), rows in df.groupby(["case", "head_dim", "num_splits"]):  # the package predicts the record's counts
        first = rows.iloc[0]
        assert list(rows.predicted_splits) == fa3_decode_splits(list(rows.seqlen_k), int(first.heads_kv), int(first.block_n),
                                                                num_splits=int(passed)), (case, d, passed)
    split, whole = df[df.predicted_splits > 1], df[df.predicted_splits == 1]
    assert len(split) > 0 and (split.equal_at_predicted > split.equal_without_split + 0.4).all()  # splitting as FA3 does
    assert (whole.equal_at_predicted == whole.equal_without_split).all()  # no split predicted: the same emulation
