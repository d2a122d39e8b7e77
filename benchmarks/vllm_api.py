"""vLLM's API as passkt uses it, read from vLLM's own source without importing vLLM.

vLLM needs CUDA and cannot be installed on the CPU machines that run passkt's tests, so
``tests/agents/test_vllm_api.py`` checks passkt's calls against this file's output,
``tests/agents/vllm_api.json``: the fields of ``EngineArgs`` (``vllm.LLM`` forwards its
``**kwargs`` there) with the ``Literal`` values each accepts, ``LLM.__init__`` and the signatures
of ``LLM``'s public methods (its mixins' included), the fields of ``SamplingParams`` and
``LoRARequest`` (msgspec structs), the keys of ``TokensPrompt``, the fields of the OpenAI server's
``CompletionRequest`` (TRL's ``VLLMClient.generate`` posts there; unknown fields are dropped
silently), and the LoRA ranks ``max_lora_rank`` accepts. Everything is parsed with ``ast``.

A signature is a list in Python's own notation, without annotations: ``"x"`` (required),
``"x="`` (has a default), ``"/"``, ``"*"``, ``"*args"``, ``"**kwargs"``.

Usage (a release from PyPI, a wheel, an unpacked source tree, or a bare git directory)::

    python benchmarks/vllm_api.py --pypi 0.31.0
    python benchmarks/vllm_api.py vllm-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl
    python benchmarks/vllm_api.py path/to/vllm-checkout
    python benchmarks/vllm_api.py path/to/vllm.git --rev v0.31.0
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "tests" / "agents" / "vllm_api.json"
GENERATOR = "benchmarks/vllm_api.py"

ENGINE_ARGS = ("vllm.engine.arg_utils", "EngineArgs")
LLM = ("vllm.entrypoints.llm", "LLM")
SAMPLING_PARAMS = ("vllm.sampling_params", "SamplingParams")
LORA_REQUEST = ("vllm.lora.request", "LoRARequest")
TOKENS_PROMPT = ("vllm.inputs", "TokensPrompt")
COMPLETION_REQUEST = ("vllm.entrypoints.openai.protocol", "CompletionRequest")
"""Where each class is looked up first; a re-export is followed to the defining module, and a
class that moved is searched for under the same package (the one file that defines it: vLLM
0.34 keeps ``CompletionRequest`` in ``vllm/entrypoints/openai/completion/protocol.py``)."""

KEYS = (
    "generator",
    "vllm_version",
    "source",
    "engine_args",
    "engine_arg_literals",
    "llm_init",
    "llm_methods",
    "llm_attributes",
    "sampling_params",
    "lora_request",
    "tokens_prompt",
    "completion_request",
    "lora_ranks",
)
"""The keys of the JSON, in its order."""


class SourceError(RuntimeError):
    """The source lacks a file or class this script needs."""


# --------------------------------------------------------------------------- where the files are


class Source:
    """vLLM's ``.py`` files from a wheel, a source tree or a git directory."""

    def __init__(self, path: str | Path, rev: str = "HEAD") -> None:
        self.path = Path(path)
        self.rev = rev
        self._cache: dict[str, str | None] = {}
        if self.path.is_file() and zipfile.is_zipfile(self.path):
            self.kind = "wheel"
            self._zip = zipfile.ZipFile(self.path)
            self._names = set(self._zip.namelist())
        elif (self.path / "vllm").is_dir():
            self.kind = "tree"
        elif (self.path / "HEAD").is_file() and (self.path / "objects").is_dir():
            self.kind = "git"
        elif (self.path / ".git").exists():
            self.kind, self.path = "git", self.path / ".git"
        else:
            raise SourceError(f"{path}: neither a wheel, a tree with vllm/, nor a git directory")

    def read(self, name: str) -> str | None:
        """The text of ``name`` (a path such as ``vllm/config/lora.py``), None if absent."""
        if name not in self._cache:
            self._cache[name] = self._read(name)
        return self._cache[name]

    def _read(self, name: str) -> str | None:
        if self.kind == "wheel":
            return self._zip.read(name).decode("utf-8") if name in self._names else None
        if self.kind == "tree":
            file = self.path / name
            return file.read_text(encoding="utf-8") if file.is_file() else None
        done = subprocess.run(
            ["git", f"--git-dir={self.path}", "show", f"{self.rev}:{name}"],
            capture_output=True,
            text=True,
        )
        return done.stdout if done.returncode == 0 else None

    def files(self, prefix: str) -> list[str]:
        """The ``.py`` files under the folder ``prefix`` (e.g. ``vllm/entrypoints/``), sorted."""
        if self.kind == "wheel":
            names = self._names
        elif self.kind == "tree":
            names = {p.relative_to(self.path).as_posix() for p in (self.path / prefix).rglob("*")}
        else:
            listing = _git(self.path, "ls-tree", "-r", "--name-only", self.rev, "--", prefix)
            names = set((listing or "").split())
        return sorted(n for n in names if n.startswith(prefix) and n.endswith(".py"))

    def describe(self) -> dict[str, Any]:
        """What was read: the file or commit, and vLLM's version as its ``_version.py`` says."""
        out: dict[str, Any] = {"kind": self.kind}
        version = _version_file(self.read("vllm/_version.py") or "")
        if self.kind == "wheel":
            out["file"] = self.path.name
            out["sha256"] = hashlib.sha256(self.path.read_bytes()).hexdigest()
        elif self.kind == "git":
            out["commit"] = _git(self.path, "rev-parse", f"{self.rev}^{{commit}}")
            tag = _git(self.path, "describe", "--tags", "--exact-match", self.rev)
            if tag:
                out["tag"] = tag
        else:
            out["dir"] = self.path.name
            commit = _git(self.path / ".git", "rev-parse", "HEAD")
            if commit:
                out["commit"] = commit
        if version.get("commit"):
            out.setdefault("commit", version["commit"])
        out["version"] = version.get("version") or out.get("tag") or out.get("commit")
        if not out["version"]:
            raise SourceError("no vllm/_version.py, tag or commit names this source")
        return out


