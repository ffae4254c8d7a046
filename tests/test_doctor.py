"""`fp8lab doctor` and `fp8lab fa3 fetch`, through their main() functions, without network."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from fp8lab.backends import doctor, fetch, gating, providers


def run_json(capsys, argv: list[str]) -> dict:
    assert doctor.main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_doctor_json_has_every_section(capsys):
    rep = run_json(capsys, [])
    assert set(rep) >= {"environment", "device", "providers", "flash_attn_version", "decisions", "vllm_fa3_library"}
    assert [p["name"] for p in rep["providers"]] == list(gating.PROVIDERS)
    assert all(isinstance(p["found"], bool) and p["detail"] for p in rep["providers"])
    assert len(rep["decisions"]) == len(doctor.HEAD_DIMS) * 2
    assert {(r["dtype"], r["head_dim"]) for r in rep["decisions"]} == {
        (d, h) for d in ("bf16", "fp8") for h in doctor.HEAD_DIMS}
    # the table agrees with what attention() would decide on this machine
    found = {p["name"] for p in rep["providers"] if p["found"]}
    assert found == providers.available_providers()


def test_doctor_text(capsys):
    assert doctor.main([]) == 0
    text = capsys.readouterr().out
    for heading in ("== environment", "== device", "== providers", "== decision table", "FlashAttention version"):
        assert heading in text
    assert "sdpa" in text and "reference" in text


def test_doctor_simulated_hopper(capsys):
    rep = run_json(capsys, ["--simulate", "9.0", "--providers", "fa3-fwd,sdpa,triton"])
    assert rep["device"] == {"name": "simulated sm_90", "capability": [9, 0], "architecture": "Hopper", "simulated": True}
    assert rep["flash_attn_version"]["version"] == 3 and rep["flash_attn_version"]["supports_fp8"]
    table = {(r["dtype"], r["head_dim"]): r for r in rep["decisions"]}
    assert table[("bf16", 128)]["choice"] == "fa3:fa3-fwd"
    assert table[("fp8", 256)]["choice"] == "fa3:fa3-fwd"
    assert table[("fp8", 72)]["choice"] == "error"  # multiple of 16 for FP8, FA3 and Triton alike
    assert any("multiple of 16" in r for r in table[("fp8", 72)]["rejected"]["fa3-fwd"])
    assert table[("bf16", 320)]["choice"] == "sdpa:sdpa"


def test_doctor_simulated_without_providers_says_whose_probes_it_used(capsys):
    rep = run_json(capsys, ["--simulate", "9.0"])
    assert rep["notes"] and "this machine's probes" in rep["notes"][0]
    assert run_json(capsys, ["--simulate", "9.0", "--providers", "sdpa"])["notes"] == []
    assert doctor.main([]) == 0 and "== environment (this machine)" in capsys.readouterr().out


def test_doctor_simulated_ampere_explains_fp8(capsys):
    assert doctor.main(["--simulate", "8.0", "--providers", "vllm-fa2,sdpa"]) == 0
    text = capsys.readouterr().out
    assert "FA2 cannot run FP8" in text and "fp8_fallback='dequantize'" in text


@pytest.mark.parametrize("argv", [["--simulate", "hopper"], ["--providers", "fa4"]])
def test_doctor_bad_arguments(capsys, argv):
    assert doctor.main(argv) == 2
    assert "fp8lab doctor:" in capsys.readouterr().err


@pytest.mark.parametrize("names", ["", "sdpa,", "sdpa,,triton"])
def test_doctor_providers_must_name_providers(capsys, names):
    """--providers '' used to decide with this machine's probes, as if it were not given."""
    assert doctor.main(["--providers", names]) == 2
    assert f"expected provider names separated by commas, like fa3-fwd,sdpa, got {names!r}" in capsys.readouterr().err


def test_doctor_providers_may_have_spaces(capsys):
    rep = run_json(capsys, ["--simulate", "9.0", "--providers", "fa3-fwd, sdpa"])
    assert {p["name"] for p in rep["providers"] if p["found"]} == {"fa3-fwd", "sdpa"}


# ----------------------------------------------------------------------------- fetch

@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(fetch.LIB_ENV, raising=False)
    return tmp_path / "cache"


def fake_wheel(path: Path, version: str, payload: bytes | None) -> Path:
    """A tiny zip named like a vllm wheel, holding a fake FA3 library (or none)."""
    wheel = path / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm/__init__.py", "")
        if payload is not None:
            z.writestr(fetch.MEMBER, payload)
    return wheel


