"""``passkt serve`` and the OpenEnv client env, end to end against real servers.

Three ``passkt serve`` subprocesses (BridgeQA-v0 with text tags, BridgeQA-v0 in the tool format,
Math-v0) on free local ports. Episodes played through OpenEnv's own generic client must equal the
same episodes in process, step for step (observation, reward, flags, info), for the actions of the
scripted oracle and heuristic agents and for hostile texts; ``passkt eval`` through the client env
must write the records an in-process eval writes.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import httpx
import pytest
from openenv.core import GenericEnvClient
from serving import stop, wait_until_healthy

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.agents.env_probe import hostile_actions
from passkt.agents.openenv_client import ENV_ID, OpenEnvClientEnv
from passkt.agents.rollout import rollout
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy, write_action
from passkt.cli import main
from passkt.envs.contract import inspect_env
from passkt.envs.errors import EnvServerError
from passkt.eval.store import RESULTS_FILE

CLIENT = f"passkt.agents.openenv_client:{ENV_ID}"
THIRD_PARTY = Path(__file__).resolve().parents[1] / "third_party"
SERVED = {
    "bridge": ("BridgeQA-v0", {}),
    "tools": ("BridgeQA-v0", {"protocol": "tools"}),
    "math": ("Math-v0", {}),
    "kv": ("kv_lookup:KVLookupMinimal-v0", {}),
}
"""Server name -> (env id, env kwargs) of the servers the tests start. ``kv`` is a third-party
env with nothing but the contract's minimum (seed tasks, passkt's budget wrapper, no category)."""


# ---------------------------------------------------------------------- the servers


def _start(env_id: str, kwargs: dict, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "passkt", "serve", env_id, "--port", "0"]
    if kwargs:
        argv += ["--env-kwargs", json.dumps(kwargs)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(THIRD_PARTY)}
    with log.open("w") as err:  # a file, not a pipe: a server that logs never blocks on it
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)


def _announced(log: Path) -> Callable[[], str | None]:
    """The URL the server prints once it listens (it was asked for port 0)."""

    def url() -> str | None:
        found = re.search(r"serving \S+ at (http://\S+)", log.read_text())
        return found.group(1) if found else None

    return url


class Servers:
    """The ``SERVED`` servers, each started on first use and all stopped by ``stop``."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: dict[str, subprocess.Popen] = {}
        self.urls: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        if name not in self.urls:
            env_id, kwargs = SERVED[name]
            log = self.logs / f"{name}.log"
            self.started[name] = _start(env_id, kwargs, log)
            self.urls[name] = wait_until_healthy(self.started[name], _announced(log), log)
        return self.urls[name]

    def stop(self) -> None:
        for server in self.started.values():
            stop(server)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """name -> URL of each ``SERVED`` server; every server started is stopped at the end."""
    pool = Servers(tmp_path_factory.mktemp("serve"))
    try:
        yield pool
    finally:
        pool.stop()


SLOW = pytest.mark.slow  # one more server to start (about 5 s, most of it importing openenv)
NAMES = ["bridge", pytest.param("tools", marks=SLOW), pytest.param("math", marks=SLOW)]
"""The servers of passkt's envs (the scripted agents know their tasks)."""


# ---------------------------------------------------------------------- episodes, side by side


def served(result) -> tuple:
    """A reply of OpenEnv's generic client as Gymnasium's tuple (the exact strings when the
    server had to escape some)."""
    metadata = result.observation["metadata"]
    text, info = result.observation["text"], metadata["info"]
    if "exact" in metadata:
        exact = json.loads(metadata["exact"])
        text, info = exact["text"], exact["info"]
    reward = 0.0 if result.reward is None else result.reward
    assert result.done == (metadata["terminated"] or metadata["truncated"])
    return text, reward, metadata["terminated"], metadata["truncated"], info


def local(text, reward, terminated, truncated, info) -> tuple:
    """An in-process step as the wire carries it (info as JSON: tuples become lists)."""
    return text, float(reward), bool(terminated), bool(truncated), json.loads(json.dumps(info))


