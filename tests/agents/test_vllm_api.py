"""Every vLLM call passkt makes has the shape of vLLM's real API, as read from vLLM's source.

vLLM needs CUDA and cannot be installed here, so ``benchmarks/vllm_api.py`` reads a named vLLM
release's source with ``ast`` and writes ``vllm_api.json`` beside this file (the signatures of
``LLM`` and its methods, the fields of ``EngineArgs``, ``SamplingParams``, ``LoRARequest``,
``TokensPrompt`` and the server's ``CompletionRequest``, the ``Literal`` values of the engine
arguments and the LoRA ranks). The tests put a strict stand-in ``vllm`` module, built from that
file, in ``sys.modules`` and run passkt's own code paths against it: every ``vllm.LLM(...)``,
``SamplingParams(...)`` and ``LoRARequest(...)`` call is bound to the release's signature, every
``**kwargs`` name forwarded to ``EngineArgs`` must be one of its fields (with a value its
``Literal`` admits), and an engine method or attribute the release lacks fails the test.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from passkt.agents.policy import SamplingParams
from passkt.agents.train.trl_vllm import ColocatedEnginePolicy, server_generate_kwargs
from passkt.agents.train.vllm_sync import (
    VLLM_LORA_RANKS,
    VLLMTrainingPolicy,
    engine_placement,
    vllm_lora_rank,
)
from passkt.agents.vllm_policy import VLLMPolicy, to_vllm_sampling_kwargs

ROOT = Path(__file__).resolve().parents[2]
API_FILE = Path(__file__).with_name("vllm_api.json")
API: dict[str, Any] = json.loads(API_FILE.read_text(encoding="utf-8"))
RELEASE = f"vLLM {API['vllm_version']}"


def _script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_api", ROOT / API["generator"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- signatures


def signature(spec: list[str]) -> inspect.Signature:
    """An ``inspect.Signature`` from the file's notation (``x``, ``x=``, ``/``, ``*``, ...)."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if "/" in spec:
        kind = inspect.Parameter.POSITIONAL_ONLY
    params = []
    for item in spec:
        if item == "/":
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        elif item == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
        elif item.startswith("**"):
            params.append(inspect.Parameter(item[2:], inspect.Parameter.VAR_KEYWORD))
        elif item.startswith("*"):
            params.append(inspect.Parameter(item[1:], inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
        else:
            default = None if item.endswith("=") else inspect.Parameter.empty
            params.append(inspect.Parameter(item.rstrip("="), kind, default=default))
    return inspect.Signature(params)


def names(spec: list[str]) -> set[str]:
    return {item.rstrip("=") for item in spec if item not in ("/", "*") and item[0] != "*"}


ENGINE_ARGS = names(API["engine_args"])
SAMPLING_FIELDS = names(API["sampling_params"])


def bind(what: str, spec: list[str], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by name, or an AssertionError naming the release."""
    try:
        return dict(signature(spec).bind(*args, **kwargs).arguments)
    except TypeError as e:
        raise AssertionError(f"{what}: not a call {RELEASE} accepts: {e}") from None


def check_engine_values(options: dict[str, Any]) -> None:
    """Values of engine arguments typed as a ``Literal`` in ``EngineArgs`` are among them."""
    for name, value in options.items():
        allowed = API["engine_arg_literals"].get(name)
        if allowed and isinstance(value, (str, int)) and not isinstance(value, bool):
            assert value in allowed, f"{name}={value!r}: {RELEASE} accepts {allowed}"


# --------------------------------------------------------------------------- the stand-in vllm


class Recorder(list):
    """``(what, arguments)`` of every call passkt made into the stand-in module."""

    def of(self, what: str) -> list[dict[str, Any]]:
        return [arguments for name, arguments in self if name == what]


class StrictSamplingParams:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.arguments = bind("vllm.SamplingParams", API["sampling_params"], args, kwargs)
        private = [name for name in self.arguments if name.startswith("_")]
        assert not private, f"vllm.SamplingParams: internal fields set: {private}"
        self.n = self.arguments.get("n", 1)


class StrictLoRARequest:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.arguments = bind("LoRARequest", API["lora_request"], args, kwargs)
        assert self.arguments["lora_int_id"] >= 1, "vLLM refuses lora_int_id < 1"
        assert self.arguments.get("lora_path"), "vLLM refuses an empty lora_path"


class Tokenizer:
    chat_template = None
    pad_token_id = 0
    eos_token_id = 2

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


class LoadsWeights:
    def __init__(self) -> None:
        self.loaded: list[str] = []

    def load_weights(self, weights: list[tuple[str, Any]]) -> None:
        self.loaded += [name for name, _ in weights]


def strict_module(calls: Recorder) -> dict[str, types.ModuleType]:
    """``vllm``, ``vllm.lora`` and ``vllm.lora.request`` with the release's call shapes."""
    init = API["llm_init"]
    var_kw = next((item[2:] for item in init if item.startswith("**")), None)

    class StrictLLM:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            arguments = bind("vllm.LLM", init, args, kwargs)
            forwarded = arguments.pop(var_kw, {}) if var_kw else {}
            unknown = sorted(set(forwarded) - ENGINE_ARGS)
            assert not unknown, f"vllm.LLM(**{unknown}): no such EngineArgs field in {RELEASE}"
            options = {**arguments, **forwarded}
            check_engine_values(options)
            calls.append(("LLM", options))
            self._model = LoadsWeights()

        def __getattr__(self, name: str) -> Any:
            if name.startswith("__") or name not in API["llm_methods"]:
                if name in API["llm_attributes"]:
                    return None
                raise AttributeError(f"vllm.LLM of {RELEASE} has no attribute {name!r}")
            spec = API["llm_methods"][name]

            def method(*args: Any, **kwargs: Any) -> Any:
                arguments = bind(f"LLM.{name}", spec, args, kwargs)
                calls.append((name, arguments))
                return getattr(self, f"_{name}", lambda **_: None)(**arguments)

            return method

        def _get_tokenizer(self) -> Tokenizer:
            return Tokenizer()

        def _apply_model(self, func: Any) -> list[Any]:
            return [func(self._model)]

        def _generate(self, prompts: list, sampling_params: Any = None, **kwargs: Any) -> list:
            fields = set(API["tokens_prompt"])
            for prompt in prompts:
                assert set(prompt) <= fields, f"{sorted(prompt)}: TokensPrompt has {fields}"
            request = kwargs.get("lora_request")
            assert request is None or isinstance(request, StrictLoRARequest)
            params = sampling_params if isinstance(sampling_params, list) else [sampling_params]
            assert all(isinstance(p, StrictSamplingParams) for p in params)
            outputs = []
            for prompt, param in zip(prompts, params, strict=True):
                ids = [len(prompt["prompt_token_ids"]), 3]
                lps = [{i: types.SimpleNamespace(logprob=-0.5)} for i in ids]
                completions = [
                    types.SimpleNamespace(
                        index=j, text="", token_ids=ids, logprobs=lps, finish_reason="length"
                    )
                    for j in range(param.n)
                ]
                outputs.append(types.SimpleNamespace(outputs=completions))
            return outputs

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = StrictLLM, StrictSamplingParams  # type: ignore[attr-defined]

    def sampling(*args: Any, **kwargs: Any) -> StrictSamplingParams:
        made = StrictSamplingParams(*args, **kwargs)
        calls.append(("SamplingParams", made.arguments))
        return made

    def lora(*args: Any, **kwargs: Any) -> StrictLoRARequest:
        made = StrictLoRARequest(*args, **kwargs)
        calls.append(("LoRARequest", made.arguments))
        return made

    vllm.SamplingParams = sampling  # type: ignore[attr-defined]
    lora_package = types.ModuleType("vllm.lora")
    lora_request = types.ModuleType("vllm.lora.request")
    lora_request.LoRARequest = lora  # type: ignore[attr-defined]
    lora_package.request = lora_request  # type: ignore[attr-defined]
    vllm.lora = lora_package  # type: ignore[attr-defined]
    return {"vllm": vllm, "vllm.lora": lora_package, "vllm.lora.request": lora_request}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """The strict stand-in installed as ``vllm``; what passkt called on it."""
    recorder = Recorder()
    for name, module in strict_module(recorder).items():
        monkeypatch.setitem(sys.modules, name, module)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "")  # unset for the engine; restored after the test
    return recorder


class Parameter:
    def detach(self) -> Parameter:
        return self


class TrainedModel:
    """What ``VLLMTrainingPolicy.sync`` touches on the trained model (peft + DDP names)."""

    def named_parameters(self) -> list[tuple[str, Parameter]]:
        return [
            ("module.model.norm.weight", Parameter()),
            ("base_model.model.model.layers.0.q_proj.base_layer.weight", Parameter()),
            ("base_model.model.model.layers.0.q_proj.lora_A.default.weight", Parameter()),
        ]

    def save_pretrained(self, folder: str) -> None:
        Path(folder).mkdir(parents=True)


ROUNDS = [
    SamplingParams(n=2, seed=3, temperature=0.7, top_p=0.9, max_new_tokens=9),
    SamplingParams(top_k=20, seeds=(4, 5)),
]


# --------------------------------------------------------------------------- passkt's calls


@pytest.mark.parametrize("logprobs_mode", ["processed_logprobs", None])
def test_the_eval_engine_and_its_requests_are_calls_vllm_accepts(calls, logprobs_mode):
    policy = VLLMPolicy("org/model", max_model_len=4096, logprobs_mode=logprobs_mode)
    for params in ROUNDS:
        assert len(policy.generate_ids([[1, 2], [3]], params)) == 2 * params.n
    (options,) = calls.of("LLM")
    assert options["model"] == "org/model"
    assert options.get("logprobs_mode") == logprobs_mode
    assert len(calls.of("SamplingParams")) == 4 and len(calls.of("generate")) == 2
    assert [name for name, _ in calls if name not in ("SamplingParams", "generate")] == [
        "LLM",
        "get_tokenizer",
    ]


def test_the_training_engine_with_lora_and_its_adapters_are_calls_vllm_accepts(calls, tmp_path):
    policy = VLLMTrainingPolicy("org/model", lora_rank=12, output_dir=tmp_path, world_size=2)
    (options,) = calls.of("LLM")
    assert options["distributed_executor_backend"] == "external_launcher"
    assert (options["enable_lora"], options["max_lora_rank"], options["max_loras"]) == (
        True,
        16,
        1,
    )
    for step in (0, 1):
        policy.sync(TrainedModel(), step)
        policy.generate_ids([[1, 2]], ROUNDS[0])
    requests = calls.of("LoRARequest")
    assert [r["lora_int_id"] for r in requests] == [1, 2]
    assert [g["lora_request"].arguments for g in calls.of("generate")] == requests


def test_the_full_weight_sync_uses_engine_methods_vllm_has(calls, tmp_path):
    policy = VLLMTrainingPolicy("org/model", output_dir=tmp_path)
    # one process joins a launcher of one, so apply_model's function is never pickled
    assert calls.of("LLM")[0]["distributed_executor_backend"] == "external_launcher"
    assert os.environ["WORLD_SIZE"] == "1" and int(os.environ["MASTER_PORT"]) > 0
    policy.sync(TrainedModel(), step=0)
    assert [name for name, _ in calls][2:] == ["apply_model", "apply_model", "reset_prefix_cache"]
    assert policy.llm._model.loaded == ["model.norm.weight", "model.layers.0.q_proj.weight"]


def test_trls_colocated_engine_gets_the_same_requests(calls):
    import vllm  # the stand-in

    policy = ColocatedEnginePolicy(vllm.LLM("org/model"), Tokenizer())
    assert len(policy.generate_ids([[1], [2, 3]], ROUNDS[1])) == 2
    assert [name for name, _ in calls] == ["LLM", "SamplingParams", "SamplingParams", "generate"]


def test_the_pure_builders_use_vllm_names():
    for params in ROUNDS:
        for logprobs in (True, False):
            kwargs = to_vllm_sampling_kwargs(params, logprobs=logprobs)
            assert set(kwargs) <= SAMPLING_FIELDS, set(kwargs) - SAMPLING_FIELDS
    for world_size in (1, 2, 8):
        placement = engine_placement(world_size)
        assert set(placement) <= ENGINE_ARGS
        check_engine_values(placement)


def test_passkts_lora_ranks_are_vllms():
    assert list(VLLM_LORA_RANKS) == API["lora_ranks"] == API["engine_arg_literals"]["max_lora_rank"]
    assert {vllm_lora_rank(r) for r in range(1, VLLM_LORA_RANKS[-1] + 1)} == set(VLLM_LORA_RANKS)


def test_server_requests_are_fields_of_trls_client_and_of_vllms_completion_request():
    """TRL's ``VLLMClient.generate`` posts its arguments and ``generation_kwargs`` to vLLM's
    ``/v1/completions``, whose ``CompletionRequest`` drops unknown fields without an error."""
    pytest.importorskip("trl", reason="the TRL route needs the trl extra")
    from trl.generation.vllm_client import VLLMClient

    fields = set(API["completion_request"])
    for params in ROUNDS:
        kwargs = server_generate_kwargs(params)
        inspect.signature(VLLMClient.generate).bind(None, prompts=[[1]], **kwargs)
        sent = (set(kwargs) - {"generation_kwargs"}) | set(kwargs["generation_kwargs"])
        assert sent <= fields, f"{sorted(sent - fields)}: not fields of {RELEASE}'s request"


def test_the_trl_vllm_options_passkt_reads_are_grpo_config_fields():
    pytest.importorskip("trl", reason="the TRL route needs the trl extra")
    import dataclasses

    import trl

    from passkt.agents.train.trl import refuse_unsupported_vllm

    class Reads(dict):
        """``trl_args``'s result with ``use_vllm=True``, noting every key read from it."""

        def __init__(self, **items: Any) -> None:
            super().__init__(items)
            self.read: set[str] = set()

        def get(self, key: str, default: Any = None) -> Any:
            self.read.add(key)
            return super().get(key, default)

    args = Reads(use_vllm=True)
    refuse_unsupported_vllm(args)
    fields = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    assert args.read >= {"use_vllm", "vllm_mode"} and args.read <= set(fields), args.read
    assert fields["vllm_mode"].default == "colocate"  # the default refuse_unsupported_vllm assumes


# --------------------------------------------------------------------------- the checks


def test_the_stand_in_refuses_what_the_release_lacks(calls):
    import vllm  # the stand-in
    from vllm.lora.request import LoRARequest

    with pytest.raises(AssertionError, match="SamplingParams"):
        vllm.SamplingParams(max_new_tokens=3)  # passkt's name, not vLLM's
    with pytest.raises(AssertionError, match="EngineArgs"):
        vllm.LLM("org/model", lora_rank=8)
    with pytest.raises(AssertionError, match="external_launcher"):
        vllm.LLM("org/model", distributed_executor_backend="torchrun")
    with pytest.raises(AssertionError, match="max_lora_rank=12"):
        vllm.LLM("org/model", enable_lora=True, max_lora_rank=12)
    with pytest.raises(AssertionError, match="LoRARequest"):
        LoRARequest("adapter")
    llm = vllm.LLM("org/model")
    with pytest.raises(AttributeError, match="driver_worker"):
        _ = llm.driver_worker
    with pytest.raises(AssertionError, match=r"LLM\.generate"):
        llm.generate([{"prompt_token_ids": [1]}], sampling_param=None)


def test_the_api_file_names_its_release_and_was_written_by_the_script():
    script = _script()
    assert list(API) == list(script.KEYS)
    assert API["generator"] == script.GENERATOR and (ROOT / API["generator"]).is_file()
    source = API["source"]
    assert API["vllm_version"] == source["version"] and source["kind"] in ("wheel", "tree", "git")
    assert source.get("sha256") or source.get("commit")
    for key in script.KEYS:
        assert API[key], f"{key} is empty"
    for method in ("generate", "apply_model", "collective_rpc", "reset_prefix_cache"):
        assert method in API["llm_methods"]


TINY_TREE = {
    "vllm/_version.py": "__version__ = version = '9.9.9'\n__commit_id__ = 'gabc1234'\n",
    "vllm/config/__init__.py": "from vllm.config.lora import MaxLoRARanks\n",
    "vllm/config/lora.py": "from typing import Literal\nMaxLoRARanks = Literal[1, 8, 16]\n"
    "Mode = Literal['a', Other]\nOther = Literal['b']\n",
    "vllm/engine/arg_utils.py": "from dataclasses import dataclass, field\n"
    "from typing import ClassVar\nfrom vllm.config import MaxLoRARanks\n"
    "from vllm.config.lora import Mode\n"
    "@dataclass\nclass EngineArgs:\n    model: str = 'm'\n    max_lora_rank: MaxLoRARanks = 16\n"
    "    mode: str | Mode | None = None\n    cache: ClassVar[int] = 0\n"
    "    hidden: int = field(default=0, init=False)\n",
    "vllm/entrypoints/common.py": "class Mixin:\n    def collective_rpc(self, method, timeout=None,"
    " *, args=()):\n        pass\n    def _private(self):\n        pass\n",
    "vllm/entrypoints/llm.py": "from typing import overload\nfrom .common import Mixin\n"
    "class LLM(Mixin):\n    def __init__(self, model, *, seed=0, **kwargs):\n"
    "        self.llm_engine = None\n    @overload\n    def generate(self, a): ...\n"
    "    def generate(self, prompts, sampling_params=None, /, *, use_tqdm=True):\n        pass\n"
    "    @property\n    def name(self):\n        return 1\n",
    "vllm/sampling_params.py": "import msgspec\nclass SamplingParams(msgspec.Struct, kw_only=True):"
    "\n    n: int = 1\n    _eos: int | None = None\n",
    "vllm/lora/request.py": "import msgspec\nclass LoRARequest(msgspec.Struct):\n"
    "    lora_name: str\n    lora_int_id: int\n    lora_path: str = ''\n",
    "vllm/inputs/__init__.py": "from vllm.inputs.llm import TokensPrompt\n",
    "vllm/inputs/llm.py": "from typing import TypedDict\nclass _Options(TypedDict):\n"
    "    cache_salt: str\nclass TokensPrompt(_Options):\n    prompt_token_ids: list[int]\n",
    "vllm/entrypoints/openai/completion/protocol.py": "from pydantic import BaseModel\n"
    "class Base(BaseModel):\n    field_names: 'ClassVar[set]' = None\n"
    "class CompletionRequest(Base):\n    prompt: str\n    _private: int = 0\n    n: int = 1\n",
}


def _tiny_source(kind: str, folder: Path) -> tuple[Path, str]:
    """The tiny tree as a source tree, a wheel (zip) or a bare git directory, and its rev."""
    tree = folder / "tree"
    for name, text in TINY_TREE.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    if kind == "tree":
        return tree, "HEAD"
    if kind == "wheel":
        wheel = folder / "vllm-9.9.9-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            for name, text in TINY_TREE.items():
                archive.writestr(name, text)
        return wheel, "HEAD"
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    steps = (["init", "-q"], ["add", "."], ["commit", "-qm", "t"], ["tag", "-am", "t", "v9.9.9"])
    for command in steps:
        subprocess.run([*git, *command], check=True, capture_output=True)
    return tree / ".git", "v9.9.9"


@pytest.mark.parametrize("kind", ["tree", "wheel", "git"])
def test_the_script_reads_classes_fields_and_literals_from_a_source(tmp_path, kind):
    script = _script()
    path, rev = _tiny_source(kind, tmp_path)
    api = script.build(script.Source(path, rev=rev))
    assert api["vllm_version"] == "9.9.9" and api["source"]["kind"] == kind
    if kind == "git":  # the commit read, not the one _version.py was generated at
        assert api["source"]["tag"] == "v9.9.9" and len(api["source"]["commit"]) == 40
    else:
        assert api["source"]["commit"] == "abc1234"
    if kind == "wheel":
        assert len(api["source"]["sha256"]) == 64
    assert api["engine_args"] == ["model=", "max_lora_rank=", "mode="]
    assert api["engine_arg_literals"] == {"max_lora_rank": [1, 8, 16], "mode": ["a", "b"]}
    assert api["lora_ranks"] == [1, 8, 16]
    assert api["llm_init"] == ["model", "*", "seed=", "**kwargs"]
    assert api["llm_methods"] == {
        "collective_rpc": ["method", "timeout=", "*", "args="],
        "generate": ["prompts", "sampling_params=", "/", "*", "use_tqdm="],
    }
    assert api["llm_attributes"] == ["llm_engine", "name"]
    assert api["sampling_params"] == ["*", "n=", "_eos="]
    assert api["lora_request"] == ["lora_name", "lora_int_id", "lora_path="]
    assert api["tokens_prompt"] == ["cache_salt", "prompt_token_ids"]
    assert api["completion_request"] == ["prompt", "n"]
    written = tmp_path / "api.json"
    script.write(api, written)
    assert json.loads(written.read_text()) == api


@pytest.mark.skipif(
    not os.environ.get("PASSKT_VLLM_SOURCE"),
    reason="set PASSKT_VLLM_SOURCE to the vLLM wheel, tree or git directory the file was read from",
)
def test_the_api_file_is_what_the_script_reads_from_its_source():
    script = _script()
    assert script.build(script.Source(os.environ["PASSKT_VLLM_SOURCE"])) == API
