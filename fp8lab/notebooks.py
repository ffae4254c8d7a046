"""The notebooks: their manifest, a papermill runner with time budgets, an HTML
report, the key figures each notebook records, and the jupytext pairing.

Each notebook is a jupytext py:percent file `notebooks/NN_name.py` (the source
to edit) paired with `notebooks/NN_name.ipynb` (committed without outputs).
A notebook records its key figures with `record(name, value)`; the runner
collects them into `<out>/<notebook>.figures.json`, which tests assert on.

    python -m fp8lab.notebooks run --smoke        # every notebook, CI sizes
    python -m fp8lab.notebooks sync [--check]     # regenerate / check the .ipynb pairs
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "MANIFEST",
    "NotebookSpec",
    "NotebookResult",
    "NotebookError",
    "notebooks_dir",
    "exercise_note",
    "record",
    "recorded",
    "run_notebooks",
    "run_script",
    "sync",
    "unanswered",
    "main",
]

FIGURES_ENV = "FP8LAB_FIGURES"


@dataclass(frozen=True)
class NotebookSpec:
    """One manifest entry. Budgets are wall-clock seconds for the whole notebook."""

    name: str
    title: str
    smoke_budget_s: float = 60.0
    budget_s: float = 1800.0


MANIFEST: tuple[NotebookSpec, ...] = (
    NotebookSpec("00_quickstart", "A ten-minute tour"),
    NotebookSpec("01_fp8_numerics", "FP8 numerics: formats, grids, rounding"),
    NotebookSpec("02_scale_strategies", "Scale strategies", smoke_budget_s=90.0),
    NotebookSpec("03_per_head_scales_and_strides", "Per-head scales, descale strides and GQA"),
    NotebookSpec("04_fa2_fa3_version_gating", "FA2/FA3 version gating"),
    NotebookSpec("05_fp8_attention_accuracy", "How wrong is FP8 attention, and why", smoke_budget_s=90.0),
    NotebookSpec("06_fp8_kv_cache", "The FP8 KV cache, the way vLLM writes and reads it"),
    NotebookSpec("07_performance", "Performance on Hopper"),
    NotebookSpec("08_triton_fp8_attention", "Our Triton FP8 attention kernel", smoke_budget_s=90.0),
    NotebookSpec("09_gluon_fa3_kernel", "FA3's structure, written out: the Gluon kernel", smoke_budget_s=60.0),
)


class NotebookError(RuntimeError):
    """A notebook failed: names the notebook and the cell."""


@dataclass
class NotebookResult:
    name: str
    ok: bool
    seconds: float
    output: str
    html: str | None = None
    error: str | None = None
    figures: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Recording key figures (called from inside notebooks)

_in_memory: dict[str, object] = {}


def _jsonable(value: object) -> object:
    """Tensors, numpy scalars and arrays become plain Python; non-finite floats become strings."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"record(): expected a JSON-serializable value, got {type(value).__name__}")


def record(name: str, value: object) -> object:
    """Record a notebook's key figure `name` (JSON-serializable, tensors allowed) and return it.

    Under the runner the figure is written to the file named by $FP8LAB_FIGURES;
    interactively it is kept in memory (see `recorded()`).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"record(): expected a non-empty figure name, got {name!r}")
    clean = _jsonable(value)
    _in_memory[name] = clean
    path = os.environ.get(FIGURES_ENV)
    if path:
        p = Path(path)
        figures = json.loads(p.read_text()) if p.exists() else {}
        figures[name] = clean
        p.write_text(json.dumps(figures, indent=1, sort_keys=True))
    return value


def unanswered(namespace: dict, *numbers: int) -> list[int]:
    """The exercises among `numbers` whose `answer_<k>` is still None in `namespace`: a solution
    cell calls it first, before it fills those in, so the check can say whose answers it checked."""
    return [k for k in numbers if namespace.get(f"answer_{k}") is None]


def exercise_note(filled: list[int]) -> str:
    """What a check cell adds after its verdicts: which answers were the solution cell's, not yours."""
    if not filled:
        return "(your answers)"
    names = ", ".join(f"answer_{k}" for k in filled)
    return (f"(exercise{'s' if len(filled) > 1 else ''} {', '.join(map(str, filled))}: the solution cell's "
            f"answer{'s' if len(filled) > 1 else ''}, not yours; set {names} and rerun to check your own)")


