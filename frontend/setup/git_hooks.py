"""``thatch setup --git-hooks``: optional git hooks that tell thatch a ref moved
(docs/database.md §branch-lifecycle).

Each hook is a few lines of shell built-ins that append one line to ``thatch-events`` in
the repository's common git dir and always exit 0: a git command never waits on thatch
or fails because of it. thatch never depends on them: the file joins the refs'
fingerprint, so an event makes the next prompt sync even where ref files' times say
nothing (a reftable repository, a file system with coarse times), and the session
start re-checks the code anchors on the files a checkout, merge or rewrite changed
(``frontend/anchors/events.py``; docs/tools.md §code-anchors).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from thatch.frontend.git_refs import EVENTS_FILE, common_dir
from thatch.frontend.project import git_result

__all__ = ["HOOKS", "MARKER", "GitHooksError", "HookOutcome", "install_git_hooks", "script"]

HOOKS = ("post-checkout", "post-merge", "post-rewrite", "reference-transaction")
MARKER = "# thatch: branch memory follows git"


class GitHooksError(ValueError):
    """Not a git repository, git cannot say where its hooks live, or they live where
    thatch's hooks do not belong; ``fix`` says what to do, when there is something."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class HookOutcome:
    hook: str
    path: Path
    status: str  # written | unchanged | refused (someone else's hook)

    def line(self) -> str:
        from thatch.frontend.untrusted import inline

        # A checkout's path can hold a newline or an escape: shown as data.
        path = inline(str(self.path))
        if self.status == "refused":
            return (
                f"git hook {self.hook}: left alone, {path} is not thatch's "
                "(thatch works without it)"
            )
        return f"git hook {self.hook}: {self.status} {path}"


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def script(hook: str, events: Path) -> str:
    """The hook's text: shell built-ins only (no process is started), exit 0 always.

    The checkout, merge and rewrite hooks write ``<hook> <old> <new> <worktree>``
    (``frontend/anchors/events.py``; ``-`` for a commit the hook is not told): git runs
    a hook at the top of the worktree, and post-merge reads ORIG_HEAD (the commit before
    the merge) from the worktree's git dir, ``$GIT_DIR`` when git sets it (a linked
    worktree), else ``.git`` (a directory, or a file naming it)."""
    target = _quoted(events)
    line = 'printf "%s %s %s %s\\n" ' + hook + ' "${o:--}" "${n:--}" "$PWD" >>' + target
    if hook == "reference-transaction":
        body = (
            '[ "$1" = committed ] || exit 0\n'
            "{ while read -r _old new ref; do "
            f'printf "%s %s %s\\n" {hook} "$ref" "$new"; done >>{target}; }} 2>/dev/null\n'
        )
    elif hook == "post-checkout":
        body = f"{{ o=$1 n=$2; {line}; }} 2>/dev/null\n"
    elif hook == "post-merge":
        body = (
            '{ g=${GIT_DIR:-.git}; [ -f "$g" ] && read -r _ g <"$g"; o=-; n=-; '
            f'read -r o <"$g/ORIG_HEAD"; {line}; }} 2>/dev/null\n'
        )
    elif hook == "post-rewrite":
        # stdin: "<old> <new>" per rewritten commit; the first one's old is the earliest.
        body = (
            "{ o=-; n=-; read -r o _rest; while read -r _line; do :; done; "
            f"{line}; }} 2>/dev/null\n"
        )
    else:
        body = f'{{ printf "%s %s\\n" {hook} "$*" >>{target}; }} 2>/dev/null\n'
    return (
        f"#!/bin/sh\n{MARKER} (written by `thatch setup --git-hooks`; safe to delete).\n"
        "# It only appends a line for thatch to notice and never fails the git command.\n"
        f"{body}exit 0\n"
    )


