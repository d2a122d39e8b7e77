"""The result store: manifests, chunked fsynced appends, torn lines, resume, refusals."""

from __future__ import annotations

import json

import pytest

from passkt.eval.store import (
    MANIFEST_FILE,
    MATCH_KEYS,
    RESULTS_FILE,
    RunDirError,
    RunStore,
    chunk_bounds,
    load_run,
    make_manifest,
    read_run,
)
from passkt.eval.transcripts import TRANSCRIPTS_FILE, attach_transcripts

TASKS = [f"t{i}" for i in range(5)]
N = 2
BUDGETS = [0, 2]
CHUNK = 2  # chunks: [t0 t1] [t2 t3] [t4]


def manifest(**changes):
    args = dict(
        env_id="BridgeQA-v0",
        env_kwargs={"hops": 2},
        split="test",
        policy="scripted:heuristic",
        policy_options={},
        sampling={"temperature": 1.0, "top_p": 1.0},
        n=N,
        budgets=BUDGETS,
        seed=0,
        share_prefix=True,
        chunk_tasks=CHUNK,
        task_ids=TASKS,
    )
    args.update(changes)
    return make_manifest(**args)


def chunk_records(chunk: int) -> list[dict]:
    start, stop = chunk_bounds(len(TASKS), CHUNK)[chunk]
    return [
        {
            "task_id": task,
            "sample": s,
            "budget": b,
            "category": "bridge",
            # A pattern that differs per cell, so a misplaced line would change the table.
            "correct": (int(task[1:]) + s + b) % 3 == 0,
            "messages": [{"role": "user", "content": f"question {task} ünïcode"}],
        }
        for task in TASKS[start:stop]
        for s in range(N)
        for b in BUDGETS
    ]


def write_run(path, chunks=(0, 1, 2)):
    store = RunStore.open(path, manifest(), resume=False)
    for chunk in chunks:
        store.append_chunk(chunk, chunk_records(chunk))
    store.close()  # as when its process ends: the writer lock is released
    return store


