"""The module as training calls it, against the graded call, which is evaluation's.

The glues grade a module in evaluation mode (torch's ``.eval()``, a Flax ``__call__`` given
its default ``deterministic=True``), yet a model trains it in training mode. FIRE has no
train-only path [fire.bias]: no dropout, no batch statistics. A path only training takes (a
``.detach()`` or ``jax.lax.stop_gradient`` under ``if self.training`` / ``if not
deterministic``, a cache kept only then) changes what the model learns while every graded
value passes. So on small squares each gradient case is run again in training mode with the
same cotangent, and the bias and every gradient must be evaluation's.

A dropout is training's one legitimate difference, and it is random: in the training call each
framework's dropouts are made the identity (``torch_dropouts_off``, ``linen_dropouts_off``,
``nnx_dropouts_off``, ``haiku_dropouts_off``; the Equinox bridge sets its ``eqx.nn.Dropout``s'
``p`` to 0), so what else training takes is compared. A module whose training-mode output
still changes from call to call (randomness of its own, a noise on the bias) cannot be held to
evaluation's bias; with its randomness fixed (torch's seed, a linen module's keys) its training
call is a function again, and the gradient it sends c and L_multiplier must be that function's
own derivative, which finite differences of the call measure (``own_derivative``): a training-
only ``.detach()`` under the noise fails there. Where the randomness cannot be fixed the case
says it was not compared.
"""

import contextlib
import inspect
import re

import numpy as np

from fire_conformance import kit as fire_kit
from fire_conformance import trees
from fire_conformance.calls import ROUNDING, SEED, unmasked
from fire_conformance.outputs import as_numpy
from fire_conformance.steps import twin_differs

try:
    import torch
except ImportError:  # only torch modules have .train()
    torch = None


class TrainMode(fire_kit.Mistake, ValueError):
    """A module whose bias or gradients in training mode are not those of evaluation mode."""


def differs_in_bias(how):
    """The ``TrainMode`` of a bias that differs in training mode (``how`` it was put there)."""
    return TrainMode(f"in training mode ({how}, as a training loop calls it) its bias differs from "
                     "evaluation mode's, where FIRE has no train-only path [fire.bias]: the graded "
                     "values are evaluation mode's; what training sees is another bias")


def check_gradient(name, ours, got, want, dtype, how):
    """Raises ``TrainMode`` where the training-mode gradient ``got`` of the module's parameter
    ``name`` (``ours``, our name) differs from evaluation mode's ``want`` beyond 16 roundings of
    ``dtype`` relative to its largest entry (at least 1)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    worst = float(np.max(np.abs(got - want), initial=0.0))
    if worst > 16 * ROUNDING[dtype] * scale:
        raise TrainMode(
            f"in training mode ({how}, as a training loop calls it) the gradient of `{name}` "
            f"({ours}) differs from evaluation mode's by up to {worst:.3g}, for the same bias: a "
            "path only training takes (a .detach() or stop_gradient, a value cached only then) "
            "changes what training learns; the graded gradients are evaluation mode's [grad.vjp]")


# torch's dropouts, by their name in torch.nn.functional (`nn.Dropout` and its kin call them),
# in `torch` and in `torch._VF`, which the functional ones call: a module that imported one by
# its own name (`from torch.nn.functional import dropout`) or calls `torch.dropout` reaches it
# there.
TORCH_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                  "feature_alpha_dropout")
TORCH_OPS = ("dropout", "dropout_", "feature_dropout", "feature_dropout_", "alpha_dropout",
             "alpha_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_")


def unchanged(x, *args, **kwargs):
    """A dropout that keeps everything: its input."""
    return x


@contextlib.contextmanager
def torch_dropouts_off():
    """torch's dropouts (``F.dropout`` and its kin, which ``nn.Dropout`` calls, and the ops
    under them) the identity while it lasts."""
    import torch.nn.functional as F

    places = [(F, TORCH_DROPOUTS), (torch, TORCH_OPS), (torch._VF, TORCH_OPS)]
    # `torch._VF` answers from torch's ops, holding none itself: what is set there only shadows
    # them, and is removed again.
    saved = [(where, name, vars(where).get(name)) for where, names in places for name in names
             if hasattr(where, name)]
    try:
        for where, name, _ in saved:
            setattr(where, name, unchanged)
        yield
    finally:
        for where, name, f in reversed(saved):
            if f is None:
                delattr(where, name)
            else:
                setattr(where, name, f)


@contextlib.contextmanager
def linen_dropouts_off():
    """Flax linen's ``nn.Dropout`` layers the identity while it lasts (``nn.intercept_methods``)."""
    import flax.linen as nn

    def interceptor(next_fun, args, kwargs, context):
        if isinstance(context.module, nn.Dropout) and context.method_name == "__call__":
            return args[0] if args else kwargs.get("inputs")
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        yield


