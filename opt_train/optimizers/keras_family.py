"""Keras 3's built-in optimizers, with the TF1 API (`get_slot`, `apply_gradients(global_step=)`).

Each class here is a thin subclass of the Keras class of the same name: the
math, arguments and defaults are Keras's own (see the Keras documentation);
the subclass adds `TF1OptimizerAPI`, records the Keras slot lists under TF1
slot names after `build` so `get_slot(var, "m")` works, and rejects
`gradient_accumulation_steps` / `loss_scale_factor`, which opt-train's
gradient pipeline replaces (`iter_size`, `loss_scaling`).

Which Keras classes are wrapped, under which names, with which slots, is the
Keras rows of the optimizer table (`table.py`): Keras's `Adam`, `Adagrad`, ...
are registered as `KerasAdam`, `KerasAdagrad`, ...: the plain names belong to the
TF1-form classes.
"""

from __future__ import annotations

import contextlib
import inspect

import keras
import tensorflow as tf

from opt_train.optimizers.base import TF1OptimizerAPI, keras_serializable
from opt_train.errors import ParamError
from opt_train.optimizers.specs import base_args, check_args
from opt_train.optimizers.table import OPTIMIZER_PARAMS, ROWS


# display name -> (Keras class, {TF1-style slot name: attribute holding the Keras slot list}),
# from the table's Keras rows.
KERAS_CLASSES = {
    row.name: (getattr(keras.optimizers, row.keras_class), row.slots) for row in ROWS if row.family == "keras"
}


# Hyperparameters Keras compares with 0 to choose a code path (momentum slots or none). A
# callable or tensor there takes the general path, which computes the same numbers at 0.
BRANCH_PARAMETERS = {"SGD": ("momentum",), "KerasRMSprop": ("momentum",)}


class _GeneralPath:
    """A deferred hyperparameter where Keras branches on it: compares as non-zero, computes as its value."""

    __hash__ = object.__hash__

    def __init__(self, value):
        self.value = value

    def __gt__(self, other):
        return True

    __ge__ = __ne__ = __gt__

    def __lt__(self, other):
        return False

    __le__ = __eq__ = __lt__

    def __mul__(self, other):
        return self.value * other

    def __rmul__(self, other):
        return other * self.value

    def __add__(self, other):
        return self.value + other

    def __radd__(self, other):
        return other + self.value

    def __sub__(self, other):
        return self.value - other

    def __rsub__(self, other):
        return other - self.value

    def __truediv__(self, other):
        return self.value / other

    def __rtruediv__(self, other):
        return other / self.value

    def __neg__(self):
        return -self.value


tf.register_tensor_conversion_function(
    _GeneralPath, lambda value, dtype=None, name=None, as_ref=False: tf.convert_to_tensor(value.value, dtype=dtype, name=name)
)


def _now(value):
    """A hyperparameter's current value: a callable is called (TF1 and Keras read callables at each use)."""
    return value() if callable(value) else value


