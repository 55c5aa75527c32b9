"""The ``wandb`` fixture: W&B's HTTP endpoints on 127.0.0.1 (``tests.doubles.weave_server.WandbStandIn``),
with the environment pointing the real weave client and ``weave.init`` at them, here and in the
trace sidecar."""

import pytest

from tests.doubles.weave_server import WandbStandIn


@pytest.fixture
def wandb(monkeypatch):
    from weave.trace.context.weave_client_context import set_weave_client_global

    stand_in = WandbStandIn()
    for key, value in stand_in.environment().items():
        monkeypatch.setenv(key, value)
    set_weave_client_global(None)
    yield stand_in
    set_weave_client_global(None)
    stand_in.close()
