"""The FA2/FA3 decision, driven with simulated devices and provider sets (no GPU needed)."""

from __future__ import annotations

import pytest

from fp8lab.backends import gating
from fp8lab.backends.gating import PROVIDERS, Device, Request, decide, flash_attn_supports_fp8, flash_attn_version

AMPERE, ADA, HOPPER, BLACKWELL, CPU = Device((8, 0)), Device((8, 9)), Device((9, 0)), Device((10, 0)), Device(None)
ALL = set(PROVIDERS)
NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize(
    "device, available, env, expected",
    [
        (HOPPER, ALL, NO_ENV, 3),
        (HOPPER, ALL - {"vllm", "vllm-so", "fa3-fwd", "flash-attn-3"}, NO_ENV, 2),  # FA3 not importable
        (HOPPER, {"fa3-fwd"}, NO_ENV, 3),
        (Device((9, 0)), {"fa3-fwd"}, {"FP8LAB_FLASH_ATTN_VERSION": "2"}, None),  # forced FA2, none installed
        (HOPPER, ALL, {"FP8LAB_FLASH_ATTN_VERSION": "2"}, 2),
        (AMPERE, ALL, NO_ENV, 2),
        (ADA, ALL, NO_ENV, 2),
        (AMPERE, ALL, {"FP8LAB_FLASH_ATTN_VERSION": "3"}, None),  # forced FA3 where it cannot run
        (BLACKWELL, ALL, NO_ENV, 2),
        (BLACKWELL, ALL, {"FP8LAB_FLASH_ATTN_VERSION": "3"}, 2),  # Blackwell falls back from FA3
        (Device((7, 5)), ALL, NO_ENV, None),  # Turing: FA2 needs 8.0
        (CPU, ALL, NO_ENV, None),
    ],
)
def test_flash_attn_version_follows_vllm(device, available, env, expected):
    version, notes = flash_attn_version(device.capability, available, env)
    assert version == expected, notes
    assert notes


def test_blackwell_and_override_notes_say_why():
    _, notes = flash_attn_version((10, 0), ALL, {"FP8LAB_FLASH_ATTN_VERSION": "3"})
    text = " ".join(notes)
    assert "overrides" in text and "Blackwell" in text


def test_bad_override_is_rejected():
    with pytest.raises(ValueError, match="FP8LAB_FLASH_ATTN_VERSION: expected 2 or 3, got '4'"):
        flash_attn_version((9, 0), ALL, {"FP8LAB_FLASH_ATTN_VERSION": "4"})


@pytest.mark.parametrize("device, available, env, expected", [
    (HOPPER, ALL, NO_ENV, True),
    (HOPPER, {"fa3-fwd"}, NO_ENV, True),
    (HOPPER, ALL, {"FP8LAB_FLASH_ATTN_VERSION": "2"}, False),
    (HOPPER, ALL - {"vllm", "vllm-so", "fa3-fwd", "flash-attn-3"}, NO_ENV, False),
    (AMPERE, ALL, NO_ENV, False),
    (ADA, ALL, NO_ENV, False),
    (BLACKWELL, ALL, NO_ENV, False),
    (CPU, ALL, NO_ENV, False),
])
def test_flash_attn_supports_fp8(device, available, env, expected):
    assert flash_attn_supports_fp8(device.capability, available, env) is expected


GPU_SET = {"fa3-fwd", "vllm-so", "sdpa-flash", "sdpa", "sdpa-cudnn", "triton", "reference"}


