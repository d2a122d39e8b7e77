"""Pretraining of the testbed's base policy: a causal LM on the noisy-episode corpus.

``pretrain(config)`` fits the tokenizer to the synthetic world, builds the corpus
(``passkt.study.testbed.corpus``), initialises a model of ``config.size`` and trains it with
AdamW (warm-up, cosine decay) on packed blocks of documents. It writes, under ``output_dir``:

- ``model/``: the base policy, an ordinary Hugging Face folder (``hf:OUTPUT_DIR/model``);
- ``checkpoint/``: model, optimizer and step of the latest save (``resume=True`` continues from
  it; the data order depends only on the seed and the step, so a resumed run sees exactly the
  batches an uninterrupted one would);
- ``metrics.jsonl``: ``loss/all`` and ``loss/assistant`` (token NLL over all tokens and over the
  agent's own tokens), ``lr``, ``tokens/s`` ... every ``log_every`` steps, and ``eval/...`` on
  held-out documents every ``eval_every`` steps;
- ``steps/step-N/``: the model at every ``keep_every``-th step, when :func:`pretrain` is asked
  to keep them (the study's calibration reads these; ``on_keep`` may end the run at one);
- ``corpus.npz`` and ``pretrain_config.json``;
- ``environment.jsonl``: one line per start or resume (its step, torch threads, package versions
  and git commit), so two pretrainings of one config that differ can be told apart. A config and
  seed give bitwise-equal weights run twice or interrupted and resumed, on one torch thread
  count; another thread count sums matrix products in another order and gives other last bits,
  which grow over training (a resume on another count is warned about).

Loss on all tokens, the agent's weighted 4x (the defaults ``loss_on="all"``,
``assistant_weight=4``). The base model stands for a *pretrained* LM: it learns the world's
language, the paragraphs and the observation formats as well as the agent's turns, as an LLM
learns from web text that contains transcripts; an assistant-only loss would discard the 96% of
the corpus that teaches the model to read its observations. But the agent's turns are only about
4% of the tokens, so they get 4x the weight (about 15% of the gradient): at equal compute (nano,
12M tokens) this lowered the held-out NLL of the agent's tokens from 1.04 to 0.93 nats and raised
the share of bridge episodes that search the right second entity from 5% to 12%.
``loss_on="assistant"`` exists for comparison. Fine-tuning (SFT, GRPO) then trains on policy
tokens only, as in the study.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

from passkt.agents.folders import mark_folder
from passkt.agents.progress import progress_bar
from passkt.eval.manifest import git_commit, package_versions
from passkt.study.testbed.corpus import Corpus, CorpusConfig, build_corpus
from passkt.study.testbed.model import MODEL_SIZES, build_model, save_checkpoint
from passkt.study.testbed.tokenizer import build_tokenizer, fit_vocabulary, fitting_texts

logger = logging.getLogger(__name__)

MODEL_DIR = "model"
CHECKPOINT_DIR = "checkpoint"
METRICS_FILE = "metrics.jsonl"
CORPUS_FILE = "corpus.npz"
CONFIG_FILE = "pretrain_config.json"
STEPS_DIR = "steps"
ENVIRONMENT_FILE = "environment.jsonl"
_RUNTIME_FIELDS = ("max_minutes", "stop_step", "threads", "progress", "save_every", "log_every")
_RUNTIME_FIELDS += ("eval_every",)
"""Fields a resumed run may change (they do not change what a step computes; ``max_steps`` does,
through the learning-rate schedule)."""


@dataclass(frozen=True)
class PretrainConfig:
    """One pretraining run of a testbed base model."""

    output_dir: str = "runs/testbed/base"
    """Where the model, checkpoint, metrics and corpus go."""
    size: str = "nano"
    """Model size: a name of ``MODEL_SIZES`` (nano, micro, small)."""
    seed: int = 0
    """Seed of the initial weights, the corpus episodes and the data order."""
    world_seed: int = 0
    """Seed of the synthetic world and its tasks (the tokenizer is fitted to it)."""
    episodes_per_category: int = 4000
    """Noisy episodes per category in the corpus (see ``CorpusConfig``)."""
    tasks_per_category: int = 1000
    """Training tasks per category the episodes are drawn from (after the 200 reserved ones)."""
    guided_rates: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
    """Chance that an episode's turn is guided; episodes are spread evenly over these rates."""
    paragraph_repeats: int = 2
    """How often every world paragraph appears in the corpus."""
    arithmetic_facts: int = 0
    """Correct arithmetic facts (``37 + 8 = 45.``) added to the corpus as plain text (0: none)."""
    block_size: int = 1024
    """Tokens per training sequence (documents are packed; a T = 5 episode is ~1,000 tokens)."""
    batch_size: int = 4
    """Sequences per optimizer step."""
    max_steps: int = 3000
    """Optimizer steps (the learning-rate schedule is laid out over them)."""
    stop_step: int | None = None
    """End the run at this step, the schedule still laid over ``max_steps``: a checkpoint of a
    longer schedule, stated before the run (e.g. step 9000 of 12,000, before the decay ends)."""
    max_minutes: float | None = None
    """Stop early (and save) after this much wall time; the schedule is not changed."""
    learning_rate: float = 3e-3
    """Peak learning rate (small models from scratch take a large one)."""
    min_lr_ratio: float = 0.1
    """The cosine decay ends at ``learning_rate * min_lr_ratio``."""
    warmup_steps: int = 50
    """Linear warm-up steps."""
    weight_decay: float = 0.1
    """AdamW weight decay on matrices (not on norms)."""
    grad_clip: float = 1.0
    """Gradient-norm clipping."""
    loss_on: Literal["all", "assistant"] = "all"
    """Train on every token (default) or only on the agent's own tokens."""
    assistant_weight: float = 4.0
    """With ``loss_on="all"``: weight of the agent's tokens relative to the others."""
    eval_fraction: float = 0.02
    """Share of documents held out for ``eval/loss``."""
    eval_every: int = 250
    """Steps between held-out evaluations (and at the end)."""
    save_every: int = 250
    """Steps between checkpoints (and at the end)."""
    log_every: int = 10
    """Steps per metrics line."""
    threads: int | None = None
    """``torch.set_num_threads`` for the run (None: leave torch's setting). The weights depend on
    it in their last bits: two runs of one config and seed are bitwise equal on the same thread
    count, resumed or not, and drift apart on different ones."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        if self.size not in MODEL_SIZES:
            raise ValueError(f"size must be one of {sorted(MODEL_SIZES)}, got {self.size!r}")
        for name in ("block_size", "batch_size", "max_steps", "eval_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"PretrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.log_every < 1 or self.warmup_steps < 0:
            raise ValueError("PretrainConfig: log_every must be >= 1 and warmup_steps >= 0")
        if self.assistant_weight <= 0:
            raise ValueError(f"assistant_weight must be > 0, got {self.assistant_weight}")
        if self.loss_on not in ("all", "assistant"):
            raise ValueError(f"loss_on must be 'all' or 'assistant', got {self.loss_on!r}")
        if not 0 < self.eval_fraction < 0.5:
            raise ValueError(f"eval_fraction must be in (0, 0.5), got {self.eval_fraction}")
        if self.learning_rate <= 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError("learning_rate must be > 0 and min_lr_ratio in [0, 1]")
        if self.stop_step is not None and not 1 <= self.stop_step <= self.max_steps:
            raise ValueError(f"stop_step must be in 1..max_steps, got {self.stop_step}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ValueError(f"max_minutes must be > 0 or None, got {self.max_minutes}")
        for name in ("seed", "world_seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.threads is not None and not 1 <= self.threads <= 1024:
            raise ValueError(f"threads must be in 1..1024 or None, got {self.threads}")
        object.__setattr__(self, "guided_rates", tuple(float(r) for r in self.guided_rates))
        self.corpus_config()  # its own checks, here: before the run's folder is made

    def corpus_config(self) -> CorpusConfig:
        """The corpus this run trains on."""
        return CorpusConfig(
            world_seed=self.world_seed,
            seed=self.seed,
            episodes_per_category=self.episodes_per_category,
            tasks_per_category=self.tasks_per_category,
            guided_rates=self.guided_rates,
            paragraph_repeats=self.paragraph_repeats,
            arithmetic_facts=self.arithmetic_facts,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "guided_rates": list(self.guided_rates)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PretrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown PretrainConfig fields {unknown}; known: {sorted(known)}")
        if "guided_rates" in values:
            values = {**values, "guided_rates": tuple(values["guided_rates"])}
        return cls(**values)


@dataclass(frozen=True)
class PretrainResult:
    """What a finished run leaves behind."""

    model_dir: Path
    """The base policy (a Hugging Face folder)."""
    steps: int
    """Optimizer steps done in total (including those before a resume)."""
    last_metrics: dict[str, float]
    """The last metrics line (training and held-out losses)."""


# --------------------------------------------------------------------------- data


class Batches:
    """Packed blocks of documents in a seeded order that depends only on the step.

    Each epoch concatenates the documents in a fresh permutation and cuts the stream into blocks of
    ``block_size + 1`` tokens that overlap by one (every token is a target once per epoch).
    """

    def __init__(
        self, corpus: Corpus, documents: np.ndarray, block_size: int, batch_size: int, seed: int
    ) -> None:
        self.corpus, self.documents = corpus, documents
        self.block_size, self.batch_size, self.seed = block_size, batch_size, seed
        lengths = corpus.starts[documents + 1] - corpus.starts[documents]
        self.blocks_per_epoch = max(1, (int(lengths.sum()) - 1) // block_size)
        self._epoch: int | None = None
        self._stream: tuple[np.ndarray, np.ndarray] | None = None

    def _epoch_stream(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        if self._epoch != epoch or self._stream is None:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.documents)
            pieces = [slice(self.corpus.starts[d], self.corpus.starts[d + 1]) for d in order]
            tokens = np.concatenate([self.corpus.tokens[p] for p in pieces])
            mask = np.concatenate([self.corpus.assistant[p] for p in pieces])
            need = self.blocks_per_epoch * self.block_size + 1
            if len(tokens) < need:  # tiny corpora: wrap around
                reps = math.ceil(need / len(tokens))
                tokens, mask = np.tile(tokens, reps)[:need], np.tile(mask, reps)[:need]
            self._epoch, self._stream = epoch, (tokens, mask)
        return self._stream

    def block(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Global block ``index``: ``block_size + 1`` tokens and their assistant flags."""
        epoch, within = divmod(index, self.blocks_per_epoch)
        tokens, mask = self._epoch_stream(epoch)
        start = within * self.block_size
        return tokens[start : start + self.block_size + 1], mask[
            start : start + self.block_size + 1
        ]

    def batch(self, step: int) -> tuple[Any, Any]:
        """``(B, block_size + 1)`` token ids and assistant flags of optimizer step ``step``."""
        import torch  # optional: the hf extra (torch, transformers)

        blocks = [self.block(step * self.batch_size + i) for i in range(self.batch_size)]
        ids = torch.from_numpy(np.stack([b[0] for b in blocks]).astype(np.int64))
        mask = torch.from_numpy(np.stack([b[1] for b in blocks]))
        return ids, mask


