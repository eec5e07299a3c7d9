"""Write docs/options.md from the verbs' argparse parsers (run by `nox -s docs`).

The page is generated, never edited by hand: `reprokit reproduce` from
reprokit.cli._parser(), `reprokit compare`, `reprokit data`, `reprokit bisect`,
`reprokit cache` and `reprokit doctor` from the parsers their functions build. tests/test_docs.py
checks that the committed page equals what this script writes now.

    python scripts/gen_options_doc.py           # rewrite docs/options.md
    python scripts/gen_options_doc.py --check   # exit 1 if docs/options.md is stale
"""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "options.md"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


@contextmanager
def _capturing():
    """While active, parse_args hands back the parser instead of parsing: the verbs build theirs inline."""
    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original


def _parser_of(verb) -> argparse.ArgumentParser:
    with _capturing():
        try:
            verb([])
        except _Captured as got:
            return got.parser
    raise RuntimeError(f"{verb.__name__} returned without building a parser")


def parsers() -> list[argparse.ArgumentParser]:
    from reprokit import cli
    return [cli._parser(), _parser_of(cli.compare_sets), _parser_of(cli.prepare_data), _parser_of(cli.bisect_sides),
            _parser_of(cli.cache_verb), _parser_of(cli.doctor_verb)]


def _shown_default(value) -> str:
    if isinstance(value, Path):
        from reprokit.environments import cache
        if not value.is_absolute():                 # relative to the folder the command runs in
            return value.as_posix()
        if value.is_relative_to(cache.root()):      # the per-user cache, wherever this machine keeps it
            return f"~/.cache/reprokit/{value.relative_to(cache.root()).as_posix()}"
        # a default under the checkout is shown relative to it, so the page does not depend on where it lies
        try:
            return value.resolve().relative_to(ROOT).as_posix() or "."
        except ValueError:
            return value.as_posix()
    return str(value)


def _text(text: str) -> str:
    """One line of markdown: `<name>` would read as an HTML tag."""
    return " ".join(text.split()).replace("<", "&lt;").replace(">", "&gt;")


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _argument(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        return "|".join(str(c) for c in action.choices)
    return action.metavar or action.dest.upper()


def _rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            name, arg = ", ".join(action.option_strings), _argument(action)
        else:                                   # a positional argument: its name is its argument
            name, arg = action.metavar or action.dest, ""
        default = action.default
        shown = ("" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0
                 else _shown_default(default))
        help_text = (action.help or "") % {"default": shown, "prog": parser.prog}
        repeatable = isinstance(action, argparse._AppendAction) and "repeatable" not in help_text
        tail = " (repeatable)" if repeatable else ""
        rows.append(f"| `{_cell(name)}` | {f'`{_cell(arg)}`' if arg else ''} | {f'`{_cell(shown)}`' if shown else ''} "
                    f"| {_cell(help_text)}{tail} |")
    return rows


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line, written here rather than by argparse, whose layout changes between Python versions."""
    parts = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if not action.option_strings:
            parts.append(action.metavar or action.dest)
            continue
        arg = _argument(action)
        parts.append(f"[{action.option_strings[-1]}{' ' + arg if arg else ''}]")
    lines, indent = [parser.prog], " " * len(parser.prog)
    for part in parts:                          # an option and its argument stay on one line
        if len(lines[-1]) + 1 + len(part) > 100:
            lines.append(indent)
        lines[-1] += " " + part
    return "\n".join(lines)


def render() -> str:
    out = [
        "# Options",
        "",
        "<!-- Generated by scripts/gen_options_doc.py from the verbs' argparse parsers; do not edit. -->",
        "",
        "Every verb takes its options after `--` under nox (`nox -s reproduce -- --dry-run`), or directly",
        "(`python -m reprokit reproduce --dry-run`). `python -m reprokit VERB --help` prints the same.",
        "A default of a path is relative to the folder the command runs in; `~/.cache/reprokit` is the per-user",
        "cache, which `$REPROKIT_CACHE` (else `$XDG_CACHE_HOME/reprokit`) moves.",
    ]
    for parser in parsers():
        out += ["", f"## {parser.prog}", "", "```text", _usage(parser), "```", ""]
        for paragraph in (parser.description or "").strip().split("\n\n"):
            if paragraph.strip():
                out += [_text(paragraph), ""]
        out += ["| option | argument | default | meaning |", "|---|---|---|---|"]
        out += _rows(parser)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="scripts/gen_options_doc.py", description="Write docs/options.md.")
    p.add_argument("--check", action="store_true", help="only check that docs/options.md is up to date")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/gen_options_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
