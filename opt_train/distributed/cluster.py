"""The cluster this process belongs to, read from TF_CONFIG (placeholder until the launcher branch lands)."""

from __future__ import annotations

import json
import os
from typing import NamedTuple


class Cluster(NamedTuple):
    workers: list
    task_index: int

    @property
    def num_workers(self):
        return len(self.workers)

    @property
    def is_chief(self):
        return self.task_index == 0

    def tf_config(self):
        return {"cluster": {"worker": list(self.workers)}, "task": {"type": "worker", "index": self.task_index}}


def cluster_from_environment(environ=os.environ):
    raw = environ.get("TF_CONFIG")
    if not raw:
        return None
    spec = json.loads(raw)
    workers = list(spec.get("cluster", {}).get("worker", []))
    return Cluster(workers, int(spec.get("task", {}).get("index", 0)))
