"""GRPO's update on real multi-turn batches: micro-batches of consecutive episodes vs length-sorted.

    python benchmarks/micro_batch_order.py runs/regime-d --category C --steps 3 --threads 1

Samples ``--steps`` GRPO batches (``tasks_per_step`` x ``group_size`` episodes) from a study
folder's base on its training split, with the study's own trainer config, and times the update's
forward and backward passes on each batch twice, in alternating order: micro-batches of
consecutive episodes (the trainer until this benchmark) and micro-batches of episodes sorted by
length (``length_sorted_micro_batches``, the trainer now). The optimizer step is left out (it
does not depend on the split; the model stays the base), so both orders see the same weights and
batches. Prints padded tokens, wall and CPU seconds and their ratios. The gradients agree
(``tests/agents/train/test_grpo.py``); only padding and summation order differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path


def consecutive(sequences, size, max_tokens=None):
    """Chunks of ``size`` consecutive episodes (the trainers' ``micro_batch_tokens`` cap is not
    modelled: this compares against micro-batches by row count only)."""
    return [list(range(i, min(i + size, len(sequences)))) for i in range(0, len(sequences), size)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study", type=Path, help="a study folder with a base (e.g. runs/regime-d)")
    p.add_argument("--category", default="C")
    p.add_argument("--steps", type=int, default=3, help="GRPO batches sampled and timed")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    import passkt.agents.train.grpo as grpo
    from passkt.agents.train.common import TokenSequence, collate, load_task_list
    from passkt.agents.train.loop import TrainingRun
    from passkt.study.profile import pin
    from passkt.study.stages import Study, train_config

    study = Study(args.study, pin(args.study, None, None), [args.category], [0])
    with tempfile.TemporaryDirectory() as tmp:
        config = dataclasses.replace(
            train_config(study, "grpo", args.category, 0), output_dir=tmp, progress=False
        )
        tasks = load_task_list(config, config.split, task_ids=config.task_ids)
        run = TrainingRun.start(config)
        run.plan([t.task_id for t in tasks], config.tasks_per_step)
        run.optimizer_step = lambda: run.optimizer.zero_grad(set_to_none=True) or 0.0
        totals = {name: [0, 0.0, 0.0] for name in ("consecutive", "sorted")}
        splits = {"consecutive": consecutive, "sorted": grpo.length_sorted_micro_batches}
        for step in range(args.steps):
            episodes, _ = grpo.sample_groups(run, config, run.local_items(step), step)
            sequences = [TokenSequence.from_episode(e, config.max_length) for e in episodes]
            advantages = torch.randn(len(sequences))
            names = ["consecutive", "sorted"] if step % 2 == 0 else ["sorted", "consecutive"]
            for name in names:
                chunks = splits[name](sequences, config.micro_batch_size)
                pad = run.policy.pad_token_id
                padded = sum(
                    collate([sequences[i] for i in c], pad).input_ids.numel() for c in chunks
                )
                grpo.length_sorted_micro_batches = splits[name]
                wall, cpu = time.perf_counter(), time.process_time()
                grpo.policy_update(run, config, sequences, advantages, None)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                totals[name][0] += padded
                totals[name][1] += wall
                totals[name][2] += cpu
            real = sum(len(s.token_ids) for s in sequences)
            print(f"step {step}: {len(sequences)} episodes, {real} tokens", flush=True)
    c, s = totals["consecutive"], totals["sorted"]
    print("\n| micro-batches | padded tokens | wall s | CPU s |\n|---|---:|---:|---:|")
    for name, (padded, wall, cpu) in totals.items():
        print(f"| {name} | {padded} | {wall:.1f} | {cpu:.1f} |")
    print(
        f"| consecutive / sorted | {c[0] / s[0]:.2f}x | {c[1] / s[1]:.2f}x | {c[2] / s[2]:.2f}x |"
    )
    print(f"\n{args.study} {args.category}, {args.steps} batches, {args.threads} thread(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
