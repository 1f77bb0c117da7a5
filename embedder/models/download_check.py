"""Cheap checks of downloaded model files before a pull calls the model ready
(docs/embedder.md §resolution).

huggingface_hub checks a file's size against what the hub announced, not its content: a
hub or proxy serving a cut-off ONNX file, or an HTML page as tokenizer.json, leaves a
snapshot the library calls complete, so pulling again fetched nothing. Each file is
opened the way thatch opens it later: JSON parsed, tokenizer.json by tokenizers, an ONNX
file as an onnxruntime session without graph optimisations (a tenth of a second for
MiniLM), a safetensors file by its header, which must cover the file's tensors.

Only a file that does not parse is damaged (and removed, so the next pull fetches it
again). A whole file this machine's onnxruntime or tokenizers cannot use (a newer opset,
an unknown tokenizer type) is not: fetching it again cannot help, and would each time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from thatch.common.error_text import first_line
from thatch.embedder.client.errors import ModelError

__all__ = ["Unusable", "unusable_because"]


@dataclass(frozen=True)
class Unusable:
    """Why a downloaded file cannot be used. ``kind``: "damaged" (it does not parse: fetch
    it again), "unsupported" (whole, but this machine's onnxruntime or tokenizers cannot
    use it) or "unreadable" (the file system refused it)."""

    why: str
    kind: str

    @property
    def damaged(self) -> bool:
        return self.kind == "damaged"


class _Unsupported(ModelError):
    """A whole file this machine's library cannot use."""


# What onnxruntime says of a whole model it cannot run, as opposed to one that is cut off
# or empty ("Protobuf parsing failed", "No graph was found", "Missing opset"): a file is
# unsupported only on this evidence, damaged otherwise.
_NEWER_ONNX = (
    "NOT_IMPLEMENTED",
    "IR version",
    "under development",
    "support for domain",
    "No Op registered",
    "is not a registered function/op",  # a newer com.microsoft or contrib operator
)
# The C++ source place and signature onnxruntime puts before some messages.
_SOURCE_PLACE = re.compile(r"^/\S+:\d+ .*?\) (?=[A-Z])")


def unusable_because(path: Path) -> Unusable | None:
    """Why the downloaded file at path cannot be used, or None when it opens fine."""
    try:
        if path.name == "tokenizer.json":
            _open_tokenizer(path)
        elif path.suffix == ".json":
            _open_json(path)
        elif path.suffix == ".onnx":
            _open_onnx(path)
        elif path.suffix == ".safetensors":
            _open_safetensors(path)
    except _Unsupported as error:
        return Unusable(str(error), "unsupported")
    except ModelError as error:
        return Unusable(str(error), "damaged")
    except OSError as error:
        return Unusable(f"cannot read it: {error.strerror or error}", "unreadable")
    return None


def _open_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer

    _parse_json(path)  # not JSON: damaged; JSON tokenizers refuses: a newer format
    try:
        Tokenizer.from_file(str(path))
    except Exception as error:  # the tokenizers library raises bare Exceptions
        raise _Unsupported(f"tokenizers cannot read it ({first_line(error)})") from None


def _open_json(path: Path) -> None:
    from thatch.embedder.client.model_names import JSON_MAX_BYTES

    size = path.stat().st_size
    if size > JSON_MAX_BYTES:  # read_json refuses it later: a model's JSON file is small
        raise ModelError(f"{size:,} bytes, too big for a model's JSON file")
    _parse_json(path)


def _parse_json(path: Path) -> None:
    """Any size: a multilingual tokenizer.json passes 16 MiB, and tokenizers reads it."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # UnicodeDecodeError is one too
        raise ModelError(f"not JSON ({error})") from None
    except RecursionError:
        raise ModelError("nests too deeply to be JSON thatch reads") from None


def _open_onnx(path: Path) -> None:
    from thatch.embedder.models.ort_loader import load_onnxruntime

    ort = load_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: a warning would clutter the pull's stderr
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own unexported exception types
        # "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from <path> failed:<why>"
        first = first_line(error)
        why = first.rpartition(" failed:")[2].strip() or type(error).__name__
        why = _SOURCE_PLACE.sub("", why)
        if any(sign in first for sign in _NEWER_ONNX):
            raise _Unsupported(f"onnxruntime cannot load it ({why})") from None
        raise ModelError(f"onnxruntime cannot load it ({why})") from None


def _open_safetensors(path: Path) -> None:
    from thatch.embedder.convert.safetensors_io import read_header

    try:
        read_header(path)
    except ModelError as error:
        raise ModelError(str(error).replace(f"{path} is ", "")) from None
