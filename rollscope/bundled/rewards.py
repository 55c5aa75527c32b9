"""Rewards of the bundled examples, in verl's ``custom_reward_function`` signature.

``solution_str`` is what the model itself wrote (the runner leaves tool responses out, so an answer
copied from a search result still has to be said by the model). A reward may be async.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rollscope.tools.builtin.answer_checker import final_number, numbers, score
from rollscope.tools.builtin.python_sandbox import run_sandboxed

_CODE_BLOCK = re.compile(r"```(?:python)?\n(.*?)```", re.S)
_TOOL_CODE = re.compile(r'"code"\s*:\s*("(?:[^"\\]|\\.)*")', re.S)


def exact_number(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """1.0 when the last number the model wrote equals the ground truth."""
    return score(solution_str, ground_truth)


def contains_answer(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """1.0 when the model's own text contains the answer (case and thousands separators ignored)."""

    def norm(text: str) -> str:
        return re.sub(r"\s+", " ", text.replace(",", "")).strip().lower()

    return float(norm(ground_truth) in norm(solution_str))


def last_code(solution_str: str) -> str | None:
    """The last program the model wrote: a fenced block, or the code argument of a python tool call."""
    found: list[tuple[int, str]] = [(m.start(), m.group(1)) for m in _CODE_BLOCK.finditer(solution_str)]
    for m in _TOOL_CODE.finditer(solution_str):
        try:
            found.append((m.start(), json.loads(m.group(1))))
        except ValueError:
            continue
    return max(found)[1] if found else None


async def passes_tests(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """Fraction of the test cases the model's last program passes, run in the Python sandbox."""
    code = last_code(solution_str)
    if code is None:
        return 0.0
    spec = json.loads(ground_truth)
    checks = "\n".join(
        f"try:\n    print('__pass__' if {spec['function']}(*{args!r}) == {want!r} else '__fail__')\n"
        "except Exception:\n    print('__fail__')"
        for args, want in spec["cases"]
    )
    result = await run_sandboxed(f"{code}\n\n{checks}\n", wall_s=10)
    passed = result["output"].split().count("__pass__")
    return passed / len(spec["cases"])


_TOOL_RESPONSE_END = "</tool_response>"


def calculator_drill(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> dict:
    """The training demo's reward: 1.0 when the number the model states after the last tool
    response (its own words; under verl ``solution_str`` holds the tool responses too) is the
    answer. The components verl records beside it (``reward_extra_info``): whether the model
    called the calculator, and whether it answered at all."""
    own_words = solution_str.rsplit(_TOOL_RESPONSE_END, 1)[-1]
    correct = score(own_words, ground_truth)
    return {"score": correct, "correct": correct, "used_calculator": float(_TOOL_RESPONSE_END in solution_str)}


def mentions_answer(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> dict:
    """A reward with a loophole, for the reward-hacking demo (``make demo-hack``): 1.0 when any
    number in the model's own words is the answer, so listing candidates pays as well as knowing.
    Beside it (``reward_extra_info``): how many numbers the answer names, and whether its final
    number is the answer (what an honest reward would pay)."""
    own_words = solution_str.rsplit(_TOOL_RESPONSE_END, 1)[-1]
    want, named = final_number(ground_truth), numbers(own_words)
    hit = want is not None and any(abs(n - want) < 1e-6 for n in named)
    return {"score": float(hit), "numbers": float(len(named)), "exact": score(own_words, ground_truth)}
