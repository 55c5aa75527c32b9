"""What preflight reads of a user's module: never more than its bound, never a failure of its own."""

import os

from rollscope.runner import preflight


def test_a_source_too_deep_or_too_big_or_no_file_is_left_to_the_import(tmp_path):
    deep = tmp_path / "deep.py"
    deep.write_text("X = " + "+".join(["1"] * 20_000) + "\ndef f():\n    pass\n")
    big = tmp_path / "big.py"
    big.write_text("def f():\n    pass\n" + "# " + "x" * (preflight.MAX_SOURCE_BYTES + 1) + "\n")
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    for path in (deep, big, fifo):
        assert preflight._top_level_names(path) is None  # (no RecursionError, no 4 MB read, no hang)
    ok = tmp_path / "ok.py"
    ok.write_text("import os\nX = 1\ndef f():\n    pass\n")
    assert preflight._top_level_names(ok) == {"os", "X", "f"}
