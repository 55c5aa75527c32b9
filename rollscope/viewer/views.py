"""What a person reads of a span, shared by the CLI and the web UI: one summary line, the main text
(the model's reply, a tool's arguments and result), the figures (tokens, latency)."""

from __future__ import annotations

import functools
import json
from collections.abc import Container
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import orjson
from markupsafe import Markup

from rollscope.semconv import (
    CONSTRAINED,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    RETOKENIZATION,
    TOOL_NAME,
    TOOL_SCHEMAS,
    UNREADABLE,
)
from rollscope.trajectory.diff import turn_text
from rollscope.trajectory.records import SpanRecord, StepStats, TrajectoryRecord, last_user_message


def fmt(value: object, digits: int = 3) -> str:
    """A figure as shown: '-' for none, floats to a few significant digits."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def cut(text: str | None, limit: int) -> str:
    """A table cell's text: at most ``limit`` characters, an ellipsis when cut ('' for none)."""
    if not text:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def group_url(record: TrajectoryRecord) -> str:
    """The link to a trajectory's GRPO group (its step, sample and experiment). Written out: it is
    on every row of the table."""
    sample = record.sample_index
    sample = sample if type(sample) is int else _quoted("" if sample is None else str(sample))
    step = "" if record.step is None else record.step
    return f"/group?step={step}&sample={sample}&experiment={_quoted(record.experiment or '')}"


@functools.lru_cache(maxsize=1024)
def _quoted(text: str) -> str:
    return quote_plus(text)


def table_row(r: TrajectoryRecord, runs: bool = False) -> Markup:
    """One row of the trajectory table. Written in Python rather than the template: it is drawn a
    hundred times a page, and Jinja spends about five times as long on the same seventeen cells.
    ``runs``: with the W&B run's column (its id, a link to the run's trajectories; the path on hover)."""
    attributes = r.attributes or {}
    run, task = r.wandb_run, attributes.get("task")
    cells = (
        f'<td><input type="checkbox" name="id" value="{escape(r.id)}"></td>',
        f'<td><a href="/t/{escape(quote(r.id))}">{escape(r.id)}</a></td>',
        f"<td>{escape(r.experiment or '')}</td>",
        (
            ""
            if not runs
            else "<td></td>"
            if run is None
            else f'<td class="wandb-run"><a href="/?wandb_run={_quoted(run)}" title="{escape(run)}">'
            f"{escape(run.rsplit('/', 1)[-1])}</a></td>"
        ),
        f"<td>{escape(fmt(r.step))}</td>",
        f'<td><a href="{escape(group_url(r))}">{escape(fmt(r.sample_index))}</a></td>',
        f"<td>{escape(fmt(r.rollout_n))}</td>",
        f"<td>{'y' if r.validate else ''}</td>",
        f"<td>{escape(r.agent_name or '')}</td>",
        f'<td class="status-{escape(r.status)}">{escape(r.status)}</td>',
        f"<td>{escape(fmt(r.reward))}</td>",
        f'<td class="task" title="{escape(str(task or ""))}">{escape(cut(task, 80))}</td>',
        f"<td>{count(r.num_llm_calls)}</td><td>{count(r.num_tool_calls)}</td><td>{count(r.num_tokens)}</td>"
        f"<td>{count(r.num_errors)}</td>",
        f'<td class="first-error">{escape(cut(r.error_message or attributes.get("first_error"), 60))}</td>',
        f"<td>{escape(fmt(r.duration_s))}</td>",
        f'<td class="started">{started(r.start_ns)}</td>',
    )
    row_class = "row-error" if r.status == "error" or r.num_errors else ""
    return Markup(f'<tr class="{row_class}">{"".join(cells)}</tr>\n')


def started(start_ns: int | None) -> str:
    """When a trajectory started, in UTC to the second (what a run's log lines are matched by)."""
    if not start_ns:
        return ""
    return datetime.fromtimestamp(start_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def count(value: Any) -> str:
    """A count column's cell: the number, or a marker for anything else a store or a remote source
    put there (SQLite keeps text in an INTEGER column; a Weave project holds what its writers sent)."""
    return str(value) if type(value) is int else '<span class="bad-value" title="not a number">?</span>'


MAX_DEPTH = 40  # span nesting drawn as nesting; deeper spans are drawn at this depth, in their order


def bounded_tree(roots: list[SpanRecord], limit: int = MAX_DEPTH) -> list[SpanRecord]:
    """The span tree with what is nested deeper than ``limit`` drawn at that depth (in order, each
    marked ``nested_deeper``): a trajectory others wrote may nest thousands of spans, and the page
    draws each level with a template macro, which recurses. Walked without recursion."""
    stack = [(root, 1) for root in roots]
    while stack:
        span, depth = stack.pop()
        if depth < limit:
            stack.extend((child, depth + 1) for child in span.children)
            continue
        below, pending = [], list(reversed(span.children))
        while pending:
            node = pending.pop()
            pending.extend(reversed(node.children))
            node.children = []
            node.attributes = {**(node.attributes or {}), "nested_deeper": True}
            below.append(node)
        span.children = below
    return roots


def shorten(text: str | None, limit: int | None) -> str | None:
    if text is None or limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more chars]"


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def tokens(span: SpanRecord) -> tuple[int | None, int | None]:
    a = span.attributes or {}
    return a.get(INPUT_TOKENS), a.get(OUTPUT_TOKENS)


