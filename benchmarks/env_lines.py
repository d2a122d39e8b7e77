"""Count the lines a third-party env needs: each class of tests/third_party/kv_lookup.py.

Counts code lines (no blank lines, comments or docstrings) of each env class and its
``gym.register`` call, and of the game code the two share (imports, keys, action regex, values).

    python benchmarks/env_lines.py
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

MODULE = Path(__file__).resolve().parents[1] / "tests" / "third_party" / "kv_lookup.py"


def code_lines(source: str) -> set[int]:
    """Line numbers holding code (not blank, comment or docstring)."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - docstrings


def main() -> None:
    source = MODULE.read_text()
    tree = ast.parse(source)
    lines = code_lines(source)
    parts: dict[str, set[int]] = {"shared game code": set(), "KVLookupMinimal": set()}
    parts["KVLookup"] = set()
    for node in tree.body:
        span = set(range(node.lineno, node.end_lineno + 1)) & lines
        if isinstance(node, ast.ClassDef):
            parts[node.name] |= span
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "gym.register"
        ):
            target = ast.unparse(node.value.keywords[0].value)
            parts[target] |= span
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "PROMPT":
            parts["KVLookup"] |= span
        else:
            parts["shared game code"] |= span
    print(f"code lines of {MODULE.relative_to(MODULE.parents[2])} (class + register call):")
    for name, span in parts.items():
        print(f"  {name:18s} {len(span):3d}")
    print(f"  {'whole module':18s} {len(lines):3d}")


if __name__ == "__main__":
    main()
