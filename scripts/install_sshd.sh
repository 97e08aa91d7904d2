#!/usr/bin/env bash
# Installs the Debian OpenSSH server binary (sshd) where it is absent: the launcher's
# `--hosts` test starts a throwaway sshd in a network namespace of its own, a second
# host on this machine (tests/distributed/test_hosts_over_ssh.py). Nothing is started here.
set -euo pipefail
if [ -x /usr/sbin/sshd ]; then
    exit 0
fi
if ! command -v apt-get > /dev/null; then
    echo "install_sshd.sh: no apt-get; install openssh-server by hand (the --hosts test skips without it)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openssh-server > /dev/null
