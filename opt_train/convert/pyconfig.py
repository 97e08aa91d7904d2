"""Reads the assignments of a Python config file from its syntax tree, never running a line of it.

A small, safe evaluator: literals, names the file assigned, arithmetic, comparisons,
list / tuple operations, comprehensions, a fixed set of pure functions (`range`,
`min`, `os.path.join`, and the numpy constructors configs use for learning-rate
lists: `numpy.linspace`, `geomspace`, `logspace`, `arange`, `array`), and calls to
the file's own functions whose bodies hold only assignments, `if` and `return`.
Sizes are bounded (no list, range or power beyond `LIMIT`); anything else stays
`Opaque`, keeping its source text. Nothing is imported, nothing is `exec`-ed.
"""

from __future__ import annotations

import ast
import copy
import math
import operator
import os.path

import numpy as np

# The largest list, range or comprehension the evaluator builds, and the largest integer
# exponent: a config's rate lists are hundreds of entries; a bigger one is left Opaque.
LIMIT = 100_000
MAX_EXPONENT = 4096
# Nested calls of the file's own functions.
MAX_DEPTH = 8


class Symbol(str):
    """A name the config imports or reaches through a module (`tf.float32`, `open_seq2seq.models.Text2Text`)."""


class Opaque:
    """A value that would need the config to run (a function call, an unknown name); keeps its source."""

    def __init__(self, source):
        self.source = source

    def __repr__(self):
        return f"<{self.source}>"


class PyConfigError(ValueError):
    """The file is not Python a config reader can parse; carries the line."""

    def __init__(self, path, line, message):
        self.path, self.line = path, line
        super().__init__(f"{path}:{line}: {message}")


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_, ast.IsNot: operator.is_not,
}
def _bounded(items):
    items = list(items)
    if len(items) > LIMIT:
        raise _Unfollowed(f"more than {LIMIT} items")
    return items


def _range(*args):
    found = range(*args)
    if len(found) > LIMIT:
        raise _Unfollowed(f"more than {LIMIT} items")
    return list(found)


def _size(function, args, kwargs):
    """How many numbers a numpy constructor would make, computed before it runs."""
    if function in (np.linspace, np.geomspace, np.logspace):
        return int(kwargs.get("num", args[2] if len(args) > 2 else 50))
    if function is np.arange:
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (list(args) + [1])[:3]
        return math.ceil((stop - start) / step)
    if function in (np.ones, np.zeros, np.full):
        shape = args[0] if args else kwargs.get("shape")
        return int(np.prod(shape))
    if function in (np.repeat, np.tile):
        return len(np.ravel(args[0])) * int(np.prod(args[1] if len(args) > 1 else kwargs.get("repeats", 1)))
    return 0  # the others make no more numbers than they are given


def _numpy(function):
    """A numpy constructor whose result is returned as a plain list of Python numbers."""

    def call(*args, **kwargs):
        if _size(function, args, kwargs) > LIMIT:
            raise _Unfollowed(f"more than {LIMIT} items")
        return _bounded(np.asarray(function(*args, **kwargs)).tolist())

    return call


# Pure functions configs call on constants; anything else stays Opaque.
_CALLS = {
    "os.path.join": os.path.join, "int": int, "float": float, "str": str, "bool": bool, "len": len,
    "math.sqrt": math.sqrt, "math.exp": math.exp, "math.log": math.log, "math.ceil": math.ceil,
    "math.floor": math.floor, "min": min, "max": max, "abs": abs, "round": round, "sum": sum,
    "list": _bounded, "tuple": lambda *a: _bounded(*a), "sorted": lambda *a, **k: _bounded(sorted(*a, **k)),
    "reversed": lambda a: _bounded(reversed(a)), "zip": lambda *a: _bounded(zip(*a)),
    "enumerate": lambda *a: _bounded(enumerate(*a)), "range": _range,
    "copy.deepcopy": copy.deepcopy, "copy.copy": copy.copy, "dict": dict,
    **{f"numpy.{name}": _numpy(getattr(np, name))
       for name in ("linspace", "geomspace", "logspace", "arange", "array", "asarray", "concatenate",
                    "ones", "zeros", "full", "repeat", "tile", "cumsum", "exp", "sqrt", "power")},
}
# `import numpy as np` is read as `numpy`, so `np.linspace` is `numpy.linspace`.
# `import tensorflow as tf` is read as `tf`, the spelling the compat pass knows.
_MODULE_SPELLING = {"tensorflow": "tf"}
# Statements a function of the file may hold for a call of it to be followed.
_FOLLOWED = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.If, ast.Return, ast.Pass, ast.Expr, ast.Assert,
             ast.For, ast.While, ast.With, ast.Try)  # the last four: names they change become Opaque
