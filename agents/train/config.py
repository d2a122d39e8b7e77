"""Configs of the GRPO and SFT trainers: one dataclass per job, also used by ``passkt train``.

Every field has a docstring (the CLI turns them into ``--help``); modes are ``Literal`` types; the
checks that involve several fields run in ``__post_init__`` and say how to fix the value.

Batch vocabulary. GRPO: one optimizer step uses ``tasks_per_step`` tasks x ``group_size``
episodes (over all processes); each process runs its share of the tasks and feeds its episodes to
the model ``micro_batch_size`` at a time (shortest together; fewer when ``micro_batch_tokens``
caps the padded tokens), accumulating gradients over the micro-batches of the step (that *is* the
gradient accumulation: ``ceil(episodes per process / micro_batch_size)`` micro-batches per step
without a token cap). SFT: one optimizer step uses ``batch_size`` expert episodes, split the same
way.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import json
import math
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from passkt.agents.policy import SamplingParams
from passkt.agents.preflight import MAX_BUDGET
from passkt.agents.rollout import check_env_workers
from passkt.envs.tasks import Task

FineTune = Literal["full", "lora"]
Precision = Literal["float32", "bfloat16", "float16", "auto"]
Scheduler = Literal["constant", "linear", "cosine"]
REPORT_TO = ("tensorboard", "wandb")
"""Metric sinks ``report_to`` accepts (besides ``metrics.jsonl``, which is always written)."""


@dataclass
class TrainConfig:
    """Fields shared by both trainers (use ``GRPOConfig`` or ``SFTConfig``)."""

    # --- what to train, on what -----------------------------------------------------------------
    policy: str = ""
    """The model to start from: ``hf:PATH_OR_ID`` (as in ``passkt eval``) or a plain folder;
    ``lean:PATH`` trains the same model with rollouts from the testbed's lean decoding loop."""
    env_id: str = "BridgeQA-v0"
    """A registered env id (``Math-v0``, ``ComparisonQA-v0``, ``BridgeQA-v0``, or your own, also
    as ``module:Env-v0``)."""
    imports: tuple[str, ...] = ()
    """Modules to import first (``--import MODULE``, repeatable): those that register your env."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra ``gym.make`` arguments (``source``, ``path``, ``hops``...), not ``max_tool_calls``."""
    split: Literal["train", "test"] = "train"
    """Task split to train on (``env_kwargs['split']`` if given must agree)."""
    task_ids: tuple[str, ...] | None = None
    """Train on exactly these tasks (default: the split's tasks, in order)."""
    limit: int | None = None
    """Keep the first ``limit`` tasks (after ``task_ids``), e.g. 200 for the study."""
    t_train: int = 5
    """Training budget T_train: ``max_tool_calls`` of every training episode (0 for ``Math-v0``)."""
    output_dir: str = "runs/train"
    """Checkpoints (``checkpoint-STEP/``) and ``metrics.jsonl`` go here."""
    seed: int = 0
    """Seeds the data order, the rollouts and torch; the same seed gives the same run on CPU."""
    env_workers: int | None = None
    """Run the envs of every rollout in this many worker processes (``passkt eval
    --env-workers``): an env that crashes, hangs or raises ends one episode as an env failure,
    which is left out of the update (it is the env's failure, not the policy's), instead of the
    run. 0: in this process. Default: 0 for passkt's own envs, else one per core up to 4."""
    env_step_timeout: float = 120.0
    """With env workers: seconds an env reset or step may take before its episode is an env
    failure."""

    # --- optimisation ---------------------------------------------------------------------------
    learning_rate: float = 1e-6
    """Peak AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lr_scheduler: Scheduler = "constant"
    """Learning-rate schedule after warm-up."""
    warmup_steps: int = 0
    """Linear warm-up from 0 over this many optimizer steps."""
    epochs: int = 1
    """Passes over the task list (ignored when ``max_steps`` is set)."""
    max_steps: int | None = None
    """Stop after this many optimizer steps (overrides ``epochs``)."""
    micro_batch_size: int = 4
    """Episodes per forward/backward pass on each process; gradients accumulate over a step."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this (``None``: no clipping)."""
    max_length: int | None = None
    """Cut training sequences to this many tokens (tokens past it are not trained)."""
    aggregation: Literal["token_mean", "sequence_mean"] = "token_mean"
    """Token averaging of the loss: DAPO's token mean or per-sequence mean (see ``losses``)."""
    micro_batch_tokens: int | None = None
    """Also cap each micro-batch at this many padded tokens (rows x its longest row): episodes,
    sorted by length, fill a micro-batch until one more would pass this or ``micro_batch_size``;
    an episode longer than the cap goes alone. Activations grow with padded tokens, not rows, so
    this bounds the update's memory when episode lengths vary (``None``: rows only)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower): transformers'
    ``gradient_checkpointing_enable`` keeps each layer's input and recomputes the layer."""
    loss_logits: Literal["trained", "columns", "all"] = "trained"
    """Where the update runs the output head: ``trained``, only at the positions whose next token
    is trained (each row's policy tokens), in chunks of ``logits_chunk_tokens``; ``columns``, at
    every position where any row of the micro-batch predicts a trained token (transformers'
    ``logits_to_keep``); ``all``, everywhere (``(B, L, V)`` logits). Same loss and gradient."""
    logits_chunk_tokens: int | None = 512
    """With ``loss_logits = "trained"``: positions sent through the output head at a time; each
    chunk's logits are recomputed in the backward pass instead of kept, so the head holds about
    this many x vocabulary floats at once (``None``: one chunk, kept for the backward pass)."""

    # --- model ------------------------------------------------------------------------------------
    finetune: FineTune = "full"
    """``full`` fine-tuning or ``lora`` adapters (peft); LoRA also saves merged weights."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by ``lora_alpha / lora_r``)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input."""
    lora_target_modules: tuple[str, ...] = ("all-linear",)
    """Module names to adapt, or ``("all-linear",)`` for every linear layer but the output head."""
    dtype: Precision = "float32"
    """Training precision of the weights; ``auto``: bfloat16 on a GPU that supports it."""

    # --- bookkeeping ------------------------------------------------------------------------------
    save_every: int = 0
    """Save a checkpoint every this many steps (0: only at the end)."""
    save_total_limit: int | None = None
    """Keep only the newest this many checkpoints (``None``: keep all)."""
    eval_every: int = 0
    """Evaluate every this many steps (0: never): greedy pass@1 on ``eval_limit`` test tasks."""
    eval_split: Literal["train", "test"] = "test"
    """Split of the evaluation tasks."""
    eval_limit: int = 50
    """Number of evaluation tasks."""
    max_new_tokens: int = 256
    """Most tokens per assistant turn (training rollouts and evaluation)."""
    generation_batch_size: int = 32
    """Most sequences decoded together by the rollout policy (``HFPolicy(batch_size=...)``)."""
    tensorboard: bool = False
    """Also write TensorBoard events to ``output_dir/tb`` (same as ``report_to=tensorboard``)."""
    report_to: tuple[str, ...] = ()
    """Where else the step metrics go, as in transformers' ``report_to``: ``tensorboard``
    (``output_dir/tb``) and / or ``wandb`` (offline unless ``WANDB_MODE`` says otherwise);
    ``metrics.jsonl`` is always written. Both trainer backends log the same slash names."""
    progress: bool = True
    """Show a tqdm progress bar."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # nan or inf in any number field fails here, not later
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value!r}")
        self.env_kwargs = dict(self.env_kwargs or {})
        self.imports = tuple(self.imports or ())
        if self.task_ids is not None:
            self.task_ids = tuple(self.task_ids)
        self.lora_target_modules = tuple(self.lora_target_modules)
        if isinstance(self.report_to, str):  # "tensorboard,wandb", as transformers accepts
            self.report_to = tuple(part.strip() for part in self.report_to.split(",") if part)
        self.report_to = tuple(self.report_to)
        unknown = sorted(set(self.report_to) - set(REPORT_TO))
        if unknown:
            raise ValueError(
                f"report_to: unknown {unknown}; choose from {list(REPORT_TO)} (or leave it empty)"
            )
        if self.tensorboard and "tensorboard" not in self.report_to:
            self.report_to = (*self.report_to, "tensorboard")
        _positive(
            self,
            "epochs",
            "micro_batch_size",
            "lora_r",
            "eval_limit",
            "max_new_tokens",
            "generation_batch_size",
        )
        policy_path(self.policy)
        check_env_workers(self.env_workers, self.env_step_timeout)
        _non_negative(self, "t_train", "warmup_steps", "save_every", "eval_every", "seed")
        if self.t_train > MAX_BUDGET:
            raise ValueError(f"t_train must be at most {MAX_BUDGET} tool calls, got {self.t_train}")
        for name in (
            "max_steps",
            "limit",
            "max_length",
            "save_total_limit",
            "micro_batch_tokens",
            "logits_chunk_tokens",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be None or >= 1, got {value}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if "max_tool_calls" in self.env_kwargs:
            raise ValueError(
                "Set the training budget with t_train, not env_kwargs['max_tool_calls']."
            )
        if self.env_kwargs.get("split", self.split) != self.split:
            raise ValueError(
                f"env_kwargs['split'] = {self.env_kwargs['split']!r} disagrees with split = "
                f"{self.split!r}; set split only."
            )
        _check_literals(self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (Task objects in ``env_kwargs`` become their ids)."""
        out = dataclasses.asdict(self)
        out["env_kwargs"] = _jsonable(self.env_kwargs)
        return out

    def save(self, path: str | Path) -> None:
        """Write the config as JSON (the format ``--config`` reads)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Build a config from a dict, naming unknown keys (with close matches) as errors."""

        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, known, n=1)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ValueError(f"Unknown {cls.__name__} fields: {', '.join(hints)}")
        return cls(**dict(data))

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        """Read a config written by ``save`` (or by hand)."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object of config fields")
        return cls.from_dict(data)


@dataclass
class GRPOConfig(TrainConfig):
    """Group Relative Policy Optimization on multi-turn episodes of any registered env."""

    output_dir: str = "runs/grpo"
    """Checkpoints (``checkpoint-STEP/``) and ``metrics.jsonl`` go here."""
    group_size: int = 8
    """G: episodes sampled per task; advantages compare the episodes of one task."""
    tasks_per_step: int = 8
    """Tasks per optimizer step over all processes (divisible by the number of processes)."""
    num_iterations: int = 1
    """Optimizer steps on each batch of rollouts (PPO epochs); the clip matters only when > 1."""
    advantage: Literal["std", "dr_grpo", "rloo"] = "std"
    """Group advantage: std-normalized (GRPO), mean-centred (Dr. GRPO) or leave-one-out (RLOO)."""
    advantage_eps: float = 1e-4
    """Added to the group std (``advantage="std"``)."""
    clip_low: float = 0.2
    """Lower clip range: the ratio is clipped at ``1 - clip_low``."""
    clip_high: float = 0.2
    """Upper clip range: the ratio is clipped at ``1 + clip_high`` (DAPO's clip-higher: 0.28)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the frozen initial policy (0: no reference model is kept)."""
    temperature: float = 1.0
    """Sampling temperature of the training rollouts (also used to score them)."""
    top_p: float = 1.0
    """Nucleus sampling of the training rollouts."""
    top_k: int = 0
    """Top-k sampling of the training rollouts (0: off)."""
    rollout_engine: Literal["hf", "vllm", "vllm-server"] = "hf"
    """Who samples the training rollouts. ``hf`` (the default): the trained model itself in
    transformers' decoding loop; no extra memory, but slow on a GPU, and under ZeRO-3 / FSDP
    (``--backend trl``) the whole model is gathered for every rollout. ``vllm``: a colocated vLLM
    engine in every training process, given the new weights (or the LoRA adapter) after every
    optimizer step; it reserves ``vllm_gpu_memory_utilization`` of each GPU. ``vllm-server``
    (``--backend trl`` only): a ``trl vllm-serve`` server at ``vllm_server_url`` on GPUs of its
    own, synced by the main process before each step. vLLM needs a CUDA GPU and ``pip install
    'passkt[vllm]'``."""
    vllm_gpu_memory_utilization: float = 0.3
    """With ``rollout_engine = "vllm"``: share of each GPU the colocated engine reserves for its
    weights and KV cache (the rest is for training)."""
    vllm_server_url: str = "http://127.0.0.1:8000"
    """With ``rollout_engine = "vllm-server"``: the base URL of the ``trl vllm-serve`` server."""
    vllm_tensor_parallel_size: int = 1
    """With ``rollout_engine = "vllm-server"``: GPUs the server shards the model over (its
    ``--tensor-parallel-size``; the plan check counts them). A colocated engine uses 1."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 to compare samples, got {self.group_size}")
        _positive(self, "tasks_per_step", "num_iterations")
        _at_most(self, MAX_EPISODES, "group_size", "tasks_per_step")
        if not 0 <= self.clip_low < 1:
            raise ValueError(f"clip_low must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0:
            raise ValueError(f"clip_high must be >= 0, got {self.clip_high}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0 (0 disables the KL term), got {self.kl_coef}")
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 for GRPO rollouts (greedy samples are all equal, so "
                f"every advantage would be 0), got {self.temperature}"
            )
        self.sampling_params()  # validates top_p, top_k
        if self.rollout_engine == "vllm" and rollout_backend(self.policy) == "lean":
            raise ValueError(
                "rollout_engine='vllm' samples with vLLM: use an hf: policy, not lean:"
            )
        _positive(self, "vllm_tensor_parallel_size")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            raise ValueError(
                "vllm_gpu_memory_utilization must be in (0, 1), got "
                f"{self.vllm_gpu_memory_utilization}"
            )

    def sampling_params(self) -> SamplingParams:
        """The sampling parameters of training rollouts."""
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
        )


@dataclass
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on expert (oracle) trajectories: the matched-data control."""

    output_dir: str = "runs/sft"
    """Checkpoints (``checkpoint-STEP/``) and ``metrics.jsonl`` go here."""
    finetune: FineTune = "lora"
    """``full`` fine-tuning or ``lora`` adapters (the study's SFT uses LoRA)."""
    learning_rate: float = 1e-4
    """Peak AdamW learning rate."""
    epochs: int = 3
    """Passes over the expert episodes (ignored when ``max_steps`` is set)."""
    batch_size: int = 8
    """Expert episodes per optimizer step over all processes."""
    data_path: str | None = None
    """A JSONL of expert episodes (``build_expert_dataset``); default: build it from the tasks."""
    only_correct: bool = True
    """Train only on expert episodes that earned reward 1."""
    expert: str = "oracle"
    """Where the training episodes come from: ``oracle`` follows each task's gold chain (the
    study's expert data; passkt envs only); ``self`` samples the policy being trained itself,
    ``self_samples`` times per task, and keeps up to ``self_keep`` of its successful episodes per
    task (rejection sampling): the on-policy control, which tells a new strategy in the expert
    data apart from the base's own successes reweighted; ``py:MODULE:FACTORY`` is your own agent
    (e.g. an env library's solver), loaded as ``passkt eval --policy`` loads it, whose successful
    episodes (one sample per task) are the expert data: the expert of any env."""
    expert_format: Literal["think", "plain"] = "think"
    """How the oracle writes its turns: ``think`` puts a one-line ``<think>`` sentence before
    each action; ``plain`` writes the bare actions and solves math step by step where the task
    carries its computation (the format of the testbed base's pretraining corpus)."""
    self_samples: int = 8
    """Samples per task when ``expert = "self"``."""
    self_keep: int = 1
    """Rewarded samples kept per task when ``expert = "self"`` (distinct texts, first first)."""
    self_temperature: float = 1.0
    """Sampling temperature of ``expert = "self"`` (the evaluation's, so the successes are the
    ones pass@k counts)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive(self, "batch_size", "self_samples", "self_keep")
        _at_most(self, MAX_EPISODES, "batch_size", "self_samples")
        if self.expert not in ("oracle", "self") and not self.expert.startswith("py:"):
            raise ValueError(
                f"expert must be 'oracle', 'self' or py:MODULE:FACTORY (your own agent), got "
                f"{self.expert!r}"
            )


def policy_path(spec: str) -> str:
    """The model a ``policy`` field names: ``hf:PATH_OR_ID``, ``lean:PATH_OR_ID`` (rollouts with
    the testbed's lean decoding loop) or a bare path / id."""
    kind, sep, target = spec.partition(":")
    if not spec:
        raise ValueError("policy is empty: set policy='hf:PATH_OR_ID' (the model to train).")
    if sep and kind in ("hf", "lean") and not target:
        raise ValueError(
            f"Bad policy spec {spec!r}: expected {kind}:PATH_OR_ID, e.g. "
            "hf:Qwen/Qwen2.5-7B-Instruct or hf:/path/to/checkpoint."
        )
    if sep and kind in ("vllm", "openai", "scripted", "py"):
        raise ValueError(
            f"policy {spec!r} cannot be trained: the trainers need a transformers model, "
            "e.g. hf:Qwen/Qwen2.5-7B-Instruct or hf:/path/to/checkpoint."
        )
    return target if sep and kind in ("hf", "lean") else spec


def rollout_backend(spec: str) -> str:
    """``"lean"`` when a ``policy`` field asks for the lean decoding loop, else ``"hf"``."""
    return "lean" if spec.partition(":")[0] == "lean" else "hf"


MAX_EPISODES = 4096
"""Bound of the per-step sizes (``group_size``, ``tasks_per_step``, ``batch_size``,
``self_samples``): past it a step would not fit any machine, and a typo would load the model and
run until killed instead of failing at once."""


def _at_most(config: object, bound: int, *names: str) -> None:
    for name in names:
        if getattr(config, name) > bound:
            raise ValueError(f"{name} must be at most {bound}, got {getattr(config, name)}")


def _positive(config: object, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _non_negative(config: object, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def _check_literals(config: object) -> None:
    """Check every ``Literal`` field against its allowed values."""

    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        allowed = typing.get_args(hints[f.name]) if typing.get_origin(hints[f.name]) else ()
        if typing.get_origin(hints[f.name]) is Literal and getattr(config, f.name) not in allowed:
            raise ValueError(
                f"{f.name} must be one of {', '.join(map(repr, allowed))}, "
                f"got {getattr(config, f.name)!r}"
            )


def _jsonable(value: Any) -> Any:

    if isinstance(value, Task):
        return value.task_id
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def plain(text: str) -> str:
    """Docstring markup as ``--help`` shows it: reStructuredText's double backticks -> single."""
    return text.replace("``", "`")


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal under it in the class body), for ``--help``."""

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = plain(" ".join(after.value.value.split()))
    return docs
