"""Generate (or check) the generated parts of docs/sdk.md: reference table, error tree, MCP options.

The table lists every public name of undo_core that an agent developer imports (the
``__all__`` of each module in ``MODULES``), with its kind, its signature and the first line
of its docstring; the error tree is drawn from the exception classes themselves. Both sit
between ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->`` markers, so the hand-written
prose around them is never touched.

    python scripts/sdk_reference.py --check   # exit 1 if docs/sdk.md is stale (tests run this)
    python scripts/sdk_reference.py --write   # rewrite the generated parts in place
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "sdk.md"

MODULES = (
    "undo_core",
    "undo_core.remote",
    "undo_core.testing",
    "undo_core.tracing",
    "undo_core.adapters",
    "undo_core.adapters.pydantic_ai",
    "undo_core.adapters.openai_agents",
    "undo_core.adapters.langchain",
    "undo_core.mcp.server",
)
"""Every module whose ``__all__`` is the public API documented in docs/sdk.md."""


def public_names() -> dict[str, list[str]]:
    """``{module: [names in its __all__]}`` for every module of ``MODULES``."""
    return {m: list(importlib.import_module(m).__all__) for m in MODULES}


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return "exception"
        return "class"
    if inspect.iscoroutinefunction(obj):
        return "async function"
    if inspect.isfunction(obj):
        return "function"
    return "constant"


def _signature(name: str, obj: Any) -> str:
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return "values: " + ", ".join(f"`{m.value}`" for m in obj)
    if not callable(obj) or _kind(obj) == "exception":
        return ""
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    sig = re.sub(r"ForwardRef\('([^']*)'\)", r"\1", re.sub(r"\s+", " ", sig))
    if len(sig) > 90:
        sig = sig[:87] + "…"
    return f"`{name}{sig}`".replace("|", "\\|")


def _first_line(obj: Any) -> str:
    if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj)):
        return ""
    own = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    doc = inspect.cleandoc(own) if isinstance(own, str) else ""
    if re.match(r"^\w+\(", doc):  # a dataclass's or NamedTuple's generated signature
        doc = ""
    line = doc.strip().split("\n\n")[0].replace("\n", " ")
    return line.replace("|", "\\|")


CONSTANTS = {
    "__version__": "The version of undo-core (and of sagaboard, released together).",
    "ApprovalPolicy": "A saga's ``approval_policy``: ``(step) -> bool``: needs approval?",
    "AuditSink": "The type of an audit sink: ``(AuditRecord) -> None``.",
    "CompensationFailureMode": '``on_compensation_failure``: ``"continue"`` or ``"halt"``.',
    "Listener": "The type of a saga listener: ``(SagaEvent) -> None``.",
    "SAGA_TRANSITIONS": "The saga state table: ``{status: statuses it may move to}``.",
    "STEP_TRANSITIONS": "The step state table: ``{state: states it may move to}``.",
    "ATTRIBUTES": "Every span attribute undo_core sets, and what it holds.",
    "METADATA_KEY": "The step metadata key holding its span's W3C traceparent.",
    "TOOL_CALL_ID": "The ``step.metadata`` key holding the framework's tool call id.",
    "RunResult": 'What ``run`` returns: ``{"status": "completed", "saga_id", "state"}``.',
    "AttemptOutcome": "How one undo attempt ended.",
    "DecisionAction": "What a gate's ``Decision`` says to do.",
    "EventKind": "Whether a ``SagaEvent`` is the saga's own transition or a step's.",
    "DEFAULT_DB": "Standalone ``undo-mcp``'s default SQLite file (``--db``, or ``$UNDO_MCP_DB``).",
}
"""One line for each public constant or type alias (they carry no docstring of their own)."""


def _constant(name: str, obj: Any) -> str:
    text = repr(obj)
    if len(text) > 60:
        text = f"{type(obj).__name__} of {len(obj)}" if hasattr(obj, "__len__") else text[:57] + "…"
    return f"`{name} = {text}`".replace("|", "\\|")


def reference() -> str:
    """The reference table of every public name, one table per module."""
    out: list[str] = []
    for module, names in public_names().items():
        mod = importlib.import_module(module)
        out += [
            f"#### `{module}`",
            "",
            "| name | kind | signature | what it is |",
            "|---|---|---|---|",
        ]
        for name in sorted(names, key=str.lower):
            obj = getattr(mod, name)
            kind = _kind(obj)
            sig = _signature(name, obj) if kind != "constant" else _constant(name, obj)
            what = _first_line(obj) if kind != "constant" else ""
            what = what or CONSTANTS.get(name, "")
            out.append(f"| `{name}` | {kind} | {sig} | {what} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def error_classes() -> list[type[BaseException]]:
    """Every exception class exported by ``MODULES``, each once."""
    seen: dict[str, type[BaseException]] = {}
    for module, names in public_names().items():
        mod = importlib.import_module(module)
        for name in names:
            obj = getattr(mod, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                seen.setdefault(obj.__qualname__, obj)
    return list(seen.values())


def _home(cls: type) -> str:
    return "undo_core.remote" if cls.__module__.startswith("undo_core.remote") else "undo_core"


def error_tree() -> str:
    """The exception hierarchy under ``UndoCoreError`` as a tree, with each class's doc line."""
    from undo_core import UndoCoreError

    classes = error_classes()
    rows: list[tuple[str, str]] = []

    def walk(cls: type[BaseException], prefix: str, last: bool, top: bool) -> None:
        builtins = [
            b.__name__ for b in cls.__bases__ if b.__module__ == "builtins" and b is not Exception
        ]
        also = f" (also {', '.join(builtins)})" if builtins else ""
        label = f"{cls.__name__}{also}"
        rows.append(
            ((prefix + ("" if top else "└── " if last else "├── ")) + label, _first_line(cls))
        )
        kids = sorted((c for c in classes if cls in c.__bases__), key=lambda c: c.__name__)
        child_prefix = prefix + ("" if top else "    " if last else "│   ")
        for i, kid in enumerate(kids):
            walk(kid, child_prefix, i == len(kids) - 1, False)

    walk(UndoCoreError, "", True, True)
    width = max(len(r[0]) for r in rows) + 2
    lines = [f"{tree.ljust(width)}{doc}".rstrip() for tree, doc in rows]
    homes = ", ".join(f"`{c.__name__}`" for c in classes if _home(c) == "undo_core.remote")
    return (
        "```text\n"
        + "\n".join(lines)
        + "\n```\n\n"
        + f"All import from `undo_core`, except {homes} (from `undo_core.remote`).\n"
    )


