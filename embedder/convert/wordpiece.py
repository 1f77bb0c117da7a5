"""Build a ``tokenizer.json`` for a BERT checkpoint that ships only ``vocab.txt``.

The result behaves like Hugging Face's ``BertTokenizerFast`` converted from the same files:
BertNormalizer (lowercasing per ``do_lower_case``), BertPreTokenizer, WordPiece with ``##``
continuation, ``[CLS] … [SEP]`` added around every text, special tokens never split or
lowercased.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from thatch.embedder.client.errors import ModelError

__all__ = ["build_wordpiece_tokenizer"]

_SPECIAL_DEFAULTS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


def read_vocab(path: Path) -> dict[str, int]:
    """token -> id, one token per line, as BertTokenizer reads it (later duplicates win)."""
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ModelError(f"{path} is not UTF-8 text") from None
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vocab = {token: index for index, token in enumerate(lines)}
    if not vocab:
        raise ModelError(f"{path} is empty")
    return vocab


def _token_text(value: object) -> str | None:
    # tokenizer_config.json stores special tokens as strings or as AddedToken dicts.
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def special_tokens(tokenizer_config: Mapping[str, Any]) -> dict[str, str]:
    """The five BERT special tokens, from tokenizer_config / special_tokens_map or defaults."""
    found = dict(_SPECIAL_DEFAULTS)
    for key in _SPECIAL_DEFAULTS:
        text = _token_text(tokenizer_config.get(key))
        if text:
            found[key] = text
    return found


def build_wordpiece_tokenizer(vocab_path: Path, tokenizer_config: Mapping[str, Any]) -> Tokenizer:
    """A BERT WordPiece tokenizer from ``vocab.txt`` and the tokenizer_config.json settings."""
    vocab = read_vocab(vocab_path)
    specials = special_tokens(tokenizer_config)
    for role in ("unk_token", "cls_token", "sep_token", "pad_token"):
        if specials[role] not in vocab:
            raise ModelError(f"{vocab_path} lacks the {role} {specials[role]!r}")
    lowercase = bool(tokenizer_config.get("do_lower_case", True))
    strip_accents = tokenizer_config.get("strip_accents")
    tokenizer = Tokenizer(
        models.WordPiece(vocab=vocab, unk_token=specials["unk_token"], max_input_chars_per_word=100)
    )
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(tokenizer_config.get("tokenize_chinese_chars", True)),
        strip_accents=strip_accents if isinstance(strip_accents, bool) else None,
        lowercase=lowercase,
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = specials["cls_token"], specials["sep_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    # Sorted by id so added_tokens lists them in vocabulary order, like HF's converter.
    present = sorted({t for t in specials.values() if t in vocab}, key=vocab.__getitem__)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in present])
    tokenizer.enable_padding(pad_id=vocab[specials["pad_token"]], pad_token=specials["pad_token"])
    return tokenizer
