"""Measurements of a ``Stylizer`` on real files: ``throughput`` (``edge-anime bench``: images/s, latency and
where the time goes) and ``sweep`` (``edge-anime tune``: the device settings that run best on this box)."""
