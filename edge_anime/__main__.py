"""`python -m edge_anime ...` works the same as the `edge-anime` script."""
import sys

from .cli import main

sys.exit(main())