class Wire:
    """A session of OpenEnv's generic client, stepped like a Gymnasium env."""

    def __init__(self, client) -> None:
        self.client = client

    def reset(self, budget: int, **reset) -> tuple:
        text, _, _, _, info = served(self.client.reset(**reset, max_tool_calls=budget))
        return text, info

    def step(self, action: str) -> tuple:
        return served(self.client.step({"text": action}))


class ClientEnvs:
    """The client env ``OpenEnvClient-v0`` on a server, one per budget, stepped the same way."""

    def __init__(self, url: str) -> None:
        self.url, self.envs, self.env = url, {}, None

    def reset(self, budget: int, **reset) -> tuple:
        if budget not in self.envs:
            self.envs[budget] = gym.make(CLIENT, base_url=self.url, max_tool_calls=budget)
        self.env = self.envs[budget]
        return self.env.reset(**reset)

    def step(self, action: str) -> tuple:
        return self.env.step(action)

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


def play(remote, env_id, kwargs, task_id, budget, actions) -> int:
    """Step an in-process env and ``remote`` (``Wire``, ``ClientEnvs``) with ``actions``,
    resetting both on the task whenever the episode ends; assert every reply equal. Returns the
    steps compared."""
    env = gym.make(env_id, max_tool_calls=budget, disable_env_checker=True, **kwargs)
    reset = {"seed": 0, "options": {"task_id": task_id}}
    compared, done = 0, True
    for action in actions:
        if done:
            observation, info = env.reset(**reset)
            assert remote.reset(budget, **reset) == (observation, json.loads(json.dumps(info)))
        want = local(*env.step(action))
        assert remote.step(action) == want, (task_id, budget, action[:80])
        compared, done = compared + 1, want[2] or want[3]
    env.close()
    return compared


def agent_episodes(env_id, kwargs, tasks, budgets) -> list[tuple[str, int, list[str]]]:
    """(task, T, actions) of every episode the oracle and the heuristic agent play in process."""
    episodes = []
    for policy in (OraclePolicy(tasks), HeuristicPolicy(5)):
        ids = [task.task_id for task in tasks]
        result = rollout(policy, env_id, ids, n=2, budgets=budgets, env_kwargs=kwargs, seed=3)
        for e in result.episodes:
            actions = [m["content"] for m in e.messages if m["role"] == "assistant"]
            episodes.append((e.task_id, e.budget, actions))
    return episodes


def hostile_texts(env_id, kwargs) -> list[str]:
    """``passkt check-env``'s hostile texts for the env, and answers with lone surrogates (which
    the env echoes in ``info["answer"]``, so that they must travel escaped)."""
    env = gym.make(env_id, **kwargs).unwrapped
    texts = [text for _, text in hostile_actions(env.protocol.stop)]
    tools = env.protocol.tools
    for answer in ("\ud800", "a\udfffb"):
        texts.append(write_action("answer", answer, bool(tools)))
    return texts


@pytest.mark.parametrize("name", NAMES)
def test_served_episodes_equal_in_process_episodes(servers, name):
    env_id, kwargs = SERVED[name]
    tasks = gym.make(env_id, **kwargs).unwrapped.tasks[:6]
    budgets = (0,) if env_id == "Math-v0" else (0, 1, 2, 3, 5)
    episodes = agent_episodes(env_id, kwargs, tasks, budgets)
    hostile = hostile_texts(env_id, kwargs)
    compared = 0
    with GenericEnvClient(base_url=servers[name]).sync() as client:
        for task_id, budget, actions in episodes:
            compared += play(Wire(client), env_id, kwargs, task_id, budget, actions)
        for task in tasks[:2]:  # T = 0 for math: each hostile text ends an episode
            wire = Wire(client)
            compared += play(wire, env_id, kwargs, task.task_id, budgets[-1] * 20, hostile)
    assert compared >= len(episodes) + 2 * len(hostile)


