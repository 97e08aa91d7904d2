"""The DTensor mesh backend: the model and all its state laid out on one device mesh, of one process or of workers.

A fourth way to place a run, beside one process, tf.distribute replicas/workers and
Horovod (`mesh:` / `layouts:` in YAML): the devices (GPUs, or on a machine without
any, as many logical CPU devices) form a mesh of named axes; each model variable is
a `DVariable` laid out as `layouts` says (`mesh_layout.layout_of`), every optimizer
slot, float32 master, accumulator and EMA copy as its variable
(`opt_train.optimizers.mesh_state`), counters and the loss scale replicated. Each
step's global batch is laid out on the batch axis (`mesh_batch_axis`).

DTensor runs the step as one SPMD program: the loss is the global batch's mean,
gradients come back in their variable's layout already reduced over the batch axis
(so `allreduce` is the identity), and a global norm or finite check over sharded
gradients is global. The train op packs each batch onto the mesh before it calls the
compiled step (`place_batch`) and checks once that the step touches no plain
variable (`check_step`).

A variable sharded on the batch axis (fully sharded, ZeRO-3 style) is gathered to
its layout without the batch axis where the model reads it (`gathered_reads`); its
gradient comes back reduce-scattered, and the optimizer updates each shard where it lies.

Across several processes (`distributed: tf`: the workers of `TF_CONFIG`, SLURM or `train
--np`), the mesh is DTensor's multi-client one: each worker is a DTensor client, its
`DTENSOR_*` variables derived from the same cluster (`dtensor_environment`), its local
devices (mesh devices / workers) its part of one global mesh. The batch axis must split
between the workers (`mesh_layout.process_batch_shards`), so each reads its own share of
the global batch, as a tf.distribute worker does, and packs each piece on the devices of
its batch shard; every other axis lies inside one process. Each worker writes its own
shards into the one checkpoint (DTensor's save is collective and merges them on a shared
`logdir`); the chief alone evaluates and exports, on plain copies of the weights put
together from its own devices' shards (`read`): a DTensor collective only one worker runs
leaves the workers' collective keys out of step, and their next collective hangs. What
acts on that evaluation (lr_control, early stopping, the best checkpoint) every worker
decides alike on the chief's figures, sent with `allreduce_scalar` (`training/controls.py`).
DTensor's multi-client `shutdown_accelerator_system` fails, so a worker ends without it
(after `leave`'s barrier), and its multi-client `DTensorDataset` is not implemented
(b/271162918), so batches are packed here.

`DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION=0` must be set before TensorFlow
starts: with it on, TF 2.21's combine pass can make a read of a DVariable return its
value from before an assign earlier in the same step (Momentum drifted by 5e-2 in 5
steps, no error). `opt_train.quiet.import_tensorflow` sets it unless the user set it, and so
does importing this module; `MeshBackend` refuses any other value.
"""

from __future__ import annotations

import contextlib
import os
import threading

from opt_train.distributed.mesh_layout import batch_axis_of, layout_of, mesh_axes, mesh_devices, process_batch_shards
from opt_train.distributed.names import lost_peer_line
from opt_train.errors import ParamError
from opt_train.process_group import Backend
from opt_train.quiet import DTENSOR_COMBINE_VARIABLE

os.environ.setdefault(DTENSOR_COMBINE_VARIABLE, "0")

_gathering = threading.local()


@contextlib.contextmanager
def gathered_reads():
    """Within: a variable sharded on the batch axis reads as its gathered value (the model's forward pass)."""
    before = getattr(_gathering, "on", False)
    _gathering.on = True
    try:
        yield
    finally:
        _gathering.on = before


# DTensor's multi-client job name (`DTENSOR_JOB_NAME`): its default with several clients, said once.
DTENSOR_JOB = "worker"


def dtensor_environment(cluster):
    """The `DTENSOR_*` variables of this worker of `cluster` (an `opt_train.distributed.cluster.Cluster`).

    Client i is worker i (the chief, when `TF_CONFIG` has one, is worker 0); `DTENSOR_JOBS`
    lists every worker's "host:port" in that order: DTensor starts its server on this
    worker's, where `MultiWorkerMirroredStrategy` would start its own.
    """
    return {
        "DTENSOR_CLIENT_ID": str(cluster.task_index),
        "DTENSOR_NUM_CLIENTS": str(cluster.num_workers),
        "DTENSOR_JOB_NAME": DTENSOR_JOB,
        "DTENSOR_JOBS": ",".join(cluster.workers),
    }


def mesh_devices_here(count):
    """(device names, note) for a mesh of `count` devices: GPUs, or logical CPU devices on a machine without any."""
    from opt_train.distributed.tfdist import devices_here

    devices, on_cpu = devices_here(count, "mesh", f"mesh uses {count} devices")
    if not on_cpu or count == 1:
        return devices, None
    return devices, f"mesh: no GPU found; the {count}-device mesh runs on {count} logical CPU devices"


