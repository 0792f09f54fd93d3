"""`python -m kstui` is the `kstui` console script."""

from kstui.cli import main

raise SystemExit(main())
