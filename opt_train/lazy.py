"""One lazy-export helper: a package's module `__getattr__` / `__dir__` that import a name on first use."""

from __future__ import annotations

import importlib


def lazy_exports(package, exports):
    """`(__getattr__, __dir__)` for `package`, exporting `exports` = {name: "module:attribute"}.

    `module` is relative to `package` ("schedules:WarmUp"); the attribute is looked up
    on first access and then cached in the package, so TensorFlow loads only when a
    TF-backed name is used. Example, in a package's `__init__.py`:

        __getattr__, __dir__ = lazy_exports(__name__, {"build_model": "build:build_model"})
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name):
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(f"{package}.{module}"), attribute or name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
