"""The typed, frozen config objects that the training layer reads (OpenSeq2Seq key names)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

from opt_train.config.issues import ConfigIssue


@dataclasses.dataclass(frozen=True)
class LarcParams(Mapping):
    """Layer-wise adaptive rate control: `larc_mode` clip or scale, trust ratio `larc_eta`.

    Also a read-only mapping, so `dict(config.larc_params)` gives what
    `optimize_loss(larc_params=...)` takes.
    """

    larc_eta: float  # required, as in OpenSeq2Seq: no trust ratio suits every model
    larc_mode: str = "clip"
    min_update: float = 1e-7
    epsilon: float = 1e-7

    def __getitem__(self, name):
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self):
        return iter(self.__dataclass_fields__)

    def __len__(self):
        return len(self.__dataclass_fields__)


def _empty():
    return dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One resolved, validated run configuration; build it with `load_config`."""

    model: str | dict = "mlp"
    model_params: dict = _empty()
    data: str | dict = "digits"  # a name, or {factory: "pkg.mod:function"}
    data_params: dict = _empty()
    # Loss and metrics by Keras name (opt_train.data.objective_names); None / () keep the task's own.
    loss: str | dict | None = None
    loss_params: dict = _empty()
    metrics: tuple = ()
    batch_size_per_gpu: int = 32
    eval_batch_size: int | None = None
    max_steps: int | None = None
    num_epochs: float | None = None
    optimizer: str = "Adam"
    optimizer_params: dict = _empty()
    lr_policy: str = "fixed"
    lr_policy_params: dict = _empty()
    warmup: dict | None = None
    dtype: str = "float32"
    loss_scaling: float | str = 1.0
    loss_scaling_params: dict = _empty()
    on_nonfinite: str = "skip"
    max_consecutive_overflows: int | None = 20
    iter_size: int = 1
    use_horovod: bool = False
    max_grad_norm: float | None = None
    larc_params: LarcParams | None = None
    regularizer: str | None = None
    regularizer_params: dict = _empty()
    freeze_variables_regex: str | None = None
    summaries: tuple = ()
    logdir: str = "runs/default"
    save_checkpoint_steps: int | None = 500
    num_checkpoints: int = 3
    save_summaries_steps: int | None = 100
    print_loss_steps: int = 100
    eval_steps: int | None = None
    random_seed: int = 0
    jit_compile: bool = False
    sweep: dict | None = None
    # dotted key -> (file, line) of the value that won; not part of the config itself.
    locations: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def to_dict(self):
        """The resolved config as plain YAML-ready types (what `validate` prints)."""
        return {field.name: plain(getattr(self, field.name)) for field in config_fields()}

    def locate(self, dotted_key):
        """`(file, line)` where `dotted_key` (or the nearest enclosing key) was set, else `(None, None)`."""
        return locate(self.locations, dotted_key)

    def issue(self, key, message, code, value=None):
        """A `ConfigIssue` for a problem found after loading (e.g. while TF builds the optimizer)."""
        file, line = self.locate(key)
        return ConfigIssue(file, line, key, code, message, value)

    def dump(self, path):
        """Writes the resolved config as YAML (what `opt-train validate` prints), atomically."""
        import yaml

        from opt_train.atomic import write_text

        write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))

    def issue_for(self, section, error):
        """A library `ValueError` raised while building `section` (e.g. `optimizer_params`), located.

        The same translation load-time checks use: the parameter the error names
        (`.param`, `.key` or its leading backticked name) becomes `section.param`.
        """
        from opt_train.config.registries import translate
        from opt_train.config.validate import join_key

        params = getattr(self, section, None)
        rule = translate(error, params if isinstance(params, dict) else {})
        key = rule.absolute or join_key(section, rule.subkey)
        return self.issue(key, rule.message, rule.code, rule.value)


def config_fields():
    """The fields that are config keys (everything but `locations`)."""
    return [field for field in dataclasses.fields(TrainConfig) if field.name != "locations"]


FIELD_NAMES = tuple(field.name for field in config_fields())


def plain(value):
    """`value` with dataclasses as dicts and tuples as lists, deep-copied."""
    if dataclasses.is_dataclass(value):
        return {key: plain(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return copy.deepcopy(value)


def parent_key(dotted_key):
    """`a.b[1]` -> `a.b` -> `a` -> `''`."""
    cut = max(dotted_key.rfind("."), dotted_key.rfind("["))
    return dotted_key[:cut] if cut > 0 else ""


def locate(locations, dotted_key):
    key = dotted_key
    while key:
        if key in locations:
            return locations[key]
        key = parent_key(key)
    return None, None
