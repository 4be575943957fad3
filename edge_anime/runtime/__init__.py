"""The OpenVINO side of the runtime, in one room: ``engine`` (one Core, compile with the config's properties,
the static-shape cache), ``choice`` (which variant and precision run on this box: pinned, or measured once and
kept), ``timing`` (how candidates are timed), ``readback`` (what the plugin chose, kept beside the model
cache), ``two_pass`` (full resolution in tiles) and ``host`` (cores, huge pages). It never imports the watch
folder, HTTP, the service or the measurements (``python -m edge_anime.devtools.layers``)."""
