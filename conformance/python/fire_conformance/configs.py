"""A module constructed from one config object (``__init__(self, config)``, Hugging Face's way;
a Flax linen module with a ``config`` field): the glue hands it a ``CaseConfig`` that answers
each attribute the module reads with the case's value of the Appendix E argument it names
(``num_attention_heads`` the number of heads, ``fire_mlp_width`` the MLP's width,
``fire_init_c`` c, …), and records which were read. An argument the module never reads is then
one its constructor does not take (``construction.Arguments.untaken``): c and L_init are loaded
over what it makes, a case at another ε is skipped. A name it reads that says nothing certain of
FIRE (``hidden_size`` is a model's width in most configs, not f_θ's) is not guessed: the module
gets the config class's default where its annotation names one, else an ``AttributeError`` that
names the attribute and the ``--map-arg`` that answers it (a ``getattr(config, name, default)``
takes its default, as it would from a real config without the attribute).
"""

import dataclasses
import inspect
import typing

# The names a config parameter goes by (lower-cased), besides any ending in "config" or "cfg".
CONFIG_PARAMS = {"config", "cfg", "conf", "args", "hparams", "hps", "params", "settings", "opts",
                 "options", "model_args", "hyperparams", "hyperparameters"}

# Prefixes a config puts before FIRE's own entries (``fire_c``, ``rpe_mlp_width``,
# ``pos_bias_hidden``), longest first, each of which makes a generic name FIRE's.
PREFIXES = ("relative_position_", "rel_pos_bias_", "position_bias_", "positional_", "position_",
            "pos_bias_", "rel_pos_", "fire_", "fire", "rpe_", "pos_", "bias_")

# Our argument -> the names a config may give it. ``plain``: read as ours on their own;
# ``prefixed``: only after one of ``PREFIXES`` (``fire_hidden_size``), since on their own they
# are another part of a model in most configs (``hidden_size``, ``mlp_dim``: the model's width
# and its feed-forward's; ``max_len``: the context length).
NAMES = {
    "num_heads": {
        "plain": {"num_heads", "n_heads", "n_head", "nheads", "num_attention_heads", "attention_heads",
                  "heads", "num_head"},
        "prefixed": {"h"},
    },
    "mlp_width": {
        "plain": {"mlp_width"},
        "prefixed": {"mlp_dim", "hidden", "hidden_dim", "hidden_size", "width", "mlp_hidden",
                     "mlp_hidden_dim", "mlp_hidden_size", "d_hidden", "dim_hidden", "mlp_size", "dim", "mlp_features", "hidden_features"},
    },
    "init_c": {
        "plain": {"init_c", "c_init", "initial_c", "c0", "c_0"},
        "prefixed": {"c"},
    },
    "init_L": {
        "plain": {"init_l", "l_init", "initial_l", "l0", "l_0"},
        "prefixed": {"l", "threshold", "init_threshold", "threshold_init", "l_threshold", "max_len"},
    },
    "eps": {
        "plain": {"eps"},
        "prefixed": {"epsilon", "eps", "norm_eps"},
    },
}


def is_config_name(name):
    """Whether a constructor parameter's name says it is a config object."""
    low = name.lower()
    return low in CONFIG_PARAMS or low.endswith("config") or low.endswith("cfg")


def ours_for(attr):
    """Our argument a config attribute named ``attr`` holds (``NAMES``), or None."""
    low = attr.lower()
    for ours, names in NAMES.items():
        if low in names["plain"]:
            return ours
    for prefix in PREFIXES:
        if low.startswith(prefix) and len(low) > len(prefix):
            rest = low[len(prefix):]
            for ours, names in NAMES.items():
                if rest in names["plain"] or rest in names["prefixed"]:
                    return ours
    return None


def config_parameter(cls, params, shape, framework):
    """The one parameter of the constructor of ``cls`` (``params``, as
    ``construction.parameters_of`` reads them) that is a config object, or None: the
    constructor's only required parameter besides the framework's (``framework``: NNX's
    ``rngs``, linen's ``parent``), named as a config is or annotated with a class, where the
    constructor does not take the shape itself (``shape``: the names of our ``num_heads`` and
    ``mlp_width`` under which it would). It may take others of ours beside it
    (``__init__(self, config, eps=1e-6)``)."""
    if not params:
        return None
    names = {p.name for p in params}
    if all(n in names for n in shape):
        return None
    required = [p for p in params if p.default is p.empty and p.name not in framework]
    if len(required) != 1:
        return None
    p = required[0]
    if ours_for(p.name) is not None:
        return None
    return p if is_config_name(p.name) or isinstance(annotation(cls, p), type) else None


