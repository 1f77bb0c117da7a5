"""The three skills setup installs for every host (docs/hooks.md §skills).

The texts ship as package data under ``thatch/frontend/skills/<name>/SKILL.md``; only
these names are ever written, so skills the user keeps next to them are never touched.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["SKILL_NAMES", "skill_files", "skill_text"]

SKILL_NAMES: tuple[str, ...] = (
    "thatch-fact-extractor",
    "thatch-dedup-classifier",
    "thatch-project-primer",
)


def skill_text(name: str) -> str:
    if name not in SKILL_NAMES:
        raise ValueError(f"unknown skill {name!r}")
    resource = files("thatch.frontend").joinpath("skills", name, "SKILL.md")
    return resource.read_text(encoding="utf-8")


def skill_files(skills_dir: Path) -> list[tuple[Path, str]]:
    """(target file, content) for each skill under a host's skills directory."""
    return [(skills_dir / name / "SKILL.md", skill_text(name)) for name in SKILL_NAMES]
