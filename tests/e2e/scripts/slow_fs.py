"""A FUSE file system that answers every lookup slowly, as a hung network
mount or a hostile user's FUSE mount does: `slow_fs.py MOUNTPOINT SECONDS`.

It holds one directory, /data (empty); every getattr but the root's waits
SECONDS first. Runs in the foreground until unmounted (fusermount -u).
"""
import errno
import stat
import sys
import time

from fusepy import FUSE, FuseOSError, Operations


class Slow(Operations):
    def __init__(self, delay):
        self.delay = delay

    def getattr(self, path, fh=None):
        if path != "/":
            time.sleep(self.delay)
        if path in ("/", "/data"):
            return dict(st_mode=stat.S_IFDIR | 0o755, st_nlink=2)
        raise FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "data"] if path == "/" else [".", ".."]


if __name__ == "__main__":
    FUSE(Slow(float(sys.argv[2])), sys.argv[1], foreground=True, nothreads=False)