def test_the_client_env_steps_as_the_env_does(servers):
    tasks = gym.make("BridgeQA-v0").unwrapped.tasks[:3]
    remote = ClientEnvs(servers["bridge"])
    try:
        for task in tasks:
            play(remote, "BridgeQA-v0", {}, task.task_id, 60, hostile_texts("BridgeQA-v0", {}))
    finally:
        remote.close()


def test_a_lone_surrogate_travels_escaped(servers):
    with GenericEnvClient(base_url=servers["bridge"]).sync() as client:
        client.reset(seed=0, max_tool_calls=1)
        metadata = client.step({"text": "<answer>a\udfffb</answer>"}).observation["metadata"]
    assert metadata["info"]["answer"] == "a\ufffdb"  # readable as UTF-8
    assert json.loads(metadata["exact"])["info"]["answer"] == "a\udfffb"  # and exact


def test_each_session_has_its_own_env(servers):
    tasks = gym.make("BridgeQA-v0").unwrapped.tasks[:2]
    url = servers["bridge"]
    with GenericEnvClient(base_url=url).sync() as a, GenericEnvClient(base_url=url).sync() as b:
        for client, task in ((a, tasks[0]), (b, tasks[1])):
            client.reset(seed=0, task_id=task.task_id, max_tool_calls=1)
        b_reply = served(b.step({"text": f"<search>{tasks[1].gold_queries[0]}</search>"}))
        a_reply = served(a.step({"text": f"<answer>{tasks[0].answer}</answer>"}))
        assert a_reply[1:3] == (1.0, True) and a_reply[4]["task_id"] == tasks[0].task_id
        assert b_reply[2:4] == (False, False) and b_reply[4]["tool_calls"] == 1
        assert b.state()["task_id"] == tasks[1].task_id


def test_bad_requests_get_errors_and_the_session_goes_on(servers):
    with GenericEnvClient(base_url=servers["bridge"]).sync() as client:
        with pytest.raises(RuntimeError, match="reset first"):
            client.step({"text": "<answer>x</answer>"})
        with pytest.raises(RuntimeError, match=r"unknown arguments.*budget"):
            client.reset(budget=3)
        with pytest.raises(RuntimeError, match="max_tool_calls must be an int"):
            client.reset(max_tool_calls=-1)
        with pytest.raises(RuntimeError, match="no-such-task"):
            client.reset(task_id="no-such-task")
        assert served(client.reset(seed=0, max_tool_calls=2))[0].endswith("?")


def test_the_task_api_lists_the_served_tasks(servers):
    tasks = gym.make("BridgeQA-v0", split="train").unwrapped.tasks
    url = servers["bridge"]
    reply = httpx.post(f"{url}/BridgeQA-v0/tasks", json={"split": "train"}, trust_env=False)
    records = reply.json()["tasks"]
    assert [r["task_id"] for r in records] == [t.task_id for t in tasks]
    assert records[0]["gold_queries"] == list(tasks[0].gold_queries)
    env = gym.make(CLIENT, base_url=url, split="train")
    assert env.unwrapped.tasks == tasks  # rebuilt as passkt Tasks
    env.close()


# ---------------------------------------------------------------------- the client env


@pytest.mark.parametrize("name", [*NAMES, pytest.param("kv", marks=SLOW)])
def test_the_client_env_has_the_served_contract(servers, name, monkeypatch):
    monkeypatch.syspath_prepend(str(THIRD_PARTY))
    env_id, kwargs = SERVED[name]
    here = inspect_env(env_id, kwargs)
    there = inspect_env(CLIENT, {"base_url": servers[name]})
    for field in ("task_ids", "tasks", "protocol", "reveal_budget", "has_tools"):
        assert getattr(there, field) == getattr(here, field), field
    assert (there.reward_max, there.reward_floor) == (here.reward_max, here.reward_floor)
    # The client hands T and the split to each reset; the server applies them as passkt would
    # (for kv: its budget wrapper, and one task list for both splits).
    assert there.takes_budget and there.takes_split
    assert here.takes_budget == here.takes_split == (name != "kv")
    assert not there.forkable  # budget branches replay the actions on another session


