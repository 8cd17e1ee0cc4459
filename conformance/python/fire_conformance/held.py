"""What a module built from a case's arguments holds before any case value is loaded
([fire.params]): its initial c and L_init must be the values it was given — an argument ignored
(``IgnoredArgument``), scaled (``init_L // 2``) or stored transformed (softplus⁻¹ c, log L:
``TransformedArgument``, which the glue cannot load a case's value into) is said by name — and
whether a constructor keeps a threshold of its own (``threshold_moved``); and, built on its own
defaults, whether its f_θ starts where no gradient reaches it (``check_f_theta_start``). Split from
``construction``, which builds the module, for the ready-made glues (``appendix_e``,
``jax_glue``) and ``steps``.
"""

import math

import numpy as np

from fire_conformance import kit as fire_kit


# How far a module's initial scalar may sit from the case's value and still be that value made in
# float32: its rounding and a few operations of float32 arithmetic (a parametrised c stored as
# softplus⁻¹ c and computed back: 0.1 comes back 2 ulps off).
F32_SLACK = 2.0**-21


def same_in_f32(theirs, ours):
    """Whether a module's initial scalar (a torch tensor or an array) is the case's value as
    float32 holds it, to within ``F32_SLACK``."""
    if hasattr(theirs, "detach"):
        import torch
        theirs = theirs.detach().to(torch.float64).cpu().numpy()
    a = np.asarray(theirs, dtype=np.float64).reshape(-1)
    b = np.asarray(ours, dtype=np.float64).reshape(-1)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= F32_SLACK * np.abs(b)))


class IgnoredArgument(fire_kit.Mistake):
    """A module built with a case's initial c or L_init that holds another value: its
    constructor ignores the argument. Raised before the module is called (the case replies
    ``errored``, naming the argument): the glue then loads the case's values over the scalars,
    so the bias alone could not show it."""


def threshold_moved(case, untaken):
    """The ``init_L`` that moves the threshold L = |m·L_init| past every position of ``case``
    (so a module holding the value it is given returns another bias), or None where the
    constructor does not take ``init_L`` (``untaken``), no L_init moves it (m = 0, no
    threshold) or m < 0: the probe of a constructor that may keep a threshold of its own."""
    enc = case.encoding
    if case.family == "invalid":
        return None
    m = float(enc["l_multiplier"])
    # Not where m·L_init < 0: a module taking it without its absolute value
    # (`no-abs-threshold`) has a negative threshold whatever L_init is, which is that mistake, not an argument
    # ignored, and the case's values name it.
    if "init_L" in untaken or not m > 0 or not float(enc["l_init"]) > 0 \
            or enc.get("threshold") not in ("learnable", "fixed"):
        return None
    return float((max(case.queries + case.keys) + 1) / m + 2 * abs(float(enc["l_init"])) + 1)


def keeps_own_threshold(case, moved, theirs):
    """The ``IgnoredArgument`` of a module that, built with ``init_L`` = ``moved``
    (``threshold_moved``), returns the case's bias unchanged: its constructor takes ``init_L``
    (``theirs``, under its own name) and keeps a threshold of its own [fire.params]."""
    return IgnoredArgument(
        f"built with init_L={case.encoding['l_init']!r} and again with init_L={moved!r}, which moves "
        f"the threshold L = |m·L_init| past every position, the module returns the same bias: its "
        f"constructor takes `{theirs}` and keeps a threshold of its own (nothing the glue loads "
        "holds L_init), where [fire.params] starts L_init at the value it is given")


class TransformedArgument(Exception):
    """A module that stores a transform of a case's initial c or L_init (softplus⁻¹ c, log L):
    held values follow the argument, so it is not ignored, but the glue cannot load a case's
    value into it."""


# The constructor argument each scalar a module initialises itself is made from (our names).
FROM_ARGUMENT = {"c": "init_c", "init_L": "init_L"}