def test_chunk_bounds_depend_only_on_sizes():
    assert chunk_bounds(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert chunk_bounds(4, 4) == [(0, 4)]
    assert chunk_bounds(0, 3) == []
    with pytest.raises(ValueError, match="chunk_tasks must be >= 1"):
        chunk_bounds(3, 0)


def test_manifest_records_request_and_provenance():
    m = manifest(env_kwargs={"path": __import__("pathlib").Path("/data/x.json")})
    assert all(key in m for key in MATCH_KEYS)
    assert m["env_kwargs"] == {"path": "/data/x.json"}  # JSON-safe
    assert m["num_chunks"] == 3 and m["num_tasks"] == 5 and m["name"] == "scripted:heuristic"
    assert m["versions"]["python"].count(".") == 2
    assert "gymnasium" in m["versions"] and "numpy" in m["versions"]
    assert "git_commit" in m and m["created"].endswith("+00:00")
    json.dumps(m)  # serialisable as is


def test_round_trip_and_file_layout(tmp_path):
    write_run(tmp_path / "run")
    lines = (tmp_path / "run" / RESULTS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(TASKS) * N * len(BUDGETS)
    assert [json.loads(line)["chunk"] for line in lines] == [0] * 8 + [1] * 8 + [2] * 4
    assert all("messages" not in json.loads(line) for line in lines)  # outcomes only
    transcripts = (tmp_path / "run" / TRANSCRIPTS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(transcripts) == len(lines) and "ünïcode" in transcripts[0]  # stored as written
    keys = [{k: json.loads(t)[k] for k in ("task_id", "sample", "budget")} for t in transcripts]
    assert keys == [{k: json.loads(x)[k] for k in ("task_id", "sample", "budget")} for x in lines]
    stored, table = load_run(tmp_path / "run")
    assert stored == json.loads((tmp_path / "run" / MANIFEST_FILE).read_text())
    assert table.task_ids == tuple(TASKS) and table.budgets == tuple(BUDGETS) and table.n == N
    for record in (r for c in range(3) for r in chunk_records(c)):
        i, b = TASKS.index(record["task_id"]), BUDGETS.index(record["budget"])
        assert table.correct[i, record["sample"], b] == record["correct"]
    assert table.name == "scripted:heuristic"
    assert load_run(tmp_path / "run", name="base")[1].name == "base"


def test_torn_last_line_and_unfinished_chunk_are_dropped_on_read(tmp_path):
    run = tmp_path / "run"
    write_run(run, chunks=(0, 1))
    results = run / RESULTS_FILE
    partial = [json.dumps({"chunk": 2, **r}) + "\n" for r in chunk_records(2)[:3]]
    with results.open("a", encoding="utf-8") as f:
        f.write("".join(partial) + '{"chunk": 2, "task_id": "t4", "sam')  # crash mid-write
    contents = read_run(run)
    assert contents.finished_chunks == (0, 1)
    assert contents.torn and contents.dropped_lines == 3 and not contents.complete
    assert len(contents.records) == 16
    with pytest.raises(RunDirError, match=r"unfinished \(2 of 3 chunks\).*--resume"):
        load_run(run)
    _, table = load_run(run, partial=True)
    assert table.task_ids == tuple(TASKS[:4])


def test_resume_cuts_unfinished_chunk_and_never_duplicates(tmp_path):
    complete = tmp_path / "complete"
    write_run(complete)
    run = tmp_path / "run"
    write_run(run, chunks=(0, 1))
    with (run / RESULTS_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"chunk": 2, **chunk_records(2)[0]}) + "\n" + '{"torn')
    store = RunStore.open(run, manifest(), resume=True)
    assert store.finished_chunks == {0, 1}
    assert read_run(run).valid_bytes == (run / RESULTS_FILE).stat().st_size  # cut to chunk 1
    store.append_chunk(2, chunk_records(2))
    assert (run / RESULTS_FILE).read_bytes() == (complete / RESULTS_FILE).read_bytes()
    assert load_run(run)[1] == load_run(complete)[1]
    store.close()
    # Resuming a finished run has nothing left to do and leaves the file alone.
    again = RunStore.open(run, manifest(), resume=True)
    assert again.finished_chunks == {0, 1, 2}
    with pytest.raises(ValueError, match="chunk 2 is already stored"):
        again.append_chunk(2, chunk_records(2))


def test_append_checks_order_and_size(tmp_path):
    store = RunStore.open(tmp_path / "run", manifest(), resume=False)
    with pytest.raises(ValueError, match="expected chunk 0, got 1"):
        store.append_chunk(1, chunk_records(1))
    with pytest.raises(ValueError, match="must have 8 records"):
        store.append_chunk(0, chunk_records(0)[:5])
    assert not (tmp_path / "run" / RESULTS_FILE).exists()


def test_existing_run_without_resume_is_refused(tmp_path):
    write_run(tmp_path / "run", chunks=(0,))
    with pytest.raises(RunDirError, match=r"already holds a run; pass --resume .* another --out"):
        RunStore.open(tmp_path / "run", manifest(), resume=False)


def test_empty_directory_is_used_and_resume_of_nothing_starts_fresh(tmp_path):
    (tmp_path / "empty").mkdir()
    with RunStore.open(tmp_path / "empty", manifest(), resume=False) as store:
        assert store.finished_chunks == set()
    with RunStore.open(tmp_path / "new", manifest(), resume=True) as store:
        assert store.finished_chunks == set() and (tmp_path / "new" / MANIFEST_FILE).is_file()
    # Only a manifest (the run died before its first chunk, e.g. the model did not load):
    # nothing to lose, so a corrected request starts over without --resume.
    RunStore.open(tmp_path / "new", manifest(n=3), resume=False)
    assert read_manifest_n(tmp_path / "new") == 3


def read_manifest_n(path):
    return json.loads((path / MANIFEST_FILE).read_text())["n"]


def test_mismatched_request_is_refused_listing_differing_keys(tmp_path):
    write_run(tmp_path / "run", chunks=(0,))
    other = manifest(n=4, env_kwargs={"hops": 3}, policy="hf:some/model")
    with pytest.raises(RunDirError, match="differing keys") as info:
        RunStore.open(tmp_path / "run", other, resume=True)
    message = str(info.value)
    for key in ("n (stored 2, requested 4)", "env_kwargs", "policy (stored"):
        assert key in message
    assert "budgets" not in message and "seed" not in message
    # Provenance (time, versions) and runtime options may differ: only the request must match.
    later = dict(manifest(runtime={"device": "cuda:1"}), created="2099-01-01T00:00:00+00:00")
    later["versions"] = {"python": "9.9"}
    assert RunStore.open(tmp_path / "run", later, resume=True).finished_chunks == {0}


def test_not_a_run_directory(tmp_path):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "notes.txt").write_text("hi")
    with pytest.raises(RunDirError, match="not a passkt run directory"):
        RunStore.open(tmp_path / "stuff", manifest(), resume=True)
    with pytest.raises(RunDirError, match="no such run directory"):
        load_run(tmp_path / "missing")


