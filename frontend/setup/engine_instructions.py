"""The engines' two sections of the instruction block (engines.md §7, docs/hooks.md
§instruction-block): appended after instructions.BODY."""

from __future__ import annotations

__all__ = ["ENGINE_SECTIONS"]

ENGINE_SECTIONS = """\

## User decision model (predictions)
A `[thatch] User decision model` block lists what this user tends to want in situations
like the current one, with a confidence and the number of reactions behind it.
- Follow strong predictions (confidence 0.7 or more, several tests) without asking.
- Surface thin or conflicting ones instead of acting on them: "I think you usually prefer
  X — right?"
- After the user answers, corrects you or states a preference, record it with
  `prediction_update` (confirm, disconfirm, soft, or create for a new one). Run
  `prediction_query` first so an existing prediction is graded, not duplicated; use it too
  for a judgement call the automatic block did not cover.
- Review discussions are high-signal: what a reviewer accepts or pushes back on is a
  preference.

## Situational behaviors
A `[thatch] Situational behaviors` block lists rules about your own discipline that match
the current situation.
- Grade every surfaced behavior with `behavior_feedback`: `relevant: true` when it applied,
  false when it fired where it did not belong.
- When you notice a repeatable rule about how you should work (not a user preference),
  codify it with `behavior_codify`. Never codify a rule that makes you less thorough.
- `behavior_list` and `behavior_delete` (and `prediction_list`, `prediction_delete`) are
  for inspection and for removing mistakes.
"""
