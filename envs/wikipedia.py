"""A live Wikipedia search tool with an on-disk cache: a ``Retriever`` for the open-domain envs.

``WikipediaTool(cache="wiki.sqlite")`` answers ``search(query, k)`` with Wikipedia pages: first
the page whose title is the query (redirects followed), then pages of MediaWiki's full-text search
(``list=search``) until ``k`` are found. A hit's text is the page's lead section, cut to
``max_chars``; its score is ``1 / rank`` (Wikipedia gives no score) and its ``doc_index`` the
page id. Pass it to an env as ``retriever=WikipediaTool(...)``.

Network access goes through ``wikipedia-api`` (the ``wiki`` extra, ``pip install
'passkt[wiki]'``), which owns the HTTP session (httpx), the timeout and the retries with
exponential backoff (honouring ``Retry-After`` on HTTP 429). This module adds:

- a SQLite cache (``WikiCache``) keyed by (language, normalized title) for pages, including pages
  that do not exist, and by (language, normalized query) for search results;
- a minimum interval between requests (``min_interval``);
- replay from the cache when offline: ``offline=True`` never touches the network, and in the
  default automatic mode a connection failure or timeout switches the tool to the cache for
  ``offline_cooldown`` seconds. A request that fails while a stale entry exists (older than
  ``max_age``) returns that entry. A request that cannot be answered raises
  ``WikipediaUnavailableError``, which names the title or query and the cache file.

Searches repeat exactly from the cache, so an evaluation can be rerun offline once the cache holds
its queries. Nothing is downloaded unless the tool is used with network access.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from passkt.envs.errors import MissingDependencyError, PassktError
from passkt.envs.retrieval import Hit

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_USER_AGENT",
    "CachedPage",
    "CachedSearch",
    "WikiCache",
    "WikiPage",
    "WikipediaTool",
    "WikipediaUnavailableError",
    "normalize_query",
    "normalize_title",
]

DEFAULT_USER_AGENT = "passkt/0.1 (https://github.com/passkt/passkt; research benchmark)"
"""Wikimedia asks every client to identify itself; pass your own contact in ``user_agent``."""
MAX_TITLE_BYTES = 255
"""MediaWiki's longest title; a longer query goes straight to full-text search."""


class WikipediaUnavailableError(PassktError, RuntimeError):
    """A page or search that is not in the cache and cannot be fetched (offline or failing)."""


def _valid_text(text: str) -> str:
    """``text`` with each lone surrogate (which a model's text may hold) replaced by U+FFFD.

    No title or search can contain one, and neither SQLite nor HTTP can carry it.
    """
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def normalize_title(title: str) -> str:
    """MediaWiki's title form: NFC, underscores as spaces, single spaces, first letter upper."""
    title = " ".join(unicodedata.normalize("NFC", title).replace("_", " ").split())
    return title[:1].upper() + title[1:]


def normalize_query(query: str) -> str:
    """Search keys ignore case and spacing (MediaWiki's search does too)."""
    return " ".join(unicodedata.normalize("NFC", query).casefold().split())


@dataclass(frozen=True)
class WikiPage:
    """A Wikipedia page's lead section."""

    title: str
    """The page's title (after redirects)."""
    pageid: int
    summary: str
    """Plain text of the lead section (the paragraphs before the first heading)."""
    language: str


@dataclass(frozen=True)
class CachedPage:
    """A cached title lookup: the page, or ``None`` when Wikipedia has no such page."""

    page: WikiPage | None
    fetched_at: float
    """Unix time of the fetch."""


@dataclass(frozen=True)
class CachedSearch:
    """Cached full-text search results (titles, best first)."""

    titles: tuple[str, ...]
    limit: int
    """How many results were asked for (fewer came back if Wikipedia had fewer)."""
    fetched_at: float


