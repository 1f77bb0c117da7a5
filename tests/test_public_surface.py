"""Every module says what it offers: an ``__all__`` naming only what it defines or imports.

NOT_YET lists modules not yet given one (empty since the store, tools and queue packages
got theirs); the list only shrinks.
"""

from __future__ import annotations

import ast

from tests.test_layers import modules, under

NOT_YET: tuple[str, ...] = ()


def declared(tree: ast.Module) -> list[str] | None:
    """The literal ``__all__`` of a module, or None when it has none."""
    for node in tree.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "__all__":
            assert isinstance(value, ast.List | ast.Tuple), "__all__ must be a literal list"
            return [str(item.value) for item in value.elts if isinstance(item, ast.Constant)]
    return None


def bound(tree: ast.Module) -> set[str]:
    """Names a module binds at top level (definitions, assignments, imports)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def test_every_module_declares_its_public_names() -> None:
    missing = []
    wrong = []
    for module, path in modules():
        if path.name in ("__init__.py", "__main__.py") or ".v1." in f"{module}.":
            continue
        if any(under(module, pending) for pending in NOT_YET):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = declared(tree)
        if names is None:
            missing.append(module)
            continue
        wrong += [f"{module}.{name}" for name in names if name not in bound(tree)]
    assert missing == []
    assert wrong == []


def test_a_module_without_all_is_reported() -> None:
    tree = ast.parse("import os\n\ndef f() -> None: ...\n")
    assert declared(tree) is None
    tree = ast.parse('__all__ = ["f", "g"]\n\ndef f() -> None: ...\n')
    assert declared(tree) == ["f", "g"]
    assert "g" not in bound(tree)
