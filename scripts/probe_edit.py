"""A module's source with text edits, loaded as a new module: how the probes time kernel variants
without keeping them in the package (each edit must match exactly once, so a probe fails loudly
when the kernel's text has moved on)."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType


def edited_copy(module: ModuleType, edits: list[tuple[str, str]], name: str) -> ModuleType:
    """`module`'s source with each (old, new) applied, imported as `name` (a valid identifier)."""
    src = Path(module.__file__).read_text()
    for old, new in edits:
        assert src.count(old) == 1, (name, old)  # the kernel's text changed: update the probe's edits
        src = src.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod
