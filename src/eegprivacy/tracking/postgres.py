"""A throwaway local PostgreSQL server: for trying the shared tracking and search setup on one machine (``make
postgres``) and for the loopback tests (``tests/test_postgres_tracking.py``).

:class:`LocalPostgres` runs the distribution's own binaries (``initdb``, ``pg_ctl`` and ``postgres``, found on
``PATH``, under Debian's ``/usr/lib/postgresql/<version>/bin`` or in ``$EEGPRIVACY_PG_BIN``): a fresh cluster
listening on 127.0.0.1 only (no Unix socket), on a free port, with one superuser authenticated by a random
password (scram-sha-256; ``pg_hba.conf`` admits loopback addresses only) and the databases ``mlflow`` and
``optuna`` (MLflow's and Optuna's schemas both keep an ``alembic_version`` table, so they need one database
each). Durability is switched off (``fsync``, ``full_page_writes``): this server is for trying things out, and
the production one is whatever PostgreSQL the project's database machine runs.

PostgreSQL refuses to run as root. Started by root, the cluster belongs to the ``postgres`` system user (else
``nobody``) and every server command runs as that user; when that user cannot reach the requested folder (a
checkout under ``/root``), the cluster lives in a fresh folder under the system temp dir instead, and the
requested folder records where.

The password is never printed: it sits in ``<dir>/pgpass`` (mode 0600, libpq's password-file format), which
every libpq client (psycopg, hence SQLAlchemy, Optuna and ``mlflow server``) reads when ``PGPASSFILE`` names it,
so the URLs this module prints carry no password. :meth:`LocalPostgres.url` with ``password=True`` returns the
full URL for code that needs it, and :func:`eegprivacy.pipeline.search.public_url` masks it wherever it is shown.

CLI (the Makefile's ``postgres`` and ``postgres-stop`` targets)::

    python -m eegprivacy.tracking.postgres start --dir data/postgres   # prints the URLs and the next commands
    python -m eegprivacy.tracking.postgres url --dir data/postgres [--database optuna]
    python -m eegprivacy.tracking.postgres stop --dir data/postgres    # stops it and deletes the cluster
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

BIN_ENV = "EEGPRIVACY_PG_BIN"
DATABASES = ("mlflow", "optuna")
SUPERUSER = "eegprivacy"
STATE = "state.json"
PGPASS = "pgpass"
INSTALL_HINT = ("install PostgreSQL (Debian/Ubuntu: apt-get install -y postgresql; macOS: brew install postgresql) "
                f"or point ${BIN_ENV} at the folder holding initdb, pg_ctl and postgres")


class PostgresNotFound(RuntimeError):
    """No PostgreSQL server binaries (initdb, pg_ctl, postgres) on this machine."""


def find_bin_dir() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``: ``$EEGPRIVACY_PG_BIN``, else ``PATH`` (symlinks
    resolved, as Debian's wrappers in /usr/local/bin or /usr/bin point into the versioned folder), else the newest
    ``/usr/lib/postgresql/<version>/bin`` (Debian and Ubuntu install the server there, off ``PATH``)."""
    candidates = []
    if os.environ.get(BIN_ENV):
        candidates.append(Path(os.environ[BIN_ENV]))
    on_path = shutil.which("initdb")
    if on_path:
        candidates += [Path(on_path).resolve().parent, Path(on_path).parent]
    candidates += sorted((Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
                         key=lambda p: _version_key(p.parent.name), reverse=True)
    for folder in candidates:
        if all(os.access(folder / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    raise PostgresNotFound(f"no PostgreSQL server binaries (initdb, pg_ctl, postgres) found: {INSTALL_HINT}")


def _version_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else -1 for part in name.split("."))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: None (this user) unless we are root, then ``postgres`` or else ``nobody``."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and there is neither a 'postgres' nor a 'nobody' user to run PostgreSQL as "
                       "(it refuses to run as root)")


class LocalPostgres:
    """A throwaway PostgreSQL cluster under ``folder``; a context manager (start on enter, stop and delete on exit).

    ``folder`` keeps ``state.json`` (port, user, databases, where the cluster lives: nothing secret) and
    ``pgpass``; the cluster itself is ``folder/cluster`` unless the server user cannot reach ``folder``."""

    def __init__(self, folder: str | Path, databases=DATABASES, port: int | None = None):
        self.folder = Path(folder).absolute()
        self.databases, self.port = tuple(databases), port
        self.user, self.password, self.cluster = SUPERUSER, None, None
        self._bin = None

    # ---- state --------------------------------------------------------------------------------------------------
    @property
    def pgpass(self) -> Path:
        return self.folder / PGPASS

    @property
    def data_dir(self) -> Path:
        return self.cluster / "pgdata"

    @property
    def log_file(self) -> Path:
        return self.cluster / "server.log"

    def url(self, database: str = "optuna", password: bool = False) -> str:
        """``postgresql://USER@127.0.0.1:PORT/DATABASE``; with ``password`` the password too (never print that
        one: :func:`eegprivacy.pipeline.search.public_url` masks it)."""
        secret = f":{self.password}" if password else ""
        return f"postgresql://{self.user}{secret}@127.0.0.1:{self.port}/{database}"

    def env(self) -> dict[str, str]:
        """Environment for a client that should find the password itself (libpq's ``PGPASSFILE``)."""
        return {**os.environ, "PGPASSFILE": str(self.pgpass)}

    @classmethod
    def load(cls, folder: str | Path) -> LocalPostgres:
        """The server a ``start`` left in ``folder`` (state.json and pgpass)."""
        folder = Path(folder).absolute()
        try:
            state = json.loads((folder / STATE).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no PostgreSQL started in {folder} (no {STATE}): run `start` first") from None
        server = cls(folder, state["databases"], state["port"])
        server.user, server.cluster = state["user"], Path(state["cluster"])
        server.password = (folder / PGPASS).read_text().strip().rsplit(":", 1)[-1]
        return server

    # ---- running commands as the server user --------------------------------------------------------------------
    def _run(self, *command, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        account = _server_user()
        if account is not None:
            kwargs.update(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
        env = {**os.environ, "LC_ALL": "C"}
        if account is not None:
            env["HOME"] = tempfile.gettempdir()
        return subprocess.run([str(c) for c in command], check=check, env=env, capture_output=True, text=True,
                              cwd=tempfile.gettempdir(), **kwargs)

    def _place_cluster(self) -> Path:
        """``folder/cluster`` owned by the server user, or (root, folder out of that user's reach) a temp folder."""
        account = _server_user()
        cluster = self.folder / "cluster"
        cluster.mkdir(mode=0o700)
        if account is None:
            return cluster
        os.chown(cluster, account.pw_uid, account.pw_gid)
        if self._run("/bin/sh", "-c", 'test -w "$1"', "sh", cluster, check=False).returncode == 0:
            return cluster
        cluster.rmdir()
        cluster = Path(tempfile.mkdtemp(prefix="eegprivacy-postgres-"))
        os.chown(cluster, account.pw_uid, account.pw_gid)
        return cluster

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> LocalPostgres:
        """initdb, configure (loopback TCP only, password auth), start, create the databases."""
        self._bin = find_bin_dir()
        if (self.folder / STATE).exists():
            raise FileExistsError(f"a PostgreSQL was already started in {self.folder}: stop it first")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port()
        self.password = secrets.token_urlsafe(24)
        self.cluster = self._place_cluster()
        try:
            self._init_and_start()
        except BaseException:
            self.stop()
            raise
        return self

    def _init_and_start(self) -> None:
        fd, pwfile = tempfile.mkstemp(dir=self.cluster, prefix="pw")
        with os.fdopen(fd, "w") as handle:
            handle.write(self.password + "\n")
        account = _server_user()
        if account is not None:
            os.chown(pwfile, account.pw_uid, account.pw_gid)
        try:
            self._run(self._bin / "initdb", "-D", self.data_dir, "-U", self.user, f"--pwfile={pwfile}",
                      "--auth=scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync")
        except subprocess.CalledProcessError as err:
            raise RuntimeError(f"initdb failed:\n{err.stdout}\n{err.stderr}") from None
        finally:
            os.unlink(pwfile)
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\n# eegprivacy throwaway server (eegprivacy.tracking.postgres)\n"
                       f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = ''\n"
                       "fsync = off\nfull_page_writes = off\nsynchronous_commit = off\nmax_connections = 100\n")
        # initdb's pg_hba.conf admits loopback over TCP (127.0.0.1/32, ::1/128) and the Unix socket, with the auth
        # method given above; nothing else is written to it, and the server listens on 127.0.0.1 only.
        self._write_state()
        started = self._run(self._bin / "pg_ctl", "-D", self.data_dir, "-l", self.log_file, "-w", "-t", "60",
                            "start", check=False)
        if started.returncode != 0:
            tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"pg_ctl start failed ({started.stdout.strip()} {started.stderr.strip()}); "
                               f"server log ends with:\n{tail}")
        self._create_databases()

    def _write_state(self) -> None:
        state = {"port": self.port, "user": self.user, "databases": list(self.databases),
                 "cluster": str(self.cluster), "bin": str(self._bin)}
        (self.folder / STATE).write_text(json.dumps(state, indent=1) + "\n")
        fd = os.open(self.pgpass, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:  # host:port:database:user:password, libpq's format
            handle.write(f"127.0.0.1:{self.port}:*:{self.user}:{self.password}\n")

    def _create_databases(self) -> None:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url("postgres", password=True), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                for name in self.databases:
                    connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()

    def stop(self, remove: bool = True) -> None:
        """Stop the server (fast shutdown) and, with ``remove``, delete the cluster, its state and the pgpass."""
        if self.cluster is not None and (self.data_dir / "postmaster.pid").exists():
            bin_dir = self._bin or Path(json.loads((self.folder / STATE).read_text()).get("bin") or find_bin_dir())
            self._run(bin_dir / "pg_ctl", "-D", self.data_dir, "-m", "fast", "-w", "stop", check=False)
        if remove:
            if self.cluster is not None:
                shutil.rmtree(self.cluster, ignore_errors=True)
            for name in (STATE, PGPASS):
                (self.folder / name).unlink(missing_ok=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ---- CLI -----------------------------------------------------------------------------------------------------------
def _next_steps(server: LocalPostgres) -> str:
    folder = server.folder
    return f"""PostgreSQL {server.user}@127.0.0.1:{server.port} (databases {', '.join(server.databases)}; password in \
{folder / PGPASS}, not printed)
Next, in each shell that uses it:
  export PGPASSFILE={folder / PGPASS}
  .venv/bin/mlflow server --backend-store-uri {server.url('mlflow')} --artifacts-destination {folder / 'artifacts'} \\
      --host 127.0.0.1 --port 5000 --workers 1 &
  export MLFLOW_TRACKING_URI=http://127.0.0.1:5000
  .venv/bin/eegprivacy optuna-study-a --storage {server.url('optuna')} --no-progress   # as many as you like
Stop and delete it: make postgres-stop"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eegprivacy.tracking.postgres",
                                     description="A throwaway local PostgreSQL (loopback only) for MLflow and Optuna.")
    parser.add_argument("command", choices=("start", "stop", "url"))
    parser.add_argument("--dir", default="data/postgres", help="where its state, pgpass (and cluster) live")
    parser.add_argument("--database", default="optuna", choices=DATABASES, help="for `url`")
    parser.add_argument("--port", type=int, help="for `start` (default: a free one)")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            server = LocalPostgres(args.dir, port=args.port).start()
            print(_next_steps(server))
        elif args.command == "url":
            print(LocalPostgres.load(args.dir).url(args.database))
        else:
            LocalPostgres.load(args.dir).stop()
            print(f"PostgreSQL in {args.dir} stopped and deleted")
    except (PostgresNotFound, FileNotFoundError, FileExistsError, RuntimeError) as err:
        print(f"postgres: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
