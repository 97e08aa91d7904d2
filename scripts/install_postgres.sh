#!/usr/bin/env bash
# Installs the Debian PostgreSQL server binaries (initdb, pg_ctl) where they are absent:
# the sweep's shared-study tests start a throwaway server from them (tests/sweep/conftest.py).
exec bash "$(dirname "$0")/apt_install.sh" postgresql "/usr/lib/postgresql/*/bin/pg_ctl" "the postgresql tests"