def split_documents(corpus: Corpus, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train, held_out)`` document indices: a seeded ``fraction`` is held out."""
    order = np.random.default_rng([seed, 99]).permutation(corpus.num_documents)
    held = max(1, round(fraction * corpus.num_documents))
    return np.sort(order[held:]), np.sort(order[:held])


def learning_rate(config: PretrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` of the peak at ``max_steps``."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    span = max(1, config.max_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = config.min_lr_ratio
    return config.learning_rate * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def token_losses(model: Any, ids: Any, mask: Any) -> tuple[Any, Any]:
    """Next-token NLL at every position, and which of those targets the agent wrote.

    Args:
        model: A causal LM.
        ids: ``(B, L + 1)`` token ids.
        mask: ``(B, L + 1)`` assistant flags.

    Returns:
        ``(nll (B, L) float, assistant (B, L) bool)``; the targets are ``ids[:, 1:]``.
    """
    import torch.nn.functional as F  # optional: the hf extra (torch, transformers)

    inputs, targets = ids[:, :-1], ids[:, 1:]
    logits = model(input_ids=inputs, use_cache=False).logits  # (B, L, V)
    nll = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="none"
    ).view(targets.shape)  # (B, L)
    return nll, mask[:, 1:]


def training_loss(nll: Any, assistant: Any, config: PretrainConfig) -> Any:
    """The weighted mean NLL that is minimised (see ``loss_on`` and ``assistant_weight``)."""
    if config.loss_on == "assistant":
        return (nll * assistant).sum() / assistant.sum().clamp(min=1)
    weights = 1.0 + (config.assistant_weight - 1.0) * assistant.float()  # (B, L)
    return (nll * weights).sum() / weights.sum()


def _loss_sums(nll: Any, assistant: Any) -> dict[str, float]:
    """Sums and counts for averaging both losses over a logging window."""
    return {
        "all_sum": float(nll.detach().sum()),
        "all_n": float(nll.numel()),
        "assistant_sum": float((nll.detach() * assistant).sum()),
        "assistant_n": float(assistant.sum()),
    }


def _averages(sums: dict[str, float], prefix: str) -> dict[str, float]:
    out = {}
    for part in ("all", "assistant"):
        if sums.get(f"{part}_n", 0) > 0:
            out[f"{prefix}loss/{part}"] = sums[f"{part}_sum"] / sums[f"{part}_n"]
    return out


def evaluate_loss(model: Any, batches: Batches, steps: int = 4) -> dict[str, float]:
    """Mean held-out NLL over all tokens and over the agent's tokens (``eval/loss/...``)."""
    import torch  # optional: the hf extra (torch, transformers)

    was_training = model.training
    model.eval()
    sums: dict[str, float] = {}
    with torch.no_grad():
        for step in range(min(steps, max(1, batches.blocks_per_epoch // batches.batch_size))):
            for key, value in _loss_sums(*token_losses(model, *batches.batch(step))).items():
                sums[key] = sums.get(key, 0.0) + value
    model.train(was_training)
    return _averages(sums, "eval/")


# --------------------------------------------------------------------------- the run


def _optimizer(model: Any, config: PretrainConfig) -> Any:
    import torch  # optional: the hf extra (torch, transformers)

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(0.9, 0.95), eps=1e-8)


def _start(config: PretrainConfig, out: Path, resume: bool) -> int:
    """Check the output folder; return the step to start from (0 for a fresh run)."""
    state_file = out / CHECKPOINT_DIR / "state.json"
    saved_config = out / CONFIG_FILE
    if not resume:
        if state_file.exists() or (out / MODEL_DIR).exists():
            raise FileExistsError(
                f"{out} already holds a pretraining run; pass resume=True (--resume) to continue "
                "it, or choose another output_dir (--out)"
            )
        out.mkdir(parents=True, exist_ok=True)
        mark_folder(out, "pretraining")
        saved_config.write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True))
        return 0
    if not state_file.exists():
        logger.info("resume=True but %s has no checkpoint: starting from scratch", out)
        return _start(config, out, resume=False)
    old = json.loads(saved_config.read_text())
    new = config.to_dict()
    defaults = PretrainConfig().to_dict()  # a field added since the run started: its default
    moved = ("output_dir",)  # where the run is, not what it computes: a restored copy resumes
    changed = sorted(
        k for k in new if k not in _RUNTIME_FIELDS + moved and old.get(k, defaults[k]) != new[k]
    )
    if changed:
        raise ValueError(
            f"cannot resume {out}: the config differs in {changed} (see {saved_config}); "
            f"only {', '.join(_RUNTIME_FIELDS)} may change on resume"
        )
    saved_config.write_text(json.dumps(new, indent=2, sort_keys=True))
    return int(json.loads(state_file.read_text())["step"])


