"""The TF-free rule modules import each other without a circle, and one lazy-export helper serves every package."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]


def imports_of(path):
    """The `opt_train` modules `path` imports, at module level or inside a function (a lazy circle is one too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("opt_train"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("opt_train"))
    return found


def module_graph():
    """module -> the plain modules (not packages: a module always loads its package) it imports."""
    modules = {}
    for path in (ROOT / "opt_train").rglob("*.py"):
        if path.name != "__init__.py":
            modules[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    return {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}


def test_no_import_circle_among_the_config_layer_and_the_rule_modules():
    graph = module_graph()
    watched = [name for name in graph if name.startswith(("opt_train.config", "opt_train.optimizers.specs",
                                                          "opt_train.optimizers.names", "opt_train.params",
                                                          "opt_train.suggest", "opt_train.errors"))]

    def reaches(start, target, seen):
        for nxt in graph.get(start, ()):
            if nxt == target:
                return True
            if nxt not in seen:
                seen.add(nxt)
                if reaches(nxt, target, seen):
                    return True
        return False

    circles = [name for name in watched if reaches(name, name, set())]
    assert not circles, f"import circles through {circles}"


@pytest.mark.parametrize("package", ["optimizers", "lr_policies", "models", "data", "training"])
def test_every_package_uses_the_one_lazy_export_helper(package):
    source = (ROOT / "opt_train" / package / "__init__.py").read_text()
    assert "lazy_exports(" in source and "__getattr__, __dir__ = lazy_exports" in source
    assert "def __getattr__" not in source


def test_lazy_exports_load_on_first_use_without_tensorflow_at_import():
    code = (
        "import sys\n"
        "import opt_train.optimizers as o, opt_train.lr_policies as l, opt_train.models as m, opt_train.data as d\n"
        "assert 'tensorflow' not in sys.modules\n"
        "assert 'get_lr_policy' in dir(l) and 'build_model' in dir(m)\n"
        "assert o.OPTIMIZER_NAMES[0] == 'GradientDescent' and callable(o.describe)\n"
        "try:\n    o.nope\nexcept AttributeError as error:\n    assert 'nope' in str(error)\n"
        "else:\n    raise SystemExit('no AttributeError')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
