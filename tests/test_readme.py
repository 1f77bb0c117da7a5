"""The README's two commands are the ones the project actually runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", quick_start, flags=re.S)


def test_quick_start_has_exactly_two_commands() -> None:
    """The quick start shows one demo command and one test command, each a single line."""
    commands = _readme_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)
    assert commands[0].endswith("thatch demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    """.ci/run executes exactly the README's test command."""
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_commands()[1] in ci_lines
