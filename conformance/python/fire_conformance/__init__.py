"""fire-conformance for Python: the harness binary (with the golden vectors compiled in) and the
kit that puts a Python FIRE behind its protocol.

    pip install ./conformance                     # from a clone of the repository
    fire-conformance run --impl "fire-conformance-appendix-e my_fire.py:FIRE"
    pytest --fire-impl my_fire.py:FIRE            # every vector case one pytest item
    python -m fire_conformance run ...            # the binary, through Python

Modules:
    kit           ``serve(build, ...)``: write ``build(case)``, the kit speaks the protocol
    appendix_e    ready glue for modules shaped like the paper's Appendix E (torch or NumPy)
    jax_glue      the same for Flax (linen, nnx), Equinox, Haiku and JAX modules, gradients through ``jax.vjp``
    nnx_bridge    a ``flax.nnx`` module behind linen's ``init``/``apply``, for ``jax_glue``
    equinox_bridge  an Equinox module behind linen's ``init``/``apply``, for ``jax_glue``
    haiku_bridge  a Haiku module behind linen's ``init``/``apply``, for ``jax_glue``
    glue          serves a file that defines ``build(case)``
    numpy_fire    an independent NumPy FIRE (and baselines), written from the spec
    pytest_plugin the pytest plugin (``--fire-impl``, ``--fire-glue``, ``fire_cases``)

Only the standard library is imported here; numpy, torch and jax are imported where used.
"""

import os
import shutil
import sys
import sysconfig

__all__ = ["binary", "BinaryNotFound"]

_EXE = "fire-conformance" + (".exe" if os.name == "nt" else "")


class BinaryNotFound(FileNotFoundError):
    """The ``fire-conformance`` binary is not where an installed wheel puts it."""


def _candidates():
    env = os.environ.get("FIRE_CONFORMANCE_BIN")
    if env:
        yield env
        return
    # Where pip put the wheel's binary: the scripts folder of this interpreter's scheme, or the
    # user scheme's (pip install --user).
    schemes = [None] + [s for s in (f"{os.name}_user",) if s in sysconfig.get_scheme_names()]
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if scripts:
            yield os.path.join(scripts, _EXE)
    yield os.path.join(os.path.dirname(sys.executable), _EXE)
    found = shutil.which(_EXE)
    if found:
        yield found
    # Run from a clone without installing: conformance/python/fire_conformance -> target/.
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    for profile in ("release", "debug"):
        yield os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target")), profile, _EXE)


def binary():
    """The path of the ``fire-conformance`` binary: ``$FIRE_CONFORMANCE_BIN``, else the one the
    wheel installed, else one on ``PATH``, else (in a clone) ``target/{release,debug}``."""
    tried = []
    for path in _candidates():
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        tried.append(path)
    raise BinaryNotFound(
        "the fire-conformance binary was not found (tried: " + ", ".join(tried) + "). "
        "Install the package with `pip install ./conformance` from a clone of the repository, "
        "or set FIRE_CONFORMANCE_BIN to the binary's path.")