def check_arguments(held, case, dtype, rebuild=None, untaken=(), given_as=None):
    """Raises ``IgnoredArgument`` where a module built from the case's arguments (``construct``)
    holds, before any case value is loaded, a c or L_init other than the one it was given
    (``held``: our name -> the value it holds). Not on an invalid case ([vec.invalid]): the
    error would be taken for the module's rejection of it, and a module that clamps an invalid
    L_init has rejected nothing. Such a module passes every case on values (the glue loads the
    case's c and L_init over its own), yet
    ``FIRE(init_L=2048)`` would keep its default threshold for the whole of training, L_init
    being frozen. c is compared in magnitude (only |c| enters FIRE, and a module may keep
    |init_c|); a bf16 module to bf16's precision, others as float32 holds the value
    (``same_in_f32``), or as the 16-bit float the module holds it in does (``held_slack``).
    ``rebuild(name, arg, value)``, where given, builds the module again with another value of
    the argument and returns what it then holds: a held value that follows the argument is a
    transform of it (softplus⁻¹ c, log L), said so, rather than an argument ignored. An argument
    the constructor does not take (``untaken``, ``Arguments.untaken``) is not checked: the
    module makes that scalar its own way, and the glue loads the case's value over it.
    ``given_as(arg)``: how the module was given our argument ``arg`` (``Arguments.given_as``),
    for the messages."""
    enc = case.encoding
    given = {"c": enc["c"], "init_L": enc["l_init"]}
    if case.family == "invalid" or not all(isinstance(v, (int, float)) and math.isfinite(v) and v != 0
                                           for v in given.values()) or given["init_L"] < 0:
        return
    for name, value in held.items():
        if name not in FROM_ARGUMENT or FROM_ARGUMENT[name] in untaken:
            continue
        want = given[name]
        theirs = np.abs(as_float64(value)) if name == "c" else as_float64(value)
        ours = abs(want) if name == "c" else want
        # Every entry (a c kept per head holds it in each), to the precision of the run's dtype
        # or of the dtype the module holds it in, whichever is coarser: a c held in float16
        # holds the argument as float16 rounds it, which is no argument ignored (the case then
        # grades what the rounding does, [proto.report]'s `stored`).
        slack = max(2.0**-7 if dtype == "bf16" else F32_SLACK, held_slack(value))
        same = theirs.size > 0 and bool(np.all(np.abs(theirs - ours) <= slack * abs(ours)))
        if not same:
            arg = FROM_ARGUMENT[name]
            # How the module was given it: the argument, or an attribute of a config (`configs`).
            via = given_as(arg) if given_as is not None else arg
            given_with = f"{arg}={{}}" if via == arg else f"{via} = {{}}"
            # As held (c is compared in magnitude, but a log held is said with its sign).
            held_as = as_float64(value)
            shown = float(held_as.reshape(-1)[0]) if held_as.size == 1 else held_as.tolist()
            other = 2 * want
            try:
                again = None if rebuild is None else as_float64(rebuild(name, arg, other))
            except Exception:
                again = None
            if again is not None and again.shape == theirs.shape and not np.array_equal(
                    np.abs(again) if name == "c" else again, theirs):
                shown_again = float(again.reshape(-1)[0]) if again.size == 1 else again.tolist()
                ratio = scaled_by(theirs, ours, np.abs(again) if name == "c" else again, other)
                if ratio is not None:
                    # A scale, not a reparametrisation: the module starts elsewhere than told.
                    raise IgnoredArgument(
                        f"built with {given_with.format(repr(want))}, the module holds {name} = {shown!r}, "
                        f"and built with {given_with.format(repr(other))} it holds {shown_again!r}: it "
                        f"starts {name} at {ratio:g} × the value it is given (a scale in its constructor, "
                        f"`{arg} // 2`, `{arg} / 2`), where [fire.params] starts {name} at that value, so "
                        f"a model built with {arg}={want!r} trains from {name} = {shown!r}; if the module "
                        f"means the scaled value as its {arg}, a build(case) glue converts "
                        "(conformance/README.md) [fire.params]")
                raise TransformedArgument(
                    f"built with {given_with.format(repr(want))}, the module holds {name} = {shown!r}, "
                    f"and built with {given_with.format(repr(other))} it holds {shown_again!r}: it "
                    f"stores a transform of `{via}` (a log, a softplus⁻¹), which the glue cannot load a case's {name} "
                    "into; write a build(case) glue that converts (conformance/README.md) "
                    "[fire.params]")
            if via != arg:
                # Held as the value of another argument it was given: a slip of names.
                same = [given_as(FROM_ARGUMENT[k]) for k, v in given.items()
                        if k != name and held_as.size == 1 and abs(shown - v) <= F32_SLACK * abs(v)]
                raise IgnoredArgument(
                    f"built with {via} = {want!r}, the module holds {name} = {shown!r}"
                    f"{f' (the value of {same[0]})' if same else ''} before any case value is "
                    f"loaded: it starts {name} at a value of its own whatever `{via}` holds, where "
                    f"[fire.params] starts {name} at the value it is given (the glue loads the "
                    f"case's {name} over it, so only the module as built shows it); where another "
                    f"attribute is its {arg}, --map-arg {arg}=ATTRIBUTE")
            raise IgnoredArgument(
                f"built with {arg}={want!r}, the module holds {name} = {shown!r} before any case "
                f"value is loaded: its constructor ignores `{arg}` (it starts {name} at its own "
                f"value whatever it is given), or the parameter holds {name} relative to it "
                f"({name} / {arg}, scaled back in forward), which the glue cannot load a case's "
                f"{name} into (a build(case) glue converts: conformance/README.md); a constructor "
                f"that takes it under another name (read from **kwargs) is told with --map-arg "
                f"{arg}=NAME [fire.params]")


