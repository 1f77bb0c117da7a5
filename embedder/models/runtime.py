"""The real model runtime: tokenizers + onnxruntime + pooling (docs/embedder.md §computation,
§batching).

``OnnxEncoder`` loads the tokenizer at construction (request threads tokenize while the
session may be released) and the ONNX session lazily; ``release`` drops the session so its
memory goes back to the OS when the embedder idles.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import logging
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from thatch.embedder.client.errors import ModelError
from thatch.embedder.client.kind import Kind
from thatch.embedder.encoder import ModelSettings, Tokenized
from thatch.embedder.models import known_answers

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Encoding

__all__ = [
    "OnnxEncoder",
    "default_threads",
    "encode_truncated",
    "load_tokenizer",
    "pool",
    "session_options",
]

MAX_DEFAULT_THREADS = 8
_WARMUP_SHORT_TEXT = "warm up"


def default_threads() -> int:
    """Usable CPUs (affinity mask, so containers and taskset are honoured) capped at 8."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        usable = os.cpu_count() or 1
    return max(1, min(usable, MAX_DEFAULT_THREADS))


def session_options(threads: int) -> onnxruntime.SessionOptions:
    """Session options of docs/embedder.md §batching: sequential, all optimizations, no spinning,
    CPU arena."""
    from thatch.embedder.models.ort_loader import load_onnxruntime

    ort = load_onnxruntime()

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.enable_cpu_mem_arena = True
    # The arena's extend strategy. onnxruntime 1.32's Python API has no working knob for the
    # session-owned CPU arena (this key is accepted but not yet read; the env-allocator route
    # would outlive the session and keep its memory after idle release), so we set the key
    # newer releases read and keep the per-session arena, which is freed with the session.
    options.add_session_config_entry("arena.extend_strategy", "kSameAsRequested")
    return options


def return_freed_memory() -> None:
    """Ask glibc to hand freed heap pages back to the OS (else RSS stays high after release)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl...): nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def load_tokenizer(settings: ModelSettings) -> tuple[Tokenizer, int]:
    """The model's tokenizer with truncation at max_tokens and no padding, and its pad id."""
    if settings.tokenizer_path is None:
        raise ModelError(f"model {settings.model_id} has no tokenizer.json")
    try:
        tokenizer = Tokenizer.from_file(str(settings.tokenizer_path))
    except Exception as error:  # the tokenizers library raises bare Exceptions
        raise ModelError(f"cannot read {settings.tokenizer_path}: {error}") from None
    pad_id = _pad_id(tokenizer, settings)
    tokenizer.no_padding()
    # Truncation inside the tokenizer keeps the post-processor's special tokens ([SEP])
    # and cuts content from the end, exactly like sentence-transformers does.
    tokenizer.enable_truncation(max_length=settings.max_tokens)
    return tokenizer, pad_id


# A long text is first tokenized up to a space this many characters per token in: the
# tokenizer works through the whole text before truncating, holding the GIL (65,000
# characters: 60 ms, 600 ms on a loaded machine), which stalled every other request.
PREFIX_CHARS_PER_TOKEN = 16


def encode_truncated(tokenizer: Tokenizer, text: str, max_tokens: int) -> Encoding:
    """``tokenizer.encode(text)`` (truncating at ``max_tokens``), reading only what it keeps.

    With BERT's normalizer and pre-tokenizer a plain space ends a word whatever follows
    (characters are normalised one by one; a combining mark after it attaches to the
    space), so when the text before a space already overflows ``max_tokens``, its tokens
    are the whole text's. Otherwise (other tokenizers, few tokens per character) the whole
    text is tokenized.
    """
    limit = PREFIX_CHARS_PER_TOKEN * max_tokens
    if len(text) > limit and _words_end_at_spaces(tokenizer):
        cut = text.find(" ", limit)
        if cut > 0:
            encoding = tokenizer.encode(text[:cut], add_special_tokens=True)
            if encoding.overflowing:
                return encoding
    return tokenizer.encode(text, add_special_tokens=True)


def _words_end_at_spaces(tokenizer: Tokenizer) -> bool:
    normalizer = type(tokenizer.normalizer).__name__ if tokenizer.normalizer else None
    pre = type(tokenizer.pre_tokenizer).__name__ if tokenizer.pre_tokenizer else None
    return normalizer in (None, "BertNormalizer") and pre == "BertPreTokenizer"


def _pad_id(tokenizer: Tokenizer, settings: ModelSettings) -> int:
    padding = tokenizer.padding
    if padding and isinstance(padding.get("pad_id"), int):
        return int(padding["pad_id"])
    if settings.path is not None:
        for name, key in (("tokenizer_config.json", "pad_token"), ("config.json", "pad_token_id")):
            value = _json_value(settings.path / name, key)
            if isinstance(value, str) and (token_id := tokenizer.token_to_id(value)) is not None:
                return int(token_id)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return 0


def _json_value(path: Path, key: str) -> object:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get(key) if isinstance(data, dict) else None


def pool(
    hidden: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.int64], pooling: str
) -> npt.NDArray[np.float32]:
    """Pool [batch, seq, dim] hidden states and L2-normalise (docs/embedder.md §computation steps
    4-5)."""
    states = hidden.astype(np.float64, copy=False)
    if pooling == "cls":
        pooled = states[:, 0, :]
    else:
        weights = mask.astype(np.float64)[:, :, None]
        summed = (states * weights).sum(axis=1)
        counts = np.maximum(weights.sum(axis=1), 1e-9)
        pooled = summed / counts
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return (pooled / norms).astype(np.float32)


DYNAMIC_QUANTIZATION_OPS = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeMatMul"})
# Ops that make onnxruntime run integer kernels (QDQ graphs are fused into them at load).
INTEGER_OPS = DYNAMIC_QUANTIZATION_OPS | {
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "QLinearMatMul",
    "QGemm",
    "QAttention",
    "QuantizeLinear",
    "ConvInteger",
    "QLinearConv",
}


def _op_types(path: Path) -> frozenset[str]:
    """Every op type in the graph (and its functions); empty when unreadable here."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # unreadable here: onnxruntime reports it properly at load time
        return frozenset()
    graphs: list[onnx.GraphProto | onnx.FunctionProto] = [model.graph, *model.functions]
    return frozenset(node.op_type for g in graphs for node in g.node)


class OnnxEncoder:
    """``Encoder`` backed by an onnxruntime ``InferenceSession``."""

    def __init__(
        self,
        settings: ModelSettings,
        *,
        threads: int | None = None,
        logger: logging.Logger | None = None,
        check_int8: bool = True,
    ) -> None:
        if settings.onnx_path is None:
            raise ModelError(f"model {settings.model_id} has no ONNX file")
        if settings.pooling not in ("mean", "cls"):
            raise ModelError(f"unknown pooling {settings.pooling!r} (expected mean or cls)")
        self.threads = threads if threads and threads > 0 else default_threads()
        self._tokenizer, self._pad_id = load_tokenizer(settings)
        self._session: onnxruntime.InferenceSession | None = None
        self._inputs: dict[str, np.dtype[Any]] = {}
        self._output = ""
        self._one_text_per_run = False
        self._use_file(settings)
        # An int8 file is checked against fp32 at its first load (see _check_int8); after
        # that ``settings`` names the file really served.
        self._checked = not (check_int8 and self.settings.quantized)
        self._log = logger or logging.getLogger("thatch.embedder")
        # load/release/encode may come from different threads (inference vs idle timer).
        self._lock = threading.RLock()

    def _use_file(self, settings: ModelSettings) -> None:
        """Serve settings.onnx_path; ``quantized`` follows the graph, not the file's name."""
        assert settings.onnx_path is not None
        ops = _op_types(settings.onnx_path)
        if ops:
            settings = replace(settings, quantized=bool(ops & INTEGER_OPS))
        self.settings = settings
        # Per-tensor dynamic activation quantization (onnxruntime's quantize_dynamic, the
        # hub's int8 files) picks one scale per run, so a text's vector would depend on its
        # batch companions and padding; such graphs run one text per run (also faster here).
        self._one_text_per_run = bool(ops & DYNAMIC_QUANTIZATION_OPS)

    @property
    def pad_id(self) -> int:
        return self._pad_id

    def tokenize(self, text: str, kind: Kind) -> Tokenized:
        if kind is Kind.QUERY and self.settings.query_prefix:
            text = self.settings.query_prefix + text
        encoding = encode_truncated(self._tokenizer, text, self.settings.max_tokens)
        return Tokenized(
            ids=np.asarray(encoding.ids, dtype=np.int64),
            truncated=bool(encoding.overflowing),
        )

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            self._session = self._create_session()
            try:
                if not self._checked:
                    self._check_int8()
                self._warm_up()
            except Exception:
                self._session = None
                raise

    def release(self) -> None:
        with self._lock:
            if self._session is None:
                return
            self._session = None
            self._inputs = {}
            gc.collect()
            return_freed_memory()

    def encode(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        if not batch:
            return np.zeros((0, self.settings.dim), dtype=np.float32)
        with self._lock:
            self.load()
            return self._encode_loaded(batch)

    def _encode_loaded(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        if self._one_text_per_run and len(batch) > 1:
            return np.concatenate([self._encode_padded([item]) for item in batch])
        return self._encode_padded(batch)

    def _known_answers(self) -> npt.NDArray[np.float32]:
        batch = [self.tokenize(text, Kind.PASSAGE) for text in known_answers.TEXTS]
        return self._encode_loaded(batch)

    def _check_int8(self) -> None:
        """Serve the fp32 file instead when the int8 session is wrong on this CPU.

        int8 kernels differ per CPU, and vectors that silently differ per machine would
        poison a shared database. The reference is the fp32 vectors the import stored, else
        the fp32 file beside the int8 one (the hub's onnx/model.onnx), run here.
        """
        from thatch.embedder.models.registry import with_onnx

        settings = self.settings
        assert settings.onnx_path is not None
        model_dir = settings.path or settings.onnx_path.parent
        served = os.path.relpath(settings.onnx_path, model_dir)
        fp32 = known_answers.fp32_beside(model_dir, settings.onnx_path)
        reference = known_answers.read(model_dir, settings.dim)
        if reference is None and fp32 is not None:
            checker = OnnxEncoder(with_onnx(settings, fp32), threads=self.threads)
            try:
                checker.load()
                reference = checker._known_answers()
            finally:
                checker.release()
        if reference is None and settings.source in ("hub cache", "downloaded"):
            # The hub has the fp32 file; serving unchecked int8 from it could poison the db.
            raise ModelError(
                f"int8 model {served} of {settings.model_id} cannot be checked on this CPU: "
                f"its fp32 file is not in the cache; run thatch model pull with the hub "
                "reachable (HF_HUB_OFFLINE unset) to fetch it"
            )
        if reference is None:
            self._checked = True
            self._log.warning(
                "int8 model %s cannot be checked on this CPU (no fp32 reference vectors and "
                "no fp32 file beside it): serving it unchecked",
                served,
            )
            return
        cosine = known_answers.lowest_cosine(self._known_answers(), reference)
        if cosine >= known_answers.MIN_COSINE:
            self._checked = True
            return
        why = (
            f"int8 model {served} disagrees with fp32 on this CPU (lowest cosine "
            f"{cosine:.4f}, min {known_answers.MIN_COSINE})"
        )
        if fp32 is None:
            raise ModelError(f"{why}, and the model has no fp32 file to serve instead")
        self._log.warning("%s: serving %s instead", why, fp32)
        self._use_file(with_onnx(settings, fp32))
        self._checked = True
        self._session = None
        gc.collect()
        self._session = self._create_session()

    def _encode_padded(self, batch: list[Tokenized]) -> npt.NDArray[np.float32]:
        ids, mask = self._pad(batch)
        return pool(self._run(ids, mask), mask, self.settings.pooling)

    def _pad(self, batch: list[Tokenized]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        width = max(1, max(item.n_tokens for item in batch))
        ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, item in enumerate(batch):
            ids[row, : item.n_tokens] = item.ids
            mask[row, : item.n_tokens] = 1
        return ids, mask

    def _run(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.floating[Any]]:
        assert self._session is not None
        feed: dict[str, npt.NDArray[Any]] = {}
        for name, dtype in self._inputs.items():
            if name == "input_ids":
                feed[name] = ids.astype(dtype, copy=False)
            elif name == "attention_mask":
                feed[name] = mask.astype(dtype, copy=False)
            elif name == "token_type_ids":
                feed[name] = np.zeros(ids.shape, dtype=dtype)
        try:
            (hidden,) = self._session.run([self._output], feed)
        except Exception as error:  # onnxruntime raises its own untyped errors
            raise ModelError(f"inference failed: {error}") from None
        return np.asarray(hidden)

    def _create_session(self) -> onnxruntime.InferenceSession:
        from thatch.embedder.models.ort_loader import load_onnxruntime

        ort = load_onnxruntime()

        path = self.settings.onnx_path
        assert path is not None
        try:
            session = ort.InferenceSession(
                str(path),
                sess_options=session_options(self.threads),
                providers=["CPUExecutionProvider"],
            )
        except Exception as error:
            raise ModelError(f"cannot load {path}: {error}") from None
        self._inputs = {}
        for node in session.get_inputs():
            dtype = np.dtype(np.int32) if node.type == "tensor(int32)" else np.dtype(np.int64)
            self._inputs[node.name] = dtype
        for required in ("input_ids", "attention_mask"):
            if required not in self._inputs:
                raise ModelError(f"{path} has no {required} input")
        unknown = set(self._inputs) - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown:
            raise ModelError(
                f"{path} needs inputs thatch cannot feed: {', '.join(sorted(unknown))}"
            )
        outputs = session.get_outputs()
        names = [node.name for node in outputs]
        if "last_hidden_state" in names:
            self._output = "last_hidden_state"
        else:
            rank3 = [node.name for node in outputs if len(node.shape or ()) == 3]
            if not rank3:
                raise ModelError(f"{path} has no last_hidden_state or other rank-3 output")
            self._output = rank3[0]
        return session

    def _warm_up(self) -> None:
        """One max-length input, then one short one, so first requests pay no setup cost."""
        longest = max(2, self.settings.max_tokens)
        filler = self._tokenizer.token_to_id("[UNK]")
        ids = np.full((1, longest), filler if filler is not None else self._pad_id, np.int64)
        self._run(ids, np.ones_like(ids))
        short = self.tokenize(_WARMUP_SHORT_TEXT, Kind.PASSAGE)
        ids, mask = self._pad([short])
        self._run(ids, mask)