def figures(span: SpanRecord) -> str:
    parts = []
    if span.duration_s is not None:
        parts.append(f"{span.duration_s:.3f}s")
    prompt, output = tokens(span)
    if output is not None:
        parts.append(f"{fmt(prompt)} → {output} tokens")
    outputs = span.outputs if isinstance(span.outputs, dict) else {}
    if outputs.get("stop_reason"):
        parts.append(f"stop {outputs['stop_reason']}")
    version = (
        (outputs.get("extra_fields") or {}).get("global_steps")
        if isinstance(outputs.get("extra_fields"), dict)
        else None
    )
    if version is not None:  # the weights the server generated this turn with (verl's rollout servers say)
        parts.append(f"policy v{version}")
    return " · ".join(parts)


def tool_call(span: SpanRecord) -> tuple[str, str | None, str | None]:
    """(tool name, arguments, result) of a tool span."""
    name = (span.attributes or {}).get(TOOL_NAME) or span.name
    inputs = span.inputs if isinstance(span.inputs, dict) else {}
    arguments = inputs.get("parameters", inputs.get("arguments", inputs or None))
    return name, None if arguments is None else as_text(arguments), turn_text(span)


def main_text(span: SpanRecord) -> str | None:
    """The text that matters most in a span: a reply, a tool's arguments and result, a reward (an
    error is shown beside it, from ``span.error_message``)."""
    if span.kind == "tool":
        _, arguments, result = tool_call(span)
        return f"{arguments} → {result}" if arguments else result
    if span.kind == "reward":
        return as_text(span.outputs)
    return turn_text(span) if span.kind == "llm" else None


# Shown elsewhere on the page, or too long for a table of facts.
_NOT_FACTS = frozenset({"exception.stacktrace", RETOKENIZATION, UNREADABLE})
FACT_CHARS = 300


def span_facts(span: SpanRecord) -> list[tuple[str, str]]:
    """What a span was run with, as Weave's call page lists it: an llm span's sampling settings
    (temperature, top_p, stop strings, max tokens…) and whether its tool calls were constrained to
    their schemas, then every attribute, each value as text (long ones cut)."""
    facts: list[tuple[str, str]] = []
    inputs = span.inputs if isinstance(span.inputs, dict) else {}
    sampling = inputs.get("sampling_params")
    if isinstance(sampling, dict):
        facts += [(f"sampling · {k}", as_text(v)) for k, v in sampling.items() if k != TOOL_SCHEMAS]
    attributes = span.attributes or {}
    if span.kind == "llm":
        constrained = attributes.get(CONSTRAINED)
        facts.append(("tool calls constrained", f"yes ({constrained})" if constrained else "no"))
    facts += [(k, as_text(v)) for k, v in sorted(attributes.items()) if k not in _NOT_FACTS and k != CONSTRAINED]
    return [(k, v if len(v) <= FACT_CHARS else v[:FACT_CHARS] + "…") for k, v in facts]


def first_user_message(record: TrajectoryRecord) -> str | None:
    """The task the trajectory started from (the last user message of the run's raw prompt)."""
    for span in record.spans:
        prompt = (span.inputs or {}).get("raw_prompt") if isinstance(span.inputs, dict) else None
        task = last_user_message(prompt)
        if task is not None:
            return task
    return None


SEARCH_MATCHES = 100  # a search lists at most this many spans
SEARCH_CHARS = 64 * 2**20  # and reads at most this much of a trajectory's text before it stops, saying so


def spans_matching(record: TrajectoryRecord, text: str) -> tuple[list[SpanRecord], str | None]:
    """The spans whose name, error, inputs, output or (a turn stored as what it adds) added text
    hold ``text`` (case aside), in order, and why the search stopped early (None: it read every
    span). Read span by span: a search costs what it reads, and stops at ``SEARCH_MATCHES`` matches
    or ``SEARCH_CHARS`` characters."""
    needle = text.casefold()
    prompts = record.prompts
    prompts.prefetch(record.spans)  # (what the turns add, decoded in batches)
    found: list[SpanRecord] = []
    read = 0
    for n, span in enumerate(record.spans, 1):
        parts = [span.name or "", span.error_message or "", _json(span.inputs), _json(span.outputs)]
        if prompts.base(span) is not None:
            parts.append(prompts.added_text(span) or "")
        haystack = " ".join(parts)
        read += len(haystack)
        if needle in haystack.casefold():
            found.append(span)
            if len(found) >= SEARCH_MATCHES:
                return found, f"the first {SEARCH_MATCHES} matches, in {n} of {len(record.spans)} spans"
        if read >= SEARCH_CHARS and n < len(record.spans):
            return found, f"searched the first {n} of {len(record.spans)} spans ({read:,} characters)"
    return found, None


