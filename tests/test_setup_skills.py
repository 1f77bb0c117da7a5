"""The three skills: front matter, the points each covers, and writing only when needed
(docs/hooks.md §skills)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from thatch.frontend.setup import SetupRequest, run_setup
from thatch.frontend.setup.skills import SKILL_NAMES, skill_text

POINTS = {
    "thatch-fact-extractor": [
        "get_extraction_payload",
        "memory_recall",
        "architecture",
        "conventions",
        "gotchas",
        "commands",
        "preferences",
        "environment",
        "durability test",
        "`global`",
        "5–8 words",
        "2–5 sentences",
        "overwrite: true",
        "`anchors`",
        "`related`",
        "`codeChanged`",
        "1–3 weak",
        "5–6 moderate",
        "7–8 strong",
        "9 when the user stated",
        "extraction_done",
        "even when nothing",
        "`Extraction complete.`",
    ],
    "thatch-dedup-classifier": [
        "memory_show",
        "`duplicate`",
        "`supplement`",
        "`contradiction`",
        "`unrelated`",
        "richer",
        "overwrite: true",
        "memory_forget",
        "three or more",
        "every fact",
        "split",
        "dedup_mark_checked",
        "find_duplicates",
    ],
    "thatch-project-primer": [
        "memory_recall",
        "docs",
        "layout",
        "dependencies",
        "architecture",
        "commands",
        "testing",
        "CI",
        "conventions",
        "gotchas",
        "one focused memory per area",
        "confidence 7–9",
        "file paths",
        "overwrite: true",
        "ephemeral",
        "find_duplicates",
        "Report",
    ],
}


@pytest.mark.parametrize("name", SKILL_NAMES)
def test_front_matter_and_points(name: str) -> None:
    """Each skill has name + double-quoted description and covers the spec's points."""
    text = skill_text(name)
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    meta = yaml.safe_load(front)
    assert meta["name"] == name and len(meta["description"]) > 40
    assert 'description: "' in front
    for point in POINTS[name]:
        assert point in body, point


def test_only_changed_skills_written_foreign_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale thatch skill is rewritten, a current one left alone, a foreign one untouched."""
    skills = tmp_path / "claude" / "skills"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    foreign = skills / "my-skill" / "SKILL.md"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("mine")
    stale = skills / "thatch-project-primer" / "SKILL.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    current = skills / "thatch-fact-extractor" / "SKILL.md"
    current.parent.mkdir(parents=True)
    current.write_text(skill_text("thatch-fact-extractor"))
    mtime = current.stat().st_mtime_ns
    request = SetupRequest(
        hosts=["claude"], project_dir=tmp_path, env=dict(os.environ), bin_path="t", version="1"
    )
    lines = run_setup(request).stdout_lines()
    assert f"  written  {stale}" in lines and f"  unchanged  {current}" in lines
    assert stale.read_text() == skill_text("thatch-project-primer")
    assert current.stat().st_mtime_ns == mtime
    assert foreign.read_text() == "mine"
