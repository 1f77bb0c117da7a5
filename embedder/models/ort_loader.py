"""The one way thatch imports onnxruntime: with its telemetry off.

onnxruntime writes a device id and queued telemetry events under
``$XDG_CACHE_HOME/Microsoft`` from the moment it loads unless ``ORT_DISABLE_TELEMETRY`` is
set, so the variable is set before the first import (a user's own value wins), and the
events are switched off as well.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["load_onnxruntime"]


def load_onnxruntime() -> ModuleType:
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    onnxruntime.disable_telemetry_events()
    module: ModuleType = onnxruntime  # untyped package: mypy sees Any
    return module
