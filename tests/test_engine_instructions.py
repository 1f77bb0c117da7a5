"""The instruction block carries the engines' part (engines.md §7)."""

from __future__ import annotations

import re

from thatch.frontend.setup.block import END
from thatch.frontend.setup.engine_instructions import ENGINE_SECTIONS
from thatch.frontend.setup.instructions import BLOCK
from thatch.frontend.tools.engine_specs import ENGINE_ACTIONS


def test_block_has_the_engines_part_naming_real_tools() -> None:
    assert BLOCK.endswith(ENGINE_SECTIONS + END)
    named = set(re.findall(r"`((?:prediction|behavior)_[a-z]+)`", BLOCK))
    assert named == {"prediction_update", "behavior_feedback", "behavior_codify"}
    assert named <= {action.name for action in ENGINE_ACTIONS}
    assert "`engine` action `prediction_update`" in BLOCK
    assert "`[thatch] User decision model`" in BLOCK
    assert "`[thatch] Situational behaviors`" in BLOCK
    for rule in ("follow strong predictions", "ask about thin", "less thorough"):
        assert rule in ENGINE_SECTIONS, rule
