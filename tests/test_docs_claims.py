"""Claims in README.md and docs/ that the code can contradict are checked against it
(issue 23: the docs had drifted from the code in ten places)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from thatch.cli.main import COMMANDS
from thatch.cli.main import cli as cli_main
from thatch.frontend.thresholds import VARIABLES, defaults_for

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
TOOLS_DOC = (ROOT / "docs" / "tools.md").read_text()
CLI_DOC = (ROOT / "docs" / "cli.md").read_text()


def _row(text: str, first_cell: str) -> str:
    """The row of the table with the variables (the other table explains the rules)."""
    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith(f"| {first_cell} ") and "`THATCH_" in line
    ]
    return line


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
@pytest.mark.parametrize("field", list(VARIABLES))
def test_threshold_defaults_in_the_variable_tables_are_the_codes(doc: str, field: str) -> None:
    """'the model's: 0.30 BGE, 0.15 MiniLM' says what frontend/thresholds.py holds."""
    text = README if doc == "README.md" else ARCHITECTURE
    variable = VARIABLES[field]
    rows = [line for line in text.splitlines() if line.startswith("| ") and variable in line]
    assert rows, f"{doc} has no row for {variable}"
    bge, minilm = defaults_for("bge-small-en-v1.5"), defaults_for("all-MiniLM-L6-v2")
    assert bge is not None and minilm is not None
    found = re.search(r"(\d\.\d\d) BGE, (\d\.\d\d) MiniLM", rows[0])
    assert found is not None, rows[0]
    assert (float(found.group(1)), float(found.group(2))) == (
        getattr(bge, field),
        getattr(minilm, field),
    )


@pytest.mark.parametrize("field", list(VARIABLES))
def test_threshold_table_of_tools_md_is_the_codes(field: str) -> None:
    row = _row(
        TOOLS_DOC,
        {
            "recall_nudge": "recall nudge",
            "recall_floor": "recall floor",
            "duplicate": "near-duplicate",
            "prediction": "prediction",
            "behavior": "behavior",
        }[field],
    )
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    bge, minilm = defaults_for("bge-small-en-v1.5"), defaults_for("all-MiniLM-L6-v2")
    assert bge is not None and minilm is not None
    assert (float(cells[3]), float(cells[4])) == (getattr(bge, field), getattr(minilm, field))


def test_every_command_is_in_the_readme_and_cli_md() -> None:
    """The README's command table and docs/cli.md name every top-level command."""
    table = "\n".join(line for line in README.splitlines() if line.startswith("| `thatch"))
    for name in COMMANDS:
        assert f"`{name}`" in table or f"`thatch {name}" in table or f", `{name}`" in table, name
        assert f"`{name}" in CLI_DOC or f" {name} " in CLI_DOC, name


def test_the_layout_table_names_every_package_and_only_modules_that_exist() -> None:
    """docs/architecture.md §layout: a row per package folder; each `x.py` it names exists
    there; nothing is described as planned or not written."""
    rows = {
        match.group(1): match.group(0)
        for match in re.finditer(r"^\| `([a-z_/]+/)(?:\*\.py)?` \|.*$", ARCHITECTURE, re.M)
    }
    packages = {
        f"{path.parent.relative_to(ROOT).as_posix()}/"
        for top in ("common", "embedder", "frontend", "cli")
        for path in (ROOT / top).rglob("__init__.py")
    }
    for package in sorted(packages):
        if package == "embedder/v1/" or package.count("/") == 1:
            continue  # generated code and top-level packages have rows of their own
        assert package in rows, f"docs/architecture.md §layout has no row for {package}"
        for module in re.findall(r"`([a-z_]+\.py)`", rows[package]):
            assert (ROOT / package / module).is_file(), f"{package}{module} does not exist"
    assert "not written yet" not in ARCHITECTURE


def _documented_command_lines() -> list[tuple[str, str]]:
    """Every `thatch …` the README and docs/ show, in code spans and fenced blocks."""
    found: list[tuple[str, str]] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        spans = re.findall(r"`(thatch [^`]+)`", text)
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            spans += [line.strip().removeprefix("$ ") for line in block.splitlines()]
        for span in spans:
            for segment in span.split("#")[0].replace("\\|", "|").split("&&"):
                segment = " ".join(segment.split())
                if segment.startswith("thatch "):
                    found.append((path.name, segment))
    return found


def _resolve(tokens: list[str]) -> tuple[click.Command, list[str]]:
    """The command the tokens name (descending through groups) and the options given."""
    command: click.Command = cli_main
    options: list[str] = []
    descending = True
    for token in tokens:
        if token.startswith("--") or token.startswith("-h"):
            options += [option.split("=")[0] for option in token.split("|")]
            continue
        if descending and isinstance(command, click.Group):
            context = click.Context(command)
            names = token.split("|")
            subcommands = [command.get_command(context, name) for name in names]
            if all(sub is not None for sub in subcommands):
                command = subcommands[0]  # type: ignore[assignment]
                continue
            an_argument = token.isupper() or not token.isidentifier()  # DIR, ID, a path
            assert len(names) == 1 and an_argument, (
                f"`{token}` is not a subcommand of `{command.name}`"
            )
        descending = False
    return command, options


def test_every_documented_command_line_names_real_commands_and_options() -> None:
    """`thatch setup --claude --no-allow-tools`, `thatch chat tail --since T`, …: each
    subcommand the docs write exists, and each option is one that command accepts."""
    placeholder = re.compile(r"<[^>]*>|…|\.\.\.")
    lines = _documented_command_lines()
    assert len(lines) > 100
    for doc, line in lines:
        if placeholder.search(line.split()[1]):
            continue  # `thatch <hook-command>`, `thatch …`: a pattern, not a command
        tokens = [token.strip("[](),;") for token in line.split()[1:]]
        tokens = [t for t in tokens if t and not placeholder.fullmatch(t)]
        if tokens and not tokens[0].startswith("-") and not tokens[0].islower():
            continue  # prose that starts with "thatch" ("thatch is not wired …")
        if tokens and tokens[0] in {"is", "runs"}:
            continue
        command, options = _resolve(tokens)
        accepted = {"--help", "-h"}
        for param in command.params:
            accepted.update(getattr(param, "opts", []))
            accepted.update(getattr(param, "secondary_opts", []))
        if command is cli_main:
            accepted.add("--version")
        for option in options:
            if placeholder.search(option):
                continue  # --<host>
            assert option in accepted, f"{doc}: `{line}`: {command.name} has no {option}"


def test_the_footprint_table_of_tools_md_is_the_codes() -> None:
    """docs/tools.md §footprint: one row per tool with its characters, and the total."""
    from thatch.frontend.tools.footprint import tool_definitions_chars
    from thatch.frontend.tools.registry import TOOL_SPECS

    sizes = tool_definitions_chars(TOOL_SPECS)
    section = TOOLS_DOC.split("## Footprint", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| (\w+) \| ([\d,]+)", section, re.M))
    total = rows.pop("total")
    assert {name: int(value.replace(",", "")) for name, value in rows.items()} == sizes
    assert int(total.replace(",", "")) == sum(sizes.values())
