"""PyTorch hidden from a NumPy lab's graded code, and what the notebook sees in its place.

Under the bubblewrap sandbox, a lab whose ``Lab.torch`` is False (every NumPy lab) runs in a
filesystem where PyTorch's package folders are empty and read-only (``sandbox.bwrap_command``):
no code in the child can import it, whatever it does to ``sys.path``, ``sys.modules`` or the
import machinery. That is the boundary. This module only makes the notebook's *other* cells
behave well: the labs compare the learner's functions with ``nn.LayerNorm`` and friends in cells
of their own, and ``import torch`` at the top of a cell would otherwise stop everything after
it (``from normlab import check``, the next definitions).

So the child registers :class:`StandInFinder` first on ``sys.meta_path``: ``import torch``,
``import torch.nn.functional as F``, ``from torch.autograd.functional import jacobian`` succeed
and bind stand-ins; the first real *use* of one (a call, arithmetic, an item, setting an
attribute) raises :class:`TorchHiddenError` with a message that says why. A cell stopped that
way costs nothing (the grader leaves those cells out of the submission's error); a graded
function stopped that way fails its check, with that message. ``isinstance(x, torch.Tensor)``
is False, and ``class F(torch.autograd.Function)`` defines a plain class (its hand-written
static methods still work).

A notebook that removes the finder reaches the empty folders: an ``ImportError`` at best.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

#: top-level modules of the PyTorch distribution (``torch``, and the two it installs beside it)
HIDDEN_MODULES = ("torch", "functorch", "torchgen")
#: the distributions whose folders the sandbox empties for NumPy labs
HIDDEN_DISTRIBUTIONS = ("torch",)
#: the exception's name, as the child reports it in a cell's or a call's error
ERROR_TYPE = "TorchHiddenError"

MESSAGE = (
    "PyTorch is not available while this NumPy lab is graded, so `{name}` cannot be used in "
    "graded code: build it with NumPy. Comparing with PyTorch in cells of your own is fine "
    "(those cells are skipped when grading and cost nothing)."
)


class TorchHiddenError(ImportError):
    """A use of PyTorch where the grader hides it (an ImportError: the library is not there)."""


def _refuse(name: str):
    def refuse(self, *args, **kwargs):
        raise TorchHiddenError(MESSAGE.format(name=object.__getattribute__(self, "_name")))

    refuse.__name__ = name
    return refuse


class StandIn:
    """Any object of the hidden library: attributes give more stand-ins, every use raises."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attribute: str):
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)  # protocols (copy, pickle, NumPy) see a plain object
        return StandIn(f"{object.__getattribute__(self, '_name')}.{attribute}")

    def __repr__(self) -> str:
        return f"<{object.__getattribute__(self, '_name')}: PyTorch is hidden while grading>"

    def __mro_entries__(self, bases):
        return (object,)  # ``class F(torch.autograd.Function)``: a plain class

    def __instancecheck__(self, instance) -> bool:
        return False  # nothing is a tensor here

    def __subclasscheck__(self, subclass) -> bool:
        return False


for _dunder in (
    "__call__ __setattr__ __delattr__ __getitem__ __setitem__ __iter__ __len__ __bool__ "
    "__float__ __int__ __index__ __complex__ __enter__ __exit__ __neg__ __pos__ __abs__ "
    "__invert__ __lt__ __le__ __gt__ __ge__ __contains__ "
    "__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __matmul__ __rmatmul__ __truediv__ "
    "__rtruediv__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __and__ "
    "__rand__ __or__ __ror__ __xor__ __rxor__ __lshift__ __rshift__"
).split():
    setattr(StandIn, _dunder, _refuse(_dunder))


class StandInModule(types.ModuleType):
    """``torch``, ``torch.nn``, ...: a package whose attributes are stand-ins."""

    def __getattr__(self, attribute: str):
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        return StandIn(f"{self.__name__}.{attribute}")


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the hidden modules with stand-in modules."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in HIDDEN_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install() -> None:
    """Put the stand-ins in front of every other way to import the hidden modules."""
    for name in list(sys.modules):
        if name.split(".")[0] in HIDDEN_MODULES:
            del sys.modules[name]
    sys.meta_path.insert(0, StandInFinder())
