"""Writes the bundled example datasets (run it to regenerate them: ``python -m rollscope.bundled.make_data``).

All three are made here from templates with a fixed seed, so they carry no third-party license and
every answer is known exactly. Rows have verl's RLHFDataset shape: ``data_source``, ``prompt``
(chat messages), ``reward_model.ground_truth``, ``extra_info.index`` and ``extra_info.tools_kwargs``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DATA = Path(__file__).with_name("data")

WORD_PROBLEMS = [
    ("{name} packs {a} boxes with {b} apples in each box. How many apples does {name} pack?", lambda a, b: a * b),
    ("A shelf holds {a} books. How many books do {b} such shelves hold, as {name} counts them?", lambda a, b: a * b),
    ("{name} had {a} marbles and won {b} more. How many marbles does {name} have now?", lambda a, b: a + b),
    ("A tank holds {a} litres. {name} drains {b} litres. How many litres are left?", lambda a, b: a - b),
    ("{name} shares {p} stickers equally among {b} friends. How many stickers does each friend get?", lambda a, b: a),
    ("A train travels {a} km every hour for {b} hours. How far does it go?", lambda a, b: a * b),
    (
        "{name} saves {a} dollars a week for {b} weeks, then spends 15 dollars. How much is left?",
        lambda a, b: a * b - 15,
    ),
]
NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Jude"]

CODE_TASKS = [
    (
        "Write a Python function `add(a, b)` that returns the sum of a and b.",
        "add",
        [([2, 3], 5), ([-1, 1], 0), ([10, 32], 42)],
    ),
    (
        "Write a Python function `is_even(n)` that returns True when n is even.",
        "is_even",
        [([4], True), ([7], False), ([0], True)],
    ),
    (
        "Write a Python function `reverse(s)` that returns the string s reversed.",
        "reverse",
        [(["abc"], "cba"), ([""], ""), (["racecar"], "racecar")],
    ),
    (
        "Write a Python function `factorial(n)` that returns n! for n >= 0.",
        "factorial",
        [([0], 1), ([5], 120), ([6], 720)],
    ),
    (
        "Write a Python function `maximum(xs)` that returns the largest number in the list xs.",
        "maximum",
        [([[1, 5, 3]], 5), ([[-2, -9]], -2), ([[7]], 7)],
    ),
    (
        "Write a Python function `count_vowels(s)` that returns how many vowels (aeiou) are in s.",
        "count_vowels",
        [(["hello"], 2), (["sky"], 0), (["aeiou"], 5)],
    ),
    (
        "Write a Python function `fib(n)` returning the n-th Fibonacci number, fib(0)=0, fib(1)=1.",
        "fib",
        [([0], 0), ([1], 1), ([10], 55)],
    ),
    (
        "Write a Python function `square_all(xs)` that returns a list of the squares of xs.",
        "square_all",
        [([[1, 2, 3]], [1, 4, 9]), ([[]], []), ([[-3]], [9])],
    ),
]

QUESTIONS = [
    ("How tall is Mount Everest in metres?", "8,849"),
    ("Who created the Python programming language?", "Guido van Rossum"),
    ("In which year was the Eiffel Tower completed?", "1889"),
    ("What is the capital city of Australia?", "Canberra"),
    ("How many moons does Mars have?", "two"),
    ("What is the speed of light in vacuum in metres per second?", "299,792,458"),
    ("Who first released the Linux kernel?", "Linus Torvalds"),
    ("What is the largest animal known to have ever existed?", "blue whale"),
    ("In which year did Albert Einstein receive the Nobel Prize in Physics?", "1921"),
    ("What is the capital of Canada?", "Ottawa"),
    ("At what temperature in Celsius does water boil at standard pressure?", "100"),
    ("What is the second-highest mountain on Earth?", "K2"),
]


def arithmetic(n: int = 40, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        template, answer = WORD_PROBLEMS[i % len(WORD_PROBLEMS)]
        a, b = rng.randint(12, 99), rng.randint(3, 19)
        question = template.format(name=rng.choice(NAMES), a=a, b=b, p=a * b)
        truth = str(answer(a, b))
        rows.append(
            {
                "data_source": "rollscope/arithmetic",
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": truth},
                "extra_info": {
                    "index": i,
                    "split": "test",
                    "tools_kwargs": {"submit_answer": {"create_kwargs": {"ground_truth": truth}}},
                },
            }
        )
    return rows


def code_tasks() -> list[dict]:
    return [
        {
            "data_source": "rollscope/code",
            "prompt": [{"role": "user", "content": task}],
            "ability": "code",
            "reward_model": {"style": "tests", "ground_truth": json.dumps({"function": fn, "cases": cases})},
            "extra_info": {"index": i, "split": "test"},
        }
        for i, (task, fn, cases) in enumerate(CODE_TASKS)
    ]


def search_questions() -> list[dict]:
    return [
        {
            "data_source": "rollscope/search_qa",
            "prompt": [{"role": "user", "content": question}],
            "ability": "qa",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"index": i, "split": "test"},
        }
        for i, (question, answer) in enumerate(QUESTIONS)
    ]


def main() -> None:
    DATA.mkdir(exist_ok=True)
    for name, rows in (("arithmetic", arithmetic()), ("code_tasks", code_tasks()), ("search_qa", search_questions())):
        path = DATA / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"{path}: {len(rows)} rows")


if __name__ == "__main__":
    main()
