"""Profiles of the study: what to run, read from TOML, checked, and pinned to an output folder.

A profile is a TOML file (``profiles/tiny.toml``, ``testbed.toml``, ``paper.toml`` or your own
path) laid over :data:`DEFAULTS`; ``--set KEY=VALUE`` and the shortcut flags override single keys.
The resolved profile is written to ``OUT/profile.json`` on first use and every later call on that
folder must resolve to the same profile (or give none and use the stored one), so one folder never
mixes two studies.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from passkt.agents.folders import FolderKindError, claim_folder, mark_folder
from passkt.agents.preflight import MAX_BUDGET, check_grid
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.envs.contract import import_modules, resolve_env_id
from passkt.study.testbed.pretrain import PretrainConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project runs on 3.11 here; tomli is a dependency before 3.11
    import tomli as tomllib

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
PROFILE_FILE = "profile.json"

CATEGORY_ENVS = {"A": "Math-v0", "B": "ComparisonQA-v0", "C": "BridgeQA-v0"}
"""The study's categories: pure math, independent retrieval, sequential retrieval."""

PIPELINE_FIELDS = ("policy", "env_id", "env_kwargs", "split", "task_ids", "limit", "output_dir")
PIPELINE_FIELDS += ("seed", "imports")
"""Trainer config fields the pipeline sets itself (the profile may not)."""

DEFAULTS: dict[str, Any] = {
    "name": "custom",
    "description": "",
    "imports": [],
    "categories": ["A", "B", "C"],
    "seeds": [0],
    "limit_eval": 100,
    "limit_train": 200,
    "fact_disjoint": False,
    "methods": ["sft", "grpo"],
    "targets": {},
    "lr_trials": [],
    "env": {cat: {"id": env_id, "kwargs": {}} for cat, env_id in CATEGORY_ENVS.items()},
    "base": {},
    "eval": {
        "backend": "hf",
        "n": 64,
        "budgets": [0, 1, 2, 3, 5],
        "ks": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": 256,
        "chunk_tasks": 0,
        "seed": 0,
        "base_repeats": 1,
        "floor_pretrain_seeds": [],
        "n_per_category": {},
        "options": {},
    },
    "sft": {},
    "grpo": {},
    "rft": {},
    "train": {"backend": "passkt", "trl": {}},
    "stats": {"n_boot": 1000, "level": 0.95, "margin": 0.0},
    "calibrate": {"every": 0, "from_step": 0, "n": 64, "limit": 100, "seed": 0},
    "post_hoc": [],
    "analyze": {
        "perplexity_of": ["RL"],
        "perplexity_limit": 0,
        "batch_size": 8,
        "device": "cpu",
        "dtype": "float32",
    },
}
"""Every key a profile may set, with its default (``0`` / ``[]`` mean "the library default")."""

_OPEN_TABLES = ("env", "base", "sft", "grpo", "rft", "eval.options", "eval.n_per_category")
_OPEN_TABLES += ("train.trl", "targets")
"""Tables whose keys are checked elsewhere (by the trainer configs, ``PretrainConfig``...)."""


class StudyError(Exception):
    """A bad argument, profile or output folder: the message says how to fix it."""


# ---------------------------------------------------------------------- reading and merging


