"""Imports point one way: cli → frontend → embedder → common, plus the edges named below,
and no module reaches itself through its imports.

Every module of every package is parsed with ``ast`` and each import it makes, at module
level, inside a function (the lazy imports of the hook paths) or under ``TYPE_CHECKING``,
relative or absolute, and ``importlib.import_module``/``find_spec`` of a literal name, is
checked against the rules. The cycle check counts the same imports: a cycle through a lazy
or a type-only import still ties the modules together for whoever reads or moves them.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. A module may import its own layer and the layers before it, never a later
# one: the CLI is imported by nothing, the embedder (server, models, convert and client)
# never imports the frontend, and common imports no other thatch package.
# The team hub (docs/team.md) sits above the frontend: it may use the store's types and
# scoring, and no frontend (MCP server, hooks, CLI's library code) ever loads it. Team
# sync (the machine's one process talking to a hub) uses the hub's messages, never psycopg.
LAYERS: tuple[str, ...] = (
    "thatch.common",
    "thatch.embedder",
    "thatch.frontend",
    "thatch.hub",
    "thatch.teamsync",
    "thatch.cli",
)
# The same rule among these packages of the frontend, lowest first: the extraction queue
# (written on every tool call) knows neither the tools nor the hooks, and the tools never
# reach into the hooks. The frontend's other modules are not ordered among themselves.
FRONTEND_LAYERS: tuple[str, ...] = (
    "thatch.frontend.queue",
    "thatch.frontend.tools",
    "thatch.frontend.hooks",
)

# Edges the layer order allows but the design does not: (importer, imported, why).
FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    (
        "thatch.embedder.client",
        "thatch.embedder.server",
        "the client runs in every frontend; it starts a server as a process",
    ),
    (
        "thatch.embedder.client",
        "thatch.embedder.models",
        "the client never loads the model runtime",
    ),
    (
        "thatch.embedder.client",
        "thatch.embedder.convert",
        "the client never loads the import pipeline",
    ),
)

# The embedder's surface: what frontends (and the CLI) may import of thatch.embedder. The
# server, the model runtime, the registry and the import pipeline stay behind it, so a
# frontend runs without the `embedder` extra (onnxruntime, onnx, tokenizers).
EMBEDDER_SURFACE: tuple[str, ...] = ("thatch.embedder.client", "thatch.embedder.v1")
# The embedder's own CLI: commands that start the embedder process, or resolve, download
# and import models, may reach behind the surface (lazily, where the rest of the CLI can
# import them without the extra).
EMBEDDER_CLI: tuple[str, ...] = (
    "thatch.cli.embedder_cmds",
    "thatch.cli.model_cmds",
    "thatch.cli.doctor_model",
    "thatch.cli.demo_model",
)
BEHIND_SURFACE = (
    "frontends use the embedder through thatch.embedder.client and the proto (thatch.embedder.v1)"
)
# Third-party packages only one thatch package may import: (package, the one importer, why).
CONFINED: tuple[tuple[str, str, str], ...] = (
    ("psycopg", "thatch.hub", "only the hub talks to PostgreSQL (the team extra)"),
    ("psycopg_pool", "thatch.hub", "only the hub talks to PostgreSQL (the team extra)"),
)

DYNAMIC_IMPORTERS = {"import_module", "find_spec", "__import__"}


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def behind_surface(name: str) -> bool:
    """A thatch.embedder module outside the surface (the bare package is only a docstring)."""
    return (
        under(name, "thatch.embedder")
        and name != "thatch.embedder"
        and not any(under(name, allowed) for allowed in EMBEDDER_SURFACE)
    )


def layer_of(name: str, layers: tuple[str, ...] = LAYERS) -> int | None:
    for index, layer in enumerate(layers):
        if under(name, layer):
            return index
    return None


def package_dirs() -> dict[str, Path]:
    """pyproject's package-dir: each top-level thatch package and its source folder."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {package: ROOT / folder for package, folder in mapping.items()}


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, file) of every module in every package."""
    for package, folder in sorted(package_dirs().items()):
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join([package, *parts]), path


def imports(
    module: str, source: str, is_package: bool
) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, imported dotted name, names taken from it) for every import in ``source``,
    wherever it sits: ``import a.b`` and ``import_module("a.b")`` give ``("a.b", ())``,
    ``from a import b, c`` gives ``("a", ("a.b", "a.c"))`` (each may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield node.lineno, target, tuple(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in DYNAMIC_IMPORTERS and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    yield node.lineno, first.value, ()


def imported_names(module: str, source: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, imported dotted name) for every import in ``source``, wherever it sits.

    ``from a import b`` yields ``a`` and ``a.b`` (``b`` may be a submodule).
    """
    for line, name, members in imports(module, source, is_package):
        yield line, name
        for member in members:
            yield line, member