def _prepare(config: PretrainConfig, out: Path, start: int) -> tuple[Any, Any, Corpus, Any]:
    """Tokenizer, model, corpus and optimizer: fresh, or from the checkpoint when resuming."""
    import torch  # optional: the hf extra (torch, transformers)

    # optional: the hf extra (torch, transformers)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from passkt.agents.train.safe_state import load_state  # start-up cost: torch, 1 s

    checkpoint = out / CHECKPOINT_DIR
    if start:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        if (out / CORPUS_FILE).is_file():
            corpus = Corpus.load(out / CORPUS_FILE)
        else:  # a checkpoint kept without its corpus (study export): the same seeds rebuild it
            corpus = build_corpus(config.corpus_config(), tokenizer, progress=False)
            corpus.save(out / CORPUS_FILE)
    else:
        tokenizer = build_tokenizer(fit_vocabulary(fitting_texts(config.world_seed)))
        model = build_model(config.size, tokenizer, seed=config.seed)
        corpus = build_corpus(config.corpus_config(), tokenizer, progress=False)
        corpus.save(out / CORPUS_FILE)
    optimizer = _optimizer(model, config)
    if start:
        optimizer.load_state_dict(load_state(checkpoint, "optimizer"))  # no pickle: safe_state
    return tokenizer, model.train(), corpus, optimizer


