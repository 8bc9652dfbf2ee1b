"""Embedders: what turns a finding's text (and a question) into a vector, for ``why`` by meaning.

An embedder is any object with a stable ``name`` (model and version: vectors are stored under it, so
a new name means new vectors), ``dims`` and ``embed(texts) -> one vector per text``. ``embedder_of``
wraps a plain function; ``default_embedder`` loads the offline default (WordLlama's 256-dimension
weights, shipped in its wheel, loaded from the package's own folder with no network).

Nothing here imports a model or numpy until an embedder is built: ``import memory`` and a keyword
``why`` never load them.
"""

from __future__ import annotations

import importlib
import itertools
import numbers
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from memory._errors import ArgumentInvalid, EmbedderFailed, EmbedderUnavailable

EMBED_TEXT_MAX = 8192
"""Characters of a text the default embedder reads (a finding's text is at most 64 KiB; the model
averages its tokens, so the first 8,192 characters carry what a longer text means)."""

DIMS_MAX = 8192
"""The most dimensions an embedder may have (a stored vector is at most ``2 * DIMS_MAX`` bytes)."""

ENV = "FLOWS_EMBEDDER"
"""The environment variable that names the CLI's and the MCP server's embedder: ``default`` (the
offline default), ``none`` (keyword only), or ``module:attribute`` (an embedder, or a function that
returns one)."""


USER_RAISES: tuple[type[BaseException], ...] = (Exception, SystemExit, GeneratorExit)
"""What the caller's embedder code may raise that is its failure, not the caller's: any error, and
an exit (``sys.exit`` in a model library on a fatal error), which would otherwise end a command
silently, as if it had answered. A Ctrl-C (``KeyboardInterrupt``) is the person's, and goes on up."""


