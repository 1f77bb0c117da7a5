"""Download just the files a hub model needs into the Hugging Face cache (docs/embedder.md
§resolution step 4).

One listing call (``/api/models/<id>/revision/<rev>``) pins the commit and tells which of
the required and optional files exist; each file then comes through ``hf_hub_download``
pinned to that commit, so the cache layout (blobs, snapshots, refs) is the library's own
and later runs find the snapshot offline. Each fetched file is then opened
(``download_check``): a broken one is removed from the cache, so that the next pull fetches
it again. Every failure becomes a one-line ModelError naming its cause.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from thatch.common.environment import Env, env_get
from thatch.common.error_text import first_line
from thatch.common.pip_line import pip_install
from thatch.common.shell_words import shell_quote
from thatch.embedder.client.errors import ModelError, ModelUnavailable
from thatch.embedder.client.model_names import (
    ONNX_CANDIDATES,
    REGISTRY,
    REQUIRED_FILES,
    HubRef,
    choose_onnx,
    hub_cache_dir,
    hub_endpoint,
    read_json,
)
from thatch.embedder.models.download_check import unusable_because
from thatch.embedder.models.registry import OPTIONAL_FILES, offline_error

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["download_checkpoint", "download_snapshot"]

FP32_REFERENCE = "onnx/model.onnx"


CHECKPOINT_FILES = (
    "model.safetensors",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "1_Pooling/config.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
)


# In a snapshot: a file of it was removed as damaged and not fetched again yet.
REFETCH_MARK = ".thatch-refetch"


def download_snapshot(ref: HubRef, *, env: Env, progress: bool = True) -> Path:
    """Fetch the needed files of ref; return the snapshot directory that now holds them."""
    pull = f"{ref.repo_id}@{ref.revision}" if ref.revision else ref.short_name or ref.repo_id
    with _listed(ref, env, progress, pull, mark=True) as (listed, fetch):
        for name in REQUIRED_FILES:
            if name not in listed:
                raise ModelError(f"model {ref.repo_id} on {hub_endpoint(env)} has no {name}")
        small = [name for name in (*REQUIRED_FILES, *OPTIONAL_FILES) if name in listed]
        paths = {name: fetch(name) for name in small}
        snapshot = paths["config.json"].parent
        meta = read_json(snapshot / "thatch_model.json")
        onnx = choose_onnx(meta, REGISTRY.get(ref.repo_id), listed & set(ONNX_CANDIDATES))
        if onnx is None:
            raise ModelError(
                f"model {ref.repo_id} on {hub_endpoint(env)} has no ONNX file "
                f"(looked for {', '.join(ONNX_CANDIDATES)})"
            )
        if onnx not in listed:
            raise ModelError(f"model {ref.repo_id} on {hub_endpoint(env)} has no {onnx}")
        fetch(onnx)
        if "quantized" in onnx and FP32_REFERENCE in listed:
            fetch(FP32_REFERENCE)  # the embedder checks the int8 file against it at load
    (snapshot / REFETCH_MARK).unlink(missing_ok=True)  # every file fetched and checked
    return snapshot


def download_checkpoint(ref: HubRef, *, env: Env, pull: str, progress: bool = True) -> Path:
    """Fetch the files ``thatch model import`` reads from ref's checkpoint (its weights in
    safetensors, not an ONNX file); return the snapshot directory. ``pull`` is the name
    ``thatch model pull`` downloads it again with."""
    with _listed(ref, env, progress, pull, mark=False) as (listed, fetch):
        for name in (*REQUIRED_FILES, "model.safetensors"):
            if name not in listed:
                raise ModelError(f"model {ref.repo_id} on {hub_endpoint(env)} has no {name}")
        paths = [fetch(name) for name in (*REQUIRED_FILES, *CHECKPOINT_FILES) if name in listed]
    return paths[0].parent


@contextmanager
def _listed(
    ref: HubRef, env: Env, progress: bool, pull: str, *, mark: bool
) -> Iterator[tuple[set[str], Callable[[str], Path]]]:
    """The repo's file names at the pinned commit, and a fetch of one of them into the hub
    cache that refuses a broken file; errors translated, and the revision recorded for
    offline lookups after."""
    from huggingface_hub import HfApi, hf_hub_download

    endpoint = hub_endpoint(env)
    cache_dir = hub_cache_dir(env)
    revision = ref.revision or "main"
    bar = progress_bar_class(enabled=progress)
    with _quiet_library_log(env), hub_errors(ref, endpoint):
        info = HfApi(endpoint=endpoint).model_info(ref.repo_id, revision=revision)
        commit = info.sha or revision
        listed = {sibling.rfilename for sibling in info.siblings or []}

        def fetch(filename: str) -> Path:
            path = Path(
                hf_hub_download(
                    ref.repo_id,
                    filename,
                    revision=commit,
                    cache_dir=str(cache_dir),
                    endpoint=endpoint,
                    tqdm_class=bar,
                )
            )
            _refuse_if_broken(ref, filename, path, pull, mark=mark)
            return path

        yield listed, fetch
    if revision != commit:
        _write_ref(cache_dir, ref.repo_id, revision, commit)


def drop_damaged(snapshot: Path) -> list[str]:
    """Remove the cached files of ``snapshot`` that do not parse (their link and blob, as
    ``_refuse_if_broken`` does): the names removed, which the next download fetches."""
    dropped = []
    for path in sorted(snapshot.rglob("*")):
        if path.is_file():
            unusable = unusable_because(path)
            if unusable is not None and unusable.damaged:
                _remove_cached(path, snapshot)
                dropped.append(str(path.relative_to(snapshot)))
    return dropped


def _remove_cached(path: Path, snapshot: Path, *, mark: bool = True) -> None:
    """``path``'s link in ``snapshot`` and the blob it points to, if that blob is the
    cache's own (``<repo>/blobs``): a link pointing anywhere else is only unlinked. The
    snapshot is marked (``mark``), so that the next pull fetches again even a file the
    snapshot resolves without (an optional one). A checkpoint's fetch does not mark: only
    the model's own download clears the mark, and the checkpoint's files are fetched
    again by its next pull anyway (its import needs each of them)."""
    blobs = snapshot.parent.parent / "blobs"
    target = path.resolve()
    if target.is_relative_to(blobs.resolve()):
        target.unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    if mark:
        (snapshot / REFETCH_MARK).touch()


def _upgrade_fix() -> str:
    """The fix for a file this onnxruntime or tokenizers cannot use: the pip line last,
    so the whole line pastes without prose becoming pip's arguments."""
    return (
        "use another model; or to upgrade onnxruntime and tokenizers: "
        f"{pip_install('-U', 'onnxruntime', 'tokenizers')}"
    )


