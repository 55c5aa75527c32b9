"""Datasets out of traces: ``export`` writes a stored run as rows (Parquet, a ``datasets``
directory, JSONL) or as the chat data it yields (SFT, DPO pairs)."""

from rollscope.datasets.export import FORMATS, Exported, dpo_pair, export, sft_example
from rollscope.datasets.rows import COLUMNS, trajectory_row

__all__ = ["COLUMNS", "FORMATS", "Exported", "dpo_pair", "export", "sft_example", "trajectory_row"]
