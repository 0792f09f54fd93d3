"""`python -m harness eval FILE …`: the judge with torch alone (no textual, no anthropic needed)."""

import sys

from harness.cli import main

USAGE = "usage: python -m harness eval FILE [options]   (python -m harness eval --help)"

if __name__ == "__main__":
    argv = sys.argv[1:]
    if not argv or argv[0] != "eval":
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(argv[1:]))