def recorded() -> dict[str, object]:
    """Figures recorded in this process so far."""
    return dict(_in_memory)


# ---------------------------------------------------------------------------
# Locating and pairing notebooks


def notebooks_dir() -> Path:
    """The notebooks folder: $FP8LAB_NOTEBOOKS, else `notebooks/` beside the package."""
    env = os.environ.get("FP8LAB_NOTEBOOKS")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "notebooks"
    if not path.is_dir():
        if env:
            raise FileNotFoundError(f"notebooks folder not found at {path} (FP8LAB_NOTEBOOKS={env}): expected a "
                                    "folder holding the NN_name.py/.ipynb notebooks; unset it to use the clone's")
        raise FileNotFoundError(
            f"notebooks folder not found at {path}; run from a clone of fp8lab or set FP8LAB_NOTEBOOKS"
        )
    return path


def _spec(name: str) -> NotebookSpec:
    if not isinstance(name, str):
        raise TypeError(f"expected a notebook name or number as a string, like '05', got {name!r} "
                        f"({type(name).__name__})")
    for spec in MANIFEST:
        number = spec.name.split("_", 1)[0]
        if name in (spec.name, number) or (name.isdecimal() and int(name) == int(number)):  # "5" is 05
            return spec
    known = ", ".join(s.name for s in MANIFEST)
    raise ValueError(f"unknown notebook {name!r}; expected one of: {known} (or its number)")


HIDE_INPUT = "hide-input"  # the tag of solution cells: collapsed in JupyterLab, left out of the HTML report


def _specs(names: list[str] | None) -> list[NotebookSpec]:
    """The manifest entries of `names` (all of them for None or []); a bare string is refused, not
    read letter by letter ("05" would be notebooks 00 and 05)."""
    if isinstance(names, str):
        raise TypeError(f"names: expected a list of notebook names or numbers, got the string {names!r}; "
                        f"pass [{names!r}]")
    return [_spec(n) for n in names] if names else list(MANIFEST)


def _paired_notebook(py_path: Path):
    import jupytext

    nb = jupytext.read(py_path)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.pop("jupytext", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            if HIDE_INPUT in cell.metadata.get("tags", ()):  # solutions open collapsed in JupyterLab
                cell.metadata["jupyter"] = {"source_hidden": True}
        cell["id"] = f"cell-{i:02d}"  # stable ids keep diffs of the pair quiet
    return nb


def _cells_signature(nb) -> list[tuple[str, str, tuple[str, ...], bool]]:
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", ())),
             bool(c.metadata.get("jupyter", {}).get("source_hidden"))) for c in nb.cells]


def sync(check: bool = False, directory: Path | None = None, names: list[str] | None = None) -> list[str]:
    """Write each `NN_name.py`'s paired `.ipynb` (no outputs), or only those of `names`;
    with `check`, only return the names whose pair is missing or out of date."""
    import nbformat

    wanted = {spec.name for spec in _specs(names)} if names else None
    directory = Path(directory) if directory else notebooks_dir()
    sources = sorted(directory.glob("[0-9][0-9]_*.py"))
    missing = (wanted or set()) - {py.stem for py in sources}
    if missing or not sources:  # else nothing is written or checked, and the answer reads "all in sync"
        what = ", ".join(f"{m}.py" for m in sorted(missing)) or "NN_name.py"
        raise FileNotFoundError(f"no notebook source {what} in {directory}")
    stale = []
    for py in sources:
        if wanted is not None and py.stem not in wanted:
            continue
        target = py.with_suffix(".ipynb")
        nb = _paired_notebook(py)
        if target.exists() and _cells_signature(nbformat.read(target, as_version=4)) == _cells_signature(nb):
            continue
        stale.append(py.stem)
        if not check:
            nbformat.write(nb, target)
    return stale


# ---------------------------------------------------------------------------
# Running


def _default_kernel() -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    return "fp8lab" if "fp8lab" in KernelSpecManager().find_kernel_specs() else "python3"


def _failed_cell(exc: Exception, output_nb: Path) -> str:
    """'cell N (first line of its source): ErrorName: message' for a papermill failure.

    N counts the notebook's own cells (papermill's injected-parameters cell excluded).
    """
    import nbformat

    what = f"{getattr(exc, 'ename', type(exc).__name__)}: {getattr(exc, 'evalue', exc)}"
    if not output_nb.exists():
        return what
    cells = [c for c in nbformat.read(output_nb, as_version=4).cells
             if not {"injected-parameters", "papermill-error-cell-tag"} & set(c.metadata.get("tags", []))]
    for index, cell in enumerate(cells):
        if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            return f"cell {index} ({first[:80]}): {what}"
    return f"a cell: {what}"


