"""Every notebook runs headless with papermill at smoke sizes, within its budget,
and records its key figures (tests/test_notebook_figures.py asserts on them)."""

import pytest

from fp8lab.notebooks import MANIFEST

pytestmark = pytest.mark.notebooks


@pytest.mark.parametrize("name", [s.name for s in MANIFEST])
def test_notebook_runs(executed_notebooks, name):
    result = executed_notebooks[name]
    assert result.ok, f"{name} failed: {result.error}"


def test_smoke_runs_fit_the_budget(executed_notebooks):
    total = sum(r.seconds for r in executed_notebooks.values())
    assert total < 300, f"all notebooks together must run in under 5 minutes at smoke sizes, took {total:.0f} s"
