"""The stages of the study as units of work: what each makes, where, and what it needs.

Layout of a study folder ``OUT``::

    profile.json  timings.jsonl  logs/<stage>/<unit>.log (--jobs)
    splits/<cat>/{eval,train}.txt           task ids (matched data: every policy sees these)
    base/                                   testbed pretraining (model/), or done.json naming it
    base-p<seed>/                           the base recipe at another pretraining seed (floor;
                                            with base.per_seed, training seed <seed>'s own base)
    eval/<cat>/base/                        evaluation runs (manifest.json, results.jsonl)
    eval/<cat>/base-eval<r>/, base-p<seed>[-eval<r>]/   the base evaluations of the noise floor
    eval/<cat>/{sft,rl,rft}-seed<s>/        (rft: only when the profile's methods list it)
    train/{sft,grpo,rft}/<cat>/seed<s>/     trainer runs (checkpoint-STEP/, metrics.jsonl)
    compare/<cat>/seed<s>/                  gap tables and figures, Venn, metrics.json
    analysis/<cat>/seed<s>/                 diversity, perplexity (analysis.json, *.md)
    report/report.md                        the report (figures/ next to it)

Every unit folder gets a ``done.json`` when the unit has finished.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from passkt.agents.policy import SamplingParams
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.plan import Launch, PlanError, check_plan
from passkt.envs.contract import task_records
from passkt.eval.estimator import default_ks
from passkt.eval.evaluate import env_info, evaluate
from passkt.study.calibrate import Calibrator
from passkt.study.facts import asked_facts
from passkt.study.profile import StudyError, trainer_fields
from passkt.study.testbed.pretrain import PretrainConfig, pretrain

STAGES = (
    "splits",
    "base",
    "eval-base",
    "train",
    "eval-trained",
    "compare",
    "analyze",
    "report",
)
ROLES = {"sft": "SFT", "grpo": "RL", "rft": "RFT"}
"""Trainer -> the name its policy goes by in tables (RFT: SFT on the base's own successes)."""
METHOD_OF = {role: method for method, role in ROLES.items()}


@dataclass
class Study:
    """A study folder with its profile and the categories / seeds / method selected."""

    out: Path
    profile: dict[str, Any]
    categories: list[str]
    seeds: list[int]
    method: str | None = None
    _tools: dict[str, bool] = field(default_factory=dict)

    # ------------------------------------------------------------------ paths and names
    def splits_dir(self, cat: str) -> Path:
        return self.out / "splits" / cat

    @property
    def base_dir(self) -> Path:
        return self.out / "base"

    def eval_dir(self, cat: str, role: str, seed: int | None = None) -> Path:
        return self.out / "eval" / cat / (role if seed is None else f"{role}-seed{seed}")

    @property
    def calibrates(self) -> bool:
        """``[calibrate]`` is on: each base is chosen per category by ``passkt.study.calibrate``."""
        return bool(self.profile.get("calibrate", {}).get("every"))

    @property
    def per_seed(self) -> bool:
        """``base.per_seed``: seed s trains from the base recipe pretrained with seed s, so the
        replicate is a whole (pretraining, training) pair rather than a training seed."""
        return bool(self.profile["base"].get("per_seed", False))

    def base_of(self, seed: int | None) -> int | None:
        """The pretraining seed of the base that seed ``seed`` trains from and is compared with:
        None (``base/``) unless ``base.per_seed``, where it is ``seed`` itself (``base-p<seed>/``;
        the recipe's own seed is ``base/``)."""
        if not self.per_seed or seed is None or seed == pretrain_seed_of(self.profile):
            return None
        return seed

    def bases(self) -> list[int | None]:
        """The bases this call works with, by pretraining seed (None: ``base/``): the base, or
        with ``base.per_seed`` the bases of the selected seeds; then the floor's other seeds
        (``eval.floor_pretrain_seeds``)."""
        own = [self.base_of(s) for s in self.seeds] if self.per_seed else [None]
        out = list(dict.fromkeys(own))
        return out + [p for p in self.profile["eval"]["floor_pretrain_seeds"] if p not in out]

    def floor_pretrain_seeds(self) -> list[int]:
        """The pretraining seeds of :meth:`bases` other than ``base/``'s."""
        return [p for p in self.bases() if p is not None]

    def base_folder(self, pretrain_seed: int | None = None) -> Path:
        return self.base_dir if pretrain_seed is None else self.floor_base_dir(pretrain_seed)

    def floor_base_dir(self, pretrain_seed: int) -> Path:
        return self.out / f"base-p{pretrain_seed}"

    def base_eval_dirs(self, cat: str, pretrain_seed: int | None = None) -> list[Path]:
        """The evaluations of the base (or of the base recipe at another pretraining seed): the
        first and its repeats (``eval.base_repeats``; evaluation seed + r)."""
        repeats = int(self.profile["eval"]["base_repeats"])
        stem = "base" if pretrain_seed is None else f"base-p{pretrain_seed}"
        return [self.out / "eval" / cat / stem] + [
            self.out / "eval" / cat / f"{stem}-eval{r}" for r in range(1, repeats)
        ]

    def floor_runs(self, cat: str, seed: int | None = None) -> list[tuple[Path, str]]:
        """``(folder, name)`` of every base evaluation of the noise floor that trained-vs-base
        results are read against: the base of ``seed`` (see :meth:`base_of`) and its repeats
        first, then every other base of the recipe and its repeats."""
        first = self.base_of(seed)
        order = [first] + [p for p in self.bases() if p != first]
        return [
            (folder, base_name(p, r))
            for p in order
            for r, folder in enumerate(self.base_eval_dirs(cat, p))
        ]

    def floor_eval_dirs(self, cat: str) -> list[Path]:
        return [folder for folder, _ in self.floor_runs(cat)]

    def train_dir(self, method: str, cat: str, seed: int) -> Path:
        return self.out / "train" / method / cat / f"seed{seed}"

    def compare_dir(self, cat: str, seed: int) -> Path:
        return self.out / "compare" / cat / f"seed{seed}"

    def analysis_dir(self, cat: str, seed: int) -> Path:
        return self.out / "analysis" / cat / f"seed{seed}"

    @property
    def report_dir(self) -> Path:
        return self.out / "report"

    def env(self, cat: str) -> tuple[str, dict[str, Any]]:
        spec = self.profile["env"][cat]
        return spec["id"], dict(spec.get("kwargs", {}))

    def has_tools(self, cat: str) -> bool:
        if cat not in self._tools:
            self._tools[cat] = bool(read_done(self.splits_dir(cat), "splits")["has_tools"])
        return self._tools[cat]

    def budgets(self, cat: str) -> list[int]:
        """The T grid of a category: T = 0 only for an env without tools (math)."""
        return sorted(set(self.profile["eval"]["budgets"])) if self.has_tools(cat) else [0]

    def n(self, cat: str | None = None) -> int:
        """Samples per (problem, T) of a category: ``eval.n_per_category`` or ``eval.n``.

        More samples where the base rarely succeeds (the regime study's rule: n = 128 where base
        pass@1 < 0.05), so a boundary problem is not one lucky draw in 64."""
        ev = self.profile["eval"]
        return int(ev["n_per_category"].get(cat, ev["n"])) if cat else int(ev["n"])

    def ks(self, cat: str | None = None) -> tuple[int, ...]:
        """The k grid (up to the category's n, which is always on it: pass@n is the boundary)."""

        n = self.n(cat)
        ks = tuple(k for k in self.profile["eval"]["ks"] if k <= n)
        if ks and ks[-1] != n:
            ks += (n,)
        return ks or default_ks(n)

    def task_ids(self, cat: str, part: str) -> list[str]:
        path = self.splits_dir(cat) / f"{part}.txt"
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line]

    def base_model(self, pretrain_seed: int | None = None, cat: str | None = None) -> str:
        """The base of a pretraining seed; with ``[calibrate]``, the checkpoint the rule chose
        for category ``cat``."""
        done = read_done(self.base_folder(pretrain_seed), "base")
        if cat is not None and cat in done.get("calibrated", {}):
            chosen = done["calibrated"][cat]
            return self._model({"model": chosen["model"], "in_study": True})
        return self._model(done)

    def trained_model(self, method: str, cat: str, seed: int) -> str:
        return self._model(read_done(self.train_dir(method, cat, seed), "train"))

    def _model(self, done: dict[str, Any]) -> str:
        """A done.json's model: a folder of the study (stored relative to it) or a name."""
        if done.get("in_study"):
            return str((self.out / done["model"]).resolve())
        return str(done["model"])

    def relative(self, path: str | Path) -> str:
        """``path`` relative to the study folder (done.json stays valid if the folder moves)."""
        return Path(path).resolve().relative_to(self.out.resolve()).as_posix()

    def methods(self) -> list[str]:
        """The trained kinds this call runs: ``--method`` or the profile's ``methods``."""
        return [self.method] if self.method else list(self.profile["methods"])

    def trained_roles(self) -> list[str]:
        """Table names of every trained kind of the profile: SFT, RL, then RFT if it is run."""
        return [ROLES[m] for m in ("sft", "grpo", "rft") if m in self.profile["methods"]]


