"""Serve a glue file: a Python file that defines ``build(case)`` (see ``fire_conformance.kit``).

    fire-conformance run --impl "fire-conformance-glue my_glue.py"
    pytest --fire-glue my_glue.py

``build(case)`` returns the requested output (or a dict of outputs by name), raises
``fire_conformance.kit.Skip`` to skip, and raises anything else to reject the case. The file may
declare what it serves in a dict named ``CAPABILITIES`` with the keyword arguments of
``kit.serve``: ``name``, ``families`` (globs, default every family), ``dtypes`` (default
``["f64"]``; the first is the one a run uses), ``future_keys``, ``placement``, ``positions``
(``"square"`` when ``build`` computes over 0..T and gathers), ``max_len`` (the module's
context: cases reaching past it are skipped; 4 096 for a ``"square"`` glue unless given) and
``state`` (``"stepped"`` where ``build`` calls its module across a parameter update before the
graded call; ``"fresh"``, the default, where it builds one per case). A file that calls
``kit.serve`` itself under ``if __name__ == "__main__":`` runs both ways.
"""

import argparse
import ast
import importlib.util
import os
import sys

from fire_conformance import kit

ALLOWED = {"name", "families", "dtypes", "future_keys", "placement", "positions", "max_len", "state"}


def load_glue(path):
    """The glue file as a module; SystemExit with the reason when it cannot be one."""
    if not os.path.isfile(path):
        raise SystemExit(f"glue file not found: {path}")
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"not a Python file: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    if not callable(getattr(module, "build", None)):
        raise SystemExit(f"{path} defines no build(case) function")
    caps = dict(getattr(module, "CAPABILITIES", {}) or {})
    unknown = set(caps) - ALLOWED
    if unknown:
        raise SystemExit(f"{path}: CAPABILITIES has unknown key(s) {sorted(unknown)}; allowed: {sorted(ALLOWED)}")
    return module, caps


def calls_serve(path):
    """Whether the file calls ``serve(...)`` itself (``kit.serve``, ``fire_kit.serve``): under
    ``if __name__ == "__main__":``, which importing it does not run."""
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "serve"
               for n in ast.walk(tree))


def unserved(path):
    """The note of a file with no ``CAPABILITIES`` that calls ``serve(...)`` itself: what it
    passes there is not in effect when it is served by import."""
    return (f"{os.path.basename(path)} calls serve(...) itself but declares no CAPABILITIES: served "
            "by import (`fire-conformance-glue`, `pytest --fire-glue`), its `if __name__ == "
            "\"__main__\":` block never runs, so what it passes there (dtypes, conventions, "
            "positions, max_len, state) is not in effect and the defaults are (dtype f64); put "
            "them in CAPABILITIES = dict(...), which both ways read")


def noting(build, note):
    """``build`` with ``note`` made on every case it is asked."""
    def noted(case):
        case.note(note)
        return build(case)
    return noted


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("glue", help="path/to/my_glue.py, defining build(case)")
    p.add_argument("--name", help="the name reports use (default: CAPABILITIES['name'] or the file)")
    a = p.parse_args(argv)
    # Before the glue file is imported: a print there or in its build would be read as a reply.
    kit.reserve_stdout()
    module, caps = load_glue(a.glue)
    build = noting(module.build, unserved(a.glue)) if not caps and calls_serve(a.glue) else module.build
    caps.setdefault("name", f"glue: {a.glue}")
    if a.name:
        caps["name"] = a.name
    kit.serve(build, **caps)


if __name__ == "__main__":
    sys.exit(main())
