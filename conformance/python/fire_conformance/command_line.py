"""The ready-made glues' command line: the module a run grades (``path/to/file.py:ClassName``)
and the options the torch glue (``appendix_e``) and the JAX glue (``jax_glue``) share, whose
help is ``appendix_e``'s docstring. Whether the class is a JAX module decides which glue
serves it."""

import argparse
import importlib.util
import os
import sys

from fire_conformance import equinox_bridge
from fire_conformance import haiku_bridge
from fire_conformance.calls import CALLS, QUERY_ROWS
from fire_conformance.loading import NAMES, is_our_name

try:
    import torch
except ImportError:  # the glue still serves NumPy and JAX modules
    torch = None


def load_class(spec):
    """The class ``path/to/file.py:ClassName`` names, its file imported as a module; SystemExit
    with the reason where there is none."""
    path, _, cls = spec.rpartition(":")
    if not path or not cls:
        raise SystemExit(f"expected path/to/file.py:ClassName, got {spec!r}")
    if not os.path.exists(path):
        raise SystemExit(f"module file not found: {path}")
    mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(mod_spec)
    # The file's folder first on the path (its sibling imports), once: the glues import the file
    # again where a bias may depend on earlier calls (`fresh`).
    folder = os.path.dirname(os.path.abspath(path))
    if sys.path[:1] != [folder]:
        sys.path.insert(0, folder)
    mod_spec.loader.exec_module(module)
    if not hasattr(module, cls):
        raise SystemExit(f"{path} has no class {cls!r}")
    return getattr(module, cls)


def parser(description):
    """The command line shared by the torch glue (``appendix_e``) and ``jax_glue``, its help
    ``description``."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", help="path/to/file.py:ClassName")
    p.add_argument("--map", action="append", default=[], metavar="OURS=THEIRS")
    p.add_argument("--dtype", default="f32", choices=["f32", "f64", "bf16"])
    p.add_argument("--call", choices=CALLS, help="how to call forward (default: introspection)")
    p.add_argument("--future-keys", default="mirrored", choices=["mirrored", "zero", "masked", "negated"])
    p.add_argument("--max-len", type=int, default=None)
    p.add_argument("--query-rows", default="last", choices=QUERY_ROWS)
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--map-arg", action="append", default=[], metavar="OURS=YOURS",
                   help="the constructor's name for one of Appendix E's arguments (num_heads, "
                        "mlp_width, init_c, init_L, eps)")
    p.add_argument("--name")
    return p


def parse_map(pairs, known=is_our_name):
    """``--map OURS=THEIRS`` pairs as a dict, rejecting unknown names of ours (``known``: a
    predicate, or a list of names)."""
    try:
        mapping = dict(kv.split("=", 1) for kv in pairs)
    except ValueError:
        raise SystemExit("--map takes OURS=THEIRS")
    ok = known if callable(known) else set(known).__contains__
    unknown = sorted(k for k in mapping if not ok(k))
    if unknown:
        raise SystemExit(f"--map: unknown parameter(s) {unknown}; ours are {NAMES} "
                         "and, for deeper MLPs, mlp.4.weight, mlp.4.bias, …")
    return mapping


def is_jax_module(cls):
    """Flax linen's interface (``init`` and ``apply``), which a torch module does not have, or
    any Flax, Equinox or Haiku module (a ``flax.nnx``, Equinox or Haiku one the JAX glue serves
    through its bridge)."""
    if torch is not None and isinstance(cls, type) and issubclass(cls, torch.nn.Module):
        return False
    flax = any(c.__module__.startswith("flax.") for c in getattr(cls, "__mro__", ()))
    bridged = equinox_bridge.is_equinox(cls) or haiku_bridge.is_haiku(cls)
    return flax or bridged or (callable(getattr(cls, "init", None)) and callable(getattr(cls, "apply", None)))
