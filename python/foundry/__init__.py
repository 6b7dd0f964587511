"""Foundry: tensors with autograd and PyTorch-compatible ops, from C++.

Every op of the registry (see docs/ops.md) is available as ``foundry.<name>(...)`` with PyTorch's
argument names, and as a Tensor method where PyTorch has one::

    import foundry
    x = foundry.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = (x.softmax(-1) * x).sum()
    y.backward()
    print(x.grad)
"""
import builtins as _builtins
import collections as _collections

from . import _C
from ._C import Tensor, autograd, dtype, from_numpy, manual_seed, tensor  # noqa: F401
from ._C import get_num_threads, set_num_threads, threads_in_use, set_pool_adapts_to_load, get_default_dtype, set_default_dtype  # noqa: F401
from ._C import is_grad_enabled, memory_stats, empty_cache, promote_types  # noqa: F401
from ._C import reset_peak_memory_stats, memory_allocated, max_memory_allocated, cpu_capability  # noqa: F401
from ._C import memory_reserved, max_memory_reserved  # noqa: F401
from ._C import set_tensor_tracking, live_tensor_count, live_tensors_report  # noqa: F401
from ._C import Tokenizer, Encoding, train_bpe  # noqa: F401
# Pretrained Hugging Face models (docs/models.md): foundry.models.from_pretrained(dir).
from ._C import gguf, models, quant  # noqa: F401
# Optimizers and bfloat16 autocast for training models (docs/training.md).
from ._C import optim, autocast  # noqa: F401
# LoRA fine-tuning with PEFT's names and adapter files (docs/finetuning.md).
from ._C import peft, finetune  # noqa: F401
# Experiment tracking with wandb's names (docs/tracking.md): foundry.track.init(...).
from . import track  # noqa: F401,E402
# Evaluation metrics equal to sacrebleu, rouge-score, scikit-learn, SciPy and lm-eval (docs/evaluation.md).
from . import eval  # noqa: F401,E402,A004
# File formats (docs/formats.md): safetensors as the `safetensors` package names it, sharded
# checkpoints, NumPy files, training checkpoints. Malformed files raise OSError.
from ._C import load_file, save_file, load, save, safe_open, SafetensorsFile  # noqa: F401
from ._C import load_sharded, save_sharded, load_npy, save_npy, load_npz, save_npz  # noqa: F401
from ._C import save_checkpoint, load_checkpoint, latest_checkpoint, list_checkpoints  # noqa: F401

# dtypes as module attributes, with PyTorch's aliases.
for _name in ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
              "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"]:
    globals()[_name] = getattr(dtype, _name)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16
bool = globals()["bool"]  # noqa: A001

_OP_NAMES = _C._op_names()


def _make_function(name):
    def fn(*args, **kwargs):
        return _C._call(name, *args, **kwargs)
    fn.__name__ = name
    info = _C._op_info(name)
    fn.__doc__ = "%s\n\n%s" % (info["schema"], info["doc"])
    return fn


for _n in _OP_NAMES:
    globals()[_n] = _make_function(_n)

_einsum_registry = globals()["einsum"]


