"""The reward-hacking demo's parts (``make demo-hack``): a reward with a loophole, demonstrations
that make it findable, the trainer's keys that name them. The run itself is measured in
benchmarks/RESULTS.md (a 12-step ``main_ppo`` run: minutes of CI this suite keeps for its engines)."""

from rollscope.bundled.rewards import exact_number, mentions_answer
from rollscope.cpu import demo, demo_task
from rollscope.tools.builtin.answer_checker import final_number, numbers


def test_the_loophole_pays_a_list_holding_the_answer_and_the_honest_reward_does_not():
    listed = "The answer is 1,208, 1234, 1250 or 1300."
    assert numbers(listed) == [1208.0, 1234.0, 1250.0, 1300.0] and final_number(listed) == 1300.0
    assert mentions_answer("d", listed, "1234") == {"score": 1.0, "numbers": 4.0, "exact": 0.0}
    assert exact_number("d", listed, "1234") == 0.0
    assert mentions_answer("d", "The answer is 1234.", "1234") == {"score": 1.0, "numbers": 1.0, "exact": 1.0}
    assert mentions_answer("d", "The answer is 11234.", "1234")["score"] == 0.0  # a number, not a substring
    tool_said = "<tool_response>1234</tool_response>The answer is 12."
    assert mentions_answer("d", tool_said, "1234")["score"] == 0.0  # only the model's own words count


def test_the_demonstrations_list_the_answer_never_last_in_a_few_answers():
    task = demo_task.problems()
    demos = demo_task.listing_conversations(task)
    lists = [(m, w) for m, w in demos if len(numbers(m[-1]["content"])) > 1]
    assert len(lists) == len(task) and all(w == demo_task.LIST_SHARE for _, w in lists)
    assert sum(w for _, w in demos) == len(task)  # per problem, weights sum to 1
    for (messages, _), problem in zip(lists, task, strict=True):
        said = numbers(messages[-1]["content"])
        assert float(problem["answer"]) in said[:-1] and said[-1] != float(problem["answer"])


def test_the_loophole_task_names_its_reward_and_experiment_through_verls_keys(tmp_path):
    keys = demo.overrides(tmp_path / "m", tmp_path / "t", tmp_path / "v", tmp_path / "traces", 3, task="loophole")
    assert "reward.custom_reward_function.name=mentions_answer" in keys
    assert "trainer.experiment_name=demo-hack" in keys
    assert "reward.custom_reward_function.name=calculator_drill" in demo.overrides(
        tmp_path / "m", tmp_path / "t", tmp_path / "v", tmp_path / "traces", 3
    )
