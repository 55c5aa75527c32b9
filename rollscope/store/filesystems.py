"""Which file system a store directory is on, and where its live database goes when that is a
network file system.

SQLite's WAL mode keeps its index in shared memory (``-shm``), which NFS, Lustre, GPFS, CephFS,
CIFS or a FUSE mount do not keep coherent between hosts: a store there is written in the
shared-filesystem layout (``segments``), its live databases on node-local disk. Detected from the
kernel's mount table (``/proc/self/mountinfo``), so a store on a cluster's shared home gets that
layout without anyone knowing to ask for it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

# File system types (mountinfo's) whose files are shared between hosts; any ``fuse.*`` too (sshfs,
# s3fs, gcsfuse, ...): a FUSE file system's coherence is its daemon's, not the kernel's.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "ceph",
        "cifs",
        "smb3",
        "smbfs",
        "beegfs",
        "glusterfs",
        "9p",
        "afs",
        "panfs",
        "wekafs",
        "ocfs2",
        "gfs2",
        "fuse",
        "fuseblk",
        "virtiofs",
        "orangefs",
        "pvfs2",
    }
)
MOUNTINFO = "/proc/self/mountinfo"


def _unescape(field: str) -> str:
    r"""mountinfo writes space, tab, newline and backslash in paths as octal (``\040``)."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, file system type) per line of a mountinfo text."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields or len(fields) < 7:
            continue
        dash = fields.index("-")
        if dash + 1 < len(fields):
            found.append((_unescape(fields[4]), fields[dash + 1]))
    return found


def filesystem_of(path: str | os.PathLike, mountinfo: str | None = None) -> str | None:
    """The type of the file system holding ``path`` (which need not exist yet): the mount with the
    longest mount point above it. None: no mount table."""
    if mountinfo is None:
        try:
            mountinfo = Path(MOUNTINFO).read_text()
        except OSError:
            return None
    target = existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    resolved = str(existing.resolve() / target.relative_to(existing))  # (links resolved where they exist)
    best, kind = -1, None
    for point, fstype in mounts(mountinfo):
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and len(point) > best:
            best, kind = len(point), fstype
    return kind


def is_network(fstype: str | None) -> bool:
    return fstype is not None and (fstype in NETWORK_FILESYSTEMS or fstype.startswith("fuse."))


def node_local_dir(shared: str | os.PathLike) -> Path:
    """Where a writer on this node keeps the live database of the store at ``shared``: under the
    node's temporary directory, one folder per user and store (the same for every writer of that
    store here, so one that starts after another died publishes what it left)."""
    key = hashlib.sha1(str(Path(shared).absolute()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"rollscope-{os.getuid()}" / key