def _to_html(executed: Path) -> Path:
    import nbformat
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    config = Config()  # the report shows what a solution cell prints, not the solution itself
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_input_tags = (HIDE_INPUT,)
    body, _ = HTMLExporter(config=config).from_notebook_node(nbformat.read(executed, as_version=4))
    target = executed.with_suffix(".html")
    target.write_text(body)
    return target


def _write_index(out_dir: Path, results: list[NotebookResult], smoke: bool) -> Path:
    from fp8lab.env import context

    ctx = context()
    rows = []
    for r in results:
        link = f'<a href="{Path(r.html).name}">{html.escape(r.name)}</a>' if r.html else html.escape(r.name)
        status = "ok" if r.ok else f"FAILED: {html.escape(r.error or '')}"
        figs = f'<a href="{r.name}.figures.json">{len(r.figures)}</a>'
        rows.append(f"<tr><td>{link}</td><td>{status}</td><td>{r.seconds:.1f}</td><td>{figs}</td></tr>")
    ctx_rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in ctx.items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>fp8lab report</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.3em .8em;border-bottom:1px solid #ddd}}</style>
</head><body><h1>fp8lab notebook report{' (smoke sizes)' if smoke else ''}</h1>
<table><tr><th>notebook</th><th>status</th><th>seconds</th><th>figures</th></tr>{''.join(rows)}</table>
<h2>Environment</h2><table>{ctx_rows}</table></body></html>"""
    index = out_dir / "index.html"
    index.write_text(page)
    return index


def run_notebooks(
    names: list[str] | None = None,
    *,
    smoke: bool = False,
    out_dir: str | Path = "build/notebooks",
    html_report: bool = True,
    kernel: str | None = None,
    progress: bool = True,
) -> list[NotebookResult]:
    """Execute notebooks headless with papermill into `out_dir`.

    Injects `smoke` into each notebook's `parameters` cell, enforces each
    notebook's time budget, collects recorded figures, renders HTML and an
    index page. Without CUDA, Triton kernels run in the interpreter
    (TRITON_INTERPRET=1). Returns one result per notebook; never raises for a
    failing notebook (see `NotebookResult.error`).
    """
    specs = _specs(names)  # bad input is refused before the heavy imports
    src = notebooks_dir()
    missing = [f"{spec.name}.ipynb" for spec in specs if not (src / f"{spec.name}.ipynb").is_file()]
    if missing:
        raise FileNotFoundError(f"no notebook {', '.join(missing)} in {src}")
    if kernel is not None:
        from jupyter_client.kernelspec import KernelSpecManager

        known = sorted(KernelSpecManager().find_kernel_specs())
        if kernel not in known:
            raise ValueError(f"kernel: expected an installed Jupyter kernel, one of {known}, got {kernel!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"out_dir: expected a folder for the executed notebooks, got the file {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise type(e)(f"out_dir: cannot create the folder {out}: {e.strerror or e}") from e
    kernel = kernel or _default_kernel()
    import papermill
    import torch
    from tqdm.auto import tqdm

    env_before = {k: os.environ.get(k) for k in (FIGURES_ENV, "TRITON_INTERPRET", "OMP_NUM_THREADS")}
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    if smoke:
        # Smoke sizes are tiny: one thread avoids torch's thread start-up and contention on small CPUs.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    results = []
    try:
        for spec in tqdm(specs, desc="notebooks", disable=not progress):
            budget = spec.smoke_budget_s if smoke else spec.budget_s
            executed = out / f"{spec.name}.ipynb"
            figures_path = out / f"{spec.name}.figures.json"
            figures_path.unlink(missing_ok=True)
            os.environ[FIGURES_ENV] = str(figures_path.resolve())
            start = time.perf_counter()
            error = None
            try:
                papermill.execute_notebook(
                    str(src / f"{spec.name}.ipynb"),
                    str(executed),
                    parameters={"smoke": smoke},
                    kernel_name=kernel,
                    execution_timeout=int(budget),
                    progress_bar=False,
                    cwd=str(src),
                )
            except Exception as exc:  # papermill re-raises the notebook's own error
                error = _failed_cell(exc, executed)
            seconds = time.perf_counter() - start
            if error is None and seconds > budget:
                error = f"over its time budget: {seconds:.0f} s > {budget:.0f} s"
            figures = json.loads(figures_path.read_text()) if figures_path.exists() else {}
            result = NotebookResult(spec.name, error is None, seconds, str(executed), None, error, figures)
            if html_report and executed.exists():
                result.html = str(_to_html(executed))
            results.append(result)
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    (out / "summary.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    if html_report:
        _write_index(out, results, smoke)
    return results


def _assigned_names(code: str) -> set[str]:
    """The names a cell assigns at its top level (`x = ...`, `x: int = ...`)."""
    import ast

    names = set()
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def run_script(name: str, **parameters: object) -> dict[str, object]:
    """Run a notebook's py:percent source as a plain script, without Jupyter.

    Code cells run in order in one namespace; `parameters` override the
    `parameters` cell, as papermill would. For machines with torch but no
    Jupyter stack (a bare GPU host). Returns the notebook's namespace.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # as run_notebooks; before triton's first import

    source = (notebooks_dir() / f"{_spec(name).name}.py").read_text()
    cells = source.split("\n# %%")
    if parameters:  # papermill only warns of a misspelt name; a script would then run at the wrong size
        known = {target for cell in cells if "parameters" in cell.partition("\n")[0]
                 for target in _assigned_names(cell.partition("\n")[2])}
        if unknown := sorted(set(parameters) - known):
            raise ValueError(f"run_script({name!r}): expected parameters of its parameters cell, "
                             f"{sorted(known)}, got unknown {unknown}")
    namespace: dict[str, object] = {"__name__": "__main__", "display": print}
    for i, cell in enumerate(cells):
        header, _, body = cell.partition("\n")
        if "[markdown]" in header:
            continue
        try:
            exec(compile(body, f"{name}:cell{i}", "exec"), namespace)
        except Exception as exc:
            first = body.strip().splitlines()[0] if body.strip() else ""
            raise NotebookError(f"{name}: cell {i} ({first[:80]}): {type(exc).__name__}: {exc}") from exc
        finally:
            plt.close("all")  # as Jupyter's inline backend does after each cell
        if "parameters" in header:
            namespace.update(parameters)
    return namespace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fp8lab notebooks", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute notebooks headless into an HTML report")
    run.add_argument("names", nargs="*", help="notebook names or numbers (default: all)")
    run.add_argument("--smoke", action="store_true", help="small CI sizes")
    run.add_argument("--out", default="build/notebooks", help="output folder (default: build/notebooks)")
    run.add_argument("--no-html", action="store_true", help="skip the HTML report")
    run.add_argument("--kernel", default=None, help="Jupyter kernel (default: fp8lab if installed, else python3)")
    s = sub.add_parser("sync", help="regenerate each .ipynb from its jupytext .py pair")
    s.add_argument("names", nargs="*", help="notebook names or numbers (default: all)")
    s.add_argument("--check", action="store_true", help="only report stale pairs; exit 1 if any")
    sub.add_parser("list", help="the manifest")
    args = parser.parse_args(argv)
    if args.command == "list":
        for spec in MANIFEST:
            print(f"{spec.name:36s} {spec.title}")
        return 0
    try:  # a usage error (a name, a folder, a kernel) is one line, no traceback; failing notebooks are reported below
        if args.command == "sync":
            stale = sync(check=args.check, names=args.names or None)
        else:
            results = run_notebooks(args.names or None, smoke=args.smoke, out_dir=args.out,
                                    html_report=not args.no_html, kernel=args.kernel)
    except (ValueError, OSError) as e:
        print(f"fp8lab notebooks {args.command}: {e}", file=sys.stderr)
        return 2
    if args.command == "sync":
        verb = "out of date" if args.check else "written"
        print(f"{len(stale)} notebook(s) {verb}" + (": " + ", ".join(stale) if stale else ""))
        return 1 if (args.check and stale) else 0
    for r in results:
        print(f"{'ok    ' if r.ok else 'FAILED'} {r.name:36s} {r.seconds:6.1f} s" + (f"  {r.error}" if r.error else ""))
    if not args.no_html:
        print(f"report: {(Path(args.out) / 'index.html').resolve()}")
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
