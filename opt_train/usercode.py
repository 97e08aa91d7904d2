"""Imports and calls the user's own code that a config names (`package.module:function`), keeping its failures the user's.

A config is code-equivalent: a `factory:` runs whatever it names. What this module
guarantees is where that code is found and how its failures look:

- user modules are found after the installed packages, in the folders the config names
  (`python_path:`, else each config file's folder) and then the current directory, so a
  stray `yaml.py` or `numpy.py` in a downloaded folder never shadows a real package;
- anything the user's code raises, `SystemExit` included, becomes one `UserCodeError`
  naming the config key, with the user's own traceback frames kept for display.

Imports no TensorFlow.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from opt_train.errors import ParamError

_OURS = os.path.dirname(os.path.abspath(__file__))  # opt-train's own files: never the user's frames


class UserCodeError(ValueError):
    """The user's code named at config `key` failed; `details` holds its traceback lines (their frames)."""

    code = "user_code"

    def __init__(self, key, message, details=""):
        self.key = key
        self.message = message
        self.details = details
        super().__init__(f"{key}: {message}" if key else message)


def add_search_path(folders):
    """Appends `folders` (then the current directory) to `sys.path`, after the installed packages."""
    for folder in [*folders, os.getcwd()]:
        folder = os.path.abspath(folder)
        if folder not in sys.path:
            sys.path.append(folder)


def keep_cwd_behind_packages():
    """Moves the current directory, which `python -m` puts first, behind the installed packages.

    Left first only when opt-train itself is imported from there (a source checkout
    run without installing), since it must then be found.
    """
    cwd = os.getcwd()
    front = sys.path[0] if sys.path else None
    if front not in ("", cwd):
        return
    package = os.path.dirname(_OURS)
    if os.path.realpath(package) == os.path.realpath(cwd):
        return
    sys.path.pop(0)
    sys.path.append(cwd)


def _not_a_target(target):
    return ParamError(None, "wrong_type", "must be 'package.module:function'", target,
                      text=f"must be 'package.module:function'. Received: {target!r}")


def split(target):
    """`("package.module", "function")` from `package.module:function` or `package.module.function`."""
    if not isinstance(target, str) or not target.strip():
        raise _not_a_target(target)
    module_name, separator, attribute = target.partition(":")
    if not separator:
        module_name, _, attribute = target.rpartition(".")
    if not module_name or not attribute.isidentifier():
        raise _not_a_target(target)
    return module_name, attribute


def split_spec(spec):
    """`("package.module", "function")` from a config's `{factory: "package.module:function"}`.

    The one parser of the factory form, for models, datasets and losses alike.
    """
    if not isinstance(spec, dict) or set(spec) != {"factory"}:
        keys = sorted(spec) if isinstance(spec, dict) else spec
        raise ParamError(
            "factory", "wrong_type", "must be a name or {factory: 'package.module:function'}", keys,
            text=f"A model spec must be a name or {{factory: 'package.module:function'}}. Received: {keys!r}",
        )
    try:
        return split(spec["factory"])
    except ValueError:
        raise ParamError("factory", "wrong_type", "must be 'package.module:function'", spec["factory"]) from None


def load(target, key):
    """The callable `target` names; `UserCodeError` at `key` when it cannot be imported or is not callable."""
    try:
        module_name, attribute = split(target)
    except ValueError as error:
        raise UserCodeError(key, str(error)) from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise UserCodeError(
                key, f"cannot import module '{module_name}' (no module named '{error.name}'; user modules are "
                "found in python_path, the config's folder and the current directory)"
            ) from None
        raise failure(key, f"importing '{module_name}' failed", error) from None
    except BaseException as error:  # the user's module ran and failed (or exited) at import
        if isinstance(error, KeyboardInterrupt):
            raise
        raise failure(key, f"importing '{module_name}' failed", error) from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise UserCodeError(key, f"module '{module_name}' has no function '{attribute}'")
    return function


def call(function, key, *args, passthrough=(), **kwargs):
    """`function(*args, **kwargs)`; whatever it raises (or a `sys.exit`) becomes a `UserCodeError` at `key`.

    Exceptions of the `passthrough` types are the caller's to interpret (e.g. a
    `ValueError` a factory raises about one of its parameters) and are left as they are.
    """
    try:
        return function(*args, **kwargs)
    except UserCodeError:
        raise
    except passthrough:
        raise
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        name = getattr(function, "__qualname__", repr(function))
        raise failure(key, f"{name}() failed", error) from None


def failure(key, what, error):
    """A `UserCodeError` for `error` raised inside user code, with the user's frames as details."""
    if isinstance(error, SystemExit):
        return UserCodeError(key, f"{what}: it called sys.exit({error.code!r})", user_frames(error))
    summary = f"{type(error).__name__}: {error}".splitlines()[0] if str(error) else type(error).__name__
    return UserCodeError(key, f"{what}: {summary}", user_frames(error))