@contextlib.contextmanager
def nnx_dropouts_off(module):
    """``module``'s ``nnx.Dropout`` layers at rate 0 (their identity) while it lasts."""
    from flax import nnx

    dropouts = [node for _, node in nnx.iter_graph(module) if isinstance(node, nnx.Dropout)]
    rates = [d.rate for d in dropouts]
    try:
        for d in dropouts:
            d.rate = 0.0
        yield
    finally:
        for d, rate in zip(dropouts, rates):
            d.rate = rate


@contextlib.contextmanager
def haiku_dropouts_off():
    """Haiku's ``hk.dropout`` the identity while it lasts."""
    import haiku as hk

    saved = hk.dropout
    try:
        hk.dropout = lambda rng, rate, x, *args, **kwargs: x
        yield
    finally:
        hk.dropout = saved


def not_compared(how, why):
    """The case's note where training mode could not be compared (``why``), so that the run
    says what it did not check."""
    return (f"training mode not compared ({how}): {why}; a path only training takes is not "
            "checked on this case [grad.vjp]")


def random_output(how):
    """``not_compared`` for an output that changes from call to call."""
    return not_compared(how, "its output there changes from call to call with the glue's "
                             "dropouts off (randomness of its own)")


def values_unchecked(how):
    """The note of a training call whose output is random but fixed by a seed: its gradients
    were held to its own derivative (``own_derivative``), its values to nothing."""
    return (f"training mode's values not compared ({how}): its output changes from call to call "
            "with the glue's dropouts off (randomness of its own: positions drawn at random in "
            "training, noise); its gradients were checked against its own output with the "
            "randomness fixed, but what the random path computes is not checked: a mistake only "
            "it makes passes [grad.vjp]")


def called_so(e):
    """What a call the glue made and ``e`` stopped says in a note: its type and first line."""
    text = str(e).splitlines()[0] if str(e) else ""
    return f"called so, it raised {type(e).__name__}: {text}"[:300]


def raised(how, e):
    """``not_compared`` for a training call that raised ``e``."""
    return not_compared(how, called_so(e))


def no_gradient(how):
    """The ``TrainMode`` of a bias that carries no gradient in training mode, where evaluation
    mode's has one."""
    return TrainMode(f"in training mode ({how}, as a training loop calls it) its bias carries no "
                     "gradient (detached or computed without autograd) where evaluation mode's "
                     "does: nothing of FIRE would learn; the graded gradients are evaluation "
                     "mode's [grad.vjp]")


# Finite differences of a training call whose randomness is fixed (``own_derivative``): the
# step, relative to the scalar moved (at least 1e-2 of it), and the dtypes' unit roundoff.
STEP = 1e-2
UNIT = {"f64": 2.0**-53, "f32": 2.0**-24}
# The scalars whose derivative is measured: a training-only detach anywhere upstream of the
# bias (ψ, the normaliser, x, the hidden layer) takes theirs, and x, which they move, crosses
# none of f_θ's kinks on the way (a weight of f_θ moved would).
MEASURED = ("c", "L_multiplier")


def loss_of(out, cot):
    """``(Σ cot·bias, √Σ (cot·bias)²)`` over the entries a masked module does not mask."""
    out = np.asarray(out, dtype=np.float64)
    t = np.where(unmasked(out), np.asarray(cot, dtype=np.float64) * out, 0.0)
    return float(t.sum()), float(np.sqrt(np.sum(t * t)))


def own_derivative(loss, scalars, how, dtype):
    """Raises ``TrainMode`` where the gradient a training call with its randomness fixed sends
    one of ``scalars`` (``[(key, theirs, ours, value, gradient)]``, the ``MEASURED`` ones) is not
    the derivative of that call's own loss, ``loss(key, delta)`` (``loss_of`` with that scalar
    moved by ``delta``; key None: as it is): it must match the central, forward or backward
    difference (a kink of the threshold's max takes one side, or both halves) within 5 % plus
    the differences' rounding. [grad.vjp]"""
    base, size = loss(None, 0.0)
    for key, theirs, ours, value, gradient in scalars:
        h = STEP * max(abs(value), 1e-2)
        plus, minus = loss(key, h)[0], loss(key, -h)[0]
        slopes = ((plus - minus) / (2 * h), (plus - base) / h, (base - minus) / h)
        floor = 256 * UNIT[dtype] * size / h
        if all(abs(gradient - s) > 0.05 * max(abs(gradient), abs(s)) + floor for s in slopes):
            raise TrainMode(
                f"in training mode ({how}, as a training loop calls it, its randomness fixed) the "
                f"gradient of `{theirs}` ({ours}) is {gradient:.4g}, where the training call's own "
                f"output changes at {slopes[0]:.4g} per unit of it: a path only training takes (a "
                ".detach() or stop_gradient) keeps part of the derivative from what trains "
                "[grad.vjp]")


