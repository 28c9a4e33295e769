"""`python -m engine <command>`: each command lives in engine/commands/<name>.py and exposes
`register(subparsers)` (adds its parser, sets `func`) so commands stay independent."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from engine.errors import UserError
from engine.tree import TreeError

COMMANDS = ["generate", "plan", "measure", "profile", "bench", "check", "export"]


class OneLineErrors(argparse.ArgumentParser):
    """Malformed flags are one `error:` line and exit code 2, like every other bad input (argparse
    printed its whole usage block first: 18-25 lines above the one that matters)."""

    def error(self, message: str):
        if "expected one argument" in message:   # e.g. --acceptance -0.1,0.2: taken for a flag
            message += "; if its value starts with '-', write --flag=VALUE"
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        # argparse reports flags no subcommand knows from the top-level parser, whose help lists
        # only the commands: point to the help of the command that was given instead.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            self.exit(2, f"error: unrecognized arguments: {' '.join(extras)} (see {prog} --help)\n")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="python -m engine", description="Sequoia Live engine: tree speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"engine.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"engine.commands.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on malformed flags
    try:
        return int(args.func(args) or 0)
    except (UserError, TreeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
