"""The study pipeline (passkt.study): every stage of the tiny profile on a slice.

One study runs once for the module (3 eval / 4 train problems per category, n = 2, a 5-step
pretraining, 1-step trainers); the tests read what each stage left and check that it is what
the next stage used, that reruns do nothing, and that lost work is redone without duplicates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from real_data import DATA

pytest.importorskip("transformers")

STUDY_DIR = Path(__file__).resolve().parents[2] / "study"

from passkt.study import pipeline as study  # noqa: E402
from passkt.study.profile import StudyError  # noqa: E402

SLICE = [
    "--profile", "tiny", "--limit-eval", "3", "--limit-train", "4", "--n", "2",
    "--set", "base.pretrain.max_steps=5", "--set", "base.pretrain.episodes_per_category=24",
    "--set", "base.pretrain.block_size=128", "--set", "base.pretrain.paragraph_repeats=1",
    "--set", "base.pretrain.progress=false", "--set", "eval.chunk_tasks=1",
    "--set", "grpo.max_steps=1", "--set", "grpo.tasks_per_step=2", "--set", "grpo.group_size=2",
    "--set", "sft.max_steps=1", "--set", "sft.batch_size=2", "--set", "stats.n_boot=20",
    "--set", "analyze.perplexity_of=['RL', 'SFT', 'base']", "--set", "eval.base_repeats=2",
]  # fmt: skip
CATS = ("A", "B", "C")
ROLES = {"base": "base", "sft-seed0": "SFT s0", "rl-seed0": "RL s0"}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ids(path: Path) -> list[str]:
    return path.read_text().split()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The slice run stage by stage (eval-base with --jobs 2: units in subprocesses)."""
    out = tmp_path_factory.mktemp("paper") / "study"
    ran = {}
    for stage in study.STAGES:
        jobs = ["--jobs", "2"] if stage == "eval-base" else []
        ran[stage] = study.run([stage, "--out", str(out), *SLICE, *jobs]).ran[stage]
    return out, ran, _lines(out / "timings.jsonl")


