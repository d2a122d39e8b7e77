"""The testbed's small agent models: Llama-architecture causal LMs trained from scratch.

Three sizes share one recipe (pre-norm decoder, RoPE, grouped-query attention, SwiGLU MLP, tied
input/output embeddings, no biases: ``transformers``' ``LlamaForCausalLM``), so a checkpoint is an
ordinary Hugging Face folder that ``HFPolicy``, ``AutoModelForCausalLM``, the evaluator and the
trainers load like any other model:

========  ======  ======  =====  ========  ===========================================
size      width   layers  heads  kv heads  parameters (with the ~1.7k-word vocabulary)
========  ======  ======  =====  ========  ===========================================
nano      64      2       4      2         ~0.2M
micro     128     4       4      2         ~1.0M
small     256     6       8      4         ~5M
========  ======  ======  =====  ========  ===========================================

The vocabulary is the testbed tokenizer's (``passkt.study.testbed.tokenizer``): with a word per
token, the embedding table is small and the softmax over it cheap.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from passkt.agents.tiny import END_OF_TEXT, IM_END
from passkt.study.testbed.tokenizer import build_tokenizer, fit_vocabulary, fitting_texts


@dataclass(frozen=True)
class ModelSize:
    """The shape of one model of the family."""

    hidden_size: int
    """Width of the residual stream."""
    num_layers: int
    """Decoder layers."""
    num_heads: int
    """Query heads (``hidden_size / num_heads`` is the head width)."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention: a smaller KV cache)."""
    intermediate_size: int
    """Width of the SwiGLU MLP."""
    max_positions: int = 2048
    """Longest sequence (a T = 5 synthetic episode is about 1,000 tokens)."""

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads "
                f"({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        for name, value in asdict(self).items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")


MODEL_SIZES: dict[str, ModelSize] = {
    "nano": ModelSize(
        hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=192
    ),
    "micro": ModelSize(
        hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384
    ),
    "small": ModelSize(
        hidden_size=256, num_layers=6, num_heads=8, num_kv_heads=4, intermediate_size=768
    ),
}
"""The family; pass a name or your own ``ModelSize`` wherever a size is asked for."""


def resolve_size(size: str | ModelSize) -> ModelSize:
    """A ``ModelSize`` from a name of ``MODEL_SIZES`` (or the size itself)."""
    if isinstance(size, ModelSize):
        return size
    try:
        return MODEL_SIZES[size]
    except KeyError:
        import difflib  # optional: difflib

        close = difflib.get_close_matches(str(size), list(MODEL_SIZES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown model size {size!r}.{hint} Known sizes: {', '.join(MODEL_SIZES)}"
        ) from None


def model_config(size: str | ModelSize, tokenizer: Any) -> Any:
    """The ``LlamaConfig`` of a model of ``size`` over ``tokenizer``'s vocabulary."""
    from transformers import LlamaConfig  # optional: the hf extra (torch, transformers)

    shape = resolve_size(size)
    eos, pad = (tokenizer.convert_tokens_to_ids(t) for t in (IM_END, END_OF_TEXT))
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.max_positions,
        rope_theta=10_000.0,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
    )


def build_model(size: str | ModelSize, tokenizer: Any, *, seed: int = 0) -> Any:
    """A freshly initialised ``LlamaForCausalLM`` (float32); the global RNG is left untouched."""
    import torch  # optional: the hf extra (torch, transformers)

    # optional: the hf extra (torch, transformers)
    from transformers import GenerationConfig, LlamaForCausalLM

    config = model_config(size, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[config.eos_token_id, config.pad_token_id], pad_token_id=config.pad_token_id
    )
    return model


def count_parameters(model: Any) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def save_checkpoint(model: Any, tokenizer: Any, folder: str | Path) -> Path:
    """Write ``model`` and ``tokenizer`` as one Hugging Face folder (safetensors)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def make_testbed_checkpoint(
    path: str | Path, size: str | ModelSize = "nano", *, seed: int = 0, world_seed: int = 0
) -> Path:
    """Fit the tokenizer to the synthetic world of ``world_seed`` and save an untrained model.

    Args:
        path: Output folder.
        size: A name of ``MODEL_SIZES`` or a ``ModelSize``.
        seed: Weight initialisation seed.
        world_seed: The synthetic world (and tasks) the tokenizer is fitted to.

    Returns:
        The folder, loadable with ``HFPolicy(path)``.
    """

    tokenizer = build_tokenizer(fit_vocabulary(fitting_texts(world_seed)))
    return save_checkpoint(build_model(size, tokenizer, seed=seed), tokenizer, path)