def records(run: Path) -> list[dict]:
    """A run's result and transcript lines, without the digest of its manifest (which names the
    env id and kwargs, and so differs)."""
    lines = []
    for name in (RESULTS_FILE, "transcripts.jsonl"):
        for line in (run / name).read_text().splitlines():
            record = json.loads(line)
            record.pop("manifest_digest", None)
            lines.append(record)
    return lines


@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("bridge", "scripted:oracle"),
        ("bridge", "scripted:heuristic"),
        pytest.param("tools", "scripted:heuristic", marks=SLOW),
        pytest.param("math", "scripted:oracle", marks=SLOW),
        pytest.param("kv", "py:kv_agents:make_policy", marks=SLOW),
    ],
)
def test_passkt_eval_through_the_client_writes_the_in_process_records(
    servers, name, policy, tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(THIRD_PARTY))
    env_id, kwargs = SERVED[name]
    common = ["--policy", policy, "--n", "2", "--limit", "6", "--no-progress", "--no-report"]
    common += ["--seed", "7"]
    here, there = tmp_path / "here", tmp_path / "there"
    local_kwargs = ["--env-kwargs", json.dumps(kwargs)] if kwargs else []
    assert main(["eval", "--env", env_id, *local_kwargs, *common, "--out", str(here)]) == 0
    url = json.dumps({"base_url": servers[name]})
    assert main(["eval", "--env", CLIENT, "--env-kwargs", url, *common, "--out", str(there)]) == 0
    want = records(here)
    assert len(want) >= 2 * 6 * 2  # (results + transcripts) x tasks x samples, at least
    assert records(there) == want


def test_check_env_passes_the_client_env(servers, capsys):
    assert main(["check-env", CLIENT, "--env-kwargs", f"base_url={servers['bridge']}"]) == 0
    assert "hostile actions answered" in capsys.readouterr().out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_client_env_without_a_server_fails_in_one_line(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EnvServerError, match=re.escape(url)):
        OpenEnvClientEnv(url, timeout=5)
    with pytest.raises(ValueError, match="base_url must be the server's URL"):
        OpenEnvClientEnv("127.0.0.1:8000")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--env", CLIENT, "--env-kwargs", f"base_url={url}", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and url in err[0], err


# ---------------------------------------------------------------------- passkt serve's errors


@pytest.mark.parametrize(
    ("argv", "culprit"),
    [
        (["NoSuchEnv-v0"], "Unknown env id 'NoSuchEnv-v0'"),
        (["BridgeQA-v0", "--env-kwargs", "no_such_kwarg=1"], "no_such_kwarg"),
        (["BridgeQA-v0", "--env-kwargs", "max_tool_calls=-1"], "max_tool_calls must be an int"),
        (["Math-v0", "--env-kwargs", "max_tool_calls=3"], "max_tool_calls must be 0"),
        (["BridgeQA-v0", "--host", "no.such.host.invalid"], "--host no.such.host.invalid"),
        (["BridgeQA-v0", "--port", "PORT_IN_USE"], "cannot listen on 127.0.0.1"),
    ],
)
def test_a_bad_serve_fails_in_one_line_before_serving(argv, culprit, capsys, monkeypatch):
    from passkt.agents import openenv_server

    monkeypatch.setattr(openenv_server, "serve", lambda *_: pytest.fail("the server started"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        argv = [a.replace("PORT_IN_USE", str(busy.getsockname()[1])) for a in argv]
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("passkt: error:") and culprit in err[0], err[0]


def test_the_cli_default_session_limit_is_the_server_one():
    from passkt.agents.openenv_server import DEFAULT_MAX_SESSIONS
    from passkt.eval import cli_serve

    assert cli_serve.DEFAULT_MAX_SESSIONS == DEFAULT_MAX_SESSIONS
