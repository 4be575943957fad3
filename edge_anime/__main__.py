"""`python -m edge_anime ...` works the same as the `edge-anime` script."""
from .cli import entry

entry()