def test_corrupt_middle_line_is_an_error(tmp_path):
    run = tmp_path / "run"
    write_run(run)
    lines = (run / RESULTS_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = "not json\n"
    (run / RESULTS_FILE).write_text("".join(lines), encoding="utf-8")
    with pytest.raises(RunDirError, match="line 4 is not valid JSON"):
        read_run(run)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("42\n", r"line 4 is JSON but not an object \(int\)"),
        ('["a"]\n', r"line 4 is JSON but not an object \(list\)"),
        (b'{"chunk": 0, "x": "\xff\xfe"}\n', r"line 4 is not valid JSON .*utf-8"),
    ],
)
def test_lines_that_are_not_records_name_file_and_line(tmp_path, line, message):
    run = tmp_path / "run"
    write_run(run)
    lines = (run / RESULTS_FILE).read_bytes().splitlines(keepends=True)
    lines[3] = line if isinstance(line, bytes) else line.encode()
    (run / RESULTS_FILE).write_bytes(b"".join(lines))
    with pytest.raises(RunDirError, match=rf"{RESULTS_FILE}: {message}"):
        read_run(run)


@pytest.mark.parametrize(
    ("field", "value"),
    [("seed", 99), ("policy", "hf:other/model"), ("budgets", [0, 1]), ("n", 3)],
)
def test_an_edited_manifest_is_refused_naming_the_field(tmp_path, field, value):
    run = tmp_path / "run"
    write_run(run, chunks=(0, 1))
    edited = json.loads((run / MANIFEST_FILE).read_text())
    edited[field] = value
    (run / MANIFEST_FILE).write_text(json.dumps(edited))
    with pytest.raises(RunDirError, match=rf"field\(s\) {field} differ"):
        load_run(run, partial=True)  # what report does
    with pytest.raises(RunDirError, match=rf"field\(s\) {field} differ"):
        RunStore.open(run, edited, resume=True)  # a resume with the edited request
    edited[field] = manifest()[field]  # undone: the run reads again
    (run / MANIFEST_FILE).write_text(json.dumps(edited))
    assert load_run(run, partial=True)[1].name == "scripted:heuristic"
    assert load_run(run, partial=True, name="renamed")[1].name == "renamed"  # a label asked for


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", "GRPO-final"), ("num_chunks", 30), ("num_tasks", 60), ("integrity", None)],
)
def test_an_edited_report_field_of_the_manifest_is_refused(tmp_path, field, value):
    run = tmp_path / "run"
    write_run(run)
    edited = json.loads((run / MANIFEST_FILE).read_text())
    edited[field] = value
    (run / MANIFEST_FILE).write_text(json.dumps(edited))
    with pytest.raises(RunDirError, match=rf"field(\(s\) {field} differ| {field} was removed)"):
        load_run(run)


@pytest.mark.parametrize("key", ["api_key", "apiKey", "hf_token", "client_secret", "password"])
def test_secret_options_are_never_written(tmp_path, key):
    from passkt.eval.evaluate import evaluate

    with pytest.raises(ValueError, match=rf"{key}.*plain text.*{key}_env='NAME'"):
        manifest(policy_options={key: "sk-do-not-store"})
    with pytest.raises(ValueError, match="looks like a secret"):
        evaluate(
            "BridgeQA-v0",
            "openai:http://127.0.0.1:9/v1#m",
            policy_options={key: "sk-do-not-store"},
            limit=2,
            n=1,
            out_dir=tmp_path / "run",
            progress=False,
        )
    assert not (tmp_path / "run").exists()
    assert manifest(policy_options={f"{key}_env": "MY_KEY"})["policy_options"] == {
        f"{key}_env": "MY_KEY"
    }


