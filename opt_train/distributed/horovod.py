"""The Horovod backend: ranks launched by `horovodrun`, collectives from `horovod.tensorflow`.

This is the only module that imports horovod. It uses the plain TensorFlow API of
Horovod (`allreduce`, `broadcast`) from inside our own `tf.function` step, because
`horovod.tensorflow.keras` does not work with Keras 3: its `fit` path skips gradient
averaging without a word and its broadcast callback fails. Horovod's collectives also
reject Keras 3 variables, so every variable handed to Horovod is unwrapped to the
`tf.Variable` it holds (`keras.Variable.value`).

Sparse gradients (`tf.IndexedSlices`, e.g. from an embedding lookup) go one of two
ways, chosen per gradient from static shapes (the same on every rank):
densified and all-reduced with the dense gradients, which moves the whole table once;
or Horovod's two all-gathers of indices and rows, which move the looked-up rows of
every rank. Measured here (2 Gloo ranks, 640 lookups of 64 floats per rank and step):
a 1,000-row table took the same time either way, a 30,000-row table 2.5x less with
the all-gather. So by default (`sparse_as_dense="auto"`) a gradient is densified when
its table has at most as many rows as all ranks gather together, and gathered
otherwise.

A rank that stops answering (stopped, dead, unreachable) ends the job through Gloo's
own timeout, `HOROVOD_GLOO_TIMEOUT_SECONDS`, set from `rank_timeout_secs`. Horovod
reads that variable in `hvd.init()` and applies it to the rendezvous too, where ranks
that finish importing TensorFlow seconds apart would time out (the process aborts);
so the ranks first wait for each other in the rendezvous server's key-value store, at
most `startup_timeout_secs` (then a rank ends naming the ranks it never heard from;
SIGINT / SIGTERM end the wait), and call `hvd.init()` together. `rendezvous()` gives
`opt-train train --np N` (opt_train/distributed/launcher.py) the same server and
per-rank environment that `horovodrun --gloo` sets up.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

from opt_train.distributed.base import HorovodUnavailableError
from opt_train.distributed.names import lost_peer_line
from opt_train.distributed.placement import share_cpu_threads
from opt_train.errors import ParamError, TrainingFailed
from opt_train.process_group import Backend

INSTALL_COMMAND = "bash scripts/install_horovod.sh"
# The ad-hoc key-value scope the ranks meet in before `hvd.init()`.
_START_SCOPE = "opt_train_start"
# How long a rank waits for the others to reach `hvd.init()`: importing TensorFlow on a
# loaded host takes tens of seconds; a rank that never comes is its launcher's to report.
START_WAIT_SECONDS = 600

# Our names for reductions; Horovod's op constants are looked up on first use.
_REDUCE_OPS = ("mean", "sum", "min", "max")

# What a collective's error says when a peer is gone: Horovod's shutdown after another
# rank failed, or Gloo's transport error when the peer died (closed, reset) or hung (timed
# out) while this rank was waiting on it; which one a rank sees depends on the timing.
LOST_PEER_MESSAGES = (
    "Horovod has been shut down",
    "Connection closed by peer",
    "Connection reset by peer",
    "Timed out waiting",
)


def is_lost_peer(error):
    """True for a collective's error that says a peer is gone (`LOST_PEER_MESSAGES`)."""
    return any(marker in str(error) for marker in LOST_PEER_MESSAGES)


def _import_horovod():
    """`horovod.tensorflow`, or HorovodUnavailableError that says how to install it."""
    try:
        import horovod.tensorflow as hvd
    except Exception as error:  # an ImportError, or a build that no longer loads (OSError)
        raise HorovodUnavailableError(
            "Horovod is not available: `import horovod.tensorflow` failed "
            f"({type(error).__name__}: {error}). It must be built against the installed "
            f"TensorFlow; install it with: {INSTALL_COMMAND}"
        ) from error
    return hvd