def _git(git_dir: Path, *args: str) -> str | None:
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def _version_file(text: str) -> dict[str, str]:
    """``__version__`` and ``__commit_id__`` of a generated ``vllm/_version.py``."""
    found: dict[str, str] = {}
    for node in ast.parse(text).body if text else []:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    if target.id == "__version__":
                        found["version"] = node.value.value
                    elif target.id == "__commit_id__":
                        found["commit"] = node.value.value.removeprefix("g")
    return found


# --------------------------------------------------------------------------- modules and classes


class Module:
    """One parsed module: its top-level names and where its imported names come from."""

    def __init__(self, name: str, tree: ast.Module, package: bool) -> None:
        self.name, self.tree, self.package = name, tree, package
        self.defs: dict[str, ast.AST] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}
        for node in tree.body:
            self._scan(node)

    def _scan(self, node: ast.AST) -> None:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            self.defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.defs[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.value is not None:
                self.defs[node.target.id] = node.value
        elif isinstance(node, ast.ImportFrom):
            base = self._absolute(node.module, node.level)
            for alias in node.names:
                self.imports[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.imports[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0],
                    None,
                )
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks and version switches
            for child in (*node.body, *node.orelse):
                self._scan(child)
        elif isinstance(node, ast.Try):
            for child in node.body:
                self._scan(child)
        elif type(node).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12)
            self.defs[node.name.id] = node.value  # type: ignore[attr-defined]

    def _absolute(self, module: str | None, level: int) -> str:
        if not level:
            return module or ""
        parts = self.name.split(".")
        if not self.package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (level - 1)]
        return ".".join([*parts, module] if module else parts)


