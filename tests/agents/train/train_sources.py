"""Task sources of the trainer tests (imported by conftest.py and the distributed worker).

``digits``: four one-turn ``Math-v0`` questions whose answer is the digit 7 (see conftest.py for
why one shared answer). ``people``: four one-hop ``BridgeQA-v0`` questions (search the person,
read the birthplace, answer) with two short paragraphs each.
"""

from __future__ import annotations

from passkt.envs.tasks import Paragraph, Task, register_source

DIGIT_QUESTIONS = (
    ("What is two plus five?", "7"),
    ("Name the lucky digit of the harbour.", "7"),
    ("Which digit does the grader want?", "7"),
    ("Tell me the answer for Alder Vale.", "7"),
)
DIGIT_ENV = {"source": "digits"}
DIGIT_IDS = [f"digit-{i}" for i in range(len(DIGIT_QUESTIONS))]


def digit_source(category: str, split: str, **options: object) -> list[Task]:
    """The same four questions in both splits (a test source: nothing to generalise to)."""
    # The envs pass no options unless a test asks; reject any so a typo cannot pass silently.
    if options:
        raise TypeError(f"digits takes no options, got {sorted(options)}")
    if category != "math":
        return []
    return [
        Task(
            task_id=DIGIT_IDS[i],
            category="math",
            question=question,
            answer=answer,
            answer_type="number",
            source="digits",
            split=split,
        )
        for i, (question, answer) in enumerate(DIGIT_QUESTIONS)
    ]


PEOPLE = (
    ("Mira Oskan", "Port Hollis"),
    ("Tamsin Orrel", "Alder Vale"),
    ("Brann Ketil", "Stonemere"),
    ("Ilse Varro", "Quillport"),
)


def people_source(category: str, split: str, **options: object) -> list[Task]:
    """Four one-hop bridge questions with two short paragraphs each."""
    if options:
        raise TypeError(f"people takes no options, got {sorted(options)}")
    if category != "bridge":
        return []
    return [
        Task(
            task_id=f"person-{i}",
            category="bridge",
            question=f"Where was {person} born?",
            answer=town,
            paragraphs=(
                Paragraph(person, f"{person} was born in {town}."),
                Paragraph(town, f"{town} is a town by the sea."),
            ),
            gold_titles=(person,),
            gold_queries=(person,),
            depth=1,
            source="people",
            split=split,
        )
        for i, (person, town) in enumerate(PEOPLE)
    ]


def register_test_sources() -> None:
    """Register ``digits``, ``people`` and ``lookup`` (idempotent)."""
    register_source("digits", digit_source)
    register_source("people", people_source)
    register_source("lookup", lookup_source)


LOOKUP_ENV = {"source": "lookup"}
LOOKUP_IDS = [f"lookup-{i}" for i in range(len(PEOPLE))]
_FILLER = (
    ("Harbours", "Harbours shelter ships from storms."),
    ("Rivers", "Rivers carry water to the sea."),
    ("Bridges", "Bridges cross rivers and roads."),
)


def lookup_source(category: str, split: str, **options: object) -> list[Task]:
    """The ``people`` questions with two more filler paragraphs each: a 1-hop lookup whose search
    finds the person's paragraph (with only two paragraphs, BM25's idf of a term in one of them
    is 0, so ``people``'s searches return nothing)."""
    if options:
        raise TypeError(f"lookup takes no options, got {sorted(options)}")
    if category != "bridge":
        return []
    return [
        Task(
            task_id=LOOKUP_IDS[i],
            category="bridge",
            question=f"Where was {person} born?",
            answer=town,
            paragraphs=(
                Paragraph(person, f"{person} was born in {town}."),
                *(Paragraph(title, text) for title, text in _FILLER),
            ),
            gold_titles=(person,),
            gold_queries=(person,),
            depth=1,
            source="lookup",
            split=split,
        )
        for i, (person, town) in enumerate(PEOPLE)
    ]
