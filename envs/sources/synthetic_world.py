"""A generated world of fictional entities, rendered as short Wikipedia-style paragraphs.

The world behind the ``synthetic`` task source (``passkt.envs.sources.synthetic``): countries,
cities, universities, people, companies, bands and films whose names are built from a small
syllable inventory, so no pretrained model knows a fact about them, and whose paragraphs use a
small closed vocabulary (tiny models are trained on this world from scratch).

Mentions form a DAG: a paragraph names only entities of a *lower* kind
(film -> person, company; company -> person, city; band -> person, city;
person -> city, university; university -> city; city -> country). A person's paragraph never
names the films they directed, so a chain of lookups never leads back to where it started.

Names are checked when they are made: every name word is unique in the world, no name word is a
substring of another name word or of an English word of the templates, and no two entities share
a full name. So a name occurs in a text exactly where that entity is mentioned.

``build_world(seed, scale=k)`` is the scale-1 world followed by ``k - 1`` further blocks of
entities (more people with the same surnames, more films with the same title words ...): the
first ``world.base_size`` entities are identical for every scale, so tasks made from the scale-1
world stay valid against the larger global corpus ``world.paragraphs``.
"""

from __future__ import annotations

import functools
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from passkt.envs.tasks import Paragraph

KINDS = ("country", "city", "university", "person", "company", "band", "film")
"""Entity kinds, from the bottom of the mention DAG to the top."""

RELATIONS: dict[str, dict[str, str]] = {
    "country": {},
    "city": {"country": "country"},
    "university": {"city": "city"},
    "person": {"city": "city", "university": "university"},
    "company": {"founder": "person", "hq": "city"},
    "band": {"leader": "person", "city": "city"},
    "film": {"director": "person", "studio": "company"},
}
"""kind -> {relation: kind of its target}; a paragraph names the target of each relation."""

MAX_SCALE = 50
MAX_SHARED = 4
"""At most this many paragraphs of a task may contain a word of a gold title (BM25 idf > 0)."""

SYLLABLES = (
    "ba", "bel", "da", "dor", "fa", "fen", "ga", "gor", "ka", "kel", "ko", "lir",
    "ma", "mor", "na", "nev", "pa", "pel", "ra", "ros", "sa", "sel", "ta", "tor",
    "va", "vin", "za", "zor", "mi", "ru", "li", "to", "ve", "du", "ni", "ke",
)  # fmt: skip

# Syllable words that are English words, names or places (Debian's wamerican word list,
# checked once when the syllables were chosen); never used as name words.
_REAL_WORDS = frozenset((
    "babel", "bake", "bali", "bani", "basel", "dada", "dali", "dana", "data", "dave", "duke",
    "fake", "gave", "gavin", "gaza", "kali", "kama", "kara", "kelli", "kelvin", "keto", "kevin",
    "libel", "like", "lima", "lina", "lira", "lisa", "live", "liza", "mabel", "make", "mali",
    "mama", "mani", "mara", "mavin", "mike", "mimi", "mini", "mira", "morsel", "napa", "nasa",
    "nato", "nave", "nike", "nina", "nita", "papa", "pave", "raga", "rake", "rama", "rave",
    "razor", "rumor", "saga", "sake", "sana", "sara", "save", "selma", "take", "tami", "tara",
    "taros", "toga", "toke", "toni", "toto", "veda", "vega", "vera", "veto", "zara", "bamako",
    "banana", "bellini", "dakota", "manama", "masada", "matador", "mazama", "minima", "panama",
    "ramada", "saliva", "samara", "tamara", "tamika", "tomato", "zapata",
))  # fmt: skip

_BLOCK_COUNTS = {"country": 8, "city": 48, "university": 24, "company": 80, "band": 40, "film": 480}
_ROLE_COUNTS = {"director": 120, "founder": 80, "leader": 40, "other": 360}
"""People per block by role (founders = companies, leaders = bands)."""
_BIG_CITIES = 16
"""Universities, companies and bands sit in the first cities of a block (so some share one)."""

