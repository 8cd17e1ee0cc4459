"""The dtype a module computes in against the one a run asks for (``--dtype``), shared by the
ready-made glues: its name, what to do where they differ, and the wider output of a
mixed-precision module, which the bf16 profile grades all the same [num.profiles]."""

# The torch dtype of each --dtype: what the module is cast to, and what it must return.
TORCH_DTYPES = {"f64": "float64", "f32": "float32", "bf16": "bfloat16"}


def dtype_name(dt):
    """A torch, NumPy or JAX dtype's name without its library: ``float32``."""
    return str(dt).rsplit(".", 1)[-1]


def rerun_advice(got):
    """What to do about a module that returns dtype ``got`` where another was asked: rerun at
    the dtype it computes in, where the harness has a profile for it ([num.profiles])."""
    name = dtype_name(got)
    if name in TORCH_DTYPES.values():
        return "rerun with the --dtype it computes in"
    return (f"{name} has no tolerance profile (f64, f32, bf16 [num.profiles]): return float32 "
            "(grade at --dtype f32) or compute in bfloat16 (--dtype bf16)")


def wider_than_bf16(dtype, got):
    """Whether a module asked for bf16 returned float32 or float64: a mixed-precision module
    (autocast style: bf16 products, f32 accumulation or output) is graded by the bf16 profile
    all the same, since the tolerance comes from --dtype and a wider output hides nothing."""
    return dtype == "bf16" and dtype_name(got) in ("float32", "float64")