def _json(value: Any) -> str:
    """``value`` as JSON text, to search (orjson: a trajectory's spans are searched span by span;
    the standard library where orjson refuses a value, an int past 64 bits)."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value, default=str, ensure_ascii=False)


WINDOW_SPANS = 50  # spans drawn in detail on a trajectory's page; the others are a link away


@dataclass
class Window:
    """The spans a trajectory's page draws in detail: ``WINDOW_SPANS`` consecutive spans of the tree
    in reading order, with the spans that hold them drawn around them; every other span is a link
    to the window that draws it, so a page of a 1,000-turn trajectory costs what one window does."""

    trajectory_id: str
    order: list[SpanRecord]  # every span, in reading order
    start: int  # the first drawn span's place in ``order``
    shown: set[str]  # drawn in detail
    around: set[str]  # holds drawn spans: drawn as a heading with its children

    @property
    def end(self) -> int:
        return min(self.start + WINDOW_SPANS, len(self.order))

    def href(self, span_id: str) -> str:
        """A link to a span: on this page, or the page whose window draws it."""
        if span_id in self.shown or span_id in self.around:
            return f"#span-{span_id}"
        return f"/t/{quote(self.trajectory_id, safe='')}?{urlencode({'at': span_id})}#span-{span_id}"

    def at(self, place: int) -> str | None:
        """A link to the window starting ``place`` spans in (None past either end)."""
        return self.href(self.order[place].id) if 0 <= place < len(self.order) else None

    def group(self, spans: list[SpanRecord]) -> list[tuple[SpanRecord, int]]:
        """Sibling spans as drawn: (span, 0) for those drawn here, (first, n) for each run of ``n``
        consecutive siblings drawn on other pages."""
        out: list[tuple[SpanRecord, int]] = []
        for child in spans:
            if child.id in self.shown or child.id in self.around:
                out.append((child, 0))
            elif out and out[-1][1]:
                out[-1] = (out[-1][0], out[-1][1] + 1)
            else:
                out.append((child, 1))
        return out


def outline(roots: list[SpanRecord], where: Window, matched: Container[str]) -> Markup:
    """The span tree as the page's outline: every span, each a link to where it is drawn. Built
    here, not by a template macro: a trajectory of 1,000 turns has thousands of spans, and a
    macro call per span costs more than the rest of the page."""
    out: list[str] = []
    stack: list[SpanRecord | None] = list(reversed(roots))
    while stack:
        span = stack.pop()
        if span is None:  # (the end of a span's children)
            out.append("</ul></details></li>")
            continue
        classes = f"kind-{escape(span.kind)} status-{escape(span.status)}" + (" match" if span.id in matched else "")
        link = f'<a href="{escape(where.href(span.id))}">{escape(span.name)}</a>'
        if span.children:
            out.append(f'<li class="{classes}"><details open><summary>{link}</summary><ul>')
            stack.append(None)
            stack.extend(reversed(span.children))
        else:
            out.append(f'<li class="{classes}">{link}</li>')
    return Markup("".join(out))


def window(trajectory_id: str, roots: list[SpanRecord], at: str | None) -> Window:
    """The window holding span ``at`` (the first without it, or when it is not in the tree)."""
    order: list[SpanRecord] = []
    parent: dict[str, SpanRecord] = {}
    stack = list(reversed(roots))
    while stack:
        span = stack.pop()
        order.append(span)
        for child in reversed(span.children):
            parent[child.id] = span
            stack.append(child)
    place = next((i for i, s in enumerate(order) if s.id == at), 0) if at else 0
    start = place - place % WINDOW_SPANS
    shown = {s.id for s in order[start : start + WINDOW_SPANS]}
    around: set[str] = set()
    for span in order[start : start + WINDOW_SPANS]:
        up = parent.get(span.id)
        while up is not None and up.id not in around:
            around.add(up.id)
            up = parent.get(up.id)
    return Window(trajectory_id, order, start, shown, around - shown)


@dataclass
class RunRow:
    """One run (project and experiment) on the index, as Weave's and MLflow's run lists show one:
    its steps, its trajectories and how many had an error span, its reward at the first step and
    the last."""

    project: str | None
    experiment: str | None
    steps: int
    first_step: int | None
    last_step: int | None
    trajectories: int
    with_errors: int
    first_reward: float | None
    last_reward: float | None

    @property
    def href(self) -> str:
        return "/?" + urlencode({"experiment": self.experiment or ""})


def runs_of(steps: list[StepStats]) -> list[RunRow]:
    """The runs in ``store.steps()``'s rows (one per experiment and step), by experiment."""
    by_run: dict[tuple[str | None, str | None], list[StepStats]] = {}
    for s in steps:
        by_run.setdefault((s.project, s.experiment), []).append(s)
    rows = []
    for (project, experiment), found in by_run.items():
        found.sort(key=lambda s: (s.step is None, s.step or 0))
        rows.append(
            RunRow(
                project,
                experiment,
                len(found),
                found[0].step,
                found[-1].step,
                sum(s.trajectories for s in found),
                sum(s.with_errors for s in found),
                found[0].mean_reward,
                found[-1].mean_reward,
            )
        )
    return sorted(rows, key=lambda r: (r.project or "", r.experiment or ""))