# Methods that read a dict, list or str without changing it.
_READING_METHODS = {
    dict: ("get", "keys", "values", "items", "copy"),
    list: ("index", "count", "copy"),
    str: ("startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "split", "rsplit", "join",
          "replace", "format", "zfill"),
}


class _Returned(Exception):
    def __init__(self, value):
        self.value = value


class _Unfollowed(Exception):
    """A function body holds something the reader does not follow: the call stays Opaque."""


def is_plain(value):
    """True for values YAML can hold: no Opaque anywhere inside."""
    if isinstance(value, Opaque):
        return False
    if isinstance(value, dict):
        return all(is_plain(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return all(is_plain(item) for item in value)
    return True


def plain(value):
    """`value` with Symbols as str and tuples as lists (for YAML)."""
    if isinstance(value, Symbol):
        return str(value)
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


class Reader:
    """Walks a module's top-level statements, keeping the names it can evaluate."""

    def __init__(self, source, path, depth=0):
        self.source = source
        self.path = path
        self.names = {}
        self.lines = {}  # name -> line of its last assignment
        self.functions = {}  # name -> ast.FunctionDef of the file's own functions
        self.depth = depth
        self.strict = False  # inside a followed function: an unfollowed statement stops the call

    def text(self, node):
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    def run(self, statements):
        for statement in statements:
            self.statement(statement)

    def statement(self, node):
        if self.strict and not isinstance(node, _FOLLOWED):
            raise _Unfollowed(type(node).__name__)
        if isinstance(node, ast.Return):
            raise _Returned(self.value(node.value) if node.value is not None else None)
        if isinstance(node, ast.FunctionDef):
            self.functions[node.name] = node
            self.names[node.name] = _Function(node.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.names[alias.asname] = Symbol(_MODULE_SPELLING.get(alias.name, alias.name))
                else:
                    top = alias.name.split(".")[0]
                    self.names[top] = Symbol(_MODULE_SPELLING.get(top, top))
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = _MODULE_SPELLING.get(node.module, node.module)
            for alias in node.names:
                self.names[alias.asname or alias.name] = Symbol(f"{module}.{alias.name}")
        elif isinstance(node, ast.Assign):
            value = self.value(node.value)
            for target in node.targets:
                self.assign(target, value, node.lineno)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.assign(node.target, self.value(node.value), node.lineno)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            current = self.names.get(node.target.id, Opaque(node.target.id))
            self.assign(node.target, self.binary(node.op, current, self.value(node.value), node), node.lineno)
        elif isinstance(node, ast.If):
            test = self.value(node.test)
            if not isinstance(test, Opaque):
                self.run(node.body if test else node.orelse)
            elif self.strict:
                raise _Unfollowed("if")
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.method_call(node.value)
        elif self.strict and isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant):
            raise _Unfollowed("expression")
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.Try, ast.Delete)):
            # Not followed: every name it may assign or change stops having a known value.
            for name in _changed_names(node):
                if not isinstance(self.names.get(name), (Symbol, _Function)):
                    self.names[name] = Opaque(f"{name} (changed by the {type(node).__name__.lower()} at line "
                                              f"{node.lineno})")

    def method_call(self, node):
        """`base_params.update({...})`, `rates.append(x)`, `rates.extend([...])` at top level.

        Any other call of a method on a name the file assigned may change it: the name
        becomes Opaque rather than keep a value the file no longer has.
        """
        func = node.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Subscript))):
            return
        target = self.reference(func.value)
        args = [self.value(arg) for arg in node.args]
        followed = not node.keywords and len(args) == 1 and is_plain(args[0])
        if followed and func.attr == "update" and isinstance(target, dict) and isinstance(args[0], dict):
            target.update(args[0])
        elif followed and func.attr == "append" and isinstance(target, list):
            target.append(args[0])
        elif followed and func.attr == "extend" and isinstance(target, list) and isinstance(args[0], list):
            target.extend(args[0])
        elif isinstance(func.value, ast.Name) and func.value.id in self.names \
                and not isinstance(self.names[func.value.id], Symbol):
            self.names[func.value.id] = Opaque(f"{func.value.id} (changed by line {node.lineno})")

    def assign(self, target, value, line):
        if isinstance(target, ast.Name):
            self.names[target.id] = value
            self.lines[target.id] = line
        elif isinstance(target, ast.Subscript):
            container = self.reference(target.value)
            key = self.value(target.slice)
            if isinstance(container, dict) and not isinstance(key, Opaque):
                container[key] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (list, tuple)):
            if len(target.elts) == len(value):
                for element, item in zip(target.elts, value):
                    self.assign(element, item, line)

    def reference(self, node):
        """The live object a `name` / `name[key]` chain denotes (not a copy), so it can be changed."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Subscript):
            container, key = self.reference(node.value), self.value(node.slice)
            if isinstance(container, (dict, list)) and not isinstance(key, Opaque):
                return container[key]
        return None

    # -- expressions -------------------------------------------------------
    def value(self, node):
        try:
            return self.evaluate(node)
        except Exception:  # an expression this reader cannot follow stays as its source
            return Opaque(self.text(node))

    def evaluate(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Dict):
            result = {}
            for key, item in zip(node.keys, node.values):
                if key is None:  # {**other, ...}
                    spread = self.value(item)
                    if not isinstance(spread, dict):
                        return Opaque(self.text(node))
                    result.update(copy.deepcopy(spread))
                else:
                    name = self.value(key)
                    if isinstance(name, Opaque):
                        return Opaque(self.text(node))
                    result[name] = self.value(item)
            return result
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return [self.value(item) for item in node.elts]
        if isinstance(node, ast.Name):
            if node.id in self.names:
                found = self.names[node.id]
                return copy.deepcopy(found) if isinstance(found, (dict, list)) else found
            return Opaque(node.id)
        if isinstance(node, ast.Attribute):
            base = self.value(node.value)
            if isinstance(base, Symbol):
                return Symbol(f"{base}.{node.attr}")
            if isinstance(base, Opaque):
                return Opaque(self.text(node))
            return getattr(base, node.attr)
        if isinstance(node, ast.BinOp):
            return self.binary(node.op, self.value(node.left), self.value(node.right), node)
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand)
            if isinstance(operand, Opaque):
                return operand
            if isinstance(node.op, ast.USub):
                return -operand
            if isinstance(node.op, ast.UAdd):
                return +operand
            if isinstance(node.op, ast.Not):
                return not operand
            return Opaque(self.text(node))
        if isinstance(node, ast.Compare):
            left = self.value(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = self.value(right_node)
                if isinstance(left, Opaque) or isinstance(right, Opaque):
                    return Opaque(self.text(node))
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.BoolOp):
            values = [self.value(item) for item in node.values]
            if any(isinstance(item, Opaque) for item in values):
                return Opaque(self.text(node))
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.IfExp):
            test = self.value(node.test)
            if isinstance(test, Opaque):
                return Opaque(self.text(node))
            return self.value(node.body if test else node.orelse)
        if isinstance(node, ast.Subscript):
            container, key = self.value(node.value), self.value(node.slice)
            if isinstance(container, Opaque) or isinstance(key, Opaque):
                return Opaque(self.text(node))
            return container[key]
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            found = []
            self.comprehension(node.generators, lambda: found.append(self.value(node.elt)))
            return found
        if isinstance(node, ast.DictComp):
            found = {}

            def emit():
                key = self.value(node.key)
                if isinstance(key, Opaque):
                    raise _Unfollowed("a key needs the config to run")
                found[key] = self.value(node.value)

            self.comprehension(node.generators, emit)
            return found
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                item = self.value(part.value if isinstance(part, ast.FormattedValue) else part)
                if isinstance(item, Opaque) or isinstance(part, ast.FormattedValue) and part.format_spec:
                    return Opaque(self.text(node))
                parts.append(str(item))
            return "".join(parts)
        return Opaque(self.text(node))

    def comprehension(self, generators, emit, count=None):
        """Runs `emit` for each binding of the comprehension's targets; the names are restored after."""
        count = count if count is not None else [0]
        saved = dict(self.names)
        try:
            generator = generators[0]
            iterable = self.value(generator.iter)
            if not isinstance(iterable, (list, tuple, dict, str)) or isinstance(iterable, Symbol):
                raise _Unfollowed("the iterable needs the config to run")
            for item in list(iterable):
                count[0] += 1
                if count[0] > LIMIT:
                    raise _Unfollowed(f"more than {LIMIT} items")
                self.bind(generator.target, item)
                tests = [self.value(test) for test in generator.ifs]
                if any(isinstance(test, Opaque) for test in tests):
                    raise _Unfollowed("a condition needs the config to run")
                if all(tests):
                    if len(generators) > 1:
                        self.comprehension(generators[1:], emit, count)
                    else:
                        emit()
        finally:
            self.names = saved

    def bind(self, target, value):
        if isinstance(target, ast.Name):
            self.names[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (list, tuple)) \
                and len(target.elts) == len(value):
            for element, item in zip(target.elts, value):
                self.bind(element, item)
        else:
            raise _Unfollowed("an unpacking the reader does not follow")

    def binary(self, op, left, right, node):
        if not is_plain(left) or not is_plain(right) or type(op) not in _BINARY:
            return Opaque(self.text(node))
        if isinstance(left, Symbol) or isinstance(right, Symbol):
            return Opaque(self.text(node))
        if isinstance(op, ast.Mod) and isinstance(left, str) and isinstance(right, list):
            right = tuple(right)
        if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT \
                and isinstance(left, int) and abs(left) > 1:
            return Opaque(self.text(node))
        if isinstance(op, ast.Mult) and (isinstance(left, (list, str)) or isinstance(right, (list, str))):
            sequence, times = (left, right) if isinstance(left, (list, str)) else (right, left)
            if not isinstance(times, int) or len(sequence) * max(times, 0) > LIMIT:
                return Opaque(self.text(node))
        return _BINARY[type(op)](left, right)

    def call(self, node):
        func = node.func
        # `x.copy()` of a dict or list the config built; `.tolist()` of a numpy constructor's list.
        if isinstance(func, ast.Attribute) and func.attr in ("copy", "tolist") and not node.args:
            base = self.value(func.value)
            if isinstance(base, (dict, list)):
                return copy.deepcopy(base)
        if isinstance(func, ast.Name) and isinstance(self.names.get(func.id), _Function):
            return self.follow(self.functions[func.id], node)
        if isinstance(func, ast.Attribute):
            base = self.value(func.value)
            kind = next((k for k in _READING_METHODS if isinstance(base, k) and not isinstance(base, Symbol)), None)
            if kind is not None and func.attr in _READING_METHODS[kind]:
                args = [self.value(arg) for arg in node.args]
                kwargs = {keyword.arg: self.value(keyword.value) for keyword in node.keywords}
                if None in kwargs or not all(is_plain(a) for a in [*args, *kwargs.values()]) \
                        or any(isinstance(a, Symbol) for a in args):
                    return Opaque(self.text(node))
                found = getattr(base, func.attr)(*args, **kwargs)
                if isinstance(found, str) and len(found) > LIMIT:
                    return Opaque(self.text(node))
                return _bounded(found) if func.attr in ("keys", "values", "items", "split", "rsplit") else found
        name = ast.unparse(func)
        resolved = self.value(func) if isinstance(func, ast.Attribute) else None
        if isinstance(resolved, Symbol) and str(resolved) in _CALLS:
            name = str(resolved)
        if name not in _CALLS:
            return Opaque(self.text(node))
        args = [self.value(arg) for arg in node.args]
        kwargs = {}
        for keyword in node.keywords:
            item = self.value(keyword.value)
            if keyword.arg is None:
                if not isinstance(item, dict):
                    return Opaque(self.text(node))
                kwargs.update(item)
            else:
                kwargs[keyword.arg] = item
        if any(isinstance(arg, (Opaque, Symbol)) for arg in args):
            return Opaque(self.text(node))
        return _CALLS[name](*args, **kwargs)


