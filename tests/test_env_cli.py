"""fp8lab.env and the fp8lab command."""

import json
import os
import subprocess
import sys

import pytest
import torch

from fp8lab import cli, env


def test_context_has_what_a_record_needs():
    ctx = env.context(shape="2x8192x32x128")
    for key in ("date", "torch", "triton", "gpu", "driver", "compute_capability", "fa3_fwd", "device"):
        assert key in ctx
    assert ctx["torch"] == torch.__version__ and ctx["shape"] == "2x8192x32x128"
    assert (ctx["gpu"] is None) == (not torch.cuda.is_available())


def test_capability_matches_torch():
    cap = env.cuda_capability()
    assert cap == (torch.cuda.get_device_capability() if torch.cuda.is_available() else None)


def test_info_json(capsys):
    assert cli.main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["torch"] == torch.__version__


def test_unknown_command(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["fp8lab.cli", "fp8lab"])
def test_entry_point_runs(module):
    out = subprocess.run([sys.executable, "-m", module, "notebooks", "list"], capture_output=True, text=True, check=True)
    assert all(name in out.stdout for name in ("00_quickstart", "08_triton_fp8_attention", "09_gluon_fa3_kernel"))
    bad = subprocess.run([sys.executable, "-m", module, "frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr


@pytest.mark.parametrize("argv", [["notebooks", "run", "55"], ["notebooks", "sync", "--check", "99"],
                                  ["notebooks", "run", "00_quickstart", "nope"]])
def test_unknown_notebook_is_one_line_and_exit_2(argv, capsys):
    """A usage error, not a traceback: nothing runs or is written."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fp8lab notebooks {argv[1]}: unknown notebook {argv[-1]!r}") and "\n" not in err
    assert "00_quickstart" in err  # says what it expected


def test_a_notebook_is_named_by_name_or_number():
    from fp8lab.notebooks import _spec

    assert _spec("5") is _spec("05") is _spec("05_fp8_attention_accuracy") is not _spec("4")


def test_help_lists_every_notebooks_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"fp8lab notebooks {c}" in out for c in ("list", "run", "sync"))


@pytest.mark.parametrize("argv", [["fa3"], ["fa3", "pull"]])
def test_fa3_needs_fetch(argv):
    assert cli.main(argv) == 2


def test_fa3_help_and_a_wrong_subcommand(capsys):
    assert cli.main(["fa3", "--help"]) == 0 and "fp8lab fa3 fetch" in capsys.readouterr().out
    assert cli.main(["fa3", "pull"]) == 2
    assert "expected the subcommand 'fetch', got 'pull'" in capsys.readouterr().err


def test_help_names_every_option(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for option in ("--json", "--verbose", "--simulate", "--providers", "--smoke", "--out", "--no-html", "--kernel",
                   "--check", "--version", "--wheel", "COMMAND --help"):
        assert option in out, option


def test_notebooks_folder_and_out_errors_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """Tracebacks before (--out naming a file, FP8LAB_NOTEBOOKS naming no folder); a silent
    '0 notebook(s) out of date' for a folder without the notebooks."""
    (tmp_path / "file").write_text("")
    assert cli.main(["notebooks", "run", "00", "--out", str(tmp_path / "file")]) == 2
    monkeypatch.setenv("FP8LAB_NOTEBOOKS", str(tmp_path / "nope"))
    assert cli.main(["notebooks", "sync", "--check"]) == 2
    monkeypatch.setenv("FP8LAB_NOTEBOOKS", str(tmp_path))
    assert cli.main(["notebooks", "sync", "--check"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and "got the file" in lines[0]
    assert lines[1].startswith("fp8lab notebooks sync: notebooks folder not found at") and "FP8LAB_NOTEBOOKS=" in lines[1]
    assert lines[2].startswith("fp8lab notebooks sync: no notebook source NN_name.py in")


def test_public_api_resolves_and_import_stays_light():
    code = (
        "import sys, fp8lab\n"
        "assert 'triton' not in sys.modules, 'import fp8lab must not import triton'\n"
        "missing = [n for n in fp8lab.__all__ if not hasattr(fp8lab, n)]\n"
        "assert not missing, missing\n"
        "assert callable(fp8lab.fp8_attention) and fp8lab.kernels.__name__ == 'fp8lab.kernels'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        __import__("fp8lab").nope


def test_the_interpreter_state_is_the_kernels_not_the_variable(monkeypatch):
    """Triton reads TRITON_INTERPRET when a kernel is defined: once fp8lab.kernels is imported, flipping the
    variable changes nothing, so fp8lab reports what the kernels are and says how to get the other mode
    (it used to follow the variable, pass its checks, then fail deep in Triton: "0 active drivers")."""
    import fp8lab.kernels  # noqa: F401 - defines the kernels
    from fp8lab.backends.gating import PROVIDERS, Device, Request, provider_reasons

    interpreted = env.triton_interpret()
    assert env.triton_interpret_note() == ""
    monkeypatch.setenv("TRITON_INTERPRET", "0" if interpreted else "1")
    assert env.triton_interpret() is interpreted
    assert "restart the Python or Jupyter kernel" in env.triton_interpret_note()
    reasons, _ = provider_reasons(PROVIDERS["triton"], Device(None), Request("fp8", 64), os.environ)
    assert (reasons == []) is interpreted
    if not interpreted:
        assert "set now, but fp8lab.kernels were defined without the interpreter" in reasons[0]
    # a simulated machine's env is read as given
    for yes in ("true", "yes", "Y", "on"):  # Triton's spellings of true
        assert provider_reasons(PROVIDERS["triton"], Device(None), Request("fp8", 64), {"TRITON_INTERPRET": yes})[0] == []