@pytest.mark.parametrize(
    "device, available, dtype, head_dim, fallback, expected",
    [
        (HOPPER, ALL, "bf16", 128, "error", "fa3:vllm"),
        (HOPPER, GPU_SET, "bf16", 128, "error", "fa3:vllm-so"),
        (HOPPER, GPU_SET, "fp8", 128, "error", "fa3:vllm-so"),
        (HOPPER, {"fa3-fwd", "sdpa"}, "fp8", 256, "error", "fa3:fa3-fwd"),
        (HOPPER, {"fa3-fwd", "sdpa"}, "fp16", 128, "error", "sdpa:sdpa"),  # fa3-fwd is built without fp16
        (HOPPER, {"sdpa-flash", "sdpa", "triton"}, "fp8", 128, "error", "triton:triton"),  # no FA3: our kernel
        (HOPPER, {"sdpa", "gluon", "triton"}, "fp8", 128, "error", "triton:gluon"),  # the faster one on Hopper
        (HOPPER, {"sdpa", "gluon", "triton"}, "fp8", 96, "error", "triton:triton"),  # Gluon: 64, 128, 256 only
        (ADA, {"sdpa", "gluon", "triton"}, "fp8", 128, "error", "triton:triton"),  # Gluon: sm_90 only
        (HOPPER, {"fa3-fwd", "triton"}, "fp8", 72, "error", "error"),  # 72 % 16 != 0 for FP8 everywhere
        (HOPPER, {"fa3-fwd"}, "bf16", 72, "error", "fa3:fa3-fwd"),  # bf16 only needs a multiple of 8
        (HOPPER, {"fa3-fwd", "sdpa"}, "bf16", 320, "error", "sdpa:sdpa"),  # > 256: not FlashAttention
        (AMPERE, ALL, "bf16", 128, "error", "fa2:vllm-fa2"),
        (AMPERE, {"sdpa-flash", "sdpa"}, "bf16", 128, "error", "fa2:sdpa-flash"),
        (AMPERE, ALL, "fp8", 128, "error", "error"),
        (AMPERE, ALL, "fp8", 128, "dequantize", "fa2:vllm-fa2 (dequantized)"),
        (AMPERE, {"sdpa", "triton"}, "fp8", 128, "dequantize", "sdpa:sdpa (dequantized)"),
        (ADA, {"flash-attn-2", "triton", "sdpa"}, "fp8", 128, "error", "triton:triton"),
        (ADA, {"flash-attn-2", "triton", "sdpa"}, "bf16", 96, "error", "fa2:flash-attn-2"),
        (Device((8, 6)), {"flash-attn-2", "triton", "sdpa"}, "fp8", 128, "error", "error"),  # no FP8 MMA on 8.6
        (BLACKWELL, ALL, "bf16", 128, "error", "fa2:vllm-fa2"),
        (BLACKWELL, ALL, "fp8", 128, "error", "triton:triton"),
        (CPU, ALL, "bf16", 128, "error", "sdpa:sdpa"),
        (CPU, ALL, "fp8", 128, "error", "reference:reference"),
        (CPU, ALL, "fp8", 128, "dequantize", "sdpa:sdpa (dequantized)"),
        (CPU, {"triton"}, "fp8", 128, "error", "error"),  # auto never picks the interpreter
    ],
)
def test_decision_table(device, available, dtype, head_dim, fallback, expected):
    d = decide(device, available, Request(dtype, head_dim, fp8_fallback=fallback), env=NO_ENV)
    assert d.label() == expected, d.explain()
    # every provider passed over before the chosen one has at least one reason
    assert all(reasons for reasons in d.rejected.values())
    if d.ok:
        assert d.provider not in d.rejected


def test_fp8_on_fa2_says_why_and_what_to_do():
    d = decide(AMPERE, ALL, Request("fp8", 128), env=NO_ENV)
    assert not d.ok
    why = " ".join(d.rejected["vllm-fa2"])
    assert "FA2 cannot run FP8" in why and "9.x" in why and "fp8_fallback='dequantize'" in why
    msg = d.error_message("auto")
    assert "vllm-fa2" in msg and "compute capability 8.0" in msg
    # asking for FA2 by name on Hopper gives the same reason
    d2 = decide(HOPPER, ALL, Request("fp8", 128), backend="fa2", env=NO_ENV)
    assert not d2.ok and "FA2 cannot run FP8" in " ".join(d2.rejected["flash-attn-2"])


