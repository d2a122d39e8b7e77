"""The Wikipedia tool (passkt.envs.wikipedia): cache, offline replay, failures, rate limit, envs.

No test touches the network: pages come from a cache the test fills, or from a fake MediaWiki
served through an ``httpx.MockTransport`` injected into the tool.
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs.retrieval import Retriever
from passkt.envs.tasks import Paragraph, Task

httpx = pytest.importorskip("httpx", reason="the wiki extra (wikipedia-api, httpx) is needed")
pytest.importorskip("wikipediaapi", reason="the wiki extra (wikipedia-api) is needed")

from passkt.envs.wikipedia import (  # noqa: E402
    WikiCache,
    WikiPage,
    WikipediaTool,
    WikipediaUnavailableError,
    normalize_title,
)

ED_WOOD = WikiPage("Ed Wood", 10, "Edward Davis Wood Jr. was an American filmmaker.", "en")
BURTON = WikiPage("Tim Burton", 20, "Timothy Walter Burton is an American filmmaker.", "en")
PAGES = {"Ed Wood": ED_WOOD, "Tim Burton": BURTON}
SEARCH = {"ed wood director": ["Tim Burton", "Ed Wood", "Ed Wood (film)"]}


class FakeWiki:
    """A fake MediaWiki API: answers ``prop=extracts`` and ``list=search`` from dicts."""

    def __init__(self, fail_first: int = 0, status: int | None = None) -> None:
        self.calls: list[dict[str, str]] = []
        self.fail_first, self.status = fail_first, status

    def __call__(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        self.calls.append(params)
        if len(self.calls) <= self.fail_first:
            if self.status is not None:
                return httpx.Response(self.status, request=request)
            raise httpx.ConnectError("network is unreachable", request=request)
        if params.get("list") == "search":
            titles = SEARCH.get(params["srsearch"].lower(), [])[: int(params["srlimit"])]
            hits = [{"ns": 0, "title": t, "pageid": 99} for t in titles]
            body = {"query": {"searchinfo": {"totalhits": len(hits)}, "search": hits}}
            return httpx.Response(200, json=body)
        page = PAGES.get(params["titles"].replace("_", " "))
        if page is None:
            entry = {"-1": {"ns": 0, "title": params["titles"], "missing": ""}}
        else:
            entry = {str(page.pageid): {"pageid": page.pageid, "ns": 0, "title": page.title,
                                        "extract": page.summary}}  # fmt: skip
        return httpx.Response(200, json={"query": {"pages": entry}})


def online_tool(tmp_path, fake: FakeWiki, **options) -> WikipediaTool:
    options = {"min_interval": 0.0, "retry_wait": 0.0, "max_retries": 0, **options}
    return WikipediaTool(tmp_path / "wiki.sqlite", transport=httpx.MockTransport(fake), **options)


def test_title_normal_form() -> None:
    assert normalize_title("  ed_wood \t") == "Ed wood"
    assert normalize_title("Ed_Wood") == normalize_title("Ed   Wood") == "Ed Wood"


def test_cache_filled_by_hand_answers_offline(tmp_path) -> None:
    cache = WikiCache(tmp_path / "wiki.sqlite")
    cache.put_page("en", "Ed_Wood", ED_WOOD)
    cache.put_page("en", "ed wood director", None)  # no page of that title
    cache.put_search("en", "Ed Wood  DIRECTOR", ["Tim Burton", "Ed Wood"], limit=2)
    cache.put_page("en", "Tim Burton", BURTON)
    cache.close()

    tool = WikipediaTool(tmp_path / "wiki.sqlite", offline=True)
    assert isinstance(tool, Retriever)
    hits = tool.search("Ed Wood", k=1)
    assert [(h.title, h.text, h.doc_index, h.score) for h in hits] == [
        ("Ed Wood", ED_WOOD.summary, 10, 1.0)
    ]
    hits = tool.search("ed wood director", k=3)  # no page: search results, as cached
    assert [h.title for h in hits] == ["Tim Burton", "Ed Wood"]
    assert [h.score for h in hits] == [1.0, 0.5]
    assert tool.requests == 0 and tool._client is None


def test_offline_miss_names_the_title_and_the_cache(tmp_path) -> None:
    tool = WikipediaTool(tmp_path / "wiki.sqlite", offline=True)
    with pytest.raises(
        WikipediaUnavailableError, match=r"'Ed Wood' .*not in the cache .*wiki\.sqlite"
    ):
        tool.page("Ed Wood")
    with pytest.raises(WikipediaUnavailableError, match="offline=True"):
        tool.search_titles("who directed Ed Wood", 3)
    assert tool.requests == 0


def test_fetches_fill_the_cache_and_replay_offline(tmp_path) -> None:
    fake = FakeWiki()
    tool = online_tool(tmp_path, fake)
    hits = tool.search("Ed Wood director", k=3)
    # The title lookup misses, the search lists three titles, the third has no page.
    assert [h.title for h in hits] == ["Tim Burton", "Ed Wood"]
    assert len(fake.calls) == tool.requests == 5
    assert tool.search("Ed Wood director", k=3) == hits
    assert len(fake.calls) == 5  # second time: all from the cache

    replay = WikipediaTool(tmp_path / "wiki.sqlite", offline=True)
    assert replay.search("  Ed Wood   director ", k=3) == hits  # spacing is normalized
    assert replay.page("Ed_Wood") == ED_WOOD
    assert replay.page("Ed Wood (film)") is None  # a missing page is cached too


def test_network_failure_falls_back_to_the_cache_else_raises(tmp_path) -> None:
    cache = WikiCache(tmp_path / "wiki.sqlite")
    cache.put_page("en", "Ed Wood", ED_WOOD, fetched_at=time.time() - 3600)  # stale
    fake = FakeWiki(fail_first=10**6)
    tool = online_tool(tmp_path, fake, max_age=60.0, max_retries=2)
    assert tool.page("Ed Wood") == ED_WOOD  # refetch failed: the stale entry is used
    assert len(fake.calls) == 3  # one request, two retries
    with pytest.raises(WikipediaUnavailableError, match=r"'Tim Burton'.*wiki\.sqlite.*unreachable"):
        tool.page("Tim Burton")
    assert len(fake.calls) == 3  # offline after the failure: no new attempt

    strict = online_tool(tmp_path, fake, offline=False)
    with pytest.raises(
        WikipediaUnavailableError, match=r"the network is unreachable \(WikiConnectionError"
    ):
        strict.page("Tim Burton")
    assert len(fake.calls) == 4  # offline=False tries every time


def test_retries_server_errors_then_succeeds(tmp_path) -> None:
    fake = FakeWiki(fail_first=2, status=503)
    tool = online_tool(tmp_path, fake, max_retries=3)
    assert tool.page("Tim Burton") == BURTON
    assert len(fake.calls) == 3 and tool.requests == 1


def test_rate_limit_spaces_requests(tmp_path) -> None:
    now = [100.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    tool = online_tool(tmp_path, FakeWiki(), min_interval=2.0, clock=lambda: now[0], sleep=sleep)
    tool.page("Ed Wood")
    now[0] += 0.5
    tool.page("Tim Burton")
    tool.page("Tim Burton")  # cached: no request, no wait
    assert waits == [pytest.approx(1.5)]


def test_env_searches_wikipedia(tmp_path) -> None:
    cache = WikiCache(tmp_path / "wiki.sqlite")
    cache.put_page("en", "Ed Wood", ED_WOOD)
    cache.put_page("en", "Tim Burton", BURTON)
    cache.put_search("en", "Ed Wood", ["Ed Wood", "Tim Burton"], limit=5)
    tool = WikipediaTool(cache, offline=True)
    task = Task("t", "bridge", "Who made Ed Wood?", "Tim Burton",
                paragraphs=(Paragraph("P", "unused"),), depth=1)  # fmt: skip
    env = gym.make("BridgeQA-v0", tasks=[task], retriever=tool, top_k=2)
    env.reset(options={"task_id": "t"})
    obs, *_ = env.step("<search>Ed Wood</search>")
    assert obs == (
        f"<information>Doc 1 (Title: Ed Wood) {ED_WOOD.summary}\n"
        f"Doc 2 (Title: Tim Burton) {BURTON.summary}</information>"
    )
    with pytest.raises(ValueError, match="leave corpus at its default 'task'"):
        gym.make("BridgeQA-v0", tasks=[task], retriever=tool, corpus="global")


def test_lone_surrogates_reach_the_wiki_and_its_cache_as_replacement_characters(tmp_path) -> None:
    fake = FakeWiki()
    tool = online_tool(tmp_path, fake)
    assert tool.search("Ed Wood \ud800", k=2) == []  # no such page or search: no error
    assert fake.calls[0]["titles"] == "Ed Wood \ufffd"
    replay = WikipediaTool(tmp_path / "wiki.sqlite", offline=True)
    assert replay.search("Ed Wood \udfff", k=2) == []  # the same key, answered from the cache
