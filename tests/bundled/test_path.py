"""``rollscope.bundled.path``: a shipped file by its name, found inside the package and nowhere
else, whatever the name tries."""

import pytest

from rollscope import bundled


def test_a_shipped_file_is_found_by_its_name():
    found = bundled.path("agent_loops.yaml")
    assert found.is_file() and found.parent.name == "verl" and bundled.BUNDLED_DIR in found.parents


@pytest.mark.parametrize(
    "name", ["../../../../etc/passwd", "/etc/passwd", "verl/../../__init__.py", "../bundled/agent_loops.yaml"]
)
def test_a_name_that_leads_out_of_the_package_is_no_shipped_file(name):
    with pytest.raises(FileNotFoundError, match="no shipped file"):
        bundled.path(name)


def test_a_link_out_of_the_package_is_no_shipped_file(tmp_path, monkeypatch):
    """(the package's folders stood in for by one of the test's, holding a link out of it)"""
    shipped, outside = tmp_path / "shipped", tmp_path / "secret.yaml"
    shipped.mkdir()
    outside.write_text("x: 1\n")
    (shipped / "real.yaml").write_text("y: 2\n")
    (shipped / "link.yaml").symlink_to(outside)
    monkeypatch.setattr(bundled, "_FOLDERS", (shipped,))
    assert bundled.path("real.yaml") == shipped / "real.yaml"
    with pytest.raises(FileNotFoundError):
        bundled.path("link.yaml")
