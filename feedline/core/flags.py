"""Command-line flags generated from a config dataclass, so options are written once.

Each field becomes ``--field-name`` with the field's default; its ``metadata`` gives the
help (``help``), the argument group (``group``) and argparse details (``metavar``,
``nargs``, ``const``, ``positional``, ``default_text``). The type comes from the field's
annotation:

- ``bool`` (or ``bool | None``): ``--name`` / ``--no-name``;
- a ``Choice`` Enum: its values, listed in the metavar; the string is handed to the
  dataclass, whose ``__post_init__`` parses it (one clear error line for a bad value);
- ``int``, ``float``, ``str``, optionally ``| None``: that type; other unions: ``str``;
- ``tuple[X, ...]``: X, one or more values (``nargs`` in the metadata).

An unknown flag is refused with an answer when the parser has one for it (``set_defaults(
unknown_flag_answers={flag: answer})``: another program's flag that means something else here;
``"--switch VALUE"``: what to say to a value given to that switch),
else with the closest known flag of the same polarity (``--no-x`` only for ``--no-...``), if
one is close; a value given to a switch (``--amp bf16``) says the switch takes none.

The help ends with one "(default: ...)": the default itself, or ``default_text`` where it
needs words; nothing for a ``None`` default without ``default_text`` (the help says it).
Nothing heavy is imported here: building a parser stays fast.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from enum import Enum

_ARGPARSE_KEYS = ("metavar", "nargs", "const")


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one argument per field of the dataclass ``cls``, in field order, under the
    argument group its metadata names (created on first use, in order)."""
    hints = typing.get_type_hints(cls)
    groups: dict[str | None, argparse._ActionsContainer] = {None: parser}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        meta = f.metadata
        title = meta.get("group")
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        _add(groups[title], f, hints[f.name], meta)


def config_from_args(cls: type, args: argparse.Namespace):
    """``cls`` built from the parsed flags of ``add_dataclass_arguments``."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init})


def _add(container, f: dataclasses.Field, hint, meta) -> None:
    kind = _plain_type(hint)
    kwargs = {k: meta[k] for k in _ARGPARSE_KEYS if k in meta}
    kwargs["default"] = f.default
    kwargs["help"] = _help(meta.get("help", ""), f.default, meta.get("default_text"))
    if kind is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif isinstance(kind, type) and issubclass(kind, Enum):
        kwargs.setdefault("metavar", "|".join(str(m.value) for m in kind))
    else:
        kwargs["type"] = kind
    if meta.get("positional"):
        kwargs.setdefault("metavar", f.name.upper())
        action = container.add_argument(f.name, **kwargs)
    else:
        names = ["--" + f.name.replace("_", "-"), *meta.get("aliases", ())]
        action = container.add_argument(*names, dest=f.name, **kwargs)
    action.help = kwargs["help"]  # some Pythons append a second "(default: True)" to --x/--no-x


def _plain_type(hint):
    """``X | None`` -> X; ``tuple[X, ...]`` -> X; an Enum or a plain type as it is; any other union -> str."""
    if typing.get_origin(hint) in (tuple, list):
        return typing.get_args(hint)[0]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return hint


def _help(text: str, default, default_text: str | None) -> str:
    """The help with one default, '%' escaped for argparse."""
    if default_text is not None:
        shown = default_text
    elif default is None:
        shown = None
    elif isinstance(default, bool):
        shown = "on" if default else "off"
    elif isinstance(default, Enum):
        shown = str(default.value)
    elif isinstance(default, tuple):
        shown = " ".join(map(str, default))
    else:
        shown = str(default)
    text = text.replace("%", "%%")
    return f"{text} (default: {shown.replace('%', '%%')})" if shown is not None else text


def unknown_flag_message(parser: argparse.ArgumentParser, extras: list[str], argv: list[str] = ()) -> str:
    """argparse's "unrecognized arguments" line, with for each unknown flag of ``parser`` its
    answer, or the closest known flag of the same polarity ("did you mean --smoothing?"), and for
    a bare value that follows a switch in ``argv``, that the switch takes no value."""
    import difflib
    answers = parser.get_default("unknown_flag_answers") or {}
    switches = {o for action in parser._actions for o in action.option_strings if action.nargs == 0}
    known = [o for action in parser._actions for o in action.option_strings]
    hints = []
    for arg in extras:
        name = arg.split("=", 1)[0]
        if not arg.startswith("-"):
            before = [argv[i - 1] for i in range(1, len(argv)) if argv[i] == arg]
            if before and before[0] in switches:
                more = answers.get(f"{before[0]} VALUE")
                hints.append(f"{arg}: {before[0]} is a switch and takes no value" + (f"; {more}" if more else ""))
            continue
        if name in answers:
            hints.append(f"{name}: {answers[name]}")
            continue
        same_polarity = [k for k in known if k.startswith("--no-") == name.startswith("--no-")]
        close = difflib.get_close_matches(name, same_polarity, n=1, cutoff=0.8)
        if close:
            hints.append(f"{arg}: did you mean {close[0]}?")
    line = f"unrecognized arguments: {' '.join(extras)}"
    return "; ".join([line, *hints])


def parse_with_hints(parser: argparse.ArgumentParser, argv, flags_of: argparse.ArgumentParser | None = None):
    """``parser.parse_args(argv)``, but an unknown flag is refused with its answer or the closest
    known flag of ``flags_of`` (the subcommand's parser; ``parser`` itself by default)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        argv = sys.argv[1:] if argv is None else list(argv)
        (flags_of or parser).error(unknown_flag_message(flags_of or parser, extras, argv))
    return args