def _save(out: Path, model: Any, tokenizer: Any, optimizer: Any, step: int) -> None:
    """Write the checkpoint atomically (a temporary folder renamed into place)."""
    from passkt.agents.train.safe_state import save_state  # start-up cost: torch, 1 s

    tmp = out / f".{CHECKPOINT_DIR}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_checkpoint(model, tokenizer, tmp)
    save_state(optimizer.state_dict(), tmp, "optimizer")
    (tmp / "state.json").write_text(json.dumps({"step": step}))
    final = out / CHECKPOINT_DIR
    old = out / f".{CHECKPOINT_DIR}.old"
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


def _record_environment(out: Path, start: int) -> None:
    """Append what this start runs with: the step, torch threads, package versions, commit.

    Warns when a resume runs with another number of torch threads than the steps before it:
    matrix products sum in another order on another thread count, so the weights drift from
    those of a run made on one thread count throughout (by about 2e-7 after 60 nano steps, and
    more as training goes on). A run with one thread count throughout, resumed or not, is
    reproduced bit for bit.
    """

    import torch  # optional: the hf extra (torch, transformers)

    path = out / ENVIRONMENT_FILE
    earlier = path.read_text(encoding="utf-8").splitlines() if start and path.exists() else []
    threads = {json.loads(line).get("torch_threads") for line in earlier if line.strip()}
    if threads - {torch.get_num_threads()}:
        logger.warning(
            "%s ran before with %s torch thread(s) and resumes with %d: its weights will not be "
            "bitwise those of a run on one thread count throughout (set --threads as before)",
            out, ", ".join(map(str, sorted(threads))), torch.get_num_threads(),
        )  # fmt: skip
    line = {
        "start_step": start,
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch_threads": torch.get_num_threads(),
        "versions": package_versions(),
        "git_commit": git_commit(),
    }
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def _open_metrics(out: Path, start: int) -> Any:
    """The metrics file, without lines past ``start`` (left by a run that crashed after saving)."""
    path = out / METRICS_FILE
    lines = path.read_text().splitlines() if (start and path.exists()) else []
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= start]
    path.write_text("".join(line + "\n" for line in kept))
    return path.open("a")


