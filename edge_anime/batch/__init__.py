"""``edge-anime batch``: a backlog of photos and clips, exactly once, on this box or a Ray cluster (docs/scale.md).

Data flows one way: ``plan`` lists the inputs and names each output (the one naming rule), ``work`` stylizes a
list of items on one Stylizer (the same code on this box and in every Ray actor), ``local`` and ``on_ray`` run
it, the command (edge_anime/commands/batch.py) reports.
"""
