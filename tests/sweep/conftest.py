"""A throwaway PostgreSQL server for the sweep's shared-study tests, from the machine's Debian binaries."""

import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile

import pytest

USER = "opttrain"
DATABASE = "sweeps"
_DATABASES = itertools.count()


def _bin_dir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


def _free_port():
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_server():
    """`createdb(name)` (returns the new database's URL) on one PostgreSQL server initdb'd in a temporary folder,
    stopped after the session.

    PostgreSQL refuses to run as root: as root the server runs as the `postgres` user.
    One server for the session (initdb costs seconds), a new database for each test.
    """
    pytest.importorskip("psycopg", reason="the postgres extra: pip install -e '.[postgres]'")
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (scripts/test.sh installs the Debian package)")
    # Not under pytest's tmp_path: its parents are private to root, and the server's user must reach it.
    root = tempfile.mkdtemp(prefix="opt-train-pg-")
    as_user = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data, port = os.path.join(root, "data"), _free_port()

    def run(*argv):
        subprocess.run([*as_user, *argv], check=True, capture_output=True, cwd=root)

    def createdb(name):
        run(os.path.join(bin_dir, "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, name)
        return f"postgresql://{USER}@127.0.0.1:{port}/{name}"

    run(os.path.join(bin_dir, "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "--no-sync")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    run(os.path.join(bin_dir, "pg_ctl"), "-D", str(data), "-o", options, "-l", os.path.join(root, "log"), "-w", "start")
    try:
        yield createdb
    finally:
        run(os.path.join(bin_dir, "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server):
    """`postgresql://opttrain@127.0.0.1:PORT/sweeps_N`: a new, empty database of the session's server."""
    return postgres_server(f"{DATABASE}_{next(_DATABASES)}")
