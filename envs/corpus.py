"""A global search corpus: one BM25 index over many paragraphs, built once, saved, memory-mapped.

The open-domain setting: instead of each question's own ten paragraphs, every search goes to one
large corpus (all paragraphs of a HotpotQA file, a synthetic world with many more distractor
entities, or any list of ``Paragraph``). A ``Corpus`` is a ``Retriever``; the envs take it, or the
folder it was saved to, as ``corpus=``.

Scoring is ``bm25s``'s own: a precomputed term x document score matrix (CSC), so a query costs
the length of its terms' posting lists, not the corpus size. The default variant is bm25s'
``"robertson"``, whose scores are rank-bm25's divided by ``k1 + 1`` wherever no query term has
``df > N / 2`` (``passkt.envs.retrieval`` explains the difference). The matrix is computed by
``retrieval.bm25s_matrix`` (equal to ``bm25s.BM25.index``'s, in far less memory) and handed to a
``bm25s.BM25`` object, which saves, memory-maps and scores it.

Paragraphs are deduplicated by ``(title, text)``, first seen first; distinct paragraphs that share
a title (HotpotQA has many) are all kept, in input order, and ``indices_of(title)`` lists them.

A saved corpus is a folder::

    manifest.json          format, fingerprint of the paragraphs, sizes, BM25 parameters, source
    bm25s/                 bm25s.BM25.save: data/indices/indptr .npy, vocab and params JSON
    titles.bin, texts.bin  the UTF-8 titles and texts, concatenated
    offsets.npy            (N + 1, 2) int64 byte offsets into titles.bin and texts.bin

``Corpus.load`` memory-maps the matrix and the texts (pages are read on demand).
``Corpus.load_or_build`` rebuilds a folder whose fingerprint or parameters differ from what is
asked (or refuses, with ``rebuild=False``); ``open_corpus`` is the cached loader of the envs.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import hashlib
import json
import logging
import mmap
import os
import shutil
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from passkt.envs.errors import MissingDependencyError, PassktError
from passkt.envs.retrieval import (
    MAX_QUERY_TOKENS,
    Hit,
    bm25s_matrix,
    global_corpus,
    rank,
    title_key,
    tokenize,
)
from passkt.envs.sources.hotpotqa import parse_record, read_records
from passkt.envs.sources.synthetic_world import build_world
from passkt.envs.tasks import Paragraph, Task

logger = logging.getLogger(__name__)

__all__ = [
    "CORPUS_FORMAT",
    "TOKENIZER",
    "Corpus",
    "CorpusIndexError",
    "CorpusManifest",
    "corpus_fingerprint",
    "hotpotqa_paragraphs",
    "open_corpus",
    "read_manifest",
]

CORPUS_FORMAT = 1
"""Version of the folder layout; a folder of another version is refused (rebuild it)."""
TOKENIZER = "passkt.envs.retrieval.tokenize/v1 (lowercase, re \\w+)"
"""Names the tokenization the index was built with; a change makes old folders stale."""
Method = Literal["robertson", "lucene"]


class CorpusIndexError(PassktError, ValueError):
    """A corpus folder that is missing, incomplete, of another format, or stale."""


@dataclass(frozen=True)
class CorpusManifest:
    """What a corpus folder holds (``manifest.json``)."""

    format: int
    fingerprint: str
    """``corpus_fingerprint`` of the (deduplicated) paragraphs."""
    num_docs: int
    num_terms: int
    k1: float
    b: float
    method: str
    """bm25s' BM25 variant: ``"robertson"`` or ``"lucene"``."""
    dtype: str
    tokenizer: str
    source: str
    """Free text saying where the paragraphs came from (e.g. the HotpotQA file)."""
    duplicates_dropped: int
    """Paragraphs dropped because an identical ``(title, text)`` came earlier."""
    bm25s_version: str


def _dedupe(paragraphs: Iterable[Paragraph]) -> tuple[tuple[Paragraph, ...], int]:
    """The paragraphs without repeated ``(title, text)`` (first kept), and how many were dropped;
    paragraphs that only share a title all stay."""
    seen: dict[tuple[str, str], Paragraph] = {}
    total = 0
    for paragraph in paragraphs:
        if not isinstance(paragraph, Paragraph):
            raise TypeError(f"corpus item {total} is a {type(paragraph).__name__}, not a Paragraph")
        seen.setdefault((paragraph.title, paragraph.text), paragraph)
        total += 1
    return tuple(seen.values()), total - len(seen)


