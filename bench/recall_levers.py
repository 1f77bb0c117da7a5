"""Recall ranking levers of issue 24 that bench/recall_quality.py measures: pure functions
of text. None won on both dev sets, so the store does not use them (docs/database.md
§ranking); they stay here with their measurement.
"""

from __future__ import annotations

import re

# Words that make a sentence a question and carry no meaning a memory would hold.
_QUESTION_WORDS_TEXT = """what when where who whom whose which why how did does do is are was
were has have had can could will would should shall may might"""
QUESTION_WORDS = frozenset(_QUESTION_WORDS_TEXT.split())
_WORD = re.compile(r"\S+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def is_question(text: str) -> bool:
    words = text.split()
    return bool(words) and (
        text.rstrip().endswith("?") or words[0].lower().strip(",") in QUESTION_WORDS
    )


def question_core(text: str) -> str:
    """A question without its question words and mark ("What class did Maya start?" →
    "class Maya start"); any other text unchanged."""
    if not is_question(text):
        return text
    kept = [
        word
        for word in _WORD.findall(text.rstrip().rstrip("?"))
        if word.lower().strip(",.;:") not in QUESTION_WORDS
    ]
    return " ".join(kept) if kept else text


def chunks(content: str, max_chars: int) -> list[str]:
    """``content`` in pieces of at most about ``max_chars``, cut between paragraphs or
    sentences (a sentence longer than ``max_chars`` stays whole); one piece when short."""
    if len(content) <= max_chars:
        return [content]
    pieces: list[str] = []
    current = ""
    for sentence in (s.strip() for s in _SENTENCE_END.split(content)):
        if not sentence:
            continue
        if current and len(current) + 1 + len(sentence) > max_chars:
            pieces.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}" if current else sentence
    if current:
        pieces.append(current)
    return pieces