def seeded(call):
    """``call()`` with torch's random numbers drawn from a fixed seed and its dropouts off."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        with torch_dropouts_off():
            return call()


def torch_own_derivative(m, call, g, names, dtype, how):
    """``own_derivative`` of the torch module ``m`` (in train mode) under a fixed seed; the
    ``not_compared`` note where that does not fix its output (a generator of its own), else
    ``values_unchecked``'s."""
    with torch.no_grad():
        once, twice = seeded(call), seeded(call)
    if dtype not in UNIT or twin_differs(as_numpy(once), as_numpy(twice), dtype):
        return random_output(how)
    for p in m.parameters():
        p.grad = None
    out = seeded(call)
    if out.requires_grad:
        (out * g).sum().backward()
    params = dict(m.named_parameters())
    cot = as_numpy(g)

    def loss(theirs, delta):
        if theirs is None:
            return loss_of(as_numpy(out.detach()), cot)
        p = params[theirs]
        saved = p.detach().clone()
        try:
            with torch.no_grad():
                p.copy_(saved + delta)
                return loss_of(as_numpy(seeded(call)), cot)
        finally:
            with torch.no_grad():
                p.copy_(saved)

    scalars = [(n, n, names[n], float(p.detach().reshape(-1)[0]),
                0.0 if p.grad is None else float(p.grad.reshape(-1)[0]))
               for n, p in params.items() if names.get(n) in MEASURED and p.numel() == 1]
    own_derivative(loss, scalars, how, dtype)
    for p in m.parameters():
        p.grad = None
    return values_unchecked(how)


def check_torch(m, call, full, g, names, graded, dtype):
    """Raises where the torch module ``m`` in train mode (``m.train()``) returns another bias than
    ``full`` or sends other gradients than ``graded`` (ours by name, the eval-mode call's) for the
    same cotangent ``g`` (``call()``: the glue's forward, returning the bias; ``names``: ours by
    the module's, ``Loaded``); a module whose train-mode output is random, its gradients against
    its own derivative under a fixed seed (``torch_own_derivative``). Returns None once
    compared, else the note saying why it could not be (``not_compared``). [grad.vjp]"""
    how = "module.train()"
    for p in m.parameters():
        p.grad = None
    try:
        m.train()
        with torch_dropouts_off():
            with torch.no_grad():
                again = call()
            trained = call()
        if twin_differs(as_numpy(again), as_numpy(trained), dtype):
            return torch_own_derivative(m, call, g, names, dtype, how)
        if not trained.requires_grad:
            if twin_differs(as_numpy(full), as_numpy(trained), dtype):
                raise differs_in_bias(how)
            if any(np.any(as_numpy(v) != 0) for v in graded.values()):
                raise no_gradient(how)
            return None
        (trained * g).sum().backward()
    except TrainMode:
        raise
    except Exception as e:  # a train-mode path that fails tells the graded call nothing
        return raised(how, e)
    finally:
        m.eval()
    if twin_differs(as_numpy(full), as_numpy(trained.detach()), dtype):
        raise differs_in_bias(how)
    transposed = getattr(names, "transposed", ())
    for n, p in m.named_parameters():
        ours = names.get(n)
        if ours not in graded or p.grad is None:
            continue
        got = as_numpy(p.grad.T if n in transposed else p.grad).reshape(np.shape(graded[ours]))
        check_gradient(n, ours, got, as_numpy(graded[ours]), dtype, how)
    for p in m.parameters():
        p.grad = None
    return None


# A JAX module's training flag, by the name its call takes it under: the value that means
# training (Flax's `deterministic`, the `train`/`training` of linen examples, Haiku's
# `is_training`, Equinox's `inference`).
TRAINING_FLAGS = {"deterministic": False, "train": True, "training": True, "is_training": True,
                  "inference": False}