def pretrain_seed_of(profile: dict[str, Any]) -> int | None:
    """The pretraining seed of a profile's own base (``base/``): its recipe's, None for a model."""
    pretrain = profile["base"].get("pretrain")
    return None if pretrain is None else int(pretrain.get("seed", PretrainConfig.seed))


def read_done(folder: Path, stage: str) -> dict[str, Any]:
    path = folder / "done.json"
    if not path.is_file():
        raise StudyError(f"{path} is missing: run the {stage!r} stage first")
    return json.loads(path.read_text(encoding="utf-8"))


def run_name(role: str, seed: int | None) -> str:
    """``base``, ``SFT s0``, ``RL s0``: the names in tables and legends."""
    return role if seed is None else f"{role} s{seed}"


def base_name(pretrain_seed: int | None = None, repeat: int = 0) -> str:
    """``base``, ``base (eval 1)``, ``base p1``, ``base p1 (eval 1)``: the floor's run names."""
    name = "base" if pretrain_seed is None else f"base p{pretrain_seed}"
    return name + (f" (eval {repeat})" if repeat else "")


@dataclass(frozen=True, eq=False)
class Unit:
    """One piece of a stage: ``work()`` makes it and returns what goes into its done.json."""

    key: str
    folder: Path
    work: Callable[[], dict[str, Any]]
    needs: tuple[tuple[str, Path], ...] = ()
    """(stage, folder) pairs whose done.json must exist first."""


