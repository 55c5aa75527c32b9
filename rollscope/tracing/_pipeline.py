"""Where tracing's work runs: which backends go to the trace sidecar, which stay in this process,
and where events are shaped. The ``Tracer`` captures; this module lays out the rest.

- A backend runs in the sidecar when it can (``Delivery.out_of_process``: the sidecar imports it by module
  path) and its options are plain data; the sidecar shapes its events (JSON-safe, redacted,
  truncated) off the rollout's process.
- A backend handed a live object (a client, say), a class defined in ``__main__``, or any backend
  when the sidecar is off (``sidecar=False`` or ``ROLLSCOPE_TRACE_SIDECAR=0``) or cannot start,
  runs here, behind its own worker thread; events are then shaped on the exporter's thread.
- ``sidecar=N`` (or ``ROLLSCOPE_TRACE_SIDECAR=N``) starts N sidecars, each with whole
  trajectories (``_sidecar.pool``): for a process that traces faster than one core stores.
- ``token2text`` decodes token ids with the traced object's own tokenizer. A tokenizer cannot
  cross to another process, its name (directory or hub name) can: each span carries its
  tokenizer's name over the wire (``_wire``) and the sidecar loads its own copy (with the
  ``tokenizers`` library alone where it can: ``store.text.load_decoder``; importing transformers
  and torch in a niced sidecar under a busy trainer took longer than the run had left), so
  decoding too runs off the rollout's process. A tokenizer the sidecar cannot load leaves ids as
  ids there (said once); readers decode them where the tokenizer is (``store.text``). A tokenizer
  given to ``init_tracing`` that no directory holds (built in memory) is used here.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rollscope.tracing._exporter import BackendWorker, Exporter
from rollscope.tracing._payload import PayloadShaper
from rollscope.tracing._shaping import EventShaper
from rollscope.tracing._sidecar import SidecarError, SidecarPool, SidecarWorker
from rollscope.tracing._sidecar.process import discard_spare, prestart
from rollscope.tracing._wire import tokenizer_name
from rollscope.tracing.backends import TraceBackend, parse_backend_names, resolve_backends

log = logging.getLogger("rollscope.tracing")


@dataclass
class Pipeline:
    exporter: Exporter
    backends: list[TraceBackend]  # those running in this process
    emit_span_start: bool  # some backend shows running spans: begin_span sends a span-start event
    shapes_here: bool  # events are shaped (redacted) in this process, on the exporter's thread


def build_pipeline(
    backend: str | list[str],
    backend_options: dict[str, Any],
    *,
    shaper: PayloadShaper,
    project: str | None,
    experiment: str | None,
    token2text: bool,
    sidecar: bool | int | None,
    max_payload_chars: int | None,
    redact_patterns: Iterable[str],
    max_queue: int,
) -> Pipeline:
    """The exporter and its workers for ``backend`` (names or a comma-separated string).
    ``sidecar``: how many trace sidecars (False: none, True: one)."""
    sidecars = sidecar_count(sidecar)
    common = {"project": project, "experiment": experiment}
    resolved = resolve_backends(parse_backend_names(backend), backend_options)
    outside = [r for r in resolved if sidecars and _can_run_outside(r[1], r[2])]
    workers: list[Any] = []
    # (a tokenizer given here that no directory holds, one built in memory say: decoded here)
    unnamed = token2text and shaper.tokenizer is not None and not os.path.isdir(tokenizer_name(shaper.tokenizer) or "")
    if outside:
        config = {
            "backends": [(n, f"{c.__module__}:{c.__qualname__}", _plain_options(o)) for n, c, o in outside],
            "settings": common,
            "max_payload_chars": max_payload_chars,
            "redact_patterns": list(redact_patterns),
            "max_queue": max_queue,
            # token2text decodes in the sidecar too, with tokenizers it loads by name
            "token2text": token2text,
            "tokenizer": tokenizer_name(shaper.tokenizer),
        }
        shaped_here = len(resolved) > len(outside) or unnamed
        try:
            workers.append(
                SidecarWorker(config, shaped=shaped_here)
                if sidecars == 1
                else SidecarPool(config, shaped_here, sidecars)
            )
        except SidecarError as exc:
            log.warning("%s; tracing into %s in this process instead", exc, ", ".join(n for n, _, _ in outside))
            outside = []
    here = [r for r in resolved if r not in outside]
    try:
        backends = [cls(**common, **options) for _, cls, options in here]
    except BaseException:
        for w in workers:
            w.stop()
            w.close(5.0)
        raise
    workers += [BackendWorker(b, max_queue) for b in backends]
    discard_spare()  # (one started early that no backend here needed)
    shapes_here = bool(here or unnamed)
    exporter = Exporter(workers, EventShaper(shaper) if shapes_here else None)
    return Pipeline(exporter, backends, any(cls.delivery.span_starts for _, cls, _ in resolved), shapes_here)


@contextlib.contextmanager
def early_sidecar(backend: str | list[str], **backend_options: Any) -> Iterator[None]:
    """Within it, the trace sidecar that ``init_tracing(backend, **backend_options)`` would start
    is started already, ahead of its configuration (``process.prestart``): a command that spends
    seconds importing before it traces (``rollscope run``) finds it ready. Nothing is stored until
    ``init_tracing``; one left unconfigured ends with the block."""
    try:
        resolved = resolve_backends(parse_backend_names(backend), backend_options)
        wanted = sidecar_count(None) > 0 and any(_can_run_outside(cls, o) for _, cls, o in resolved)
    except Exception:  # (init_tracing says what is wrong with them)
        wanted = False
    if wanted:
        prestart()
    try:
        yield
    finally:
        discard_spare()


_SWITCH = {"false": 0, "off": 0, "no": 0, "true": 1, "on": 1, "yes": 1}


def sidecar_count(sidecar: bool | int | None) -> int:
    """``init_tracing``'s ``sidecar`` as a count; None: ``ROLLSCOPE_TRACE_SIDECAR`` (default 1)."""
    if sidecar is None:
        value = os.environ.get("ROLLSCOPE_TRACE_SIDECAR", "1").strip().lower()
        try:
            sidecar = _SWITCH[value] if value in _SWITCH else int(value)
        except ValueError:
            raise ValueError(
                f"ROLLSCOPE_TRACE_SIDECAR={value!r}: expected 0 (off), 1 or a number of sidecars"
            ) from None
    if int(sidecar) < 0:
        raise ValueError(f"sidecar={sidecar!r}: expected False, True or a number of sidecars (>= 0)")
    return int(sidecar)


def _can_run_outside(cls: Any, options: dict[str, Any]) -> bool:
    """Out-of-process backends go to the sidecar, which imports them by module path and gets their
    options as data (one given a live object, such as a client, stays in this process)."""
    return (
        isinstance(cls, type)
        and cls.delivery.out_of_process
        and cls.__module__ != "__main__"
        and all(_is_data(v) for v in options.values())
    )


def _is_data(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool | os.PathLike):
        return True
    if isinstance(value, list | tuple):
        return all(_is_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_data(v) for k, v in value.items())
    return False


def _plain_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in options.items()}
