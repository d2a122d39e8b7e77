"""A word-level tokenizer fitted to the synthetic world, with a byte fallback for anything else.

Every text an env or a prompt produces for the synthetic world is cut into *pre-tokens* by one
regular expression (a lowercase word with its leading space, a capitalised word, a single digit,
a run of punctuation, a run of newlines, a run of spaces; a space before a name or a digit ends
the pre-token before it, see ``PRE_TOKEN_PATTERN``), and every pre-token seen in the fitting texts
(the world's paragraphs, every task question and answer, the system prompts, the protocol's
messages, scripted episodes) is one token. So a paragraph costs about one token per word, years
and numbers one token per digit, and the protocol tags (``<search>``, ``</answer>``, ...) and the
ChatML markers one token each. Tokens are stored byte-level (GPT-2's byte-to-character map), and
the 256 byte symbols are in the vocabulary too: text the fitting never saw (another world, a
typo, any Unicode) falls back to smaller pieces or single bytes, so *every* string round-trips
exactly, ``decode(encode(text)) == text``.

The model is a ``tokenizers`` Unigram whose word pieces all have the same score, far above the
bytes' scores: a known pre-token is always one token, never split (a BPE would need thousands of
intermediate merges for the same words). Saved as a ``PreTrainedTokenizerFast`` with a ChatML chat
template, so ``AutoTokenizer``, ``HFPolicy`` and ``ChatTokens`` use it like any other tokenizer.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym

from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.scripted import HeuristicPolicy
from passkt.agents.tiny import CHATML_TEMPLATE, END_OF_TEXT, IM_END, IM_START
from passkt.envs import protocol
from passkt.envs.protocol import SYSTEM_PROMPTS
from passkt.envs.sources import synthetic
from passkt.envs.sources.synthetic_world import build_world

SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
"""ChatML markers, as in ``passkt.agents.tiny`` (pad, turn start, turn end / EOS)."""

PROTOCOL_TAGS: tuple[str, ...] = (
    "<think>", "</think>", "<search>", "</search>",
    "<answer>", "</answer>", "<information>", "</information>",
)  # fmt: skip
"""Action protocol tags: one token each, matched anywhere in a text, decoded as themselves."""

_SPACELESS = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{N}]"
"""Characters that start a pre-token without a space: capitals (names), other letters, digits."""
_TRAIL = rf"(?: (?={_SPACELESS}))?"
PRE_TOKEN_PATTERN = (
    rf" ?\p{{Ll}}\p{{L}}*{_TRAIL}"  # a lowercase word and its leading space
    rf"|[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}]\p{{L}}*{_TRAIL}"  # a name, without one
    rf"|\p{{N}}{_TRAIL}"  # one digit
    rf"| ?[^\s\p{{L}}\p{{N}}]+{_TRAIL}|\n+| +|\s"  # punctuation, newlines, other spaces
)
"""How text is cut before lookup (Oniguruma syntax); it matches every character somewhere.

A lowercase word carries its leading space (`` the``), as in GPT-2. A capitalised word (a name)
and a digit never do: the space before them ends the *previous* pre-token instead (`` of ``,
``Torka ``, ``, ``). So a name or a year is the same token sequence wherever it occurs: in a
paragraph, in a question and right after a tag (``of Torka Rufa`` and ``<search>Torka Rufa`` both
give ``Torka ``, ``Rufa``). An agent that copies a name from what it read into a query or an answer
copies tokens it has seen, which a small model learns quickly; with GPT-2's rule ``" Torka"`` and
``"Torka"`` would be unrelated tokens. The texts of the synthetic world come out exactly as long
as with GPT-2's rule."""

WORD_SCORE = -1.0
"""Unigram score of every fitted pre-token: one piece always beats a split into two or more."""
BYTE_SCORE = -100.0
"""Unigram score of the 256 byte symbols (the fallback)."""

MODEL_MAX_LENGTH = 4096


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ``ByteLevel`` uses)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


_UNICODE_OF = _bytes_to_unicode()
_BYTE_OF = {ch: b for b, ch in _UNICODE_OF.items()}


def to_byte_level(text: str) -> str:
    """``text`` as the byte-level symbols the tokenizer stores (``" Kador"`` -> ``"ĠKador"``)."""
    return "".join(_UNICODE_OF[b] for b in text.encode("utf-8"))


def _pre_tokenizer() -> Any:
    from tokenizers import Regex, pre_tokenizers  # optional: the hf extra (torch, transformers)

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


_ADDED = re.compile("|".join(re.escape(t) for t in (*SPECIAL_TOKENS, *PROTOCOL_TAGS)))


def count_pre_tokens(texts: Iterable[str]) -> collections.Counter[str]:
    """How often each byte-level pre-token occurs in ``texts`` (added tokens cut out first)."""
    pre = _pre_tokenizer()
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        for segment in _ADDED.split(text):
            if segment:
                counts.update(piece for piece, _ in pre.pre_tokenize_str(segment))
    return counts