# ---------------------------------------------------------------------- splits


def make_splits(study: Study, cat: str) -> dict[str, Any]:
    """The first ``limit_eval`` test and ``limit_train`` train tasks of the category's env."""

    env_id, kwargs = study.env(cat)
    fact_disjoint = bool(study.profile.get("fact_disjoint"))
    parts = {"eval": ("test", study.profile["limit_eval"])}
    parts["train"] = ("train", study.profile["limit_train"])
    if fact_disjoint:  # the fine-tuning problems first: the evaluation problems avoid their facts
        parts = {"train": parts["train"], "eval": parts["eval"]}
    chosen, tools = {}, True
    for part, (split, limit) in parts.items():
        try:
            info = env_info(env_id, kwargs, split)
        except ValueError as e:
            raise StudyError(f"category {cat} ({env_id}, {kwargs}): {e}") from e
        wanted = None if (fact_disjoint and part == "eval") else limit
        tasks = task_records(info.contract, split, wanted) if info.contract else list(info.tasks)
        if fact_disjoint and part == "eval":
            # no evaluation problem may ask a fact that a fine-tuning problem asks
            asked = set().union(*(asked_facts(t) for t in chosen["train"]))
            tasks = [t for t in tasks if not asked_facts(t) & asked]
        if len(tasks) < limit:
            raise StudyError(
                f"category {cat}: the {split} split of {env_id} ({kwargs}) has {len(tasks)} "
                f"tasks{' that ask no fine-tuning fact' if wanted is None else ''}, fewer than "
                f"limit_{part} = {limit}; lower it (--limit-{part}) or give a larger data file"
                + (" (or more tasks: env kwargs source_options)" if wanted is None else "")
            )
        chosen[part], tools = list(tasks[:limit]), info.has_tools
    _check_disjoint(cat, chosen["eval"], chosen["train"])
    if study.calibrates:
        limit = study.profile["calibrate"]["limit"]
        chosen["calibration"] = _calibration_tasks(
            cat, env_id, kwargs, chosen, limit, fact_disjoint
        )
    folder = study.splits_dir(cat)
    folder.mkdir(parents=True, exist_ok=True)
    for part, tasks in chosen.items():
        (folder / f"{part}.txt").write_text("".join(t.task_id + "\n" for t in tasks))
    return {
        "env_id": env_id,
        "env_kwargs": kwargs,
        "has_tools": tools,
        "eval": len(chosen["eval"]),
        "train": len(chosen["train"]),
        **({"calibration": len(chosen["calibration"])} if "calibration" in chosen else {}),
        **({"fact_disjoint": True} if fact_disjoint else {}),
    }


