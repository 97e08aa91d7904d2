"""`data: {factory: "pkg.mod:make"}`: the user's own unbatched `tf.data` pipeline, sharded, shuffled and batched by opt-train.

The function is called once per split as `make(split="train" | "eval", **params)`,
plus `rank=`, `size=`, `seed=` when it declares them, and returns an unbatched
`tf.data.Dataset` of `(x, y)` or `(x, y, sample_weight)`, or None for a split it
does not have. Every problem with it is a `FactoryError` at the config key
`data.factory`, with the user's own traceback lines when their code raised.
"""

from __future__ import annotations

import inspect

import numpy as np
import tensorflow as tf

from opt_train import usercode
from opt_train.data.counts import steps_per_epoch
from opt_train.data.streams import epoch_seed, shuffled_batches, stream_from
from opt_train.errors import ParamError
from opt_train.data.task import Task
from opt_train.usercode import UserCodeError

# Elements shuffled together; the user's pipeline may stream, so not the whole split.
SHUFFLE_WINDOW = 10000
OPT_TRAIN_PARAMS = ("task", "num_classes")


class FactoryError(UserCodeError):
    """A problem with the user's factory; `.key` is where the config layer reports it."""

    def __init__(self, message, key="data.factory", details=""):
        super().__init__(key, message, details)


def load_function(spec, key="data.factory"):
    """The function `spec["factory"]` names, imported; a FactoryError at `key` when it cannot be."""
    module_name, name = usercode.split_spec(spec)
    try:
        return usercode.load(f"{module_name}:{name}", key)
    except UserCodeError as error:
        raise FactoryError(error.message, key, error.details) from None


def call_factory(function, split, params, *, rank, size, seed):
    """`function(split=..., **params)` (+ rank, size, seed when declared); (dataset or None, sharded by it)."""
    declared = inspect.signature(function).parameters
    extra = {name: value for name, value in (("rank", rank), ("size", size), ("seed", seed)) if name in declared}
    problem = usercode.call_problem(_qualname(function), usercode.signature(function), params,
                                    supplied=("split", *extra))
    if problem:
        param, code, message = problem
        raise ParamError.at(f"data_params.{param}", code, message, params.get(param))
    try:
        dataset = usercode.call(function, "data.factory", split=split, **params, **extra)
    except UserCodeError as error:
        raise FactoryError(f"{_qualname(function)}(split={split!r}) raised {error.message.split(': ', 1)[-1]}",
                           details=error.details) from None
    if dataset is not None and not isinstance(dataset, tf.data.Dataset):
        raise FactoryError(f"{_qualname(function)}(split={split!r}) must return a tf.data.Dataset or None. "
                           f"Received: {type(dataset).__name__}")
    if dataset is not None:
        _check_elements(function, split, dataset)
    return dataset, "rank" in extra and "size" in extra


def _qualname(function):
    return f"{function.__module__}:{function.__name__}"


def _check_elements(function, split, dataset):
    spec = dataset.element_spec
    if not isinstance(spec, tuple) or len(spec) not in (2, 3) or not all(
        isinstance(part, tf.TensorSpec) for part in spec
    ):
        raise FactoryError(f"{_qualname(function)}(split={split!r}) must yield (x, y) or (x, y, sample_weight) "
                           f"tensors. Received elements: {spec}")
    if not spec[0].shape.is_fully_defined():
        raise FactoryError(f"{_qualname(function)}(split={split!r}) must yield single, unbatched examples "
                           f"with a fixed shape. Received x: {spec[0]}")
    if len(spec) == 3 and spec[2].shape.rank not in (0, None):
        raise FactoryError(f"{_qualname(function)}(split={split!r}): sample_weight must be one number per "
                           f"example. Received: {spec[2]}")


def count_examples(dataset, function):
    """Elements of a finite dataset: its cardinality, or one pass over it when tf.data cannot tell."""
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise FactoryError(f"{_qualname(function)}(split='train') must return a finite dataset "
                           "(opt-train repeats it per epoch)")
    if cardinality >= 0:
        return cardinality
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda total, _: total + 1))


def make_task(spec, task, num_classes):
    """The Task from the first split's element spec and the opt-train params."""
    x, y = spec[0], spec[1]
    input_shape = tuple(int(d) for d in x.shape)
    input_dtype = "int32" if x.dtype.is_integer else "float32"
    image_shape = input_shape + (1,) if len(input_shape) == 2 else (input_shape if len(input_shape) == 3 else None)
    if task == "regression":
        outputs = int(np.prod(y.shape.as_list() or [1]))
        return Task("regression", input_shape, outputs, input_dtype=input_dtype, image_shape=image_shape)
    if num_classes is None:
        raise FactoryError("a classification task needs data_params.num_classes")
    return Task("classification", input_shape, num_classes, input_dtype=input_dtype,
                num_classes=num_classes, image_shape=image_shape)


def _standardize(task):
    """Casts an element to what the models and losses expect (float32 inputs or int32 tokens, labels by task)."""

    @tf.autograph.experimental.do_not_convert  # see opt_train.data.streams
    def cast(x, y, *weight):
        x = tf.cast(x, tf.int32 if task.input_dtype == "int32" else tf.float32)
        y = tf.reshape(tf.cast(y, tf.float32), [task.output_dim]) if task.kind == "regression" else tf.cast(y, tf.int32)
        return (x, y, tf.cast(weight[0], tf.float32)) if weight else (x, y)

    return cast


class FactoryData:
    """The user's train split as this rank's repeating stream, and the eval split in batches."""

    def __init__(self, spec, params, *, batch_size, seed, rank, size, eval_batch_size, replicas=1):
        function = load_function(spec)
        user_params = {k: v for k, v in params.items() if k not in OPT_TRAIN_PARAMS}
        train, sharded = call_factory(function, "train", user_params, rank=rank, size=size, seed=seed)
        if train is None:
            raise FactoryError(f"{_qualname(function)}(split='train') returned None; a run needs a train split")
        evaluation, _ = call_factory(function, "eval", user_params, rank=rank, size=size, seed=seed)
        self.task = make_task(train.element_spec, params.get("task", "classification"), params.get("num_classes"))
        cast = _standardize(self.task)
        total = count_examples(train, function)
        if sharded:
            # The function read only its share; the other ranks' shares are assumed as large.
            self.train_examples, per_rank = total * size, total
        else:
            self.train_examples, per_rank = total, total // size
            train = train.shard(size, rank)
        self.steps_per_epoch = steps_per_epoch(per_rank, batch_size, replicas=replicas)
        self.shard = train.map(cast, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        self.window = min(per_rank, SHUFFLE_WINDOW)
        self.seed, self.batch_size = seed, batch_size
        self.eval = None
        if evaluation is not None:
            self.eval = evaluation.map(cast).batch(eval_batch_size).prefetch(tf.data.AUTOTUNE)

    @tf.autograph.experimental.do_not_convert
    def _epoch(self, epoch):
        batches = shuffled_batches(self.shard, window=self.window, batch_size=self.batch_size,
                                   seed=epoch_seed(self.seed, epoch))
        return batches.take(self.steps_per_epoch)

    def train_from(self, position):
        """Batches from batch number `position` of the stream on (equal to skipping that many)."""
        return stream_from(self._epoch, position, steps_per_epoch=self.steps_per_epoch)