@runtime_checkable
class Embedder(Protocol):
    """What ``MemoryStore(embedder=...)`` takes.

    ``name`` must change whenever the vectors would (another model, version or dimension): vectors
    are kept under it and never mixed across names. ``embed`` gets a batch of texts and returns one
    vector of ``dims`` floats per text, in order (a numpy array or lists of floats). An embedder may
    also have ``min_similarity`` (a float; 0.0 when absent): a finding less similar to a question
    than that is not an answer by meaning (``similarity_floor``); and ``word_alignment`` (a float
    from 0 to 1; 0.0 when absent): how much a hybrid answer's score adds for the alignment of the
    question's words with the finding's, each word embedded alone (``memory._align``).
    """

    @property
    def name(self) -> str: ...

    @property
    def dims(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Any: ...


class FunctionEmbedder:
    """An ``Embedder`` made of a function from a list of texts to a list of vectors."""

    def __init__(self, fn: Callable[[list[str]], Any], *, name: str, dims: int) -> None:
        if not callable(fn):
            raise ArgumentInvalid(f"an embedder function must be callable, not {fn!r:.80}")
        check_shape(name, dims)
        self._fn = fn
        self.name = name
        self.dims = dims

    def embed(self, texts: Sequence[str]) -> Any:
        return self._fn(list(texts))

    def __repr__(self) -> str:
        return f"FunctionEmbedder(name={self.name!r}, dims={self.dims})"


def embedder_of(fn: Callable[[list[str]], Any], *, name: str, dims: int) -> Embedder:
    """An embedder from a function of a list of texts (``name``: a stable name of the model and its
    version; ``dims``: the length of each vector)."""
    return FunctionEmbedder(fn, name=name, dims=dims)


def similarity_floor(embedder: Embedder) -> float:
    """The least similarity an answer by meaning needs with ``embedder`` (its ``min_similarity``,
    else 0.0: every finding with a positive similarity can answer).

    Raises:
        ArgumentInvalid: ``min_similarity`` is not a number from -1 to 1 (NaN would answer nothing,
            a string was read as 0.0), or reading it raised.
    """
    try:  # a property of the user's may raise
        floor = getattr(embedder, "min_similarity", 0.0)
    except USER_RAISES as exc:
        raise ArgumentInvalid(
            f"reading the embedder's min_similarity raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc
    if isinstance(floor, bool) or not isinstance(floor, numbers.Real) or not -1.0 <= float(floor) <= 1.0:
        raise ArgumentInvalid(
            "an embedder's min_similarity must be a number from -1 to 1 (the least cosine similarity "
            f"of an answer by meaning), not {floor!r:.80}"
        )
    return float(floor)


def alignment_weight(embedder: Embedder) -> float:
    """How much word alignment adds to a hybrid answer's score with ``embedder``: its
    ``word_alignment`` (a number from 0 to 1), else 0.0 (no alignment, nothing embedded).

    Raises:
        ArgumentInvalid: ``word_alignment`` is not a number from 0 to 1, or reading it raised.
    """
    try:  # a property of the user's may raise
        weight = getattr(embedder, "word_alignment", 0.0)
    except USER_RAISES as exc:
        raise ArgumentInvalid(
            f"reading the embedder's word_alignment raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not 0.0 <= float(weight) <= 1.0:
        raise ArgumentInvalid(
            "an embedder's word_alignment must be a number from 0 to 1 (how much the alignment of a "
            f"question's words with a finding's adds to a hybrid score), not {weight!r:.80}"
        )
    return float(weight)


def check_shape(name: object, dims: object) -> None:
    """Refuse an embedder whose ``name`` or ``dims`` cannot key stored vectors."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or not name.isprintable():
        raise ArgumentInvalid(f"an embedder's name must be 1-200 printable characters, not {name!r:.80}")
    if type(dims) is not int or not 1 <= dims <= DIMS_MAX:
        raise ArgumentInvalid(f"an embedder's dims must be an int from 1 to {DIMS_MAX}, not {dims!r:.80}")


def checked_embedder(embedder: object) -> Embedder:
    """``embedder`` if it has an ``Embedder``'s shape, else ``ArgumentInvalid`` saying what is missing."""
    try:  # name and dims may be properties of the user's, which raise
        shaped = isinstance(embedder, Embedder)
        name, dims = (embedder.name, embedder.dims) if shaped else (None, None)  # type: ignore[attr-defined]
    except USER_RAISES as exc:
        raise ArgumentInvalid(
            f"reading the embedder's name and dims raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc
    if not shaped:
        raise ArgumentInvalid(
            f"embedder must have name, dims and embed(texts) (see memory.Embedder), not {embedder!r:.80}"
        )
    check_shape(name, dims)
    similarity_floor(embedder)  # type: ignore[arg-type]
    alignment_weight(embedder)  # type: ignore[arg-type]
    return embedder  # type: ignore[return-value]


class WordLlamaEmbedder:
    """The offline default: WordLlama's ``l2_supercat`` token embeddings at 256 dimensions, averaged
    over a text's tokens and scaled to unit length. The weights (MIT licence) and the tokenizer ship
    in the ``wordllama`` wheel and are read from its folder with ``safetensors`` and ``tokenizers``;
    the ``wordllama`` package itself is never imported (it imports an HTTP client, and its loader
    looks for the tokenizer in another folder and then tries a download), so nothing is downloaded
    and no socket is opened. The pooling is the model's own: the mean of the tokens' rows."""

    dims = 256
    min_similarity = 0.1
    """On this project's retrieval benchmark 0.2% of right answers score below 0.1, and questions
    about nothing the store holds score 0.15 to 0.26: the floor drops only the unrelated."""
    word_alignment = 1.0
    """A hybrid answer's score adds its word alignment (``memory._align``: each question word's best
    cosine with a word of the finding, averaged, each word weighed by its cosine with the question)
    at the weight of its cosine: two estimates of one similarity, from the same token table, averaged
    (not fitted)."""

    def __init__(self) -> None:
        import importlib.util

        try:
            import numpy as np
            from safetensors import safe_open
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"the default embedder needs the semantic extra ({exc}); install it with "
                "pip install 'flows-memory[semantic]', or pass your own embedder"
            ) from exc
        spec = importlib.util.find_spec("wordllama")  # where it is, without running its code
        if spec is None or not spec.submodule_search_locations:
            raise EmbedderUnavailable(
                "the default embedder's weights come with the wordllama package, which is not "
                "installed: pip install 'flows-memory[semantic]', or pass your own embedder"
            )
        folder = Path(next(iter(spec.submodule_search_locations)))
        weights = folder / "weights" / "l2_supercat_256.safetensors"
        tokens = folder / "tokenizers" / "l2_supercat_tokenizer_config.json"
        for path in (weights, tokens):
            if not path.is_file():
                raise EmbedderUnavailable(
                    f"the wordllama package has no {path.name} in {path.parent}; reinstall it "
                    "(pip install --force-reinstall 'flows-memory[semantic]')",
                    path=path,
                )
        try:
            tokenizer = Tokenizer.from_file(str(tokens))
            with safe_open(str(weights), framework="np", device="cpu") as f:
                table = f.get_tensor("embedding.weight")
        except Exception as exc:  # a damaged wheel: say so, never fall back to a download
            raise EmbedderUnavailable(f"cannot load the default embedder: {exc}", path=weights) from exc
        if table.ndim != 2 or table.shape[1] != self.dims:
            raise EmbedderUnavailable(
                f"{weights.name} holds a {table.shape} table, not (n, 256)", path=weights
            )
        self._np = np
        self._table = np.ascontiguousarray(table, dtype=np.float32)
        self._tokenizer = tokenizer
        self.name = f"wordllama-l2_supercat-256@{_dist_version('wordllama')}"

    def embed(self, texts: Sequence[str]) -> Any:
        """Each text's tokens' rows, averaged and scaled to unit length (a text of no token: zeros).
        Every text's rows are gathered at once and summed per text (``np.add.reduceat``), not a
        numpy call per text: a batch of single words (``memory._align``) costs a few calls."""
        np = self._np
        clipped = [t[:EMBED_TEXT_MAX] for t in texts]
        out = np.zeros((len(clipped), self.dims), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(clipped, add_special_tokens=False)
        counts = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        total = int(counts.sum())
        if total:
            ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int64, total)
            np.clip(ids, 0, self._table.shape[0] - 1, out=ids)
            some = counts > 0
            starts = (np.cumsum(counts) - counts)[some]
            out[some] = np.add.reduceat(self._table[ids], starts, axis=0) / counts[some, None]
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    def __repr__(self) -> str:
        return f"WordLlamaEmbedder(name={self.name!r})"


def _dist_version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_DEFAULT: list[WordLlamaEmbedder] = []
_DEFAULT_LOCK = threading.Lock()


def default_embedder() -> Embedder:
    """The offline default embedder (loaded once per process, about 0.4 s and 16 MB).

    Raises:
        EmbedderUnavailable: the ``semantic`` extra is not installed or its weights are missing.
    """
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(WordLlamaEmbedder())
        return _DEFAULT[0]


def embedder_named(spec: str | None) -> Embedder | None:
    """The embedder a configuration names (``FLOWS_EMBEDDER``, ``--embedder``): None for ``none`` or
    nothing, the default for ``default``, else ``module:attribute`` (an embedder, or a function
    of no arguments returning one)."""
    spec = (spec or "").strip()
    if not spec or spec == "none":
        return None
    if spec == "default":
        return default_embedder()
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ArgumentInvalid(
            f"an embedder is named 'default', 'none' or 'module:attribute', not {spec!r:.80} "
            f"(from --embedder or {ENV})"
        )
    try:  # the user's module and function run here: whatever they raise, the embedder is unavailable
        found: Any = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
        if not isinstance(found, Embedder) and callable(found):
            found = found()
    except USER_RAISES as exc:
        raise EmbedderUnavailable(
            f"cannot load the embedder {spec!r:.200}: {type(exc).__name__}: {exc!s:.300}"
        ) from exc
    return checked_embedder(found)


def embedder_from_env() -> Embedder | None:
    """The embedder ``FLOWS_EMBEDDER`` names (None when unset or ``none``)."""
    return embedder_named(os.environ.get(ENV))


def embedder_shape(embedder: Embedder) -> tuple[str, int]:
    """The embedder's ``name`` and ``dims`` as read now, once; ``EmbedderFailed`` when reading them
    raises or they could not key stored vectors (``check_shape``). A caller reads them once and
    checks every vector of one call against what it read: a property that answers another thing on
    each read would otherwise pass a vector of one size where another was read."""
    try:  # a property of the user's may raise
        name, dims = embedder.name, embedder.dims
        check_shape(name, dims)
    except USER_RAISES as exc:
        raise EmbedderFailed(
            f"reading the embedder's name and dims raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc
    return name, dims


def checked_vectors(embedder: Embedder, texts: Sequence[str], shape: tuple[str, int] | None = None) -> Any:
    """``embedder.embed(texts)`` as a float32 array of shape (len(texts), dims), each row of unit
    length (a zero vector stays zero; a row of any finite size, however large or small, is scaled
    to unit length); ``EmbedderFailed`` when it raises or returns another shape, anything but real
    numbers (text, booleans, complex numbers, an int too large for a float), or a non-finite value.
    ``shape``: the embedder's name and dims as the caller read them (``embedder_shape``), which the
    vectors are checked against; read here once when not given."""
    import numpy as np

    name, dims = shape if shape is not None else embedder_shape(embedder)
    try:
        raw = embedder.embed(list(texts))
    except EmbedderFailed:
        raise
    except USER_RAISES as exc:
        raise EmbedderFailed(f"the embedder {name!r} raised {type(exc).__name__}: {exc}") from exc
    try:
        got = np.asarray(raw)
    except USER_RAISES as exc:  # the user's object may raise anything while it is read
        raise EmbedderFailed(
            f"the embedder {name!r} returned what is not numbers: {type(exc).__name__}: {exc}"
        ) from exc
    if got.dtype.kind not in "iuf":  # text, bools, complex, objects (an int too big for a float)
        raise EmbedderFailed(
            f"the embedder {name!r} returned what is not numbers (real numbers were expected, "
            f"not a {type(raw).__name__} of {got.dtype.name} values)"
        )
    want = (len(texts), dims)
    if got.shape != want:
        raise EmbedderFailed(
            f"the embedder {name!r} returned shape {got.shape} for {len(texts)} texts; "
            f"{want} was expected (one vector of its dims per text)"
        )
    wide = got.astype(np.float64)  # scaled in float64: a float32 norm overflows or underflows to 0
    if not bool(np.isfinite(wide).all()):
        raise EmbedderFailed(f"the embedder {name!r} returned a NaN or infinite value")
    peak = np.abs(wide).max(axis=1, keepdims=True)  # first to at most 1: no square overflows
    wide = np.divide(wide, peak, out=np.zeros_like(wide), where=peak > 0)
    norms = np.linalg.norm(wide, axis=1, keepdims=True)
    unit = np.divide(wide, norms, out=np.zeros_like(wide), where=norms > 0)
    return unit.astype(np.float32)
