"""Terminal rendering of trajectories, diffs and GRPO groups (rich)."""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape as _escape_markup
from rich.table import Table
from rich.tree import Tree

from rollscope.analysis.grpo import GroupMember
from rollscope.analysis.history import PromptStep
from rollscope.semconv import TOKENIZER_CHANGED
from rollscope.tracing.spans import STACKTRACE
from rollscope.trajectory.diff import TrajectoryDiff, turn_text
from rollscope.trajectory.records import SpanRecord, TrajectoryRecord
from rollscope.viewer.chat import ground_truth
from rollscope.viewer.tokens import retokenization, token_view, training_token_view
from rollscope.viewer.views import as_text, figures, first_user_message, fmt, main_text, shorten

TEXT_LIMIT = 600
KIND_STYLE = {"agent": "bold cyan", "llm": "green", "tool": "yellow", "reward": "magenta", "custom": "dim"}


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but newline and tab
_CONTROL_IN_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def terminal_safe(text: str, one_line: bool = False) -> str:
    """Control characters shown as ``\\x1b``, never sent: text a model or a user wrote (escape
    sequences that clear the screen, retitle the window, rewrite what was printed) stays text."""
    return (_CONTROL_IN_LINE if one_line else _CONTROL).sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def escape(text: str) -> str:
    """For rich: markup escaped and control characters made visible."""
    return _escape_markup(terminal_safe(text))


def console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def show_trajectory(out: Console, record: TrajectoryRecord, *, full: bool = False, tokens: bool = False) -> None:
    limit = None if full else TEXT_LIMIT
    head = Table(show_header=False, box=None, padding=(0, 2))
    for key, value in (
        ("trajectory", record.id),
        ("experiment", f"{record.project or '-'} / {record.experiment or '-'}"),
        (
            "step · sample · rollout",
            f"{fmt(record.step)} · {fmt(record.sample_index)} · {fmt(record.rollout_n)}"
            + (" · validation" if record.validate else ""),
        ),
        ("agent", record.agent_name or "-"),
        ("status", f"[red]{record.status}[/red]" if record.status == "error" else record.status),
        ("reward", fmt(record.reward)),
        ("turns · tool calls · tokens", f"{record.num_llm_calls} · {record.num_tool_calls} · {record.num_tokens}"),
        ("error spans", f"[red]{record.num_errors}[/red]" if record.num_errors else "0"),
        ("duration", "-" if record.duration_s is None else f"{record.duration_s:.3f}s"),
    ):
        head.add_row(key, value if key == "status" or key == "error spans" else escape(value))
    out.print(head)
    changed = (record.attributes or {}).get(TOKENIZER_CHANGED) or record.prompts.note
    if changed:
        out.print(f"[yellow]{escape(changed)}[/yellow]")
    if record.error_message:
        out.print(f"[red]error: {escape(record.error_type or '')}: {escape(record.error_message)}[/red]")
        _traceback(out.print, record.attributes, full)
    task = first_user_message(record)
    if task:
        out.print(f"[bold]task:[/bold] {escape(shorten(task, limit) or '')}")
    truth = ground_truth(record)
    if truth is not None:
        out.print(f"[bold]ground truth:[/bold] {escape(shorten(truth, limit) or '')}")
    drift = retokenization(record)
    if drift is not None:
        out.print(
            f"[yellow]retokenization drift:[/yellow] the chat template renders the messages to other tokens "
            f"from position {drift['position']}:"
        )
        for line in drift_lines(drift):
            out.print(f"  {escape(line)}")
        out.print(
            f"[dim]  token ids from {drift['window_start']}:\n"
            f"  trained on: {' '.join(map(str, drift['rollout']))}\n"
            f"  template:   {' '.join(map(str, drift['template']))}[/dim]"
        )
    show_training(out, record)
    tree = Tree("[bold]spans[/bold]")
    for root in record.tree():
        _add_span(tree, root, limit)
    out.print(tree)
    if tokens:
        for n, span in enumerate(s for s in record.spans if s.kind == "llm"):
            show_tokens(out, n, span)
        show_training_tokens(out, record)


def _traceback(add: Callable[[str], object], attributes: dict | None, full: bool) -> None:
    """The stored traceback of an error, with ``--full``; else the line that says it is there."""
    text = (attributes or {}).get(STACKTRACE)
    if not isinstance(text, str):
        return
    if full:
        add(f"[dim]{escape(text.rstrip())}[/dim]")
    else:
        add("[dim](traceback stored: --full shows it)[/dim]")


def drift_lines(drift: dict) -> list[str]:
    """Each place the template's rendering differs from the trained-on tokens, with its cause and
    both sides as text (a check stored before they were listed has only the first: no lines)."""
    differences = drift.get("differences") if isinstance(drift.get("differences"), list) else []
    lines = []
    for d in differences:
        if not isinstance(d, dict):
            continue
        ours = d.get("rollout_text", " ".join(map(str, d.get("rollout") or [])))
        theirs = d.get("template_text", " ".join(map(str, d.get("template") or [])))
        said = f" — {d['said']}" if isinstance(d.get("said"), str) else ""
        lines.append(
            f"at {d.get('position')} ({d.get('cause', 'ids')}): trained on {ours!r}, template {theirs!r}{said}"
        )
    count = drift.get("difference_count")
    if isinstance(count, int) and count > len(lines) > 0:
        lines.append(f"... and {count - len(lines)} more")
    return lines