def flag_parameters(call):
    """``[(parameter, training's value)]`` of the training flags ``call`` takes by keyword
    (``TRAINING_FLAGS``)."""
    try:
        params = inspect.signature(call).parameters.values()
    except (TypeError, ValueError):
        return []
    return [(p, TRAINING_FLAGS[p.name]) for p in params
            if p.name in TRAINING_FLAGS and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def jax_flag(call):
    """The keyword and value that put a JAX module's call in training mode (``TRAINING_FLAGS``)
    where ``call`` (its ``__call__``, or ``apply`` for a plain-JAX class) takes one whose
    default is evaluation's, or that has none or a ``None`` one (the graded call then gives
    evaluation's, ``eval_flags``); None otherwise (no flag, or one defaulting to training's,
    which the graded call already is)."""
    for p, value in flag_parameters(call):
        if p.default is p.empty or p.default is None or p.default is (not value):
            return p.name, value
    return None


def eval_flags(call, module=None):
    """``{name: evaluation's value}`` of the training flags ``call`` requires or defaults to
    ``None`` (a required ``train``; linen's ``nn.merge_param``, which raises where neither the
    field nor the call gives it): what the graded call passes, as a program reading its bias
    does — less those a field of ``module`` already gives (``field_gives``), which
    ``nn.merge_param`` refuses to be given twice."""
    return {p.name: not value for p, value in flag_parameters(call)
            if (p.default is p.empty or p.default is None) and not field_gives(module, p.name)}


def field_gives(module, name):
    """Whether ``module`` (a linen module) holds the flag ``name`` as a field that is set
    (``--kwargs '{"deterministic": true}'``)."""
    return name in getattr(type(module), "__dataclass_fields__", {}) \
        and getattr(module, name, None) is not None


def missing_stream(e):
    """The rng stream a Flax linen module asked for and was not given (``make_rng("noise")``
    raises ``InvalidRngError``: '... needs PRNG for "noise"'), or None."""
    found = re.search(r'needs PRNG for "([^"]+)"', str(e))
    return found.group(1) if found and type(e).__name__ == "InvalidRngError" else None


def check_jax(trained, params, full, grads, cot, loaded, dtype, jax, how, fixed=None):
    """Raises where a JAX module called in training mode (``trained(params)``, the bias as the
    graded call shapes it) returns another bias than ``full`` or, pulled back with the same
    cotangent ``cot``, other gradients than ``grads`` (flattened by path, evaluation's; ``loaded``
    names them ours). ``how``: the call's flag, said in the message. A random training output is
    held to its own derivative with its keys fixed (``fixed(params)``: the call so, where the
    glue can fix them; ``jax_own_derivative``). Returns None once compared, else the note saying
    why it could not be (``not_compared``). [grad.vjp]"""
    try:
        once, twice = trained(params), trained(params)
        if twin_differs(np.asarray(once, dtype=np.float64), np.asarray(twice, dtype=np.float64), dtype):
            if fixed is None or dtype not in UNIT:
                return random_output(how)
            return jax_own_derivative(fixed, params, cot, loaded, dtype, jax, how)
        bias, pullback = jax.vjp(trained, params)
        (got,) = pullback(cot)
    except TrainMode:
        raise
    except Exception as e:  # a training path that fails tells the graded call nothing
        return raised(how, e)
    if twin_differs(np.asarray(full, dtype=np.float64), np.asarray(bias, dtype=np.float64), dtype):
        raise differs_in_bias(how)
    flat = trees.flatten(got)
    for path, ours in loaded.items():
        if path not in flat or path not in grads:
            continue
        check_gradient("/".join(path), ours, flat[path], grads[path], dtype, how)
    return None


def jax_own_derivative(fixed, params, cot, loaded, dtype, jax, how):
    """``own_derivative`` of a JAX module's training call with its keys fixed (``fixed``); the
    ``not_compared`` note where that does not fix its output, else ``values_unchecked``'s."""
    once, twice = fixed(params), fixed(params)
    if twin_differs(np.asarray(once, dtype=np.float64), np.asarray(twice, dtype=np.float64), dtype):
        return random_output(how)
    out, pullback = jax.vjp(fixed, params)
    (got,) = pullback(cot)
    flat, moved = trees.flatten(got), trees.flatten(params)

    def loss(path, delta):
        if path is None:
            return loss_of(out, cot)
        return loss_of(fixed(trees.unflatten({**moved, path: moved[path] + delta})), cot)

    scalars = [(path, "/".join(path), ours, float(np.ravel(moved[path])[0]),
                float(np.ravel(flat[path])[0]))
               for path, ours in loaded.items()
               if ours in MEASURED and path in flat and np.size(moved[path]) == 1]
    own_derivative(loss, scalars, how, dtype)
    return values_unchecked(how)