def test_cache_dir_respects_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("FP8LAB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fetch.cache_dir() == tmp_path / "fp8lab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert fetch.cache_dir() == Path.home() / ".cache" / "fp8lab"


def test_fetch_from_a_local_wheel_records_the_checksum(cache, tmp_path, capsys):
    payload = os.urandom(3000)
    wheel = fake_wheel(tmp_path, "0.0.1", payload)
    assert fetch.main(["--wheel", str(wheel)]) == 0
    assert "NOT in fp8lab's known-good table" in capsys.readouterr().out
    (entry,) = fetch.read_manifest()["libraries"]
    assert entry["sha256"] == hashlib.sha256(payload).hexdigest() and entry["size"] == 3000
    assert entry["vllm_version"] == "0.0.1" and not entry["known_good"]
    assert Path(entry["path"]).read_bytes() == payload
    path, detail = fetch.resolve_library()
    assert path == Path(entry["path"]) and "0.0.1" in detail
    assert not list(Path(entry["path"]).parent.glob("*.part"))


def test_a_changed_library_is_refused(cache, tmp_path):
    wheel = fake_wheel(tmp_path, "0.0.1", b"original")
    assert fetch.main(["--wheel", str(wheel)]) == 0
    path, _ = fetch.resolve_library()
    path.write_bytes(b"tampered")
    again, why = fetch.resolve_library()
    assert again is None and "refusing to load it" in why


def test_known_version_with_wrong_bytes_is_not_cached(cache, tmp_path, capsys):
    wheel = fake_wheel(tmp_path, "0.33.0", b"not the real library")
    assert fetch.main(["--wheel", str(wheel)]) == 1
    assert "known-good sha256" in capsys.readouterr().err
    assert fetch.read_manifest()["libraries"] == []
    assert not list(cache.rglob("*.so")) and not list(cache.rglob("*.part"))


def test_wheel_without_the_library(cache, tmp_path, capsys):
    assert fetch.main(["--wheel", str(fake_wheel(tmp_path, "0.0.2", None))]) == 1
    assert "has no vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" in capsys.readouterr().err


def test_version_mismatch_and_missing_wheel(cache, tmp_path, capsys):
    wheel = fake_wheel(tmp_path, "0.0.1", b"x")
    assert fetch.main(["--wheel", str(wheel), "--version", "0.33.0"]) == 1
    assert fetch.main(["--wheel", str(tmp_path / "nope.whl")]) == 1
    err = capsys.readouterr().err
    assert "is vllm 0.0.1" in err and "no such file" in err


def test_wheel_that_is_a_folder(cache, tmp_path, capsys):
    assert fetch.main(["--wheel", str(tmp_path)]) == 1
    assert "expected a vllm wheel file, got a folder" in capsys.readouterr().err


def test_a_manifest_entry_that_is_not_an_object_is_refused(cache):
    """It crashed `fp8lab doctor` with an AttributeError."""
    fetch.manifest_path().parent.mkdir(parents=True)
    fetch.manifest_path().write_text('{"format": 1, "libraries": [5]}')
    path, why = fetch.resolve_library()
    assert path is None and "expected a 'libraries' list of objects" in why


def test_download_bounds_how_long_pip_waits_for_the_network(cache, monkeypatch, capsys):
    """Without a timeout of its own pip retried 5 times at $PIP_DEFAULT_TIMEOUT each: over a stalled
    network, minutes. A --pip-arg comes after fp8lab's bounds, so the user's own wins."""
    calls = []
    monkeypatch.setattr(fetch.subprocess, "run", lambda cmd: calls.append(cmd) or SimpleNamespace(returncode=1))
    assert fetch.main(["--pip-arg=--timeout=60"]) == 1
    (cmd,) = calls
    assert cmd[cmd.index("--timeout") + 1] == "15" and cmd[cmd.index("--retries") + 1] == "2"
    assert cmd.index("--timeout") < cmd.index("--timeout=60")
    assert "pip download failed (exit 1; no network" in capsys.readouterr().err


def test_env_path_must_match_a_recorded_checksum(cache, tmp_path):
    stray = tmp_path / "_vllm_fa3_C.abi3.so"
    stray.write_bytes(b"some other build")
    os.environ[fetch.LIB_ENV] = str(stray)
    try:
        path, why = fetch.resolve_library()
        assert path is None and "matches neither" in why
        assert fetch.main(["--wheel", str(fake_wheel(tmp_path, "0.0.3", b"some other build"))]) == 0
        path, why = fetch.resolve_library()
        assert path == stray and "manifest entry for vllm 0.0.3" in why
    finally:
        del os.environ[fetch.LIB_ENV]


def test_no_library_says_how_to_get_one(cache):
    path, why = fetch.resolve_library()
    assert path is None and "fp8lab fa3 fetch" in why and fetch.LIB_ENV in why


REAL_SO = Path("/tmp/vllm_extract/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so")


@pytest.mark.skipif(not REAL_SO.exists(), reason="vllm 0.33.0's extracted FA3 library is not on this machine")
def test_known_good_table_matches_the_real_file():
    assert fetch.sha256_file(REAL_SO) == fetch.KNOWN_GOOD["0.33.0"]["sha256"]
    assert REAL_SO.stat().st_size == fetch.KNOWN_GOOD["0.33.0"]["size"]
