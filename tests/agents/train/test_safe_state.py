"""Checkpoint state loads without unpickling: exact round trips; a planted payload never runs."""

from __future__ import annotations

import json
import os
import pickle
import random

import numpy as np
import pytest
import torch

from passkt.agents.train.checkpoint import (
    load_trainer_state,
    rng_state,
    truncate_metrics,
)
from passkt.agents.train.safe_state import UnsafeStateError, load_state, save_state


def _trained_optimizer() -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, betas=(0.8, 0.9))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    for _ in range(3):
        model(torch.randn(5, 4)).square().sum().backward()
        optimizer.step()
        scheduler.step()
    return optimizer, scheduler


def test_optimizer_scheduler_and_rng_states_round_trip_exactly(tmp_path):
    optimizer, scheduler = _trained_optimizer()
    state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
    save_state(state, tmp_path, "s")
    loaded = load_state(tmp_path, "s")
    assert loaded["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert loaded["optimizer"]["param_groups"][0]["betas"] == (0.8, 0.9)  # a tuple again
    assert loaded["scheduler"] == state["scheduler"]
    for key, per_param in state["optimizer"]["state"].items():  # integer keys survive
        for name, value in per_param.items():
            assert torch.equal(loaded["optimizer"]["state"][key][name], value)
    optimizer.load_state_dict(loaded["optimizer"])  # what resuming does

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    save_state(rng_state(), tmp_path, "rng")
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    from passkt.agents.train.checkpoint import set_rng_state

    set_rng_state(load_state(tmp_path, "rng"))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


class _Payload:
    """Unpickling this runs ``open(marker, "w")``: what a planted trainer_state.pt would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(folder, name: str, marker) -> None:
    with open(folder / name, "wb") as f:
        pickle.dump({"optimizer": _Payload(str(marker))}, f)


def test_a_planted_pickle_is_never_run(tmp_path):
    marker = tmp_path / "pwned"
    old = tmp_path / "checkpoint-1"
    old.mkdir()
    (old / "trainer_state.json").write_text(json.dumps({"step": 1}))
    _plant(old, "trainer_state.pt", marker)
    _plant(old, "rng_state_0.pt", marker)
    with pytest.raises(UnsafeStateError, match=r"pickled .*not loaded"):
        load_trainer_state(old)
    assert not marker.exists()

    # A checkpoint in the safe format with a payload dropped next to it: the payload is ignored.
    new = tmp_path / "checkpoint-2"
    new.mkdir()
    (new / "trainer_state.json").write_text(json.dumps({"step": 2}))
    optimizer, _ = _trained_optimizer()
    save_state({"optimizer": optimizer.state_dict()}, new, "optimizer_state")
    save_state(rng_state(), new, "rng_state_0")
    _plant(new, "trainer_state.pt", marker)
    _plant(new, "rng_state_0.pt", marker)
    state, info = load_trainer_state(new)
    assert info["step"] == 2 and not marker.exists()
    assert state["optimizer"]["param_groups"] == optimizer.state_dict()["param_groups"]


def test_state_files_that_are_not_ours_are_refused(tmp_path):
    save_state({"a": torch.zeros(2)}, tmp_path, "s")
    (tmp_path / "s.json").write_text('{"$eval": "os.system"}')
    with pytest.raises(UnsafeStateError, match="unknown tag"):
        load_state(tmp_path, "s")
    os.remove(tmp_path / "s.safetensors")
    with pytest.raises(UnsafeStateError, match="missing"):
        load_state(tmp_path, "s")
    with pytest.raises(TypeError, match=r"state\[.f.\]: cannot save a builtin"):
        save_state({"f": print}, tmp_path, "t")


def test_truncate_metrics_drops_a_torn_last_line_and_names_a_corrupt_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s}) for s in (1, 2, 3)]
    path.write_text("\n".join(lines) + '\n{"step": 4, "loss"')  # crash while logging step 4
    truncate_metrics(path, 3)
    assert path.read_text().splitlines() == lines
    path.write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2 is not valid JSON"):
        truncate_metrics(path, 3)
