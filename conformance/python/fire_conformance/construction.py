"""How the ready-made glues construct a module from a case, and check what it holds before
any case value is loaded: the constructor's arguments (Appendix E's ``num_heads``,
``mlp_width``, ``init_c``, ``init_L``, ``eps``, and ``--kwargs``), the cases at the spec's
initial values ([fire.defaults]), on which a module is built on its own defaults; what it holds
of the arguments it was given is ``held``'s to check ([fire.params]). Shared by the PyTorch/NumPy glue
(``appendix_e``) and the JAX one (``jax_glue``); torch is imported only for a torch tensor.
"""

from itertools import combinations
import inspect
import json

from fire_conformance import configs
from fire_conformance import kit as fire_kit
from fire_conformance.held import F32_SLACK


# [fire.defaults]: c, L_init, the multiplier m and ε at initialisation.
DEFAULTS = {"c": 0.1, "l_init": 512.0, "l_multiplier": 1.0, "eps": 1e-6}
# The scalars a module initialises itself (`load_torch`'s names for them).
SCALARS = ("c", "init_L", "L_multiplier")


def at_defaults(enc):
    """Whether a case's FIRE is at the spec's initial values ([fire.defaults])."""
    return all(enc.get(k) == v for k, v in DEFAULTS.items())


# The constructor arguments the glue passes from each case: the shape, always; the initial
# values, from the case except where it checks the module's own ([fire.defaults]).
SHAPE_ARGS = ("num_heads", "mlp_width")
INITIAL_ARGS = ("init_c", "init_L", "eps")


def parse_kwargs(text):
    """``--kwargs JSON``: a JSON object of extra constructor arguments. The shape is the case's
    (refused here, before any case, rather than on every one as a duplicate argument); an
    initial value (``init_c``, ``init_L``, ``eps``) stands in for the constructor's own default
    in the cases at [fire.defaults] and gives way to the case's value elsewhere."""
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"--kwargs: not JSON ({e}): give an object, e.g. '{{\"dropout\": 0.0}}'")
    if not isinstance(kwargs, dict):
        raise SystemExit(f"--kwargs: expected a JSON object of constructor arguments, got {text}")
    fixed = sorted(k for k in kwargs if k in SHAPE_ARGS)
    if fixed:
        raise SystemExit(f"--kwargs: {', '.join(fixed)} come(s) from each case (the number of heads "
                         "and the MLP width of its FIRE); leave them out")
    return kwargs


# The constructor's own arguments for a framework's random state or its place in a model (NNX's
# `rngs`, Equinox's `key`, linen's `parent` and `name`, Haiku's `name`): never one of ours.
FRAMEWORK_ARGS = ("rngs", "key", "parent", "name")


# What other code calls Appendix E's constructor arguments (lower-cased), for the suggestion
# made to a constructor that names them otherwise.
SYNONYMS = {
    "num_heads": {"heads", "n_heads", "n_head", "nheads", "num_attention_heads", "attention_heads", "h"},
    "mlp_width": {"mlp_dim", "hidden", "hidden_dim", "hidden_size", "width", "mlp_hidden",
                  "mlp_hidden_dim", "d_hidden", "dim_hidden", "mlp_hidden_size"},
    "init_c": {"c", "c0", "c_0", "c_init", "initial_c"},
    "init_L": {"l", "l0", "l_0", "l_init", "init_l", "initial_l", "threshold", "max_len"},
    "eps": {"epsilon", "eps"},
}


def parameters_of(cls):
    """The named parameters of the constructor of ``cls`` (a bridged class's: its
    ``constructs``), read from ``__init__`` for a class (a metaclass's ``__call__``, as
    ``flax.nnx``'s, takes ``*args, **kwargs``); None where they cannot be read or it passes
    ``**kwargs`` on (it may then take anything)."""
    target = getattr(cls, "constructs", cls)
    try:
        if isinstance(target, type) and target.__init__ is not object.__init__:
            params = list(inspect.signature(target.__init__).parameters.values())[1:]
        else:
            params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return [p for p in params if p.kind != p.VAR_POSITIONAL]


