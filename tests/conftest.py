"""Shared test set-up: Triton kernels run in the interpreter where there is no GPU,
and GPU-marked tests skip cleanly without CUDA."""

import os

import torch

if not torch.cuda.is_available():
    # Must be set before triton is imported anywhere.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

if "OMP_NUM_THREADS" not in os.environ:
    # Test shapes are tiny; extra threads only add contention on small machines.
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cap = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_hopper = pytest.mark.skip(reason=f"needs compute capability 9.x, got {cap}")
    for item in items:
        if "gpu" in item.keywords and cap is None:
            item.add_marker(skip_gpu)
        elif "hopper" in item.keywords and (cap is None or cap[0] != 9):
            item.add_marker(skip_hopper)


@pytest.fixture(scope="session")
def executed_notebooks(tmp_path_factory):
    """Run every notebook once per session at smoke sizes; {name: NotebookResult}."""
    pytest.importorskip("papermill", reason="the notebooks run through papermill (`./kit` installs it)")
    from fp8lab.notebooks import run_notebooks

    out = tmp_path_factory.mktemp("notebooks")
    return {r.name: r for r in run_notebooks(smoke=True, out_dir=out, html_report=False, progress=False)}
