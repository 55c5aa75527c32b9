"""Everything rollscope ships to run, as files: the bundled examples (``rollscope run NAME``: the
run configs here, their ``data/`` and ``rewards``), the files verl's config keys take (``verl/``:
the agent-loop registry for ``agent_loop_config_path``, tool YAML for ``tool_config_path``) and
chat templates (``templates/``)."""

from pathlib import Path

BUNDLED_DIR = Path(__file__).parent
_FOLDERS = (BUNDLED_DIR, BUNDLED_DIR / "verl", BUNDLED_DIR / "templates")


def path(name: str) -> Path:
    """Absolute path of a shipped file by its name, for verl's ``*_config_path`` keys
    (``python -c "import rollscope.bundled as b; print(b.path('agent_loops.yaml'))"``). A name is
    looked up inside the package only: one that leads out of its folder (``../``, an absolute
    path, a link out) is no shipped file."""
    for folder in _FOLDERS:
        found = (folder / name).resolve()
        if found.is_file() and found.parent == folder.resolve():
            return folder / name
    available = ", ".join(sorted(f.name for folder in _FOLDERS for f in folder.glob("*.*") if f.suffix != ".py"))
    raise FileNotFoundError(f"no shipped file {name!r}; available: {available}")


def replies_file(name: str) -> Path | None:
    """A scripted model's replies file (``--llm scripted:NAME``): the file at that path, else the one
    shipped by that name (``scripted_replies.yaml``: the quickstart's, from any directory); None
    where neither is."""
    given = Path(name)
    if given.is_file():
        return given
    try:
        return path(name)
    except FileNotFoundError:
        return None
