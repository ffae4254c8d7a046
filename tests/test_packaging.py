"""The environment descriptions agree: pyproject ranges, the exact pins, environment.yml, CI."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements/lock-py311.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            pins[req.name.lower().replace("_", "-")] = spec.version
    return pins


def test_lock_satisfies_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["notebooks"] + ["pytest>=8.0"]
    pins = _lock()
    for text in reqs:
        req = Requirement(text)
        name = req.name.lower()
        assert name in pins, f"{name} is a dependency in pyproject.toml but has no pin in the lock"
        assert req.specifier.contains(pins[name], prereleases=True), f"lock pins {name}=={pins[name]}, outside {req.specifier}"


def test_lock_pins_cpu_torch_and_kit_in_agrees():
    pins = _lock()
    assert pins["torch"] == "2.13.0"
    for line in (ROOT / "requirements/kit.in").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            assert req.name.lower() in pins, f"{req.name} from kit.in is missing from the lock"
            assert req.specifier.contains(pins[req.name.lower()]), f"{req.name}: lock and kit.in disagree"


def test_environment_yml_uses_the_lock():
    env = (ROOT / "environment.yml").read_text()
    assert re.search(r"python=3\.11\b", env)
    assert "-r requirements/lock-py311.txt" in env and "-e ." in env


def test_ci_calls_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "./kit test" in readme and "./kit run" in readme
    assert "./kit test" in (ROOT / ".ci/run").read_text()
