"""`edge-anime serve`: the HTTP API and the upload page, on the same Stylizer as the CLI (``app``)."""