def fit_vocabulary(texts: Iterable[str], *, min_count: int = 1) -> list[str]:
    """The word pieces of a tokenizer fitted to ``texts``: every pre-token seen ``min_count``
    times or more, most frequent first (ties in code-point order), bytes and tags excluded.

    Args:
        texts: The fitting texts.
        min_count: Rarer pre-tokens are left to the byte fallback.

    Returns:
        Byte-level pieces (``"ĠKador"``), without the 256 single-byte symbols.
    """
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    counts = count_pre_tokens(texts)
    singles = set(_UNICODE_OF.values())
    kept = [p for p, c in counts.items() if c >= min_count and p not in singles]
    return sorted(kept, key=lambda p: (-counts[p], p))


def build_tokenizer(words: Iterable[str]) -> Any:
    """A ``PreTrainedTokenizerFast`` over ``words`` (byte-level pieces from ``fit_vocabulary``).

    Ids: the 3 ChatML specials (0-2), the 8 protocol tags (3-10), the 256 bytes (11-266), then
    the words in the order given.
    """
    # optional: the hf extra (torch, transformers)
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast  # optional: the hf extra (torch, transformers)

    fixed = [*SPECIAL_TOKENS, *PROTOCOL_TAGS]
    alphabet = [_UNICODE_OF[b] for b in range(256)]
    seen = set(fixed) | set(alphabet)
    pieces = [w for w in dict.fromkeys(words) if w not in seen]
    vocab = [(t, WORD_SCORE) for t in fixed]
    vocab += [(ch, BYTE_SCORE) for ch in alphabet]
    vocab += [(w, WORD_SCORE) for w in pieces]
    backend = Tokenizer(models.Unigram(vocab, unk_id=None, byte_fallback=False))
    backend.pre_tokenizer = _pre_tokenizer()
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in PROTOCOL_TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=CHATML_TEMPLATE,
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )


def fitting_texts(seed: int = 0, *, tasks_per_split: int = 300) -> Iterator[str]:
    """Every kind of text the synthetic world's envs, prompts and scripted agents produce.

    The world's paragraphs and names (also as a query or answer, where a name follows a tag with
    no space), the questions and answers of every category, split and bridge depth, the system
    prompts, every protocol message, the oracle's think lines and a few heuristic episodes.
    """

    world = build_world(seed)
    for paragraph in world.paragraphs:
        yield f"Doc 1 (Title: {paragraph.title}) {paragraph.text}"
        yield f"<search>{paragraph.title}</search><answer>{paragraph.title}</answer>"
    for category in synthetic.CATEGORIES:
        hops = {"hops": synthetic.HOPS} if category == "bridge" else {}
        for split in ("train", "test"):
            for task in synthetic.load_tasks(
                category, split, seed=seed, num_tasks=tasks_per_split, **hops
            ):
                yield task.question
                yield f"<answer>{task.answer}</answer> {task.answer}"
    yield from protocol_texts()
    yield from _heuristic_texts(seed)


def protocol_texts() -> Iterator[str]:
    """System prompts, env messages (every invalid-action reason) and the scripted think lines."""

    yield from SYSTEM_PROMPTS.values()
    yield from (protocol.FINAL_NOTICE, protocol.NO_RESULTS, protocol.ANSWER_RECEIVED)
    yield protocol.TRUNCATED_MESSAGE
    broken: list[Any] = [
        "",
        "hi",
        "<search>x",
        "<answer>x",
        "<think>x",
        "<search><answer>a</search>",
    ]
    broken.append(0)
    for action in broken:
        yield protocol.invalid_action_message(protocol.parse_action(action).error or "")
    yield protocol.invalid_action_message(protocol.no_tools_message())
    yield from (protocol.budget_line(n) for n in range(10))
    yield "\n".join(f"Doc {i} (Title: T) x." for i in range(1, 11))
    yield "<think>I need to look up X.</think>\n<think>I have found everything I need.</think>\n"
    yield "<think>I could not finish the search.</think>\n<answer>unknown</answer> yes no"
    yield "system\nuser\nassistant\n"
    yield "<think>12 + 3 = 15. 15 - 2 = 13. 13 * 2 = 26. 26 / 2 = 13.</think>\n<answer>13</answer>"


def load_tokenizer(path: str | Path) -> Any:
    """Load a saved testbed tokenizer (``AutoTokenizer.from_pretrained`` works as well)."""
    from transformers import AutoTokenizer  # optional: the hf extra (torch, transformers)

    return AutoTokenizer.from_pretrained(str(path))


def _heuristic_texts(seed: int, tasks: int = 40) -> Iterator[str]:
    """The turns of a few ``HeuristicPolicy`` episodes (it searches any capitalised word)."""

    for env_id in ("BridgeQA-v0", "ComparisonQA-v0", "Math-v0"):
        kwargs = {"split": "train", "source_options": {"seed": seed}}
        budget = 0 if env_id == "Math-v0" else 5
        env = gym.make(env_id, max_tool_calls=budget, **kwargs)
        ids = [task.task_id for task in env.unwrapped.tasks[:tasks]]
        env.close()
        result = rollout(
            HeuristicPolicy(seed), env_id, ids, n=2, budgets=(budget,), env_kwargs=kwargs,
            params=SamplingParams(seed=seed),
        )  # fmt: skip
        for episode in result.episodes:
            yield from (m["content"] for m in episode.messages)
