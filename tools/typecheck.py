"""Type-check thatch's packages with mypy, under the module names they install as.

pyproject maps folders onto packages (`package-dir`: embedder/ -> thatch.embedder, ...).
mypy follows neither that mapping nor setuptools' editable-install finder, so it would
see `embedder` where the code imports `thatch.embedder`. This script rebuilds the
installed layout as a tree of symlinks (under .mypy_cache/, so mypy's incremental cache
stays valid between runs), checks every mapped package there with the [tool.mypy]
settings of pyproject.toml, and reports locations as the repository's own paths. The
tests (the `tests` package, at the repository root) are checked in the same run, under
the less strict override pyproject.toml gives them: their fakes are checked against the
protocols they stand in for.

    .venv/bin/python tools/typecheck.py [extra mypy options]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINKS = Path(".mypy_cache") / "layout"  # relative to ROOT, so mypy prints short paths
TESTS = "tests"  # a package at ROOT, which mypy finds from its working directory


def package_dirs(pyproject: Path) -> dict[str, str]:
    """pyproject's package-dir: package name -> folder, relative to the repository."""
    mapping: dict[str, str] = tomllib.loads(pyproject.read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    for package in mapping:
        if not package or any(package.startswith(other + ".") for other in mapping):
            # A link inside a linked folder would be written into the source tree.
            raise SystemExit(f"typecheck: unsupported package-dir entry {package!r}")
    return mapping


def build_links(mapping: dict[str, str]) -> None:
    """Lay out LINKS/<package path> -> <folder> for every mapped package."""
    links = ROOT / LINKS
    if links.exists():
        shutil.rmtree(links)  # unlinks the symlinks, never follows them
    for package, folder in mapping.items():
        link = links.joinpath(*package.split("."))
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT / folder, target_is_directory=True)


def source_path(line: str, mapping: dict[str, str]) -> str:
    """A mypy output line with a location in the link tree rewritten to the source folder."""
    for package, folder in mapping.items():
        linked = os.path.join(LINKS, *package.split(".")) + os.sep
        if line.startswith(linked):
            return os.path.join(folder, line[len(linked) :])
    return line


def main(argv: list[str]) -> int:
    mapping = package_dirs(ROOT / "pyproject.toml")
    build_links(mapping)
    command = [sys.executable, "-m", "mypy", *argv]
    for package in [*mapping, TESTS]:
        command += ["-p", package]
    env = {**os.environ, "MYPYPATH": str(LINKS)}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    for line in result.stdout.splitlines():
        print(source_path(line, mapping))
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
