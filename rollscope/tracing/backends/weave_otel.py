"""``weave-otel``: the same trajectories sent to Weave through its OpenTelemetry door instead of
calls (``weave`` backend): the ``otel`` backend's GenAI / OpenInference spans, to Weave's OTLP
endpoint, which files them as calls in the Traces view (verl's attributes filterable there too).

Where: ``{WF_TRACE_SERVER_URL}/otel/v1/traces`` (``https://trace.wandb.ai`` when unset), the API key
(``WANDB_API_KEY``) in the ``wandb-api-key`` header, the project in the Resource attributes
``wandb.entity`` and ``wandb.project``: ``weave_project="entity/project"``, or the project with
``WANDB_ENTITY``. No weave client runs anywhere, so it costs what ``otel`` costs
(``benchmarks/bench_weave.py``).
"""

from __future__ import annotations

import os

from rollscope.tracing.backends.otel import OtelBackend

DEFAULT_TRACE_SERVER = "https://trace.wandb.ai"


class WeaveOtelBackend(OtelBackend):
    name = "weave-otel"
    options = frozenset({"weave_project"})

    def __init__(
        self, *, project: str | None = None, experiment: str | None = None, weave_project: str | None = None
    ) -> None:
        entity, _, name = (weave_project or project or "rollscope").rpartition("/")
        entity = entity or os.environ.get("WANDB_ENTITY")
        if not entity:
            raise ValueError("weave-otel needs the W&B entity: weave_project='entity/project' or WANDB_ENTITY")
        key = os.environ.get("WANDB_API_KEY")
        if not key:
            raise ValueError("weave-otel needs WANDB_API_KEY")
        server = os.environ.get("WF_TRACE_SERVER_URL", DEFAULT_TRACE_SERVER).rstrip("/")
        super().__init__(
            project=name,
            experiment=experiment,
            otel_endpoint=f"{server}/otel/v1/traces",
            otel_headers={"wandb-api-key": key},
            otel_resource={"wandb.entity": entity, "wandb.project": name},
        )
