"""A store on a network file system gets the shared layout by itself: the file system read from
the kernel's mount table (lines as NFS, Lustre, CephFS and FUSE clients write them), the live
database on node-local disk, said once."""

import logging

from rollscope.store.filesystems import filesystem_of, is_network, mounts, node_local_dir
from rollscope.tracing.backends.local import local_dir_for

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
31 27 0:44 / /shared rw,relatime shared:12 - nfs4 fs01:/export/shared rw,vers=4.2,rsize=1048576
32 27 0:45 / /lustre rw,relatime - lustre 10.0.0.1@tcp:/scratch rw,flock
33 31 0:46 / /shared/ceph\\040data rw,relatime - ceph 10.0.0.2:6789:/ rw,name=admin
34 27 0:47 / /home/me/remote rw,nosuid - fuse.sshfs me@host:/data rw,user_id=1000
35 27 0:48 / /scratch rw,relatime - xfs /dev/nvme0n1 rw
"""


def test_the_mount_holding_a_path_is_the_longest_mount_point_above_it():
    assert ("/shared/ceph data", "ceph") in mounts(MOUNTINFO)  # an escaped space in a mount point
    cases = {
        "/shared/run-1/traces": "nfs4",
        "/shared/ceph data/t": "ceph",
        "/lustre/u/t": "lustre",
        "/home/me/remote/t": "fuse.sshfs",
        "/scratch/t": "xfs",
        "/sharedx/t": "ext4",
        "/var/t": "ext4",
    }
    for path, fstype in cases.items():
        assert filesystem_of(path, MOUNTINFO) == fstype, path
    assert [is_network(f) for f in ("nfs4", "lustre", "ceph", "fuse.sshfs", "ext4", "xfs", "tmpfs")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_a_store_on_nfs_writes_its_live_database_on_this_node_and_says_so_once(caplog):
    with caplog.at_level(logging.WARNING, logger="rollscope.tracing"):
        first = local_dir_for("/shared/run-1/traces", MOUNTINFO)
        again = local_dir_for("/shared/run-1/traces", MOUNTINFO)
    assert first == again == str(node_local_dir("/shared/run-1/traces"))
    assert "on nfs4" in caplog.text and caplog.text.count("on nfs4") == 1
    assert local_dir_for("/scratch/traces", MOUNTINFO) is None  # node-local disk: the single-host layout
    assert node_local_dir("/shared/a") != node_local_dir("/shared/b")


def test_this_machines_store_directories_are_local(tmp_path):
    assert not is_network(filesystem_of(tmp_path / "traces"))  # the tests' stores keep the single-host layout
