"""A W&B run's logged metrics read back (``sources.wandb_history``) from the record files wandb
itself wrote offline: every step's values as logged; a damaged record costs itself, counted; what
is no W&B run is one clear error."""

import pytest

from rollscope.sources.wandb_history import HistoryError, read_history
from tests.sources.wandb_runs import offline_run

ROWS = [
    (
        step,
        {
            "critic/score/mean": 0.1 * step,
            "actor/entropy": 1.0 / step,
            "response_length/mean": 50 + step,
            "note": "text is no metric",
        },
    )
    for step in range(1, 41)
]


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("wandb")
    return directory, offline_run(directory, ROWS)


def test_every_logged_step_reads_back_as_logged(wandb_dir):
    directory, run_id = wandb_dir
    for source in (directory, directory / "wandb", next((directory / "wandb").glob("offline-run-*"))):
        history = read_history(str(source))
        assert history.run == f"/proj/{run_id}" and history.skipped == 0  # (offline: no entity)
        assert history.metrics() == ["actor/entropy", "critic/score/mean", "response_length/mean"]
        assert history.series("actor/entropy") == {step: pytest.approx(1.0 / step) for step, _ in ROWS}
        assert history.series("response_length/mean") == {step: 50.0 + step for step, _ in ROWS}


def test_a_damaged_record_costs_itself_counted(wandb_dir, tmp_path):
    directory, _ = wandb_dir
    [original] = (directory / "wandb").glob("offline-run-*/run-*.wandb")
    data = bytearray(original.read_bytes())
    at = data.index(b"response_length/mean", len(data) // 2)  # inside a record past the middle
    data[at] ^= 0xFF
    damaged = tmp_path / "run-damaged.wandb"
    damaged.write_bytes(bytes(data))
    history = read_history(str(damaged))
    assert history.skipped == 1 and len(history.steps) >= len(ROWS) - 1  # that record only (a step's, or the summary)
    assert all(
        history.steps[step]["response_length/mean"] == 50.0 + step
        for step in history.steps
        if "response_length/mean" in history.steps[step]
    )


def test_what_is_no_run_is_one_clear_error(tmp_path):
    (tmp_path / "run-x.wandb").write_bytes(b"not a record file")
    for source, said in (
        (tmp_path / "run-x.wandb", "not a W&B record file"),
        (tmp_path, "not a W&B record file"),
        (tmp_path / "empty", "no W&B run here"),
        ("not/a-path", "neither"),
    ):
        if source == tmp_path / "empty":
            source.mkdir()
        with pytest.raises(HistoryError, match=said):
            read_history(str(source))


def test_a_pipe_named_as_a_run_is_refused_not_waited_on(tmp_path):
    """A ``run-*.wandb`` that is a FIFO (nobody writing it): reading it would wait for good; it is
    no record file, so the directory holds no run and the file itself is refused, at once."""
    import os
    import threading

    os.mkfifo(tmp_path / "run-stuck.wandb")
    outcome = []

    def read(source):
        try:
            read_history(source)
        except HistoryError as exc:
            outcome.append(str(exc))

    for source in (str(tmp_path), str(tmp_path / "run-stuck.wandb")):
        reader = threading.Thread(target=read, args=(source,), daemon=True)
        reader.start()
        reader.join(10)
        assert not reader.is_alive(), f"read_history({source}) waited on the pipe"
    assert "no W&B run here" in outcome[0] and "not a regular file" in outcome[1]


def test_a_run_is_read_once_for_each_version_of_its_file(wandb_dir, monkeypatch):
    """The viewer asks on every page: the same file, unchanged, is not read again."""
    import os

    directory, _ = wandb_dir
    first = read_history(str(directory))
    opened = []
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: opened.append(a) or real_fdopen(*a, **k))
    assert read_history(str(directory)) is first and not opened
