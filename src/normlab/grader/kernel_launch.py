"""Lab 11's kernels launched by the grader itself: the kernel points are earned by what a
learner's ``@triton.jit`` kernel writes into the grader's own buffers, never by what the
notebook reports about its launches.

The grader takes the *source* of each ``@triton.jit`` function of the notebook (door 2: from
the notebook's cells; door 1: from the kernels in the learner's namespace), checks that it is
Triton (:func:`refusal`: its names are its parameters, its locals, ``tl`` and a few builtins;
no attribute reaches past the language into NumPy or a module), compiles it afresh in a
namespace of its own and launches it with the grid, constexprs and buffers a check chooses
(:class:`Launcher`). In ``normlab grade`` that happens in a process of its own, in which no
cell of the notebook ever ran (``core.Lab.companion``): a notebook that patches Triton or the
interpreter patches its own process, not this one.

Under Triton's interpreter a load or store outside the tensors runs on raw memory: an unmasked
load reads whatever follows the tensor and a store past it corrupts the heap, which kills the
learner's kernel ("corrupted size vs. prev_size"). Every launch here, and every launch of a
notebook that calls :func:`guard_launches` (lab 11's first cell does), has each load and store
checked *before* it touches memory: the launch stops with :class:`OutOfBounds`, which names
the kernel, the tensor and the fix (``mask=cols < N``). A grader's launch also knows which rows
each program owns (``rows:K`` in its spec) and names a load that reads past its row, even
where the next row is still inside the tensor.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import linecache
import re
import types

import numpy as np

from normlab.grader import trap

#: the name under which the companion's launcher is reached (``Submission.call``)
LAUNCH = "tri_launch"
#: builtins a kernel may call (Triton's front end accepts these)
BUILTINS = frozenset({"range", "min", "max", "abs", "float", "int", "bool", "print"})
#: attributes a kernel may read on ``triton``
TRITON_ATTRIBUTES = frozenset({"cdiv", "next_power_of_2"})
#: ways a kernel may be declared
DECORATORS = ("triton.jit", "jit")


class KernelRefused(Exception):
    """A kernel's source is not one the grader launches (the message says why)."""


class KernelNotImplemented(Exception):
    """A kernel that is still the lab's stub (``raise NotImplementedError``)."""


class OutOfBounds(Exception):
    """A load or store outside the memory it may touch, stopped before it ran."""


# ----------------------------------------------------------------------------- sources