@pytest.mark.slow
def test_every_stage_runs_each_unit_once(finished):
    _, ran, timings = finished
    assert ran["splits"] == list(CATS)
    assert ran["train"] == [f"{m}/{c}/s0" for m in ("grpo", "sft") for c in CATS]
    assert sorted(ran["eval-trained"]) == sorted(f"{c}/{r}-s0" for c in CATS for r in ("sft", "rl"))
    assert ran["report"] == ["report"]
    done = [(t["stage"], t["unit"]) for t in timings if t["status"] == "done"]
    expected = [(stage, unit) for stage, units in ran.items() for unit in units]
    assert sorted(done) == sorted(expected)  # children of --jobs recorded theirs too
    assert {t["threads"] for t in timings if t["stage"] == "eval-base" and t["unit"] != "*"} == {
        max(1, len(os.sched_getaffinity(0)) // 2)
    }


@pytest.mark.slow
def test_all_policies_see_exactly_the_split_problems(finished):
    out, _, _ = finished
    base_model = (out / "base" / "model").resolve()
    assert (base_model / "model.safetensors").is_file()
    for cat in CATS:
        eval_ids, train_ids = (
            _ids(out / f"splits/{cat}/eval.txt"),
            _ids(out / f"splits/{cat}/train.txt"),
        )
        assert len(eval_ids) == 3 and len(train_ids) == 4
        for folder, name in ROLES.items():
            manifest = json.loads((out / f"eval/{cat}/{folder}/manifest.json").read_text())
            assert manifest["task_ids"] == eval_ids and manifest["name"] == name
            assert manifest["split"] == "test"
        base_manifest = json.loads((out / f"eval/{cat}/base/manifest.json").read_text())
        assert base_manifest["policy"] == f"lean:{base_model}"
        for method, folder in (("sft", "sft-seed0"), ("grpo", "rl-seed0")):
            config = json.loads((out / f"train/{method}/{cat}/seed0/config.json").read_text())
            assert config["task_ids"] == train_ids and config["split"] == "train"
            assert config["policy"] == f"lean:{base_model}"  # every trainer starts from the base
            done = json.loads((out / f"train/{method}/{cat}/seed0/done.json").read_text())
            checkpoint = (out / done["model"]).resolve()
            assert (checkpoint / "model.safetensors").is_file()
            manifest = json.loads((out / f"eval/{cat}/{folder}/manifest.json").read_text())
            assert manifest["policy"] == f"lean:{checkpoint}"  # the trained model is evaluated
        math = json.loads((out / f"eval/{cat}/base/manifest.json").read_text())["budgets"]
        assert math == ([0] if cat == "A" else [0, 1, 2, 3, 5])


@pytest.mark.slow
def test_compare_analyze_and_report_use_the_runs(finished):
    out, _, _ = finished
    for cat in CATS:
        metrics = json.loads((out / f"compare/{cat}/seed0/metrics.json").read_text())
        assert {r: m["name"] for r, m in metrics["runs"].items()} == {
            "base": "base",
            "RL": "RL s0",
            "SFT": "SFT s0",
        }
        assert all(m["tasks"] == 3 for m in metrics["runs"].values())
        assert metrics["T_max"] == (0 if cat == "A" else 5)
        # The base is evaluated twice (eval seeds 0 and 1): the noise floor of every result.
        repeat = json.loads((out / f"eval/{cat}/base-eval1/manifest.json").read_text())
        base = json.loads((out / f"eval/{cat}/base/manifest.json").read_text())
        assert (repeat["seed"], base["seed"]) == (1, 0) and repeat["task_ids"] == base["task_ids"]
        assert metrics["noise_floor"]["evaluations"] == 2
        assert (out / f"compare/{cat}/seed0/noise_floor.md").is_file()
        assert set(metrics["vs_base"]["RL"]) >= {
            "finding_gap@1",
            "finding_boundary",
            "finding_boundary_loss",
        }
        analysis = json.loads((out / f"analysis/{cat}/seed0/analysis.json").read_text())
        assert set(analysis["perplexity"]) == {"RL", "SFT", "base"}
        assert ("diversity" in analysis) == (cat != "A")  # math has no queries
        if cat != "A":
            assert analysis["diversity"]["RL"]["n"] == 2
    report = out / "report" / "report.md"
    text = report.read_text()
    for name in ("RL s0", "SFT s0", "## Seed aggregate", "## Cost", "## Profile", "noise floor",
                 "| boundary loss beyond the floor | - | - | - | 0/1 seeds"):  # fmt: skip
        assert name in text
    for cat in CATS:
        assert f"## Category {cat}" in text
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert len(links) >= 3 * 8  # heatmaps, gaps, curves, Venn per category, and the seed curves
    assert all((report.parent / link).is_file() for link in links)
    from PIL import Image

    for link in links:  # compact copies (the full-size figures stay in compare/)
        with Image.open(report.parent / link) as image:
            assert image.width <= 1400 and image.mode == "P", link
    for stage in study.STAGES[:-1]:
        assert f"| {stage} |" in text  # the cost table has every stage that ran before it


@pytest.mark.slow
def test_a_rerun_does_nothing_new(finished):
    out, _, _ = finished
    before = (out / "timings.jsonl").read_text()
    marker = out / "eval/C/rl-seed0/done.json"
    stamp = marker.stat().st_mtime_ns
    outcome = study.run(["all", "--out", str(out)])  # the stored profile
    assert all(units == [] for units in outcome.ran.values())
    assert (out / "timings.jsonl").read_text() == before
    assert marker.stat().st_mtime_ns == stamp
    outcome = study.run(["compare", "--out", str(out), *SLICE])  # the same profile again
    assert outcome.ran["compare"] == []


@pytest.mark.slow
def test_lost_work_is_redone_without_duplicates(finished):
    out, _, _ = finished
    run_dir = out / "eval/C/rl-seed0"
    results = run_dir / "results.jsonl"
    original = _lines(results)
    # An interrupted evaluation: its last chunk (one task) never reached the file.
    last = max(r["chunk"] for r in original)
    kept = [json.dumps(r) for r in original if r["chunk"] != last]
    results.write_text("".join(line + "\n" for line in kept))
    (run_dir / "done.json").unlink()
    outcome = study.run(["eval-trained", "--out", str(out)])
    assert outcome.ran["eval-trained"] == ["C/rl-s0"]
    assert _lines(results) == original  # the same samples, each once
    assert json.loads((run_dir / "done.json").read_text())["chunks_run"] == 1
    # A training run whose marker was lost resumes from its final checkpoint: no new steps.
    train_dir = out / "train/grpo/B/seed0"
    metrics = (train_dir / "metrics.jsonl").read_text()
    checkpoints = sorted(p.name for p in train_dir.glob("checkpoint-*"))
    (train_dir / "done.json").unlink()
    assert study.run(["train", "--out", str(out)]).ran["train"] == ["grpo/B/s0"]
    assert (train_dir / "metrics.jsonl").read_text() == metrics
    assert sorted(p.name for p in train_dir.glob("checkpoint-*")) == checkpoints
    assert json.loads((train_dir / "done.json").read_text())["steps"] == 1
    # A comparison made again is newer than the report, so the report is made again (once).
    (out / "compare/C/seed0/done.json").unlink()
    assert study.run(["compare", "--out", str(out)]).ran["compare"] == ["C/s0"]
    assert study.run(["report", "--out", str(out)]).ran["report"] == ["report"]
    assert study.run(["report", "--out", str(out)]).ran["report"] == []


@pytest.mark.slow
def test_a_trained_model_is_kept_until_its_evaluation_is(finished, tmp_path):
    """A piece that ends between a training and its evaluation: the export keeps the trained
    model (not its optimizer state), a fresh checkout evaluates it without training again and
    gets the same counts, and the next export drops the model, its counts now in data/."""
    import subprocess

    from passkt.study import keep

    out, kept, again = tmp_path / "study", tmp_path / "kept", tmp_path / "again"
    shutil.copytree(finished[0], out)
    counts = load_run_counts(out / "eval/C/rl-seed0")
    shutil.rmtree(out / "eval/C/rl-seed0")
    passkt = [sys.executable, "-m", "passkt", "study"]
    done = subprocess.run([*passkt, "export", str(out), "--to", str(kept)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "trained models grpo/C/s0 (their evaluations unfinished)" in done.stdout
    assert [p.parent.relative_to(kept) for p in kept.rglob("train/**/done.json")] == [
        Path("state/train/grpo/C/seed0")
    ]
    model = json.loads((out / "train/grpo/C/seed0/done.json").read_text())["model"]
    weights = (kept / "state" / model / "model.safetensors").read_bytes()
    assert weights == (out / model / "model.safetensors").read_bytes()
    assert {p.name for p in (out / model).iterdir()} - {
        p.name for p in (kept / "state" / model).iterdir()
    } == {p.name for p in (out / model).iterdir() if p.name.startswith(("optimizer", "rng"))}
    keep.restore(kept, again)
    outcome = study.run(["eval-trained", "--out", str(again), "--only", "C/rl-s0"])
    assert outcome.ran["eval-trained"] == ["C/rl-s0"]
    assert load_run_counts(again / "eval/C/rl-seed0") == counts
    assert keep.export(study.study_at(again), kept)["trained"] == []
    assert not list(kept.rglob("train/**/*.safetensors"))
    assert (kept / "data/runs/C-RL-s0.json").is_file()


@pytest.mark.slow
def test_pretraining_seeds_of_the_base_join_the_noise_floor(finished, tmp_path):
    """``eval.floor_pretrain_seeds`` added to a finished study: the base recipe is pretrained
    again with seed 1 and evaluated twice; nothing trained is redone, the comparisons and the
    report are, and their floor holds all four base evaluations (swaps recounted here)."""
    from passkt.eval.boundary import boundary_set
    from passkt.eval.store import load_run

    out = tmp_path / "study"
    shutil.copytree(finished[0], out)
    ran = study.run(["all", "--out", str(out), "--set", "eval.floor_pretrain_seeds=[1]"]).ran
    assert ran["base"] == ["base-p1"] and ran["train"] == [] and ran["eval-trained"] == []
    assert sorted(ran["eval-base"]) == sorted(
        f"{c}/base-p1{r}" for c in CATS for r in ("", "-eval1")
    )
    assert sorted(ran["compare"]) == [f"{c}/s0" for c in CATS] and ran["analyze"] == []
    assert ran["report"] == ["report"]
    config = json.loads((out / "base-p1/pretrain_config.json").read_text())
    assert config["seed"] == 1 and config["max_steps"] == 5
    first = (out / "base/model/model.safetensors").read_bytes()
    assert (out / "base-p1/model/model.safetensors").read_bytes() != first  # another seed
    for cat in CATS:
        folders = ["base", "base-eval1", "base-p1", "base-p1-eval1"]
        manifests = [json.loads((out / f"eval/{cat}/{f}/manifest.json").read_text())
                     for f in folders]  # fmt: skip
        assert [m["seed"] for m in manifests] == [0, 1, 0, 1]
        assert manifests[2]["policy"] == f"lean:{(out / 'base-p1/model').resolve()}"
        metrics = json.loads((out / f"compare/{cat}/seed0/metrics.json").read_text())
        floor, own = metrics["noise_floor"], metrics["eval_floor"]
        assert floor["names"] == ["base", "base (eval 1)", "base p1", "base p1 (eval 1)"]
        assert own["names"] == floor["names"][:2] and len(floor["swaps"]) == 6
        t_max = metrics["T_max"]
        solved = [boundary_set(load_run(out / f"eval/{cat}/{f}")[1], t_max) for f in folders]
        swaps = [max(len(a - b), len(b - a)) for i, a in enumerate(solved) for b in solved[i + 1 :]]
        assert floor["max_swap"] == max(swaps) and own["max_swap"] == swaps[0]
        written = json.loads((out / f"compare/{cat}/seed0/noise_floor.json").read_text())
        assert len(written["names"]) == 4 and written["max_swap"] == max(swaps)
    text = (out / "report/report.md").read_text()
    assert "pretrained with seed(s) 1" in text and "eval floor (the base's own evaluations)" in text
    rows = [r.split(" | ") for r in text.splitlines() if r.startswith("| C | ") and "| 2, 5 |" in r]
    assert [(r[1], r[2]) for r in rows] == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    again = study.run(["all", "--out", str(out)]).ran  # the stored profile took the new seeds
    assert all(units == [] for units in again.values())


# ---------------------------------------------------------------------- profiles, folders, settings


def test_profile_imports_register_a_third_party_env(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(STUDY_DIR.parent / "tests" / "third_party"))
    out = tmp_path / "s"
    sets = ['imports=["kv_lookup"]', "env.B.id=KVLookup-v0", "limit_eval=3", "limit_train=4"]
    argv = ["splits", "--out", str(out), "--profile", "tiny", "--categories", "B"]
    study.run([*argv, *(x for item in sets for x in ("--set", item))])
    assert _ids(out / "splits" / "B" / "eval.txt") == ["amber", "birch", "cedar"]
    assert _ids(out / "splits" / "B" / "train.txt") == ["fjord", "grove", "heath", "inlet"]
    with pytest.raises(StudyError, match="cannot import module 'no_such_module'"):
        study.run(
            [
                "splits",
                "--out",
                str(tmp_path / "t"),
                "--profile",
                "tiny",
                "--set",
                'imports=["no_such_module"]',
            ]
        )


def test_a_folder_keeps_its_profile_and_stages_keep_their_order(tmp_path, capsys):
    out = str(tmp_path / "s")
    args = ["--out", out, "--profile", "tiny", "--limit-eval", "2", "--limit-train", "2"]
    assert study.run(["splits", *args, "--categories", "B"]).ran["splits"] == ["B"]
    assert _ids(tmp_path / "s/splits/B/eval.txt") == [
        "syn-comparison-000000",
        "syn-comparison-000001",
    ]
    with pytest.raises(StudyError, match=r"another profile.*limit_eval: 2 -> 3"):
        study.run(["splits", "--out", out, "--profile", "tiny", "--limit-eval", "3"])
    with pytest.raises(StudyError, match=r"limit_eval: 2 -> 3"):
        study.run(["splits", "--out", out, "--limit-eval", "3"])  # checked against the stored
    # lr_trials only records what was tried: a folder takes the newer record, nothing else
    trials = ["--set", "lr_trials=['GRPO 1e-4: reward rose']"]
    with pytest.raises(StudyError, match=r"limit_eval: 2 -> 3"):
        study.run(["splits", *args, "--categories", "B", "--limit-eval", "3", *trials])
    assert study.run(["splits", *args, "--categories", "B", *trials]).ran["splits"] == []
    stored = json.loads((tmp_path / "s/profile.json").read_text())
    assert stored["profile"]["lr_trials"] == ["GRPO 1e-4: reward rose"]
    assert stored["updated"] == ["lr_trials"] and stored["profile"]["limit_eval"] == 2
    with pytest.raises(StudyError, match=r"needs .*base.*run `passkt study run --stage base --out"):
        study.run(["eval-base", "--out", out, "--categories", "B"])
    with pytest.raises(StudyError, match=r"splits.*has not finished"):
        study.run(["eval-base", "--out", out, "--categories", "A"])
    with pytest.raises(StudyError, match=r"--only 'B/rl': no such unit.*B/base"):
        study.run(["eval-base", "--out", out, "--categories", "B", "--only", "B/rl"])
    with pytest.raises(StudyError, match="fewer than limit_eval"):
        one_task = "env.B.kwargs.source_options={num_tasks = 1}"
        study.run(["splits", "--out", str(tmp_path / "t"), "--profile", "tiny", "--set", one_task])


def test_a_base_given_as_a_model_names_its_floor_models(tmp_path):
    """A named base has no pretraining recipe to run again, so each floor pretraining seed needs
    its model named in ``base.floor_models``; a folder made without a floor takes one later."""
    out = str(tmp_path / "named")
    named = ["--profile", "tiny", "--set", "base={model = 'm0'}", "--categories", "C"]
    with pytest.raises(StudyError, match=re.escape("needs base.floor_models naming the model")):
        study.run(["splits", "--out", out, *named, "--set", "eval.floor_pretrain_seeds=[1]"])
    assert study.run(["splits", "--out", out, *named]).ran["splits"] == ["C"]
    floor = ["--set", "eval.floor_pretrain_seeds=[1]", "--set", "base.floor_models={1 = 'm1'}"]
    assert study.run(["base", "--out", out, *named, *floor]).ran["base"] == ["base", "base-p1"]
    models = [json.loads((tmp_path / f"named/{f}/done.json").read_text())["model"]
              for f in ("base", "base-p1")]  # fmt: skip
    assert models == ["m0", "m1"]
    stored = json.loads((tmp_path / "named/profile.json").read_text())
    assert stored["profile"]["base"] == {"model": "m0", "floor_models": {"1": "m1"}}
    with pytest.raises(StudyError, match="cannot be replaced"):  # its evaluations would go stale
        again = ["--set", "eval.floor_pretrain_seeds=[1]", "--set", "base.floor_models={1 = 'm9'}"]
        study.run(["base", "--out", out, *named, *again])
    with pytest.raises(StudyError, match="another profile"):  # the base itself cannot change
        study.run(["base", "--out", out, "--profile", "tiny", "--set", "base={model = 'm2'}"])


def test_a_kept_pretraining_checkpoint_is_described_by_its_recipe_and_step(tmp_path):
    from passkt.study.report import base_pretrain_seed, checkpoint_of

    model = tmp_path / "model-9000"
    model.mkdir()
    assert checkpoint_of(model) == ""  # a model folder that is not a kept checkpoint
    assert base_pretrain_seed({"model": str(model)}) == "-"
    assert base_pretrain_seed({"pretrain": {"size": "micro", "seed": 3}}) == 3
    (model / "state.json").write_text(json.dumps({"step": 9000}))
    config = {"size": "micro", "max_steps": 12000, "seed": 1}
    (model / "pretrain_config.json").write_text(json.dumps(config))
    assert checkpoint_of(model) == (
        " (the checkpoint at step 9000 of a testbed `micro` pretraining of 12000 steps, "
        "pretraining seed 1)"
    )
    assert base_pretrain_seed({"model": str(model)}) == 1


def test_paper_profile_splits_real_files_into_matched_disjoint_parts(tmp_path):
    data = DATA
    hotpot = data / "hotpotqa_dev_distractor_subset.json"
    math500 = json.dumps(str(data / "math500.jsonl"))
    args = [
        "--out", str(tmp_path / "s"), "--profile", "paper", "--limit-eval", "10",
        "--limit-train", "20", "--set", f"env.A.kwargs.path={math500}",
        "--set", f"env.B.kwargs.path={json.dumps(str(hotpot))}",
        "--set", f"env.C.kwargs.path={json.dumps(str(hotpot))}",
    ]  # fmt: skip
    assert study.run(["splits", *args]).ran["splits"] == list(CATS)
    import gymnasium as gym

    import passkt.envs  # noqa: F401

    for cat, env_id in zip(CATS, ("Math-v0", "ComparisonQA-v0", "BridgeQA-v0"), strict=True):
        eval_ids = _ids(tmp_path / f"s/splits/{cat}/eval.txt")
        train_ids = _ids(tmp_path / f"s/splits/{cat}/train.txt")
        assert (len(eval_ids), len(train_ids)) == (10, 20)
        path = str(data / "math500.jsonl") if cat == "A" else str(hotpot)
        source = "math500" if cat == "A" else "hotpotqa"
        questions = {}
        for split, ids in (("test", eval_ids), ("train", train_ids)):
            env = gym.make(env_id, source=source, path=path, split=split)
            by_id = {t.task_id: t for t in env.unwrapped.tasks}
            env.close()
            assert set(ids) <= set(by_id), f"{cat} {split}: ids not in the file's {split} split"
            questions[split] = {by_id[i].question for i in ids}
        assert not questions["test"] & questions["train"]


@pytest.mark.slow
def test_the_on_policy_control_is_a_third_trained_kind(tmp_path):
    """``methods`` with ``rft``: its own training, evaluation and done markers, and a column in
    the comparison and the report. A 5-step base solves nothing, so RFT has no data: the control
    is then the base itself (0 steps), recorded as such rather than failing forever."""
    out = tmp_path / "rft"
    argv = [*SLICE, "--categories", "C", "--set", "methods=['sft', 'grpo', 'rft']"]
    argv += ["--set", "rft.self_samples=2", "--set", "eval.n_per_category={C = 3}"]
    argv += ["--set", "targets.C={pass1 = [0.0, 1.0], pass_n = [0.7, 0.85]}"]
    argv += ["--set", "lr_trials=['SFT 3e-4: expert NLL 0.12 in 10 epochs']"]
    ran = {stage: study.run([stage, "--out", str(out), *argv]).ran[stage] for stage in study.STAGES}
    assert ran["train"] == ["grpo/C/s0", "sft/C/s0", "rft/C/s0"]
    assert sorted(ran["eval-trained"]) == ["C/rft-s0", "C/rl-s0", "C/sft-s0"]
    done = json.loads((out / "train/rft/C/seed0/done.json").read_text())
    base = json.loads((out / "base/done.json").read_text())
    assert done["steps"] == 0 and "solved none" in done["no_data"]
    assert done["model"] == base["model"]
    manifest = json.loads((out / "eval/C/rft-seed0/manifest.json").read_text())
    assert manifest["name"] == "RFT s0" and manifest["seed"] == 0
    assert manifest["n"] == 3  # eval.n_per_category: more samples where the base rarely succeeds
    assert manifest["policy"] == f"lean:{(out / base['model']).resolve()}"
    metrics = json.loads((out / "compare/C/seed0/metrics.json").read_text())
    assert metrics["runs"]["RFT"]["name"] == "RFT s0" and "RFT" in metrics["vs_base"]
    assert set(metrics["venn"]) == {"base only", "RL only", "SFT only", "all", "none"}
    text = (out / "report/report.md").read_text()
    assert "RFT s0" in text and "RFT − base" in text and "n per category: {'C': 3}" in text
    assert metrics["n"] == 3
    # Both base evaluations (pretraining seed 0; eval seeds 0, 1) against the targets, with
    # CIs; pass@1 lies in [0, 1].
    rows = [line for line in text.splitlines() if line.startswith("| C | ")]
    target_rows = [r.split(" | ") for r in rows if "| 3, 5 |" in r]
    assert [(r[1], r[2]) for r in target_rows] == [("0", "0"), ("0", "1")]
    assert all(re.fullmatch(r"[\d.]+ \[[\d.]+, [\d.]+\] \(in\)", r[4]) for r in target_rows)
    assert all(r[6] == "0.0-1.0" and r[7] == "0.7-0.85 |" for r in target_rows)
    assert "- SFT 3e-4: expert NLL 0.12 in 10 epochs" in text
    rerun = ["train", "--out", str(out), "--method", "rft", "--categories", "C"]
    assert study.run(rerun).ran["train"] == []


def test_methods_and_per_category_n_are_checked(tmp_path):
    out = str(tmp_path / "bad")
    for setting, message in (
        ("methods=['sft']", "methods must list sft and grpo"),
        ("methods=['sft', 'grpo', 'ppo']", "may add rft"),
        ("eval.n_per_category={D = 128}", "names 'D', not a category"),
        ("eval.n_per_category={C = 0}", "eval.n_per_category.C must be an integer >= 1"),
        ("rft={self_keep = 0}", "self_keep must be an integer >= 1"),
        ("targets.D={pass1 = [0.3, 0.4]}", "[targets.D] must name a category"),
        ("targets.C={pass1 = [0.4, 0.3]}", "targets.C.pass1 must be [low, high] in [0, 1]"),
        ("targets.C={pass2 = [0.3, 0.4]}", "unknown key 'pass2'"),
        ("eval.floor_pretrain_seeds=[0]", "differ from the base's own pretraining seed"),
        ("eval.floor_pretrain_seeds=[1, 1]", "must be distinct"),
        ("eval.floor_pretrain_seeds=['1']", "must be a list of integers"),
        ("base.floor_models={1 = 'm1'}", "a pretrained base (pretrain = {...}) makes its own"),
        ("base={model = 'm0', floor_models = {one = 'm1'}}", "must map pretraining seeds"),
        ("base.per_seed=1", "base.per_seed must be true or false"),
        ("base={model = 'm0', per_seed = true}", "needs pretrain = {...}"),
        ("seeds=[1, 2]", "must include the base recipe's own pretraining seed"),
    ):
        if setting.startswith("seeds"):
            setting = "seeds=[1, 2]"
            sets = ["--set", setting, "--set", "base.per_seed=true"]
            with pytest.raises(StudyError, match=re.escape(message)):
                study.run(["splits", "--out", out, "--profile", "tiny", *sets])
            continue
        sets = ["--set", setting, "--set", "methods=['sft', 'grpo', 'rft']"]
        if setting.startswith("methods"):
            sets = sets[:2]
        with pytest.raises(StudyError, match=re.escape(message)):
            study.run(["splits", "--out", out, "--profile", "tiny", *sets])


def test_trainer_settings_change_only_until_that_trainer_has_run(tmp_path):
    """The learning-rate trials run from a folder's own base, so [sft] / [grpo] may still change
    then; once a run of that trainer exists, its settings are pinned like every other key."""
    out = tmp_path / "s"
    study.run(["splits", "--out", str(out), "--profile", "tiny"])
    later = ["--set", "sft.learning_rate=3e-4", "--set", "grpo.epochs=2"]
    study.run(["splits", "--out", str(out), "--profile", "tiny", *later])
    stored = json.loads((out / "profile.json").read_text())
    assert stored["profile"]["sft"]["learning_rate"] == 3e-4
    assert stored["updated"] == ["grpo.epochs", "sft.learning_rate"]
    (out / "train" / "rft").mkdir(parents=True)  # rft trains with [sft]'s fields
    with pytest.raises(StudyError, match=r"sft\.learning_rate"):
        study.run(["splits", "--out", str(out), "--profile", "tiny", *later[2:],
                   "--set", "sft.learning_rate=1e-3"])  # fmt: skip
    study.run(["splits", "--out", str(out), "--profile", "tiny", *later[:2], "--set",
               "grpo.epochs=4", "--set", "eval.chunk_tasks=8"])  # fmt: skip
    (out / "eval").mkdir()  # an evaluation has started: [eval] is pinned
    with pytest.raises(StudyError, match=r"eval\.chunk_tasks"):
        study.run(["splits", "--out", str(out), "--profile", "tiny", *later[:2], "--set",
                   "grpo.epochs=4", "--set", "eval.chunk_tasks=4"])  # fmt: skip


@pytest.mark.slow
def test_per_seed_bases_train_and_compare_each_replicate_from_its_own_pretraining(tmp_path):
    """``base.per_seed``: seed s trains from the recipe pretrained with seed s and is compared
    with that base; the report's data/ folder alone remakes its summary byte for byte."""
    import subprocess

    out = tmp_path / "study"
    per_seed = ["--set", "seeds=[0, 1]", "--set", "base.per_seed=true", "--categories", "C",
                "--set", "eval.base_repeats=1"]  # fmt: skip
    ran = study.run(["base", "--out", str(out), *SLICE, *per_seed, "--jobs", "2"]).ran
    assert sorted(ran["base"]) == ["base", "base-p1"]  # two pretrainings at once, in children
    assert all((out / b / "done.json").is_file() for b in ("base", "base-p1"))
    ran = study.run(["all", "--out", str(out), *SLICE, *per_seed]).ran
    assert ran["base"] == []
    assert sorted(ran["train"]) == sorted(f"{m}/C/s{s}" for m in ("grpo", "sft") for s in (0, 1))
    for seed, base in ((0, "base"), (1, "base-p1")):
        for method in ("sft", "grpo"):
            config = json.loads((out / f"train/{method}/C/seed{seed}/config.json").read_text())
            assert config["policy"] == f"lean:{(out / base / 'model').resolve()}"
        metrics = json.loads((out / f"compare/C/seed{seed}/metrics.json").read_text())
        assert metrics["runs"]["base"]["name"] == ("base" if seed == 0 else "base p1")
    from passkt.study.summary import read_data

    counts = read_data(out / "report/data").categories["C"]
    assert [(r.role, r.seed) for r in counts["runs"]] == [
        ("base", 0), ("base", 1), ("SFT", 0), ("SFT", 1), ("RL", 0), ("RL", 1)]  # fmt: skip
    base1 = load_run_counts(out / "eval/C/base-p1")
    assert counts["runs"][1].correct.tolist() == base1
    text = (out / "report/report.md").read_text()
    assert "## Seed-level verdicts" in text and "no verdict" in text
    overlap = counts["overlap"]
    assert set(overlap) == {"eval", "train", "eval_train"} and 0 <= overlap["eval"]["question"] <= 1
    assert set(overlap["eval_train"]) == {"question", "chain", "fact", "answer"}
    assert "Against the base's pretraining episodes:" in (out / "report/summary.md").read_text()
    copy = tmp_path / "copy"
    shutil.copytree(out / "report/data", copy / "data")
    cli = [sys.executable, "-m", "passkt", "study", "report", str(copy)]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (copy / "summary.md").read_bytes() == (out / "report/summary.md").read_bytes()

    # Kept in the repository and restored on a fresh checkout: seed 0's piece exported first,
    # seed 1's after; the merged data remake the same summary, the bases are not pretrained again.
    kept, again = tmp_path / "kept", tmp_path / "again"
    passkt = [sys.executable, "-m", "passkt", "study"]
    for seeds in ("0", "1"):
        if seeds == "1":  # an earlier piece kept base-p1 unfinished: its checkpoint goes
            (kept / "state/base-p1/checkpoint").mkdir(parents=True)
            (kept / "state/base-p1/checkpoint/state.json").write_text('{"step": 3}')
        cli = [*passkt, "export", str(out), "--to", str(kept), "--seeds", seeds]
        done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
        assert (
            done.returncode == 0
            and f"bases {'base' if seeds == '0' else 'base-p1'} in" in done.stdout
        )
    assert sorted(p.name for p in (kept / "data/runs").iterdir()) == sorted(
        f"C-{r}-s{s}.json" for r in ("base", "SFT", "RL") for s in (0, 1))  # fmt: skip
    assert (kept / "state/base-p1/model/model.safetensors").is_file()
    assert not (kept / "state/base-p1/checkpoint").exists()
    assert not list(kept.rglob("*.jsonl.gz")) and not (kept / "state/eval").exists()
    for seed in (0, 1):  # the analyses need transcripts a checkout lacks: their tables are kept
        table = json.loads((kept / f"analysis/C-s{seed}/analysis.json").read_text())
        assert table == json.loads((out / f"analysis/C/seed{seed}/analysis.json").read_text())
    subprocess.run([*passkt, "report", str(kept)], check=True, capture_output=True, timeout=300)
    summary = (kept / "summary.md").read_text().split("## Cost")[0]
    assert summary == (out / "report/summary.md").read_text().split("## Cost")[0]
    done = subprocess.run([*passkt, "restore", str(kept), "--out", str(again)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    ran = study.run(["base", "--out", str(again)]).ran["base"]
    splits = study.run(["splits", "--out", str(again), "--categories", "C"]).ran["splits"]
    assert ran == [] and splits == []
    model = (again / "base-p1/model/model.safetensors").read_bytes()
    assert model == (out / "base-p1/model/model.safetensors").read_bytes()
    done = subprocess.run([*passkt, "restore", str(kept), "--out", str(tmp_path / "paper")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0
    (tmp_path / "other").mkdir()
    study.run(["splits", "--out", str(tmp_path / "other"), "--profile", "tiny"])
    done = subprocess.run([*passkt, "restore", str(kept), "--out", str(tmp_path / "other")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "holds another study" in done.stderr


def load_run_counts(folder: Path) -> list[list[int]]:
    from passkt.eval.store import load_run

    return load_run(folder)[1].counts().tolist()