_UNIVERSITY_SUFFIXES = ("University", "College", "Institute")
_STUDIO_SUFFIXES = ("Pictures", "Studios", "Films")
_TRADE_SUFFIXES = {"Motors": "cars", "Foods": "food", "Press": "books", "Records": "albums"}
_BAND_SUFFIXES = ("Band", "Trio", "Quartet", "Ensemble")
NAME_SUFFIXES = frozenset(
    (*_UNIVERSITY_SUFFIXES, *_STUDIO_SUFFIXES, *_TRADE_SUFFIXES, *_BAND_SUFFIXES)
)
"""Kind words that end company, band and university names (look-alikes share them)."""
_OCCUPATIONS = ("writer", "painter", "teacher", "doctor", "poet", "farmer", "nurse")
_ROLE_OCCUPATION = {"director": "filmmaker", "founder": "business owner", "leader": "singer"}
_WORKS = {
    "filmmaker": ("quiet family dramas", "long war epics", "dark crime stories"),
    "singer": ("sad love songs", "loud live shows", "old folk songs"),
    "business owner": ("bold ideas", "careful planning", "hard work"),
}
_FILLERS = {
    "genre": ("drama", "comedy", "war", "crime", "music", "family"),
    "story": (
        "a lost child", "two old friends", "a long winter", "a small farm",
        "a young singer", "a journey home", "a missing letter", "a quiet town",
    ),
    "work": ("early work", "later work", "many prizes"),
    "field": ("law", "medicine", "music", "physics", "history", "art"),
    "region": ("north", "south", "east", "west"),
    "industry": ("farming", "fishing", "mining", "trade"),
    "size": ("small", "large", "busy", "quiet"),
    "feature": ("markets", "bridges", "gardens", "harbour", "towers", "museums"),
    "season": ("summer", "spring", "autumn", "winter"),
    "access": ("public", "private"),
    "style": ("rock", "folk", "jazz", "pop"),
    "songs": ("sad", "loud", "short", "slow"),
}  # fmt: skip
"""Words drawn at random for the template fields that carry no fact."""

_TEMPLATES = {
    "country": "{name} is a small country in the {region} of the continent. It was declared "
    "independent in {year}. Most people in {name} work in {industry}.",
    "city": "{name} is a {size} city in {country}. It was founded in {year} and is known for its "
    "{feature}. Most of the visitors to {name} come in the {season}.",
    "university": "{name} is a {access} school in {city}. It was founded in {year}. "
    "{name} is best known for the quality of its {field} courses.",
    "person": "{name} (born {year}) is a {occupation} from {city}. {surname} was a student of "
    "{field} at {university} and is best known in the region for {work}.",
    "studio": "{name} is a movie company based in {hq}. It was founded in {year} by {founder}. "
    "{name} is one of the largest makers of {genre} movies.",
    "trade": "{name} is a company based in {hq}. It was founded in {year} by {founder}. "
    "{name} sells {goods} in all parts of the region.",
    "band": "{name} is a {style} group from {city}. It was formed in {year} by the singer "
    "{leader}. {name} is known for the sound of its {songs} songs.",
    "film": "{name} is a {year} {genre} film directed by {director}. It was made by {studio} and "
    "shown in many cinemas. {name} tells the story of {story}.",
}
"""Paragraph texts. Every paragraph names its own entity twice (retrieval by title); name
suffixes (University, Films, Band ...) never occur in running text, so they tell names apart."""

_MIN_WORD = 4


def template_words() -> frozenset[str]:
    """Every lowercase English word of the paragraph templates, fillers and name suffixes."""
    texts = [
        *_TEMPLATES.values(), *NAME_SUFFIXES, *_TRADE_SUFFIXES.values(), *_OCCUPATIONS,
        *_ROLE_OCCUPATION.values(), *(w for v in (*_WORKS.values(), *_FILLERS.values()) for w in v),
    ]  # fmt: skip
    return frozenset(w for t in texts for w in re.findall(r"[a-z]+", t.lower()))


def reserved_substrings() -> frozenset[str]:
    """Strings no name word may equal: every 4+ letter piece of an English template word, and
    the syllable words that are real words or names."""
    return frozenset({s for w in template_words() for s in _substrings(w)} | _REAL_WORDS)