def _decorated_jit(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        try:
            if ast.unparse(target) in DECORATORS:
                return True
        except Exception:  # noqa: BLE001 -- an odd decorator is simply not a kernel's
            continue
    return False


def sources_from_cells(cells: list[str]) -> dict[str, str]:
    """The notebook's ``@triton.jit`` functions (defined at a cell's top level), by name, as
    source without decorators; a later definition replaces an earlier one, as running the
    cells does. A cell that does not parse defines none."""
    found: dict[str, str] = {}
    # within the grader's token bounds (a parse bomb is not parsed), one parse at a time
    for tree in trap.parse_cells(tuple(_without_magics(cell) for cell in cells)):
        if not isinstance(tree, ast.Module):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and _decorated_jit(node):
                found[node.name] = _plain(node)
    return found


def _without_magics(source: str) -> str:
    return "\n".join(
        "pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _plain(node: ast.FunctionDef) -> str:
    import copy

    node = copy.copy(node)
    node.decorator_list = []
    return ast.unparse(node)


def is_kernel(value) -> bool:
    """A ``@triton.jit`` function (compiled, or interpreted under ``TRITON_INTERPRET=1``)."""
    module = type(value).__module__
    return module.startswith("triton.runtime") and isinstance(
        getattr(value, "fn", None), types.FunctionType
    )


def sources_from_objects(objects: dict) -> dict[str, str]:
    """The kernels a learner's namespace holds (door 1): those of the globals of every
    function and class given to ``check()``, as source without decorators."""
    namespaces: list[dict] = []
    pending, seen = list(objects.values()), set()
    while pending:
        value = pending.pop(0)
        if id(value) in seen:
            continue
        seen.add(id(value))
        functions = [value]
        if isinstance(value, type):
            functions = [getattr(v, "__func__", v) for v in vars(value).values()]
        for function in functions:
            # a function wrapped by another (a decorator): the wrapped one's namespace too
            pending += (
                [getattr(function, "__wrapped__", None)] if hasattr(function, "__wrapped__") else []
            )
            for cell in getattr(function, "__closure__", None) or ():
                try:
                    if isinstance(cell.cell_contents, types.FunctionType):
                        pending.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    continue
            globals_ = getattr(function, "__globals__", None)
            if isinstance(globals_, dict) and all(globals_ is not n for n in namespaces):
                namespaces.append(globals_)
    found: dict[str, str] = {}
    for namespace in namespaces:
        for name, value in list(namespace.items()):
            if not (isinstance(name, str) and is_kernel(value)) or name in found:
                continue
            try:
                tree = trap.parse(_dedent(inspect.getsource(value.fn)))
            except (OSError, TypeError, SyntaxError, ValueError):
                # no source to read (code run by exec from a string): in the learner's own
                # kernel, where check() is advice, the kernel is launched as it is
                found[name] = value
                continue
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == value.fn.__name__:
                    found[name] = _plain(node)
    return found


def _dedent(source: str) -> str:
    import textwrap

    return textwrap.dedent(source)


# ----------------------------------------------------------------------------- what a kernel may be


def _public(owner) -> set[str]:
    return {name for name in dir(owner) if not name.startswith("_")}


def _language_names():
    import triton.language as tl

    def functions(module):
        return {
            name
            for name in _public(module)
            if not isinstance(getattr(module, name, None), types.ModuleType)
        }

    values = set()
    for owner in (tl.tensor, tl.dtype, tl.pointer_type, tl.block_type):
        values |= _public(owner)
    values |= {"dtype", "shape", "type", "element_ty", "numel"}
    values -= {"handle", "item"}  # the interpreter's NumPy data, and a host value
    return functions(tl), functions(tl.math), values


REFUSED = {
    "import": "imports a module",
    "global": "declares a global",
    "definition": "defines a function or class inside the kernel",
    "comprehension": "uses a comprehension or lambda",
    "other": "uses Python that Triton does not compile ({node})",
}


def _stub_raise(node: ast.Raise) -> bool:
    """``raise NotImplementedError(...)``: the lab's stub, allowed (the launch says so)."""
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError" and node.cause is None


def is_stub(source: str) -> bool:
    try:
        tree = trap.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return any(isinstance(n, ast.Raise) and _stub_raise(n) for n in ast.walk(tree))


def _cut(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def refusal(name: str, source: str, kernels: set[str]) -> str:
    """Why the kernel ``name`` (its source, without decorators) is not launched, or "".

    A kernel is Triton: its names are its parameters, its locals, ``tl``, ``triton.cdiv``, a
    few builtins and the notebook's other ``@triton.jit`` functions; an attribute is one of the
    language's (``tl.load``, ``x.to``, ``Y.dtype.element_ty``), never a private one. Under the
    interpreter a kernel's body is Python, and anything else (a module, NumPy data behind a
    tensor) would compute outside the kernel.
    """
    name = _cut(name)
    try:
        tree = trap.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return f"`{name}` does not parse"
    function = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(function, ast.FunctionDef) or function.name != name:
        return f"`{name}` is not a single function"
    arguments = function.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.posonlyargs:
        return f"`{name}` takes *args, **kwargs or keyword-only parameters"
    for default in arguments.defaults:
        if not isinstance(default, ast.Constant):
            return f"`{name}` has a default value that is not a constant"
    parameters = {a.arg for a in arguments.args}
    for argument in arguments.args:
        if argument.annotation is not None and ast.unparse(argument.annotation) not in (
            "tl.constexpr",
            "triton.language.constexpr",
        ):
            return f"`{name}`: parameter `{argument.arg}` is annotated with something other than tl.constexpr"
    language, math, values = _language_names()
    reserved = {"tl", "triton"} | BUILTINS | kernels
    assigned = {
        node.id
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }
    if assigned & reserved:
        return f"`{name}` assigns to `{sorted(assigned & reserved)[0]}`, a name of the language"
    known = parameters | assigned | reserved | {"NotImplementedError"}
    allowed = (
        ast.FunctionDef,
        ast.arguments,
        ast.arg,
        ast.Expr,
        ast.Assign,
        ast.AugAssign,
        ast.AnnAssign,
        ast.Return,
        ast.If,
        ast.For,
        ast.While,
        ast.Break,
        ast.Continue,
        ast.Pass,
        ast.Assert,
        ast.Name,
        ast.Attribute,
        ast.Call,
        ast.keyword,
        ast.Subscript,
        ast.Slice,
        ast.Tuple,
        ast.List,
        ast.Constant,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.IfExp,
        ast.expr_context,
        ast.operator,
        ast.unaryop,
        ast.boolop,
        ast.cmpop,
    )
    nodes = list(ast.walk(function))
    # names first (`np.save` is refused for `np`, not for its attribute), then attributes in
    # source order, the innermost first (`x.handle.data`: `.handle`)
    order = {id(node): index for index, node in enumerate(nodes)}
    nodes.sort(
        key=lambda node: (
            (1, node.lineno, node.col_offset, node.end_col_offset, 0)
            if isinstance(node, ast.Attribute)
            else (0, 0, 0, 0, order[id(node)])
        )
    )
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return f"`{name}` {REFUSED['import']}"
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"`{name}` {REFUSED['global']}"
        if isinstance(
            node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
        ):
            return f"`{name}` {REFUSED['comprehension']}"
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node is not function
        ):
            return f"`{name}` {REFUSED['definition']}"
        if isinstance(node, ast.Raise) and _stub_raise(node):
            continue
        if not isinstance(node, allowed):
            return f"`{name}` uses Python that Triton does not compile ({type(node).__name__})"
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known:
            return (
                f"`{name}` uses `{_cut(node.id)}`, which is not one of its parameters: pass it as an "
                "argument (a `tl.constexpr` for a constant)"
            )
        if isinstance(node, ast.Attribute):
            attribute = node.attr
            owner = ast.unparse(node.value)
            if attribute.startswith("_"):
                return f"`{name}` reads the private attribute `{attribute}`"
            if owner == "tl":
                ok = attribute in language or attribute == "math"
            elif owner == "tl.math":
                ok = attribute in math
            elif owner == "triton":
                ok = attribute in TRITON_ATTRIBUTES
            else:
                ok = attribute in values
            if not ok:
                shown = (
                    f"{owner}.{attribute}"
                    if owner in ("tl", "tl.math", "triton")
                    else f".{attribute}"
                )
                return f"`{name}` uses `{_cut(shown)}`, which is not part of Triton's language"
    return ""


# ----------------------------------------------------------------------------- the memory guard


class _Guard:
    """The memory each running launch may touch; checked by the interpreter's loads and stores.

    ``regions``: (start, end, name, rows) per tensor argument: its bytes, and ``rows``, the
    number of rows each program owns (program p owns rows p*rows .. p*rows + rows - 1), with the
    bytes of one row, or None where a program may touch the whole tensor.
    """

    def __init__(self):
        self.launch = None  # (kernel name, regions) of the launch running now
        self.planned: dict | None = None  # name -> rows, set by the grader's own launch
        self.violation = ""

    def check(self, builder, ptrs, mask, action: str) -> None:
        if self.launch is None:
            return
        kernel, regions = self.launch
        addresses = np.asarray(ptrs.data, dtype=np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        touched = addresses[active]
        if touched.size == 0:
            return
        itemsize = _itemsize(ptrs)
        program = int(builder.grid_idx[0]) if builder.grid_idx is not None else 0
        allowed = np.zeros(touched.shape, bool)
        for start, end, _, rows, row_bytes in regions:
            inside = (touched >= start) & (touched + itemsize <= end)
            if rows is not None:
                row = (touched.astype(np.int64) - start) // row_bytes
                inside &= (row >= program * rows) & (row < program * rows + rows)
            allowed |= inside
        if allowed.all():
            return
        address = int(touched[~allowed][0])
        message = _outside(address, itemsize, regions, program, action, kernel) or (
            f"`{kernel}`, program {program}: a `tl.{action}` reaches outside every tensor the "
            f"kernel was given: {FIX}"
        )
        self.violation = message
        raise OutOfBounds(message)


def _itemsize(ptrs) -> int:
    from triton.runtime.interpreter import _get_np_dtype

    return _get_np_dtype(ptrs.get_element_ty()).itemsize


FIX = "mask it with `mask=cols < N` (and `other=0.0` on a load)"


def _outside(address, itemsize, regions, program, action, kernel) -> str:
    """Why this access may not run ("" when it may), naming the kernel, program and tensor."""
    what = f"`{kernel}`, program {program}: a `tl.{action}`"
    for start, end, name, rows, row_bytes in regions:
        if start <= address and address + itemsize <= end:
            if rows is None:
                return ""
            first, last = program * rows, program * rows + rows - 1
            row = (address - start) // row_bytes
            if first <= row <= last:
                return ""
            if row_bytes == itemsize:  # a vector of one entry per row (a statistic)
                return (
                    f"{what} of `{name}` reaches entry {row}, outside this program's entries "
                    f"{first} to {last}: {FIX}"
                )
            column = (address - start) % row_bytes // itemsize
            side = "past" if row > last else "before"
            return (
                f"{what} of `{name}` reaches {side} its rows (row {row}, column {column}; this "
                f"program owns rows {first} to {last}): {FIX}"
            )
    # outside every tensor: where, from the nearest tensor that starts before it
    before = [r for r in regions if r[0] <= address]
    if before:
        start, end, name, *_ = max(before, key=lambda r: r[0])
        index, size = (address - start) // itemsize, (end - start) // itemsize
        return (
            f"{what} reaches index {index} of `{name}`, past its end (its size is {size}), "
            f"outside every tensor the kernel was given: {FIX}"
        )
    return f"{what} reaches outside every tensor the kernel was given: {FIX}"


GUARD = _Guard()
_INSTALLED = False


def _patch_language_once(interpreter) -> types.SimpleNamespace:
    """Within one launch, patch Triton's language for the interpreter once per set of modules.

    The interpreter patches ``triton.language`` (each builtin rerouted to NumPy) when a launch
    starts, restoring it when the launch ends, and again at every call of a ``@triton.jit``
    function from inside a kernel: ``tl.sum`` and ``tl.max`` are such functions, called once by
    every program of a row-wise norm. Those inner patches are never restored, and after the
    first they change nothing (what they would reroute is rerouted already), but each walks
    every member of the language's modules: a fifth of lab 11's grading time under the
    interpreter went there. Here an inner call whose modules were patched already in this
    launch is skipped. Where the interpreter is not built as expected, nothing is changed."""
    state = types.SimpleNamespace(seen=None)
    patch = getattr(interpreter, "_patch_lang", None)
    scope = getattr(interpreter, "_LangPatchScope", None)
    if patch is None or scope is None:
        return state
    import triton.language as tl

    languages = (tl, tl.core)

    def patch_once(fn):
        seen = state.seen
        if seen is None:  # not inside a launch of this process's guard
            return patch(fn)
        key = frozenset(
            id(value)
            for value in getattr(fn, "__globals__", {}).values()
            if isinstance(value, types.ModuleType) and any(value is lang for lang in languages)
        )
        if key in seen:
            return scope()  # nothing to restore: nothing was changed
        seen.add(key)
        return patch(fn)

    interpreter._patch_lang = patch_once
    return state


def guard_launches() -> None:
    """Check every load and store of every Triton launch in this process (under the
    interpreter) before it touches memory; an access outside the launch's tensors stops the
    launch with :class:`OutOfBounds` instead of corrupting memory. Idempotent; nothing to do
    on a GPU (where the compiled kernel runs, not the interpreter)."""
    global _INSTALLED
    if _INSTALLED:
        return
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    builder_class = interpreter.InterpreterBuilder
    load, store = builder_class.create_masked_load, builder_class.create_masked_store
    rmw, cas = builder_class.create_atomic_rmw, builder_class.create_atomic_cas

    # Only the leading arguments (the pointers and the mask) are read; the cache and eviction
    # arguments after them differ between Triton releases (3.8 passes cache_modifier and
    # eviction_policy where 3.9 passes one cache_policy) and are handed on as they came.
    def guarded_load(self, ptrs, mask, *rest):
        GUARD.check(self, ptrs, mask, "load")
        return load(self, ptrs, mask, *rest)

    def guarded_store(self, ptrs, value, mask, *rest):
        GUARD.check(self, ptrs, mask, "store")
        return store(self, ptrs, value, mask, *rest)

    def guarded_rmw(self, rmw_op, ptr, val, mask, *rest):
        GUARD.check(self, ptr, mask, "atomic_add")
        return rmw(self, rmw_op, ptr, val, mask, *rest)

    def guarded_cas(self, ptr, cmp, val, *rest):
        everything = types.SimpleNamespace(data=np.ones(np.shape(ptr.data), bool))
        GUARD.check(self, ptr, everything, "atomic_cas")
        return cas(self, ptr, cmp, val, *rest)

    builder_class.create_masked_load = guarded_load
    builder_class.create_masked_store = guarded_store
    builder_class.create_atomic_rmw = guarded_rmw
    builder_class.create_atomic_cas = guarded_cas

    executor = interpreter.GridExecutor
    run = executor.__call__
    patched = _patch_language_once(interpreter)

    def guarded_run(self, *args, **kwargs):
        regions = []
        try:
            bound = inspect.getcallargs(self.fn, *args, **kwargs)
        except TypeError:
            bound = {}
        planned = GUARD.planned or {}
        for name, value in bound.items():
            if hasattr(value, "data_ptr") and hasattr(value, "element_size"):
                start = int(value.data_ptr())
                # the bytes the view spans (a strided view reaches past numel elements)
                span = 0
                if value.numel():
                    span = 1 + sum(
                        (n - 1) * s for n, s in zip(value.shape, value.stride(), strict=True)
                    )
                end = start + int(span) * int(value.element_size())
                rows = planned.get(name)
                row_bytes = int(value.element_size()) * (
                    int(value.shape[-1]) if value.dim() > 1 else 1
                )
                regions.append((start, end, name, rows, row_bytes))
        outer, GUARD.launch = GUARD.launch, (getattr(self.fn, "__name__", "kernel"), regions)
        GUARD.violation = ""
        outer_patched, patched.seen = patched.seen, set()
        try:
            return run(self, *args, **kwargs)
        except Exception:
            if GUARD.violation:
                message, GUARD.violation = GUARD.violation, ""
                raise OutOfBounds(message) from None
            raise
        finally:
            GUARD.launch = outer
            patched.seen = outer_patched

    executor.__call__ = guarded_run
    _INSTALLED = True


# ----------------------------------------------------------------------------- the launcher

_compiled = itertools.count()


class Launcher:
    """The learner's kernels, compiled from their sources in a namespace of their own, and
    launched by a check: ``launch(kernel, grid, spec, *args, **constexprs)``.

    ``spec`` has one entry per positional argument: ``"in"`` or ``"out"`` for a tensor (handed
    over as the check's array; ``"out"`` ones are returned after the launch, in order),
    ``":bfloat16"`` to convert it first, ``":rows:K"`` when each program owns K rows of it
    (rows of a 2-D tensor, entries of a 1-D one), ``"value"`` for a number.
    """

    def __init__(self, sources: dict):
        self.sources = dict(sources)
        self.kernels: dict = {}
        self.refused: dict[str, str] = {}

    def _compile(self):
        if self.kernels or self.refused:
            return
        import triton
        import triton.language as tl

        guard_launches()
        names = set(self.sources)
        namespace: dict = {"tl": tl, "triton": triton}
        for name, source in self.sources.items():
            if not isinstance(source, str):  # a kernel object whose source is not available
                namespace[name] = source
                continue
            why = refusal(name, source, names - {name})
            if why:
                self.refused[name] = why
                continue
            filename = f"<normlab kernel {next(_compiled)}: {name}>"
            text = source if source.endswith("\n") else source + "\n"
            lines = text.splitlines(keepends=True)
            linecache.cache[filename] = (len(text), None, lines, filename)
            exec(compile(text, filename, "exec"), namespace)
            namespace[name] = triton.jit(namespace[name])
        self.kernels = {n: namespace[n] for n in self.sources if n not in self.refused}

    def launch(self, kernel: str, grid, spec, *args, **constexprs):
        import torch

        self._compile()
        if kernel in self.refused:
            raise KernelRefused(self.refused[kernel])
        source = self.sources.get(kernel)
        if isinstance(source, str) and is_stub(source):
            raise KernelNotImplemented(f"`{kernel}` is not implemented yet")
        if kernel not in self.kernels:
            raise KernelRefused(
                f"`{kernel}` is not defined in the notebook as a @triton.jit function"
            )
        device = "cuda" if torch.cuda.is_available() else "cpu"
        tensors, outputs, planned = [], [], {}
        names = list(inspect.signature(self.kernels[kernel].fn).parameters)
        for index, (kind, value) in enumerate(zip(spec, args, strict=True)):
            parts = kind.split(":")
            if parts[0] == "value":
                tensors.append(value)
                continue
            tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
            if "bfloat16" in parts:
                tensor = tensor.bfloat16()
            tensor = tensor.contiguous().to(device)
            if parts[0] == "out":  # what the kernel does not store stays UNWRITTEN
                tensor = tensor.clone()
                _fill_unwritten(tensor)
            if "rows" in parts and index < len(names):
                planned[names[index]] = int(parts[parts.index("rows") + 1])
            tensors.append(tensor)
            if parts[0] == "out":
                outputs.append(tensor)
        GUARD.planned = planned
        try:
            self.kernels[kernel][tuple(int(g) for g in grid)](*tensors, **constexprs)
        except OutOfBounds:
            raise
        except Exception as error:
            cause = error
            while cause is not None:  # the interpreter wraps what the kernel raised
                if isinstance(cause, NotImplementedError):
                    raise KernelNotImplemented(f"`{kernel}` is not implemented yet") from None
                cause = cause.__cause__
            raise
        finally:
            GUARD.planned = None
        return tuple(o.cpu() for o in outputs)


#: the bits an output buffer is filled with before the launch: a quiet NaN with a payload that
#: no arithmetic produces (a computed NaN is 0x7FC0...), in float32 and in bfloat16 (its top
#: half); a bfloat16 value converted to float32 keeps it
UNWRITTEN_BITS = {"float32": 0x7FE10000, "bfloat16": 0x7FE1}


def _fill_unwritten(tensor) -> None:
    import torch

    if tensor.dtype == torch.float32:
        tensor.view(torch.int32).fill_(UNWRITTEN_BITS["float32"])
    elif tensor.dtype == torch.bfloat16:
        tensor.view(torch.int16).fill_(UNWRITTEN_BITS["bfloat16"])


def unwritten(values) -> np.ndarray:
    """Where a returned float32 buffer still holds ``UNWRITTEN_BITS`` (as it was sent back)."""
    values = np.asarray(values)
    if values.dtype != np.float32:
        return np.zeros(values.shape, bool)
    return values.view(np.uint32) == UNWRITTEN_BITS["float32"]


def companion_cells(cells: list[str]) -> list[str]:
    """Door 2: the cells of the process that launches the notebook's kernels: the grader's
    launcher, with the kernels' sources as data (compiled only after :func:`refusal`)."""
    sources = sources_from_cells(cells)
    return [
        "from normlab.grader.kernel_launch import Launcher as _Launcher\n"
        f"{LAUNCH} = _Launcher({sources!r}).launch\n"
    ]


def companion_objects(objects: dict) -> dict:
    """Door 1: the launcher of the kernels in the learner's namespace."""
    return {LAUNCH: Launcher(sources_from_objects(objects)).launch}


_ERROR = re.compile(r"^(KernelRefused|OutOfBounds)$")


def is_kernel_error(error_type: str) -> bool:
    return bool(_ERROR.match(error_type or ""))
