"""A throwaway PostgreSQL 15 for end-to-end tests.

    pg = pg_fixture.PostgreSQL(directory)   # initdb + start, on 127.0.0.1:<free port>
    url = pg.create_database("trainyard")   # postgresql://postgres@127.0.0.1:PORT/trainyard
    other = pg.create_database("second")    # another database on the same server
    pg.kill(); pg.start()                   # a crash (pg_ctl stop -m immediate), and back
    pg.stop()                               # pg_ctl stop -m immediate; the directory is removed

initdb runs with -A trust (no passwords; only loopback and a Unix socket in
the directory listen), fsync stays on. Run as root (initdb refuses root), the
server runs as user postgres (runuser), which owns the directory. A helper
process stops the server and removes the directory when this process exits,
however it exits (a test killed on its timeout leaves no PostgreSQL behind).
A missing PostgreSQL is an error naming the package: apt-get install
postgresql-15 (scripts/install-deps.sh installs it); TRAINYARD_PG_BIN
overrides /usr/lib/postgresql/15/bin.
"""
import os
import pwd
import shutil
import socket
import subprocess
import tempfile

PG_BIN = os.environ.get("TRAINYARD_PG_BIN", "/usr/lib/postgresql/15/bin")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgreSQL:
    def __init__(self, directory=None):
        for tool in ("initdb", "pg_ctl", "psql"):
            if not os.access(os.path.join(PG_BIN, tool), os.X_OK):
                raise RuntimeError(f"PostgreSQL 15 is not installed (no {PG_BIN}/{tool}): apt-get install "
                                   "postgresql-15 (scripts/install-deps.sh installs it), or set TRAINYARD_PG_BIN")
        self.as_postgres = []
        if directory is None:
            directory = tempfile.mkdtemp(prefix="trainyard-pg-")
        os.makedirs(directory, exist_ok=True)
        self.dir = os.path.abspath(directory)
        self.data = os.path.join(self.dir, "data")
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no user postgres to run PostgreSQL as (initdb "
                                   "refuses root): apt-get install postgresql-15 makes it") from None
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._let_postgres_reach(self.dir)
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
        self.port = None
        self._watcher = None
        self._start_watcher()
        self._run([f"{PG_BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                   "--locale=C", "--no-sync"])
        for attempt in range(3):  # a free port taken meanwhile: another
            self.port = _free_port()
            try:
                self.start()
                break
            except RuntimeError:
                if attempt == 2:
                    raise

    @staticmethod
    def _let_postgres_reach(path):
        """Directories above `path` in the temporary directory (a test's, mode 0700) get o+x."""
        top = os.path.realpath(tempfile.gettempdir())
        parent = os.path.dirname(os.path.realpath(path))
        while parent.startswith(top + os.sep):
            mode = os.stat(parent).st_mode
            if not mode & 0o001:
                os.chmod(parent, (mode & 0o7777) | 0o001)
            parent = os.path.dirname(parent)

    def _start_watcher(self):
        stop = " ".join(self.as_postgres + [f"{PG_BIN}/pg_ctl", "-D", self.data, "stop", "-m", "immediate"])
        self._watcher = subprocess.Popen(
            ["/bin/sh", "-c", f"read _; {stop} >/dev/null 2>&1; rm -rf '{self.dir}'"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def _run(self, argv):
        done = subprocess.run(self.as_postgres + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stdout}")
        return done.stdout

    def start(self):
        """Starts the server (again, after kill) on its port, waiting until it accepts connections."""
        self._run([f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "-t", "30",
                   "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir}", "start"])

    def kill(self):
        """Stops the server as a crash would: pg_ctl stop -m immediate (the data stays)."""
        self._run([f"{PG_BIN}/pg_ctl", "-D", self.data, "stop", "-m", "immediate"])

    def url(self, database):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql, database="postgres"):
        """Runs `sql` with psql; its output (unaligned, tuples only)."""
        done = subprocess.run([f"{PG_BIN}/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                               "-p", str(self.port), "-U", "postgres", "-d", database, "-c", sql],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"psql {sql!r} failed: {done.stdout}")
        return done.stdout

    def create_database(self, name):
        """A new, empty database on this server: its postgresql:// URL."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"database name {name!r}: letters, digits and _ only")
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self):
        """Stops the server at once (pg_ctl stop -m immediate) and removes its directory."""
        if self._watcher is None:
            return
        self._watcher.stdin.close()  # the helper stops it and removes the directory
        self._watcher.wait(timeout=60)
        self._watcher = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":  # a check by hand: start, two databases, a crash and back, stop
    with PostgreSQL() as pg:
        print(pg.create_database("one"), pg.create_database("two"))
        pg.kill()
        pg.start()
        print(pg.psql("SELECT datname FROM pg_database WHERE datname IN ('one', 'two') ORDER BY 1").split())