def signature_of(cls):
    """The names of the arguments the constructor of ``cls`` takes (``parameters_of``), or
    None."""
    params = parameters_of(cls)
    return None if params is None else [p.name for p in params]


class Arguments:
    """What a glue gives a module's constructor besides the case: ``--kwargs`` (``extra``, a
    dict) and ``--map-arg OURS=YOURS`` (``names``: Appendix E's argument names to the
    constructor's, ``FIRE(n_heads=…, hidden=…)`` for ``num_heads`` and ``mlp_width``)."""

    def __init__(self, extra=None, names=None):
        self.extra = dict(extra or {})
        self.names = dict(names or {})
        # The configs built for each config-constructed class (`case_config`), whose reads say
        # which of our arguments it takes (`config_reads`).
        self.configs = {}
        # By class: its config parameter (`config_of`) and what its config class declares
        # (`takes_from`), read once: every case asks for them several times.
        self.config_params, self.declared = {}, {}

    def theirs(self, ours):
        """The constructor's name for our argument ``ours``."""
        return self.names.get(ours, ours)

    def config_of(self, cls):
        """The parameter of the constructor of ``cls`` that takes one config object
        (``configs.config_parameter``), or None where it takes our arguments."""
        if cls not in self.config_params:
            shape = [self.theirs(a) for a in SHAPE_ARGS]
            self.config_params[cls] = configs.config_parameter(cls, parameters_of(cls), shape, FRAMEWORK_ARGS)
        return self.config_params[cls]

    def beside_config(self, cls):
        """Our arguments a config-constructed ``cls`` takes as constructor arguments of their own
        beside the config (``__init__(self, config, eps=1e-6)``), under its names."""
        names = {p.name for p in parameters_of(cls) or ()}
        return [a for a in SHAPE_ARGS + INITIAL_ARGS if self.theirs(a) in names]

    def given_as(self, cls, ours):
        """How a module of ``cls`` is given our argument ``ours``: the config attribute it read
        it as (``config.fire_init_c``) or that its config class declares (``takes_from``), or
        the constructor's argument."""
        if self.config_of(cls) is not None and ours not in self.beside_config(cls):
            attr = self.takes_from(cls).get(ours)
            if attr is not None:
                return f"config.{attr}"
        return self.theirs(ours)

    def takes_from(self, cls):
        """Ours -> the attribute of its config a config-constructed ``cls`` takes it from: the
        one it read, or else the one its annotated config class declares
        (``configs.declared``), which it then ignores if it never reads it."""
        if cls not in self.declared:
            self.declared[cls] = configs.declared(cls, self.config_of(cls), self.names)
        return {**self.declared[cls], **self.config_reads(cls)[0]}

    def claims_shape(self, cls):
        """Whether the constructor of ``cls`` is given the shape, so claims to build what it is
        given: it names ``num_heads`` and ``mlp_width`` among its parameters, or takes a config
        that holds both (read, or declared by its class: ``takes_from``)."""
        if self.config_of(cls) is not None:
            return all(a in self.takes_from(cls) or a in self.beside_config(cls) for a in SHAPE_ARGS)
        params = signature_of(cls) or ()
        return all(self.theirs(a) in params for a in SHAPE_ARGS)

    def config_reads(self, cls):
        """What a config-constructed ``cls`` has read from the configs built for it: ours -> the
        attribute, and the attributes no case answered (nothing did, or the config class's
        defaults: ``configs.record``). The first is a trial, the module built from a config of the
        spec's defaults ([fire.defaults]), whose errors are left to the cases' own constructions
        to report; a module that reads its config only when it is first called (a Flax linen
        module's ``setup``) adds its reads as each case's module is initialised."""
        if cls not in self.configs:
            given = {"num_heads": 2, "mlp_width": 4, "init_c": DEFAULTS["c"], "init_L": DEFAULTS["l_init"],
                     "eps": DEFAULTS["eps"]}
            trial = self.case_config(cls, self.config_of(cls), given)
            try:
                self.construct_from(cls, trial, given)
            except Exception:
                pass
        read, others = {}, []
        for config in self.configs[cls]:
            got, unanswered, from_base = configs.record(config)
            for ours, attr in got.items():
                read.setdefault(ours, attr)
            others += [a for a in unanswered + from_base if a not in others]
        return read, others

    def reads_when_built(self, cls):
        """Whether a config-constructed ``cls`` reads our arguments while it is built (the
        trial of ``config_reads``), rather than when first called (a Flax linen module)."""
        self.config_reads(cls)
        return bool(configs.record(self.configs[cls][0])[0])

    def case_config(self, cls, param, given):
        """The ``configs.CaseConfig`` holding our arguments ``given`` (over ``--kwargs``' initial
        values), ``--kwargs``' other entries that are no argument of the constructor's, and the
        defaults of the config class ``param`` is annotated with; kept for ``config_reads``."""
        taken = {p.name for p in parameters_of(cls) or ()}
        values = {k: v for k, v in {**self.extra, **given}.items() if k in SHAPE_ARGS + INITIAL_ARGS}
        attrs = {k: v for k, v in self.extra.items() if k not in values and k not in taken}
        config = configs.CaseConfig(values, attrs, self.names, configs.default_of(cls, param))
        self.configs.setdefault(cls, []).append(config)
        return config

    def construct_from(self, cls, config, given):
        """``cls`` built from ``config`` (``case_config``), our arguments ``given`` that it takes
        beside the config (``beside_config``) and the ``--kwargs`` entries that are arguments of
        its constructor."""
        param = self.config_of(cls)
        taken = {p.name for p in parameters_of(cls) or ()}
        kwargs = {k: v for k, v in self.extra.items() if k in taken and k != param.name}
        kwargs.update({self.theirs(a): given[a] for a in self.beside_config(cls) if a in given})
        if param.kind == param.POSITIONAL_ONLY:
            return cls(config, **kwargs)
        return cls(**{param.name: config}, **kwargs)

    def untaken(self, cls):
        """Our initial-value arguments (``INITIAL_ARGS``) the constructor of ``cls`` does not
        take under any name it was given: a module that fixes ε, or makes c and L_init itself
        (the glue loads the case's c and L_init over what it makes; a case at another ε than
        the spec's is not one it can be given). Empty where the constructor's arguments cannot
        be read (``signature_of``)."""
        if self.config_of(cls) is not None:
            taken = set(self.takes_from(cls)) | set(self.beside_config(cls))
            return frozenset(a for a in INITIAL_ARGS if a not in taken and a not in self.extra)
        names = signature_of(cls)
        if names is None:
            return frozenset()
        return frozenset(a for a in INITIAL_ARGS if self.theirs(a) not in names and a not in self.extra)

    def call(self, cls, given):
        """``cls`` built with our arguments ``given`` (ours -> value) over ``extra``, each under
        the constructor's name for it, leaving out those it does not take (``untaken``); those
        it takes by position only (``def __init__(self, num_heads, mlp_width, /)``) by
        position. A constructor taking one config object is given a ``CaseConfig`` holding them
        (``config_of``)."""
        param = self.config_of(cls)
        if param is not None:
            return self.construct_from(cls, self.case_config(cls, param, given), given)
        untaken = self.untaken(cls)
        args = {self.theirs(k): v for k, v in {**self.extra, **given}.items() if k not in untaken}
        positional = []
        for p in parameters_of(cls) or ():
            if p.kind != p.POSITIONAL_ONLY or p.name not in args:
                break
            positional.append(args.pop(p.name))
        return cls(*positional, **args)

    def check(self, cls):
        """Refuses, before any case, a ``--map-arg`` naming an argument the constructor of
        ``cls`` does not take (where its arguments can be read): the argument would otherwise be
        left out as one it does not take, silently. For a constructor taking one config
        object, ``--map-arg`` names the config's attributes, which cannot be read before it is
        built."""
        if self.config_of(cls) is not None:
            return
        names = signature_of(cls)
        wrong = sorted(f"{a}={n}" for a, n in self.names.items() if names is not None and n not in names)
        if wrong:
            raise SystemExit(f"--map-arg {', '.join(wrong)}: the constructor takes no such argument; "
                             f"it takes ({', '.join(names)})")

    def check_reached(self, cls, loaded, enc):
        """Skips a case whose L_init the module cannot be given: its constructor does not take
        ``init_L`` (``untaken``) and it holds no ``init_L`` the glue loads (``loaded``, our names of
        what it loaded: a threshold kept as a float attribute, or under another name), so it
        keeps its own, which is graded on the cases at the spec's L_init alone; likewise a case
        whose ε a config-constructed module, built and initialised, has not read."""
        if self.config_of(cls) is not None and "eps" in self.untaken(cls) and enc["eps"] != DEFAULTS["eps"]:
            raise fire_kit.Skip(
                f"ε = {enc['eps']!r}: the module read no ε from the config the glue built, so it "
                f"keeps its own (graded on the cases at the spec's ε = {DEFAULTS['eps']!r}); where "
                "it reads ε under another name, --map-arg eps=ATTRIBUTE")
        if "init_L" in self.untaken(cls) and "init_L" not in loaded and enc["l_init"] != DEFAULTS["l_init"]:
            raise fire_kit.Skip(
                f"L_init = {enc['l_init']!r}: the constructor takes no `init_L` and the module holds "
                "none the glue can load, so it keeps its own (graded on the cases at the spec's "
                f"L_init = {DEFAULTS['l_init']!r}); where it takes L_init under another name, "
                "--map-arg init_L=NAME, or where it holds it so, --map init_L=NAME")

    def note(self, cls):
        """What the run's name says of a constructor taking fewer of our arguments
        (``untaken``), and where a config-constructed one read them: "" where it takes them all,
        or not the shape (it is then refused)."""
        names = signature_of(cls)
        config = self.config_of(cls) is not None
        if not config and names is not None and any(self.theirs(a) not in names for a in SHAPE_ARGS):
            return ""
        untaken = self.untaken(cls)
        scalars = [a for a in ("init_c", "init_L") if a in untaken]
        said = []
        if config and not self.reads_when_built(cls):
            # What it reads is known only once it is called (`check_reached` skips then).
            return "; its constructor takes one config object, built by the glue, which it reads when first called"
        if config:
            read = self.config_reads(cls)[0]
            said.append(f"takes one config object, built by the glue ({configs.describe(read)})")
        takes = "reads" if config else "takes"
        if scalars:
            said.append(f"{takes} no {' or '.join(scalars)} (the case's values loaded over the module's own)")
        if "eps" in untaken:
            said.append(f"{takes} no eps (cases at ε ≠ {DEFAULTS['eps']!r} skipped)")
        if not said:
            return ""
        if config:
            # The attributes it read that the case did not answer may hold the rest.
            others = self.config_reads(cls)[1]
            rest = [a for a in INITIAL_ARGS if a in untaken]
            hint = (f"; it read config.{', config.'.join(others)}, which the case did not answer: "
                    f"where one is its {' or '.join(rest)}, --map-arg OURS=ATTRIBUTE") if others and rest else ""
            return f"; its constructor {', and '.join(said)}{hint}"
        # An argument named as other code names one of ours may be it.
        guess = self.named_otherwise(names or ())[2]
        maybe = [a for a in INITIAL_ARGS if a in untaken and a in guess]
        hint = (f"; its {', '.join(guess[a] for a in maybe)} may be ours: "
                f"{' '.join(f'--map-arg {a}={guess[a]}' for a in maybe)}") if maybe else ""
        return f"; its constructor {', and '.join(said)}{hint}"

    def named_otherwise(self, names):
        """For a constructor taking ``names``: its arguments none of ours claims, ours it does
        not take, and those of ours one of its arguments is named as other code names it
        (``SYNONYMS``: ``n_heads``, ``c0``), ours -> its."""
        claimed = {self.theirs(a) for a in SHAPE_ARGS + INITIAL_ARGS} | set(self.extra) | set(FRAMEWORK_ARGS)
        spare = [n for n in names if n not in claimed]
        missing = [a for a in SHAPE_ARGS + INITIAL_ARGS if self.theirs(a) not in names]
        guess = {}
        for a in missing:
            known = [n for n in spare if n.lower() in SYNONYMS[a] and n not in guess.values()]
            if known:
                guess[a] = known[0]
        return spare, missing, guess

    def suggestion(self, cls):
        """How to name our arguments for a constructor that takes others: ``--map-arg`` pairs of
        ours and its unclaimed arguments, by the names other code gives ours (``SYNONYMS``) and
        else in Appendix E's order against its own; none where it has too few to take the shape
        (a config object, which a ``build(case)`` glue constructs); "" where its arguments
        cannot be read."""
        names = signature_of(cls)
        if names is None:
            return ""
        spare, missing, guess = self.named_otherwise(names)
        # Then Appendix E's order for the rest.
        rest = [n for n in spare if n not in guess.values()]
        guess.update(zip([a for a in missing if a not in guess], rest))
        missing = [a for a in missing if a in guess]
        spare = [guess[a] for a in missing]
        pairs = " ".join(f"--map-arg {a}={guess[a]}" for a in missing)
        shown = f"its constructor takes ({', '.join(names)})"
        if not pairs or not all(a in guess for a in SHAPE_ARGS if self.theirs(a) not in names):
            return shown
        return f"{shown}; if its {', '.join(spare)} are Appendix E's {', '.join(missing)}, say so: {pairs}"