class WikiCache:
    """The SQLite cache behind ``WikipediaTool`` (usable on its own to fill or inspect it).

    Args:
        path: The database file (created with its folder if missing).
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS pages (language TEXT NOT NULL, key TEXT NOT NULL, "
        "title TEXT, pageid INTEGER, summary TEXT, fetched_at REAL NOT NULL, "
        "PRIMARY KEY (language, key))",
        "CREATE TABLE IF NOT EXISTS searches (language TEXT NOT NULL, key TEXT NOT NULL, "
        "titles TEXT NOT NULL, max_results INTEGER NOT NULL, fetched_at REAL NOT NULL, "
        "PRIMARY KEY (language, key))",
    )

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30.0)
        with self._db:
            for statement in self._SCHEMA:
                self._db.execute(statement)

    def get_page(self, language: str, title: str) -> CachedPage | None:
        """The cached lookup of ``title`` (any spelling with the same normal form), or None."""
        row = self._db.execute(
            "SELECT title, pageid, summary, fetched_at FROM pages WHERE language = ? AND key = ?",
            (language, normalize_title(title)),
        ).fetchone()
        if row is None:
            return None
        found, pageid, summary, fetched_at = row
        page = None if pageid is None else WikiPage(found, int(pageid), summary, language)
        return CachedPage(page, float(fetched_at))

    def put_page(
        self, language: str, title: str, page: WikiPage | None, fetched_at: float | None = None
    ) -> None:
        """Store the lookup of ``title``: ``page``, or ``None`` for a page that does not exist."""
        row = (None, None, None) if page is None else (page.title, page.pageid, page.summary)
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?, ?)",
                (language, normalize_title(title), *row, _now(fetched_at)),
            )

    def get_search(self, language: str, query: str) -> CachedSearch | None:
        """The cached results of ``query``, or None."""
        row = self._db.execute(
            "SELECT titles, max_results, fetched_at FROM searches WHERE language = ? AND key = ?",
            (language, normalize_query(query)),
        ).fetchone()
        if row is None:
            return None
        return CachedSearch(tuple(json.loads(row[0])), int(row[1]), float(row[2]))

    def put_search(
        self,
        language: str,
        query: str,
        titles: list[str] | tuple[str, ...],
        limit: int,
        fetched_at: float | None = None,
    ) -> None:
        """Store the results (titles, best first) of a search that asked for ``limit``."""
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO searches VALUES (?, ?, ?, ?, ?)",
                (
                    language,
                    normalize_query(query),
                    json.dumps(list(titles), ensure_ascii=False),
                    int(limit),
                    _now(fetched_at),
                ),
            )

    def close(self) -> None:
        """Close the database."""
        self._db.close()


def _now(value: float | None) -> float:
    return time.time() if value is None else float(value)


def _load_client_class() -> Any:
    try:
        import wikipediaapi  # optional: the wiki extra
    except ImportError as e:
        raise MissingDependencyError("wikipedia-api", "wiki") from e
    return wikipediaapi


class _Unreachable(Exception):
    """Internal: the network cannot answer now; ``reason`` completes the user's message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WikipediaTool:
    """Search Wikipedia through a SQLite cache: a ``Retriever`` (``search(query, k)``).

    Args:
        cache: The SQLite cache file (or a ``WikiCache``); searches are replayed from it.
        language: Wikipedia language code (``"en"``).
        user_agent: Identifies your project to Wikimedia; include a contact.
        offline: ``True``: answer from the cache only. ``False``: always try the network on a
            cache miss. ``None`` (default): try the network, and after a connection failure or
            timeout answer from the cache only for ``offline_cooldown`` seconds.
        min_interval: Least number of seconds between two requests.
        timeout: Seconds one HTTP request may take.
        max_retries: Retries of a request that timed out, could not connect, or got HTTP 429 or
            5xx; waits ``retry_wait * 2**attempt`` seconds (or ``Retry-After``) in between.
        retry_wait: The first retry's wait, in seconds.
        max_age: Seconds after which a cached entry is fetched again (``None``: never); when
            that fetch fails, the stale entry is used.
        max_chars: Longest hit text (a page's lead section, cut at a space).
        offline_cooldown: Seconds the automatic mode stays offline after a network failure.
        transport: An ``httpx`` transport for the client (a proxy, a caching transport, or in
            tests an ``httpx.MockTransport``); ``None`` for a plain HTTPS connection.
        clock: Monotonic seconds (for the rate limit and the cooldown; tests pass a fake).
        sleep: Waits for the rate limit (tests pass a fake).

    Raises:
        ValueError: A bad numeric option.
    """

    def __init__(
        self,
        cache: str | os.PathLike[str] | WikiCache,
        *,
        language: str = "en",
        user_agent: str = DEFAULT_USER_AGENT,
        offline: bool | None = None,
        min_interval: float = 0.2,
        timeout: float = 10.0,
        max_retries: int = 3,
        retry_wait: float = 1.0,
        max_age: float | None = None,
        max_chars: int = 1500,
        offline_cooldown: float = 300.0,
        transport: Any = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        intervals = {"min_interval": min_interval, "timeout": timeout, "retry_wait": retry_wait}
        intervals["offline_cooldown"] = offline_cooldown
        for name, value in intervals.items():
            if not value >= 0:
                raise ValueError(f"WikipediaTool: {name} must be >= 0, got {value!r}")
        if max_age is not None and not max_age >= 0:
            raise ValueError(f"WikipediaTool: max_age must be >= 0 or None, got {max_age!r}")
        if not (isinstance(max_retries, int) and max_retries >= 0):
            raise ValueError(f"WikipediaTool: max_retries must be an int >= 0, got {max_retries!r}")
        if not (isinstance(max_chars, int) and max_chars >= 1):
            raise ValueError(f"WikipediaTool: max_chars must be an int >= 1, got {max_chars!r}")
        if offline not in (True, False, None):
            raise ValueError(f"WikipediaTool: offline must be True, False or None, got {offline!r}")
        self.cache = cache if isinstance(cache, WikiCache) else WikiCache(cache)
        self.language = language.strip().lower()
        self.offline = offline
        self.max_age, self.max_chars = max_age, max_chars
        self._client_options = dict(
            user_agent=user_agent, max_retries=max_retries, retry_wait=retry_wait, timeout=timeout
        )
        if transport is not None:
            self._client_options["transport"] = transport
        self.min_interval, self.offline_cooldown = min_interval, offline_cooldown
        self._clock, self._sleep = clock, sleep
        self._client: Any = None
        self._last_request: float | None = None
        self._offline_until: float | None = None
        self.requests = 0
        """HTTP requests started (retries inside one request not counted)."""

    def __repr__(self) -> str:
        mode = {True: "offline", False: "online", None: "auto"}[self.offline]
        return f"WikipediaTool(language={self.language!r}, cache={str(self.cache.path)!r}, {mode})"

    # --- the Retriever protocol -----------------------------------------------------------------

    def search(self, query: str, k: int) -> list[Hit]:
        """The page titled ``query`` (if any), then full-text search results, ``k`` at most.

        Raises:
            WikipediaUnavailableError: A lookup it needs is neither cached nor fetchable.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        query = " ".join(_valid_text(query).split())
        if not query:
            return []
        pages: list[WikiPage] = []
        exact = self.page(query) if len(query.encode("utf-8")) <= MAX_TITLE_BYTES else None
        if exact is not None:
            pages.append(exact)
        if len(pages) < k:
            for title in self.search_titles(query, k):
                if len(pages) >= k:
                    break
                if all(page.title != title for page in pages):
                    page = self.page(title)
                    if page is not None and all(p.pageid != page.pageid for p in pages):
                        pages.append(page)
        return [
            Hit(page.title, self._excerpt(page.summary), 1.0 / rank, page.pageid)
            for rank, page in enumerate(pages, start=1)
        ]

    # --- lookups through the cache --------------------------------------------------------------

    def page(self, title: str) -> WikiPage | None:
        """The page titled ``title`` (redirects followed), or None if Wikipedia has none.

        Raises:
            WikipediaUnavailableError: Not cached (or stale) and the network cannot be used.
        """
        title = _valid_text(title)
        cached = self.cache.get_page(self.language, title)
        if cached is not None and self._fresh(cached.fetched_at):
            return cached.page
        try:
            page = self._request(self._fetch_page, title)
        except _Unreachable as e:
            if cached is not None:
                logger.warning("using the stale cached page %r: %s", title, e.reason)
                return cached.page
            raise WikipediaUnavailableError(
                f"Wikipedia page {normalize_title(title)!r} (language {self.language!r}) is not "
                f"in the cache {self.cache.path} and {e.reason}. Run once with network access to "
                "fill the cache, or use a cache file that holds it."
            ) from e.__cause__
        self.cache.put_page(self.language, title, page)
        return page

    def search_titles(self, query: str, limit: int) -> tuple[str, ...]:
        """Titles of MediaWiki's full-text search for ``query``, best first, ``limit`` at most.

        Raises:
            WikipediaUnavailableError: Not cached (or stale) and the network cannot be used.
        """
        query = _valid_text(query)
        cached = self.cache.get_search(self.language, query)
        # Fewer titles than were asked for means Wikipedia has no more: the entry answers any limit.
        enough = cached is not None and (cached.limit >= limit or len(cached.titles) < cached.limit)
        if cached is not None and enough and self._fresh(cached.fetched_at):
            return cached.titles[:limit]
        try:
            titles = self._request(self._fetch_search, query, limit)
        except _Unreachable as e:
            if cached is not None:
                logger.warning("using the cached search %r: %s", query, e.reason)
                return cached.titles[:limit]
            raise WikipediaUnavailableError(
                f"Wikipedia search {normalize_query(query)!r} (language {self.language!r}) is "
                f"not in the cache {self.cache.path} and {e.reason}. Run once with network "
                "access to fill the cache, or use a cache file that holds it."
            ) from e.__cause__
        self.cache.put_search(self.language, query, titles, limit)
        return titles

    def close(self) -> None:
        """Close the HTTP client and the cache."""
        http = getattr(self._client, "_client", None)  # wikipedia-api's httpx.Client
        if http is not None:
            http.close()
        self.cache.close()

    # --- network --------------------------------------------------------------------------------

    def _fresh(self, fetched_at: float) -> bool:
        return self.max_age is None or time.time() - fetched_at <= self.max_age

    def _request(self, fetch: Callable[..., Any], *args: Any) -> Any:
        """Run one fetch under the rate limit; ``_Unreachable`` when offline or failing."""
        if self.offline:
            raise _Unreachable("the tool is offline (offline=True)")
        now = self._clock()
        if self._offline_until is not None and now < self._offline_until:
            raise _Unreachable(
                f"the network was unreachable (offline for {self._offline_until - now:.0f} s "
                "more after a connection failure)"
            )
        wikipediaapi = _load_client_class()
        if self._last_request is not None:
            wait = self._last_request + self.min_interval - now
            if wait > 0:
                self._sleep(wait)
        self._last_request = self._clock()
        self.requests += 1
        try:
            return fetch(*args)
        except (wikipediaapi.WikipediaException, OSError) as e:
            unreachable = isinstance(
                e, wikipediaapi.WikiConnectionError | wikipediaapi.WikiHttpTimeoutError | OSError
            )
            if unreachable and self.offline is None:
                self._offline_until = self._clock() + self.offline_cooldown
            logger.warning("Wikipedia request failed: %r", e)
            what = "the network is unreachable" if unreachable else "the request failed"
            raise _Unreachable(f"{what} ({type(e).__name__}: {e})") from e

    def _wiki(self) -> Any:
        if self._client is None:
            wikipediaapi = _load_client_class()
            self._client = wikipediaapi.Wikipedia(
                language=self.language,
                extract_format=wikipediaapi.ExtractFormat.WIKI,
                **self._client_options,
            )
        return self._client

    def _fetch_page(self, title: str) -> WikiPage | None:
        wiki = self._wiki()
        page = wiki.page(title)
        summary = wiki.extracts(page, exintro=1)  # one request: the lead section, as plain text
        pageid = page.pageid  # set by that request (negative when missing): no second request
        if pageid is None or int(pageid) < 0:
            return None
        return WikiPage(page.title, int(pageid), summary.strip(), self.language)

    def _fetch_search(self, query: str, limit: int) -> tuple[str, ...]:
        results = self._wiki().search(query, limit=limit)
        return tuple(results.pages)[:limit]

    def _excerpt(self, summary: str) -> str:
        if len(summary) <= self.max_chars:
            return summary
        cut = summary.rfind(" ", 0, self.max_chars)
        return summary[: cut if cut > 0 else self.max_chars - 1].rstrip() + "…"
