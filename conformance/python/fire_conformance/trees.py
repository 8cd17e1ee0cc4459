"""Nested mappings (a Flax variables tree) as ``{path tuple: leaf}`` and back: how the JAX glue
and its bridges (``nnx_bridge``, ``equinox_bridge``) address a parameter by its path."""


def flatten(tree, prefix=()):
    """``{path tuple: leaf}`` of a nested mapping, in the tree's own order, keys as strings."""
    out = {}
    for k, v in tree.items():
        if hasattr(v, "items"):
            out.update(flatten(v, prefix + (str(k),)))
        else:
            out[prefix + (str(k),)] = v
    return out


def unflatten(flat):
    """The nested dict of ``{path tuple: leaf}``."""
    tree = {}
    for path, v in flat.items():
        node = tree
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = v
    return tree


def lookup(tree, path):
    """The leaf at ``path`` in a nested mapping, or None where there is none."""
    node = tree
    for k in path:
        node = node.get(k) if hasattr(node, "get") else None
        if node is None:
            return None
    return node