def _check_reduce_op(op):
    if op not in _REDUCE_OPS:
        raise ParamError.said("op", "unknown_name", f"`op` must be one of {list(_REDUCE_OPS)}. Received: op={op!r}", op)


def _horovod_op(hvd, op):
    return {"mean": hvd.Average, "sum": hvd.Sum, "min": hvd.Min, "max": hvd.Max}[op]


def _tf_variable(variable):
    """The `tf.Variable` behind `variable` (a Keras 3 variable wraps one in `.value`)."""
    import tensorflow as tf

    if isinstance(variable, tf.Variable):
        return variable
    inner = getattr(variable, "value", None)
    if isinstance(inner, tf.Variable):
        return inner
    raise ParamError.said(
        "variables", "wrong_type",
        f"`broadcast_variables` takes tf.Variable or keras.Variable objects. Received: {type(variable).__name__}",
    )


def _pin_local_gpu(local_rank):
    """One GPU per rank: each process sees only the GPU of its local rank."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    try:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
    except RuntimeError:  # devices were initialized already: keep them
        pass


def _launched_size():
    value = os.environ.get("HOROVOD_SIZE", "")
    return int(value) if value.isdigit() else 1


def _wait_for_every_rank(timeout=START_WAIT_SECONDS, key="startup_timeout_secs"):
    """Returns once every rank of the job has reached this point (through the rendezvous store).

    Without a rendezvous server in the environment (MPI, or a single process) there is
    nobody to ask: returns at once. Past `timeout` seconds raises `TrainingFailed`, one
    line naming the ranks never heard from (`hvd.init()` would block on them in C++,
    deaf to signals); SIGINT / SIGTERM meanwhile raise `Interrupted` (130 / 143).
    """
    from opt_train.distributed.startup import WAIT_NOTE_SECONDS, stop_on_signals

    address = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")
    port = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    rank = os.environ.get("HOROVOD_RANK")
    if not (address and port and rank is not None):
        return
    size = _launched_size()
    base = f"http://{address}:{port}/{_START_SCOPE}"
    with stop_on_signals(f"rank {rank}"):
        urllib.request.urlopen(urllib.request.Request(f"{base}/{rank}", data=b"1", method="PUT"), timeout=30).close()
        waiting = set(range(size)) - {int(rank)}
        started = time.monotonic()
        deadline = started + timeout
        noted = False
        while waiting and time.monotonic() < deadline:
            if not noted and time.monotonic() - started >= WAIT_NOTE_SECONDS:
                noted = True
                print(f"rank {rank} of {size}: waiting for {_ranks_text(waiting)} to start, at most {timeout:g} s "
                      f"({key})", flush=True)
            for other in sorted(waiting):
                try:
                    urllib.request.urlopen(f"{base}/{other}", timeout=30).close()
                    waiting.discard(other)
                except urllib.error.HTTPError as error:
                    if error.code != 404:  # 404: that rank has not arrived yet
                        raise
            if waiting:
                time.sleep(0.1)
    if waiting:
        raise TrainingFailed(f"rank {rank} of {size}: never heard from {_ranks_text(waiting)} within {timeout:g} s "
                             f"({key}); nothing was trained")


def _ranks_text(numbers):
    return f"{'rank' if len(numbers) == 1 else 'ranks'} {', '.join(map(str, sorted(numbers)))}"


class Rendezvous:
    """A Gloo rendezvous server for one job and what each rank needs to join it.

    `ranks` lists, in rank order, `(hostname, is_local, environment)`: the variables
    `horovodrun --gloo` gives that rank (HOROVOD_RANK, HOROVOD_SIZE, the server's
    address, the network interface ...). Stop the server with `stop()`.
    """

    def __init__(self, hosts, num_proc, verbose=False, ssh=None):
        from horovod.runner.common.util import secret, timeout
        from horovod.runner.common.util import settings as hvd_settings
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts, parse_hosts_and_slots
        from horovod.runner.driver import driver_service
        from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
        from horovod.runner.http.http_server import RendezvousServer
        from horovod.runner.util import network

        start_timeout = int(os.environ.get("HOROVOD_START_TIMEOUT", "30"))
        self.ssh_port, self.ssh_identity_file = ssh or (None, None)
        settings = hvd_settings.Settings(
            verbose=2 if verbose else 0,
            ssh_port=self.ssh_port,
            ssh_identity_file=self.ssh_identity_file,
            key=secret.make_secret_key(),
            start_timeout=timeout.Timeout(start_timeout, message="Timed out waiting for {activity}."),
            num_proc=num_proc,
            hosts=hosts,
            run_func_mode=False,
        )
        names, _ = parse_hosts_and_slots(hosts)
        remote = set(network.filter_local_addresses(names))
        # As horovodrun: the interfaces every host shares (probed over ssh when some are remote).
        nics = driver_service.get_common_interfaces(settings, names, sorted(remote))
        plan = get_host_assignments(parse_hosts(hosts), num_proc)
        self._server = RendezvousServer(settings.verbose)
        port = self._server.start()
        self._server.init(plan)
        common = create_run_env_vars(network.get_driver_ip(nics), nics, port)
        self.ranks = [
            (slot.hostname, slot.hostname not in remote,
             {**{k: str(v) for k, v in common.items()}, **create_slot_env_vars(slot)})
            for slot in plan
        ]

    def remote_argv(self, host, shell_command):
        """The argv that runs `shell_command` on `host` as horovodrun would (ssh, or Kubeflow's exec)."""
        import shlex

        from horovod.runner.util.remote import get_remote_command

        return shlex.split(get_remote_command(shlex.quote(shell_command), host=host, port=self.ssh_port,
                                              identity_file=self.ssh_identity_file))

    def stop(self):
        self._server.stop()


class HorovodBackend(Backend):
    """One rank of a job started by `horovodrun -np N ...` (Gloo or MPI underneath).

    Args:
        sparse_as_dense: how `tf.IndexedSlices` gradients are reduced: `True`
            densifies them, `False` all-gathers them, `"auto"` picks by size (see the
            module docstring). Defaults to `"auto"`.
        configure_devices: give each local rank its share of CPU threads and its own
            GPU. Defaults to `True`.
        rank_timeout: seconds a collective waits for a rank that stopped answering
            before the job fails (Gloo's timeout); None keeps Horovod's (30 s).
            Defaults to `None`.
        startup_timeout: seconds a rank waits in the rendezvous store for the others
            before it ends naming them; None: `START_WAIT_SECONDS`. Defaults to `None`.
    """

    def __init__(self, sparse_as_dense="auto", configure_devices=True, rank_timeout=None, startup_timeout=None):
        if sparse_as_dense not in (True, False, "auto"):
            raise ParamError.said(
                "sparse_as_dense", "wrong_type",
                f"`sparse_as_dense` must be True, False or 'auto'. Received: sparse_as_dense={sparse_as_dense!r}",
                sparse_as_dense,
            )
        self._hvd = _import_horovod()
        if (rank_timeout is not None or startup_timeout is not None) and _launched_size() > 1:
            if rank_timeout is not None:
                # The user's own HOROVOD_GLOO_TIMEOUT_SECONDS wins; Gloo takes whole seconds.
                os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(max(1, round(rank_timeout))))
            _wait_for_every_rank(START_WAIT_SECONDS if startup_timeout is None else startup_timeout)
        self._hvd.init()
        self.size = self._hvd.size()
        self.rank = self._hvd.rank()
        self.local_rank = self._hvd.local_rank()
        self.local_size = self._hvd.local_size()
        self.sparse_as_dense = sparse_as_dense
        if configure_devices:
            share_cpu_threads(self.local_size)
            _pin_local_gpu(self.local_rank)

    def allreduce(self, tensors, op="mean"):
        """Reduces a list of gradients across ranks in one grouped all-reduce.

        Callable inside a `tf.function`; every rank must pass the same number of
        tensors in the same order with the same shapes. `None` entries (variables
        without a gradient) pass through untouched.
        """
        import tensorflow as tf

        _check_reduce_op(op)
        tensors = list(tensors)
        tensors = [
            tf.convert_to_tensor(t) if self._densify(t) else t for t in tensors
        ]
        if any(isinstance(t, tf.IndexedSlices) for t in tensors) and op not in ("mean", "sum"):
            raise ParamError.said(
                "op", "conflict", f"Sparse gradients can only be reduced with op='mean' or op='sum'. Received: op={op!r}",
                op,
            )
        present = [i for i, t in enumerate(tensors) if t is not None]
        if not present:
            return tensors
        reduced = self._hvd.grouped_allreduce(
            [tensors[i] for i in present], op=_horovod_op(self._hvd, op)
        )
        out = list(tensors)
        for i, value in zip(present, reduced):
            out[i] = value
        return out

    def _densify(self, gradient):
        """Whether this gradient is an IndexedSlices that is cheaper to reduce dense."""
        import tensorflow as tf

        if not isinstance(gradient, tf.IndexedSlices) or self.sparse_as_dense is False:
            return False
        if self.sparse_as_dense is True:
            return True
        gathered_rows = gradient.values.shape[0]
        dense_shape = tf.get_static_value(gradient.dense_shape)
        if gathered_rows is None or dense_shape is None:
            return True  # sizes unknown while tracing: the choice that is never far off
        return int(dense_shape[0]) <= gathered_rows * self.size

    def all_finite(self, flag):
        """True on every rank only when every rank's `flag` is True (a Min all-reduce)."""
        import tensorflow as tf

        as_number = tf.cast(flag, tf.int32)
        smallest = self._hvd.allreduce(as_number, op=self._hvd.Min, name="opt_train_all_finite")
        return tf.cast(smallest, tf.bool)

    def broadcast_variables(self, variables, root_rank=0):
        """Overwrites `variables` (tf or Keras 3 variables) with root_rank's values.

        Run eagerly, at the start and after a resume, with the same variables in the
        same order on every rank.
        """
        tf_variables = [_tf_variable(v) for v in variables]
        if tf_variables:
            self._hvd.broadcast_variables(tf_variables, root_rank=root_rank)

    def allreduce_scalar(self, value, op="sum"):
        """Reduces one Python number across ranks, eagerly; returns a Python number."""
        import tensorflow as tf

        _check_reduce_op(op)
        reduced = self._hvd.allreduce(
            tf.constant(float(value), tf.float64),
            op=_horovod_op(self._hvd, op),
            name=f"opt_train_allreduce_scalar_{op}",
        )
        result = float(reduced.numpy())
        return int(round(result)) if isinstance(value, int) and op != "mean" else result

    def barrier(self):
        """Waits until every rank reaches this point (an all-reduce of a zero)."""
        import tensorflow as tf

        self._hvd.allreduce(tf.constant(0, tf.int32), op=self._hvd.Sum, name="opt_train_barrier")

    def lost_peer(self, error):
        """One line for the error a collective raises once another rank died or stopped answering, else None.

        Horovod cannot say which rank: a dead one breaks the connection, a stopped one lets
        Gloo's timeout (rank_timeout_secs) run out. The launcher names it
        (`opt-train train --np N`).
        """
        if not is_lost_peer(error):
            return None
        if "Timed out waiting" in str(error):
            timeout = os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "30")
            return lost_peer_line("rank", self.rank,
                                  f"did not answer within {timeout} s (rank_timeout_secs); Horovod shut down")
        # Not a timeout: said at once, seconds after the other rank died, it must not claim one.
        return lost_peer_line("rank", self.rank, "failed or was stopped (its connection broke); Horovod shut down")

    def shutdown(self):
        """Stops Horovod's background thread; collectives fail after this."""
        self._hvd.shutdown()
