"""Reads the assignments of a Python config file from its syntax tree, never running a line of it."""

from __future__ import annotations

import ast
import copy
import math
import operator
import os.path


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
# Pure functions configs call on constants; anything else stays Opaque.
_CALLS = {
    "os.path.join": os.path.join, "int": int, "float": float, "str": str, "bool": bool, "len": len,
    "math.sqrt": math.sqrt, "min": min, "max": max, "abs": abs, "list": list, "range": lambda *a: list(range(*a)),
    "copy.deepcopy": copy.deepcopy, "copy.copy": copy.copy, "dict": dict,
}
# `import tensorflow as tf` is read as `tf`, the spelling the compat pass knows.
_MODULE_SPELLING = {"tensorflow": "tf"}


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

    def __init__(self, source, path):
        self.source = source
        self.path = path
        self.names = {}
        self.lines = {}  # name -> line of its last assignment

    def text(self, node):
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    def run(self, statements):
        for statement in statements:
            self.statement(statement)

    def statement(self, node):
        if isinstance(node, ast.Import):
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
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.method_call(node.value)

    def method_call(self, node):
        """`base_params.update({...})` at top level."""
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "update" and isinstance(func.value, ast.Name):
            target = self.reference(func.value)
            if isinstance(target, dict) and len(node.args) == 1:
                update = self.value(node.args[0])
                if isinstance(update, dict):
                    target.update(update)

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
        return Opaque(self.text(node))

    def binary(self, op, left, right, node):
        if not is_plain(left) or not is_plain(right) or type(op) not in _BINARY:
            return Opaque(self.text(node))
        if isinstance(left, Symbol) or isinstance(right, Symbol):
            return Opaque(self.text(node))
        if isinstance(op, ast.Mod) and isinstance(left, str) and isinstance(right, list):
            right = tuple(right)
        return _BINARY[type(op)](left, right)

    def call(self, node):
        func = node.func
        # `x.copy()` of a dict or list the config built.
        if isinstance(func, ast.Attribute) and func.attr == "copy" and not node.args:
            base = self.value(func.value)
            if isinstance(base, (dict, list)):
                return copy.deepcopy(base)
        name = ast.unparse(func)
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
