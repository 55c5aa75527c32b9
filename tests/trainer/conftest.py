import pytest

from tests.conftest import shared_model


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory):
    """The training demo's warm-started model, with half its demonstrations calling the
    calculator: every run of a few trajectories has tool calls in it."""
    return shared_model(tmp_path_factory, "demo-model", tool_share=0.5)