class KerasFamilyMixin(TF1OptimizerAPI):
    """What every wrapped Keras optimizer adds: slot registration, argument checks, callable hyperparameters.

    Keras 3 accepts a callable for `learning_rate` only; TF1 and Keras 2 took one for any
    hyperparameter. Here each one (`beta_1`, `rho`, `momentum`, ...) may be a zero-argument
    callable, read when Keras's own code reads the attribute: at each update, and once at
    `build` for initial values (`initial_accumulator_value`).
    """

    _registry_name: str
    _slot_attributes: dict

    def __init__(self, *args, **kwargs):
        # The table's rules first, so a bad value is a ParamError with a code, not Keras' own error.
        given = inspect.signature(super().__init__).bind_partial(*args, **kwargs).arguments
        given.update(given.pop("kwargs", {}))
        own = OPTIMIZER_PARAMS[self._registry_name]
        try:
            checked = check_args(self._registry_name, **{k: v for k, v in given.items() if k in own})
            base_args({k: v for k, v in given.items() if k not in own})
        except ParamError as error:
            raise _in_keras_words(type(self), error, given) from None
        # As the rules read them: YAML's `momentum: 1` is the float Keras's SGD insists on, as validate judged it.
        given.update(checked)
        deferred = {k: v for k, v in given.items() if k in self._hyperparameter_names() and callable(v)}
        # Keras checks its arguments' ranges in its constructor: it sees the callables' current values.
        super().__init__(**{**given, **{k: _checkable(v) for k, v in deferred.items()}})
        for name, value in deferred.items():
            setattr(self, name, value)
        self._slots = {}

    def _hyperparameter_names(self):
        own = OPTIMIZER_PARAMS[self._registry_name]
        return [name for name in (*own, "weight_decay") if name not in ("learning_rate", "name")]

    @contextlib.contextmanager
    def _hyperparameters_read(self):
        """Each callable hyperparameter replaced by its value while Keras's code runs."""
        branches = BRANCH_PARAMETERS.get(self._registry_name, ())
        saved = {}
        for name in self._hyperparameter_names():
            value = getattr(self, name, None)
            if name in branches and (callable(value) or tf.is_tensor(value)):
                saved[name] = value
                setattr(self, name, _GeneralPath(_now(value)))
            elif callable(value):
                saved[name] = value
                setattr(self, name, value())
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    def apply(self, grads, trainable_variables=None):
        with self._hyperparameters_read():
            return super().apply(grads, trainable_variables)

    def build(self, var_list):
        if self.built:
            return
        with self._hyperparameters_read():
            super().build(var_list)
        self._slots = self._collect_slots()

    def _collect_slots(self):
        """{slot name: per-variable list}, for the slot lists this configuration created."""
        slots = {}
        for slot_name, attribute in self._slot_attributes.items():
            per_variable = getattr(self, attribute, None)
            if per_variable and any(v is not None for v in per_variable):
                slots[slot_name] = per_variable
        return slots


def _in_keras_words(cls, error, given):
    """`error` (its param and code kept) worded as the Keras class words the same refusal, where Keras refuses.

    Code written against Keras matches its messages (Keras's own tests do); where Keras
    accepts what the table refuses, the table's wording stays.
    """
    keras_class = next(base for base in cls.__mro__ if base.__module__.startswith("keras."))
    arguments = {k: _checkable(v) if callable(v) and k != "learning_rate" else v for k, v in given.items()}
    try:
        keras_class(**arguments)
    except ValueError as keras_error:
        return ParamError(error.param, error.code, error.message, error.value, text=str(keras_error), key=error.key)
    except Exception:  # noqa: BLE001 - Keras failing otherwise says nothing about the wording
        return error
    return error


def _checkable(value):
    """A callable's current value as a Python number where it is one now, for Keras's range checks."""
    value = value()
    if tf.is_tensor(value) or isinstance(value, tf.Variable):
        return float(value) if tf.executing_eagerly() else value
    return value


def _wrap(display_name, keras_class, slot_attributes):
    """A subclass of `keras_class` with the TF1 API, registered as `display_name`."""
    doc = (
        f"Keras 3's `keras.optimizers.{keras_class.__name__}` with the TF1 optimizer API.\n\n"
        f"Arguments, defaults and update rule are Keras's (see its docstring); slots "
        f"for `get_slot`: {', '.join(sorted(slot_attributes))}.\n"
    )
    wrapper = type(
        display_name,
        (KerasFamilyMixin, keras_class),
        {
            "__doc__": doc,
            "__module__": __name__,
            "__qualname__": display_name,
            "_registry_name": display_name,
            "_slot_attributes": dict(slot_attributes),
        },
    )
    return keras_serializable(wrapper)


WRAPPERS = {name: _wrap(name, cls, slots) for name, (cls, slots) in KERAS_CLASSES.items()}
# Keras class -> our subclass, so a dotted path to a Keras built-in gets the TF1 API too.
WRAPPER_OF = {KERAS_CLASSES[name][0]: wrapper for name, wrapper in WRAPPERS.items()}
globals().update(WRAPPERS)
__all__ = sorted(WRAPPERS)