def test_explicit_fa3_off_hopper_is_rejected_with_the_capability():
    for dev in (AMPERE, ADA, BLACKWELL):
        d = decide(dev, ALL, Request("bf16", 128), backend="fa3", env=NO_ENV)
        assert not d.ok
        assert all("9.x" in r[0] for r in d.rejected.values())
    d = decide(BLACKWELL, ALL, Request("bf16", 128), backend="fa3", env=NO_ENV)
    assert "Blackwell falls back" in d.rejected["vllm"][0]


def test_explicit_provider_and_missing_provider():
    d = decide(HOPPER, {"fa3-fwd", "vllm-so"}, Request("fp8", 128), backend="fa3:fa3-fwd", env=NO_ENV)
    assert d.label() == "fa3:fa3-fwd"
    d = decide(HOPPER, {"vllm-so"}, Request("fp8", 128), backend="fa3:fa3-fwd", env=NO_ENV,
               unavailable_reasons={"fa3-fwd": "fa3_fwd_interface is not installed"})
    assert not d.ok and d.rejected == {"fa3-fwd": ("fa3_fwd_interface is not installed",)}


def test_provider_order_override():
    env = {"FP8LAB_FA3_PROVIDERS": "fa3-fwd, vllm-so"}
    assert gating.provider_order("fa3", env) == ["fa3-fwd", "vllm-so"]
    assert decide(HOPPER, ALL, Request("fp8", 128), env=env).provider == "fa3-fwd"
    with pytest.raises(ValueError, match="unknown fa3 providers"):
        gating.provider_order("fa3", {"FP8LAB_FA3_PROVIDERS": "fa3-fwd,fa4"})


def test_version_override_changes_auto():
    env = {"FP8LAB_FLASH_ATTN_VERSION": "2"}
    assert decide(HOPPER, ALL, Request("bf16", 128), env=env).label() == "fa2:vllm-fa2"
    d = decide(HOPPER, ALL - {"triton", "gluon"}, Request("fp8", 128), env=env)
    assert not d.ok and "FA2 cannot run FP8" in d.rejected["vllm-fa2"][0]
    assert "the FlashAttention version rule chose FA2" in d.rejected["vllm-so"][0]


@pytest.mark.parametrize(
    "provider, dtype, d, dv, fragment",
    [
        ("fa3-fwd", "fp8", 72, 72, "multiple of 16"),
        ("fa3-fwd", "bf16", 68, 68, "multiple of 8"),
        ("fa3-fwd", "bf16", 320, 320, "> 256"),
        ("fa3-fwd", "bf16", 128, 64, "FA3 allows different V dims only"),
        ("flash-attn-2", "bf16", 192, 128, "FA2 needs equal head dims"),
        ("triton", "fp8", 128, 64, "Triton kernel needs head_dim == head_dim_v"),
        ("gluon", "fp8", 192, 192, "Gluon kernel needs head_dim == head_dim_v in (64, 128, 256)"),
        ("sdpa-flash", "bf16", 128, 128, "does not return the logsumexp"),
    ],
)
def test_head_dim_and_lse_reasons(provider, dtype, d, dv, fragment):
    reasons, _ = gating.provider_reasons(PROVIDERS[provider], HOPPER, Request(dtype, d, dv, return_lse=True), NO_ENV)
    assert any(fragment in r for r in reasons), reasons


@pytest.mark.parametrize("d, dv", [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128), (64, 256)])
def test_fa3_accepts_its_head_dims(d, dv):
    dtype = "fp8" if dv <= 256 and d == dv else "bf16"
    reasons, _ = gating.provider_reasons(PROVIDERS["fa3-fwd"], HOPPER, Request(dtype, d, dv), NO_ENV)
    assert reasons == []


