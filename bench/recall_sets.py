"""The development sets of bench/recall_quality.py (issue 24): what agents save, and what
they then ask.

- conversation: turns of five hand-written conversations (four between friends in the
  style of LoCoMo, one of a user telling a coding agent facts and preferences), one memory
  per turn, labelled by conversation, date, turn and speaker (as a turn-level harness
  saves them), with 109 questions each answered by one turn (the data file says how they
  were written). No packaged conversational corpus with questions was found on PyPI, npm
  or Debian (LoCoMo is not packaged), hence written by hand.
- facts: 98 hand-written code facts of fictional projects, as an agent saves what it
  learned from tool output (ports, commands, paths, causes of errors), and 102 queries an
  agent would type needing them.
- docstrings: facts from the docstrings of third-party packages installed beside thatch,
  parsed with ``ast`` (never imported): the memory is labelled with the module and name,
  its content is the docstring's body, the query its summary line. CPython's standard
  library is held out (``held_out_roots``).
- camelcase: field and type documentation of the npm package kubernetes-types (Apache-2.0,
  generated from Kubernetes' OpenAPI; ``npm pack`` brings it into the bench cache): a
  TypeScript code set whose names are camelCase and PascalCase (``terminationGracePeriod
  Seconds``, ``PodSpec``). The memory is labelled with the API file, type and field, its
  content is the description after its first sentence, the query that first sentence
  without the field's name it starts with (``succeededCount specifies the minimal …`` →
  ``specifies the minimal …``): a question names what it wants in words.
"""

from __future__ import annotations

import ast
import inspect
import random
import re
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

CONVERSATION_FILE = Path(__file__).parent / "data" / "recall_conversation.txt"
FACTS_FILE = Path(__file__).parent / "data" / "recall_code_facts.txt"
DEV_PACKAGES = [
    "numpy", "click", "grpc", "huggingface_hub", "starlette", "pydantic", "anyio",
    "jsonschema", "pygments", "yaml", "attr", "fsspec", "onnx", "packaging", "tqdm",
    "uvicorn", "mcp", "cryptography", "setuptools", "_pytest", "h11", "referencing",
]  # fmt: skip
MAX_BODY = 4000


@dataclass(frozen=True)
class Memory:
    label: str
    content: str


@dataclass(frozen=True)
class Question:
    text: str
    target: int  # index into DevSet.memories


@dataclass(frozen=True)
class DevSet:
    name: str
    memories: list[Memory]
    questions: list[Question]


def conversation_set(path: Path = CONVERSATION_FILE) -> DevSet:
    """The hand-written conversations: every turn a memory, every ``?`` line a question
    about the turn just above it."""
    memories: list[Memory] = []
    questions: list[Question] = []
    conversation, date, turn = "", "", 0
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("# "):
            continue
        if line.startswith("## "):
            conversation, turn = line[3:], 0
        elif line.startswith("@ "):
            date = line[2:]
        elif line.startswith("? "):
            if not memories:
                raise ValueError(f"question before any turn: {line}")
            questions.append(Question(line[2:], len(memories) - 1))
        else:
            speaker, sep, _ = line.partition(": ")
            if not sep:
                raise ValueError(f"not a turn: {line}")
            turn += 1
            memories.append(Memory(f"{conversation} {date} turn {turn} {speaker}", line))
    return DevSet("conversation", memories, questions)


def facts_set(path: Path = FACTS_FILE) -> DevSet:
    """The hand-written code facts: every ``!`` line a memory (label | content), every
    ``?`` line a query needing the fact above it."""
    memories: list[Memory] = []
    questions: list[Question] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("! "):
            label, sep, content = line[2:].partition(" | ")
            if not sep:
                raise ValueError(f"not a fact: {line}")
            memories.append(Memory(label.strip(), content.strip()))
        elif line.startswith("? ") and memories:
            questions.append(Question(line[2:], len(memories) - 1))
        else:
            raise ValueError(f"not a fact or a query: {line}")
    return DevSet("code facts", memories, questions)


def split_docstring(doc: str) -> tuple[str, str] | None:
    """(summary line, body) of a docstring with both, else None."""
    text = inspect.cleandoc(doc)
    head, _, body = text.partition("\n\n")
    summary = " ".join(head.split())
    body = body.strip()
    if not 4 <= len(summary.split()) <= 40 or len(body) < 100:
        return None
    return summary, body[:MAX_BODY]


@dataclass(frozen=True)
class Pair:
    query: str
    body: str
    name: str  # module and object, as an agent would label the fact


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def docstring_pairs(roots: list[Path]) -> list[Pair]:
    """Every usable (summary, body) of the modules under ``roots``; duplicates dropped."""
    pairs: list[Pair] = []
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            if any(part in ("tests", "test", "testing") for part in path.parts):
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            module = _module_name(path, root)
            for node in ast.walk(tree):
                if not isinstance(
                    node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module
                ):
                    continue
                doc = ast.get_docstring(node, clean=False)
                split = split_docstring(doc) if doc else None
                if split is not None:
                    name = getattr(node, "name", "")
                    pairs.append(Pair(split[0], split[1], f"{module} {name}".strip()))
    return _unique(pairs)