def _changed_names(node):
    """Names a statement the reader does not follow may assign, delete or change in place."""
    found = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            found.add(inner.id)
        elif isinstance(inner, (ast.Subscript, ast.Attribute)) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            base = inner.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                found.add(base.id)
        elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                and isinstance(inner.func.value, ast.Name):
            found.add(inner.func.value.id)
    return found


class _Function(str):
    """A function the file defines (a marker in `names`; its body is in `Reader.functions`)."""


def _follow(self, function, node):
    """The value a call of the file's own `function` returns, read from its body, or Opaque."""
    if self.depth >= MAX_DEPTH or function.args.vararg or function.args.kwarg or function.args.kwonlyargs:
        return Opaque(self.text(node))
    parameters = [arg.arg for arg in function.args.posonlyargs + function.args.args]
    defaults = dict(zip(parameters[len(parameters) - len(function.args.defaults):], function.args.defaults))
    args = [self.value(arg) for arg in node.args]
    keywords = {keyword.arg: self.value(keyword.value) for keyword in node.keywords}
    if None in keywords or len(args) > len(parameters) or any(isinstance(a, ast.Starred) for a in node.args):
        return Opaque(self.text(node))
    inner = Reader(self.source, self.path, self.depth + 1)
    inner.names = dict(self.names)
    inner.functions = self.functions
    for position, parameter in enumerate(parameters):
        if position < len(args):
            inner.names[parameter] = args[position]
        elif parameter in keywords:
            inner.names[parameter] = keywords.pop(parameter)
        elif parameter in defaults:
            inner.names[parameter] = self.value(defaults[parameter])
        else:
            return Opaque(self.text(node))
    if keywords:
        return Opaque(self.text(node))
    inner.strict = True
    try:
        inner.run(function.body)
    except _Returned as returned:
        return returned.value
    except _Unfollowed:
        return Opaque(self.text(node))
    return None


Reader.follow = _follow


def read_config(path):
    """`(names, lines)`: every top-level name the file assigns, with what could be evaluated.

    Raises `PyConfigError` when the file is not valid Python.
    """
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as error:
        raise PyConfigError(path, error.lineno or 1, f"not valid Python ({error.msg})") from None
    reader = Reader(source, path)
    reader.run(tree.body)
    return reader.names, reader.lines