def parse_arg_names(pairs):
    """``--map-arg OURS=YOURS`` pairs as a dict, ours being Appendix E's constructor arguments."""
    try:
        names = dict(kv.split("=", 1) for kv in pairs)
    except ValueError:
        raise SystemExit("--map-arg takes OURS=YOURS, e.g. --map-arg num_heads=n_heads")
    unknown = sorted(k for k in names if k not in SHAPE_ARGS + INITIAL_ARGS)
    if unknown:
        raise SystemExit(f"--map-arg: unknown argument(s) {unknown}; ours are Appendix E's "
                         f"{', '.join(SHAPE_ARGS + INITIAL_ARGS)}")
    return names


def from_options(kwargs_text, arg_names):
    """The ``Arguments`` of ``--kwargs JSON`` and ``--map-arg`` pairs."""
    return Arguments(parse_kwargs(kwargs_text), parse_arg_names(arg_names))


def construct_own(cls, heads, width, arguments, enc):
    """The module built on its own defaults for c, L_init and ε (``num_heads``, ``mlp_width``
    and ``--kwargs`` only, whose initial values stand in for the constructor's defaults). A
    constructor that requires some of them (whatever it raises without: a TypeError, a
    ``kwargs["init_c"]`` KeyError, an assert on a None default) is given those from the case
    ``enc`` — the fewest that build it — and its defaults for the others are still checked;
    None when it builds only with all three, in which case it has no defaults of its own to
    check and is built from the case's values; None too for a module that reads its config only
    when first called (``Arguments.reads_when_built``). ``arguments``: an ``Arguments``."""
    given = {"init_c": enc["c"], "init_L": enc["l_init"], "eps": enc["eps"]}
    if arguments.config_of(cls) is not None and not arguments.reads_when_built(cls):
        # Reading its config only when first called, it cannot be told here which defaults it
        # lacks (a read it has no default for fails then, not now).
        return None
    untaken = arguments.untaken(cls)
    free = [k for k in INITIAL_ARGS if k not in arguments.extra and k not in untaken]
    # Never all of them: a module given every one has no default of its own left to check.
    for n in range(len(free) or 1):
        for names in combinations(free, n):
            try:
                return arguments.call(cls, {"num_heads": heads, "mlp_width": width,
                                            **{k: given[k] for k in names}})
            except Exception:
                continue
    return None