def graph_refusal(error, factories):
    """A `UserCodeError` for TensorFlow's refusal of a tensor used as a Python bool (or iterated) in the user's
    code while a step is traced into a graph, located at its line; None for any other error.

    `factories`: `{config key: "package.module:function"}` of the user code the run calls
    (`TrainConfig.factories()`); the error is filed at the key whose module holds the line,
    else at `model` (a model's custom layers, loaded from a `.keras` file, live elsewhere).
    Keras 3's `fit` refuses the same code: its steps are traced without AutoGraph too.
    """
    tensorflow = sys.modules.get("tensorflow")
    if tensorflow is None or not isinstance(error, tensorflow.errors.OperatorNotAllowedInGraphError):
        return None
    not_users = _not_users_folders()
    stack = [(tb.tb_frame, tb.tb_lineno) for tb in _tracebacks(error.__traceback__)
             if _is_users(tb.tb_frame.f_code.co_filename, not_users)]
    if not stack:
        return UserCodeError("model", _REFUSAL.format(where="the model"), user_frames(error))
    # The user's frames alone: TensorFlow's own message and frames say nothing the line does not.
    frames = traceback.StackSummary.extract(iter(stack))
    details = "Traceback (most recent call last, your code):\n" + "".join(frames.format())
    code, line = stack[-1][0].f_code, frames[-1]
    files = {key: getattr(sys.modules.get(_module_of(target)), "__file__", None)
             for key, target in factories.items()}
    key = next((key for key, file in files.items()
                if file and os.path.abspath(file) == os.path.abspath(code.co_filename)), "model")
    where = f"{code.co_qualname} ({line.filename}:{line.lineno}: `{(line.line or '').strip()}`)"
    return UserCodeError(key, _REFUSAL.format(where=where), details)


def _tracebacks(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


_REFUSAL = ("{where} uses a tensor as a Python bool or iterates over it, which a step traced into a graph "
            "cannot do (nor can Keras's fit): use keras.ops.cond or tf.cond, keras.ops.where, or tf.while_loop")


def _module_of(target):
    try:
        return split(target)[0]
    except ValueError:
        return None


def _not_users_folders():
    """opt-train's folder and Python's own (the standard library, the installed packages)."""
    import sysconfig

    paths = sysconfig.get_paths()
    return (_OURS, *{os.path.abspath(paths[name]) for name in ("stdlib", "purelib", "platlib")})


def _is_users(filename, not_users):
    """Whether a traceback's file is the user's: under none of `not_users`, nor any site-packages."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(not_users) and os.sep + "site-packages" + os.sep not in path


def user_frames(error):
    """The traceback of `error` without opt-train's and the import machinery's frames (the user's part)."""
    frames = [
        frame for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith((_OURS, "<frozen "))
    ]
    lines = traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    return "Traceback (most recent call last, your code):\n" + "".join(lines) if lines else ""


# ----- found, not imported: what `validate` can know of user code without running it -----


def module_missing(module_name, folders=()):
    """Why `module_name` cannot be imported, judged without importing anything, or None when it may be.

    Only the top-level name is decided (`importlib.util.find_spec` of a top-level name
    runs no code; of a dotted one it would import the parents): that is where a typo or a
    missing install shows. Searched as `load` will: installed packages, then `folders`,
    then the current directory.
    """
    import importlib.util

    top = module_name.split(".")[0]
    if top in sys.modules:
        return None
    added = [os.path.abspath(folder) for folder in [*folders, os.getcwd()]]
    saved = list(sys.path)
    sys.path.extend(folder for folder in added if folder not in sys.path)
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    finally:
        sys.path[:] = saved
    if found is None:
        return (f"cannot import module '{module_name}' (no module named '{top}'; user modules are "
                "found in python_path, the config's folder and the current directory)")
    return None


def source_signature(target, folders=()):
    """The parameters of `package.module:function` read from its source, without importing it.

    Returns `(names, required, takes_any_keyword)` when `target` is a plain `def` at the
    top of a .py file in `folders` (or the current directory), else None (an installed
    package, a compiled module, a function made at run time: only running would tell).
    """
    import ast

    try:
        module_name, attribute = split(target)
    except ValueError:
        return None
    parts = module_name.split(".")
    for folder in [*folders, os.getcwd()]:
        base = os.path.join(os.path.abspath(folder), *parts)
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(path):
                try:
                    with open(path, encoding="utf-8") as handle:
                        tree = ast.parse(handle.read(), path)
                except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                    return None
                return _signature_of(tree, attribute)
    return None


def _signature_of(tree, name):
    import ast

    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node  # the last definition wins, as at import
        elif isinstance(node, (ast.Assign, ast.ImportFrom, ast.Import, ast.ClassDef)) and name in {
            getattr(target, "id", None) for target in getattr(node, "targets", [])
        } | {alias.asname or alias.name for alias in getattr(node, "names", [])} | {getattr(node, "name", None)}:
            found = None  # rebound by other code: only running would tell
    if found is None or found.decorator_list:
        return None
    args = found.args
    positional = args.posonlyargs + args.args
    with_default = len(args.defaults)
    required = [a.arg for a in positional[: len(positional) - with_default]]
    required += [a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults) if default is None]
    names = [a.arg for a in args.args + args.kwonlyargs]  # positional-only ones cannot be passed by name
    return names, required, args.kwarg is not None


def signature(function):
    """`(names, required, takes_any_keyword)` of a callable, as `source_signature` reads them; None if unknown."""
    import inspect

    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = inspect.Parameter
    names = [p.name for p in parameters if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)]
    required = [p.name for p in parameters if p.default is kinds.empty
                and p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)]
    return names, required, any(p.kind is kinds.VAR_KEYWORD for p in parameters)


def call_problem(target, signature, given, supplied=()):
    """`(param, code, message)` when calling `target` with keywords `given` (+ `supplied`, the ones
    opt-train adds) must fail, else None. The one rule `validate` (on the source) and the builders
    (on the imported function) apply, so both name the same parameter with the same code."""
    if signature is None:
        return None
    names, required, any_keyword = signature
    unknown = [key for key in given if key not in names and not any_keyword]
    if unknown:
        return unknown[0], "unknown_key", f"is not a parameter of {target} (it takes {', '.join(names) or 'none'})"
    missing = [name for name in required if name not in given and name not in supplied]
    if missing:
        return missing[0], "missing", f"is required by {target}"
    return None