def _refuse_if_broken(ref: HubRef, name: str, path: Path, pull: str, *, mark: bool) -> None:
    """A fetched file that does not open is an error. A damaged one (it does not parse)
    leaves the cache: its blob and its link in the snapshot, since huggingface_hub trusts
    any file present; the next pull fetches it alone. Only its own link: the snapshot of
    one repo and commit is shared (all-MiniLM-L6-v2-code's checkpoint beside the ONNX
    model of the same repo), and the other files may be in use."""
    unusable = unusable_because(path)
    if unusable is None:
        return
    if unusable.kind == "unsupported":
        raise ModelError(
            f"downloaded {name} of model {ref.repo_id} cannot be used here: {unusable.why}",
            fix=_upgrade_fix(),
        )
    if unusable.kind == "unreadable":
        raise ModelError(
            f"downloaded {name} of model {ref.repo_id} {unusable.why}",
            fix=f"check {path} and the disk it is on, then pull it again: thatch model pull "
            f"{shell_quote(pull)}",
        )
    _remove_cached(path, path.parents[len(Path(name).parts) - 1], mark=mark)
    raise ModelError(
        f"downloaded {name} of model {ref.repo_id} is broken: {unusable.why}; "
        "removed it from the cache",
        fix="download it again (if it fails the same way, the hub's own copy is broken): "
        f"thatch model pull {shell_quote(pull)}",
    )


