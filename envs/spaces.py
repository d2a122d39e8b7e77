"""Text spaces for LLM environments: any Unicode string up to a maximum length.

``gymnasium.spaces.Text`` checks every character against a charset, which rejects the accents and
CJK of real HotpotQA paragraphs unless one lists all of Unicode (slow to build and to check). The
spaces here accept any ``str`` whose length is in range, and come with the vector-env support a
Gymnasium user expects:

* ``gym.make_vec(..., vectorization_mode="sync")`` returns a tuple of strings per step;
* ``gym.make_vec(..., vectorization_mode="async")`` works with the default ``shared_memory=True``.
  Gymnasium's own ``Text`` returns stale observations there, because ``read_from_shared_memory``
  decodes the buffer once, when the vector env is built. For ``UnicodeText`` it returns a live view
  (:class:`SharedTextBatch`) that decodes the buffer on each access, and that ``deepcopy`` (which
  ``AsyncVectorEnv`` applies with its default ``copy=True``) turns into a tuple of strings.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector.utils import space_utils
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

__all__ = ["ActionText", "SharedTextBatch", "UnicodeText"]

_SAMPLE_BLOCKS: tuple[tuple[int, int], ...] = (
    (0x20, 0x7E),  # printable ASCII
    (0xC0, 0x17F),  # Latin-1 supplement and Latin extended-A letters (accents)
    (0x391, 0x3C9),  # Greek
    (0x410, 0x44F),  # Cyrillic
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0x1F600, 0x1F64F),  # emoji
)
"""Code point ranges ``sample()`` draws from (no surrogates, no control characters)."""

_SAMPLE_WEIGHTS = np.array([0.7, 0.1, 0.05, 0.05, 0.07, 0.03])


class UnicodeText(Space[str]):
    """Any Unicode string with ``min_length <= len(s) <= max_length`` (length in code points).

    Example:
        >>> space = UnicodeText(max_length=100, seed=0)
        >>> "Björk — 東京" in space
        True
        >>> "x" * 101 in space
        False

    Args:
        max_length: The longest string in the space.
        min_length: The shortest string in the space.
        max_sample_length: ``sample()`` draws lengths up to ``min(max_length,
            max_sample_length)``, so that samples stay readable when ``max_length`` is large.
        seed: Seed for ``sample()``.
    """

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        max_sample_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if not (isinstance(max_length, int) and max_length >= 1):
            raise ValueError(f"max_length must be a positive int, got {max_length!r}")
        if not (isinstance(min_length, int) and 0 <= min_length <= max_length):
            raise ValueError(f"min_length must be an int in [0, {max_length}], got {min_length!r}")
        if not (isinstance(max_sample_length, int) and max_sample_length >= min_length):
            raise ValueError(
                f"max_sample_length must be an int >= min_length ({min_length}), "
                f"got {max_sample_length!r}"
            )
        self.max_length = max_length
        self.min_length = min_length
        self.max_sample_length = max_sample_length
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Text of unbounded alphabet has no fixed-size numpy encoding."""
        return False

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a ``str`` of allowed length (any characters)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def _random_text(self, length: int) -> str:
        blocks = self.np_random.choice(len(_SAMPLE_BLOCKS), size=length, p=_SAMPLE_WEIGHTS)
        low = np.array([_SAMPLE_BLOCKS[i][0] for i in blocks], dtype=np.int64)
        high = np.array([_SAMPLE_BLOCKS[i][1] for i in blocks], dtype=np.int64)
        codes = self.np_random.integers(low, high + 1) if length else []
        return "".join(map(chr, codes))

    def _sample_length(self, mask: int | None) -> int:
        if mask is not None:
            if not (
                isinstance(mask, (int, np.integer)) and self.min_length <= mask <= self.max_length
            ):
                raise ValueError(
                    f"sample(mask=...) takes a length in [{self.min_length}, {self.max_length}], "
                    f"got {mask!r}"
                )
            return int(mask)
        high = min(self.max_length, self.max_sample_length)
        return int(self.np_random.integers(self.min_length, high + 1))

    def sample(self, mask: int | None = None, probability: None = None) -> str:
        """A random string: mostly printable ASCII, with accented, Greek, Cyrillic, CJK, emoji.

        Args:
            mask: Optional exact length of the sample.
            probability: Not supported (``None`` only), kept for the ``Space`` signature.

        Returns:
            A string in the space.
        """
        if probability is not None:
            raise ValueError(f"{type(self).__name__}.sample() does not support probability=")
        return self._random_text(self._sample_length(mask))

    def to_jsonable(self, sample_n: Sequence[str]) -> list[str]:
        """Strings are JSON already."""
        return list(sample_n)

    def from_jsonable(self, sample_n: Sequence[str]) -> list[str]:
        """Strings are JSON already."""
        return list(sample_n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other.min_length == self.min_length  # type: ignore[attr-defined]
            and other.max_length == self.max_length  # type: ignore[attr-defined]
        )

    __hash__ = None  # type: ignore[assignment]  # mutable RNG inside, like other spaces


