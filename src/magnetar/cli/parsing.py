"""How every `magnetar` command reads its command line and fails.

One parser class for the whole tree of commands, so that a mistake is reported by the
command it was made in: an unknown flag after a verb prints that verb's usage, with the flag
it was probably meant to be, even when a required flag is missing too (argparse alone names
only the missing one); no flag is ever matched by a prefix (`-tim` is not `-time`); a value
a flag cannot take is one line naming what it can. Then `run_command` turns what a run
raises into one line and an exit code, with the traceback only at `--log-level DEBUG`.

Exit codes: 0 done, 1 the broker refused or could not be reached, 2 a usage error,
130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from magnetar.spelling import did_you_mean
from magnetar.wire.topic_name import InvalidTopicNameError, TopicName, check_entity_name

USAGE = 2
REFUSED = 1
INTERRUPTED = 130
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TOPIC_FORMS = "my-topic, tenant/namespace/my-topic or persistent://tenant/namespace/my-topic"


class UsageError(Exception):
    """Something given on the command line that the command cannot use (exit code 2)."""


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""What argparse takes for a negative number rather than a flag (its own pattern)."""


class CommandParser(argparse.ArgumentParser):
    """argparse with the habits described above; subcommands get the same class.

    The parser keeps its own list of the flags it was given (`add_argument`, groups included),
    so it judges a command line through argparse's public API alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        self._flags: dict[str, None] = {}  # in the order given (the hints' order); set before argparse adds -h
        self._has_subcommands = False
        super().__init__(*args, **kwargs)
        self._arguments: list[str] = []

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self._flags.update(dict.fromkeys(action.option_strings))
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        return self._recording(super().add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, **kwargs: Any) -> Any:
        return self._recording(super().add_mutually_exclusive_group(**kwargs))

    def _recording(self, group: Any) -> Any:
        """A group whose flags this parser learns too (a group adds them to the parser itself)."""
        add = group.add_argument

        def add_argument(*args: Any, **kwargs: Any) -> argparse.Action:
            action = add(*args, **kwargs)
            self._flags.update(dict.fromkeys(action.option_strings))
            return action

        group.add_argument = add_argument
        return group

    def add_subparsers(self, **kwargs: Any) -> Any:
        self._has_subcommands = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """Strict at every level, so that a subcommand refuses what it does not know itself
        instead of leaving it to the top-level parser and its usage. A prefix of a one-dash
        flag (`-tim` for `-time`) is refused here, before argparse would take it for the flag
        (allow_abbrev=False stops that only for `--` flags before Python 3.12)."""
        self._arguments = list(sys.argv[1:] if args is None else args)
        if any(self._abbreviates(text) for text in self._own_arguments()):
            self.error("unrecognized arguments")
        parsed, extras = super().parse_known_args(self._arguments, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        if not hasattr(parsed, "command_prog"):  # the innermost command parses first
            parsed.command_prog = self.prog
        return parsed, extras

    def _abbreviates(self, text: str) -> bool:
        """Whether `text` is only the start of one-dash flags: not a flag itself, nor a one-letter
        flag with its value or further one-letter flags attached (`-p4`, `-db`)."""
        name = text.split("=", 1)[0]
        if name.startswith("--") or not name.startswith("-") or name in self._flags or name[:2] in self._flags:
            return False
        return any(flag.startswith(name) for flag in self._flags if not flag.startswith("--"))

    def error(self, message: str) -> NoReturn:
        """Unknown flags first (argparse may be reporting only what they left missing); a bad
        value alone on one line; a line of the wrong shape after this command's usage."""
        unknown = self._unknown_flags()
        if unknown and not message.startswith("unrecognized arguments"):
            message = f"unrecognized arguments: {', '.join(unknown)}; {message}"
        elif unknown:
            message = f"unrecognized arguments: {', '.join(unknown)}"
        if message.startswith("argument "):  # a value the flag cannot take: the message says what it can
            self.exit(USAGE, f"{self.prog}: {message}\n")
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\n")

    def _own_arguments(self) -> list[str]:
        """The words of the command line this command owns: with subcommands, only what precedes
        the first word that is neither a flag nor (by its place) a flag's value; the rest is the
        subcommand's."""
        owned = []
        previous = ""
        for text in self._arguments:
            is_flag = text.startswith("-") and not _NEGATIVE_NUMBER.match(text)
            if text == "--" or (self._has_subcommands and not is_flag and not previous.startswith("-")):
                break
            owned.append(text)
            previous = text
        return owned

    def _unknown_flags(self) -> list[str]:
        """The flags given that this command does not have, each with the one meant if close."""
        known = list(self._flags)
        found = []
        for text in self._own_arguments():
            name = text.split("=", 1)[0]
            if (len(name) < 2 or not name.startswith("-") or name in self._flags or _NEGATIVE_NUMBER.match(name)
                    or (not name.startswith("--") and name[:2] in self._flags)):
                continue
            hint = did_you_mean(name, known, n=1)
            found.append(f"{name} ({hint})" if hint else name)
        return found


