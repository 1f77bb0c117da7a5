"""The engines' part of the instruction block (engines.md §7, docs/hooks.md
§instruction-block): appended after instructions.BODY.

Only what the agent does when a block fires; when to list, delete or query is in the
tool descriptions.
"""

from __future__ import annotations

__all__ = ["ENGINE_SECTIONS"]

ENGINE_SECTIONS = """\
- `[thatch] User decision model`: follow strong predictions; ask about thin or
  conflicting ones ("you usually prefer X — right?"). When the user answers, corrects or
  states a preference (reviews count), record it with `engine` action `prediction_update`,
  querying first.
- `[thatch] Situational behaviors`: grade each with action `behavior_feedback`;
  codify rules about your own work with action `behavior_codify`, never one that makes
  you less thorough.
"""
