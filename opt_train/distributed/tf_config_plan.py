"""The `TF_CONFIG` of each tf.distribute worker `opt-train train --np N` starts: a free port for each local worker, 8888 + its index on the host for a remote one, worker 0 the chief.

The remote ports follow SlurmClusterResolver's rule: a remote host's free ports cannot be
probed from here. The launcher (opt_train/distributed/launcher.py) starts and watches the
workers; this plan says what each one's environment is and how a remote one is reached.
"""

from __future__ import annotations

import json

from opt_train.distributed.hosts import address_towards, free_ports, is_local, is_loopback, parse_hosts, ssh_argv


class TFConfigPlan:
    """The `TF_CONFIG` of each of `num_proc` tf.distribute workers on `hosts` (`host:slots,...`).

    Slots are filled host by host, in the order given (as Horovod assigns ranks). With
    remote hosts, local workers are addressed by this machine's address on the route to
    the first of them (`address_towards`); all local, by `localhost`. Remote workers are
    started over `ssh`.
    """

    def __init__(self, hosts, num_proc, ssh=None):
        self.ssh = ssh
        from opt_train.distributed.cluster import SLURM_PORT_BASE, launch_clusters

        placed = []
        for host, slots in parse_hosts(hosts):
            placed += [host] * min(slots, num_proc - len(placed))
        local = {host: is_local(host) for host in set(placed)}
        spread = not all(local.values())
        here = address_towards(next(host for host in placed if not local[host])) if spread else None
        ports = iter(free_ports(sum(local[host] for host in placed), everywhere=spread))
        addresses, on_host = [], {}
        for host in placed:
            index = on_host[host] = on_host.get(host, -1) + 1
            if local[host]:
                name = here if spread and is_loopback(host) else host
                addresses.append(f"{name}:{next(ports)}")
            else:
                addresses.append(f"{host}:{SLURM_PORT_BASE + index}")
        self.clusters = launch_clusters(addresses)
        self.ranks = [(host, local[host], {"TF_CONFIG": json.dumps(cluster.tf_config())})
                      for host, cluster in zip(placed, self.clusters)]

    def remote_argv(self, host, shell_command):
        return ssh_argv(host, shell_command, self.ssh)

    def stop(self):
        pass