def show_training(out: Console, record: TrajectoryRecord) -> None:
    """What the trainer did with the trajectory, when a trainer recorded it."""
    t = record.training
    if t is None:
        return
    v = t.values
    versions = fmt(t.policy_version) + (
        "" if v.get("policy_version_max") in (None, t.policy_version) else f"-{v['policy_version_max']}"
    )
    masked = v.get("masked_delta_max")
    out.print(
        f"[bold]training:[/bold] step {fmt(t.step)} · advantage {fmt(t.advantage)} · "
        f"group {escape(t.uid or '-')} ({fmt(t.group_size)} rollouts, mean {fmt(t.group_mean)}, "
        f"std {fmt(t.group_std)}) · policy version {versions}, lag {fmt(t.lag)} · "
        f"trainer vs rollout log-prob max |Δ| {fmt(t.logprob_delta_max)} over "
        f"{v.get('tokens')} loss tokens"
        + (f" ({v.get('masked_tokens')} masked, not counted: their |Δ| {fmt(masked)})" if masked is not None else "")
    )


def show_training_tokens(out: Console, record: TrajectoryRecord) -> None:
    """Every trained-on token with what the trainer computed there (the viewer's overlays as
    columns), masked tokens marked; then the largest trainer-rollout gaps."""
    view = training_token_view(record)
    if view is None:
        return
    out.print(f"[bold]trained-on tokens[/bold]: {len(view.tokens)} · {view.masked} masked (not trained on)")
    table = Table(box=None, pad_edge=False)
    columns = ("#", "token", "loss", "trainer", "rollout", "Δ", "entropy", "reference", "KL", "advantage")
    for column in columns:
        table.add_column(column, justify="left" if column == "token" else "right")
    for k in view.tokens:
        table.add_row(
            str(k.position),
            escape(repr(k.text)),
            "masked" if k.masked else "1",
            *(_value(v) for v in (k.trainer, k.rollout, k.delta, k.entropy, k.reference, k.kl, k.advantage)),
        )
    out.print(table)
    what, worst = view.worst.get("delta", ("", []))
    if worst:
        out.print(f"{what}:")
    for k, _ in worst:
        out.print(
            f"  #{k.position:<4} Δ {k.delta:+.3g}  trainer {k.trainer:.3f}  rollout {k.rollout:.3f}  "
            f"{escape(repr(k.text))}"
        )


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def show_history(out: Console, sample: object, history: list[PromptStep]) -> None:
    table = Table(title=f"prompt {escape(str(sample))}: {len(history)} steps", title_justify="left")
    for column in (
        "experiment",
        "step",
        "rollouts",
        "mean reward",
        "spread",
        "tokens",
        "turns",
        "tools",
        "advantages",
        "policy",
    ):
        table.add_column(column, justify="left" if column == "experiment" else "right")
    for h in history:
        spread = fmt(h.std_reward) + (" [red]no signal[/red]" if h.zero_variance else "")
        adv = f"{min(h.advantages):+.2f}..{max(h.advantages):+.2f}" if h.advantages else "-"
        table.add_row(
            escape(f"{h.project or '-'} / {h.experiment or '-'}"),
            fmt(h.step),
            str(h.rollouts),
            fmt(h.mean_reward),
            spread,
            fmt(h.mean_tokens),
            fmt(h.mean_turns),
            fmt(h.mean_tool_calls),
            adv,
            ", ".join(map(str, h.policy_versions)) or "-",
        )
    out.print(table)


_BUCKET_STYLE = ("", "on grey23", "on dark_orange3", "on orange_red1", "on red3", "bold white on red")


def show_tokens(out: Console, turn: int, span: SpanRecord) -> None:
    """A turn's tokens, each on the background of its log-probability bucket, then the least likely."""
    view = token_view(span)
    if view is None:
        out.print(f"[bold]turn {turn}[/bold]: no response tokens recorded")
        return
    redacted = f" · {view.redacted} redacted (they carried a secret)" if view.redacted else ""
    if not view.has_log_probs:
        out.print(f"[bold]turn {turn}[/bold]: {len(view.tokens)} tokens; the LLM returned no log-probs{redacted}")
        return
    out.print(
        f"[bold]turn {turn}[/bold]: {len(view.tokens)} tokens · mean log-prob {view.mean_log_prob:.3f} · "
        f"{view.below_in_words}" + ("" if view.has_texts else " · token texts not recorded (ids shown)") + redacted
    )
    line = "".join(
        f"[{_BUCKET_STYLE[t.bucket]}]{escape(t.text)}[/]" if t.bucket > 0 else escape(t.text) for t in view.tokens
    )
    out.print(line)
    for t in view.least_likely:
        out.print(f"  #{t.position:<4} {t.log_prob:8.3f}  {escape(repr(t.text))}")


