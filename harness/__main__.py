"""`python -m harness eval FILE …`: the judge with torch alone (no textual, no anthropic needed).

`python -m harness serve` answers evaluation requests with prepared workers (harness.serve).
"""

import sys

USAGE = ("usage: python -m harness eval FILE [options]   (python -m harness eval --help)\n"
         "       python -m harness serve                  (JSON-line requests on stdin)")

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "eval":
        from harness.cli import main

        sys.exit(main(argv[1:]))
    if argv == ["serve"]:
        from harness.serve import main as serve

        sys.exit(serve())
    print(USAGE, file=sys.stderr)
    sys.exit(2)