def _write_ref(cache_dir: Path, repo_id: str, revision: str, commit: str) -> None:
    """Record revision -> commit like huggingface_hub does, so offline lookups find it."""
    ref_path = cache_dir / ("models--" + repo_id.replace("/", "--")) / "refs" / revision
    ref_path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=ref_path.parent, prefix=".ref-")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(commit)
    os.replace(tmp, ref_path)


@contextmanager
def _quiet_library_log(env: Env) -> Iterator[None]:
    """huggingface_hub's own warnings (a line per retry of a failing request) off for the
    call: they went to stderr ahead of thatch's one-line error. HF_HUB_VERBOSITY, when set,
    still wins."""
    if env_get(env, "HF_HUB_VERBOSITY"):
        yield
        return
    library = logging.getLogger("huggingface_hub")
    level = library.level
    library.setLevel(logging.ERROR)
    try:
        yield
    finally:
        library.setLevel(level)


def progress_bar_class(*, enabled: bool) -> type[tqdm[Any]]:
    """A plain tqdm on stderr: huggingface_hub's own hides itself when stderr is no TTY."""
    from tqdm import tqdm

    class DownloadBar(tqdm):  # type: ignore[type-arg]  # generic in the stubs only
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            kwargs["disable"] = not enabled
            super().__init__(*args, **kwargs)

    return DownloadBar


@contextmanager
def hub_errors(ref: HubRef, endpoint: str) -> Iterator[None]:
    """Translate huggingface_hub / httpx / OS errors into one-line ModelErrors."""
    from huggingface_hub import errors

    model = ref.repo_id
    rev = ref.revision or "main"
    try:
        yield
    except ModelError:
        raise
    except errors.OfflineModeIsEnabled:
        raise offline_error(model) from None
    except errors.GatedRepoError:
        raise ModelError(
            f"model {model} is gated on {endpoint}: accept its terms there and set HF_TOKEN"
        ) from None
    except errors.RepositoryNotFoundError:
        raise ModelError(
            f"model {model} was not found on {endpoint} (a private model needs HF_TOKEN)"
        ) from None
    except errors.RevisionNotFoundError:
        raise ModelError(f"revision {rev} of model {model} was not found on {endpoint}") from None
    except errors.RemoteEntryNotFoundError as error:
        raise ModelError(
            f"downloading model {model} failed{_file_of(error)}: {first_line(error)}"
        ) from None
    except errors.HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else "?"
        raise ModelError(
            f"downloading model {model} from {endpoint} failed{_file_of(error)}: HTTP {status}"
            f" ({first_line(error)})"
        ) from None
    except errors.LocalEntryNotFoundError as error:
        cause = error.__cause__ or error.__context__ or error
        raise ModelUnavailable(
            f"cannot download model {model} from {endpoint}: {first_line(cause)}"
        ) from None
    except OSError as error:
        raise ModelError(f"downloading model {model} failed: {first_line(error)}") from None
    except Exception as error:  # httpx connection errors and anything unforeseen
        raise ModelUnavailable(
            f"cannot download model {model} from {endpoint}: "
            f"{type(error).__name__}: {first_line(error)}"
        ) from None


def _file_of(error: BaseException) -> str:
    """`` at <file>`` when the failed request was for one of the model's files."""
    response = getattr(error, "response", None)
    url = str(getattr(response, "url", "") or "")
    _, marker, rest = url.partition("/resolve/")
    name = rest.partition("/")[2].partition("?")[0] if marker else ""
    return f" at {unquote(name)}" if name else ""
