"""The shape of a decoder-only transformer, the numbers a training run's memory plan reads.

Known hub models are listed so the plan needs no download; a local folder's ``config.json`` gives
the rest (``passkt.agents.train.plan``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from passkt.agents.train.config import policy_path

__all__ = ["KNOWN_MODELS", "ModelShape", "model_shape"]


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that memory depends on."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool = False

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    def linears(self) -> list[tuple[int, int]]:
        """``(in, out)`` of each linear layer of one block (q, k, v, o, gate, up, down)."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]

    @property
    def parameters(self) -> int:
        block = sum(a * b for a, b in self.linears()) + 2 * self.hidden
        head = 0 if self.tied else self.vocab * self.hidden
        return self.vocab * self.hidden + self.layers * block + self.hidden + head

    def lora_parameters(self, rank: int) -> int:
        """LoRA on every linear layer of every block (``all-linear``; the head is left out)."""
        return self.layers * rank * sum(a + b for a, b in self.linears())

    def kv_bytes_per_token(self) -> int:
        """bf16 keys and values of one token over all layers."""
        return self.layers * 2 * self.kv_dim * 2

    def layer_values_per_token(self) -> int:
        """Activations one block keeps per token for its backward pass (q, attention output,
        residuals, k, v and the MLP's four intermediate-wide tensors)."""
        return 4 * self.hidden + 2 * self.kv_dim + 4 * self.intermediate


KNOWN_MODELS = {
    "Qwen/Qwen2.5-7B-Instruct": ModelShape(28, 3584, 18944, 28, 4, 152064),
}
"""Shapes of the models the documentation names, so the check needs no download."""


def model_shape(policy: str) -> ModelShape | None:
    """The shape of ``policy``: a known hub id, or a folder's ``config.json``; None otherwise."""
    path = policy_path(policy)
    if path in KNOWN_MODELS:
        return KNOWN_MODELS[path]
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
        heads = int(data["num_attention_heads"])
        return ModelShape(
            layers=int(data["num_hidden_layers"]),
            hidden=int(data["hidden_size"]),
            intermediate=int(data["intermediate_size"]),
            heads=heads,
            kv_heads=int(data.get("num_key_value_heads") or heads),
            vocab=int(data["vocab_size"]),
            tied=bool(data.get("tie_word_embeddings", False)),
        )
    except (OSError, ValueError, KeyError, TypeError):  # another architecture's names: unknown
        return None
