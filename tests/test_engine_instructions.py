"""The instruction block carries the engines' two sections (engines.md §7)."""

from __future__ import annotations

import re

from thatch.frontend.setup.block import END
from thatch.frontend.setup.instructions import BLOCK
from thatch.frontend.tools.engine_specs import ENGINE_ACTIONS


def test_block_has_both_engine_sections_naming_real_tools() -> None:
    assert "\n## User decision model (predictions)\n" in BLOCK
    assert "\n## Situational behaviors\n" in BLOCK
    assert BLOCK.endswith(END) and BLOCK.index("## Situational behaviors") < BLOCK.index(END)
    named = set(re.findall(r"`((?:prediction|behavior)_[a-z]+)`", BLOCK))
    assert named == {
        "prediction_update",
        "prediction_query",
        "prediction_list",
        "prediction_delete",
        "behavior_feedback",
        "behavior_codify",
        "behavior_list",
        "behavior_delete",
    }
    assert named <= {action.name for action in ENGINE_ACTIONS}
    assert "`engine` action `prediction_update`" in BLOCK
    assert "[thatch] User decision model" in BLOCK and "[thatch] Situational behaviors" in BLOCK
