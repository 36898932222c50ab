"""Which piece of the pipeline comes from which earlier notebook's solution, and the plain PyTorch stand-in
used where that notebook (or the name in it) is missing, or where its kernel does not run (Triton kernels run
on a GPU only: on a CPU their interpreter would take hours).

Every piece is looked up by notebook number through `solution_modules`, so a notebook that lands later
(07, 09) is picked up with no change here.
"""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from hpcdl.capstone import model

from .. import solution_modules

# (piece, notebook, name in that notebook, what stands in for it, needs a GPU)
TABLE = [
    ("attention softmax", "03", "softmax", "torch.softmax", True),
    ("MLP layer 1 + GeLU", "04", "linear_gelu", "F.linear + F.gelu", True),
    ("data-parallel training", "07", "BUCKETED_DDP_PY", "torch DistributedDataParallel", False),
    ("INT4 quantizer", "05", "quantize_int4", "none: the demo needs 05", False),
    ("INT4 dequantizer", "05", "dequantize_int4", "none: the demo needs 05", False),
    ("nibble packing (C++)", "05", "pack_int4", "none: the demo needs 05", False),
    ("nibble unpacking (C++)", "05", "unpack_int4", "none: the demo needs 05", False),
    ("zero-copy loading", "09", "load_mmap", "safetensors.torch.load_file", False),
    ("INT4 decode GEMV", "05", "int4_gemv", "dequantized weight, torch matmul", True),
]


@dataclass
class Pieces:
    found: dict = field(default_factory=dict)   # name -> the solution's object, for pieces in use
    origin: dict = field(default_factory=dict)  # piece -> "notebook 03 (softmax)" or "stand-in: ..."

    def get(self, name):
        return self.found.get(name)

    def ops(self) -> model.Ops:
        """The model's softmax and fused MLP layer: the notebooks' kernels where in use, else torch's."""
        ops = model.Ops()
        if self.get("softmax"):
            ops.softmax_rows = _softmax_with_backward(self.get("softmax"))
        if self.get("linear_gelu"):
            ops.linear_gelu = _linear_gelu_with_backward(self.get("linear_gelu"))
        return ops


def select(use_kernels: bool | None = None, names=None) -> Pieces:
    """The pieces for this machine (only those called `names`, where given). use_kernels: run the Triton
    kernels (default: only on a CUDA GPU)."""
    if use_kernels is None:
        use_kernels = torch.cuda.is_available()
    pieces = Pieces()
    for piece, number, name, stand_in, needs_gpu in TABLE:
        if names is not None and name not in names:
            continue
        found = solution_modules.find(number, name) if use_kernels or not needs_gpu else None
        if found is None and needs_gpu and not use_kernels and solution_modules.assignment(number):
            pieces.origin[piece] = f"stand-in: {stand_in} (notebook {number}'s kernel runs on a GPU only)"
            continue
        if found is not None:
            pieces.found[name] = found
            pieces.origin[piece] = f"notebook {solution_modules.assignment(number)} ({name})"
        else:
            pieces.origin[piece] = f"stand-in: {stand_in} (no {name} in notebook {number})"
    missing = [n for n in ("quantize_int4", "dequantize_int4", "pack_int4", "unpack_int4")
               if (names is None or n in names) and not pieces.get(n)]
    if missing:
        raise RuntimeError(f"notebook 05's {', '.join(missing)} are missing: the demo's compression is 05's work")
    return pieces


def _softmax_with_backward(softmax):
    """03's forward-only softmax as an autograd function (its backward in torch: y * (g - sum(g * y)))."""
    class Softmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = softmax(x.contiguous())
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return y * (g - (g * y).sum(dim=-1, keepdim=True))
    return Softmax.apply


def _gelu_tanh_grad(h):
    u = 0.7978845608028654 * (h + 0.044715 * h**3)
    t = torch.tanh(u)
    return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * h * h)


def _linear_gelu_with_backward(linear_gelu):
    """04's forward-only fused layer (float16 in, float16 out) as an autograd function; its backward
    recomputes the layer in float32 with torch."""
    class LinearGelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight, bias)
            return linear_gelu(x.half(), weight.half(), bias.half()).to(x.dtype)

        @staticmethod
        def backward(ctx, g):
            x, weight, bias = ctx.saved_tensors
            gh = g * _gelu_tanh_grad(F.linear(x, weight, bias))
            return gh @ weight, gh.t() @ x, gh.sum(dim=0)
    return LinearGelu.apply
