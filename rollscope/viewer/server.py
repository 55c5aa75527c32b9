"""``rollscope ui``: a local web viewer over the trace store, standard library HTTP plus Jinja2.

Pages are rendered on the server with autoescaping on (trace content is data, never markup), the
store is re-read on every request (a refresh shows trajectories written since), and only fixed
routes exist: no request names a file, so none can reach one outside the package. Binds to
127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape

from rollscope.analysis.grpo import advantages, group_advantages
from rollscope.analysis.history import prompt_history
from rollscope.analysis.insights import SIGNALS, Signal, Thresholds, insights
from rollscope.analysis.live import running
from rollscope.analysis.metric_changes import metric_changes
from rollscope.semconv import TOKENIZER_CHANGED
from rollscope.sources import TraceSource, open_source
from rollscope.sources.wandb_history import HistoryError, RunHistory, read_history
from rollscope.store import rescorings
from rollscope.store.reader import ORDERS, where_clause
from rollscope.trajectory.diff import turn_text, turns_of, without_ids
from rollscope.trajectory.text import with_text
from rollscope.viewer.charts import Chart, charts, distribution, overlaid, series_charts, sparkline
from rollscope.viewer.chat import ground_truth, turns, with_markers
from rollscope.viewer.tokens import LEGENDS, drift_span, retokenization, token_view, training_token_view
from rollscope.viewer.views import (
    bounded_tree,
    figures,
    first_user_message,
    fmt,
    main_text,
    outline,
    runs_of,
    span_facts,
    spans_matching,
    table_row,
    tool_call,
    window,
)

PAGE_SIZE = 100
STATIC = {"/static/style.css": ("style.css", "text/css; charset=utf-8")}
SORTS = ORDERS


log = logging.getLogger("rollscope.viewer")


class BadRequest(ValueError):
    """A query parameter that cannot be used; shown to the user as a 400 page."""


class Viewer:
    """Renders pages from a store directory; ``handle`` is the whole web interface, testable without HTTP."""

    def __init__(self, directory: str | None = None, source: str | None = None, wandb_run: str | None = None) -> None:
        """``wandb_run``: a W&B run whose logged metrics ``/metrics`` shows (``sources.wandb_history``:
        an offline run's directory, or entity/project/run_id), read at each request of the page."""
        self.directory = directory
        self.wandb_run = wandb_run
        # One store for every request: its open files, cached per-shard aggregates and index of
        # sealed segments outlive a request, and each query lists the directory again, so new
        # shards and segments show. Requests run side by side on it (the store guards what it
        # shares): a page that reads a long file or a slow shard holds up no other page.
        # (fails now, with the source's message, if it cannot be read)
        self._store = open_source(source, directory, index_segments=True)
        self.env = Environment(
            loader=PackageLoader("rollscope.viewer", "templates"),
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=select_autoescape(default=True),
        )
        self.env.globals.update(
            wandb_run=wandb_run,
            figures=figures,
            main_text=main_text,
            tool_call=tool_call,
            turn_text=turn_text,
            fmt=fmt,
            quote=quote,
            token_view=token_view,
            outline=outline,
            span_facts=span_facts,
            with_markers=with_markers,
        )
        self.routes: dict[str, Callable[[dict[str, str], list[str]], str]] = {
            "/": self.index,
            "/compare": self.compare,
            "/group": self.group,
            "/steps": self.steps,
            "/insights": self.insights,
            "/prompt": self.prompt,
            "/live": self.live,
            "/rescorings": self.rescorings,
            "/run": self.run,
            "/metrics": self.metrics,
        }

    def store(self) -> TraceSource:
        return self._store

    def handle(self, target: str) -> tuple[int, str, bytes]:
        url = urlsplit(target)
        query = parse_qs(url.query)
        single = {k: v[-1] for k, v in query.items() if v and v[-1] != ""}
        try:
            if url.path in STATIC:
                name, content_type = STATIC[url.path]
                return 200, content_type, resources.files("rollscope.viewer").joinpath("static", name).read_bytes()
            if url.path.startswith("/t/") and "/" not in url.path[3:]:
                page = self.trajectory(url.path[3:], single.get("q"), single.get("at"))
                return 200, "text/html; charset=utf-8", page.encode()
            route = self.routes.get(url.path)
            if route is None:
                return self._error(404, f"no page at {url.path}")
            return 200, "text/html; charset=utf-8", route(single, query.get("id", [])).encode()
        except BadRequest as exc:
            return self._error(400, str(exc))
        except (KeyError, FileNotFoundError) as exc:
            return self._error(404, str(exc.args[0] if exc.args else exc))
        except Exception as exc:  # any other failure costs this page only, said on it and in the log
            log.exception("rollscope ui: %s failed", url.path)
            return self._error(500, f"this page failed: {type(exc).__name__}: {exc}")

    def _error(self, status: int, message: str) -> tuple[int, str, bytes]:
        page = self.env.get_template("error.html").render(status=status, message=message, title=str(status))
        return status, "text/html; charset=utf-8", page.encode()

    # ---- pages ----
    def index(self, q: dict[str, str], _: list[str]) -> str:
        filters = _filters(q)
        sort = q.get("sort", "step")
        if sort not in SORTS:
            raise BadRequest(f"sort must be one of {', '.join(SORTS)}")
        page = _int(q, "page", 1, minimum=1)
        store = self.store()
        total = store.count(**filters)
        rows = store.trajectories(
            **filters, order_by=sort, descending=q.get("desc") == "1", limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE
        )
        pages = max(1, -(-total // PAGE_SIZE))
        keep = {k: v for k, v in q.items() if k != "page"}
        experiments = sorted({e for _, e in store.experiments() if e is not None})

        def sort_url(column: str) -> str:
            """A column header's link: sorted by it, ascending, or flipped when it is the sort already."""
            desc = "" if column != sort else ("" if q.get("desc") == "1" else "1")
            return "/?" + urlencode(
                {
                    **{k: v for k, v in keep.items() if k not in ("sort", "desc")},
                    "sort": column,
                    **({"desc": desc} if desc else {}),
                }
            )

        runs = any(r.wandb_run for r in rows)  # the W&B run column, where the page has one
        run_rows = runs_of(store.steps()) if not any(v is not None for v in filters.values()) else []
        return self._render(
            "index.html",
            title="trajectories",
            rows=[table_row(r, runs) for r in rows],
            run_rows=run_rows,
            runs=runs,
            total=total,
            page=page,
            pages=pages,
            q=q,
            sorts=SORTS,
            sort=sort,
            sort_url=sort_url,
            experiments=experiments,
            all_count=store.total() if any(v is not None for v in filters.values()) else total,
            page_url=lambda p: "/?" + urlencode({**keep, "page": p}),
        )

    def trajectory(self, trajectory_id: str, search: str | None = None, at: str | None = None) -> str:
        """A trajectory's page: its span tree beside a window of spans in detail (the one holding
        span ``at``), each span linkable (``#span-ID``); ``search``: the spans whose name, inputs,
        output or error hold it are listed and marked (case aside)."""
        record = self.store().get(trajectory_id)
        with_text(record)
        matches, search_stopped = spans_matching(record, search) if search else ([], None)
        roots = bounded_tree(record.tree())
        shown = window(record.id, roots, at)
        # (a time a row holds in a form no reader expects is None: the spans' own times stand in)
        times = [t for s in record.spans for t in (s.start_ns, s.end_ns) if type(t) is int]
        start = record.start_ns if record.start_ns is not None else min(times, default=0)
        end = record.end_ns if record.end_ns is not None else max(times, default=start)
        total = max(end - start, 1)

        def bar(span: Any) -> tuple[float, float]:
            """(x, width) of a span's bar on a 0..100 axis: SVG geometry, which the page's style policy allows."""
            if type(span.start_ns) is not int:
                return 0.0, 0.2
            left = min(max(100 * (span.start_ns - start) / total, 0), 100)
            width = 100 * ((span.end_ns or span.start_ns) - span.start_ns) / total
            return round(left, 3), round(min(max(width, 0.2), 100 - left), 3)

        rescored = [
            (name, self.store().rescoring(name, ids=[record.id]).rewards.get(record.id))
            for name in self.store().rescoring_names()
        ]
        replays = self.store().trajectories(replay_of=record.id, order_by="start")
        original = self.store().get(record.replay_of).training if record.replay_of else None
        drift = retokenization(record)
        chats = turns(record, shown.shown)  # (before the note below: it decodes what the window shows)
        return self._render(
            "trajectory.html",
            title=record.id,
            t=record,
            roots=roots,
            window=shown,
            prompts=record.prompts,
            bar=bar,
            turns=chats,
            tokenizer_changed=(record.attributes or {}).get(TOKENIZER_CHANGED) or record.prompts.note,
            task=first_user_message(record),
            truth=ground_truth(record),
            replays=replays,
            rescored=[(name, r) for name, r in rescored if r is not None],
            training=record.training,
            tv=training_token_view(record),
            original=original,
            drift=drift,
            drift_at=drift_span(record, drift),
            threshold=Thresholds().logprob_delta,
            overlay_legends=LEGENDS,
            search=search,
            matches=matches,
            search_stopped=search_stopped,
            matched={s.id for s in matches},
        )

    def compare(self, q: dict[str, str], ids: list[str]) -> str:
        ids = list(dict.fromkeys(i for i in ids if i))
        if not 2 <= len(ids) <= 4:
            raise BadRequest(f"compare takes 2 to 4 trajectories (id=...&id=...), got {len(ids)}")
        records = [self.store().get(i) for i in ids]
        for r in records:
            with_text(r)
        columns = [turns_of(r) for r in records]  # a row per model turn, its tool calls under it
        rows = []
        for i in range(max(len(c) for c in columns)):
            cells = [c[i] if i < len(c) else None for c in columns]
            # what was said and done, per-call ids aside (they differ between any two rollouts)
            texts = [
                None
                if cell is None
                else [(s.name, without_ids(turn_text(s)), s.status) for s in (cell[0], *cell[1]) if s is not None]
                for cell in cells
            ]
            rows.append((i, cells, [t != texts[0] for t in texts]))
        # what each was asked and the right answer: a reward of 1 beside one of 0 says why
        tasks = [(first_user_message(r), ground_truth(r)) for r in records]
        return self._render("compare.html", title="compare", records=records, rows=rows, tasks=tasks)

    def group(self, q: dict[str, str], _: list[str]) -> str:
        step = _int(q, "step", None)
        if step is None or "sample" not in q:
            raise BadRequest("a group is named by step and sample: /group?step=S&sample=I")
        sample = _sample(q)
        filters = {k: q[k] for k in ("experiment", "project") if k in q}
        found = self.store().groups(step, sample, **filters)
        if not found:
            raise KeyError(f"no trajectories for step {step}, sample {sample}")
        rescored = _rescoring(self.store(), q["rescoring"]).rewards if q.get("rescoring") else None
        groups = []
        for records in found:  # one per experiment: advantages never mix runs
            mean, std, members = group_advantages(records)
            other = None
            if rescored is not None:  # the rescoring's reward and advantage beside the run's, rollout by rollout
                rewards = [rescored[r.id].reward if r.id in rescored else None for r in records]
                other = [(reward, adv) for reward, (adv, _) in zip(rewards, advantages(rewards)[2], strict=True)]
            rewarded = sum(r.reward is not None for r in records)
            groups.append(
                {
                    "project": records[0].project,
                    "experiment": records[0].experiment,
                    "mean": mean,
                    "std": std,
                    "members": members,
                    "rewarded": rewarded,
                    "zero_variance": std == 0 and rewarded >= Thresholds().min_group,
                    "rescored": other,
                    "compare": "/compare?" + urlencode([("id", r.id) for r in records[:4]]),
                }
            )
        return self._render(
            "group.html",
            title=f"group {step}/{sample}",
            step=step,
            sample=sample,
            groups=groups,
            rescoring=q.get("rescoring"),
        )

    def rescorings(self, q: dict[str, str], _: list[str]) -> str:
        """The rescorings stored beside the run (``rollscope rescore``), or one of them (``name``):
        per step what changed, and each group GRPO would have treated differently."""
        store = self.store()
        if q.get("name"):
            return self._render(
                "rescorings.html", title=f"rescoring {q['name']}", listed=[], rescoring=_rescoring(store, q["name"])
            )
        listed = [store.rescoring(name) for name in store.rescoring_names()]
        return self._render("rescorings.html", title="rescorings", listed=listed, rescoring=None)

    def steps(self, q: dict[str, str], _: list[str]) -> str:
        filters = _filters(q)
        runs: dict[tuple, list] = {}
        for s in self.store().steps(**filters):  # one section per experiment: its steps are its own
            runs.setdefault((s.project, s.experiment), []).append(s)
        found = {
            (i.project, i.experiment): i
            for i in insights(
                self.store(), experiment=filters["experiment"], project=filters["project"], validate=filters["validate"]
            )
        }
        training: dict[tuple, dict] = {}
        for r in self.store().training_records(project=filters["project"], experiment=filters["experiment"]):
            training.setdefault((r.project, r.experiment), {}).setdefault(r.step, []).append(r)
        sections = [
            {
                "project": p,
                "experiment": e,
                "stats": stats,
                "charts": [
                    *charts(stats, _insight_series(found.get((p, e)))),
                    *_training_charts(training.get((p, e)), found.get((p, e))),
                ],
            }
            for (p, e), stats in runs.items()
        ]
        return self._render("steps.html", title="steps", sections=sections, q=q)

    def metrics(self, q: dict[str, str], _: list[str]) -> str:
        """The W&B run's logged metrics, one chart each over its steps, each step's dot a link to
        that step's trajectories (of ``experiment``, when given)."""
        if self.wandb_run is None:
            raise KeyError("no W&B run given: rollscope ui --wandb-run DIR_OR_ENTITY/PROJECT/RUN_ID")
        history = self._history()
        experiment = q.get("experiment")

        def link(step: Any) -> str:
            return "/?" + urlencode({"step": step, **({"experiment": experiment} if experiment else {})})

        found = series_charts(history.all_series(), link)
        return self._render("metrics.html", title="W&B run", history=history, charts=found, where=self.wandb_run)

    def _history(self) -> RunHistory:
        try:
            return read_history(self.wandb_run)
        except HistoryError as exc:
            raise BadRequest(str(exc)) from None

    def prompt(self, q: dict[str, str], _: list[str]) -> str:
        if "sample" not in q:
            raise BadRequest("a prompt is named by its sample index: /prompt?sample=I")
        sample = _sample(q)
        history = prompt_history(self.store(), sample, experiment=q.get("experiment"), project=q.get("project"))
        if not history:
            raise KeyError(f"no trajectories for sample {sample}")
        return self._render("prompt.html", title=f"prompt {sample}", sample=sample, history=history)

    def insights(self, q: dict[str, str], _: list[str]) -> str:
        """Every signal per experiment and step; ``check``: a rescoring the reward is compared
        with (``reward_vs_check``), as ``rollscope insights --check``."""
        steps = (_int(q, "from", None), _int(q, "to", None))
        check = _checked_name(self.store(), q.get("check"))
        runs = insights(
            self.store(),
            experiment=q.get("experiment"),
            steps=steps,
            validate=_flag(q, "validate") or False,
            check=check,
        )
        if self.wandb_run is not None:  # the training run's metrics that jumped at these steps
            series = self._history().all_series()
            for run in runs:
                run.metrics = metric_changes(series, run)
        rows = []
        for run in runs:
            table = []
            for name, (counts, meaning) in SIGNALS.items():
                series = run.of(name)
                if not series:  # the trainer's signals, for a run no trainer recorded
                    continue
                table.append(
                    {
                        "name": name,
                        "counts": counts,
                        "meaning": meaning,
                        "series": series,
                        "total": _overall(series),
                        "trend": sparkline(series),
                        "flagged": [s.step for s in series if s.flagged],
                        "examples": _examples_of(series),
                    }
                )
            rows.append((run, table))
        names = self.store().rescoring_names()
        return self._render("insights.html", title="insights", runs=rows, q=q, names=names, check=check)

    def run(self, q: dict[str, str], _: list[str]) -> str:
        """One run (an experiment) whole: its reward per step beside each rescoring's, the
        reward-hacking signals' onsets marked on that curve, and each signal's example
        trajectories. ``check``: the rescoring ``reward_vs_check`` compares with (the only one
        stored, when there is one)."""
        experiment, project = q.get("experiment"), q.get("project")
        if not experiment:
            raise BadRequest("a run is named by its experiment: /run?experiment=NAME")
        store = self.store()
        stats = [s for s in store.steps(experiment=experiment, project=project) if s.step is not None]
        if not stats:
            raise KeyError(f"no trajectories of experiment {experiment!r}")
        names = store.rescoring_names()
        check = q.get("check") or (names[0] if len(names) == 1 else None)
        found = insights(store, experiment=experiment, project=project, check=_checked_name(store, check))
        where, params = where_clause(experiment=experiment, project=project, validate=False)
        ids = store.aggregate(f"SELECT id FROM trajectories{where}", params, lambda rows: {r[0] for r in rows})
        series = {"reward (the run's)": {s.step: s.mean_reward for s in stats}}
        for name in names:
            series[f"{name} (rescoring)"] = _step_means(_rescoring(store, name), ids)
        runs = []
        for run in found:
            onsets = run.onsets()
            marks = [(s.step, s.name, f"#signal-{s.name}") for s in onsets]
            runs.append((run, onsets, overlaid("mean reward per step, and each rescoring's", series, marks)))
        return self._render(
            "run.html",
            title=f"run {experiment}",
            runs=runs,
            experiment=experiment,
            check=check,
            names=names,
            signals=SIGNALS,
            q=q,
        )

    def live(self, q: dict[str, str], _: list[str]) -> str:
        """The run as it happens: running trajectories (turns so far, time running, time since
        their last event, stalled ones marked) and the latest ended; the page reloads itself every
        ``refresh`` seconds (a meta refresh: the page runs no script)."""
        experiment = q.get("experiment") or None
        stall = _seconds(q, "stall", 120.0)
        refresh = _seconds(q, "refresh", 2.0)
        now_running = running(self.store(), experiment, stall)
        ended = self.store().trajectories(
            experiment=experiment, ended_after=0, order_by="end", descending=True, limit=20
        )
        return self._render(
            "live.html",
            title="live",
            running=now_running,
            ended=ended,
            stall=stall,
            refresh=refresh,
            q=q,
            stalled=sum(r.stalled for r in now_running),
        )

    def _render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)


def _rescoring(store: TraceSource, name: str) -> rescorings.Rescoring:
    try:
        rescorings.check_name(name)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return store.rescoring(name)


def _checked_name(store: TraceSource, name: str | None) -> str | None:
    """A rescoring the page was asked to check with: its name, or a 404 naming those stored."""
    if name is not None:
        _rescoring(store, name)
    return name


def _step_means(rescoring: rescorings.Rescoring, ids: set[str]) -> dict[Any, float]:
    """A rescoring's mean reward per step, over the trajectories ``ids`` (one run's)."""
    sums: dict[Any, list[float]] = {}
    for tid, r in rescoring.rewards.items():
        if tid in ids and r.reward is not None:
            acc = sums.setdefault(r.step, [0.0, 0.0])
            acc[0] += r.reward
            acc[1] += 1
    return {step: total / n for step, (total, n) in sums.items()}


def _insight_series(found: Any) -> dict[str, dict]:
    """The per-step charts' insight series: zero-variance group share, truncation rate, tool-error rate."""
    if found is None:
        return {}
    return {
        title: {s.step: s.share for s in found.of(name)}
        for title, name in (
            ("zero-variance GRPO groups (share)", "zero_variance"),
            ("truncated replies (share)", "truncated"),
            ("tool errors per tool call", "tool_errors"),
        )
    }


def _training_charts(steps: dict[Any, list] | None, found: Any) -> list[Chart]:
    """What the trainer did, per step: the advantages it trained on (a box per step) and, from
    the trainer's insights, the share of its GRPO groups with every advantage 0, the rollouts'
    mean off-policy lag and the worst log-prob gap."""
    if not steps or found is None:
        return []
    series = {
        title: {sig.step: value(sig) for sig in found.of(name)}
        for title, name, value in (
            ("GRPO groups with every advantage 0 (share)", "zero_advantage", lambda sig: sig.share),
            ("off-policy lag (mean actor updates behind)", "off_policy_lag", lambda sig: sig.detail.get("mean_lag")),
            ("max |trainer - rollout| log-prob (nats)", "logprob_mismatch", lambda sig: sig.detail.get("max_delta")),
        )
    }
    return [
        distribution(
            "advantage per step (min, quartiles, max)",
            {step: [r.advantage for r in rs if r.advantage is not None] for step, rs in steps.items()},
        ),
        *series_charts(series),
    ]


def _overall(series: list[Signal]) -> str:
    """A signal over every step shown: count/total (share), or the drift's last change."""
    if series and series[0].name in ("length_drift", "logprob_drift"):
        change = series[-1].detail.get("change")
        return "-" if change is None else f"{change:+.3g} at step {series[-1].step}"
    count, total = sum(s.count for s in series), sum(s.total for s in series)
    return f"{count}/{total}" + (f" ({count / total:.0%})" if total else "")


def _examples_of(series: list[Signal]) -> list[str]:
    counted = [i for s in series if s.count and s.name not in ("length_drift", "logprob_drift") for i in s.examples]
    return (counted or [i for s in series if s.flagged for i in s.examples])[:5]


_INT_LIMIT = 2**63  # what the store's integer columns hold


def _int(q: dict[str, str], key: str, default: int | None, minimum: int | None = None) -> int | None:
    if key not in q:
        return default
    try:
        value = int(q[key])
    except ValueError:
        raise BadRequest(f"{key} must be an integer, got {q[key][:40]!r}") from None
    if not -_INT_LIMIT <= value < _INT_LIMIT:
        raise BadRequest(f"{key} is out of range")
    if minimum is not None and value < minimum:
        raise BadRequest(f"{key} must be at least {minimum}")
    return value


def _sample(q: dict[str, str]) -> Any:
    """A sample index: an integer when it reads as one (bounded like every integer), else the text."""
    sample = q.get("sample")
    return _int(q, "sample", None) if sample and sample.lstrip("-").isdigit() else sample


def _float(q: dict[str, str], key: str) -> float | None:
    if key not in q:
        return None
    try:
        return float(q[key])
    except ValueError:
        raise BadRequest(f"{key} must be a number, got {q[key]!r}") from None


def _seconds(q: dict[str, str], key: str, default: float) -> float:
    value = _float(q, key)
    if value is None:
        return default
    if not 0 <= value <= 86_400:
        raise BadRequest(f"{key} must be between 0 and 86400 seconds")
    return value


def _flag(q: dict[str, str], key: str) -> bool | None:
    value = q.get(key)
    if value is None:
        return None
    if value not in ("yes", "no"):
        raise BadRequest(f"{key} must be yes or no")
    return value == "yes"


def _filters(q: dict[str, str]) -> dict[str, Any]:
    return {
        "project": q.get("project"),
        "experiment": q.get("experiment"),
        "step": _int(q, "step", None),
        "sample_index": _sample(q),
        "rollout_n": _int(q, "rollout", None),
        "validate": _flag(q, "validate"),
        "agent": q.get("agent"),
        "status": q.get("status"),
        "min_reward": _float(q, "min_reward"),
        "max_reward": _float(q, "max_reward"),
        "has_error": _flag(q, "errors"),
        "tool_error": _flag(q, "tool_errors"),
        "wandb_run": q.get("wandb_run") or None,
    }


class _Handler(BaseHTTPRequestHandler):
    viewer: Viewer
    allowed_hosts: frozenset[str]
    timeout = 10  # seconds a connection may take to send its request (idle half-sent ones are dropped)

    def do_GET(self) -> None:
        started = time.perf_counter()
        if _host_name(self.headers.get("Host", "")) not in self.allowed_hosts:
            # another name pointing here (DNS rebinding: a web page reading the viewer): not ours to answer
            status, content_type, body = 421, "text/plain; charset=utf-8", b"misdirected request: unknown host\n"
        else:
            status, content_type, body = self.viewer.handle(self.path)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Server-Timing", f"app;dur={1000 * (time.perf_counter() - started):.1f}")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'none'")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _host_name(header: str) -> str:
    """The name of a Host header, without its port ('[::1]:8765' -> '[::1]', 'LocalHost' -> 'localhost')."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def make_server(
    directory: str | None,
    host: str = "127.0.0.1",
    port: int = 8765,
    allowed_hosts: tuple[str, ...] = (),
    source: str | None = None,
    wandb_run: str | None = None,
) -> ThreadingHTTPServer:
    """The viewer's HTTP server, answering only requests addressed to ``host``, 127.0.0.1,
    localhost, [::1] or one of ``allowed_hosts``."""
    names = {host, "127.0.0.1", "localhost", "[::1]", *allowed_hosts}
    names = frozenset(f"[{n}]" if ":" in n and not n.startswith("[") else n.lower() for n in names)
    handler = type("Handler", (_Handler,), {"viewer": Viewer(directory, source, wandb_run), "allowed_hosts": names})
    return ThreadingHTTPServer((host, port), handler)
