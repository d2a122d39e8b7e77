"""Tiny Qwen2-architecture checkpoints, built offline, for tests and benchmarks.

``make_tiny_checkpoint(path)`` writes a complete Hugging Face folder (``config.json``,
``model.safetensors``, ``generation_config.json``, ``tokenizer.json`` with a ChatML chat template
like Qwen2.5's) that ``HFPolicy`` and ``AutoModelForCausalLM.from_pretrained`` load like any
other checkpoint. Nothing is downloaded: the tokenizer is a byte-level BPE trained on a small
built-in text that contains the agent protocol's tags, so it round-trips any Unicode text.
The weights are random (seeded), so the model's output is gibberish, but real gibberish: every
code path (chat template, left padding, KV cache, sampling, stopping, training) is exercised.
"""

from __future__ import annotations

from pathlib import Path

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5's ChatML layout, without Qwen's default system prompt."""

CHATML_TOOLS_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML "
    "tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": '
    '<function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set function = call['function'] if call.get('function') else call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + function['name'] + '\", \"arguments\": ' }}"
    "{%- if function['arguments'] is string %}{{- function['arguments'] }}"
    "{%- else %}{{- function['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5's tool-calling ChatML layout (tools listed in the system turn, a call written as
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, a tool's reply as a user turn in
``<tool_response>``), without Qwen's default system prompt or its grouping of tool replies."""

_CORPUS = """\
You are a research assistant. Answer the question. You may search a small library of documents.
To search, write <search>your query</search> and the results arrive as
<information>Doc 1 (Title: Alder Vale) Alder Vale is a town founded by Mira Oskan in 1871.
Doc 2 (Title: Mira Oskan) Mira Oskan was a cartographer born in Port Hollis.
Doc 3 (Title: Port Hollis) Port Hollis is a harbour city on the northern coast.</information>
Think inside <think>...</think> before you act. When you know the answer, write
<answer>Port Hollis</answer> and stop. Each turn ends in exactly one action.
Question: Where was the founder of Alder Vale born?
<think>I need the founder of Alder Vale first, then where that person was born.</think>
<search>Alder Vale founder</search>
<think>The founder is Mira Oskan. Now I search for her birthplace.</think>
<search>Mira Oskan birthplace</search>
<answer>Port Hollis</answer>
Question: Which river is longer, the Tamsin or the Orrel?
<search>Tamsin river length</search>
<information>Doc 1 (Title: Tamsin) The Tamsin is a river 412 kilometres long.</information>
<search>Orrel river length</search>
<information>Doc 1 (Title: Orrel) The Orrel is a river 388 kilometres long.</information>
<answer>Tamsin</answer>
What is 12 + 30? The sum of twelve and thirty is 42, so the answer is <answer>42</answer>.
Solve for x: 3x + 4 = 19, so 3x = 15 and x = 5. The final answer is \\boxed{5}.
The quick brown fox jumps over the lazy dog; the five boxing wizards jump quickly.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024. Punctuation: , . ; : ! ? ( ) [ ] { } " ' - _ / =
"""


_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _train_tokenizer(vocab_size: int):
    """A byte-level BPE (GPT-2/Qwen style) trained on ``_CORPUS`` plus the ChatML special tokens."""
    # optional: the hf extra (torch, transformers)
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    # Qwen2's own pre-tokenizer, so that transformers' Qwen2Tokenizer (which AutoTokenizer builds
    # for a qwen2 config) and the raw tokenizer.json split text identically.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS.splitlines(keepends=True), trainer=trainer)
    tokenizer.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS]
    )
    return tokenizer


def make_tiny_checkpoint(
    path: str | Path,
    *,
    vocab_size: int = 512,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    chat_template: str = CHATML_TEMPLATE,
) -> Path:
    """Build and save a tiny random Qwen2 causal LM with a ChatML byte-level tokenizer.

    Args:
        path: Output folder (created if needed; existing files are overwritten).
        vocab_size: Target vocabulary size including the 3 special tokens (at least 259: the 256
            byte symbols plus the specials). The BPE may learn fewer merges than asked for when the
            built-in text runs out of pairs; the model's vocabulary matches the tokenizer exactly.
        hidden_size: Model width (divisible by ``num_heads``).
        num_layers: Number of decoder layers.
        num_heads: Attention heads (key/value heads are half of them, as in Qwen2's GQA).
        seed: Seed of the weight initialisation. The same arguments give byte-identical weights.
        chat_template: The tokenizer's chat template; ``CHATML_TOOLS_TEMPLATE`` renders tools
            and tool calls as Qwen2.5's does (the tool format).

    Returns:
        The folder, loadable with ``HFPolicy(path)`` or ``AutoModelForCausalLM.from_pretrained``.

    Raises:
        ValueError: If the sizes are inconsistent.
    """
    import torch  # optional: the hf extra (torch, transformers)
    from transformers import (  # optional: the hf extra (torch, transformers)
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be >= 259 (256 bytes + 3 specials), got {vocab_size}")
    if hidden_size % num_heads or num_heads % 2:
        raise ValueError(
            f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads}), "
            "and num_heads must be even"
        )
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)

    backend = _train_tokenizer(vocab_size)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=chat_template,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads // 2,
        max_position_embeddings=4096,
        # A wider init than the usual 0.02 gives peaked, varied next-token distributions, so
        # greedy decoding is not decided by rounding noise and samples differ visibly.
        initializer_range=0.2,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=ids[IM_END],
        pad_token_id=ids[END_OF_TEXT],
    )
    with torch.random.fork_rng(devices=[]):  # leaves the caller's global RNG untouched
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=[ids[IM_END], ids[END_OF_TEXT]], pad_token_id=ids[END_OF_TEXT]
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
