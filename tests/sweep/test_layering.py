"""The sweep reads the config layer and the shared modules below it, never the training layer (read from the source
with `ast`: nothing is imported, so no TensorFlow)."""

import ast
import functools
import pathlib

ROOT = pathlib.Path(__file__).parents[2]
PACKAGE = ROOT / "opt_train"


def modules():
    """`{dotted name: path}` of every module under opt_train/ (a package as its __init__.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path, known):
    """The opt_train modules `path` imports, at module level or inside a function (a lazy import reads it too)."""
    return {name for name in _imported_names(path) if name in known}


@functools.cache  # each sweep module's walk reads most of the package again
def _imported_names(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from opt_train import training` imports the package opt_train.training.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return frozenset(names)


def reached(start, known):
    """Every opt_train module `start` loads, directly or through the modules it imports (and their packages)."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        # Loading a module loads each package above it.
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in known]
        todo += sorted(imported(known[name], known))
    return seen - {start}


def test_no_sweep_module_imports_the_training_layer_directly_or_through_another_module():
    known = modules()
    sweep = sorted(name for name in known if name == "opt_train.sweep" or name.startswith("opt_train.sweep."))
    assert len(sweep) >= 8, sweep  # the check reads the real package
    offending = {name: sorted(other for other in reached(name, known) if other.startswith("opt_train.training"))
                 for name in sweep}
    assert not {name: found for name, found in offending.items() if found}


def test_the_check_sees_a_lazy_import_of_the_training_layer(tmp_path):
    # The reference the test above relies on: an import inside a function counts.
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from opt_train.training.pruning import trial_link\n")
    known = {**modules(), "lazy": source}
    assert "opt_train.training.pruning" in reached("lazy", known)
    assert "opt_train.training" in reached("lazy", known)