def hooks_dir(directory: Path, env: Mapping[str, str] | None) -> Path:
    """Where git runs hooks from (``core.hooksPath`` included), for ``directory``."""
    result = git_result(directory, env, "rev-parse", "--git-path", "hooks")
    if result is None or result.returncode != 0:
        raise GitHooksError(f"{directory} is not in a git repository")
    text = result.stdout.decode("utf-8", "replace").strip()
    path = Path(text)
    return path if path.is_absolute() else directory / path


def _refuse_shared(
    directory: Path, env: Mapping[str, str] | None, where: Path, common: Path
) -> None:
    """Hooks only in this clone's git directory: ``core.hooksPath`` elsewhere is a folder
    others run too, one committed with the project (``.husky``: every teammate's clone
    would run hooks naming this clone's ``thatch-events``) or one set in the user's git
    configuration for every repository (their events would all land in this clone's
    file). A relative ``.git/hooks`` read in a linked worktree, whose ``.git`` is a file,
    names no folder at all. The hooks are optional, so none is written there."""
    from thatch.common.shell_words import shell_quote
    from thatch.frontend.untrusted import quoted

    if Path(os.path.realpath(where)).is_relative_to(common):
        return
    nothing = "nothing is needed, thatch notices branch changes without these hooks"
    own = shell_quote(str(common / "hooks"))
    points = f"core.hooksPath points at {quoted(str(where))}"
    if any(p.name == ".git" and p.is_file() for p in (where, *where.parents)):
        raise GitHooksError(
            f"{points}, inside this linked worktree's .git, which is a file: no hook can be "
            "there (git runs none from it), so none were written",
            f"{nothing}; to have them, name the hooks folder by its absolute path (git "
            f"config core.hooksPath {own}) and rerun thatch setup --git-hooks",
        )
    local = git_result(directory, env, "config", "--local", "--get", "core.hooksPath")
    if local is None or local.returncode != 0 or not local.stdout.strip():
        raise GitHooksError(
            f"{points}, set in your git configuration rather than this clone's: every "
            "repository runs hooks there, and thatch's name this clone's files, so none "
            "were written",
            f"{nothing}; to have them, give this clone its own hooks folder (git config "
            f"core.hooksPath {own}; this clone then runs none of the hooks in "
            f"{quoted(str(where))}) and rerun thatch setup --git-hooks",
        )
    raise GitHooksError(
        f"{points}, outside this clone's git directory {quoted(str(common))}: hooks there "
        "are shared (committed with the project, or run by every repository), and "
        "thatch's name this clone's files, so none were written",
        f"{nothing}; to have them, unset core.hooksPath for this clone (git config --unset "
        "core.hooksPath, if no hook manager needs it) and rerun thatch setup --git-hooks",
    )


def install_git_hooks(
    directory: Path, env: Mapping[str, str] | None = None, *, dry_run: bool = False
) -> list[HookOutcome]:
    """Write thatch's four hooks; a hook file that is not thatch's is never touched."""
    directory = Path(os.path.abspath(directory))
    common = common_dir(directory)
    if common is None:
        raise GitHooksError(f"{directory} is not in a git repository")
    events = Path(os.path.realpath(common)) / EVENTS_FILE
    where = hooks_dir(directory, env)
    _refuse_shared(directory, env, where, Path(os.path.realpath(common)))
    outcomes = []
    for hook in HOOKS:
        path = where / hook
        text = script(hook, events)
        try:
            old = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            old = None
        except (OSError, UnicodeDecodeError):
            old = ""  # unreadable: someone else's
        if old is not None and MARKER not in old:
            outcomes.append(HookOutcome(hook, path, "refused"))
            continue
        if old == text and os.access(path, os.X_OK):
            outcomes.append(HookOutcome(hook, path, "unchanged"))
            continue
        if not dry_run:
            where.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{hook}.thatch.tmp")
            temporary.write_text(text, encoding="utf-8")
            temporary.chmod(temporary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            os.replace(temporary, path)
        outcomes.append(HookOutcome(hook, path, "written"))
    return outcomes