class MeshBackend(Backend):
    """The devices of one process, or of every worker of a cluster, as one DTensor mesh (see the module docstring).

    Args:
        mesh: the config's `mesh` value, `{axis: size}` in order.
        layouts: `{regex: [axis or None per dimension]}` (the config's `layouts`).
        mesh_batch_axis: the axis the batch is sharded on. Defaults to `"batch"`;
            a mesh without that axis replicates the batch.
        cluster: an `opt_train.distributed.cluster.Cluster` of several workers, whose
            devices form the mesh together; None (or one worker) for this process alone.
        startup_timeout: seconds a worker waits for the others to start
            (`startup.wait_for_workers`); None: TensorFlow's own wait.
        rank_timeout: kept for the interface; DTensor's collectives take no bound from it (a worker
            that stops answering is found by the coordination service's heartbeat, about 10 s).
    """

    # A worker's share of a mesh's batch axis: the shards its devices hold, not replicas of the model.
    replica_noun = "batch shard"

    def __init__(self, mesh, layouts=None, mesh_batch_axis="batch", cluster=None, startup_timeout=None,
                 rank_timeout=None):
        import tensorflow as tf
        from tensorflow.experimental import dtensor

        if os.environ.get(DTENSOR_COMBINE_VARIABLE) != "0":
            raise ParamError.at(
                "mesh", "conflict",
                f"a mesh needs {DTENSOR_COMBINE_VARIABLE}=0 (this process has "
                f"{os.environ.get(DTENSOR_COMBINE_VARIABLE)!r}): with DTensor's all-reduce combine pass on, a "
                "step can read a variable's value from before its own update, without an error", mesh)
        self.axes = mesh_axes(mesh)
        self.layouts = dict(layouts or {})
        self.batch_axis = batch_axis_of(self.axes, mesh_batch_axis)
        self.size = self.axes[self.batch_axis] if self.batch_axis else 1
        self.rank_timeout = rank_timeout
        self._tf = tf
        self._plain = {}  # id(DVariable) -> (it, its plain whole copy): `unsharded`
        if cluster is not None and cluster.num_workers > 1:
            self._join(cluster, mesh_batch_axis, startup_timeout)
        else:
            devices, note = mesh_devices_here(mesh_devices(self.axes))
            self.mesh = dtensor.create_mesh(list(self.axes.items()), devices=devices)
            self.notes = (note,) if note else ()
            self._workers, self._worker = 1, 0
            self._shards = list(range(self.size))
        self.rank = self._worker
        self.local_rank = 0

    def _join(self, cluster, mesh_batch_axis, startup_timeout):
        """This worker's part of a mesh over every worker of `cluster` (DTensor's multi-client set-up).

        Before TensorFlow's runtime starts: DTensor's variables, this worker's GPUs and CPU
        threads, the meeting of the workers; then DTensor starts the runtime itself.
        """
        from tensorflow.experimental import dtensor

        from opt_train.distributed.placement import pin_worker_gpus, share_cpu_threads
        from opt_train.distributed.tfdist import _without_tf_sigterm

        workers = cluster.num_workers
        shards = process_batch_shards(self.axes, workers, mesh_batch_axis, self.layouts)
        count = mesh_devices(self.axes) // workers
        try:
            pin_worker_gpus(count, cluster.local_index, cluster.local_size)
        except ParamError as error:
            raise ParamError.at("mesh", error.code, f"a mesh of {count} devices in each worker {error.message}",
                                self.axes) from None
        share_cpu_threads(cluster.local_size)
        os.environ.update(dtensor_environment(cluster))
        if startup_timeout is not None:
            from opt_train.distributed.startup import wait_for_workers

            wait_for_workers(cluster, startup_timeout)
        device = "GPU" if self._tf.config.list_physical_devices("GPU") else "CPU"
        try:
            _without_tf_sigterm(lambda: dtensor.initialize_accelerator_system(
                device, num_logical_cpu_devices=count if device == "CPU" else None))
        except ValueError as error:  # TensorFlow's runtime started before the mesh could set it up
            raise ParamError.at("mesh", "conflict", f"a mesh across workers could not start DTensor: {error}",
                                self.axes) from None
        self.mesh = dtensor.create_distributed_mesh(
            list(self.axes.items()), local_devices=[f"{device}:{i}" for i in range(count)], device_type=device)
        self.notes = (f"mesh: {workers} workers of {count} {device} device{'s' if count != 1 else ''} each form one "
                      f"{mesh_devices(self.axes)}-device mesh" + ("" if device == "GPU" else
                                                                   " (no GPU found: logical CPU devices)"),)
        self._workers, self._worker, self._shards = workers, cluster.task_index, shards[cluster.task_index]
        self._per_device = mesh_devices(self.axes) // self.size  # devices of one batch shard

    @property
    def num_workers(self):
        return self._workers

    @property
    def worker_index(self):
        return self._worker

    @property
    def replicas_per_worker(self):
        # A process reads its batch shards' share of the global batch (alone: all of it) and lays it out itself.
        return len(self._shards)

    @property
    def collective_saves(self):
        # DTensor's save is one collective; each worker writes its own shards.
        return self._workers > 1

    @property
    def saves_together(self):
        # Into the one checkpoint the chief keeps: DTensor merges every worker's shards there.
        return self._workers > 1

    def scope(self):
        from opt_train.optimizers.mesh_state import on_mesh

        return on_mesh(self.mesh)

    def counter_scope(self):
        return self.scope()

    def forward(self):
        return gathered_reads()

    # -- layouts -----------------------------------------------------------------
    def spec_of(self, variable):
        """The config's sharding spec of a model variable (`mesh_layout.layout_of` of its path)."""
        return layout_of(variable.path, tuple(variable.shape), self.layouts, self.axes)

    def layout(self, spec):
        from tensorflow.experimental import dtensor

        return dtensor.Layout([axis or dtensor.UNSHARDED for axis in spec], self.mesh)

    def place_model(self, model):
        """Swaps every variable of `model` (weights, statistics, seed states) for a DVariable of its layout."""
        from opt_train.optimizers.mesh_state import to_dvariable

        for variable in model.variables:
            spec = self.spec_of(variable)
            to_dvariable(variable, self.layout(spec))
            if self.batch_axis and self.batch_axis in spec:
                _gather_on_read(variable, self.layout([None if axis == self.batch_axis else axis for axis in spec]))
        return model

    # -- data --------------------------------------------------------------------
    def distribute(self, dataset, batch_size_per_replica):
        del batch_size_per_replica
        return _Placed(dataset, self.place_batch)

    def place_batch(self, batch):
        """A batch as DTensors: split on the batch axis (replicated when it has none or it does not divide it).

        Across workers, `batch` is this worker's share (its batch shards' pieces in order), and each
        local device gets the piece of its own batch shard.
        """
        from tensorflow.experimental import dtensor

        from opt_train.optimizers.mesh_state import place

        shards = len(self._shards)

        def one(value):
            value = self._tf.convert_to_tensor(value)
            rank = value.shape.rank
            spec = [None] * rank
            if self.batch_axis and rank and value.shape[0] is not None and value.shape[0] % shards == 0:
                spec[0] = self.batch_axis
            if self._workers == 1:
                return place(value, self.layout(spec))
            pieces = self._tf.split(value, shards) if spec[0] else None
            components = [pieces[self._shards.index(device // self._per_device)] if pieces else value
                          for device in self.mesh.local_device_ids()]
            return dtensor.pack(components, self.layout(spec))

        return self._tf.nest.map_structure(one, batch)

    def place_replicated(self, batch):
        """A batch as DTensors whole on every device (evaluation: a short last batch need not divide)."""
        from opt_train.optimizers.mesh_state import place

        return self._tf.nest.map_structure(
            lambda value: place(value, self.layout([None] * self._tf.convert_to_tensor(value).shape.rank)), batch
        )

    def whole(self, tensor):
        """A DTensor relaid out replicated (in a step: what leaves it to be read as NumPy)."""
        from tensorflow.experimental import dtensor

        return dtensor.relayout(tensor, self.layout([None] * tensor.shape.rank))

    def check_step(self, function, *args):
        """Refuses a traced step that touches a plain variable (`mesh_state.check_step`)."""
        from opt_train.optimizers.mesh_state import check_step

        check_step(function, *args)

    def read(self, value):
        """A DTensor (or variable) as a NumPy array: relaid out whole, then one device's copy.

        Across workers, from this worker's own shards, with no collective: the chief reads alone
        (evaluation, export), and a collective the others do not run would leave DTensor's
        collective keys out of step between the workers (the next save hung). A worker's devices
        hold every shard of a variable not laid out on the batch axis (`process_batch_shards`).
        """
        from tensorflow.experimental import dtensor

        from opt_train.optimizers.mesh_state import tf_variable

        value = tf_variable(value)
        value = value.read_value() if isinstance(value, self._tf.Variable) else value
        if not dtensor.is_dtensor(value):
            return value.numpy()
        if self._workers > 1:
            return self._from_local_shards(value)
        value = dtensor.relayout(value, self.layout([None] * value.shape.rank))
        return dtensor.unpack(value)[0].numpy()

    def _from_local_shards(self, value):
        """The whole value of a DTensor put together from this worker's devices' components."""
        import numpy as np
        from tensorflow.experimental import dtensor

        spec = dtensor.fetch_layout(value).sharding_specs
        names, shape = list(self.axes), tuple(self.axes.values())
        whole = None
        for device, component in zip(self.mesh.local_device_ids(), dtensor.unpack(value)):
            component = component.numpy()
            if whole is None:
                whole = np.empty(tuple(value.shape), component.dtype)
            where = dict(zip(names, np.unravel_index(device, shape)))
            whole[tuple(slice(where[axis] * size, (where[axis] + 1) * size) if axis in where else slice(None)
                        for axis, size in zip(spec, component.shape))] = component
        return whole

    @contextlib.contextmanager
    def unsharded(self, variables):
        """Within: each Keras variable of `variables` on a DVariable holds its whole value in a plain variable.

        For what must see an ordinary model (the export: `model.keras` and the SavedModel; across
        workers also the chief's evaluation). The plain variables are kept from one call to the
        next and assigned anew, so that a function traced over them reads the current values. The
        DVariables come back on exit, unchanged.
        """
        from opt_train.optimizers.mesh_state import is_dvariable

        saved = []
        try:
            for variable in variables:
                if is_dvariable(variable):
                    inner = variable._value
                    saved.append((variable, inner))
                    plain = self._plain.get(id(inner))
                    if plain is None:
                        plain = self._plain[id(inner)] = (inner, self._tf.Variable(
                            self.read(inner), trainable=inner.trainable, name=inner.name.split(":")[0]))
                    else:
                        plain[1].assign(self.read(inner))
                    variable._value = plain[1]
            yield
        finally:
            for variable, inner in saved:
                variable._value = inner

    # -- collectives: DTensor's own ------------------------------------------------
    def allreduce(self, tensors, op="mean"):
        # Gradients come back in their variable's layout, already reduced over the batch axis.
        return list(tensors)

    def all_finite(self, flag):
        return flag

    def broadcast_variables(self, variables, root_rank=0):
        # Every worker builds the same values from the same `random_seed` and restores the same checkpoint.
        return None

    # -- across workers: DTensor's collectives over the whole mesh ------------------------
    def allreduce_scalar(self, value, op="sum"):
        """Reduces one Python number across workers: one reduction over every device of the mesh.

        Each worker puts its number on its first device and the operation's identity on
        the others, so that each worker counts once.
        """
        if self._workers <= 1:
            return value
        import math

        from tensorflow.experimental import dtensor

        tf = self._tf
        reduce = {"sum": tf.reduce_sum, "mean": tf.reduce_sum, "min": tf.reduce_min, "max": tf.reduce_max}[op]
        identity = {"sum": 0.0, "mean": 0.0, "min": math.inf, "max": -math.inf}[op]
        one = [1] * len(self.axes)
        components = [tf.reshape(tf.constant(float(value) if i == 0 else identity, tf.float64), one)
                      for i in range(len(self.mesh.local_device_ids()))]
        everywhere = dtensor.pack(components, dtensor.Layout(list(self.axes), self.mesh))
        with dtensor.default_mesh(self.mesh):
            reduced = float(dtensor.unpack(reduce(everywhere))[0].numpy())
        if op == "mean":
            return reduced / self._workers
        return int(round(reduced)) if isinstance(value, int) else reduced

    def lost_peer(self, error):
        """One line when a collective failed because another worker died or did not answer, else None."""
        from opt_train.distributed.tfdist import _LOST_PEER_ERRORS

        if self._workers <= 1 or type(error).__name__ not in _LOST_PEER_ERRORS:
            return None
        return lost_peer_line("worker", self._worker, "of the mesh failed or was stopped; the job stopped")


class _Placed:
    """A dataset whose batches come out laid out on the mesh (each packed eagerly, before the step)."""

    def __init__(self, dataset, place):
        self.dataset = dataset
        self.place = place

    def __iter__(self):
        return _PlacedIterator(iter(self.dataset), self.place)


class _PlacedIterator:
    def __init__(self, iterator, place):
        self.iterator = iterator
        self.place = place

    def __iter__(self):
        return self

    def __next__(self):
        return self.place(next(self.iterator))


def _gather_on_read(variable, gathered):
    """Makes the DVariable behind Keras `variable` read as `gathered` within `gathered_reads()`.

    The forward pass of a layer whose weight is sharded on the batch axis cannot be
    SPMD-expanded as is (it fails at BiasAddGrad / Sum); read gathered, the weight is
    whole along that axis, and the read's gradient is reduce-scattered back to the shard.
    The optimizer reads and updates the shard itself.
    """
    from tensorflow.experimental import dtensor

    inner = variable._value
    read = inner._read_variable_op

    def read_variable_op(*args, **kwargs):
        value = read(*args, **kwargs)
        if getattr(_gathering, "on", False):
            value = dtensor.relayout(value, gathered)
        return value

    inner._read_variable_op = read_variable_op