def corpus_fingerprint(paragraphs: Iterable[Paragraph]) -> str:
    """SHA-256 of the paragraphs in order (length-prefixed UTF-8 titles and texts), hex."""
    digest = hashlib.sha256()
    for paragraph in paragraphs:
        title, text = paragraph.title.encode("utf-8"), paragraph.text.encode("utf-8")
        digest.update(struct.pack("<QQ", len(title), len(text)))
        digest.update(title)
        digest.update(text)
    return digest.hexdigest()


def hotpotqa_paragraphs(path: str | os.PathLike[str]) -> list[Paragraph]:
    """Every paragraph of every record of a HotpotQA file (both types, both splits), in order."""

    paragraphs: list[Paragraph] = []
    for label, record in read_records(path):
        paragraphs.extend(parse_record(record, label, str(path), "test").paragraphs)
    return paragraphs


def _bm25s() -> Any:
    try:
        import bm25s  # start-up cost: bm25s, 0.2 s, for its backend only
    except ImportError as e:  # pragma: no cover - bm25s is a core dependency
        raise MissingDependencyError("bm25s", "all") from e
    return bm25s


# --- the texts store ----------------------------------------------------------------------------


def _map_bytes(path: Path) -> bytes | mmap.mmap:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class _MappedParagraphs(Sequence[Paragraph]):
    """The titles and texts of a saved corpus, read from memory-mapped files on access."""

    def __init__(self, folder: Path, size: int) -> None:
        self._offsets = np.load(folder / "offsets.npy", mmap_mode="r")
        if self._offsets.shape != (size + 1, 2):
            raise CorpusIndexError(
                f"{folder}: offsets.npy has shape {self._offsets.shape}, expected "
                f"({size + 1}, 2); the folder is incomplete: rebuild it."
            )
        self._titles = _map_bytes(folder / "titles.bin")
        self._texts = _map_bytes(folder / "texts.bin")
        self._size = size
        self._check_files(folder)

    def _check_files(self, folder: Path) -> None:
        """Refuse truncated or corrupt files at open, not in the middle of an episode.

        Titles are small, so all of them are decoded once here; a text with invalid UTF-8 (which
        only a corrupt file holds) is read with replacement characters rather than failing a step.
        """
        for column, name, data in ((0, "titles.bin", self._titles), (1, "texts.bin", self._texts)):
            expected = int(self._offsets[-1, column])
            if len(data) != expected or int(self._offsets[0, column]) != 0:
                raise CorpusIndexError(
                    f"{folder / name} has {len(data)} bytes but offsets.npy describes {expected}; "
                    "the file is truncated or from another corpus: rebuild the folder."
                )
        try:
            codecs.decode(memoryview(self._titles), "utf-8")
        except UnicodeDecodeError as e:
            raise CorpusIndexError(
                f"{folder / 'titles.bin'}: invalid UTF-8 at byte {e.start}; the file is corrupt: "
                "rebuild the folder."
            ) from None

    def __len__(self) -> int:
        return self._size

    def title(self, index: int) -> str:
        """The title of paragraph ``index`` alone (its text is not read)."""
        t0, t1 = self._offsets[index, 0], self._offsets[index + 1, 0]
        return self._titles[int(t0) : int(t1)].decode("utf-8", "replace")

    def __getitem__(self, index: Any) -> Any:  # int -> Paragraph, slice -> list[Paragraph]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(f"paragraph index {index} out of range for {self._size}")
        (t0, x0), (t1, x1) = self._offsets[index], self._offsets[index + 1]
        return Paragraph(
            self._titles[int(t0) : int(t1)].decode("utf-8", "replace"),
            self._texts[int(x0) : int(x1)].decode("utf-8", "replace"),
        )


def _write_texts(folder: Path, paragraphs: Sequence[Paragraph]) -> None:
    sizes = np.zeros((len(paragraphs) + 1, 2), dtype=np.int64)
    with open(folder / "titles.bin", "wb") as titles, open(folder / "texts.bin", "wb") as texts:
        for i, paragraph in enumerate(paragraphs, start=1):
            sizes[i, 0] = titles.write(paragraph.title.encode("utf-8"))
            sizes[i, 1] = texts.write(paragraph.text.encode("utf-8"))
    np.save(folder / "offsets.npy", np.cumsum(sizes, axis=0))


# --- the corpus ---------------------------------------------------------------------------------


