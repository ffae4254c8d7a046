"""Notebook hygiene (manifest, parameters cell, no outputs, jupytext pairs) and record()."""

import json
import math

import pytest

from fp8lab import notebooks
from fp8lab.notebooks import MANIFEST, notebooks_dir, record, recorded

nbformat = pytest.importorskip("nbformat", reason="the notebook tools (`./kit` installs them)")

NB_DIR = notebooks_dir()
FILES = sorted(p.stem for p in NB_DIR.glob("*.ipynb"))


def test_manifest_and_files_match():
    names = [s.name for s in MANIFEST]
    assert len(set(names)) == len(names)
    assert sorted(names) == FILES, "every notebook must be in the manifest and every manifest entry must exist"


@pytest.mark.parametrize("name", FILES)
def test_notebook_is_clean_and_parametrized(name):
    nb = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{name}: cells {dirty} carry outputs or execution counts; commit notebooks clean"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{name}: expected exactly one cell tagged 'parameters', got {len(params)}"
    assert "smoke" in params[0].source, f"{name}: the parameters cell must define `smoke`"
    assert nb.cells[0].cell_type == "markdown", f"{name}: should open with what the reader will learn"


def test_readme_lists_every_notebook():
    readme = (NB_DIR.parent / "README.md").read_text()
    listed = [line.split("`")[1] for line in readme.splitlines() if line.startswith("| `") and
              line.split("`")[1][:2].isdigit()]
    assert listed == [s.name for s in MANIFEST], "README.md's notebook table should list the manifest, in order"


def test_jupytext_pairs_are_in_sync():
    assert notebooks.sync(check=True) == [], "run `python -m fp8lab.notebooks sync` after editing a notebook's .py"
    assert sorted(p.stem for p in NB_DIR.glob("[0-9][0-9]_*.py")) == FILES


def test_solutions_open_collapsed_and_stay_out_of_the_report(tmp_path):
    """Cells tagged hide-input are collapsed in JupyterLab (source_hidden) and the HTML report
    leaves their source out, keeping what they print."""
    pytest.importorskip("nbconvert", reason="the notebook tools (`./kit` installs them)")
    nb = nbformat.read(NB_DIR / "08_triton_fp8_attention.ipynb", as_version=4)
    solutions = [c for c in nb.cells if notebooks.HIDE_INPUT in c.metadata.get("tags", [])]
    assert solutions and all(c.metadata["jupyter"]["source_hidden"] for c in solutions)
    cell = nbformat.v4.new_code_cell("secret_answer = 42\nprint('shown')", metadata={"tags": ["hide-input"]})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="shown\n")]
    executed = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("visible = 1"), cell]), executed)
    html = notebooks._to_html(executed).read_text()
    assert "visible" in html and "shown" in html and "secret_answer" not in html


def test_checks_say_whose_answers_they_checked():
    namespace = {"answer_1": None, "answer_2": 0.5, "answer_3": None}
    filled = notebooks.unanswered(namespace, 1, 2, 3)
    assert filled == [1, 3]
    assert "exercises 1, 3: the solution cell's answers, not yours; set answer_1, answer_3" in \
        notebooks.exercise_note(filled)
    assert notebooks.exercise_note(notebooks.unanswered(namespace, 2)) == "(your answers)"


def test_record_writes_figures(tmp_path, monkeypatch):
    path = tmp_path / "figs.json"
    monkeypatch.setenv(notebooks.FIGURES_ENV, str(path))
    import torch

    assert record("rmse", torch.tensor(0.25)) is not None
    record("table", {"a": [1, 2.5], "inf": math.inf})
    data = json.loads(path.read_text())
    assert data == {"rmse": 0.25, "table": {"a": [1, 2.5], "inf": "inf"}}
    assert recorded()["rmse"] == 0.25


def test_record_rejects_bad_input():
    with pytest.raises(ValueError, match="figure name"):
        record("", 1)
    with pytest.raises(TypeError, match="JSON-serializable"):
        record("obj", object())


def test_unknown_notebook_name():
    with pytest.raises(ValueError, match="unknown notebook 'nope'"):
        notebooks.run_notebooks(["nope"], smoke=True)


def test_runner_names_the_failing_cell(tmp_path, monkeypatch):
    """A failing notebook is reported with its name, the cell and the error, and the run goes on."""
    import shutil

    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    source = NB_DIR / "00_quickstart.ipynb"
    nb = nbformat.read(source, as_version=4)
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells = nb.cells[: params + 1] + [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("raise KeyError('boom')")]
    nbformat.write(nb, nb_dir / "00_quickstart.ipynb")
    shutil.copy(NB_DIR / "06_fp8_kv_cache.ipynb", nb_dir)
    monkeypatch.setenv("FP8LAB_NOTEBOOKS", str(nb_dir))
    (result,) = notebooks.run_notebooks(["00"], smoke=True, out_dir=tmp_path / "out", progress=False)
    assert not result.ok
    assert result.error.startswith(f"cell {params + 2} (raise KeyError('boom')): KeyError")
    assert (tmp_path / "out" / "index.html").exists() and (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize("name", FILES)
def test_papermill_parses_every_parameter(name):
    """Each assignment in the parameters cell is a parameter papermill can inject (and `--help` can list)."""
    import re

    import papermill

    nb = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assigned = [m.group(1) for m in re.finditer(r"^(\w+)\s*(?::[^=]+)?=", cell.source, re.M)]
    assert list(papermill.inspect_notebook(str(NB_DIR / f"{name}.ipynb"))) == assigned
