"""Checks a developer runs on the house itself (``python -m edge_anime.devtools.layers``), shipped with the
package so an installed copy can be checked the same way."""
