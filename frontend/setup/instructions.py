"""The instruction block setup puts into CLAUDE.md / AGENTS.md (docs/hooks.md §instruction-block).

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

__all__ = ["BLOCK", "BODY", "POINTER_BLOCK"]

BODY = """\
# thatch — persistent memory

thatch keeps what you learn in a memory store that outlives this session. Its tools are
named bare below; your host adds a prefix: `mcp__thatch__<name>` in Claude Code and
Cursor (e.g. `mcp__thatch__memory_recall`), `thatch_<name>` in opencode
(e.g. `thatch_memory_recall`).

If the thatch tools are not in your tool list, your host may be deferring them: load the
ones you need with its tool search first (in Claude Code: `ToolSearch` with the query
"select:" and their full names, comma-separated, e.g.
"select:mcp__thatch__store_list,mcp__thatch__memory_list,mcp__thatch__memory_recall"), then
call them. Only when that search finds none is thatch unavailable in this session.

## Stores
- `global` holds what is true everywhere: the user's preferences and working style,
  personality, and their machine and environment.
- The project store is detected from the git remote (`owner/repo`) and is the default when
  you omit `store`. Put architecture, conventions, commands and gotchas there.
- Pass `branch` to scope a memory to a git branch when it only holds on that branch.

## At session start
Before the first reply, recall the user's preferences, the project's architecture and
conventions, and (off the main branch) notes for the current branch: `store_list` and
`memory_list` show what exists, `memory_recall` fetches it. Before working in an area of
the code you have not touched this session, `memory_recall` that area first.

## When to write
- One clear signal is enough: a correction, a stated preference, a fact you had to dig
  for. Do not wait for the user to repeat it.
- After multi-step tool work (debugging, exploring, setting something up), recall to
  check for an existing memory on the topic, then save what you learned before you
  write your answer.
- "Remember X" means save X now. "Forget X" means `memory_recall` to find the memory,
  then `memory_forget` it.

## Extraction nudges
Messages starting with `[thatch]` that say tool interactions are queued for fact
extraction are automated system messages, not requests from the user. Dispatch the
background sub-agent or task exactly as the nudge says, acknowledge with
`extraction_done`, and answer the user's prompt as you would have: extraction runs
alongside your answer, never instead of it.

## How to write
- One topic per memory, written for a reader with zero context: name files, commands
  and reasons in full sentences.
- To update a memory, save under the same label with `overwrite: true` instead of
  creating a near-copy.
- Confidence: 1–3 a weak or single hint, 5–6 moderate evidence, 7–8 strong evidence,
  9 stated by the user, 10 a hard constraint.

## The durability test
Save only what will still be true and useful in a later session. Do not save
point-in-time values (counts, versions you just saw, today's status), commit hashes,
narratives of what happened on a branch, facts anyone can re-derive in seconds from the
code, or anything already in this instruction file or the project's docs.

## Archiving and branches
Archive memories that are no longer current but worth keeping for history, rather than
deleting them. When a branch is merged or deleted, fold its branch-scoped memories into
one archived memory and forget the rest. Updating an archived memory requires passing
`archived` (true keeps it archived, false restores it).

## Duplicates
When `memory_remember` warns about similar memories, or `find_duplicates` reports
clusters, follow the `thatch-dedup-classifier` skill to merge or mark them.
"""

BLOCK = f"{BEGIN}\n{BODY}{ENGINE_SECTIONS}{END}"

POINTER_BODY = """\
# thatch

thatch's memory instructions are in your user-level CLAUDE.md (written by
`thatch setup --claude --global`) and are not repeated here. If the section
"thatch — persistent memory" is not in your context, tell the user to run
`thatch setup --claude` in this project.
"""

POINTER_BLOCK = f"{BEGIN}\n{POINTER_BODY}{END}"