class Corpus:
    """A deduplicated paragraph collection with a bm25s index; a ``Retriever``.

    Make one with ``Corpus.build`` (or ``from_tasks``, ``from_hotpotqa``, ``from_world``), keep it
    with ``save``, and reopen it with ``Corpus.load`` / ``open_corpus``.

    Attributes:
        manifest: Sizes, parameters and the fingerprint of the paragraphs.
        path: The folder it was saved to or loaded from (``None`` if only in memory).
    """

    def __init__(
        self,
        paragraphs: Sequence[Paragraph],
        index: Any,
        manifest: CorpusManifest,
        path: Path | None = None,
    ) -> None:
        self._paragraphs = paragraphs
        self._index = index
        self.manifest = manifest
        self.path = path
        self._vocab: dict[str, int] = index.vocab_dict
        self._indptr: np.ndarray = index.scores["indptr"]
        self._postings: np.ndarray = index.scores["indices"]  # document ids, word by word

    # --- construction ---------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        paragraphs: Iterable[Paragraph],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        method: Method = "robertson",
        dtype: Literal["float32", "float64"] = "float32",
        source: str = "",
    ) -> Corpus:
        """Index ``paragraphs`` (deduplicated by ``(title, text)``) in memory.

        Args:
            paragraphs: The documents, in the order that breaks score ties.
            k1: BM25 term-frequency saturation (rank-bm25's default 1.5).
            b: BM25 length normalization.
            method: bm25s' variant: ``"robertson"`` (agrees with rank-bm25 where no query term
                has ``df > N / 2``) or ``"lucene"`` (idf ``log(1 + ...)``, never zero).
            dtype: Score precision; float32 halves the matrix.
            source: Where the paragraphs came from, recorded in the manifest.

        Raises:
            ValueError: An unknown ``method`` or ``dtype``, or bad ``k1`` / ``b``.
        """
        if method not in ("robertson", "lucene"):
            raise ValueError(f"method must be 'robertson' or 'lucene', got {method!r}")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        if not (k1 >= 0 and 0 <= b <= 1):
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        kept, dropped = _dedupe(paragraphs)
        bm25s = _bm25s()
        vocab, scores = bm25s_matrix(kept, k1=k1, b=b, method=method, dtype=dtype)
        index = bm25s.BM25(k1=k1, b=b, method=method, dtype=dtype, int_dtype="int32")
        index.scores, index.vocab_dict = scores, vocab
        index.unique_token_ids_set = set(vocab.values())
        index.nonoccurrence_array = None
        manifest = CorpusManifest(
            format=CORPUS_FORMAT,
            fingerprint=corpus_fingerprint(kept),
            num_docs=len(kept),
            num_terms=len(vocab),
            k1=float(k1),
            b=float(b),
            method=method,
            dtype=dtype,
            tokenizer=TOKENIZER,
            source=source,
            duplicates_dropped=dropped,
            bm25s_version=str(getattr(bm25s, "__version__", "unknown")),
        )
        logger.debug("indexed %d paragraphs (%d duplicates dropped)", len(kept), dropped)
        return cls(kept, index, manifest)

    @classmethod
    def from_tasks(cls, tasks: Iterable[Task], **options: Any) -> Corpus:
        """The union of the tasks' paragraphs (what ``corpus="global"`` searches)."""
        tasks = list(tasks)
        options.setdefault("source", f"{len(tasks)} tasks")
        return cls.build(global_corpus(tasks), **options)

    @classmethod
    def from_hotpotqa(cls, path: str | os.PathLike[str], **options: Any) -> Corpus:
        """All paragraphs of a HotpotQA file (every record, both types and splits)."""
        options.setdefault("source", f"hotpotqa:{Path(path).resolve()}")
        return cls.build(hotpotqa_paragraphs(path), **options)

    @classmethod
    def from_world(cls, seed: int = 0, scale: int = 1, **options: Any) -> Corpus:
        """Every paragraph of the synthetic world ``build_world(seed, scale)``.

        The synthetic tasks come from the scale-1 world, which is the start of every larger
        world, so a larger ``scale`` adds distractor entities (same surnames, title words,
        cities) without losing any gold paragraph.
        """

        options.setdefault("source", f"synthetic:seed={seed},scale={scale}")
        return cls.build(build_world(seed, scale=scale).paragraphs, **options)

    # --- disk -----------------------------------------------------------------------------------

    def save(self, folder: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the corpus to ``folder`` (atomically: a complete folder or the old one).

        Args:
            folder: The corpus folder to create.
            overwrite: Replace an existing corpus folder. A non-empty folder that is not a corpus
                folder is never replaced.

        Returns:
            The folder.

        Raises:
            FileExistsError: ``folder`` exists and ``overwrite`` is False, or it is not a corpus.
        """
        folder = Path(folder)
        if folder.exists():
            is_corpus = (folder / "manifest.json").is_file()
            if folder.is_dir() and not is_corpus and not any(folder.iterdir()):
                folder.rmdir()
            elif not is_corpus:
                raise FileExistsError(
                    f"{folder} exists and is not a corpus folder (no manifest.json); "
                    "choose another path."
                )
            elif not overwrite:
                raise FileExistsError(f"{folder} already holds a corpus; pass overwrite=True.")
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            self._index.save(tmp / "bm25s", show_progress=False)
            _write_texts(tmp, self._paragraphs)
            manifest = json.dumps(dataclasses.asdict(self.manifest), indent=2)
            (tmp / "manifest.json").write_text(manifest + "\n", encoding="utf-8")
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.path = folder
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, mmap: bool = True) -> Corpus:
        """Open a saved corpus; with ``mmap`` the matrix and texts stay on disk until read.

        Raises:
            CorpusIndexError: Not a corpus folder, another format or tokenizer, or incomplete.
        """
        folder = Path(folder)
        manifest = read_manifest(folder)
        try:
            index = _bm25s().BM25.load(
                folder / "bm25s", mmap=mmap, load_corpus=False, show_progress=False
            )
        except (OSError, ValueError) as e:
            raise CorpusIndexError(
                f"{folder}: cannot read the bm25s index ({e}); the folder is incomplete: "
                "rebuild it."
            ) from e
        sizes = (index.scores["num_docs"], len(index.scores["indptr"]) - 1)
        if sizes != (manifest.num_docs, manifest.num_terms):
            raise CorpusIndexError(
                f"{folder}: the bm25s index has {sizes[0]} documents and {sizes[1]} terms but "
                f"manifest.json says {manifest.num_docs} and {manifest.num_terms}; rebuild it."
            )
        paragraphs = _MappedParagraphs(folder, manifest.num_docs)
        if not mmap:
            paragraphs = tuple(paragraphs)  # type: ignore[assignment]
        return cls(paragraphs, index, manifest, folder)

    @classmethod
    def load_or_build(
        cls,
        folder: str | os.PathLike[str],
        paragraphs: Iterable[Paragraph] | Callable[[], Iterable[Paragraph]],
        *,
        rebuild: bool = True,
        **options: Any,
    ) -> Corpus:
        """Load ``folder`` if it indexes exactly these paragraphs with these options, else build.

        Args:
            folder: The corpus folder.
            paragraphs: The paragraphs, or a function returning them.
            rebuild: Rebuild a stale folder (True) or raise (False).
            **options: ``Corpus.build`` options (``k1``, ``b``, ``method``, ``dtype``, ``source``).

        Raises:
            CorpusIndexError: The folder is stale and ``rebuild`` is False.
        """
        folder = Path(folder)
        items = paragraphs() if callable(paragraphs) else paragraphs
        kept, _ = _dedupe(items)
        if (folder / "manifest.json").is_file():
            manifest = read_manifest(folder)
            wanted = {"k1": 1.5, "b": 0.75, "method": "robertson", "dtype": "float32"}
            wanted.update({k: v for k, v in options.items() if k in wanted})
            differences = [
                f"{key}: saved {getattr(manifest, key)!r}, asked {value!r}"
                for key, value in (("fingerprint", corpus_fingerprint(kept)), *wanted.items())
                if getattr(manifest, key) != value
            ]
            if not differences:
                return cls.load(folder)
            if not rebuild:
                raise CorpusIndexError(
                    f"{folder} is stale ({'; '.join(differences)}). Delete it or pass "
                    "rebuild=True to rebuild it from these paragraphs."
                )
            logger.info("rebuilding stale corpus %s (%s)", folder, "; ".join(differences))
        corpus = cls.build(kept, **options)
        corpus.save(folder, overwrite=True)
        return corpus

    # --- retrieval ------------------------------------------------------------------------------

    @property
    def paragraphs(self) -> Sequence[Paragraph]:
        """The deduplicated paragraphs; ``Hit.doc_index`` indexes this sequence."""
        return self._paragraphs

    def __len__(self) -> int:
        return self.manifest.num_docs

    def __repr__(self) -> str:
        where = f"path={str(self.path)!r}" if self.path else "in memory"
        return (
            f"Corpus({self.manifest.num_docs} paragraphs, {self.manifest.num_terms} terms, "
            f"{self.manifest.method}, {where})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        if self.path is not None:  # a saved corpus travels as its folder (no matrix copied)
            return (open_corpus, (str(self.path),))
        return super().__reduce__()

    def indices_of(self, title: str) -> tuple[int, ...]:
        """Positions of every paragraph titled ``title`` (several when titles repeat)."""
        return tuple(i for i in self._titled(title) if self._paragraphs[i].title == title)

    def _titled(self, text: str) -> tuple[int, ...]:
        """Positions of the paragraphs whose ``title_key`` is ``text``'s.

        A paragraph's title words are in its index entry, so only the documents that hold the
        query's rarest word can match: their titles are compared, read from the postings of that
        word (a few per query), instead of a title table of the whole corpus built on first use
        (a second of CPU and a dict of every title at a million documents). A word missing from
        the vocabulary means no title has it.
        """
        key = title_key(text)
        words = key.split()
        if not words or any(w not in self._vocab for w in words):
            return ()
        indptr = self._indptr
        rarest = min((self._vocab[w] for w in words), key=lambda t: indptr[t + 1] - indptr[t])
        docs = self._postings[int(indptr[rarest]) : int(indptr[rarest + 1])]
        titles = getattr(self._paragraphs, "title", None)
        found = []
        for i in np.sort(docs):
            title = titles(int(i)) if titles else self._paragraphs[int(i)].title
            if title_key(title) == key:
                found.append(int(i))
        return tuple(found)

    def search(self, query: str, k: int, *, fill: bool = False) -> list[Hit]:
        """The top ``k`` paragraphs: an exact title match first, then bm25s' positive scores.

        Args:
            query: Free text, tokenized like the paragraphs.
            k: The most hits to return (``k >= 1``).
            fill: Always return ``min(k, len(self))`` hits, zero-score paragraphs last in
                corpus order (``retrieval.rank``; the envs' ``search_fill``).
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        ids = [self._vocab[t] for t in tokenize(query) if t in self._vocab][:MAX_QUERY_TOKENS]
        if self.manifest.method == "robertson":  # idf 0 where df >= N / 2: adds nothing
            n, indptr = self.manifest.num_docs, self._indptr
            ids = [i for i in ids if 2 * (int(indptr[i + 1]) - int(indptr[i])) < n]
        n_docs = len(self._paragraphs)
        scores = self._index.get_scores_from_ids(ids) if ids else np.zeros(n_docs)
        hits = []
        for i in rank(scores, k, self._titled(query), fill):
            paragraph = self._paragraphs[i]
            hits.append(Hit(paragraph.title, paragraph.text, float(scores[i]), i))
        return hits


def read_manifest(folder: str | os.PathLike[str]) -> CorpusManifest:
    """Read and check a corpus folder's ``manifest.json``.

    Raises:
        CorpusIndexError: No manifest, an unreadable one, or another format or tokenizer.
    """
    folder = Path(folder)
    path = folder / "manifest.json"
    if not path.is_file():
        what = "does not exist" if not folder.exists() else "is not a corpus folder"
        raise CorpusIndexError(
            f"{folder} {what} (no manifest.json). Build one with "
            "passkt.envs.corpus.Corpus.build(paragraphs).save(folder), or from_hotpotqa / "
            "from_world."
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        manifest = CorpusManifest(**raw)
    except (ValueError, TypeError) as e:
        raise CorpusIndexError(f"{path}: unreadable manifest ({e}); rebuild the folder.") from e
    if manifest.format != CORPUS_FORMAT or manifest.tokenizer != TOKENIZER:
        raise CorpusIndexError(
            f"{folder} was built with format {manifest.format} and tokenizer "
            f"{manifest.tokenizer!r}; this passkt reads format {CORPUS_FORMAT} with "
            f"{TOKENIZER!r}. Rebuild it (Corpus.load_or_build does so)."
        )
    return manifest


@functools.lru_cache(maxsize=4)
def _open_cached(folder: str, stamp: tuple[int, int]) -> Corpus:
    return Corpus.load(folder)


def open_corpus(folder: str | os.PathLike[str]) -> Corpus:
    """``Corpus.load(folder)``, cached per process (the envs call this for ``corpus=<folder>``).

    The cache key includes the manifest's modification time, so a rebuilt folder is reloaded.
    """
    resolved = Path(folder).resolve()
    manifest = resolved / "manifest.json"
    if not manifest.is_file():
        read_manifest(resolved)  # raises the explanatory error
    stat = manifest.stat()
    return _open_cached(str(resolved), (stat.st_mtime_ns, stat.st_ino))