def test_gluon_takes_batched_hopper_calls_and_says_why_not():
    ours = {"gluon", "triton"}
    varlen = decide(HOPPER, ours, Request("fp8", 128, varlen=True), backend="triton", env=NO_ENV)
    assert varlen.label() == "triton:triton"
    assert "batched inputs only" in " ".join(varlen.rejected["gluon"])
    assert decide(HOPPER, ours, Request("fp8", 128), backend="triton", env=NO_ENV).label() == "triton:gluon"
    pinned = decide(HOPPER, ours, Request("fp8", 128, varlen=True), backend="triton:gluon", env=NO_ENV)
    assert not pinned.ok and "batched inputs only" in pinned.error_message("triton:gluon")
    for dev in (ADA, BLACKWELL):
        why = " ".join(decide(dev, ours, Request("fp8", 128), backend="triton", env=NO_ENV).rejected["gluon"])
        assert "gluon is written for compute capability 9.x" in why and "FA3" not in why
    cpu = decide(CPU, ours, Request("fp8", 128), backend="triton", env={"TRITON_INTERPRET": "1"})
    assert cpu.label() == "triton:triton" and "needs a CUDA GPU" in cpu.rejected["gluon"][0]
    # a varlen request keeps the other providers' answers: FA3 takes cu_seqlens
    assert decide(HOPPER, ALL, Request("fp8", 128, varlen=True), env=NO_ENV).label() == "fa3:vllm"


def test_triton_on_cpu_needs_the_interpreter():
    r_off, _ = gating.provider_reasons(PROVIDERS["triton"], CPU, Request("fp8", 64), {"TRITON_INTERPRET": "0"})
    r_on, _ = gating.provider_reasons(PROVIDERS["triton"], CPU, Request("fp8", 64), {"TRITON_INTERPRET": "1"})
    assert any("TRITON_INTERPRET=1" in r for r in r_off) and r_on == []
    assert decide(CPU, {"triton"}, Request("fp8", 64), backend="triton", env={"TRITON_INTERPRET": "1"}).ok


def test_triton_fp8_head_dim_16_needs_the_interpreter_on_a_gpu():
    """On a GPU the Triton kernel's FP8 MMAs reduce over >= 32 values (`_check_config`): head_dim 16 does not run
    there, so auto passes it over; the interpreter (and head_dim 32) still take it."""
    small = Request("fp8", 16)
    for dev in (ADA, HOPPER, BLACKWELL):
        reasons, _ = gating.provider_reasons(PROVIDERS["triton"], dev, small, NO_ENV)
        assert any("need head_dim >= 32" in r and "got 16" in r for r in reasons), reasons
        assert decide(dev, {"triton", "sdpa"}, small, env=NO_ENV).label() == "error"
        assert gating.provider_reasons(PROVIDERS["triton"], dev, Request("fp8", 32), NO_ENV)[0] == []
        assert gating.provider_reasons(PROVIDERS["triton"], dev, small, {"TRITON_INTERPRET": "1"})[0] == []
    assert gating.provider_reasons(PROVIDERS["triton"], CPU, small, {"TRITON_INTERPRET": "1"})[0] == []
    assert gating.provider_reasons(PROVIDERS["fa3-fwd"], HOPPER, small, NO_ENV)[0] == []  # FA3 pads 16 up to 64
    assert "FP8 on a GPU: from 32" in {r["provider"]: r for r in gating.capability_rows()}["triton"]["head dims"]


@pytest.mark.parametrize("bad, error", [
    (dict(backend="fa4"), "backend: expected 'auto'"),
    (dict(backend="fa3:sdpa"), "fa3 has providers"),
])
def test_bad_backend_strings(bad, error):
    with pytest.raises(ValueError, match=error):
        decide(HOPPER, ALL, Request("bf16", 128), env=NO_ENV, **bad)