def _calibration_tasks(
    cat: str, env_id: str, kwargs: dict[str, Any], chosen: dict[str, list], limit: int, facts: bool
) -> list:
    """The calibration split (``passkt.study.calibrate``): test problems after the evaluation
    problems that share no question with the evaluation or fine-tuning problems and, with
    ``fact_disjoint``, ask none of their facts, so choosing a base on them reads neither."""
    info = env_info(env_id, kwargs, "test")
    tasks = task_records(info.contract, "test", None) if info.contract else list(info.tasks)
    used = chosen["eval"] + chosen["train"]
    ids = {t.task_id for t in chosen["eval"]}
    questions = {getattr(t, "question", None) for t in used} - {None}
    asked = set().union(*(asked_facts(t) for t in used)) if facts else set()
    tasks = [
        t
        for t in tasks
        if t.task_id not in ids
        and getattr(t, "question", None) not in questions
        and not asked_facts(t) & asked
    ]
    if len(tasks) < limit:
        raise StudyError(
            f"category {cat}: the test split of {env_id} ({kwargs}) has {len(tasks)} tasks apart "
            f"from the evaluation and fine-tuning problems, fewer than calibrate.limit = {limit}; "
            "lower it or give the env more tasks"
        )
    return tasks[:limit]


def _check_disjoint(cat: str, eval_tasks: list, train_tasks: list) -> None:
    """Matched data means disjoint problems: no question may be in both parts.

    Questions, not ids, are compared: the synthetic source numbers each split from 0, so the same
    id names different problems in the two splits. Tasks without a question (an env's plain ids,
    or seed tasks) are compared by id.
    """

    def key(task: Any) -> str:
        return getattr(task, "question", task.task_id)

    shared = {key(t) for t in eval_tasks} & {key(t) for t in train_tasks}
    if shared:
        raise StudyError(
            f"category {cat}: {len(shared)} question(s) are in both the eval and the train split, "
            f"e.g. {sorted(shared)[0]!r}; the env's splits overlap"
        )


# ---------------------------------------------------------------------- base


def make_base(study: Study, pretrain_seed: int | None = None) -> dict[str, Any]:
    """Pretrain the testbed base (resuming), or name the profile's model.

    ``pretrain_seed``: the same recipe at another seed, in ``base-p<seed>/`` (noise floor only);
    for a base given as a model, the model ``base.floor_models`` names for that seed.
    """
    base = study.profile["base"]
    if "model" in base:
        if pretrain_seed is None:
            return {"model": base["model"]}
        return {"model": base["floor_models"][str(pretrain_seed)]}

    fields = {**base["pretrain"], "output_dir": str(study.base_dir)}
    if pretrain_seed is not None:
        fields.update(seed=pretrain_seed, output_dir=str(study.floor_base_dir(pretrain_seed)))
    config = PretrainConfig.from_dict(fields)
    calibrator = calibrator_of(study, pretrain_seed) if study.calibrates else None
    keep = study.profile["calibrate"]["every"] if calibrator else None
    result = pretrain(config, resume=True, keep_every=keep, on_keep=calibrator)
    done = {
        "model": study.relative(result.model_dir),
        "in_study": True,
        "steps": result.steps,
        "metrics": result.last_metrics,
    }
    if calibrator is not None:
        end = config.stop_step or config.max_steps
        chosen = calibrator.choices(final=result.steps >= end)
        folder = study.base_folder(pretrain_seed)
        if result.steps < end and not calibrator(result.steps):
            raise StudyError(
                f"{folder}: pretraining stopped at step {result.steps} (max_minutes?) before the "
                "calibration decided every category; run the base stage again to resume it"
            )
        for cat, choice in chosen.items():
            if choice["step"] is None:
                raise StudyError(
                    f"{folder}: no kept step from calibrate.from_step on was evaluated for "
                    f"category {cat}; lower calibrate.from_step or raise the pretraining's steps"
                )
            choice["model"] = study.relative(folder / choice["model"])
        done["calibrated"] = chosen
    return done