class ActionText(UnicodeText):
    """A ``UnicodeText`` action space whose ``sample()`` is a well-formed protocol action.

    ``contains`` accepts any string, exactly like ``UnicodeText``; only ``sample()`` differs: it
    wraps random words in one of ``tags``, e.g. ``<search>qx Ünt</search>`` or
    ``<answer>ba</answer>``, so that a random agent exercises the env's tools and answers instead of
    spending every turn on invalid actions.

    Args:
        max_length: The longest action in the space.
        tags: The action tags ``sample()`` chooses from, uniformly.
        tool_arguments: The tool format (``passkt.envs.tool_calls``): each tag's argument name;
            ``sample()`` then writes ``<tool_call>{"name": tag, "arguments": {...}}</tool_call>``.
        max_sample_length: Longest random content inside the tag.
        seed: Seed for ``sample()``.
    """

    def __init__(
        self,
        max_length: int,
        *,
        tags: Sequence[str] = ("search", "answer"),
        tool_arguments: Mapping[str, str] | None = None,
        max_sample_length: int = 24,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if not tags or not all(isinstance(tag, str) and tag.isalpha() for tag in tags):
            raise ValueError(f"tags must be a non-empty sequence of tag names, got {tags!r}")
        self.tags = tuple(tags)
        self.tool_arguments = None if tool_arguments is None else dict(tool_arguments)
        if self.tool_arguments is not None and set(self.tags) - set(self.tool_arguments):
            raise ValueError(f"tool_arguments must name the argument of every tag {self.tags}")
        super().__init__(max_length, max_sample_length=max_sample_length, seed=seed)

    def sample(self, mask: int | None = None, probability: None = None) -> str:
        """A random protocol action ``<tag>content</tag>`` (``mask``: content length)."""
        if probability is not None:
            raise ValueError(f"{type(self).__name__}.sample() does not support probability=")
        tag = self.tags[int(self.np_random.integers(len(self.tags)))]
        content = self._random_text(self._sample_length(mask)).replace("<", " ")
        if self.tool_arguments is not None:
            call = {"name": tag, "arguments": {self.tool_arguments[tag]: content}}
            return f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"
        return f"<{tag}>{content}</{tag}>"

    def __repr__(self) -> str:
        return f"ActionText(max_length={self.max_length}, tags={self.tags})"

    def __eq__(self, other: object) -> bool:
        return (
            super().__eq__(other)
            and other.tags == self.tags  # type: ignore[attr-defined]
            and other.tool_arguments == self.tool_arguments  # type: ignore[attr-defined]
        )

    __hash__ = None  # type: ignore[assignment]


# --- vector-env support ---
# Layout of the shared buffer: per env, one int32 length then ``max_length`` UTF-32 code units.


class SharedTextBatch(Sequence[str]):
    """A live, read-only view of the strings that async workers write into shared memory.

    ``AsyncVectorEnv`` builds this view once; each access decodes the current buffer, so the
    observations are never stale. ``copy.deepcopy`` returns a plain ``tuple[str, ...]`` snapshot
    (``AsyncVectorEnv`` deep-copies its observations unless built with ``copy=False``).
    """

    def __init__(self, shared_memory: Any, n: int, max_length: int) -> None:
        self._memory = shared_memory
        self._n = n
        self._row = max_length + 1

    def _buffer(self) -> np.ndarray:
        return np.frombuffer(self._memory.get_obj(), dtype=np.int32)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))  # type: ignore[return-value]
        if not -self._n <= index < self._n:
            raise IndexError(f"index {index} out of range for {self._n} environments")
        start = (index % self._n) * self._row
        buffer = self._buffer()
        length = int(buffer[start])
        return buffer[start + 1 : start + 1 + length].tobytes().decode("utf-32-le", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(self._n))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SharedTextBatch({tuple(self)!r})"


@create_shared_memory.register(UnicodeText)
def _create_unicode_text_shared_memory(space: UnicodeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@read_from_shared_memory.register(UnicodeText)
def _read_unicode_text_from_shared_memory(
    space: UnicodeText, shared_memory: Any, n: int = 1
) -> SharedTextBatch:
    return SharedTextBatch(shared_memory, n, space.max_length)


@write_to_shared_memory.register(UnicodeText)
def _write_unicode_text_to_shared_memory(
    space: UnicodeText, index: int, value: str, shared_memory: Any
) -> None:
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype=np.int32)
    if len(codes) > space.max_length:
        raise ValueError(
            f"observation of {len(codes)} characters does not fit {space!r}; "
            "raise the space's max_length"
        )
    row = space.max_length + 1
    destination = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    destination[index * row] = len(codes)
    destination[index * row + 1 : index * row + 1 + len(codes)] = codes


@space_utils.create_empty_array.register(UnicodeText)
def _create_empty_unicode_text_array(
    space: UnicodeText, n: int = 1, fn: Any = np.zeros
) -> tuple[str, ...]:
    return tuple(" " * space.min_length for _ in range(n))