def test_bad_requests():
    with pytest.raises(ValueError, match="dtype"):
        Request("int8", 128)
    with pytest.raises(ValueError, match="fp8_fallback"):
        Request("fp8", 128, fp8_fallback="maybe")
    with pytest.raises(ValueError, match="unknown providers"):
        decide(HOPPER, {"fa4"}, Request("bf16", 128), env=NO_ENV)


def test_architecture_names():
    assert [gating.architecture(c) for c in ((8, 0), (8, 6), (8, 9), (9, 0), (10, 0), None)] == [
        "Ampere", "Ampere", "Ada", "Hopper", "Blackwell", "CPU"]


def test_captured_varlen_calls_go_to_providers_that_read_lengths_on_the_device():
    """Under CUDA-graph capture a varlen call's lengths stay in cu_seqlens on the device: FA3, FA2 and our
    Triton kernel read them there; SDPA and the reference loop over them on the host, and say so."""
    captured = Request("bf16", 128, varlen=True, lengths_on_device=True)
    assert decide(HOPPER, ALL, captured, env=NO_ENV).label() == "fa3:vllm"
    for name in ("sdpa", "sdpa-flash", "sdpa-cudnn", "reference"):
        reasons, _ = gating.provider_reasons(PROVIDERS[name], HOPPER, captured, NO_ENV)
        assert any("reads the varlen sequence lengths on the host" in r for r in reasons), (name, reasons)
        eager, _ = gating.provider_reasons(PROVIDERS[name], HOPPER, Request("bf16", 128, varlen=True), NO_ENV)
        assert not any("on the host" in r for r in eager), (name, eager)
    for name in ("vllm", "vllm-so", "fa3-fwd", "flash-attn-3", "vllm-fa2", "flash-attn-2"):
        assert gating.provider_reasons(PROVIDERS[name], HOPPER, captured, NO_ENV)[0] == [], name
    fp8 = Request("fp8", 128, varlen=True, lengths_on_device=True)
    assert gating.provider_reasons(PROVIDERS["triton"], HOPPER, fp8, NO_ENV)[0] == []
    pinned = decide(HOPPER, ALL, fp8, backend="reference", env=NO_ENV)
    assert not pinned.ok and "CUDA-graph capture" in pinned.error_message("reference")
    # dequantizing FP8 for FA2 needs the lengths on the host too
    deq = Request("fp8", 128, varlen=True, lengths_on_device=True, fp8_fallback="dequantize")
    reasons, dequantize = gating.provider_reasons(PROVIDERS["vllm-fa2"], HOPPER, deq, NO_ENV)
    assert dequantize and any("dequantizing for vllm-fa2" in r for r in reasons)


def test_pv_flush_passes_over_providers_that_keep_o_in_the_fp8_mma():
    """pv_flush=True (v28): upstream FA3 (fa3-fwd, flash-attn-3) sums P V in the FP8 MMA's 13-bit accumulator
    across all key blocks; vLLM's FA3 flushes every block; fp8lab's kernels do when asked."""
    flush = Request("fp8", 128, pv_flush=True)
    assert decide(HOPPER, ALL, flush, env=NO_ENV).label() == "fa3:vllm"  # vLLM flushes: FA3 stays first
    upstream = {"fa3-fwd", "flash-attn-3", "gluon", "triton"}
    d = decide(HOPPER, upstream, flush, env=NO_ENV)
    assert d.label() == "triton:gluon" and decide(HOPPER, upstream, Request("fp8", 128), env=NO_ENV).label() == "fa3:fa3-fwd"
    assert any("upstream FA3" in r for r in d.rejected["fa3-fwd"])
    pinned = decide(HOPPER, upstream, flush, backend="fa3:fa3-fwd", env=NO_ENV)
    assert not pinned.ok and "pv_flush=True asks for each block added in fp32" in pinned.error_message("fa3:fa3-fwd")
    for name, spec in PROVIDERS.items():  # bf16 MMAs sum in fp32: the switch concerns FP8 inputs only
        assert not any("pv_flush" in r for r in gating.provider_reasons(spec, HOPPER, Request("bf16", 128, pv_flush=True),
                                                                         NO_ENV)[0]), name
        assert spec.fp8_pv in gating.FP8_PV_ACCUMULATION and (spec.fp8_pv == "-") == ("fp8" not in spec.dtypes), name
    deq = Request("fp8", 128, fp8_fallback="dequantize", pv_flush=True)  # FA2 on dequantized bf16: fp32 sums
    assert decide(AMPERE, ALL, deq, env=NO_ENV).label() == "fa2:vllm-fa2 (dequantized)"


