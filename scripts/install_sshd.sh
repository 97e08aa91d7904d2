#!/usr/bin/env bash
# Installs the Debian OpenSSH server binary (sshd) where it is absent: the launcher's
# `--hosts` test starts a throwaway sshd in a network namespace of its own, a second
# host on this machine (tests/distributed/test_hosts_over_ssh.py).
exec bash "$(dirname "$0")/apt_install.sh" openssh-server /usr/sbin/sshd "the --hosts test"