def calibrator_of(study: Study, pretrain_seed: int | None) -> Calibrator:
    """The calibration hook of one base: its kept steps on each category's calibration split,
    at the category's largest T, with the profile's calibration sample size and seed."""
    cal, ev = study.profile["calibrate"], study.profile["eval"]
    folder = study.base_folder(pretrain_seed)
    params = SamplingParams(
        temperature=ev["temperature"],
        top_p=ev["top_p"],
        top_k=ev["top_k"],
        max_new_tokens=ev["max_new_tokens"],
    )

    def run(cat: str, step: int, model: Path) -> Any:
        env_id, kwargs = study.env(cat)
        ids = study.task_ids(cat, "calibration")
        budget = max(study.budgets(cat))
        out = evaluate(
            env_id,
            f"{ev['backend']}:{model}",
            env_kwargs=kwargs,
            n=cal["n"],
            budgets=[budget],
            ks=(1, cal["n"]),
            split="test",
            task_ids=ids,
            out_dir=folder / "calibration" / cat / f"step-{step}",
            resume=True,
            seed=cal["seed"],
            params=params,
            chunk_tasks=ev["chunk_tasks"] or None,
            policy_options=ev["options"],
            name=f"{folder.name} step {step} (calibration)",
            progress=False,
        )
        return out.outcomes.correct[:, :, 0].sum(axis=1)

    targets = {cat: study.profile["targets"][cat] for cat in study.categories}
    return Calibrator(folder, targets, from_step=cal["from_step"], n=cal["n"], evaluate=run)


# ---------------------------------------------------------------------- evaluation


def make_eval(
    study: Study,
    cat: str,
    role: str,
    seed: int | None,
    repeat: int = 0,
    pretrain_seed: int | None = None,
) -> dict[str, Any]:
    """Evaluate the base or a trained policy on the category's eval split (resuming).

    ``repeat`` r > 0 evaluates the base again with evaluation seed ``eval.seed + r``;
    ``pretrain_seed`` evaluates the base recipe pretrained with that seed instead (the floor).
    """

    ev = study.profile["eval"]
    if role == "base":
        model = study.base_model(pretrain_seed, cat)
        out_dir = study.base_eval_dirs(cat, pretrain_seed)[repeat]
        name = base_name(pretrain_seed, repeat)
    else:
        model = study.trained_model(METHOD_OF[role], cat, seed)
        out_dir, name = study.eval_dir(cat, role.lower(), seed), run_name(role, seed)
    env_id, kwargs = study.env(cat)
    params = SamplingParams(
        temperature=ev["temperature"],
        top_p=ev["top_p"],
        top_k=ev["top_k"],
        max_new_tokens=ev["max_new_tokens"],
    )
    run = evaluate(
        env_id,
        f"{ev['backend']}:{model}",
        env_kwargs=kwargs,
        n=study.n(cat),
        budgets=study.budgets(cat),
        ks=study.ks(cat),
        split="test",
        task_ids=study.task_ids(cat, "eval"),
        out_dir=out_dir,
        resume=True,
        seed=ev["seed"] + repeat,
        params=params,
        chunk_tasks=ev["chunk_tasks"] or None,
        policy_options=ev["options"],
        name=name,
    )
    return {
        "name": name,
        "policy": f"{ev['backend']}:{model}",
        "chunks_run": run.chunks_run,
        "episodes": run.stats.episodes,
        "generated_tokens": run.stats.generated_tokens,
    }


# ---------------------------------------------------------------------- training