def annotation(cls, param):
    """The class ``param`` is annotated with (resolving string annotations), or None."""
    target = getattr(cls, "constructs", cls)
    hint = None
    try:
        init = target.__init__ if isinstance(target, type) else target
        hint = typing.get_type_hints(init).get(param.name)
    except Exception:
        hint = param.annotation if param.annotation is not param.empty else None
    if isinstance(hint, str):
        return None
    # Optional[Config] and Config | None: the class inside.
    args = [a for a in getattr(hint, "__args__", ()) or () if a is not type(None)]
    if typing.get_origin(hint) is typing.Union and len(args) == 1:
        hint = args[0]
    # Not a plain type, nor `Any` (a class since Python 3.11) or `object`, which say nothing.
    plain = (int, float, str, bool, dict, list, object, typing.Any)
    return hint if isinstance(hint, type) and hint not in plain else None


def declared(cls, param, names=None):
    """Ours -> the attribute of the config class ``param`` is annotated with that holds it: its
    fields (a dataclass's, a linen ``struct``'s, else its constructor's parameters and what an
    instance built on its defaults holds), each named as ``ours_for`` or ``names``
    (``--map-arg``: ours -> the attribute) says. Empty where it is not annotated. A module
    whose config declares an argument it never reads ignores it."""
    kind = annotation(cls, param)
    if kind is None:
        return {}
    if dataclasses.is_dataclass(kind):
        attrs = [f.name for f in dataclasses.fields(kind)]
    else:
        try:
            attrs = [p for p in inspect.signature(kind).parameters if p not in ("self", "kwargs", "args")]
        except (TypeError, ValueError):
            attrs = []
        # An instance on its defaults (none where it requires arguments; `__slots__` hold none).
        held = getattr(default_of(cls, param), "__dict__", {})
        attrs += [a for a in held if not a.startswith("_")]
    mapped = {theirs: ours for ours, theirs in (names or {}).items()}
    out = {}
    for attr in attrs:
        ours = mapped.get(attr) or ours_for(attr)
        # A plain `eps` in a model's config is as likely its layer norms' ε: FIRE's only where
        # the module reads it (or --map-arg says so).
        if ours == "eps" and attr not in mapped and attr.lower() in NAMES["eps"]["plain"]:
            continue
        if ours is not None:
            out.setdefault(ours, attr)
    return out


def default_of(cls, param):
    """An instance of the config class ``param`` is annotated with, built on its own defaults,
    or None where it has none (not annotated, or it requires arguments)."""
    kind = annotation(cls, param)
    if kind is None:
        return None
    try:
        return kind()
    except Exception:
        return None


# Names of a config entry holding FIRE's own settings (``config.fire.mlp_width``,
# ``config.position_encoding["c"]``), lower-cased: inside it FIRE's names are answered without
# their prefix (``hidden_size`` there is f_θ's).
SCOPES = {"fire", "fire_config", "fire_cfg", "fire_params", "fire_args", "fire_kwargs", "rpe",
          "rpe_config", "pos_bias", "position_bias", "relative_position_bias", "rel_pos_bias",
          "rel_pos", "positional_encoding", "position_encoding", "pos_encoding", "pe_config",
          "positional_bias", "relative_bias", "bias_config"}


def ours_within(key):
    """Our argument a key named ``key`` holds inside one of ``SCOPES``: any name FIRE's
    arguments go by, with or without a prefix."""
    low = key.lower()
    for ours, names in NAMES.items():
        if low in names["plain"] or low in names["prefixed"]:
            return ours
    return ours_for(key)


