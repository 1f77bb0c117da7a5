"""Capturing anchors at save: the file's blob id, the span's hash, the commit.

Runs on a save, never on a recall: it may ask git (top level, HEAD) once per save.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from thatch.frontend.anchors.span import blob_id_of, lines_of, locate_symbol, span_hash
from thatch.frontend.anchors.spec import MAX_ANCHORS, AnchorSpec, parse_anchor
from thatch.frontend.regular_files import open_regular
from thatch.frontend.store.anchor_queries import Anchor

__all__ = ["AnchorProblem", "capture_anchors"]

# Larger files are anchored by blob id alone.
MAX_FILE_BYTES = 2 * 1024 * 1024


class AnchorProblem(ValueError):
    """An anchor that cannot be captured; ``str`` is the reason, naming the anchor."""


def capture_anchors(
    texts: Sequence[str], project_dir: Path, env: Mapping[str, str] | None = None
) -> list[Anchor]:
    """The anchors ``texts`` name, relative paths resolved against ``project_dir``;
    raises AnchorProblem for the first one that names no readable file, symbol or span."""
    if len(texts) > MAX_ANCHORS:
        raise AnchorProblem(f"at most {MAX_ANCHORS} anchors ({len(texts)} given)")
    specs = []
    for text in texts:
        try:
            specs.append(parse_anchor(text))
        except ValueError as error:
            raise AnchorProblem(f"{text!r}: {error}") from None
    tops: dict[Path, tuple[str, str | None]] = {}
    return [_capture(spec, project_dir, env, tops) for spec in specs]


def _refusal(file: Path, project_dir: Path, env: Mapping[str, str] | None) -> str | None:
    """Why ``file`` (resolved) is no anchor: code outside the project is not this
    project's, and thatch's own database must never be opened by a process holding it."""
    from thatch.common.environment import default_db_path
    from thatch.frontend.anchors.check import database_files

    root = Path(os.path.realpath(project_dir))
    if not file.is_relative_to(root):
        return f"outside the project ({root}); anchors name the project's code"
    if str(file) in database_files(default_db_path(os.environ if env is None else env)):
        return "thatch's own database, not code"
    return None


def _capture(
    spec: AnchorSpec,
    project_dir: Path,
    env: Mapping[str, str] | None,
    tops: dict[Path, tuple[str, str | None]],
) -> Anchor:
    file = Path(os.path.realpath(project_dir / spec.path))
    refused = _refusal(file, project_dir, env)
    if refused is not None:
        raise AnchorProblem(f"{spec.path!r}: {refused}")
    spanned = spec.symbol is not None or spec.lines is not None
    try:
        with open_regular(file) as handle:
            stat = os.fstat(handle.fileno())
            if spanned and stat.st_size > MAX_FILE_BYTES:
                raise AnchorProblem(f"{spec.path!r}: too large for a span; anchor the file")
            # A large file is hashed as it is read: its content is never held whole.
            blob, content = blob_id_of(handle, stat.st_size, keep=MAX_FILE_BYTES)
    except OSError as error:
        raise AnchorProblem(f"{spec.path!r}: {error.strerror or error}") from None
    symbol, line_start, line_end, digest = None, None, None, None
    if spanned:
        lines = lines_of(content)
        if spec.symbol is not None:
            found = locate_symbol(lines, spec.symbol)
            if found is None:
                raise AnchorProblem(f"{spec.path!r}: no symbol {spec.symbol!r} found")
            symbol = spec.symbol
            digest = span_hash(lines[found[0] : found[1] + 1])
        elif spec.lines is not None:
            line_start, line_end = spec.lines
            if line_end > len(lines):
                raise AnchorProblem(
                    f"{spec.path!r}: lines {line_start}-{line_end} past its end ({len(lines)})"
                )
            digest = span_hash(lines[line_start - 1 : line_end])
    root, commit = _git_place(file.parent, env, tops)
    path = file.relative_to(root).as_posix() if root else str(file)
    return Anchor(
        store="",
        slug="",
        seq=0,
        root=root,
        path=path,
        symbol=symbol,
        line_start=line_start,
        line_end=line_end,
        blob=blob,
        span_hash=digest,
        commit_id=commit,
        mtime_ns=stat.st_mtime_ns,
        size=stat.st_size,
    )


def _git_place(
    directory: Path, env: Mapping[str, str] | None, tops: dict[Path, tuple[str, str | None]]
) -> tuple[str, str | None]:
    """(git top level, HEAD commit) of ``directory``; ("", None) outside git."""
    if directory not in tops:
        from thatch.frontend.project import run_git

        top = run_git(directory, env, "rev-parse", "--show-toplevel")
        if not top:
            tops[directory] = ("", None)
        else:
            head = run_git(directory, env, "rev-parse", "--verify", "--quiet", "HEAD")
            tops[directory] = (os.path.realpath(top), head)
    root, commit = tops[directory]
    if root and not (str(directory) + os.sep).startswith(root.rstrip(os.sep) + os.sep):
        return "", None
    return root, commit
