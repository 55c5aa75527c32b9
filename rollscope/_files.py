"""Reading the files a user names (a run config, a tool file, a dataset, a module's source) as
untrusted input: regular files only, within a size, as UTF-8, and YAML within bounds. Each
mistake is one error of the caller's class naming the file and what is wrong, raised before the
file costs more than its bound: a device (``/dev/zero``) or a FIFO is never read, a file past the
size is never read whole, a YAML document of a billion laughs is refused before it is built.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

TEXT_LIMIT = 1 << 20  # a config or tool file: far more than any is
MAX_ALIASES = 1000
MAX_DEPTH = 200
MAX_NODES = 1_000_000  # values a document may hold with its aliases expanded


def regular_size(path: str | os.PathLike, what: str, error: type[Exception]) -> int:
    """The size of ``path``, which must be a regular file (not a device, a FIFO, a directory)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: {what} is not a regular file (a directory, a device or a pipe)")
    return info.st_size


def read_text(path: str | os.PathLike, what: str, error: type[Exception], limit: int = TEXT_LIMIT) -> str:
    """The text of a regular file of at most ``limit`` bytes, decoded as UTF-8."""
    size = regular_size(path, what, error)
    if size > limit:
        raise error(f"{path}: {what} of {size:,} bytes, more than the {limit:,} one may be")
    try:
        data = Path(path).read_bytes()[: limit + 1]
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{path}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}, offset {exc.start:,})"
        ) from None


def lines(path: str | os.PathLike, what: str, error: type[Exception]) -> Iterator[tuple[int, str]]:
    """The numbered lines of a regular UTF-8 file, read as they are asked for (a dataset read for
    its first rows costs those rows, not the file)."""
    regular_size(path, what, error)
    try:
        with open(path, encoding="utf-8") as f:
            number = 0
            for number, line in enumerate(f, 1):
                yield number, line
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (line {number + 1}: {exc.reason})") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document past ``MAX_ALIASES`` aliases, ``MAX_DEPTH`` levels
    or ``MAX_NODES`` values once its aliases are expanded: what a YAML bomb or a 2,000-deep
    nesting needs."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise yaml.composer.ComposerError(
                    None, None, f"more than {MAX_ALIASES} aliases", self.peek_event().start_mark
                )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        expanded = _expanded_size(node)
        if expanded > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"its aliases expand to {expanded:,} values, more than {MAX_NODES:,}", node.start_mark
            )
        return node


def _expanded_size(root: Any) -> int:
    """How many values a document holds with every alias expanded (a billion laughs: nine aliases
    nine times over), counted over its distinct nodes only."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done or not children:
            sizes[id(node)] = min(1 + sum(sizes.get(id(c), 1) for c in children), MAX_NODES + 1)
            continue
        stack.append((node, True))
        stack += [(c, False) for c in children if id(c) not in sizes]
    return sizes[id(root)]


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str, where: str, error: type[Exception]) -> Any:
    """``yaml.safe_load`` within bounds; any failure one ``error`` naming ``where``."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as exc:
        raise error(f"{where}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:
        raise error(f"{where}: YAML nested too deep to read") from None


def _one_line(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: what is wrong and where (PyYAML draws the line and a caret)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None:
        return " ".join(str(exc).split())
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem
