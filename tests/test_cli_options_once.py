"""An option that takes one value, given twice, is a usage error naming it, in every command of
``flows`` and ``sail``: argparse kept the last value without a word (``flows recall --limit 5 --limit
50`` listed 50). The parsers are walked, so an option added later is checked too; an option meant
to repeat (``--tag``, ``--meta``, ``-v``) and a flag stay as they were.

The command lines are parsed in this process, as ``main`` parses them (``CommandLine.parse``), and
no command runs: one process per option of every command would take minutes on a small machine.
That a fresh process prints the line and exits 2 is ``tests/test_cli_conventions.py``'s check."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flows._cli import build_cli as flows_cli
from memory.cli import CommandLine, UsageError
from sail._cli import build_cli as sail_cli

CLIS: dict[str, Callable[[], CommandLine]] = {"flows": flows_cli, "sail": sail_cli}
REPEATABLE = (
    argparse._AppendAction,
    argparse._AppendConstAction,
    argparse._CountAction,
    argparse._ExtendAction,
)
HERE = str(Path(__file__).parent)  # a folder that exists (--sail-home wants one)
# a value each option takes (the first its type and choices accept): a new option is checked with one
SAMPLES = ("5", "7d", "a=b", "127.0.0.1:8765", "0x" + "11" * 20, "https://rpc.example", HERE)


def _commands(prog: str) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """``([], the command line's parser)``, then ``([COMMAND], its parser)`` for each command."""
    parser = CLIS[prog]().parser
    yield [], parser
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        yield [name], sub


def _takes_one_value(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.nargs != 0 and not isinstance(action, REPEATABLE)


def _sample(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    for text in SAMPLES:
        try:
            if action.type is not None and callable(action.type):
                action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        return text
    raise AssertionError(f"no sample value fits {action.option_strings}: add one to SAMPLES")


def _refusal(prog: str, argv: list[str]) -> str | None:
    """The usage error ``prog``'s command line gives ``argv`` (None: it parses), no command run."""
    try:
        CLIS[prog]().parse(argv)
    except UsageError as exc:
        return exc.message
    return None


@pytest.mark.parametrize("prog", ["flows", "sail"])
def test_every_option_that_takes_one_value_given_twice_is_a_usage_error_naming_it(prog: str) -> None:
    checked = 0
    for command, parser in _commands(prog):
        for action in filter(_takes_one_value, parser._actions):
            flag, value = action.option_strings[-1], _sample(action)
            assert _takes_it(_refusal(prog, [*command, flag, value])), (command, flag)
            refused = _refusal(prog, [*command, flag, value, flag, value])
            named = "/".join(action.option_strings)
            assert refused is not None, (command, flag)
            assert refused.startswith(f"argument {named}: given more than once; "), (command, refused)
            checked += 1
    assert checked > (30 if prog == "flows" else 15), checked  # the walk found the commands' options


def _takes_it(refused: str | None) -> bool:
    """Whether a parse refused nothing but what the command line still lacks (its required
    arguments, or a command): the options given were taken."""
    lacks = ("the following arguments are required", "a command is", "one of the arguments")
    return refused is None or refused.startswith(lacks)


@pytest.mark.parametrize("prog", ["flows", "sail"])
def test_a_global_option_given_before_and_after_the_command_is_a_usage_error(prog: str) -> None:
    option = "--db" if prog == "flows" else "--home"
    command = "recall" if prog == "flows" else "ledger"
    refused = _refusal(prog, [option, "/a", command, option, "/b"])
    assert refused == (
        f"argument {option}: given more than once; it takes one value: give it once; "
        f"see `{prog} {command} --help`"
    )


def test_two_spellings_of_one_option_are_the_same_option_given_twice() -> None:
    assert _refusal("flows", ["demo", "--keep", "/tmp/a", "--home", "/tmp/b"]) == (
        "argument --keep/--home: given more than once (as --keep, then as --home); it takes one value: "
        "give it once; see `flows demo --help`"
    )


@pytest.mark.parametrize("prog", ["flows", "sail"])
def test_options_meant_to_repeat_and_flags_given_twice_are_not_refused_for_it(prog: str) -> None:
    checked = 0
    for command, parser in _commands(prog):
        for action in parser._actions:
            if not action.option_strings or _takes_one_value(action):
                continue
            if {"--help", "--version"} & set(action.option_strings):
                continue
            flag = action.option_strings[-1]
            twice = [flag, flag] if action.nargs == 0 else [flag, _sample(action), flag, _sample(action)]
            # the parse goes past both: a command may still want its arguments, never its flag once
            assert _takes_it(_refusal(prog, [*command, *twice])), (command, twice)
            checked += 1
    assert checked > 10, checked


def test_an_option_given_once_and_one_meant_to_repeat_keep_their_values() -> None:
    args = flows_cli().parse(["recall", "--limit", "1", "--tag", "a", "--tag", "b", "-v", "-v"])
    assert (args.limit, args.tag, args.verbose) == (1, ["a", "b"], 2)
