"""What "from scratch" rules out, for every lab: library norms, and autograd in a backward pass.

One list for the whole course, because any library norm can stand in for another (GroupNorm
with one group is LayerNorm over (C, H, W); BatchNorm on a transposed input is LayerNorm; ...).
Names are dotted paths; ``trap.scan_source`` matches a library path (resolved through imports
and aliases) by its last part, and ``trap.forbidden_calls`` wraps them while a learner's
function runs in door 1 (the in-notebook check).
"""

from __future__ import annotations

LIBRARY_NORMS = [
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "torch.native_layer_norm",
    "torch.nn.LayerNorm",
    "torch.nn.functional.rms_norm",
    "torch.rms_norm",
    "torch.nn.RMSNorm",
    "torch.nn.functional.batch_norm",
    "torch.batch_norm",
    "torch.native_batch_norm",
    "torch.nn.BatchNorm1d",
    "torch.nn.BatchNorm2d",
    "torch.nn.functional.instance_norm",
    "torch.instance_norm",
    "torch.nn.InstanceNorm1d",
    "torch.nn.InstanceNorm2d",
    "torch.nn.InstanceNorm3d",
    "torch.nn.functional.group_norm",
    "torch.group_norm",
    "torch.native_group_norm",
    "torch.nn.GroupNorm",
]

AUTOGRAD = [
    "torch.autograd.grad",
    "torch.autograd.backward",
    "torch.Tensor.backward",
    "torch.autograd.functional.jacobian",
    "torch.autograd.functional.vjp",
    "torch.func.grad",
    "torch.func.vjp",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.jvp",
    "torch.func.linearize",
    "torch.func.hessian",
    "torch.autograd.functional.jvp",
    "torch.autograd.functional.vjp",
    "torch.autograd.functional.hessian",
    "torch.autograd.functional.hvp",
    "torch.autograd.functional.vhp",
    "torch.autograd.forward_ad.make_dual",
    "torch.autograd.forward_ad.unpack_dual",
]


def from_scratch(*names: str, **more: list[str]) -> dict[str, list[str]]:
    """A lab's ``forbidden`` table: each learner name may not call a library norm; a name
    given as a keyword may not call what it names either (``AUTOGRAD`` for a backward pass
    written by hand, lab 06's ``LIBRARY_BLOCKS`` for a Transformer block built from parts)::

        from_scratch("layernorm_forward", layernorm_backward=AUTOGRAD)
    """
    table = {name: LIBRARY_NORMS for name in names}
    return table | {name: LIBRARY_NORMS + extra for name, extra in more.items()}
