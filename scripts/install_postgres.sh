#!/usr/bin/env bash
# Installs the Debian PostgreSQL server binaries (initdb, pg_ctl) where they are absent:
# the sweep's shared-study tests start a throwaway server from them (tests/sweep/conftest.py).
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" > /dev/null; then
    exit 0
fi
if ! command -v apt-get > /dev/null; then
    echo "install_postgres.sh: no apt-get; install the PostgreSQL server by hand (the postgresql tests skip without it)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql > /dev/null
