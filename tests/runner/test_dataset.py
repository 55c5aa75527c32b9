import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rollscope.runner.dataset import DatasetError, load_rows, loop_kwargs

ROW = {
    "data_source": "d",
    "prompt": [{"role": "user", "content": "hi"}],
    "reward_model": {"ground_truth": "1"},
    "extra_info": {"index": 7, "tools_kwargs": {"t": {"create_kwargs": {"x": 1}}}},
}


def test_jsonl_and_parquet_give_the_same_rows(tmp_path):
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text(json.dumps(ROW) + "\n\n" + json.dumps({**ROW, "extra_info": {"index": 8}}) + "\n")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(load_rows(jsonl)), parquet)
    for path in (jsonl, parquet):
        rows = load_rows(path)
        assert [r["extra_info"]["index"] for r in rows] == [7, 8]
    assert len(load_rows(jsonl, limit=1)) == 1


def test_loop_kwargs_have_verls_shape():
    kwargs = loop_kwargs(ROW, position=0)
    assert kwargs["raw_prompt"] == ROW["prompt"]
    assert kwargs["index"] == 7
    assert kwargs["tools_kwargs"] == {"t": {"create_kwargs": {"x": 1}}}
    assert loop_kwargs({"prompt": ROW["prompt"]}, position=3)["index"] == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": [{"role": "user", "content": "a"}]}\n{oops\n', "line 2: invalid JSON"),
        ('{"prompt": "just text"}\n', "row 1: 'prompt' must be a non-empty list"),
        ('{"prompt": [{"text": "a"}]}\n', "row 1: each prompt message needs 'role' and 'content'"),
        ("\n", "no rows"),
    ],
)
def test_bad_rows_name_file_and_row(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError) as info:
        load_rows(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_missing_and_unknown_files(tmp_path):
    with pytest.raises(DatasetError, match="dataset not found"):
        load_rows(tmp_path / "none.jsonl")
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(DatasetError, match=r"unknown dataset format '\.csv'"):
        load_rows(tmp_path / "d.csv")
