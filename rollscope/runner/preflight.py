"""What ``rollscope run`` checks before it imports verl, torch or a model: the dataset rows, the tool
file's shape, the ``--llm`` spec, ``--model`` directory and that the server answers the phone, the
agent, reward and tool names (their modules found and read, never run). A mistake in any of them
is one line, within a second or two, instead of after the heavy imports.

What reading cannot tell (a module that defines names at run time, an import inside the user's
code that fails) is still reported, in one line, once it is loaded.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import re
import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rollscope import _tool_entries
from rollscope._files import load_yaml, read_text, regular_size
from rollscope.bundled import replies_file
from rollscope.llm.base import LLMServerError
from rollscope.runner.config import RunConfig, RunConfigError
from rollscope.runner.dataset import load_rows

LLM_KINDS = ("embedded", "scripted", "sglang")
CONNECT_TIMEOUT_S = 2.0
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*([.:][A-Za-z_]\w*)$")


def check(config: RunConfig) -> list[dict[str, Any]]:
    """Raise ``RunConfigError`` (or the dataset's error) naming what is wrong; return the rows."""
    if config.dataset is None:
        raise RunConfigError(f"{config.name}: no dataset (set dataset=PATH)")
    rows = load_rows(config.resolve(config.dataset), config.limit)
    base = getattr(config, "_base", None)
    if base and base not in sys.path:
        sys.path.insert(0, base)  # (as the runner will: a user's module beside the config imports by name)
    if config.tools:
        check_tool_file(config.resolve(config.tools))
    check_llm(config.llm, config.resolve(config.model) if config.model else None)
    if config.reward is not None:
        if not _DOTTED.match(config.reward) and ".py:" not in config.reward:
            raise RunConfigError(f"reward {config.reward!r}: expected 'module:function'")
        source = check_defined(config.reward, "reward")
        if source is not None:
            check_reward_rows(config.reward, source, rows, config.dataset)
    if "." in config.agent or ":" in config.agent:  # (``module.Class`` and ``module:Class`` alike)
        if not _DOTTED.match(config.agent):
            raise RunConfigError(
                f"agent {config.agent!r}: expected a registered loop name, 'module.Class' or 'module:Class'"
            )
        check_defined(config.agent, "agent")
    return rows


# verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``: what each argument
# is taken from in a dataset row (the solution is the model's, never the row's)
REWARD_ARGUMENTS = {0: ("data_source",), 2: ("reward_model", "ground_truth"), 3: ("extra_info",)}


def check_reward_rows(reward: str, source: Path, rows: list[dict[str, Any]], dataset: str) -> None:
    """That every row holds what the reward function reads: an argument its body uses (read from
    its source, never run) must be in each row, ``reward_model.ground_truth`` the usual one."""
    node = _function_def(source, split_target(reward)[1])
    if node is None:
        return
    positional = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for position, keys in REWARD_ARGUMENTS.items():
        if position >= len(positional) or positional[position] not in used:
            continue
        lacking = [i for i, row in enumerate(rows) if _lookup(row, keys) is None]
        if lacking:
            field = ".".join(keys)
            raise RunConfigError(
                f"dataset {dataset}: reward {reward!r} reads {positional[position]} (each row's "
                f"{field}), which {len(lacking)} of {len(rows)} rows lack (row {lacking[0]} "
                "first)"
            )


def _lookup(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = row
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _function_def(path: Path, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The top-level ``def name`` of ``path``'s source; None where it is not one (or does not parse)."""
    return next(
        (
            n
            for n in getattr(_parsed(path), "body", ())
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ),
        None,
    )


def _parsed(path: Path) -> ast.Module | None:
    """A module's source parsed; None where it is not read or does not parse (what the import
    will say, if anything)."""
    source = _source(path)
    try:
        return ast.parse(source) if source is not None else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def check_tool_file(path: str) -> None:
    """Every entry's keys and schema (``_tool_entries``), its class or function defined where it
    says, and a function's schema against the function's parameters, read from its source."""
    doc = load_yaml(read_text(path, "tool config", RunConfigError), path, RunConfigError)
    entries = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise RunConfigError(f"{path}: expected a top-level 'tools:' list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise RunConfigError(f"{path}: tools[{i}]: each entry must be a mapping, got {type(entry).__name__}")
        where = _tool_entries.label(path, i, entry)
        problem = _tool_entries.entry_problem(entry)
        if problem:
            raise RunConfigError(f"{where}: {problem}")
        target = entry.get("class_name") or entry.get("function")
        if not isinstance(target, str) or not _DOTTED.match(target):
            raise RunConfigError(
                f"{path}: tools[{i}]: needs 'class_name: package.module.Class' or "
                f"'function: package.module:function', got {target!r}"
            )
        source = check_defined(target, f"{path}: tools[{i}]")
        if "function" in entry and source is not None:
            node = _function_def(source, split_target(target)[1])
            if node is None:
                continue
            if entry.get("tool_schema") is not None:
                problem = _tool_entries.signature_problem(entry["tool_schema"], *_parameters(node), function=target)
            else:  # (its schema will be made from its docstring and annotations: checked now, from its source)
                args = node.args
                named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                variadic = (args.vararg or args.kwarg).arg if (args.vararg or args.kwarg) else None
                problem = _tool_entries.docstring_problem(
                    ast.get_docstring(node, clean=False), [(a.arg, a.annotation is not None) for a in named], variadic
                )
                problem = problem and f"function {target!r} ({source}:{node.lineno}): {problem}"
            if problem:
                raise RunConfigError(f"{where}: {problem}")


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[tuple[str, bool]], bool]:
    """(parameters with whether each has a default, takes ``**kwargs``) of a function's ``def``."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = len(positional) - len(args.defaults)
    params = [(a.arg, i >= defaults) for i, a in enumerate(positional)]
    params += [(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    return params, args.kwarg is not None


def split_target(target: str) -> tuple[str, str]:
    """(module, name) of ``package.module.Name``, ``module:name`` or ``path/file.py:name``."""
    module, sep, name = target.rpartition(":")
    if not sep:
        module, _, name = target.rpartition(".")
    return module, name


def check_defined(target: str, what: str) -> Path | None:
    """That ``target`` (``package.module.Name``, ``module:name`` or ``path/file.py:name``) is a
    module on the path that defines ``Name`` at its top level: its source found and read, never
    run (a module that defines names at run time, or is no Python source, is left to the import).
    Returns the module's source file where it is one."""
    module, name = split_target(target)
    path = Path(module) if module.endswith(".py") else _module_file(module)
    if path is None or (module.endswith(".py") and not path.is_file()):
        missing = f"no file {module}" if module.endswith(".py") else f"no module {module!r} on the path"
        raise RunConfigError(f"{what}: {target!r}: {missing} (run from {Path.cwd()})")
    names = _top_level_names(path) if path.suffix == ".py" else None
    if names is not None and name not in names:
        close = difflib.get_close_matches(name, sorted(names), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise RunConfigError(f"{what}: {target!r}: {path} defines no {name!r}{hint}")
    return path if path.suffix == ".py" else None


def _module_file(dotted: str) -> Path | None:
    """Where module ``dotted`` is, found as the import would find it but without importing any of
    its packages (their ``__init__`` may be heavy): its source file, or a path that is no Python
    source (an extension module, a namespace package, a built-in); None if there is none."""
    top, *rest = dotted.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest or spec.origin in ("built-in", "frozen"):  # (a frozen one is read by no one: left to the import)
        return Path(spec.origin) if spec.origin and spec.origin not in ("built-in", "frozen") else Path(top)
    dirs = [Path(d) for d in (spec.submodule_search_locations or ())]
    parent = Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        found = next((d / part for d in dirs if (d / part).is_dir()), None)
        if last and found is None:
            found = next((f for d in dirs for f in (d / f"{part}.py", *d.glob(f"{part}.*.so")) if f.is_file()), None)
            if found is not None:
                return found
        if found is None:  # not on disk: a module that makes it an attribute (``os.path``) leaves it to the import
            source = _source(parent) if parent is not None else ""
            return Path(part) if source is None or part in source else None
        if last:
            return found / "__init__.py" if (found / "__init__.py").is_file() else found
        dirs, parent = [found], found / "__init__.py" if (found / "__init__.py").is_file() else None
    return None


def _top_level_names(path: Path) -> set[str] | None:
    """The names a module's source binds at its top level (also in its top-level ``if`` and
    ``try`` blocks); None where it may bind others at run time (``import *``, ``__getattr__``,
    ``globals()``) or does not parse."""
    tree = _parsed(path)
    if tree is None:
        return None
    names: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            body += [
                *node.body,
                *getattr(node, "orelse", []),
                *getattr(node, "finalbody", []),
                *(n for h in getattr(node, "handlers", []) for n in h.body),
            ]
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Expr) and "globals" in ast.dump(node):
            return None
    return names


MAX_SOURCE_BYTES = 4 << 20  # a module's source read to check the names it defines; a bigger one is left to the import


def _source(path: Path) -> str | None:
    """A module's source, or None where it is not read (not a regular file, past the bound)."""
    try:
        size = regular_size(path, "module", OSError)
    except OSError:
        return None
    if size > MAX_SOURCE_BYTES:
        return None
    try:
        return path.read_bytes()[:MAX_SOURCE_BYTES].decode("utf-8", errors="replace")
    except OSError:
        return None


def check_llm(spec: str, model: str | None) -> None:
    """The ``--llm`` spec names a known kind, with what that kind needs (``--model`` for a server)."""
    server = spec.startswith(("http://", "https://"))
    kind, _, rest = spec.partition(":")
    if not server and kind not in LLM_KINDS:
        raise RunConfigError(f"--llm {spec}: unknown kind (embedded, http(s)://HOST:PORT, sglang:URL, scripted:FILE)")
    if kind == "scripted" and replies_file(rest) is None:
        raise RunConfigError(f"--llm {spec}: no replies file at {rest} (nor one shipped by that name)")
    if (server or kind == "sglang") and model is None:
        raise RunConfigError(
            f"--llm {spec}: needs --model DIR, the served model's tokenizer directory (model: in a config file)"
        )
    if model is not None:
        path = Path(model)
        if not path.is_dir():
            raise RunConfigError(f"--model {model}: no such directory (a Hugging Face model or tokenizer directory)")
        if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
            raise RunConfigError(f"--model {model}: no tokenizer there (tokenizer.json or tokenizer_config.json)")
    if server or kind == "sglang":  # (last: the local mistakes first, then the network)
        check_reachable(rest if kind == "sglang" else spec)


def check_reachable(url: str) -> None:
    """That something accepts connections at ``url``'s host and port, within ``CONNECT_TIMEOUT_S``
    (whether it is an LLM server is the client's first request's to say)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise RunConfigError(f"--llm {url}: not a URL: {exc}") from None
    if not parts.hostname:
        raise RunConfigError(f"--llm {url}: not a URL (http://HOST:PORT)")
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise LLMServerError(
            f"--llm {url}: cannot reach the server: nothing answers at {parts.hostname}:{port} "
            f"({reason}); is it running, and on that port?"
        ) from None
