"""Where a launched job's workers run: `host:slots` lists, which hosts are this machine, free ports, and ssh to the others."""

from __future__ import annotations

import socket
from typing import NamedTuple

SSH_OPTIONS = ("-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no")


class Ssh(NamedTuple):
    """How the launcher reaches other hosts: `port` (None: 22) and `identity_file` (None: ssh's own keys),
    as horovodrun's `--ssh-port` and `--ssh-identity-file`."""

    port: int | None = None
    identity_file: str | None = None


def parse_hosts(hosts):
    """`host:slots,...` as `[(host, slots)]` (the CLI has checked the syntax)."""
    pairs = []
    for item in hosts.split(","):
        name, _, count = item.rpartition(":")
        pairs.append((name, int(count)))
    return pairs


def is_local(host):
    """Whether `host` names this machine: a loopback name, or an address a socket here can bind."""
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return False  # unknown here: ssh will say so in the worker's last line
    if address.startswith("127."):
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def free_ports(count, everywhere=False):
    """`count` distinct TCP ports free on this machine now (held together while picked, so distinct)."""
    sockets = []
    try:
        for _ in range(count):
            handle = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            handle.bind(("" if everywhere else "127.0.0.1", 0))
            sockets.append(handle)
        return [handle.getsockname()[1] for handle in sockets]
    finally:
        for handle in sockets:
            handle.close()


def ssh_argv(host, shell_command, ssh=None):
    """ssh to `host` without a password prompt (as horovodrun does), running `shell_command`.

    `ssh`: an `Ssh` (the port and key to use), or None for ssh's own defaults.
    """
    ssh = ssh or Ssh()
    extra = [*(("-p", str(ssh.port)) if ssh.port else ()), *(("-i", ssh.identity_file) if ssh.identity_file else ())]
    return ["ssh", *SSH_OPTIONS, *extra, host, shell_command]


def address_towards(host):
    """This machine's address on its route to `host`: where workers there can reach the ones here.

    Not the host name: /etc/hosts often maps it to a loopback address (Debian's
    127.0.1.1), which would send the remote workers to themselves. A UDP socket's
    connect picks the route and sends nothing. A host that does not resolve here
    leaves the host name (ssh will name the problem).
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


def is_loopback(host):
    """Whether `host` is a loopback name or address (`localhost`, `127.x.y.z`)."""
    return host == "localhost" or host.startswith("127.")
