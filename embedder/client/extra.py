"""Whether this machine can run an embedder: the `embedder` extra's packages.

A frontend-only install (agents using a shared embedder) leaves them out; commands that
run an embedder here say so with the line that installs them, before a child process
fails on its first import. Looked up with ``find_spec``: nothing is imported.
"""

from __future__ import annotations

import importlib.util

from thatch.common.pip_line import pip_install, thatch_requirement

__all__ = ["EXTRA_MODULES", "install_line", "missing"]

# The import names of the `embedder` extra in pyproject.toml.
EXTRA_MODULES = ("onnxruntime", "onnx", "tokenizers", "huggingface_hub")


def missing() -> list[str]:
    """The extra's packages this interpreter cannot import."""
    absent = []
    for name in EXTRA_MODULES:
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None:
            absent.append(name)
    return absent


def install_line() -> str:
    """The pip line that adds the extra to this interpreter's thatch: ``-e`` from the clone
    of an editable install (it stays editable), else the package name."""
    return pip_install(*thatch_requirement("embedder"))