def known_profiles() -> list[str]:
    """Names of the shipped profiles (``profiles/*.toml``)."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.toml"))


def profile_path(name_or_path: str) -> Path:
    """The TOML file of a shipped profile name or a path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.is_file():
        if not path.is_file():
            raise StudyError(f"--profile {name_or_path}: no such file")
        return path
    names = known_profiles()
    if name_or_path not in names:
        close = difflib.get_close_matches(name_or_path, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise StudyError(
            f"Unknown profile {name_or_path!r}.{hint} Known: {', '.join(names)}, or the path of "
            "a .toml file (copy one from study/profiles/ in the repository)."
        )
    return PROFILES_DIR / f"{name_or_path}.toml"


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise StudyError(f"{path}: not valid TOML ({e})") from e


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` laid over it, tables merged key by key."""
    out = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"eval.n=8"`` -> ``(["eval", "n"], 8)``; the value is read as TOML, else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise StudyError(f"--set {text!r}: expected KEY=VALUE, e.g. --set eval.n=8")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return [part.strip() for part in key.split(".")], parsed


def apply_overrides(profile: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Set each ``KEY=VALUE`` (dotted keys reach into tables, creating them when needed)."""
    out = copy.deepcopy(profile)
    for text in overrides:
        path, value = parse_override(text)
        table = out
        for part in path[:-1]:
            if not isinstance(table.get(part, {}), dict):
                raise StudyError(f"--set {text!r}: {part!r} is not a table")
            table = table.setdefault(part, {})
        table[path[-1]] = value
    return out


def resolve(name_or_path: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The checked profile: defaults, then the file, then the overrides."""
    path = profile_path(name_or_path)
    profile = apply_overrides(deep_merge(DEFAULTS, read_toml(path)), overrides)
    # Round-trip through JSON so the profile compares equal to the one stored in profile.json.
    profile = json.loads(json.dumps(profile))
    check(profile, str(path))
    return profile


# ---------------------------------------------------------------------- checks


def _check_keys(table: Mapping[str, Any], known: Mapping[str, Any], where: str) -> None:
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise StudyError(f"{where}: unknown key {key!r}{hint}; known: {', '.join(known)}")


def _check_tree(table: Mapping[str, Any], known: Mapping[str, Any], where: str, prefix="") -> None:
    _check_keys(table, known, where + (f" [{prefix.rstrip('.')}]" if prefix else ""))
    for key, value in known.items():
        name = prefix + key
        if isinstance(value, dict) and name not in _OPEN_TABLES:
            if not isinstance(table[key], dict):
                raise StudyError(f"{where}: {name} must be a table")
            _check_tree(table[key], value, where, name + ".")


def _positive_int(value: Any, name: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise StudyError(f"{where}: {name} must be an integer >= 1, got {value!r}")
    return value


def _check_finite(value: Any, name: str, where: str) -> None:
    """Refuse ``nan`` and ``inf`` anywhere in a profile (``--set eval.temperature=nan`` parses,
    but no setting can take it, and JSON would store it as a non-standard ``NaN``)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise StudyError(f"{where}: {name} must be a finite number, got {value!r}")
    items = value.items() if isinstance(value, Mapping) else []
    for key, item in items:
        _check_finite(item, f"{name}.{key}" if name else str(key), where)
    for i, item in enumerate(value if isinstance(value, list) else []):
        _check_finite(item, f"{name}[{i}]", where)


def check(profile: Mapping[str, Any], where: str) -> None:
    """Raise a ``StudyError`` naming the first bad key of a resolved profile."""
    _check_tree(profile, DEFAULTS, where)
    _check_finite(profile, "", where)
    imports = profile["imports"]
    if not isinstance(imports, list) or not all(isinstance(m, str) for m in imports):
        raise StudyError(f"{where}: imports must be a list of module names")
    try:
        import_modules(imports, flag="imports =")  # modules that register the profile's envs
    except ValueError as e:
        raise StudyError(f"{where}: {e}") from e
    _positive_int(profile["limit_eval"], "limit_eval", where)
    _positive_int(profile["limit_train"], "limit_train", where)
    if not isinstance(profile["fact_disjoint"], bool):
        raise StudyError(f"{where}: fact_disjoint must be true or false")
    margin = profile["stats"]["margin"]
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        raise StudyError(f"{where}: stats.margin must be a number in [0, 1) (0: none)")
    categories = profile["categories"]
    if not categories or len(set(categories)) != len(categories):
        raise StudyError(f"{where}: categories must be a non-empty list without repeats")
    for cat in categories:
        env = profile["env"].get(cat)
        if not isinstance(env, dict) or not isinstance(env.get("id"), str):
            raise StudyError(f"{where}: category {cat!r} needs [env.{cat}] with id = ENV_ID")
        _check_keys(env, {"id": 0, "kwargs": 0}, f"{where} [env.{cat}]")
        try:  # every category's env, before the first stage writes anything
            resolve_env_id(env["id"])
        except ValueError as e:
            raise StudyError(f"{where} [env.{cat}]: {str(e).splitlines()[0]}") from e
    seeds = profile["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise StudyError(f"{where}: seeds must be a non-empty list of distinct integers >= 0")
    _check_base(profile["base"], where)
    if profile["base"].get("per_seed"):
        own = profile["base"]["pretrain"].get("seed", PretrainConfig.seed)
        if own not in seeds:
            raise StudyError(
                f"{where}: with base.per_seed, seeds {seeds} must include the base recipe's own "
                f"pretraining seed (base.pretrain.seed = {own})"
            )
    ev = profile["eval"]
    if ev["backend"] not in ("hf", "lean", "vllm"):
        raise StudyError(f"{where}: eval.backend must be hf, lean or vllm, got {ev['backend']!r}")
    _positive_int(ev["n"], "eval.n", where)
    _positive_int(ev["max_new_tokens"], "eval.max_new_tokens", where)
    _positive_int(ev["base_repeats"], "eval.base_repeats", where)
    _check_floor_seeds(profile, where)
    for cat, n in ev["n_per_category"].items():
        if cat not in categories:
            raise StudyError(f"{where}: eval.n_per_category names {cat!r}, not a category")
        _positive_int(n, f"eval.n_per_category.{cat}", where)
    try:
        check_grid(ev["budgets"], "eval.budgets", maximum=MAX_BUDGET)
    except ValueError as e:
        raise StudyError(f"{where}: {e}") from e
    _check_targets(profile, where)
    _check_calibrate(profile, where)
    methods = profile["methods"]
    if not {"sft", "grpo"} <= set(methods) or not set(methods) <= set(METHODS):
        raise StudyError(
            f"{where}: methods must list sft and grpo, and may add rft (the on-policy control), "
            f"got {methods!r}"
        )
    for method in methods:
        _check_trainer(profile, method, where)
    if profile["train"]["backend"] not in ("passkt", "trl"):
        raise StudyError(
            f"{where}: train.backend must be passkt (our GRPO) or trl (TRL's GRPOTrainer through "
            f"passkt.agents.train.trl), got {profile['train']['backend']!r}"
        )
    if not set(profile["analyze"]["perplexity_of"]) <= {"base", "SFT", "RL", "RFT"}:
        raise StudyError(f"{where}: analyze.perplexity_of may name base, SFT, RL and RFT")


def _check_floor_seeds(profile: Mapping[str, Any], where: str) -> None:
    """``eval.floor_pretrain_seeds``: other pretraining seeds of the base recipe (noise floor)."""
    seeds = profile["eval"]["floor_pretrain_seeds"]
    if not isinstance(seeds, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in seeds
    ):
        raise StudyError(f"{where}: eval.floor_pretrain_seeds must be a list of integers")
    if not seeds:
        return
    pretrain = profile["base"].get("pretrain")
    if pretrain is None:
        named = sorted(int(k) for k in profile["base"].get("floor_models", {}))
        if named != sorted(seeds):
            raise StudyError(
                f"{where}: eval.floor_pretrain_seeds {seeds} with a base given as a model needs "
                f"base.floor_models naming the model of each of those seeds (it names {named}), "
                "e.g. base.floor_models = {1 = 'runs/cal/p1/model-9000'}"
            )
        return

    own = pretrain.get("seed", PretrainConfig.seed)
    if len(set(seeds)) != len(seeds) or own in seeds:
        raise StudyError(
            f"{where}: eval.floor_pretrain_seeds {seeds} must be distinct and differ from the "
            f"base's own pretraining seed (base.pretrain.seed = {own})"
        )


def _check_targets(profile: Mapping[str, Any], where: str) -> None:
    """``[targets.CAT]``: ``pass1`` / ``pass_n`` = [low, high] ranges of the base's metrics."""
    for cat, goal in profile["targets"].items():
        if cat not in profile["categories"] or not isinstance(goal, dict):
            raise StudyError(f"{where}: [targets.{cat}] must name a category and be a table")
        _check_keys(goal, {"pass1": 0, "pass_n": 0}, f"{where} [targets.{cat}]")
        for key, span in goal.items():
            ok = isinstance(span, list) and len(span) == 2 and 0 <= span[0] <= span[1] <= 1
            if not ok:
                raise StudyError(f"{where}: targets.{cat}.{key} must be [low, high] in [0, 1]")
    trials = profile["lr_trials"]
    if not isinstance(trials, list) or not all(isinstance(t, str) for t in trials):
        raise StudyError(f"{where}: lr_trials must be a list of sentences")


def _check_calibrate(profile: Mapping[str, Any], where: str) -> None:
    """``[calibrate]``: the base-choosing rule of ``passkt.study.calibrate`` (every = 0: off)."""
    notes = profile["post_hoc"]
    if not isinstance(notes, list) or not all(isinstance(t, str) for t in notes):
        raise StudyError(f"{where}: post_hoc must be a list of sentences")
    cal = profile["calibrate"]
    for key in ("every", "from_step", "seed"):
        if not isinstance(cal[key], int) or isinstance(cal[key], bool) or cal[key] < 0:
            raise StudyError(f"{where}: calibrate.{key} must be an integer >= 0")
    if not cal["every"]:
        return
    _positive_int(cal["n"], "calibrate.n", where)
    _positive_int(cal["limit"], "calibrate.limit", where)
    pretrain = profile["base"].get("pretrain")
    if pretrain is None:
        raise StudyError(f"{where}: calibrate.every needs a pretrained base ([base] pretrain)")
    save_every = int(pretrain.get("save_every", PretrainConfig.save_every))
    if cal["every"] % save_every:
        raise StudyError(
            f"{where}: calibrate.every ({cal['every']}) must be a multiple of "
            f"base.pretrain.save_every ({save_every}), so a resumed pretraining skips no step"
        )
    missing = [c for c in profile["categories"] if "pass_n" not in profile["targets"].get(c, {})]
    if missing:
        raise StudyError(
            f"{where}: calibrate.every needs targets.<cat>.pass_n for every category; "
            f"missing for {', '.join(missing)}"
        )


def _check_base(base: Mapping[str, Any], where: str) -> None:
    if ("model" in base) == ("pretrain" in base):
        raise StudyError(
            f"{where}: [base] needs exactly one of model = 'NAME_OR_PATH' (an existing policy) "
            "or pretrain = {size = 'nano', ...} (testbed pretraining)"
        )
    _check_keys(
        base, {"model": 0, "pretrain": 0, "floor_models": 0, "per_seed": 0}, f"{where} [base]"
    )
    if not isinstance(base.get("per_seed", False), bool):
        raise StudyError(f"{where}: base.per_seed must be true or false")
    if base.get("per_seed") and "pretrain" not in base:
        raise StudyError(
            f"{where}: base.per_seed = true pretrains the base recipe once per seed, so [base] "
            "needs pretrain = {...} (a base given as model = '...' has one pretraining)"
        )
    floor_models = base.get("floor_models", {})
    if "floor_models" in base and "model" not in base:
        raise StudyError(
            f"{where}: base.floor_models names the other pretraining seeds' models of a base "
            "given as model = '...'; a pretrained base (pretrain = {...}) makes its own"
        )
    if not isinstance(floor_models, dict) or not all(
        isinstance(k, str) and k.isdigit() and isinstance(v, str) and v
        for k, v in floor_models.items()
    ):
        raise StudyError(
            f"{where}: base.floor_models must map pretraining seeds to models, e.g. "
            "{1 = 'runs/cal/p1/model-9000'}"
        )
    if "pretrain" in base:
        if "output_dir" in base["pretrain"]:
            raise StudyError(f"{where}: base.pretrain.output_dir is set by the pipeline (OUT/base)")
        try:
            PretrainConfig.from_dict({**base["pretrain"], "output_dir": "base"})
        except (TypeError, ValueError) as e:
            raise StudyError(f"{where} [base.pretrain]: {e}") from e


METHODS = ("sft", "grpo", "rft")
"""The trained policy kinds: SFT on expert data, GRPO, and the on-policy control ``rft`` (SFT on
the base's own rewarded samples of the same problems: rejection-sampling fine-tuning)."""


def trainer_fields(profile: Mapping[str, Any], method: str, cat: str) -> dict[str, Any]:
    """The profile's ``[sft]`` / ``[grpo]`` fields with the category's table laid over them.

    ``rft`` is SFT with ``expert = "self"``: the ``[sft]`` fields (the same recipe as the expert
    control, so only the data differ) with ``[rft]`` laid over them.
    """
    if method == "rft":
        fields = trainer_fields(profile, "sft", cat)
        fields.update(trainer_fields({**profile, "sft": profile["rft"]}, "sft", cat))
        fields["expert"] = "self"
        return fields
    table = profile[method]
    fields = {k: v for k, v in table.items() if k not in profile["env"]}
    fields.update(table.get(cat, {}))
    return fields


def _check_trainer(profile: Mapping[str, Any], method: str, where: str) -> None:

    cls = GRPOConfig if method == "grpo" else SFTConfig
    for cat in profile["categories"]:
        fields = trainer_fields(profile, method, cat)
        owned = sorted(set(fields) & set(PIPELINE_FIELDS))
        if owned:
            raise StudyError(
                f"{where} [{method}]: {', '.join(owned)} are set by the pipeline (policy from "
                "[base], tasks from the splits, seed from seeds); remove them"
            )
        try:
            cls.from_dict({**fields, "policy": "hf:base"})
        except (TypeError, ValueError) as e:
            raise StudyError(f"{where} [{method}] (category {cat}): {e}") from e


# ---------------------------------------------------------------------- pinning to a folder


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


def differences(stored: Mapping[str, Any], requested: Mapping[str, Any]) -> list[str]:
    """``key: stored -> requested`` for every leaf that differs."""
    a, b = _flatten(dict(stored)), _flatten(dict(requested))
    return [
        f"{key}: {a.get(key, '(unset)')!r} -> {b.get(key, '(unset)')!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key, "(unset)") != b.get(key, "(unset)")
    ]


RECORD_KEYS = ("lr_trials", "description")
"""Profile keys that record what was done and configure nothing: a folder takes newer values."""
FLOOR_KEYS = ("eval.floor_pretrain_seeds", "base.floor_models")
"""Profile keys that only add (or drop) base evaluations of the noise floor: a finished folder
takes new values, its other results stay, and the stages that read the floor (compare, report)
are made again."""


TRAINER_TABLES = ("sft", "grpo", "rft")
"""Trainer tables: a folder takes new values while no training of that kind has started (the
learning-rate trials run from a folder's own base, before its training stage); so does [eval]
until the first evaluation starts (a base may be pretrained before the evaluation is tuned)."""


def _untrained_trainer_key(difference: str, out: Path) -> bool:
    table = difference.split(":", 1)[0].split(".", 1)[0]
    if table == "eval" and not (out / "eval").exists():
        return True  # how to evaluate may change until the first evaluation starts
    methods = ("sft", "rft") if table == "sft" else (table,)  # rft takes [sft]'s fields too
    return table in TRAINER_TABLES and not any((out / "train" / m).exists() for m in methods)


def _adds_floor_or_record(difference: str) -> bool:
    key = difference.split(":", 1)[0]
    return key in RECORD_KEYS or any(key == k or key.startswith(k + ".") for k in FLOOR_KEYS)


def claim(folder: Path, kind: str, flag: str = "--out") -> None:
    """``passkt.agents.folders.claim_folder`` as a ``StudyError`` (the study's one-line errors)."""
    try:
        claim_folder(folder, kind, flag)
    except FolderKindError as e:
        raise StudyError(str(e)) from None


def pin(out: Path, requested: dict[str, Any] | None, source: str | None) -> dict[str, Any]:
    """The profile of ``out``: store ``requested`` there on first use, or check it matches
    (where only ``RECORD_KEYS`` differ, the stored record takes the requested values).

    Args:
        out: The study folder.
        requested: The resolved profile of this call, or None to use the stored one.
        source: Where ``requested`` came from (a profile name or path, with overrides).

    Raises:
        StudyError: no profile given for a new folder, or one that differs from the stored one.
    """
    claim(out, "study")
    path = out / PROFILE_FILE
    if path.is_file():
        stored = json.loads(path.read_text(encoding="utf-8"))
        # keys added to DEFAULTS after the folder was made (e.g. train) take their defaults
        stored["profile"] = json.loads(json.dumps(deep_merge(DEFAULTS, stored["profile"])))
        if requested is not None and stored["profile"] != requested:
            diffs = differences(stored["profile"], requested)
            named = stored["profile"]["base"].get("floor_models", {})
            renamed = requested["base"].get("floor_models", {})
            replaced = [f"base.floor_models.{k}: {named[k]!r} -> {renamed[k]!r}"
                        for k in named if k in renamed and named[k] != renamed[k]]  # fmt: skip
            if replaced:
                raise StudyError(
                    f"{out}: {replaced[0]}: a floor base already named cannot be replaced (its "
                    "evaluations were made from the old model); remove that seed's base-p<seed>/ "
                    "and eval/*/base-p<seed>* folders first, or choose another --out"
                )
            if all(_adds_floor_or_record(d) or _untrained_trainer_key(d, out) for d in diffs):
                # lr_trials / description record what was done; they configure nothing, so a
                # folder takes the newer record (e.g. trials run after its base was pretrained).
                # More pretraining seeds for the floor add units and leave the others valid;
                # a trainer's settings may still change while none of its runs has started.
                stored["profile"] = requested
                _write_record(path, {**stored, "updated": sorted({d.split(":")[0] for d in diffs})})
                return requested
            raise StudyError(
                f"{out} was made with another profile ({stored['source']}); differing keys: "
                f"{'; '.join(diffs[:8])}{' ...' if len(diffs) > 8 else ''}. Repeat the original "
                "--profile and overrides, leave --profile out to use the stored one, or choose "
                "another --out."
            )
        check(stored["profile"], str(path))
        mark_folder(out, "study")
        return stored["profile"]
    if requested is None:
        raise StudyError(
            f"{out} holds no study yet ({path} is missing): give --profile tiny|testbed|paper|"
            "PATH.toml"
        )
    out.mkdir(parents=True, exist_ok=True)
    _write_record(path, {"source": source, "profile": requested})
    mark_folder(out, "study")
    return requested


def _write_record(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def resolve_stored(out: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """The profile stored in ``out`` with ``overrides`` applied (to check them against it)."""
    path = out / PROFILE_FILE
    if not path.is_file():
        raise StudyError(f"overrides need --profile: {out} holds no study yet ({path} is missing)")
    stored = deep_merge(DEFAULTS, json.loads(path.read_text(encoding="utf-8"))["profile"])
    profile = json.loads(json.dumps(apply_overrides(stored, overrides)))
    check(profile, f"{path} with overrides")
    return profile