class Reader:
    """Finds classes and names across vLLM's modules, following imports and re-exports."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._modules: dict[str, Module | None] = {}

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            path = name.replace(".", "/")
            text, package = self.source.read(f"{path}.py"), False
            if text is None:
                text, package = self.source.read(f"{path}/__init__.py"), True
            self._modules[name] = None if text is None else Module(name, ast.parse(text), package)
        return self._modules[name]

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[Module, ast.AST] | None:
        """The definition of ``name`` as seen from ``module`` (None: not in vLLM's source)."""
        found = self.module(module)
        if found is None or depth > 20:
            return None
        if name in found.defs:
            return found, found.defs[name]
        if name in found.imports:
            origin, attribute = found.imports[name]
            if attribute is None:
                return None
            return self.resolve(origin, attribute, depth + 1) or self._submodule(origin, attribute)
        lazy = self._lazy_export(found, name)
        return self.resolve(lazy, name, depth + 1) if lazy else None

    def _submodule(self, origin: str, attribute: str) -> tuple[Module, ast.AST] | None:
        module = self.module(f"{origin}.{attribute}")
        return (module, module.tree) if module else None

    def _lazy_export(self, module: Module, name: str) -> str | None:
        """A package that exports lazily (``__getattr__`` over a ``{name: "module"}`` table)."""
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if (
                        isinstance(key, ast.Constant)
                        and key.value == name
                        and isinstance(value, (ast.Constant, ast.Tuple))
                    ):
                        target = value.elts[0] if isinstance(value, ast.Tuple) else value
                        if isinstance(target, ast.Constant) and isinstance(target.value, str):
                            return module._absolute(target.value.lstrip("."), 0) or None
        return None

    def find_class(self, module: str, name: str) -> tuple[Module, ast.ClassDef]:
        found = self.resolve(module, name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            found = self._search_class(module, name)
        if found is None:
            raise SourceError(f"class {name} not found from {module}")
        return found  # type: ignore[return-value]

    def _search_class(self, module: str, name: str) -> tuple[Module, ast.ClassDef] | None:
        """Fallback: the one file under ``module``'s package that defines ``class name``."""
        prefix = module.rsplit(".", 1)[0].replace(".", "/") + "/"
        hits = []
        for path in self.source.files(prefix):
            text = self.source.read(path) or ""
            if f"class {name}(" in text or f"class {name}:" in text:
                dotted = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                found = self.resolve(dotted, name)
                if found and isinstance(found[1], ast.ClassDef):
                    hits.append(found)
        return hits[0] if len(hits) == 1 else None  # type: ignore[return-value]

    def bases(self, module: Module, cls: ast.ClassDef) -> list[tuple[Module, ast.ClassDef]]:
        """The class's vLLM base classes, nearest first (depth-first, as an MRO would list)."""
        out: list[tuple[Module, ast.ClassDef]] = []
        for base in cls.bases:
            if isinstance(base, ast.Name):
                found = self.resolve(module.name, base.id)
                if found and isinstance(found[1], ast.ClassDef):
                    out.append(found)  # type: ignore[arg-type]
                    out.extend(self.bases(*found))  # type: ignore[arg-type]
        seen, unique = set(), []
        for item in out:
            if id(item[1]) not in seen:
                seen.add(id(item[1]))
                unique.append(item)
        return unique

    # ------------------------------------------------------------------ literal values

    def literals(self, module: Module, node: ast.AST | None, depth: int = 0) -> list[Any]:
        """Every ``Literal`` value an annotation (or a type alias it names) admits."""
        if node is None or depth > 10:
            return []
        if isinstance(node, ast.Subscript):
            head = node.value
            head_name = head.id if isinstance(head, ast.Name) else getattr(head, "attr", None)
            if head_name == "Literal":
                items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                return [
                    v
                    for i in items
                    for v in (
                        [i.value]
                        if isinstance(i, ast.Constant)
                        else self.literals(module, i, depth + 1)  # Literal["auto", Other]
                    )
                ]
            if head_name in ("Optional", "Union", "Annotated"):
                items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                if head_name == "Annotated":
                    items = items[:1]
                return [v for i in items for v in self.literals(module, i, depth + 1)]
            return []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.literals(module, node.left, depth + 1) + self.literals(
                module, node.right, depth + 1
            )
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:  # a quoted annotation
                return self.literals(module, ast.parse(node.value, mode="eval").body, depth + 1)
            except SyntaxError:
                return []
        if isinstance(node, ast.Name):
            found = self.resolve(module.name, node.id)
            if found and not isinstance(found[1], (ast.ClassDef, ast.FunctionDef, ast.Module)):
                return self.literals(found[0], found[1], depth + 1)
        return []


# --------------------------------------------------------------------------- what is read


def _is_classvar(annotation: ast.AST) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return "ClassVar" in annotation.value  # a quoted annotation
    return any(
        (isinstance(n, ast.Name) and n.id == "ClassVar")
        or (isinstance(n, ast.Attribute) and n.attr == "ClassVar")
        for n in ast.walk(annotation)
    )


def _no_init(value: ast.AST | None) -> bool:
    """``field(init=False)`` (dataclasses)."""
    return isinstance(value, ast.Call) and any(
        k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in value.keywords
    )


def _kw_only(cls: ast.ClassDef) -> bool:
    """``kw_only=True`` as a class keyword (msgspec) or a ``@dataclass(kw_only=True)``."""
    keywords = list(cls.keywords)
    for decorator in cls.decorator_list:
        if isinstance(decorator, ast.Call):
            keywords += decorator.keywords
    return any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in keywords
    )


def class_fields(
    reader: Reader, module: Module, cls: ast.ClassDef, *, private: bool = True
) -> list[tuple[Module, ast.AnnAssign]]:
    """Annotated class attributes, base classes' first (dataclass / msgspec / pydantic order)."""
    chain = [(module, cls), *reader.bases(module, cls)]
    fields: dict[str, tuple[Module, ast.AnnAssign]] = {}
    for owner, node in reversed(chain):
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            name = item.target.id
            if _is_classvar(item.annotation) or _no_init(item.value):
                continue
            if not private and name.startswith("_"):
                continue
            fields.pop(name, None)
            fields[name] = (owner, item)
    return list(fields.values())


def struct_signature(fields: list[tuple[Module, ast.AnnAssign]], kw_only: bool) -> list[str]:
    """The ``__init__`` of a dataclass or msgspec struct with these fields."""
    params = [item.target.id + ("=" if item.value is not None else "") for _, item in fields]  # type: ignore[union-attr]
    return ["*", *params] if kw_only else params


def function_signature(node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[str]:
    """A ``def``'s parameters in signature notation (``self`` / ``cls`` left out)."""
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    params = [a.arg + ("=" if d else "") for a, d in zip(positional, defaults, strict=True)]
    only = len(args.posonlyargs)
    if method and not static and params:
        params, only = params[1:], max(only - 1, 0)
    out = [*params[:only], "/", *params[only:]] if only else params
    if args.vararg:
        out.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        out.append("*")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(arg.arg + ("=" if default is not None else ""))
    if args.kwarg:
        out.append("**" + args.kwarg.arg)
    return out


def _is_overload(node: ast.AST) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id == "overload")
        or (isinstance(d, ast.Attribute) and d.attr == "overload")
        for d in getattr(node, "decorator_list", [])
    )


