"""No secret reaches disk or logs: a key is planted everywhere it can enter, then searched for.

The key goes into the policy URL (userinfo and a query parameter), the run name, the
environment (``OPENAI_API_KEY``) and the policy options; a real ``passkt`` process evaluates
against a small OpenAI-compatible stub (and, with another URL, against a dead port, so that the
retry warnings and the error are logged). Every file written and every line printed or logged is
then searched for the key.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from passkt.agents.redact import RedactingFilter, redact, redact_value

PLANTED = "PLANTED7f3a9c"
KEY = f"sk-{PLANTED}key01"
HF_KEY = f"hf_{PLANTED}abcdefghijk"
SMALL = ["--env-kwargs", 'source_options={"num_tasks": 40}', "--limit", "2", "--n", "2"]


class _Stub(BaseHTTPRequestHandler):
    """Answers every chat request with an answer; lists one model."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": "<answer>Zanev</answer>"},
                "finish_reason": "stop",
            }
            for i in range(int(request.get("n", 1)))
        ]
        self._send(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": choices,
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


def _passkt(work: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": KEY, "OMP_NUM_THREADS": "1", "HF_TOKEN": HF_KEY}
    return subprocess.run(
        [sys.executable, "-m", "passkt.eval.cli", "-v", "-v", *argv],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _leaks(work: Path, *texts: str) -> list[str]:
    found = [str(p) for p in work.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()]
    found += [f"output line: {line}" for t in texts for line in t.splitlines() if PLANTED in line]
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"http://{KEY}@127.0.0.1:9/v1", "http://***@127.0.0.1:9/v1"),
        (f"https://user:{PLANTED}@host/v1", "https://***@host/v1"),
        (f"http://h/v1?api_key={PLANTED}&x=1", "http://h/v1?api_key=***&x=1"),
        (f"http://h/v1?key={PLANTED}", "http://h/v1?key=***"),
        (f"http://h/v1?x=1&access_token={PLANTED}#m", "http://h/v1?x=1&access_token=***#m"),
        (f"token {KEY} and {HF_KEY}", "token *** and ***"),
        (f"Authorization: Bearer {PLANTED}xyz", "Authorization: Bearer ***"),
        ("openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B-Instruct", None),
        ("task-0001 risk-free hf_model", None),
    ],
)
def test_redact(text, expected):
    assert redact(text) == (text if expected is None else expected)


def test_redact_value_reaches_nested_strings():
    value = {"policy": f"openai:http://{KEY}@h/v1#m", "opts": [{"note": HF_KEY}], "n": 3}
    assert PLANTED not in json.dumps(redact_value(value))
    assert redact_value(value)["n"] == 3


def test_the_log_filter_masks_messages_and_arguments(caplog):
    logger = logging.getLogger("passkt.test.secrets")
    handler = logging.Handler()
    records: list[str] = []
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    try:
        logger.warning("retrying %s after: %s", f"http://{KEY}@h/v1", f"?api_key={PLANTED}")
    finally:
        logger.removeHandler(handler)
    assert records and PLANTED not in records[0] and "retrying http://***@h/v1" in records[0]


def test_a_key_planted_everywhere_is_written_and_printed_nowhere(tmp_path, server):
    work = tmp_path / "work"
    work.mkdir()
    url = f"http://{KEY}@127.0.0.1:{server}/v1"
    ok = _passkt(work, "eval", "--policy", f"openai:{url}#m", "--name", f"base {KEY}",
                 *SMALL, "--budgets", "0,1", "--out", "run")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert (work / "run" / "report" / "report.md").is_file()
    manifest = json.loads((work / "run" / "manifest.json").read_text())
    assert manifest["policy"] == f"openai:http://***@127.0.0.1:{server}/v1#m"
    dead = f"http://127.0.0.1:9/v1?api_key={KEY}"
    failed = _passkt(work, "eval", "--policy", f"openai:{dead}#m", *SMALL, "--out", "dead")
    assert failed.returncode == 2
    assert "could not connect to http://127.0.0.1:9/v1?api_key=***" in failed.stderr
    assert "retrying" in failed.stderr  # the warnings were logged, masked
    report = _passkt(work, "report", "run", "--out", "again")
    assert report.returncode == 0, report.stderr
    texts = (ok.stdout, ok.stderr, failed.stdout, failed.stderr, report.stdout, report.stderr)
    assert _leaks(work, *texts) == []


def test_a_key_in_policy_options_is_written_nowhere(tmp_path, server, caplog):
    from passkt.eval.evaluate import evaluate

    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{server}/v1?token={KEY}"
    evaluate(
        "BridgeQA-v0",
        f"openai:{url}#m",
        env_kwargs={"source_options": {"num_tasks": 40}},
        n=2,
        budgets=(0,),
        limit=2,
        out_dir=tmp_path / "run",
        progress=False,
        policy_options={"max_retries": 1, "backoff": 0.01},
        name=f"base {HF_KEY}",
    )
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["name"] == "base ***"
    with pytest.raises(ValueError, match=r"api_key_env='\*\*\*'") as caught:
        evaluate(
            "BridgeQA-v0",
            f"openai:{url}#m",
            env_kwargs={"source_options": {"num_tasks": 40}},
            n=1,
            budgets=(0,),
            limit=1,
            out_dir=tmp_path / "wrong",
            progress=False,
            policy_options={"api_key_env": KEY},  # the key itself where its variable belongs
        )
    # passkt's own log lines; third-party libraries (httpx logs each request URL) log through the
    # caller's handlers, which the passkt command filters (the test above) and a library user
    # filters by installing passkt.agents.redact.RedactingFilter on them.
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("passkt"))
    assert _leaks(tmp_path, str(caught.value), ours) == []