def _unique(pairs: list[Pair]) -> list[Pair]:
    """The pairs whose query, body and name are each found once."""
    seen_queries: dict[str, int] = {}
    seen_bodies: dict[str, int] = {}
    seen_names: dict[str, int] = {}
    for pair in pairs:
        seen_queries[pair.query.lower()] = seen_queries.get(pair.query.lower(), 0) + 1
        seen_bodies[pair.body] = seen_bodies.get(pair.body, 0) + 1
        seen_names[pair.name.lower()] = seen_names.get(pair.name.lower(), 0) + 1
    return [
        p
        for p in pairs
        if seen_queries[p.query.lower()] == 1
        and seen_bodies[p.body] == 1
        and seen_names[p.name.lower()] == 1
    ]


def dev_roots() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return [site / name for name in DEV_PACKAGES if (site / name).exists()]


def held_out_roots() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "idlelib", "lib2to3", "tkinter"}
    return [p for p in sorted(stdlib.iterdir()) if p.name not in skip and p.suffix in ("", ".py")]


def code_set(size: int, seed: int, *, held_out: bool = False) -> DevSet:
    """``size`` docstring facts sampled with ``seed``: memory "module name" → body, question
    the summary line."""
    pool = docstring_pairs(held_out_roots() if held_out else dev_roots())
    chosen = sorted(random.Random(seed).sample(pool, min(size, len(pool))), key=lambda p: p.name)
    memories = [Memory(pair.name, pair.body) for pair in chosen]
    questions = [Question(pair.query, i) for i, pair in enumerate(chosen)]
    return DevSet(
        "docstrings (held out: stdlib)" if held_out else "docstrings", memories, questions
    )


def camelcase_set(size: int, seed: int, cache: Path) -> DevSet:
    """``size`` JSDoc facts of kubernetes-types sampled with ``seed``."""
    pool = jsdoc_pairs(kubernetes_types(cache))
    chosen = sorted(random.Random(seed).sample(pool, min(size, len(pool))), key=lambda p: p.name)
    memories = [Memory(pair.name, pair.body) for pair in chosen]
    questions = [Question(pair.query, i) for i, pair in enumerate(chosen)]
    return DevSet("camelcase (kubernetes-types)", memories, questions)


def among(dev: DevSet, *others: DevSet) -> DevSet:
    """``dev``'s questions over its memories and ``others``' together (one store holding
    every kind, as an agent's does)."""
    memories = dev.memories + [memory for other in others for memory in other.memories]
    return DevSet(f"{dev.name} + others", memories, dev.questions)


def all_sets(size: int, seed: int, cache: Path) -> list[DevSet]:
    """Every dev set in the order the ranking benches report them: conversation, facts,
    docstrings, camelcase, then conversation and facts each among the others."""
    docstrings = code_set(size, seed)
    return [
        conversation_set(),
        facts_set(),
        docstrings,
        camelcase_set(size, seed, cache),
        among(conversation_set(), facts_set(), docstrings),
        among(facts_set(), conversation_set(), docstrings),
    ]


K8S_PACKAGE = "kubernetes-types@1.30.0"
_JSDOC = re.compile(
    r"/\*\*(?P<doc>.*?)\*/\s*(?:export interface (?P<type>\w+)|(?P<field>[\w$]+)\??:)", re.S
)
_FIRST_SENTENCE = re.compile(r"(?<=[a-z0-9)\]`'\"])\.\s+(?=[A-Z])")


def kubernetes_types(cache: Path) -> Path:
    """The unpacked kubernetes-types package in ``cache`` (``npm pack`` on first use)."""
    root = cache / "kubernetes-types" / "package"
    if not (root / "package.json").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", K8S_PACKAGE], cwd=root.parent, check=True,
                       capture_output=True)  # fmt: skip
        (tarball,) = root.parent.glob("kubernetes-types-*.tgz")
        subprocess.run(["tar", "xzf", tarball.name], cwd=root.parent, check=True)
    return root


def jsdoc_pairs(root: Path) -> list[Pair]:
    """(first sentence, rest) of every type's and field's JSDoc under ``root``; names are
    "api/version Type field"."""
    pairs: list[Pair] = []
    for path in sorted(root.rglob("*.d.ts")):
        api = str(path.relative_to(root).with_suffix("").with_suffix(""))
        current = ""
        text = path.read_text(encoding="utf-8")
        for match in _JSDOC.finditer(text):
            doc = " ".join(
                line.strip().removeprefix("*").strip() for line in match["doc"].splitlines()
            ).strip()
            doc = " ".join(doc.split())
            if match["type"]:
                current = match["type"]
                name = f"{api} {current}"
            else:
                name = f"{api} {current} {match['field']}"
            pair = jsdoc_pair(doc, name, match["field"])
            if pair is not None:
                pairs.append(pair)
    return _unique(pairs)


def jsdoc_pair(doc: str, name: str, field: str | None) -> Pair | None:
    """(first sentence, rest) of one JSDoc text, if both are long enough."""
    parts = _FIRST_SENTENCE.split(doc, maxsplit=1)
    if len(parts) != 2:
        return None
    summary, body = parts[0].strip() + ".", parts[1].strip()
    first, _, rest = summary.partition(" ")
    if field and first.lower() == field.lower():
        # A question names what it wants in words: the name is left to the memory.
        summary = rest
    if 4 <= len(summary.split()) <= 40 and len(body) >= 60:
        return Pair(summary, body[:MAX_BODY], name)
    return None