def scaled_by(held, given, held_again, given_again):
    """The constant factor a module holding ``held`` for ``given`` and ``held_again`` for
    ``given_again`` (scalars) applies, where it is one (to float32's precision) and not 1;
    else None (a log, a softplus⁻¹: no constant ratio)."""
    if np.size(held) != 1 or np.size(held_again) != 1 or given == 0 or given_again == 0:
        return None
    first = float(np.ravel(held)[0]) / given
    second = float(np.ravel(held_again)[0]) / given_again
    if first == 0 or abs(first - second) > F32_SLACK * abs(first) or abs(first - 1) <= F32_SLACK:
        return None
    return first


# A relative slack per 16-bit dtype a module may hold a scalar in: twice its rounding.
HELD_SLACK = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


def held_slack(value):
    """The relative slack within which ``value`` (a torch tensor, a JAX or NumPy array) holds an
    argument, by its own dtype: ``HELD_SLACK`` for a 16-bit float, 0 otherwise."""
    name = str(getattr(value, "dtype", "")).replace("torch.", "")
    return HELD_SLACK.get(name, 0.0)


def as_float64(value):
    """A module's scalar (a torch tensor, a JAX or NumPy array, a number) as a float64 array."""
    if hasattr(value, "detach"):
        import torch
        value = value.detach().to(torch.float64).cpu().numpy()
    return np.asarray(value, dtype=np.float64)


class DeadFTheta(fire_kit.Mistake, ValueError):
    """A module whose f_θ, as its constructor initialises it, no gradient can reach."""


def check_f_theta_start(initial):
    """Raises where f_θ, as the module initialised it (``initial``: its layers' weights and
    biases, by our names ``mlp.N.weight|bias``), is zero throughout: every activation is then
    0 and every weight after it 0, so no weight's gradient (the activation before it times the
    error after it) ever differs from 0; the output bias alone learns, and FIRE stays one
    constant per head. The cases load f_θ's values over it (its initialisation is random:
    [fire.defaults] takes PyTorch's ``nn.Linear`` one), so nothing else would show it."""
    layers = [as_float64(v) for k, v in initial.items() if k.startswith("mlp.")]
    if layers and all(not np.any(v) for v in layers):
        raise DeadFTheta(
            "its f_θ starts with every weight and bias 0 (as its constructor initialises it): "
            "every hidden activation is 0 and every weight after it 0, so no gradient ever "
            "reaches f_θ's weights and training moves its output bias alone, a constant per "
            "head; initialise the layers as [fire.defaults] does (PyTorch's nn.Linear: "
            "U(±1/√fan_in)), or at least one of them away from 0 [fire.defaults]")