def mcp_options() -> str:
    """The options of ``undo-mcp``, read from its argument parser (so a new one shows up)."""
    from undo_core.mcp import server

    rows = ["| option | meaning |", "|---|---|"]
    for action in server._parser()._actions:
        if not action.option_strings or "--help" in action.option_strings:
            continue
        choices = "{" + ",".join(action.choices) + "}" if action.choices else None
        metavar = action.metavar or choices or action.dest.upper()
        flags = ", ".join(f"`{flag} {metavar}`" for flag in action.option_strings)
        default = server.DEFAULT_DB if action.dest == "db" else action.default  # not $UNDO_MCP_DB
        text = (action.help or "").replace("%(default)s", str(default))
        rows.append(f"| {flags} | {text.replace('|', chr(92) + '|')} |")
    return "\n".join(rows) + "\n"


SECTIONS = {"reference": reference, "error-tree": error_tree, "mcp-options": mcp_options}


def render(text: str) -> str:
    """``text`` with every generated section replaced by its fresh content."""
    for name, make in SECTIONS.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(
                f"{DOC}: missing <!-- generated:{name} --> ... <!-- /generated:{name} -->"
            )
        body = make()
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--write", action="store_true", help="rewrite the generated parts of docs/sdk.md"
    )
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if docs/sdk.md's generated parts are stale"
    )
    parser.add_argument("--doc", type=Path, default=DOC, help="the file (default %(default)s)")
    args = parser.parse_args(argv)
    current = args.doc.read_text(encoding="utf-8")
    fresh = render(current)
    if args.write:
        if fresh != current:
            args.doc.write_text(fresh, encoding="utf-8")
        print(f"{args.doc}: generated parts up to date")
        return 0
    if fresh != current:
        print(f"{args.doc} is stale: run python scripts/sdk_reference.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
