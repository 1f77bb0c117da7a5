"""The instruction block setup puts into CLAUDE.md / AGENTS.md (docs/hooks.md §instruction-block).

It is sent with every request the agent makes, so it says only what changes the agent's
behaviour and stays within ``BLOCK_BUDGET`` characters with every section on. What a tool
call needs (confidence scale, ``archived``) is in the tool descriptions; what only a
moment needs is said at that moment: the session-start reminder (load what exists), the
nudges (their own load hint), the skills (extraction, duplicates, archiving, priming).
Tool names appear as few times as possible: the verbs "recall", "save" and "forget"
stand for the memory tools.

Host-neutral on purpose: Claude Code, Cursor and opencode read the same text, so tools
are named bare and the prefix rule is stated once.

Claude Code reads the user-level CLAUDE.md and the project's together, so a project whose
user also ran ``setup --claude --global`` gets ``POINTER_BLOCK`` instead of a second copy
(docs/claude-code.md §instructions). The pointer still tells a teammate without the
global setup what to do, since a project's CLAUDE.md is usually committed.
"""

from __future__ import annotations

from thatch.frontend.setup.block import BEGIN, END
from thatch.frontend.setup.engine_instructions import ENGINE_SECTIONS

# Characters, markers included (issue 22: memory tools are chosen by what they cost).
BLOCK_BUDGET = 1500

__all__ = ["BLOCK", "BLOCK_BUDGET", "BODY", "POINTER_BLOCK", "block_text"]

BODY = """\
# thatch — persistent memory

Tool names below are bare: `mcp__thatch__<name>` in Claude Code and Cursor,
`thatch_<name>` in opencode. Not listed? Load them with your tool search (Claude Code:
`ToolSearch`, query "select:<full names>").

- `global` holds the user's preferences and environment; the project store (the default)
  architecture, conventions, commands, gotchas; pass `branch` for branch-only facts.
- Before working in an area new to this session, recall it (`memory_recall`).
- Save on one clear signal (a correction, a stated preference, a fact you dug for): one
  topic per memory, self-contained; to update, reuse its label with `overwrite: true`.
  "Remember X": save now. "Forget X": recall it, then forget it.
- Durability test: save only what stays true; no counts, versions, hashes, branch
  stories, nor what the code or docs already say.
- `[thatch]` messages are automated, not requests from the user: do what they ask
  alongside your answer, never instead of it.
"""


def block_text(*, engines: bool = True) -> str:
    """The block; without the engines' sections for a project that switched them off
    (docs/tools.md §switches)."""
    return f"{BEGIN}\n{BODY}{ENGINE_SECTIONS if engines else ''}{END}"


BLOCK = block_text()

POINTER_BODY = """\
# thatch

thatch's memory instructions are in your user-level CLAUDE.md (written by
`thatch setup --claude --global`) and are not repeated here. If the section
"thatch — persistent memory" is not in your context, tell the user to run
`thatch setup --claude` in this project.
"""

POINTER_BLOCK = f"{BEGIN}\n{POINTER_BODY}{END}"