def class_methods(reader: Reader, module: Module, cls: ast.ClassDef) -> dict[str, list[str]]:
    """Public methods (the class's own over its bases'; properties left out) and ``__init__``."""
    methods: dict[str, list[str]] = {}
    for _, node in reversed([(module, cls), *reader.bases(module, cls)]):
        for item in node.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if _is_overload(item) or (item.name.startswith("_") and item.name != "__init__"):
                continue
            if any(
                isinstance(d, ast.Name) and d.id in ("property", "cached_property")
                for d in item.decorator_list
            ):
                continue
            methods[item.name] = function_signature(item, method=True)
    return methods


def instance_attributes(cls: ast.ClassDef) -> list[str]:
    """Public ``self.X = ...`` names set in ``__init__`` and the class's properties."""
    names: set[str] = set()
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            for node in ast.walk(item):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else []
                )
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        names.add(target.attr)
        elif isinstance(item, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id in ("property", "cached_property")
            for d in item.decorator_list
        ):
            names.add(item.name)
    return sorted(n for n in names if not n.startswith("_"))


def build(source: Source) -> dict[str, Any]:
    """Everything ``tests/agents/test_vllm_api.py`` checks, read from ``source``."""
    reader = Reader(source)
    described = source.describe()

    module, engine_args = reader.find_class(*ENGINE_ARGS)
    engine_fields = class_fields(reader, module, engine_args)
    literals = {}
    for owner, item in engine_fields:
        values = reader.literals(owner, item.annotation)
        if values:
            literals[item.target.id] = sorted(set(values), key=lambda v: (str(type(v)), v))  # type: ignore[union-attr]

    module, llm = reader.find_class(*LLM)
    methods = class_methods(reader, module, llm)
    init = methods.pop("__init__")

    module, sampling = reader.find_class(*SAMPLING_PARAMS)
    module_lora, lora = reader.find_class(*LORA_REQUEST)
    module_prompt, prompt = reader.find_class(*TOKENS_PROMPT)
    module_request, request = reader.find_class(*COMPLETION_REQUEST)

    ranks = literals.get("max_lora_rank")
    if not ranks:
        raise SourceError("EngineArgs.max_lora_rank names no Literal of ranks")
    return {
        "generator": GENERATOR,
        "vllm_version": described["version"],
        "source": described,
        "engine_args": struct_signature(engine_fields, _kw_only(engine_args)),
        "engine_arg_literals": literals,
        "llm_init": init,
        "llm_methods": dict(sorted(methods.items())),
        "llm_attributes": instance_attributes(llm),
        "sampling_params": struct_signature(
            class_fields(reader, module, sampling), _kw_only(sampling)
        ),
        "lora_request": struct_signature(class_fields(reader, module_lora, lora), _kw_only(lora)),
        "tokens_prompt": [
            item.target.id  # type: ignore[union-attr]
            for _, item in class_fields(reader, module_prompt, prompt)
        ],
        "completion_request": [
            item.target.id  # type: ignore[union-attr]
            for _, item in class_fields(reader, module_request, request, private=False)
        ],
        "lora_ranks": ranks,
    }


def write(api: dict[str, Any], output: Path) -> None:
    """One key a line, lists on one line each: small diffs when vLLM changes."""
    lines = [
        f"  {json.dumps(key)}: {json.dumps(api[key], separators=(', ', ': '))}" for key in KEYS
    ]
    output.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", help="a vLLM wheel, source tree or git directory")
    parser.add_argument("--pypi", metavar="VERSION", help="download this release's wheel (pip)")
    parser.add_argument("--rev", default="HEAD", help="the commit or tag of a git directory")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if (args.source is None) == (args.pypi is None):
        parser.error("give a source or --pypi VERSION")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.source
        if args.pypi:
            pip = [sys.executable, "-m", "pip", "download", f"vllm=={args.pypi}", "--no-deps"]
            subprocess.run([*pip, "--only-binary", ":all:", "-q", "-d", tmp], check=True)
            path = next(Path(tmp).glob("vllm-*.whl"))
        api = build(Source(path, rev=args.rev))
    write(api, args.output)
    print(
        f"{args.output}: vLLM {api['vllm_version']} ({api['source']['kind']}); "
        f"{len(api['engine_args'])} engine args, {len(api['llm_methods'])} LLM methods, "
        f"{len(api['sampling_params'])} sampling fields"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