def test_analyses_read_transcripts_on_demand_from_either_layout(tmp_path):
    from passkt.eval.analysis.common import load_records

    write_run(tmp_path / "run")
    records = load_records(tmp_path / "run", budget=2).records
    assert len(records) == len(TASKS) * N
    assert all(r["messages"][0]["content"] == f"question {r['task_id']} ünïcode" for r in records)
    # a run written before the split: messages inside results.jsonl, no transcripts file
    old = tmp_path / "old"
    old.mkdir()
    old_manifest = json.loads((tmp_path / "run" / MANIFEST_FILE).read_text())
    del old_manifest["integrity"]  # written before per-chunk digests
    (old / MANIFEST_FILE).write_text(json.dumps(old_manifest))
    lines = [json.dumps({"chunk": c, **r}) + "\n" for c in range(3) for r in chunk_records(c)]
    (old / RESULTS_FILE).write_text("".join(lines))
    assert load_records(old, budget=2).records == tuple(
        {"chunk": c, **r} for c in range(3) for r in chunk_records(c) if r["budget"] == 2
    )
    kept = read_run(tmp_path / "run").records
    (tmp_path / "run" / TRANSCRIPTS_FILE).write_text("")
    with pytest.raises(ValueError, match="no transcript for task 't0', sample 0, T=0"):
        attach_transcripts(tmp_path / "run", kept)
    with pytest.raises(RunDirError, match=f"{TRANSCRIPTS_FILE}: chunk 0 does not match"):
        load_records(tmp_path / "run", budget=2)


def test_resume_cuts_transcripts_of_a_chunk_whose_results_never_landed(tmp_path):
    run = tmp_path / "run"
    write_run(run, chunks=(0, 1))
    # a crash after chunk 2's transcripts were written but before its results
    with (run / TRANSCRIPTS_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"chunk": 2, "task_id": "t4", "sample": 0, "budget": 0}) + "\n{torn")
    store = RunStore.open(run, manifest(), resume=True)
    assert store.finished_chunks == {0, 1}
    assert len((run / TRANSCRIPTS_FILE).read_text().splitlines()) == 16
    store.append_chunk(2, chunk_records(2))
    transcripts = [json.loads(x) for x in (run / TRANSCRIPTS_FILE).read_text().splitlines()]
    assert [t["chunk"] for t in transcripts] == [0] * 8 + [1] * 8 + [2] * 4
    assert len(attach_transcripts(run, read_run(run).records)) == 20


def _varied(chunk: int) -> list[dict]:
    """``chunk_records`` with two categories, so the streamed table must keep them per task."""
    return [
        {**r, "category": ("bridge", "comparison")[int(r["task_id"][1:]) % 2]}
        for r in chunk_records(chunk)
    ]


def test_streamed_table_equals_the_one_built_from_records(tmp_path):
    from passkt.eval.outcomes import OutcomeTable

    run = tmp_path / "run"
    store = RunStore.open(run, manifest(), resume=False)
    for chunk in range(3):
        store.append_chunk(chunk, _varied(chunk))
    store.close()
    _, table = load_run(run)
    assert table == OutcomeTable.from_records(read_run(run).records, name=table.name)
    assert table.categories == ("bridge", "comparison") * 2 + ("bridge",)
    assert table.budgets == tuple(BUDGETS) and table.n == N and table.num_tasks == len(TASKS)
    assert table.correct.any() and not table.correct.all()
    # a run written before the split (messages inline, no digest, no transcripts file)
    old = tmp_path / "old"
    old.mkdir()
    old_manifest = json.loads((run / MANIFEST_FILE).read_text())
    del old_manifest["integrity"]  # written before per-chunk digests
    (old / MANIFEST_FILE).write_text(json.dumps(old_manifest))
    lines = [json.dumps({"chunk": c, **r}) + "\n" for c in range(3) for r in _varied(c)]
    (old / RESULTS_FILE).write_text("".join(lines))
    assert load_run(old)[1] == table
    # unfinished: chunk 2 cut short by a torn line; both paths keep chunks 0 and 1 only
    (old / RESULTS_FILE).write_text("".join(lines[:-3]) + lines[-3][:10])
    partial = load_run(old, partial=True)[1]
    assert partial == OutcomeTable.from_records(read_run(old).records, name=table.name)
    assert partial.task_ids == tuple(TASKS[:4]) and partial == table.select(TASKS[:4])


def test_streamed_table_refuses_what_records_refuse(tmp_path):
    run = tmp_path / "run"
    write_run(run, chunks=(0,))
    store = RunStore.open(run, manifest(), resume=True)
    bad = chunk_records(1)
    bad[3] = {**bad[3], "correct": 0.5}  # a score, not an outcome
    store.append_chunk(1, bad)
    store.close()
    with pytest.raises(ValueError, match="record 11: 'correct' must be a bool"):
        load_run(run, partial=True)
