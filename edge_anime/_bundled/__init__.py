"""Package data: ``configs/`` and ``models/`` of the repository, mapped here by pyproject's package-dir."""
