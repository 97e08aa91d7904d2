"""The distribution backends by name and the rule that resolves `distributed`, `use_horovod` and `num_gpus` (TF-free)."""

from __future__ import annotations

import re

from opt_train.errors import ParamError

# none: one process, one replica; tf: tf.distribute (num_gpus replicas in a process,
# TF_CONFIG / SLURM workers); horovod: Horovod ranks (horovodrun, or opt-train's --np).
BACKENDS = ("none", "tf", "horovod")


def resolve(distributed="none", use_horovod=False, num_gpus=None):
    """`(distributed, use_horovod, num_gpus)` as a run means them; `ParamError` (key `distributed`) for a conflict.

    - `use_horovod: true` is `distributed: horovod`, and `distributed: horovod` sets
      `use_horovod` (code reading `use_horovod` keeps working); `use_horovod: true`
      with `distributed: tf` is a conflict.
    - `num_gpus: N` (N > 1) without a backend is N replicas in this process: `tf`.
      `num_gpus: 1` alone is one replica, the single-process backend.
    - Under Horovod `num_gpus` means nothing (OpenSeq2Seq: one GPU per rank, the rank
      count comes from horovodrun): None.
    """
    if use_horovod and distributed == "tf":
        raise ParamError.at(
            "distributed", "conflict",
            "distributed: tf conflicts with use_horovod: true (which means distributed: horovod); set one", "tf")
    if use_horovod or distributed == "horovod":
        return "horovod", True, None
    if distributed == "none" and num_gpus is not None and num_gpus > 1:
        return "tf", False, num_gpus
    return distributed, False, num_gpus


def launch_backend(distributed):
    """What `opt-train train --np N` starts: Horovod ranks for `horovod`, else `tf` workers."""
    return "horovod" if distributed == "horovod" else "tf"


# What a backend calls one of its processes, in the launcher's and the training loop's lines.
NOUNS = {"horovod": "rank", "tf": "worker"}


def worker_noun(distributed):
    """What `distributed` calls one of its processes: `rank` under Horovod, else `worker`."""
    return NOUNS.get(distributed, "worker")


def lost_peer_line(noun, index, what):
    """The line a worker ends with when a collective failed because another one died or stopped answering.

    Every backend's `lost_peer` says it this way, so that the launcher can tell such a
    worker from the one that failed (`is_lost_peer_line`).
    """
    return f"{noun} {index}: another {noun} {what}"


_LOST_PEER = re.compile(r"^(Error: )?(?P<noun>\w+) \d+: another (?P=noun) ")


def is_lost_peer_line(line):
    """Whether a worker's error line is `lost_peer_line`'s: it failed only because another one did.

    The launcher blames such a worker only when no other failed: it cannot order two ends
    that fall within one scheduling slice, and the worker that lost its peer may be seen first.
    """
    return bool(_LOST_PEER.match(line or ""))