def train_config(study: Study, method: str, cat: str, seed: int) -> Any:
    """The trainer config of one run: the profile's fields plus what the pipeline fixes."""

    fields = trainer_fields(study.profile, method, cat)
    if not study.has_tools(cat):
        fields["t_train"] = study.profile[method].get(cat, {}).get("t_train", 0)
    env_id, kwargs = study.env(cat)
    backend = "lean" if study.profile["eval"]["backend"] == "lean" else "hf"
    cls = GRPOConfig if method == "grpo" else SFTConfig
    return cls.from_dict(
        {
            **fields,
            "policy": f"{backend}:{study.base_model(study.base_of(seed), cat)}",
            "env_id": env_id,
            "env_kwargs": kwargs,
            "imports": tuple(study.profile["imports"]),
            "split": "train",
            "task_ids": tuple(study.task_ids(cat, "train")),
            "output_dir": str(study.train_dir(method, cat, seed)),
            "seed": seed,
        }
    )


def make_training(study: Study, method: str, cat: str, seed: int) -> dict[str, Any]:
    """Train SFT, GRPO or RFT from the base on the category's train split (resuming)."""
    from passkt.agents.train.checkpoint import latest_checkpoint  # start-up cost: torch, 1 s

    config = train_config(study, method, cat, seed)
    backend = study.profile["train"]["backend"] if method == "grpo" else "passkt"
    try:  # seconds: a run that cannot split or fit stops before its model loads
        check_plan(config, Launch.from_environment(backend)).raise_on_failure()
    except PlanError as e:
        raise StudyError(f"{method}/{cat}/s{seed}: {e}") from e
    if method in ("sft", "rft"):  # rft: train_config set expert = "self"
        from passkt.agents.train.sft import train_sft as train  # start-up cost: torch, 1 s
    elif study.profile["train"]["backend"] == "trl":  # TRL's GRPOTrainer through the adapter
        from passkt.agents.train.trl import train_grpo_trl  # start-up cost: torch, 1 s

        train = partial(train_grpo_trl, **study.profile["train"]["trl"])  # e.g. use_vllm = true
    else:
        from passkt.agents.train.grpo import train_grpo as train  # start-up cost: torch, 1 s
    if method == "rft":
        from passkt.agents.train.sft import NoSuccessfulSamples  # start-up cost: torch, 1 s

        try:
            result = train(config, resume=True)
        except NoSuccessfulSamples as e:
            # SFT on no data leaves the base as it is: the control is the base itself (and the
            # report says so: 0 steps, no data), rather than a stage that can never finish.
            base = study.base_model(study.base_of(seed), cat)
            named = {"model": base}  # a base given as a model name
            if Path(base).resolve().is_relative_to(study.out.resolve()):
                named = {"model": study.relative(base), "in_study": True}
            named["config"] = resolved_config(study, config)
            return {**named, "steps": 0, "last_metrics": {}, "no_data": str(e)}
    else:
        result = train(config, resume=True)
    checkpoint = result.checkpoint or latest_checkpoint(config.output_dir)
    if checkpoint is None:
        raise StudyError(f"{config.output_dir}: the trainer finished without a checkpoint")
    return {
        "model": study.relative(checkpoint),
        "in_study": True,
        "steps": result.steps,
        "last_metrics": result.last_metrics,
        "config": resolved_config(study, config),
    }


def resolved_config(study: Study, config: Any) -> dict[str, Any]:
    """What a trained policy was trained with, as the summary's design table shows it: the
    trainer's resolved fields (the base and output folders relative to the study, the training
    problems as their split file names them)."""
    fields = json.loads(json.dumps(config.to_dict(), default=str))
    fields["task_ids"] = list(fields.get("task_ids") or ())
    fields["output_dir"] = study.relative(config.output_dir)
    kind, _, model = str(fields.get("policy", "")).partition(":")
    if model and Path(model).resolve().is_relative_to(study.out.resolve()):
        fields["policy"] = f"{kind}:{study.relative(model)}"
    return fields


def floor_names(study: Study, cat: str, seed: int | None = None) -> list[str]:
    """The floor's evaluations of a category, as a compare or report done.json records them."""
    return [study.relative(folder) for folder, _ in study.floor_runs(cat, seed)]