def dependencies(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` imports. ``from a import b`` depends on the
    submodule ``a.b`` when there is one, else on ``a``; a package that a submodule import
    merely passes through (its ``__init__`` runs first) is no dependency of its own."""
    found: set[str] = set()
    for _line, name, members in imports(module, source, is_package):
        submodules = [member for member in members if member in known]
        found.update(submodules)
        if name in known and (len(submodules) < len(members) or not members):
            found.add(name)
    found.discard(module)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[frozenset[str], list[str]]]:
    """Each group of modules that reach one another through ``graph`` (Tarjan's strongly
    connected components), with one cycle through it (its first module repeated last)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [
        (frozenset(group), cycle_through(graph, set(group), group[0])) for group in sorted(groups)
    ]


def cycle_through(graph: dict[str, set[str]], group: set[str], start: str) -> list[str]:
    """The shortest way from ``start`` back to itself inside ``group`` (breadth first)."""
    paths = {target: [start, target] for target in sorted(graph[start] & group)}
    queue = list(paths)
    while start not in paths:
        node = queue.pop(0)
        for target in sorted(graph[node] & group):
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    return paths[start]


def module_graph() -> dict[str, set[str]]:
    """Each module of every package and the modules of thatch it imports."""
    found = [(module, path, path.read_text(encoding="utf-8")) for module, path in modules()]
    known = {module for module, _path, _source in found}
    return {
        module: dependencies(module, source, path.name == "__init__.py", known)
        for module, path, source in found
    }


def violations(module: str, source: str, is_package: bool) -> list[str]:
    """One line per broken rule per import statement."""
    found: dict[tuple[int, object], str] = {}
    own = layer_of(module)
    assert own is not None, f"{module} is in no layer: add its package to LAYERS"
    for line, name in imported_names(module, source, is_package):
        for package, importer, why in CONFINED:
            if under(name, package) and not under(module, importer):
                found.setdefault((line, package), f"{module}:{line} imports {name}: {why}")
        if not under(name, "thatch"):
            continue
        target = layer_of(name)
        if target is None:
            found.setdefault((line, None), f"{module}:{line} imports {name}, which is in no layer")
        elif target > own:
            message = f"{module}:{line} imports {name}: {LAYERS[own]} is below {LAYERS[target]}"
            found.setdefault((line, target), message)
        inner, inner_target = layer_of(module, FRONTEND_LAYERS), layer_of(name, FRONTEND_LAYERS)
        if inner is not None and inner_target is not None and inner_target > inner:
            below, above = FRONTEND_LAYERS[inner], FRONTEND_LAYERS[inner_target]
            message = f"{module}:{line} imports {name}: {below} is below {above}"
            found.setdefault((line, above), message)
        if (
            under(module, "thatch.frontend")
            or (under(module, "thatch.cli") and not any(under(module, m) for m in EMBEDDER_CLI))
        ) and behind_surface(name):
            found.setdefault((line, "surface"), f"{module}:{line} imports {name}: {BEHIND_SURFACE}")
        for rule in FORBIDDEN:
            importer, imported, why = rule
            if under(module, importer) and under(name, imported):
                found.setdefault((line, rule), f"{module}:{line} imports {name}: {why}")
    return list(found.values())


def test_every_package_is_in_a_layer() -> None:
    """A new top-level package in pyproject gets a place in the rules before it gets code."""
    assert sorted(package_dirs()) == sorted(LAYERS)


def test_imports_follow_the_layers() -> None:
    """No module imports against the layer order or along a forbidden edge."""
    found: list[str] = []
    count = 0
    for module, path in modules():
        count += 1
        found += violations(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
    assert count > 50  # the walk saw the packages, not an empty folder
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        (
            "thatch.common.environment",
            "def f():\n    from thatch.embedder import settings\n",
            "thatch.common.environment:2 imports thatch.embedder",
        ),
        (
            "thatch.frontend.mcp.server",
            "import os\n\ndef version():\n    import thatch.cli.main\n",
            "thatch.frontend.mcp.server:4 imports thatch.cli.main",
        ),
        (
            "thatch.embedder.server.serve_cmd",
            "from ...cli.errors import translate_errors\n",
            "thatch.embedder.server.serve_cmd:1 imports thatch.cli.errors",
        ),
        (
            "thatch.embedder.models.registry",
            "import importlib\nimportlib.import_module('thatch.frontend.store.db')\n",
            "thatch.embedder.models.registry:2 imports thatch.frontend.store.db",
        ),
        (
            "thatch.frontend.tools.context",
            "from thatch.embedder import server\n",
            "thatch.frontend.tools.context:1 imports thatch.embedder.server: frontends use",
        ),
        (
            "thatch.embedder.client.autostart",
            "from thatch.embedder.models.runtime import load\n",
            "thatch.embedder.client.autostart:1 imports thatch.embedder.models",
        ),
        (
            "thatch.frontend.queue.append",
            "def f():\n    from thatch.frontend.tools.registry import TOOL_SPECS\n",
            "thatch.frontend.queue.append:2 imports thatch.frontend.tools.registry: "
            "thatch.frontend.queue is below thatch.frontend.tools",
        ),
        (
            "thatch.frontend.tools.memory_tools",
            "from thatch.frontend.hooks import hookio\n",
            "thatch.frontend.tools.memory_tools:1 imports thatch.frontend.hooks",
        ),
        (
            "thatch.frontend.hooks.prompt_hooks",
            "def f():\n    from thatch.embedder.models.registry import model_id_for\n",
            "thatch.frontend.hooks.prompt_hooks:2 imports thatch.embedder.models.registry: "
            "frontends use",
        ),
        (
            "thatch.cli.store_cmds",
            "from thatch.embedder.encoder import ModelSettings\n",
            "thatch.cli.store_cmds:1 imports thatch.embedder.encoder: frontends use",
        ),
        (
            "thatch.frontend.mcp.server",
            "def f():\n    from thatch.hub.memories import HubMemories\n",
            "thatch.frontend.mcp.server:2 imports thatch.hub.memories: "
            "thatch.frontend is below thatch.hub",
        ),
        (
            "thatch.frontend.store.db",
            "import psycopg\n",
            "thatch.frontend.store.db:1 imports psycopg: only the hub talks to PostgreSQL",
        ),
        (
            "thatch.embedder.server.service",
            "from psycopg_pool import ConnectionPool\n",
            "thatch.embedder.server.service:1 imports psycopg_pool: only the hub",
        ),
        (
            "thatch.frontend.demo",
            "import thatch.elsewhere\n",
            "thatch.frontend.demo:1 imports thatch.elsewhere, which is in no layer",
        ),
    ],
)
def test_the_walk_catches_each_kind_of_edge(module: str, source: str, expected: str) -> None:
    """Lazy, relative and dynamic imports against the rules are all reported."""
    found = violations(module, source, is_package=False)
    assert any(line.startswith(expected) for line in found), found


def test_allowed_edges_pass() -> None:
    """Downward imports, own-layer imports and non-thatch imports are not reported."""
    source = (
        "import numpy\n"
        "from thatch.common.environment import home\n"
        "from thatch.embedder.client.embedder_client import EmbedderClient\n"
        "from . import hookio\n"
        "from thatch.frontend import queue\n"
        "def f():\n    from thatch.frontend.store import db\n"
        "    from thatch.frontend.tools.context import ToolContext\n"
    )
    assert violations("thatch.frontend.hooks.runner", source, is_package=False) == []


def test_the_embedders_cli_may_reach_behind_the_surface() -> None:
    """`thatch model import` and `thatch embedder serve` use the embedder itself."""
    source = "def f():\n    from thatch.embedder.convert.importer import import_checkpoint\n"
    assert violations("thatch.cli.model_cmds", source, is_package=False) == []


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle anywhere: within a package or across packages, through module-level,
    lazy, type-only or dynamic imports alike (see the module docstring)."""
    graph = module_graph()
    assert len(graph) > 50  # the walk saw the packages
    cycles = import_cycles(graph)
    found = [
        " → ".join(cycle) + f" (all of: {', '.join(sorted(group))})" for group, cycle in cycles
    ]
    assert found == []


def test_the_cycle_check_sees_lazy_relative_and_package_imports() -> None:
    """A cycle closed by a lazy import, a relative one or ``from package import name`` (the
    package's ``__init__``) is found and printed; a package re-exporting its submodules,
    which import one another by their own names, is none."""
    sources = {
        "thatch.x": ("", True),
        "thatch.x.a": ("from thatch.x.b import f\n", False),
        "thatch.x.b": ("def g():\n    from . import c\n", False),
        "thatch.x.c": ("import thatch.x.a\n", False),
        "thatch.y": ("from thatch.y.low import f\nfrom thatch.y.high import g\n", True),
        "thatch.y.low": ("", False),
        "thatch.y.high": ("from thatch.y.low import f\n", False),
        "thatch.z": ("from thatch.z.inner import f\n", True),
        "thatch.z.inner": ("from thatch.z import g\n", False),
    }
    known = set(sources)
    graph = {
        name: dependencies(name, source, is_package, known)
        for name, (source, is_package) in sources.items()
    }
    assert [cycle for _group, cycle in import_cycles(graph)] == [
        ["thatch.x.a", "thatch.x.b", "thatch.x.c", "thatch.x.a"],
        ["thatch.z", "thatch.z.inner", "thatch.z"],
    ]
