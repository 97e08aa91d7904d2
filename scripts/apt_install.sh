#!/usr/bin/env bash
# Installs one Debian package where a file it provides is absent: `apt_install.sh PACKAGE FILE_GLOB WHAT`.
# For the servers some tests start themselves (PostgreSQL, sshd); WHAT names the tests that
# skip without it, for a machine with no apt-get. Nothing is started here.
set -euo pipefail
package="$1" provided="$2" what="$3"
if compgen -G "$provided" > /dev/null; then
    exit 0
fi
if ! command -v apt-get > /dev/null; then
    echo "$(basename "$0"): no apt-get; install $package by hand ($what skip without it)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$package" > /dev/null