def default_eps_note(cls, arguments):
    """What to say of a constructor whose default for ε (its parameter under ``arguments``' name
    for ``eps``, unless ``--kwargs`` gives it) is a number other than [fire.defaults]' 10⁻⁶,
    beyond float32's rounding; None otherwise. Only said, not failed: on the cases at the spec's
    defaults, where the module is built on its own, an ε of 10⁻⁵ moves the bias by less than
    float32's tolerance (one of 10⁻³ fails them on its values), yet every model built on the
    defaults normalises with it."""
    name = arguments.theirs("eps")
    params = parameters_of(cls) or []
    p = next((p for p in params if p.name == name), None)
    if p is None or name in arguments.extra or isinstance(p.default, bool) \
            or not isinstance(p.default, (int, float)):
        return None
    want = DEFAULTS["eps"]
    if abs(p.default - want) <= F32_SLACK * want:
        return None
    return (f"the constructor's default ε is {p.default!r} (`{name}={p.default!r}`), where [fire.defaults] "
            f"has {want!r}: the cases at the spec's defaults are built on it, and where they pass its "
            "effect is within the tolerance, but every model built on the defaults uses it")


def construct(cls, heads, width, enc, arguments):
    """The module, constructed as Appendix E's is (``num_heads``, ``mlp_width``, ``init_c``,
    ``init_L``, ``eps``) plus ``--kwargs``, under the constructor's names (``arguments``, an
    ``Arguments``). An initial value it does not take is left out (``Arguments.untaken``): c and
    L_init are loaded over what it makes, and a case at an ε other than the spec's is skipped,
    since the module cannot be given it. A constructor whose signature is not Appendix E's fails
    the same way on every case; the error says how to reach it rather than leave a bare
    TypeError to every reply."""
    # A config-constructed module may read its ε only once it is first called: `check_reached`
    # skips its case then.
    if arguments.config_of(cls) is None and "eps" in arguments.untaken(cls) and enc["eps"] != DEFAULTS["eps"]:
        raise fire_kit.Skip(f"ε = {enc['eps']!r}: the constructor takes no `eps`, so the module keeps "
                            f"its own (graded on the cases at the spec's ε = {DEFAULTS['eps']!r}); "
                            "where it takes ε under another name, --map-arg eps=NAME")
    # The case's initial values over any --kwargs gave (`parse_kwargs`).
    given = {"num_heads": heads, "mlp_width": width, "init_c": enc["c"], "init_L": enc["l_init"],
             "eps": enc["eps"]}
    try:
        return arguments.call(cls, given)
    except TypeError as e:
        names = signature_of(cls)
        if "unexpected keyword" in str(e) and names is not None and len(names) < len(SHAPE_ARGS):
            # One object holding them all (a config): no --map-arg names what is inside it.
            how = (f"its constructor takes ({', '.join(names)}), too few arguments to be given the "
                   "shape, as a config object holds it: write a build(case) glue that makes one "
                   "from the case and constructs the module (conformance/README.md)")
        elif "unexpected keyword" in str(e):
            hint = arguments.suggestion(cls)
            how = (f"{hint}; " if hint else "") + (
                "name its arguments with --map-arg OURS=YOURS, or write a build(case) glue that "
                "constructs it (conformance/README.md)")
        else:
            how = "pass other required arguments with --kwargs JSON, or write a build(case) glue"
        raise TypeError(f"{e} (the glue constructs the module as Appendix E does: num_heads, "
                        f"mlp_width, init_c, init_L, eps; {how})") from e


def with_seed(cls, kwargs, name, seed):
    """``cls(**kwargs)`` given ``name=seed()`` (a framework's random state: NNX's ``rngs``,
    Equinox's ``key``) where its constructor names that argument or passes ``**kwargs`` on, and
    ``kwargs`` does not already; a ``**kwargs`` constructor that turns it away (a TypeError
    naming it) is built again without."""
    try:
        params = inspect.signature(cls.__init__ if isinstance(cls, type) else cls).parameters.values()
        takes = any(p.name == name or p.kind == p.VAR_KEYWORD for p in params)
    except (TypeError, ValueError):
        takes = False
    if not takes or name in kwargs:
        return cls(**kwargs)
    try:
        return cls(**kwargs, **{name: seed()})
    except TypeError as e:
        if name not in str(e):
            raise
        return cls(**kwargs)
