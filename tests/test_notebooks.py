"""Notebook hygiene (manifest, parameters cell, no outputs, jupytext pairs) and record()."""

import json
import math
import os

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


def test_names_are_a_list_of_strings():
    """A bare string is refused, not read letter by letter ("05" would be notebooks 00 and 05)."""
    with pytest.raises(TypeError, match=r"got the string '05'; pass \['05'\]"):
        notebooks.sync(check=True, names="05")
    with pytest.raises(TypeError, match="got the string '05'"):
        notebooks.run_notebooks("05", smoke=True)
    with pytest.raises(TypeError, match=r"like '05', got 5 \(int\)"):
        notebooks.run_script(5)
    with pytest.raises(ValueError, match="unknown notebook '²'"):  # a digit that int() does not read
        notebooks.sync(check=True, names=["²"])


def test_a_folder_without_the_notebooks_is_refused(tmp_path, monkeypatch):
    """`sync --check` on a folder without the sources said '0 notebook(s) out of date'; the runner
    reported a missing notebook as a failing cell."""
    with pytest.raises(FileNotFoundError, match="no notebook source NN_name.py in"):
        notebooks.sync(check=True, directory=tmp_path)
    (tmp_path / "00_quickstart.py").write_text((NB_DIR / "00_quickstart.py").read_text())
    with pytest.raises(FileNotFoundError, match="no notebook source 05_fp8_attention_accuracy.py in"):
        notebooks.sync(check=True, directory=tmp_path, names=["00", "5"])
    assert notebooks.sync(check=True, directory=tmp_path, names=["00"]) == ["00_quickstart"]  # no .ipynb yet
    monkeypatch.setenv("FP8LAB_NOTEBOOKS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no notebook 00_quickstart.ipynb in"):
        notebooks.run_notebooks(["00"], smoke=True, out_dir=tmp_path / "out")
    monkeypatch.setenv("FP8LAB_NOTEBOOKS", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match=r"\(FP8LAB_NOTEBOOKS=.*nope\): expected a folder"):
        notebooks.notebooks_dir()


def test_run_refuses_a_bad_out_dir_or_kernel(tmp_path):
    """Before anything runs: the file named as --out crashed in mkdir, an unknown kernel failed every notebook."""
    pytest.importorskip("jupyter_client", reason="the notebook tools (`./kit` installs them)")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="out_dir: expected a folder .* got the file"):
        notebooks.run_notebooks(["00"], smoke=True, out_dir=tmp_path / "file")
    with pytest.raises(ValueError, match="kernel: expected an installed Jupyter kernel, one of .* got 'nope'"):
        notebooks.run_notebooks(["00"], smoke=True, out_dir=tmp_path / "out", kernel="nope")
    assert not (tmp_path / "out").exists()


def test_run_script_refuses_an_unknown_parameter(tmp_path, monkeypatch):
    """papermill only warns of a misspelt parameter; run_script ignored it and ran at the default size."""
    source = '# %%\nimport os\n\n# %% tags=["parameters"]\nsmoke: bool = False\nn = 3\n\n# %%\nresult = n * 2\n'
    (tmp_path / "00_quickstart.py").write_text(source)
    monkeypatch.setenv("FP8LAB_NOTEBOOKS", str(tmp_path))
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))  # run_script may set it
    assert notebooks.run_script("00", smoke=True, n=4)["result"] == 8
    with pytest.raises(ValueError, match=r"parameters cell, \['n', 'smoke'\], got unknown \['smok'\]"):
        notebooks.run_script("00", smok=True)


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
