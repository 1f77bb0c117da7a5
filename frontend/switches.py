"""Per-project switches for thatch's optional parts (docs/tools.md §switches).

``THATCH_ENGINES=off`` and ``THATCH_CHAT=off`` turn the engines (predictions, behaviors)
and chat off: their tool leaves ``tools/list`` and the hooks print none of their lines.
A project sets the variable in thatch's MCP entry (setup keeps it there). Hosts pass an
MCP entry's environment to the server alone, so setup also writes ``--off=FEATURES`` on
thatch's hook commands, which set the same variables in the hook's process. Standard
library only: hooks and the MCP quick start read it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

__all__ = [
    "FEATURES",
    "OFF_OPTION",
    "apply_off_args",
    "features_off",
    "is_on",
    "off_args",
    "variable",
]


FEATURES = ("engines", "chat")
_OFF = frozenset({"off", "0", "false", "no"})
OFF_OPTION = "--off="


def variable(feature: str) -> str:
    return f"THATCH_{feature.upper()}"


def features_off(env: Mapping[str, str]) -> frozenset[str]:
    """The features ``env`` switches off."""
    return frozenset(
        feature for feature in FEATURES if env.get(variable(feature), "").strip().lower() in _OFF
    )


def is_on(env: Mapping[str, str], feature: str) -> bool:
    return feature not in features_off(env)


def off_args(off: frozenset[str]) -> list[str]:
    """The hook command's arguments for the features ``off`` (none when all are on)."""
    return [OFF_OPTION + ",".join(sorted(off))] if off else []


def apply_off_args(args: list[str], environ: MutableMapping[str, str]) -> None:
    """A hook's ``--off=engines,chat`` as the switch variables in ``environ``; unknown
    feature names are ignored (hooks never fail on their command line)."""
    for arg in args:
        if arg.startswith(OFF_OPTION):
            for feature in arg[len(OFF_OPTION) :].split(","):
                if feature.strip() in FEATURES:
                    environ[variable(feature.strip())] = "off"