def kept_step_dir(output_dir: str | Path, step: int) -> Path:
    """Where :func:`pretrain` keeps the model of step ``step`` (``keep_every``)."""
    return Path(output_dir) / STEPS_DIR / f"step-{step}"


def pretrain(
    config: PretrainConfig,
    *,
    resume: bool = False,
    keep_every: int | None = None,
    on_keep: Callable[[int, Path], bool] | None = None,
) -> PretrainResult:
    """Pretrain a base policy (see the module docstring for what is written where).

    Args:
        config: The run.
        resume: Continue from ``output_dir/checkpoint`` (a fresh start if there is none).
        keep_every: Keep the model of every such step in ``steps/step-N/`` (a multiple of
            ``save_every``, so a resumed run never skips one).
        on_keep: Called with (step, its folder) after each kept model, and once with the
            resumed step before the first new step (folder None: nothing new was kept); True ends
            the run there, as ``stop_step`` would. The study's calibration decides with it.

    Returns:
        Where the model is and the last metrics.

    Raises:
        FileExistsError: ``output_dir`` holds a run and ``resume`` is False.
        ValueError: Resuming with a config that changes what the steps compute.
    """
    import torch  # optional: the hf extra (torch, transformers)

    if config.threads is not None:
        torch.set_num_threads(config.threads)
    out = Path(config.output_dir)
    start = _start(config, out, resume)
    tokenizer, model, corpus, optimizer = _prepare(config, out, start)
    train_docs, held_docs = split_documents(corpus, config.eval_fraction, config.seed)
    batches = Batches(corpus, train_docs, config.block_size, config.batch_size, config.seed)
    held = Batches(corpus, held_docs, config.block_size, config.batch_size, config.seed + 1)
    _record_environment(out, start)
    metrics_file = _open_metrics(out, start)
    end = config.stop_step or config.max_steps
    if keep_every is not None and (keep_every < 1 or keep_every % config.save_every):
        raise ValueError(f"keep_every must be a multiple of save_every ({config.save_every})")
    if on_keep is not None and on_keep(start, None):
        end = start  # decided before this run: nothing more to train
    bar = progress_bar(total=end, initial=start, disable=not config.progress, desc="pretrain")
    began, window, window_start, last = time.perf_counter(), {}, time.perf_counter(), {}
    step = start
    try:
        while step < end:
            lr = learning_rate(config, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            nll, assistant = token_losses(model, *batches.batch(step))
            loss = training_loss(nll, assistant, config)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            bar.update(1)
            for key, value in _loss_sums(nll, assistant).items():
                window[key] = window.get(key, 0.0) + value
            timed_out = (
                config.max_minutes is not None
                and time.perf_counter() - began >= 60 * config.max_minutes
            )
            done = step == end or timed_out
            if step % config.log_every == 0 or done:
                elapsed = time.perf_counter() - window_start
                last = {
                    "step": step, **_averages(window, ""), "lr": lr,
                    "grad_norm": float(grad_norm), "tokens": step * config.batch_size
                    * config.block_size, "tokens/s": window["all_n"] / elapsed,
                }  # fmt: skip
                if step % config.eval_every == 0 or done:
                    last.update(evaluate_loss(model, held))
                metrics_file.write(json.dumps(last) + "\n")
                metrics_file.flush()
                bar.set_postfix(loss=f"{last.get('loss/all', float('nan')):.3f}")
                window, window_start = {}, time.perf_counter()
            if keep_every is not None and step % keep_every == 0:
                kept = save_checkpoint(model.eval(), tokenizer, kept_step_dir(out, step))
                model.train()
                if on_keep is not None and on_keep(step, kept) and not done:
                    done, end = True, step
            if step % config.save_every == 0 or done:
                _save(out, model, tokenizer, optimizer, step)
            if timed_out:
                logger.info("max_minutes=%s reached at step %d", config.max_minutes, step)
                break
    finally:
        bar.close()
        metrics_file.close()
    model_dir = save_checkpoint(model.eval(), tokenizer, out / MODEL_DIR)
    return PretrainResult(model_dir, step, {k: float(v) for k, v in last.items()})