def test_capability_rows_describe_every_provider():
    rows = {r["provider"]: r for r in gating.capability_rows()}
    assert list(rows) == list(gating.PROVIDERS) and {s.head_dims for s in gating.PROVIDERS.values()} <= set(gating.HEAD_DIM_RULES)
    assert rows["triton"]["FP8 needs"] == ">= 8.9" and "CPU" in rows["triton"]["GPU"]
    assert rows["fa3-fwd"]["GPU"] == "9.x only" and rows["vllm-fa2"]["FP8 needs"] == "-"
    assert (rows["fa3-fwd"]["FP8 P V sum"], rows["vllm-so"]["FP8 P V sum"], rows["gluon"]["FP8 P V sum"]) == (
        "mma", "flush", "option")


def test_flash_attn_version_rows_follow_the_rule():
    machines = {"A100": AMPERE, "H100": HOPPER, "B200": BLACKWELL, "CPU": CPU}
    rows = gating.flash_attn_version_rows(machines, ALL)
    assert [(r["machine"], r["override"]) for r in rows] == [(m, o) for m in machines for o in ("-", "2", "3")]
    table = {(r["machine"], r["override"]): r for r in rows}
    assert {k: r["FA version"] for k, r in table.items() if k[0] in ("A100", "H100", "B200")} == {
        ("A100", "-"): 2, ("A100", "2"): 2, ("A100", "3"): "none",  # forced FA3 off Hopper: no FlashAttention
        ("H100", "-"): 3, ("H100", "2"): 2, ("H100", "3"): 3,
        ("B200", "-"): 2, ("B200", "2"): 2, ("B200", "3"): 2}  # Blackwell falls back from FA3
    assert [k for k, r in table.items() if r["supports FP8"]] == [("H100", "-"), ("H100", "3")]
    assert all(r["FA version"] == "none" and "no CUDA" in r["why"] for k, r in table.items() if k[0] == "CPU")
    assert "Blackwell" in table[("B200", "3")]["why"] and "overrides" in table[("H100", "2")]["why"]
    with pytest.raises(ValueError, match="expected None, 2 or 3"):
        gating.flash_attn_version_rows({"H100": HOPPER}, ALL, overrides=(4,))


def test_bad_requests_and_devices_are_refused() -> None:
    """A head dim that is not a positive int, or a capability that is not a (major, minor) tuple, is named:
    head_dim -8 and 0 used to pick FA3, 128.5 SDPA, "128" and Device(9) crashed in a comparison."""
    import random

    d = random.choice((64, 128, 256))
    assert decide(HOPPER, {"fa3-fwd", "sdpa"}, Request("bf16", d), env=NO_ENV).label() == "fa3:fa3-fwd"
    for bad in (-8, 0, 128.5, "128", True):
        with pytest.raises(ValueError, match="head_dim: expected an int >= 1"):
            Request("bf16", bad)
    with pytest.raises(ValueError, match="head_dim_v: expected an int >= 1"):
        Request("bf16", d, head_dim_v=0)
    for bad in (9, (9,), "9.0", [9, 0], (9, -1), (9.0, 0)):
        with pytest.raises(ValueError, match=r"capability: expected None \(the CPU\) or a \(major, minor\)"):
            Device(bad)
        with pytest.raises(ValueError, match="capability: expected"):
            flash_attn_version(bad, ALL, NO_ENV)