def _styled(text: str, style: str) -> str:
    """``text`` as markup in ``style`` (none: as it is); ``text`` is never read as markup."""
    return f"[{style}]{escape(text)}[/{style}]" if style else escape(text)


def _kind_style(span: SpanRecord, error: str) -> str:
    """A span's style by its kind; a kind of its own (a Weave project's op, say) gets none."""
    return error if span.status == "error" else KIND_STYLE.get(span.kind, "") if isinstance(span.kind, str) else ""


def _add_span(parent: Tree, span: SpanRecord, limit: int | None) -> None:
    label = (
        f"{_styled(str(span.name), _kind_style(span, 'bold red'))} "
        f"[dim]{escape(str(span.kind))} · {escape(figures(span))}[/dim]"
    )
    node = parent.add(label)
    if span.error_message:
        node.add(f"[red]{escape(span.error_type or 'error')}: {escape(shorten(span.error_message, limit))}[/red]")
        _traceback(node.add, span.attributes, limit is None)
    text = main_text(span)
    if text:
        node.add(escape(shorten(text, limit)))
    elif span.kind == "custom":  # a span of the user's own: what it was given and what it gave
        for key, value in (("in", span.inputs), ("out", span.outputs)):
            if value not in (None, {}, [], ""):
                node.add(f"[dim]{key}:[/dim] {escape(shorten(as_text(value), limit))}")
    for child in span.children:
        _add_span(node, child, limit)


def show_diff(out: Console, diff: TrajectoryDiff, *, full: bool = False) -> None:
    limit = None if full else TEXT_LIMIT // 2
    left, right = diff.left, diff.right
    out.print(
        f"[bold]A[/bold] {left.id} (step {fmt(left.step)}, sample {fmt(left.sample_index)}, "
        f"rollout {fmt(left.rollout_n)}, reward {fmt(left.reward)})"
    )
    out.print(
        f"[bold]B[/bold] {right.id} (step {fmt(right.step)}, sample {fmt(right.sample_index)}, "
        f"rollout {fmt(right.rollout_n)}, reward {fmt(right.reward)})"
    )
    for name, (a, b) in diff.fields.items():
        out.print(f"  {name}: {fmt(a)} → {fmt(b)}")
    table = Table(show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("A")
    table.add_column("B")
    table.add_column("differs")
    for turn in diff.turns:
        sides = ((turn.left, turn.left_tools), (turn.right, turn.right_tools))
        cells = [_turn_cell(s, tools, limit) for s, tools in sides]
        marker = "[yellow]" + ", ".join(turn.changed) + "[/yellow]" if turn.changed else "[dim]same[/dim]"
        if turn.index == diff.first_divergence:
            marker += " [bold](first divergence)[/bold]"
        table.add_row(str(turn.index), *cells, marker)
    out.print(table)


def _turn_cell(span: SpanRecord | None, tools: list[SpanRecord], limit: int | None) -> str:
    """A model turn and, under it, the tool calls that answered it."""
    lines = (
        ["[dim]—[/dim]"]
        if span is None
        else [f"{_styled(str(span.name), _kind_style(span, 'red'))}\n{escape(shorten(turn_text(span), limit) or '')}"]
    )
    for tool in tools:
        lines.append(
            f"  ↳ {_styled(str(tool.name), _kind_style(tool, 'red'))} {escape(shorten(turn_text(tool), limit) or '')}"
        )
    return "\n".join(lines)


def show_group(
    out: Console,
    step: int,
    sample: object,
    mean: float | None,
    std: float | None,
    members: list[GroupMember],
    experiment: str | None = None,
) -> None:
    """A GRPO group, one rollout a row, readable at 80 columns: ids whole, no column cut (short
    headers, no rules; the duration left out when it will not fit)."""
    table = Table(
        title=f"{escape(experiment or '-')}: step {step}, sample {escape(str(sample))}: {len(members)} "
        f"rollouts, mean reward {fmt(mean)}, std {fmt(std)}",
        title_justify="left",
        box=None,
        padding=(0, 1),
        pad_edge=False,
        header_style="bold",
    )
    columns = ["n", "id", "status", "reward", "adv", "adv/std", "turns", "tools", "errs", "secs"]
    if out.width < 84:
        columns.remove("secs")
    for column in columns:
        table.add_column(column, justify="left" if column in ("id", "status") else "right", no_wrap=True)
    for m in members:
        r = m.record
        cells = {
            "n": fmt(r.rollout_n),
            "id": r.id,
            "status": r.status,
            "reward": fmt(r.reward),
            "adv": "-" if m.advantage is None else f"{m.advantage:+.3f}",
            "adv/std": "-" if m.normalized is None else f"{m.normalized:+.2f}",
            "turns": str(r.num_llm_calls),
            "tools": str(r.num_tool_calls),
            "errs": str(r.num_errors),
            "secs": fmt(r.duration_s),
        }
        table.add_row(*(cells[c] for c in columns))
    out.print(table)
