"""The package's public API: every top-level name of `transformer_lib` with its signature.

`python tools/public_api.py` prints the list; `--write` writes it to book/public_api.txt, the
committed list that tests/test_public_api.py compares with the package and the API page shows.
A name removed or a signature changed is then a decision made in a diff, with a CHANGELOG line.
"""
from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "book" / "public_api.txt"
HEADER = ("# The public API of transformer_lib: its top-level names and their signatures.\n"
          "# Written by `python tools/public_api.py --write`; tests/test_public_api.py compares\n"
          "# it with the package. Changing a line is an API change: say so in CHANGELOG.md.\n")


def signature(obj) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r" at 0x[0-9a-f]+", "", text)          # a default that is a function


def describe(name: str, obj) -> str:
    if inspect.ismodule(obj):
        return f"module {name}"
    if inspect.isclass(obj):
        return f"class {name}{signature(obj)}"
    if callable(obj):
        return f"{name}{signature(obj)}"
    return f"{name}: {type(obj).__name__}"


def public_api() -> list[str]:
    """One entry per name of `transformer_lib.__all__` (which leaves out the names whose extra is
    not installed: run with every extra), sorted."""
    import transformer_lib
    return sorted(describe(n, getattr(transformer_lib, n)) for n in transformer_lib.__all__)


WIDTH = 100                      # the book's code column: a longer line would scroll sideways


def wrap(entry: str) -> str:
    """An entry in lines of at most WIDTH characters, broken after a comma of its signature;
    the lines after the first are indented by four spaces."""
    lines, line = [], ""
    for part in re.split(r"(?<=, )", entry):
        if line and len(line) + len(part.rstrip()) > WIDTH - (4 if lines else 0):
            lines.append(line.rstrip())
            line = ""
        line += part
    lines.append(line)
    return "\n    ".join(lines)


def read(text: str) -> list[str]:
    """The entries of a list written by `main`: comment lines left out, wrapped lines joined."""
    entries: list[str] = []
    for line in text.splitlines():
        if line.startswith("    ") and entries:
            entries[-1] += " " + line.strip()
        elif line and not line.startswith("#"):
            entries.append(line)
    return entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write {LIST.relative_to(ROOT)}")
    args = p.parse_args(argv)
    text = HEADER + "\n".join(wrap(e) for e in public_api()) + "\n"
    if args.write:
        LIST.write_text(text)
        print(f"wrote {LIST.relative_to(ROOT)}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
