"""What redaction costs per trajectory, with detect-secrets' detectors compiled in and without them
(the hand-written shapes alone), side by side, alternating, on the same payloads.

A trajectory here is what a 3-turn tool loop's spans hand the redactor: a ChatML prompt growing
each turn (system prompt, task, earlier turns), three replies, two tool calls and their results —
about 3.5 KB of text in 10 strings, no secret in it (the common case; a line holding a keyword or a
credential shape costs more, and is rare). Redaction runs where spans are shaped: in the trace
sidecar or the exporter's thread, never on the rollout's.

usage: python benchmarks/bench_redaction.py [--trajectories 300] [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

SYSTEM = "You are a careful assistant. Use the calculator tool for arithmetic; answer in one sentence.\n"
TASK = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May? ") * 3  # fmt: skip


def trajectory(i: int) -> list[str]:
    prompt = (f"<|im_start|>system\n{SYSTEM * 4}<|im_end|>\n<|im_start|>user\n{TASK}{i}<|im_end|>\n"
              "<|im_start|>assistant\n")
    replies = ['<tool_call>{"name": "calculator", "arguments": {"expression": "48 / 2"}}</tool_call>',
               '<tool_call>{"name": "calculator", "arguments": {"expression": "48 + 24"}}</tool_call>',
               f"Natalia sold 72 clips altogether in April and May (run {i})."]  # fmt: skip
    out, context = [], prompt
    for n, reply in enumerate(replies):
        out += [context, reply]
        if n < 2:
            result = str([24, 72][n])
            out += ['{"expression": "48 / 2"}', result]
            context += f"{reply}<|im_end|>\n<|im_start|>tool\n{result}<|im_end|>\n<|im_start|>assistant\n"
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    from rollscope.tracing._redaction import Redactor

    payloads = [trajectory(i) for i in range(args.trajectories)]
    with_rules = Redactor(include_environment=False)
    shapes_only = Redactor(include_environment=False)
    shapes_only._detectors, shapes_only._keywords = [], []
    variants = (("hand-written shapes only", shapes_only), ("with detect-secrets' detectors", with_rules))
    times: dict[str, list[float]] = {name: [] for name, _ in variants}
    for _ in range(args.rounds):
        for name, redactor in variants:
            t0 = time.perf_counter()
            for strings in payloads:
                for s in strings:
                    redactor.text(s)
            times[name].append((time.perf_counter() - t0) / args.trajectories)
    chars = sum(map(len, payloads[0]))
    result = {"trajectories": args.trajectories, "chars_per_trajectory": chars,
              "strings_per_trajectory": len(payloads[0]),
              **{name: statistics.median(t) * 1e6 for name, t in times.items()}}  # fmt: skip
    result["ratio"] = result["with detect-secrets' detectors"] / result["hand-written shapes only"]
    print(f"redaction per trajectory ({chars:,} chars in {len(payloads[0])} strings): "
          + ", ".join(f"{name} {result[name]:.0f} µs" for name in times) + f" ({result['ratio']:.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