def einsum(equation, *operands):
    """PyTorch's signature: ``einsum("ij,jk->ik", a, b)``; a single list or tuple of operands works too."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    return _einsum_registry(equation, list(operands))


einsum.__doc__ += "\n\n" + (_einsum_registry.__doc__ or "")

# ---- PyTorch-style overloads that the registry spells as separate ops -------------------------
_values_indices = _collections.namedtuple("return_types", ["values", "indices"])


def max(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    """max(x) -> amax over all; max(x, dim) -> (values, indices); max(x, other_tensor) -> maximum."""
    if isinstance(dim, Tensor):
        return _C._call("maximum", input, dim)
    if other is not None:
        return _C._call("maximum", input, other)
    if dim is None:
        return _C._call("amax", input, [], False)
    return _values_indices(*_C._call("max", input, dim, keepdim))


def min(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    if isinstance(dim, Tensor):
        return _C._call("minimum", input, dim)
    if other is not None:
        return _C._call("minimum", input, other)
    if dim is None:
        return _C._call("amin", input, [], False)
    return _values_indices(*_C._call("min", input, dim, keepdim))


def _wrap_pair(name):
    raw = globals()[name]

    def fn(*args, **kwargs):
        return _values_indices(*raw(*args, **kwargs))
    fn.__name__ = name
    fn.__doc__ = raw.__doc__
    return fn


for _n in ["sort", "topk", "cummax", "cummin", "median", "mode"]:
    globals()[_n] = _wrap_pair(_n)


def split(tensor, split_size_or_sections, dim=0):
    if isinstance(split_size_or_sections, (list, tuple)):
        return _C._call("split_with_sizes", tensor, list(split_size_or_sections), dim)
    return _C._call("split", tensor, split_size_or_sections, dim)


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    vals, inv, cnt = _C._call("unique", input, sorted, return_inverse, return_counts, dim)
    out = [vals]
    if return_inverse:
        out.append(inv)
    if return_counts:
        out.append(cnt)
    return out[0] if len(out) == 1 else tuple(out)


def zeros(*size, dtype=None, requires_grad=False):
    t = _C._call("zeros", _size(size), dtype=dtype)
    return t.requires_grad_() if requires_grad else t


def ones(*size, dtype=None, requires_grad=False):
    t = _C._call("ones", _size(size), dtype=dtype)
    return t.requires_grad_() if requires_grad else t


def rand(*size, dtype=None, requires_grad=False):
    t = _C._call("rand", _size(size), dtype=dtype)
    return t.requires_grad_() if requires_grad else t


def randn(*size, dtype=None, requires_grad=False):
    t = _C._call("randn", _size(size), dtype=dtype)
    return t.requires_grad_() if requires_grad else t


def empty(*size, dtype=None):
    return _C._call("empty", _size(size), dtype=dtype)


def arange(start, end=None, step=1, *, dtype=None):
    if end is None:
        start, end = 0, start
    return _C._call("arange", start, end, step, dtype=dtype)


def _size(size):
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        return list(size[0])
    return list(size)


def is_tensor(obj):
    return isinstance(obj, Tensor)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return _builtins.bool(_C._call("all", _C._call("isclose", input, other, rtol, atol, equal_nan)).item())


def equal(input, other):
    return tuple(input.shape) == tuple(other.shape) and _builtins.bool(_C._call("all", _C._call("eq", input, other)).item())


# ---- grad modes --------------------------------------------------------------------------------
class _GradMode:
    def __init__(self, enabled):
        self._enabled = enabled

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with _GradMode(self._enabled):
                return fn(*args, **kwargs)
        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        return wrapper


def no_grad():
    """Context manager (and decorator) that disables graph recording."""
    return _GradMode(False)


def enable_grad():
    return _GradMode(True)


def set_grad_enabled(mode):
    return _GradMode(mode)


inference_mode = no_grad

# ---- Tensor methods and operators --------------------------------------------------------------
_VARARG_SHAPE = {"view", "reshape", "permute", "expand", "repeat", "tile", "flip"}
_NOT_METHODS = {"zeros", "ones", "full", "arange", "linspace", "eye", "rand", "randn", "randint", "normal",
                "uniform", "randperm", "cat", "stack", "meshgrid", "einsum", "scalar_tensor"}


def _make_method(name):
    def method(self, *args, **kwargs):
        if name in _VARARG_SHAPE and args and _builtins.all(isinstance(a, _builtins.int) for a in args) and len(args) > 1:
            args = (list(args),)
        return globals()[name](self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = globals()[name].__doc__
    return method


def _make_inplace(name):
    def method(self, *args, **kwargs):
        return _C._call_inplace(name, self, *args, **kwargs)
    method.__name__ = name + "_"
    return method


for _n in _OP_NAMES + ["max", "min", "split", "unique"]:
    _info = _C._op_info(_n) if _n in _OP_NAMES else None
    if _n in _NOT_METHODS or hasattr(Tensor, _n):
        continue
    if _info is not None and (not _info["params"] or _info["params"][0][1] != "Tensor"):
        continue
    setattr(Tensor, _n, _make_method(_n))
    if _info is not None and _info["family"] in ("unary", "binary") and not _info["random"]:
        setattr(Tensor, _n + "_", _make_inplace(_n))

for _n in ["clamp", "masked_fill", "index_put", "scatter", "scatter_add", "index_add", "tril", "triu", "lerp",
           "addcmul", "addcdiv", "pow", "round"]:
    setattr(Tensor, _n + "_", _make_inplace(_n))


def _binary(name, reverse=False):
    def op(self, other):
        if reverse:
            return _C._call(name, other, self)
        return _C._call(name, self, other)
    return op


Tensor.__add__ = _binary("add")
Tensor.__radd__ = _binary("add", True)
Tensor.__sub__ = _binary("sub")
Tensor.__rsub__ = _binary("sub", True)
Tensor.__mul__ = _binary("mul")
Tensor.__rmul__ = _binary("mul", True)
Tensor.__truediv__ = _binary("div")
Tensor.__rtruediv__ = _binary("div", True)
Tensor.__floordiv__ = _binary("floor_divide")
Tensor.__rfloordiv__ = _binary("floor_divide", True)
Tensor.__mod__ = _binary("remainder")
Tensor.__rmod__ = _binary("remainder", True)
Tensor.__pow__ = _binary("pow")
Tensor.__rpow__ = _binary("pow", True)
Tensor.__matmul__ = _binary("matmul")
Tensor.__rmatmul__ = _binary("matmul", True)
Tensor.__and__ = _binary("bitwise_and")
Tensor.__or__ = _binary("bitwise_or")
Tensor.__xor__ = _binary("bitwise_xor")
Tensor.__lshift__ = _binary("bitwise_left_shift")
Tensor.__rshift__ = _binary("bitwise_right_shift")
Tensor.__eq__ = _binary("eq")
Tensor.__ne__ = _binary("ne")
Tensor.__lt__ = _binary("lt")
Tensor.__le__ = _binary("le")
Tensor.__gt__ = _binary("gt")
Tensor.__ge__ = _binary("ge")
Tensor.__neg__ = lambda self: _C._call("neg", self)
Tensor.__abs__ = lambda self: _C._call("abs", self)
Tensor.__invert__ = lambda self: _C._call("bitwise_not", self)
Tensor.__pos__ = lambda self: self
Tensor.__hash__ = object.__hash__
Tensor.__iadd__ = lambda self, other: _C._call_inplace("add", self, other)
Tensor.__isub__ = lambda self, other: _C._call_inplace("sub", self, other)
Tensor.__imul__ = lambda self, other: _C._call_inplace("mul", self, other)
Tensor.__itruediv__ = lambda self, other: _C._call_inplace("div", self, other)
Tensor.T = property(lambda self: self.permute(list(_builtins.range(self.ndim - 1, -1, -1))))
Tensor.float = lambda self: self.to(float32)
Tensor.double = lambda self: self.to(float64)
Tensor.long = lambda self: self.to(int64)
Tensor.int = lambda self: self.to(int32)
Tensor.bool = lambda self: self.to(globals()["bool"])
Tensor.half = lambda self: self.to(float16)
Tensor.bfloat16 = lambda self: self.to(bfloat16)
Tensor.max = lambda self, dim=None, keepdim=False: max(self, dim, keepdim)
Tensor.min = lambda self, dim=None, keepdim=False: min(self, dim, keepdim)
Tensor.__iter__ = lambda self: (self[i] for i in _builtins.range(len(self)))

del _n, _name
