"""A throw-away PostgreSQL server for tests and benchmarks: initdb + pg_ctl in a temporary
folder, listening on a Unix socket in that folder only (no TCP port, nothing shared with
other tests), stopped and removed on exit.

PostgreSQL refuses to run as root (initdb and postgres exit with "cannot be run as root").
As root, the server runs as the unprivileged user `nobody` (setpriv), with the folder
handed to it; as anyone else, as that user. Either way the client connects as the database
superuser "collage" over the socket, with trust authentication (the socket's folder is the
only way in)."""
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time


def find_bindir():
    """The folder of initdb/pg_ctl/postgres (Debian: /usr/lib/postgresql/NN/bin), or None."""
    override = os.environ.get("COLLAGE_PG_BINDIR")
    candidates = [override] if override else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]),
        reverse=True)
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def missing_reason():
    """Why no server can be started here ("" when one can)."""
    if not find_bindir():
        return ("PostgreSQL server binaries not found (initdb, pg_ctl, postgres under "
                "/usr/lib/postgresql/*/bin; Debian package postgresql, see "
                "scripts/install-deps.sh)")
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return "running as root, and setpriv (util-linux) is missing to drop to nobody"
    return ""


class PostgresServer:
    def __init__(self, user="collage"):
        self.bindir = find_bindir()
        self.user = user
        self.root = tempfile.mkdtemp(prefix="collage-pg-")
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "server.log")
        self.as_root = os.geteuid() == 0
        if self.as_root:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.root, nobody.pw_uid, nobody.pw_gid)
        os.chmod(self.root, 0o755)

    def _run(self, *args, check=True):
        cmd = [os.path.join(self.bindir, args[0]), *args[1:]]
        if self.as_root:
            cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=self.root)
        if check and proc.returncode != 0:
            log = open(self.log).read()[-3000:] if os.path.exists(self.log) else ""
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {proc.stderr}{log}")
        return proc

    def start(self, settings=()):
        # fsync off by default: a test server's data is thrown away; the benchmarks say
        # which settings they ran with.
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", self.user, "-E", "UTF8",
                  "--locale=C", "--no-sync")
        options = ["-k", self.root, "-c", "listen_addresses=", "-c", "max_connections=200"]
        for s in settings or ("fsync=off", "synchronous_commit=off", "full_page_writes=off"):
            options += ["-c", s]
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "-o",
                  " ".join(f"'{o}'" if o.endswith("=") else o for o in options), "start")
        return self

    def url(self, dbname="postgres"):
        return f"postgresql://{self.user}@/{dbname}?host={self.root}"

    def psql(self, sql, dbname="postgres"):
        """Runs SQL with psql; returns stdout (unaligned, tuples only)."""
        psql = os.path.join(self.bindir, "psql")
        proc = subprocess.run([psql, "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.root,
                               "-U", self.user, "-d", dbname, "-c", sql],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"psql failed: {proc.stderr}")
        return proc.stdout

    def create_database(self, name):
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
