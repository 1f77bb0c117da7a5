"""The pages of ``thatch ui`` (docs/ui.md §pages): each a method taking the request (and a
checked form for changes) and returning a response. One class per page, in its own
module; ``Views`` is all of them over one ``Tools`` and CSRF token.
"""

from __future__ import annotations

from dataclasses import dataclass

from thatch.frontend.ui.chat_pages import ChatPages
from thatch.frontend.ui.duplicate_pages import DuplicatePages
from thatch.frontend.ui.engine_pages import EnginePages
from thatch.frontend.ui.memory_pages import MemoryPages
from thatch.frontend.ui.status_page import StatusPage

__all__ = ["Views"]


@dataclass
class Views(MemoryPages, DuplicatePages, EnginePages, ChatPages, StatusPage):
    """Every page of the ui (``app.py`` routes to its methods)."""
