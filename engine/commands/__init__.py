"""CLI commands, one module each (see engine/cli.py)."""
