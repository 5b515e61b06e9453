"""__main__.py: `python -m splitrpc` runs the command line."""
import sys

from splitrpc.cli import main

sys.exit(main())
