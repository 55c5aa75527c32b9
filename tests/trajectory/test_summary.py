"""The final answer a trajectory gives (``summary.final_answer``, ``answer_key``): what a grader
would extract, so that one answer worded per prompt is one answer, and a listing of candidates is
the list, not its last number."""

import pytest

from rollscope.trajectory.summary import answer_key, final_answer


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("Working... so \\boxed{\\frac{1}{2}} is it", "\\frac{1}{2}"),
        ("\\boxed{x^{2}} then \\boxed{42}", "42"),
        ("<answer> 17 </answer>", " 17 "),
        ("<answer></answer>", ""),
        ("The answer is 12. Let me double check: 3 * 4 = 12.", "12"),
        ("The answer is 98, 100, 103 or 107.", "98, 100, 103 or 107"),
        ("Final answer: 42", "42"),
        ("#### 1,234", "1,234"),
        ("The answer is 3.5.", "3.5"),
        ("Since it asks about 103, I would say 42.", "42"),
        ("a5", "a5"),  # no number of its own: the last line
        ("no number here\nthe last line", "the last line"),
    ],
)
def test_the_final_answer_is_what_a_grader_would_extract(reply, answer):
    assert final_answer(reply) == answer


def test_one_answer_worded_per_prompt_is_one_key_and_a_list_is_not_its_last_number():
    assert answer_key("Final answer: 42") == answer_key("Since it asks about 103, I would say 42.") == "42"
    assert answer_key("The answer is 98, 100 or 103.") == "98 100 or 103"
    assert answer_key(None) == answer_key("<answer></answer>") == ""