class CaseConfig:
    """What a config-constructed module reads its arguments from: ``values`` (ours -> the
    case's value), each answered under the names a config gives it (``ours_for``) or the one
    ``names`` (``--map-arg``: ours -> the attribute) says; ``extra`` (``--kwargs``) by its own
    names; an entry named as one of ``SCOPES`` by a view of the same values (``Scope``);
    anything else from ``base`` (the annotated config class's defaults), else an
    ``AttributeError``. ``read`` records ours -> the attribute each was read as, ``unanswered``
    the attributes read that nothing answered, ``from_base`` those the defaults answered."""

    def __init__(self, values, extra=None, names=None, base=None):
        state = {"values": dict(values), "extra": dict(extra or {}), "names": dict(names or {}),
                 "base": base, "read": {}, "unanswered": [], "from_base": []}
        object.__setattr__(self, "_state", state)

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        s = object.__getattribute__(self, "_state")
        if attr in s["extra"]:
            return s["extra"][attr]
        mapped = {theirs: ours for ours, theirs in s["names"].items()}
        ours = mapped.get(attr) or ours_for(attr)
        if ours is not None and ours in s["values"]:
            s["read"].setdefault(ours, attr)
            return s["values"][ours]
        if ours is None and attr.lower() in SCOPES:
            return Scope(s, attr, getattr(s["base"], attr, None))
        if s["base"] is not None and hasattr(s["base"], attr):
            if attr not in s["from_base"]:
                s["from_base"].append(attr)
            return getattr(s["base"], attr)
        if attr not in s["unanswered"]:
            s["unanswered"].append(attr)
        maybe = [o for o, names in NAMES.items() if attr.lower() in names["prefixed"]]
        which = (f"`{attr}` is FIRE's {maybe[0]} in some code and another part of a model in most "
                 f"configs: where it is FIRE's, --map-arg {maybe[0]}={attr}; otherwise give"
                 if maybe else f"name the argument `{attr}` holds with --map-arg OURS={attr}, give")
        raise AttributeError(
            f"the config object the glue built holds no {attr!r}: it answers the names FIRE's "
            f"arguments go by in configs (num_attention_heads, fire_mlp_width, fire_init_c, "
            f"fire_init_L, fire_eps, …, or inside an entry `fire`, `rpe`, `position_encoding`); "
            f"{which} its value with --kwargs '{{\"{attr}\": …}}', annotate the constructor's config "
            "parameter with a config class whose defaults hold it, or write a build(case) glue "
            "that builds the module's config from the case (conformance/README.md)")

    def __setattr__(self, attr, value):
        # A module that writes into its config (``config.head_dim = …``) reads it back.
        object.__getattribute__(self, "_state")["extra"][attr] = value

    def to_dict(self):
        """What a ``PretrainedConfig`` gives: every value answered by its own name."""
        s = object.__getattribute__(self, "_state")
        return {**s["values"], **s["extra"]}

    def __repr__(self):
        s = object.__getattribute__(self, "_state")
        return f"CaseConfig({s['values']!r}, extra={s['extra']!r})"


class Scope:
    """The entry ``name`` of a ``CaseConfig`` that holds FIRE's own settings, read as attributes
    or as a dict's keys (``config.fire.c``, ``config.rpe["mlp_width"]``, ``.get(key,
    default)``): FIRE's names answered without their prefix (``ours_within``), anything else from
    the same entry of the config class's defaults (``base``), recorded in the config's state."""

    def __init__(self, state, name, base):
        object.__setattr__(self, "_scope", (state, name, base))

    def answer(self, key, missing):
        state, name, base = object.__getattribute__(self, "_scope")
        ours = ours_within(key)
        if ours is not None and ours in state["values"]:
            state["read"].setdefault(ours, f"{name}.{key}")
            return state["values"][ours]
        if isinstance(base, dict) and key in base:
            return base[key]
        if base is not None and not isinstance(base, dict) and hasattr(base, key):
            return getattr(base, key)
        where = f"{name}.{key}"
        if where not in state["unanswered"]:
            state["unanswered"].append(where)
        raise missing(
            f"the config object the glue built holds no {key!r} in `{name}`: inside it, it answers "
            "the names FIRE's arguments go by (num_heads, mlp_width, hidden_size, c, init_c, L, "
            "init_L, eps, …); write a build(case) glue that builds the module's config from the "
            "case (conformance/README.md)")

    def __getattr__(self, key):
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        return self.answer(key, AttributeError)

    def __getitem__(self, key):
        return self.answer(key, KeyError)

    def get(self, key, default=None):
        try:
            return self.answer(key, KeyError)
        except KeyError:
            return default

    def __contains__(self, key):
        return self.get(key, self) is not self

    def __repr__(self):
        return f"Scope({object.__getattribute__(self, '_scope')[1]!r})"


def record(config):
    """What a ``CaseConfig`` saw: (ours -> attribute read, attributes unanswered, attributes the
    config class's defaults answered)."""
    s = object.__getattribute__(config, "_state")
    return dict(s["read"]), list(s["unanswered"]), list(s["from_base"])


def describe(read):
    """The run's words for where a config-constructed module read our arguments."""
    return ", ".join(f"{ours} ← config.{attr}" for ours, attr in read.items())