def add_log_level(parser: argparse.ArgumentParser, default: str = "WARNING") -> None:
    parser.add_argument("--log-level", default=default, type=_log_level,
                        help=f"{', '.join(LOG_LEVELS)} (default {default}); DEBUG also shows tracebacks")


def _log_level(text: str) -> str:
    """A log level name in any case."""
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def _shaped_like_a_topic(text: str) -> bool:
    _domain, sep, rest = text.partition("://")
    return rest.count("/") == 2 if sep else text.count("/") in (0, 2)


def topic_name(text: str) -> str:
    """A topic argument, checked as the broker would check it, so a malformed one is a usage
    error naming the accepted forms rather than a refusal (or a traceback) later."""
    try:
        TopicName.parse(text)
    except InvalidTopicNameError as exc:
        if _shaped_like_a_topic(text):  # the parts are there; the message says which is wrong
            raise argparse.ArgumentTypeError(str(exc)) from None
        raise argparse.ArgumentTypeError(f"{text!r} is not a topic name: write {TOPIC_FORMS}") from None
    return text


def namespace_name(text: str) -> str:
    """A `tenant/namespace` argument."""
    tenant, sep, namespace = text.partition("/")
    if not sep or "/" in namespace:
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace: write tenant/namespace, e.g. public/default")
    try:
        check_entity_name("tenant", tenant)
        check_entity_name("namespace", namespace)
    except InvalidTopicNameError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command; what it raises becomes one line on stderr and an exit code."""
    level = getattr(args, "log_level", "WARNING")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:  # everything a user can cause ends here, as one line
        if level == "DEBUG":
            traceback.print_exc()
        code, message = describe(exc)
        print(f"{args.command_prog}: {message}", file=sys.stderr)
        return code


def describe(exc: Exception) -> tuple[int, str]:
    """The exit code and the line for an exception a command raised."""
    # Each kind of refusal is looked for only if the command loaded its module: `magnetar
    # standalone` must not import the admin client's HTTP stack to report a bad flag.
    admin_client = sys.modules.get("magnetar.admin_client.client")
    if admin_client is not None and isinstance(exc, admin_client.AdminError):
        return REFUSED, exc.reason + (f" ({exc.status})" if exc.status else "")
    client_errors = sys.modules.get("magnetar.client.errors")
    if client_errors is not None and isinstance(exc, client_errors.PulsarException):
        usage = isinstance(exc, client_errors.InvalidUrl | client_errors.InvalidConfiguration)
        named = exc.code is not None or str(exc).startswith(f"{type(exc).__name__}:")
        return (USAGE if usage else REFUSED), (str(exc) if named else f"{type(exc).__name__}: {exc}")
    if isinstance(exc, UsageError | ValueError):
        return USAGE, str(exc)
    if isinstance(exc, OSError):
        return REFUSED, str(exc)
    return REFUSED, f"{type(exc).__name__}: {exc} (--log-level DEBUG shows where)"
