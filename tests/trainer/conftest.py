import pytest

from rollscope.trainer import demo_task


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory):
    """The training demo's warm-started model, with half its demonstrations calling the
    calculator: every run of a few trajectories has tool calls in it."""
    return demo_task.build_model(tmp_path_factory.mktemp("demo_model"), demo_task.problems(), tool_share=0.5)
