"""The one path rule: a relative path a config names is taken from the folder of the file that set it.

| what | relative to |
|---|---|
| `base:` | the folder of the file holding it |
| `data_params` files of `npz`, `csv` (`path`, `eval_path`), `tfrecord` (`train_files`, `eval_files`, globs) | the folder of the file that set the value |
| `model: {path: x.keras}`, `load_model`, `init_from.path`, `model_params.weights` (a file, not `imagenet`) | the folder of the file that set the value |
| the modules of `factory:` specs, `python_path` | the folders of the config files (`TrainConfig.code_folders`) |
| any of these given with `--set` | the current directory |
| `logdir` (the exception) | the current directory: runs land where the command runs, `runs/<config>` by default |

`~` is expanded. Resolved paths are absolute, so errors and the logdir's `config.yaml`
name the file that is meant; a missing one is `file_not_found` with that path.
"""

from __future__ import annotations

import os

from opt_train.config.issues import OVERRIDE_FILE
from opt_train.data import registry as datasets
from opt_train.models import registry as models


def _resolve(value, file):
    if not isinstance(value, str) or not value:
        return value
    expanded = os.path.expanduser(value)
    if os.path.isabs(expanded):
        return expanded
    folder = os.path.dirname(os.path.abspath(file)) if file and file != OVERRIDE_FILE else os.getcwd()
    return os.path.normpath(os.path.join(folder, expanded))


def _file_of(locations, key):
    from opt_train.config.issues import locate

    return locate(locations, key)[0]


def path_keys(data):
    """The dotted keys of `data` (a merged config) that name files, with their values' list indices."""
    keys = []
    spec = data.get("model")
    if isinstance(spec, dict) and isinstance(spec.get("path"), str):
        keys.append("model.path")
    if isinstance(data.get("load_model"), str):
        keys.append("load_model")
    init = data.get("init_from")
    if isinstance(init, dict) and isinstance(init.get("path"), str):
        keys.append("init_from.path")
    params = data.get("model_params")
    weights = params.get("weights") if isinstance(params, dict) else None
    if (isinstance(spec, dict) and "keras_application" in spec and isinstance(weights, str)
            and weights != models.IMAGENET):
        keys.append("model_params.weights")
    name = data.get("data")
    params = data.get("data_params")
    if isinstance(name, str) and isinstance(params, dict):
        try:
            canonical = datasets.resolve(name)
        except ValueError:
            canonical = None  # an unknown name is the validator's to report
        for param in datasets.PATH_PARAMS.get(canonical, {}):
            value = params.get(param)
            if isinstance(value, str):
                keys.append(f"data_params.{param}")
            elif isinstance(value, list):
                keys.extend(f"data_params.{param}[{index}]" for index in range(len(value)))
    return keys


def resolve_paths(data, locations):
    """Rewrites, in place, every relative path `data` names to an absolute one (the rule above)."""
    for key in path_keys(data):
        head, _, index = key.partition("[")
        parts = head.split(".")
        node = data
        for part in parts[:-1]:
            node = node[part]
        file = _file_of(locations, key)
        if index:
            items = node[parts[-1]]
            position = int(index.rstrip("]"))
            items[position] = _resolve(items[position], file)
        else:
            node[parts[-1]] = _resolve(node[parts[-1]], file)
