"""A run cannot be altered without a trace: per-chunk digests of results and transcripts.

A real evaluation is written, then a file is edited, truncated or deleted as a user (or a script)
might; ``passkt report`` must refuse it naming the file and the chunk, and ``passkt eval --resume``
must refuse edited results and rebuild what it can (transcripts, cut-off chunks) byte for byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from passkt.eval.chunk_digests import DIGESTS_FILE
from passkt.eval.cli import main
from passkt.eval.store import MANIFEST_FILE, RESULTS_FILE, RunDirError, load_run, read_run
from passkt.eval.transcripts import TRANSCRIPTS_FILE

ARGS = [
    "eval",
    "--env-kwargs",
    'source_options={"num_tasks": 40}',
    "--limit",
    "4",
    "--n",
    "3",
    "--budgets",
    "0,1,2",
    "--chunk-tasks",
    "1",
    "--no-progress",
    "--no-report",
]


def _cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("integrity") / "run"
    assert main([*ARGS, "--out", str(run)]) == 0
    return run


@pytest.fixture
def run(original: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(original, copy)
    (copy / "writer.lock").unlink(missing_ok=True)
    return copy


def _files(run: Path) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in (RESULTS_FILE, TRANSCRIPTS_FILE)}


def _refused(capsys, run: Path, *fragments: str) -> None:
    code, err = _cli(capsys, "report", str(run), "--out", str(run.parent / "report"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not (run.parent / "report").exists()


def test_each_chunk_has_a_digest_and_the_manifest_says_so(original):
    digests = (original / DIGESTS_FILE).read_text().splitlines()
    assert [json.loads(line)["chunk"] for line in digests] == [0, 1, 2, 3]
    assert json.loads((original / MANIFEST_FILE).read_text())["integrity"]
    assert read_run(original).complete


def test_one_edited_correct_value_is_refused_by_report_and_resume(capsys, run):
    lines = (run / RESULTS_FILE).read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if '"correct": false' in line)
    lines[index] = lines[index].replace('"correct": false', '"correct": true')
    (run / RESULTS_FILE).write_text("".join(lines))
    chunk = json.loads(lines[index])["chunk"]
    _refused(capsys, run, RESULTS_FILE, f"chunk {chunk}", "edited")
    code, err = _cli(capsys, *ARGS, "--out", str(run), "--resume")
    assert code == 2 and f"chunk {chunk}" in err and RESULTS_FILE in err
    with pytest.raises(RunDirError, match=f"chunk {chunk} .*does not match its digest"):
        load_run(run)


@pytest.mark.parametrize("damage", ["delete", "truncate", "edit"])
def test_damaged_transcripts_are_refused_by_report_and_rebuilt_by_resume(
    capsys, caplog, run, damage
):
    before = _files(run)
    path = run / TRANSCRIPTS_FILE
    if damage == "delete":
        path.unlink()
        first = 0
    elif damage == "truncate":  # cut mid-line, 40% in
        path.write_bytes(before[TRANSCRIPTS_FILE][: len(before[TRANSCRIPTS_FILE]) * 2 // 5])
        first = 1
    else:
        lines = before[TRANSCRIPTS_FILE].splitlines(keepends=True)
        lines[-1] = lines[-1].replace(b"<answer>", b"<answer>not ")
        path.write_bytes(b"".join(lines))
        first = 3
    _refused(capsys, run, TRANSCRIPTS_FILE, f"chunk {first}", "--resume")
    code, err = _cli(capsys, *ARGS, "--out", str(run), "--resume")
    assert code == 0, err
    said = f"{TRANSCRIPTS_FILE}: chunk {first} does not match its digest"
    assert said in caplog.text  # a warning on stderr, not silent
    assert _files(run) == before  # rebuilt byte for byte with the same seeds
    load_run(run)


def test_cut_or_deleted_results_are_refused_and_resume_runs_them_again(capsys, caplog, run):
    before = _files(run)
    lines = before[RESULTS_FILE].splitlines(keepends=True)
    (run / RESULTS_FILE).write_bytes(b"".join(lines[: len(lines) // 2]))  # chunks 0 and 1 kept
    _refused(capsys, run, RESULTS_FILE, "chunks 2 to 3", "missing")
    (run / RESULTS_FILE).unlink()
    _refused(capsys, run, RESULTS_FILE, "chunks 0 to 3", "missing")
    code, err = _cli(capsys, *ARGS, "--out", str(run), "--resume")
    assert code == 0, err
    assert "missing from the file; running them again" in caplog.text
    assert _files(run) == before


def test_deleted_digests_are_refused(capsys, run):
    (run / DIGESTS_FILE).unlink()
    _refused(capsys, run, DIGESTS_FILE, "missing")
    code, err = _cli(capsys, *ARGS, "--out", str(run), "--resume")
    assert code == 2 and DIGESTS_FILE in err


def test_a_crash_before_the_last_digest_leaves_an_unfinished_chunk(capsys, run):
    before = _files(run)
    digests = (run / DIGESTS_FILE).read_bytes().splitlines(keepends=True)
    (run / DIGESTS_FILE).write_bytes(b"".join(digests[:-1]))  # results and transcripts landed
    contents = read_run(run)
    assert contents.finished_chunks == (0, 1, 2) and contents.dropped_lines == 9
    _refused(capsys, run, "unfinished (3 of 4 chunks)")
    code, err = _cli(capsys, *ARGS, "--out", str(run), "--resume")
    assert code == 0, err
    assert _files(run) == before


@pytest.mark.parametrize(
    ("field", "value"), [("name", "GRPO-final"), ("num_chunks", 30), ("seed", 7)]
)
def test_an_edited_manifest_field_is_refused_by_name(capsys, run, field, value):
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    manifest[field] = value
    (run / MANIFEST_FILE).write_text(json.dumps(manifest))
    _refused(capsys, run, MANIFEST_FILE, f"field(s) {field} differ")


def test_results_replaced_by_a_folder_is_one_line(capsys, run):
    (run / RESULTS_FILE).unlink()
    (run / RESULTS_FILE).mkdir()
    _refused(capsys, run, RESULTS_FILE, "not a file")
    code, err = _cli(capsys, *ARGS, "--out", str(run), "--resume")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not a file" in err
