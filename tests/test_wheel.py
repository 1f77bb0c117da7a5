"""The wheel carries every package, module and data file of the source tree, and runs.

Editable installs map the folders (embedder/ -> thatch.embedder, ...) straight onto the
source tree, so a sub-package missing from pyproject's ``packages`` passes every other
test. Here the wheel is built from a clean copy of what the build reads, installed
non-editable into a fresh venv, and compared with the folders themselves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
SKIPPED = ("__pycache__", "*.pyc", ".*")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    bin_dir: Path
    site_packages: Path


def source_files() -> Iterator[tuple[str, Path]]:
    """(path inside the wheel, source file) for every file of every mapped folder."""
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*")):
            relative = path.relative_to(base)
            if path.is_dir() or any(
                PurePosixPath(part).match(pattern) for part in relative.parts for pattern in SKIPPED
            ):
                continue
            yield "/".join([*package.split("."), *relative.parts]), path


def source_packages() -> set[str]:
    """Every package of the source tree: each folder holding an ``__init__.py``."""
    return {
        inside.rsplit("/", 1)[0].replace("/", ".")
        for inside, path in source_files()
        if path.name == "__init__.py"
    }


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel, built offline with this venv's setuptools, installed into a new venv
    that borrows this venv's dependencies (a .pth line) but not its editable thatch."""
    base = tmp_path_factory.mktemp("wheel")
    # A clean copy: an in-tree build would reuse build/lib, whose leftovers could stand
    # in for a package the build no longer includes.
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", PYPROJECT["project"]["readme"]):
        shutil.copy2(ROOT / name, source / name)
    for folder in PACKAGE_DIRS.values():
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns(*SKIPPED))
    dist = base / "dist"
    pip = [sys.executable, "-m", "pip"]
    offline = ["-q", "--no-deps", "--no-index", "--no-cache-dir"]
    run([*pip, "wheel", *offline, "--no-build-isolation", "-w", str(dist), str(source)], base)
    (wheel,) = dist.glob("thatch-*.whl")

    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    python = venv / "bin" / "python"
    run([*pip, "--python", str(python), "install", *offline, str(wheel)], base)
    site_packages = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], base
        ).stdout.strip()
    )
    # Lines of a .pth naming directories only extend sys.path: the .pth files in this
    # venv's site-packages (the editable finder among them) are not run.
    own = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site_packages / "thatch-test-deps.pth").write_text("\n".join(sorted(own)) + "\n")
    return Installed(wheel, python, venv / "bin", site_packages)


def test_wheel_holds_every_package_of_the_source_tree(installed: Installed) -> None:
    """A folder with an __init__.py that pyproject's packages=[...] leaves out fails here."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        in_wheel = {
            name.rsplit("/", 1)[0].replace("/", ".")
            for name in wheel.namelist()
            if name.endswith("/__init__.py")
        }
    expected = source_packages()
    assert {"thatch.embedder.v1", "thatch.frontend.hooks", "thatch.cli"} <= expected
    assert sorted(expected - in_wheel) == []


def test_wheel_holds_every_module_and_data_file(installed: Installed) -> None:
    """Modules, the skills' SKILL.md, the protobuf .pyi stubs and the shipped adapters all
    ship, byte for byte."""
    expected = dict(source_files())
    assert any(name.endswith("/SKILL.md") for name in expected)
    assert any(name.endswith(".pyi") for name in expected)
    assert any(name.endswith("/adapters/all-MiniLM-L6-v2-code.safetensors") for name in expected)
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        assert sorted(set(expected) - names) == []
        for name, path in expected.items():
            assert wheel.read(name) == path.read_bytes(), name


def test_installed_wheel_imports_from_itself_and_runs_thatch_help(installed: Installed) -> None:
    """Every package imports from the installed wheel (not the source tree), and the
    ``thatch`` console script answers --help."""
    packages = sorted(source_packages())
    script = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    print(importlib.import_module(name).__file__)\n"
    )
    cwd = installed.bin_dir  # not the repository: its folders must not be importable
    files = run([str(installed.python), "-c", script, *packages], cwd).stdout.split()
    assert len(files) == len(packages)
    outside = [f for f in files if not Path(f).is_relative_to(installed.site_packages)]
    assert outside == []

    result = run([str(installed.bin_dir / "thatch"), "--help"], cwd)
    assert result.stdout.startswith("Usage: thatch")
    assert "demo" in result.stdout
