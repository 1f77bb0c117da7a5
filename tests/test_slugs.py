"""slugify per docs/database.md §slugs: the rules, the spec's examples, the whitespace set, the
hash."""

from __future__ import annotations

import numpy as np
import pytest

from thatch.frontend.store.slugs import slugify

SPEC_WHITESPACE = [
    *range(0x09, 0x0E),
    0x20,
    0xA0,
    0x1680,
    *range(0x2000, 0x200B),
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
    0xFEFF,
]


def reference_hash_slug(label: str) -> str:
    """Independent statement of rule 5 (Python ints, numpy's base_repr)."""
    value = 0
    for char in label:
        value = (value * 31 + ord(char)) & 0xFFFFFFFF
    return "x" + np.base_repr(value, 36).lower()


@pytest.mark.parametrize(
    ("label", "slug"),
    [
        ("Build & Test", "build-test"),
        ("  Ünïcode Label ", "ünïcode-label"),
        ("日本語 メモ", "日本語-メモ"),
        ("!!!", "xpa9"),
        ("a - b", "a-b"),
        ("", "x0"),
    ],
)
def test_spec_examples(label: str, slug: str) -> None:
    """The examples of docs/database.md §slugs, verbatim (plus the empty label giving x0)."""
    assert slugify(label) == slug


def test_hash_example_arithmetic() -> None:
    """'!!!' hashes to 33·31² + 33·31 + 33 = 32769 = 'pa9' in base 36."""
    assert 33 * 31**2 + 33 * 31 + 33 == 32769 == int("pa9", 36)


@pytest.mark.parametrize("code", SPEC_WHITESPACE)
def test_every_spec_whitespace_character_separates_words(code: int) -> None:
    """Each whitespace code point of the spec becomes a hyphen and is stripped at the ends."""
    space = chr(code)
    assert slugify(f"{space}alpha{space}{space}beta{space}") == "alpha-beta"


@pytest.mark.parametrize("code", [0x85, 0x1C, 0x200B, 0x180E, 0x2060])
def test_other_space_like_characters_are_deleted_not_hyphenated(code: int) -> None:
    """Characters Python calls space but the spec does not (NEL, FS, ZWSP...) just vanish."""
    assert slugify(f"alpha{chr(code)}beta") == "alphabeta"


@pytest.mark.parametrize(
    ("label", "slug"),
    [
        ("snake_case name", "snake_case-name"),
        ("-edge-", "-edge-"),
        ("a--b---c", "a-b-c"),
        ("v2.0 release", "v20-release"),
        ("a & - & b", "a-b"),
        ("Ⅻ ٣ ²", "ⅻ-٣-²"),
        ("Ñandú!", "ñandú"),
        ("tab\tand\nnewline", "tab-and-newline"),
    ],
)
def test_kept_characters_and_hyphen_rules(label: str, slug: str) -> None:
    """Letters, numbers, _ and - survive; runs of - collapse; edge hyphens stay."""
    assert slugify(label) == slug


def test_case_and_punctuation_variants_are_one_memory() -> None:
    """Labels differing only in case or punctuation share a slug."""
    assert slugify("Deploy: Steps!") == slugify("deploy steps") == slugify("DEPLOY — STEPS")


@pytest.mark.parametrize("label", ["   ", "\u3000", "?!*", "@" * 200, "—·—", "🙂🙂"])
def test_all_symbol_labels_hash_the_original_unstripped_label(label: str) -> None:
    """Empty results hash every code point of the original label, wrapping at 2**32."""
    assert slugify(label) == reference_hash_slug(label)
    assert slugify(f" {label} ") == reference_hash_slug(f" {label} ") != slugify(label)


def test_hash_distinguishes_surrounding_whitespace() -> None:
    """' !' and '!' differ: the hash covers the unstripped label."""
    assert slugify(" !") != slugify("!")
    assert slugify("   ") == "x" + np.base_repr(32 * 31**2 + 32 * 31 + 32, 36).lower()


def test_huge_label_is_handled() -> None:
    """A megabyte label slugifies without error."""
    assert slugify("word " * 200_000) == "-".join(["word"] * 200_000)