@dataclass(frozen=True)
class Entity:
    """One fictional entity of the world and its paragraph."""

    id: int
    """Index in ``World.entities``."""
    kind: str
    """One of ``KINDS``."""
    name: str
    """Unique in the world; the title of its paragraph."""
    year: int
    """Birth, founding, forming, release or independence year."""
    links: tuple[tuple[str, int], ...]
    """``(relation, entity id)`` pairs (see ``RELATIONS``); the paragraph names every target."""
    name_words: tuple[str, ...]
    """Name words that look-alikes share: given name and surname, title words, or the kind
    suffix of a company, band or university ("Studios"); cities and countries share none."""
    paragraph: Paragraph

    def link(self, relation: str) -> int:
        """The id of the entity this one relates to by ``relation`` (e.g. a film's director)."""
        for rel, target in self.links:
            if rel == relation:
                return target
        known = ", ".join(rel for rel, _ in self.links)
        raise KeyError(f"{self.kind} {self.name!r} has no relation {relation!r} (has: {known})")

    @property
    def linked(self) -> tuple[int, ...]:
        """Ids of every entity this entity's paragraph names."""
        return tuple(target for _, target in self.links)


@dataclass(frozen=True)
class World:
    """A generated world: immutable, and identical for the same ``seed`` and ``scale``."""

    seed: int
    scale: int
    entities: tuple[Entity, ...]
    base_size: int
    """The first ``base_size`` entities form the scale-1 world (the same at every scale)."""

    @functools.cached_property
    def paragraphs(self) -> tuple[Paragraph, ...]:
        """Every paragraph of the world, in entity order: the global search corpus."""
        return tuple(e.paragraph for e in self.entities)

    @functools.cached_property
    def _by_kind(self) -> dict[tuple[str, bool], tuple[int, ...]]:
        index: dict[tuple[str, bool], list[int]] = defaultdict(list)
        for e in self.entities:
            index[e.kind, False].append(e.id)
            if e.id < self.base_size:
                index[e.kind, True].append(e.id)
        return {key: tuple(ids) for key, ids in index.items()}

    @functools.cached_property
    def tokens(self) -> tuple[frozenset[str], ...]:
        """Per entity: the lowercase words (``\\w+``) of its paragraph's title and text."""
        return tuple(
            frozenset(re.findall(r"\w+", f"{e.name} {e.paragraph.text}".lower()))
            for e in self.entities
        )

    @functools.cached_property
    def name_tokens(self) -> tuple[frozenset[str], ...]:
        """Per entity: the words of its paragraph that belong to names (its own, the linked
        entities'), lowercase: what a reader of the paragraph learns to search for."""
        vocabulary = {w.lower() for e in self.entities for w in e.name.split()}
        return tuple(tokens & vocabulary for tokens in self.tokens)

    @functools.cached_property
    def _by_name(self) -> dict[str, int]:
        return {e.name: e.id for e in self.entities}

    @functools.cached_property
    def _shared(self) -> dict[tuple, tuple[int, ...]]:
        index: dict[tuple, list[int]] = defaultdict(list)
        for e in self.entities:
            for word in e.name_words:
                index[e.kind, "word", word].append(e.id)
            index[e.kind, "year", e.year].append(e.id)
            for rel, target in e.links:
                index[e.kind, rel, target].append(e.id)
        return {key: tuple(ids) for key, ids in index.items()}

    def of_kind(self, kind: str, *, base_only: bool = False) -> tuple[int, ...]:
        """Ids of every entity of ``kind`` (only the scale-1 world's with ``base_only``)."""
        if kind not in KINDS:
            raise ValueError(f"unknown entity kind {kind!r}; expected one of {KINDS}")
        return self._by_kind.get((kind, base_only), ())

    def by_name(self, name: str) -> Entity:
        """The entity called ``name`` (KeyError if there is none)."""
        try:
            return self.entities[self._by_name[name]]
        except KeyError:
            raise KeyError(f"no entity named {name!r} in the synthetic world") from None

    def siblings(self, entity_id: int) -> tuple[int, ...]:
        """Other entities of the same kind that share a name word (surname, title word, ...)."""
        e = self.entities[entity_id]
        out = (i for w in e.name_words for i in self._shared[e.kind, "word", w] if i != entity_id)
        return tuple(dict.fromkeys(out))

    def mates(self, entity_id: int) -> tuple[int, ...]:
        """Other entities of the same kind sharing the year or a linked entity (e.g. a city)."""
        e = self.entities[entity_id]
        keys = [(e.kind, "year", e.year), *((e.kind, rel, t) for rel, t in e.links)]
        out = (i for key in keys for i in self._shared[key] if i != entity_id)
        return tuple(dict.fromkeys(out))

    def sharing(self, kind: str, relation: str, target: int) -> tuple[int, ...]:
        """Entities of ``kind`` whose ``relation`` points at ``target`` (``"year"``: a year)."""
        return self._shared.get((kind, relation, target), ())

    @functools.cached_property
    def _splits(self) -> dict[tuple[str, str], tuple[int, ...]]:
        out = {}
        for kind in KINDS:
            ids = list(self.of_kind(kind, base_only=True))
            random.Random(f"passkt-synthetic/{self.seed}/split/{kind}").shuffle(ids)
            half = len(ids) // 2
            out[kind, "train"], out[kind, "test"] = tuple(ids[:half]), tuple(ids[half:])
        return out

    def split_ids(self, kind: str, split: str) -> tuple[int, ...]:
        """The half of the scale-1 world's entities of ``kind`` that start ``split``'s tasks."""
        return self._splits[kind, split]

    def distractors(
        self,
        golds: Sequence[int],
        rng: random.Random,
        plan: Sequence[tuple[Sequence[int], int]],
        count: int,
        private: frozenset[str] = frozenset(),
    ) -> list[int]:
        """Ids of ``count`` scale-1 distractors for the gold entities: ``plan`` lists candidates
        and how many to take from each (look-alikes first); random entities fill up.

        A distractor never names a gold entity, so each gold is reachable only from the
        paragraphs the task intends; and no title word of a gold occurs in more than
        ``MAX_SHARED`` of the golds' and distractors' paragraphs, so a search for a gold title
        ranks that gold's paragraph first. No distractor contains a ``private`` word.
        """
        gold_set = set(golds)
        watched = {
            w.lower()
            for g in golds
            for w in self.entities[g].name.split()
            if w not in NAME_SUFFIXES
        }
        shared = dict.fromkeys(watched, 0)
        for g in golds:
            for w in watched & self.tokens[g]:
                shared[w] += 1
        chosen: list[int] = []

        def take(c: int) -> bool:
            if c >= self.base_size or c in gold_set or c in chosen:
                return False
            words = watched & self.tokens[c]
            if (
                not gold_set.isdisjoint(self.entities[c].linked)
                or not private.isdisjoint(self.tokens[c])
                or any(shared[w] >= MAX_SHARED for w in words)
            ):
                return False
            for w in words:
                shared[w] += 1
            chosen.append(c)
            return True

        for candidates, wanted in plan:
            candidates = list(candidates)
            rng.shuffle(candidates)
            for c in candidates:
                if wanted == 0 or len(chosen) == count:
                    break
                wanted -= take(c)
        fill_kinds = [self.entities[g].kind for g in golds] + list(KINDS)
        for attempt in range(1000):
            if len(chosen) == count:
                return chosen
            take(rng.choice(self.of_kind(fill_kinds[attempt % len(fill_kinds)], base_only=True)))
        raise RuntimeError(f"could not find {count} distractors for {golds}")  # pragma: no cover


