"""`python -m edge_anime ...` works the same as the `edge-anime` script.

The service's signals are held before anything else runs (service/signals.py): a SIGTERM during the
imports or the huge-pages re-exec is delivered to the service's handler, not to the default action.
"""
import sys

from .service.signals import hold

hold(sys.argv[1:])

from .cli import entry  # noqa: E402 - after hold(): the imports are the window it closes

entry()
