"""Errors of the embedder package, each with a message meant for people.

    ThatchEmbedderError
     ├── ModelError            a model cannot be resolved, downloaded, loaded or imported;
     │    │                    ``fix`` names what to type, when known
     │    └── ModelUnavailable  not on this machine and the hub cannot be asked (offline,
     │         │                unreachable): the fix is import / use, not pull
     │         └── ModelNotBuilt  a model thatch builds (checkpoint + shipped adapter) is
     │                            not built yet: the fix is its pull, or offline its import
     ├── AddressError          THATCH_EMBEDDER_ADDR / --listen is malformed, socket path too long
     ├── ServerStartError      a server cannot start (already running, directory not ours)
     ├── EmbedderUnavailable   a frontend cannot get vectors: "<cause>. Fix: <fix>"
     │    └── EmbedderUntrusted  the socket or its listener is not the current user's:
     │                           nothing was sent (memories are saved as pending)
     └── EmbedRequestError     the embedder refused the request itself (INVALID_ARGUMENT):
                               retrying cannot help; also a ValueError

The CLI turns every one of them into ``click.ClickException``; the MCP tool layer into an
``isError`` result. None of them carries a traceback to the user.
"""

from __future__ import annotations

from thatch.common.shell_words import shell_quote

__all__ = [
    "ALREADY_RUNNING_FIX",
    "FIX_OVERLOADED",
    "FIX_REMOTE",
    "FIX_START",
    "FIX_STARTING",
    "IMPORT_CHECKPOINT",
    "AddressError",
    "EmbedRequestError",
    "EmbedderUnavailable",
    "EmbedderUntrusted",
    "ModelError",
    "ModelNotBuilt",
    "ModelUnavailable",
    "ServerStartError",
    "ThatchEmbedderError",
    "fix_offline",
]


class ThatchEmbedderError(Exception):
    """Base class: ``str(error)`` is a complete one-line message."""


class ModelError(ThatchEmbedderError):
    """``fix``, when known, is what to type to get a usable model on this machine."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


class ModelUnavailable(ModelError):
    pass


class ModelNotBuilt(ModelUnavailable):
    """A model thatch builds here (a checkpoint with a shipped adapter) that is not built
    yet: ``model_id`` is its id, ``short_name`` what ``thatch model pull`` takes."""

    def __init__(self, message: str, model_id: str, short_name: str) -> None:
        super().__init__(message, fix=f"thatch model pull {short_name}")
        self.model_id = model_id
        self.short_name = short_name


class AddressError(ThatchEmbedderError):
    pass


ALREADY_RUNNING_FIX = (
    "nothing to do, every agent and command shares it; to see it: thatch embedder status; "
    "or to restart it, stop it first: thatch embedder stop"
)


class ServerStartError(ThatchEmbedderError):
    """``fix``, when known, is what to type so that a server can start (or need not)."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


class EmbedderUnavailable(ThatchEmbedderError):
    """The embedding service cannot be used; ``cause`` and ``fix`` per docs/tools.md
    §embedder-unavailable."""

    def __init__(self, cause: str, fix: str) -> None:
        self.cause = cause.rstrip(".")
        self.fix = fix
        super().__init__(f"{self.cause}. Fix: {fix}")


class EmbedderUntrusted(EmbedderUnavailable):
    """A unix socket (or its directory, or the process behind it) is not ours: no text sent.

    An ``EmbedderUnavailable``, so every frontend treats it as an outage: a memory is saved
    without its vector (pending), a hook stays silent.
    """


class EmbedRequestError(ThatchEmbedderError, ValueError):
    """The texts or kind sent were invalid (empty, too many, too long ...); not an outage."""


FIX_START = "run thatch embedder start"
FIX_STARTING = "retry in a minute, or run thatch embedder status"
FIX_REMOTE = "check THATCH_EMBEDDER_ADDR and that the remote embedder is running"
FIX_OVERLOADED = "retry shortly"
# A checkpoint of one's own: where it is and the id its import gives are not known here,
# so the prose names both placeholders (the import prints its id, in a model use line).
IMPORT_CHECKPOINT = (
    "import a sentence-transformers checkpoint (DIR: its directory) and use the id the import "
    "prints (ID): thatch model import DIR && thatch model use ID"
)


def fix_offline(model_id: str) -> str:
    """The offline fix when nothing better is known (the server's own Fix line is better:
    it knows which local models exist, see thatch.embedder.models.fixes). The import keeps
    the id ``model_id``, so the embedder finds it there: no other model comes in."""

    named = shell_quote(model_id)
    return (
        f"on a connected machine: thatch model pull {named}; or import it from a copy of its "
        f"checkpoint (DIR): thatch model import DIR --model-id {named}"
    )