class _WordMaker:
    """Makes name words from the syllables; none is a substring of another or of an English word."""

    def __init__(self) -> None:
        self.words: set[str] = set()
        self.substrings: set[str] = set(reserved_substrings())

    def make(self, rng: random.Random, syllables: int) -> str:
        for attempt in range(10_000):
            n = syllables + attempt // 200  # longer words once the short ones run out
            word = "".join(rng.choice(SYLLABLES) for _ in range(n))
            if word in self.substrings or any(s in self.words for s in _substrings(word)):
                continue
            self.words.add(word)
            self.substrings.update(_substrings(word))
            return word.capitalize()
        raise RuntimeError("ran out of name words; use a smaller scale")


def _substrings(word: str) -> Iterable[str]:
    return (word[i:j] for i in range(len(word)) for j in range(i + _MIN_WORD, len(word) + 1))


class _Builder:
    """Adds blocks of entities to a world under construction."""

    def __init__(self) -> None:
        self.entities: list[Entity] = []
        self.by_kind: dict[str, list[int]] = defaultdict(list)
        self.words = _WordMaker()
        self.pools: dict[str, list[str]] = defaultdict(list)
        self.taken: set[str] = set()
        self.taken_words: set[frozenset[str]] = set()

    def add_block(self, rng: random.Random, first: bool) -> None:
        """Add one block of every kind; later blocks reuse most name words of earlier ones."""
        share_new = 1.0 if first else 0.25
        for pool, size in (("given", 60), ("surname", 200), ("title", 200)):
            count = max(1, round(size * share_new))
            self.pools[pool].extend(self.words.make(rng, 2) for _ in range(count))
        countries = self._many(rng, _BLOCK_COUNTS["country"], self._country)
        cities = self._many(rng, _BLOCK_COUNTS["city"], self._city, countries)
        big = cities[:_BIG_CITIES]
        self._many(rng, _BLOCK_COUNTS["university"], self._university, big)
        people = {
            role: self._many(rng, count, self._person, role) for role, count in _ROLE_COUNTS.items()
        }
        half = _BLOCK_COUNTS["company"] // 2
        studios = self._many(rng, half, self._company, people["founder"][:half], big, True)
        self._many(rng, half, self._company, people["founder"][half:], big, False)
        self._many(rng, _BLOCK_COUNTS["band"], self._band, people["leader"], big)
        self._many(rng, _BLOCK_COUNTS["film"], self._film, people["director"], studios)

    def _many(self, rng: random.Random, count: int, make, *args) -> list[int]:
        ids = []
        for i in range(count):
            entity = make(rng, i, *args)
            self.entities.append(entity)
            self.by_kind[entity.kind].append(entity.id)
            ids.append(entity.id)
        return ids

    def _new(self, kind, name, year, links, name_words, text) -> Entity:
        if name in self.taken:  # _combo and _WordMaker make fresh names; this guards them
            raise AssertionError(f"duplicate name {name!r}")
        self.taken.add(name)
        paragraph = Paragraph(title=name, text=text)
        return Entity(
            len(self.entities), kind, name, year, tuple(links), tuple(name_words), paragraph
        )

    def _combo(self, rng: random.Random, pools: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """A fresh two-word name from pool words; adds pool words when combinations run out."""
        for attempt in range(200):
            if attempt >= 50:  # crowded pools: a new word makes fresh combinations
                self.pools[pools[-1]].append(self.words.make(rng, 3))
            words = tuple(rng.choice(self.pools[p]) for p in pools)
            name = " ".join(words)
            if len(set(words)) == len(words) and frozenset(words) not in self.taken_words:
                self.taken_words.add(frozenset(words))  # no "Kador Gorga" and "Gorga Kador"
                return name, words
        raise RuntimeError(f"could not make a fresh name from the pools {pools}")

    def _suffixed(self, rng: random.Random, suffixes: tuple[str, ...]) -> tuple[str, str]:
        """A fresh word and a kind suffix ("Nadana Studios"); look-alikes share the suffix."""
        suffix = rng.choice(suffixes)
        return f"{self.words.make(rng, 3)} {suffix}", suffix

    def _text(self, rng: random.Random, template: str, **facts: object) -> str:
        """The template filled with ``facts``, plus random words for the other fields."""
        for field in re.findall(r"{(\w+)}", _TEMPLATES[template]):
            if field not in facts:
                facts[field] = rng.choice(_FILLERS[field])
        return _TEMPLATES[template].format(**facts)

    def _country(self, rng: random.Random, i: int) -> Entity:
        name, year = self.words.make(rng, 3), rng.randint(1800, 1990)
        return self._new(
            "country", name, year, (), (), self._text(rng, "country", name=name, year=year)
        )

    def _city(self, rng: random.Random, i: int, block_countries: list[int]) -> Entity:
        name, year = self.words.make(rng, 3), rng.randint(1700, 1900)
        # The first cities of a block go one to each of its countries, the rest anywhere.
        country = (
            block_countries[i] if i < len(block_countries) else rng.choice(self.by_kind["country"])
        )
        text = self._text(rng, "city", name=name, year=year, country=self.entities[country].name)
        return self._new("city", name, year, [("country", country)], (), text)

    def _university(self, rng: random.Random, i: int, cities: list[int]) -> Entity:
        name, suffix = self._suffixed(rng, _UNIVERSITY_SUFFIXES)
        city, year = rng.choice(cities), rng.randint(1750, 1900)
        text = self._text(rng, "university", name=name, year=year, city=self.entities[city].name)
        return self._new("university", name, year, [("city", city)], (suffix,), text)

    def _person(self, rng: random.Random, i: int, role: str) -> Entity:
        name, words = self._combo(rng, ("given", "surname"))
        years = {"director": (1900, 1975), "founder": (1850, 1960), "leader": (1930, 1990)}
        year = rng.randint(*years.get(role, (1900, 1995)))
        occupation = _ROLE_OCCUPATION.get(role) or rng.choice(_OCCUPATIONS)
        city, university = rng.choice(self.by_kind["city"]), rng.choice(self.by_kind["university"])
        text = self._text(
            rng, "person", name=name, year=year, occupation=occupation, surname=words[1],
            city=self.entities[city].name, university=self.entities[university].name,
            work=rng.choice(_WORKS.get(occupation, _FILLERS["work"])),
        )  # fmt: skip
        links = [("city", city), ("university", university)]
        return self._new("person", name, year, links, words, text)

    def _company(
        self, rng: random.Random, i: int, founders: list[int], cities: list[int], studio: bool
    ) -> Entity:
        name, suffix = self._suffixed(rng, _STUDIO_SUFFIXES if studio else tuple(_TRADE_SUFFIXES))
        founder, hq = self.entities[founders[i]], rng.choice(cities)
        year = min(2015, founder.year + rng.randint(20, 50))
        facts = dict(name=name, hq=self.entities[hq].name, year=year, founder=founder.name)
        if not studio:
            facts["goods"] = _TRADE_SUFFIXES[suffix]
        text = self._text(rng, "studio" if studio else "trade", **facts)
        return self._new(
            "company", name, year, [("founder", founder.id), ("hq", hq)], (suffix,), text
        )

    def _band(self, rng: random.Random, i: int, leaders: list[int], cities: list[int]) -> Entity:
        name, suffix = self._suffixed(rng, _BAND_SUFFIXES)
        leader, city = self.entities[leaders[i]], rng.choice(cities)
        year = min(2015, leader.year + rng.randint(18, 35))
        text = self._text(
            rng, "band", name=name, year=year, leader=leader.name, city=self.entities[city].name
        )
        return self._new(
            "band", name, year, [("leader", leader.id), ("city", city)], (suffix,), text
        )

    def _film(self, rng: random.Random, i: int, directors: list[int], studios: list[int]) -> Entity:
        name, words = self._combo(rng, ("title", "title"))
        director = self.entities[rng.choice(directors)]
        studio = self.entities[rng.choice(studios)]
        year = min(2020, max(studio.year, director.year + 25) + rng.randint(0, 30))
        text = self._text(
            rng, "film", name=name, year=year, director=director.name, studio=studio.name
        )
        links = [("director", director.id), ("studio", studio.id)]
        return self._new("film", name, year, links, words, text)


@functools.lru_cache(maxsize=8)
def build_world(seed: int = 0, scale: int = 1) -> World:
    """Build (and cache) the synthetic world of ``seed``.

    Args:
        seed: Any integer; the same seed gives the same world, byte for byte.
        scale: Number of entity blocks (1 = the default world of 1,280 entities).
            Larger scales append more entities that share surnames, title words, cities and
            years with the first block (hard distractors for open-domain retrieval); the first
            ``world.base_size`` entities are the same at every scale.

    Returns:
        The frozen ``World``.

    Raises:
        TypeError: ``seed`` or ``scale`` is not an integer.
        ValueError: ``scale`` is outside ``1..MAX_SCALE``.
    """
    for arg, value in (("seed", seed), ("scale", scale)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"build_world: {arg} must be an int, got {value!r}")
    if not 1 <= scale <= MAX_SCALE:
        raise ValueError(f"build_world: scale must be in 1..{MAX_SCALE}, got {scale}")
    builder = _Builder()
    base_size = 0
    for block in range(scale):
        # One independent stream per block keeps earlier blocks identical at every scale.
        builder.add_block(random.Random(f"passkt-synthetic/{seed}/world/{block}"), block == 0)
        base_size = base_size or len(builder.entities)
    return World(seed=seed, scale=scale, entities=tuple(builder.entities), base_size=base_size)
