"""The ``passkt`` CLI: argument parsing, the default job, report, compare, one-line errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from passkt.cli import main  # the console script: eval's commands and the study's
from passkt.eval.cli import (
    DEFAULT_ENV,
    DEFAULT_POLICY,
    build_parser,
    default_out_dir,
    parse_env_kwargs,
    parse_int_list,
)
from passkt.eval.store import RESULTS_FILE

SMALL = 'source_options={"num_tasks": 40}'  # a short task list keeps env construction cheap


def run_cli(capsys, *argv):
    """``main(argv)`` -> (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(capsys, argv, *fragments):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("passkt: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_parse_env_kwargs():
    assert parse_env_kwargs("hops=3,reveal_budget=true,top_k=5") == {
        "hops": 3,
        "reveal_budget": True,
        "top_k": 5,
    }
    assert parse_env_kwargs("source=hotpotqa, path=../data/dev.json") == {
        "source": "hotpotqa",
        "path": "../data/dev.json",
    }
    assert parse_env_kwargs('x=0.5,y=False,z=none,w=[2,3],s="a,b"') == {
        "x": 0.5,
        "y": False,
        "z": None,
        "w": [2, 3],
        "s": "a,b",
    }
    assert parse_env_kwargs('source_options={"num_tasks": 40, "seed": 1}') == {
        "source_options": {"num_tasks": 40, "seed": 1}
    }
    assert parse_env_kwargs('{"hops": [2, 4]}') == {"hops": [2, 4]}
    assert parse_env_kwargs(None) == {} and parse_env_kwargs("  ") == {}
    with pytest.raises(ValueError, match=r"bad --env-kwargs item 'hops'.*key=value"):
        parse_env_kwargs("hops")
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_env_kwargs("{hops: 3}")
    with pytest.raises(ValueError, match="gives 'a' twice"):
        parse_env_kwargs("a=1,a=2")


def test_parse_int_list():
    assert parse_int_list("0,1, 2,3,5", "--budgets") == (0, 1, 2, 3, 5)
    with pytest.raises(ValueError, match="strictly increasing as given, got 5,3"):
        parse_int_list("5,3", "--budgets")
    with pytest.raises(ValueError, match="at most 10, got 11"):
        parse_int_list("1,11", "--budgets", maximum=10)
    with pytest.raises(ValueError, match="--budgets must be comma-separated integers"):
        parse_int_list("0,one", "--budgets")
    with pytest.raises(ValueError, match="--ks values must be non-negative"):
        parse_int_list("-1,2", "--ks")


def test_default_job_arguments():
    args = build_parser().parse_args(["eval"])
    assert (
        (args.env, args.policy)
        == (DEFAULT_ENV, DEFAULT_POLICY)
        == (
            "BridgeQA-v0",
            "scripted:heuristic",
        )
    )
    assert (args.n, args.limit, args.split, args.seed) == (16, 100, "test", 0)
    assert args.budgets is None and args.out is None and not args.resume  # T grid 0,1,2,3,5
    assert build_parser().parse_args(["eval", "--limit", "all"]).limit is None


def test_default_out_dir_is_path_safe():
    import datetime as dt

    now = dt.datetime(2025, 1, 2, 3, 4, 5)
    assert str(default_out_dir("BridgeQA-v0", "scripted:heuristic", now)).endswith(
        "BridgeQA-v0-scripted-heuristic-20250102-030405"
    )
    out = default_out_dir("Math-v0", "openai:http://h:8000/v1#Qwen/Qwen2.5-7B", now)
    assert out.name == "Math-v0-openai-Qwen2.5-7B-20250102-030405"


def test_small_default_job_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "eval", "--limit", "4", "--n", "4", "--no-progress")
    assert code == 0, err
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("BridgeQA-v0-scripted-heuristic-")
    assert f"run directory {runs[0].relative_to(tmp_path)}" in err
    lines = (runs[0] / RESULTS_FILE).read_text().splitlines()
    assert len(lines) == 4 * 4 * 5
    assert "PASS@(k,T) of **scripted:heuristic**: 4 problems, n = 4" in out
    assert "| T \\ k | 1 | 2 | 4 |" in out
    for t in (0, 1, 2, 3, 5):
        assert f"\n| {t} | " in out
    report = runs[0] / "report"
    for name in ("surface.md", "surface.csv", "surface.json", "boundary.md", "report.md"):
        assert (report / name).stat().st_size > 0
    for name in ("heatmap", "pass_curves"):
        assert (report / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert b"<svg" in (report / f"{name}.svg").read_bytes()[:2000]
    surface = json.loads((report / "surface.json").read_text())
    assert surface["ks"] == [1, 2, 4] and surface["budgets"] == [0, 1, 2, 3, 5]


def _small_run(capsys, out, policy, *extra):
    argv = ["eval", "--policy", policy, "--env-kwargs", SMALL, "--limit", "6", "--n", "4"]
    code, _, err = run_cli(capsys, *argv, "--out", str(out), "--no-progress", "--no-report", *extra)
    assert code == 0, err


def test_report_and_compare(tmp_path, capsys):
    base, oracle = tmp_path / "base", tmp_path / "oracle"
    _small_run(capsys, base, "scripted:heuristic")
    _small_run(capsys, oracle, "scripted:oracle")
    code, out, err = run_cli(capsys, "report", str(base), "--n-boot", "200", "--ks", "1,4")
    assert code == 0, err
    assert "| T \\ k | 1 | 4 |" in out and (base / "report" / "heatmap.png").exists()
    cmp_dir = tmp_path / "cmp"
    argv = ["compare", str(base), str(oracle), "--out", str(cmp_dir), "--n-boot", "200"]
    code, out, err = run_cli(capsys, *argv, "--names", "base,oracle")
    assert code == 0, err
    assert "Gap PASS@(k,T) **oracle - base**" in out and "crossover k" in out and "widens" in out
    assert "Boundary sets at T = 5" in out and "Boundary-set regions" not in out  # said once
    assert out.count("| region | problems | tasks |") == 1
    for name in ("gap_oracle_vs_base.png", "gap_oracle_vs_base.csv", "venn.csv", "venn.svg"):
        assert (cmp_dir / name).exists(), name
    gap = json.loads((cmp_dir / "gap_oracle_vs_base.json").read_text())
    assert gap["name_a"] == "base" and gap["budgets"] == [0, 1, 2, 3, 5]
    # The oracle solves every task once it may search deep enough: gap > 0 at T = 5, k = 1.
    assert gap["gap"][0][-1] > 0


@pytest.mark.slow  # four evaluations and two comparisons with plots: about 20 s
def test_compare_with_noise_floor(tmp_path, capsys):
    """Two more evaluations of the heuristic (other seeds) make the floor; the oracle's gain at
    T = 5 is outside it, and the headline test and Holm marks are in the report."""
    runs = {name: tmp_path / name for name in ("h0", "h1", "h2", "oracle")}
    for seed, name in enumerate(("h0", "h1", "h2")):
        _small_run(capsys, runs[name], "scripted:heuristic", "--seed", str(seed), "--limit", "12")
    _small_run(capsys, runs["oracle"], "scripted:oracle", "--limit", "12")
    cmp_dir = tmp_path / "cmp"
    argv = ["compare", str(runs["h0"]), str(runs["oracle"]), "--out", str(cmp_dir)]
    code, out, err = run_cli(capsys, *argv, "--repeats", f"{runs['h1']},{runs['h2']}")
    assert code == 0, err
    floor = json.loads((cmp_dir / "noise_floor.json").read_text())
    assert len(floor["pairs"]) == 3 and len(floor["swaps"]) == 3
    assert floor["max_swap"] == max(max(pair) for pair in floor["swaps"])
    assert "Noise floor: 3 evaluations" in out and "**Beyond the noise floor**" in out
    assert "**Headline test**" in out and "after Holm's correction" in out
    beyond = out.split("**Beyond the noise floor**")[1].splitlines()[0]
    assert "(k=1, T=5)" in beyond  # the oracle answers every task at T = 5
    assert "a claim about a recipe needs the seed-level test" in beyond
    assert "finding" not in out.lower()  # the floor is descriptive for one comparison

    # Without repeats nothing is marked beyond it; a repeat must be another seed of the policy.
    code, out, _ = run_cli(capsys, "compare", str(runs["h0"]), str(runs["oracle"]), "--out",
                           str(tmp_path / "c2"))  # fmt: skip
    assert code == 0 and "No noise floor" in out and "**Beyond the noise floor**" not in out
    assert "a claim about a recipe needs the seed-level test" in out
    assert_one_line_error(
        capsys,
        ["compare", str(runs["h0"]), str(runs["h1"]), "--repeats", str(runs["oracle"])],
        "policy is 'scripted:oracle'",
    )
    assert_one_line_error(
        capsys,
        ["compare", str(runs["h0"]), str(runs["oracle"]), "--repeats", str(runs["h0"])],
        "evaluation seed 0 was already used",
    )
    # A peer (another policy evaluated the same way, e.g. a base pretrained with another seed)
    # joins the floor. With the oracle itself as the peer, the floor holds the oracle's whole
    # gain, so none of it is beyond the floor any more.
    code, out, err = run_cli(capsys, *argv[:3], "--out", str(tmp_path / "c3"), "--repeats",
                             str(runs["h1"]), "--peers", str(runs["oracle"]))  # fmt: skip
    assert code == 0, err
    floor = json.loads((tmp_path / "c3" / "noise_floor.json").read_text())
    assert len(floor["names"]) == 3 and len(floor["pairs"]) == 3
    assert "evaluations of the same policy and of others made the same way" in out
    beyond = out.split("**Beyond the noise floor**")[1].splitlines()[0]
    assert "gap cells significant after Holm and larger than every base-vs-base gap: none" in (
        beyond
    )
    assert "boundary gain beyond the floor: no; boundary loss beyond the floor: no." in beyond
    assert_one_line_error(
        capsys,
        ["compare", str(runs["h0"]), str(runs["oracle"]), "--peers", str(runs["h1"])],
        "give it as --repeats",
    )
    other_n = tmp_path / "oracle-n2"  # another policy, but evaluated with n = 2, not 4
    _small_run(capsys, other_n, "scripted:oracle", "--limit", "12", "--n", "2")
    assert_one_line_error(
        capsys,
        ["compare", str(runs["h0"]), str(runs["oracle"]), "--peers", str(other_n)],
        "n is 2 but",
    )
    assert_one_line_error(
        capsys,
        ["compare", str(runs["h0"]), str(runs["oracle"]), "--headline", "gap@3,5"],
        "'widening@T' or 'gap@K,T'",
    )


def test_math_env_defaults_to_t0(tmp_path, capsys):
    _small_run(capsys, tmp_path / "m", "scripted:heuristic", "--env", "Math-v0")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["budgets"] == [0] and manifest["env_id"] == "Math-v0"


def test_user_errors_are_one_line(tmp_path, capsys):
    assert_one_line_error(capsys, ["eval", "--env", "BridgQA-v0"], "Did you mean 'BridgeQA-v0'")
    assert_one_line_error(capsys, ["eval", "--env-kwargs", "hops"], "key=value")
    assert_one_line_error(capsys, ["eval", "--policy", "hf"], "Bad policy spec 'hf'")
    assert_one_line_error(capsys, ["eval", "--policy", "scripted:orcale"], "Did you mean 'oracle'")
    assert_one_line_error(capsys, ["eval", "--budgets", "1,x"], "--budgets must be")
    assert_one_line_error(capsys, ["eval", "--n", "0"], "--n", "passkt eval --help")
    assert_one_line_error(capsys, ["eval", "--resume"], "--resume needs --out")
    assert_one_line_error(capsys, ["eval", "--device", "cuda"], "--device applies to hf")
    assert_one_line_error(capsys, ["report", str(tmp_path / "nope")], "no such run directory")
    assert_one_line_error(capsys, ["compare", str(tmp_path)], "at least two run directories")
    run = tmp_path / "run"
    _small_run(capsys, run, "scripted:heuristic")
    assert_one_line_error(
        capsys,
        ["eval", "--env-kwargs", SMALL, "--limit", "6", "--n", "4", "--out", str(run)],
        "pass --resume to continue it or choose another --out",  # CLI words, not Python's
    )
    assert_one_line_error(
        capsys,
        ["eval", "--env-kwargs", SMALL, "--limit", "6", "--n", "8", "--out", str(run), "--resume"],
        "differing keys: n (stored 4, requested 8)",
    )


def test_help_has_examples(capsys):
    code, out, _ = run_cli(capsys, "eval", "--help")
    assert code == 0
    for fragment in ("examples:", "--env-kwargs", "--resume", "openai:URL#MODEL", "lean:PATH"):
        assert fragment in out
    for command in ("report", "compare", "train sft", "train grpo", "testbed pretrain"):
        code, out, _ = run_cli(capsys, *command.split(), "--help")
        assert code == 0 and "``" not in out, command  # docstring markup shown as plain text
    code, out, _ = run_cli(capsys)
    assert code == 2 and "eval" in out and "compare" in out and "train" in out


@pytest.mark.parametrize(
    ("command", "module"),
    [("train", "passkt.agents.train.cli"), ("analyze", "passkt.eval.analysis.cli")],
)
def test_plugin_commands(capsys, command, module):
    available = importlib.util.find_spec(module) is not None
    code, out, err = run_cli(capsys, command, "--help")
    if available:
        assert code == 0 and f"usage: passkt {command}" in out
    else:
        assert code == 2 and f"`passkt {command}` is not available" in err


@pytest.mark.parametrize("threads", [["--threads", "1"], ["--threads=1"], ["-v", "--threads", "2"]])
def test_top_level_options_before_a_plugin_command(capsys, threads):
    """The README's `passkt --threads N COMMAND ...` form loads the plugin the command names,
    not whatever word follows the first option."""
    code, out, err = run_cli(
        capsys, *threads, "testbed", "pretrain", "--size", "micro", "--print-config"
    )
    assert code == 0, err
    assert json.loads(out)["size"] == "micro"


def test_console_script_error_has_no_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "passkt.eval.cli", "eval", "--env", "BridgQA-v0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("passkt: error: Unknown env id 'BridgQA-v0'")


def test_manifest_stores_the_data_path_from_any_folder(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm.jsonl").write_text(
        "".join(
            json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
            for i in range(30)
        )
    )
    monkeypatch.chdir(data)
    argv = ["eval", "--env", "Math-v0", "--env-kwargs", "source=gsm8k,path=gsm.jsonl", "--limit=3"]
    code, _, err = run_cli(capsys, *argv, "--n", "2", "--out", str(tmp_path / "run"), "--no-report")
    assert code == 0, err
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["env_kwargs"]["path"] == str(data / "gsm.jsonl")  # absolute, not as typed


@pytest.mark.slow
def test_an_hf_model_that_cannot_be_loaded_is_a_one_line_error(tmp_path):
    pytest.importorskip("transformers")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "passkt.eval.cli", "eval", "--policy", "hf:no-such-org/no-model",
         "--limit", "2", "--n", "1", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("passkt: error: could not load model 'no-such-org/no-model'"), last
    assert "HF_HUB_OFFLINE=1" in last


def test_out_of_range_values_are_one_line_errors(tmp_path, capsys):
    assert_one_line_error(capsys, ["eval", "--limit", "0"], "--limit", "positive int or 'all'")
    assert_one_line_error(capsys, ["eval", "--temperature", "nan"], "--temperature", "finite")
    assert_one_line_error(capsys, ["eval", "--top-p", "inf"], "--top-p", "finite")
    assert_one_line_error(capsys, ["eval", "--budgets", ""], "--budgets is empty")
    assert_one_line_error(capsys, ["eval", "--ks", ""], "--ks is empty")
    assert_one_line_error(capsys, ["eval", "--n", "99999999999"], "n must be an int from 1 to")
    (tmp_path / "file").write_text("x")
    assert_one_line_error(
        capsys, ["eval", "--out", str(tmp_path / "file" / "run")], "is a file", "another --out"
    )
    assert not (tmp_path / "file" / "run").exists()
