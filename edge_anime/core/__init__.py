"""The core: the rooms every entry point runs on, one of each (issue 44: they sat loose at the top of the
package before).

- ``stylizer``: ``Stylizer``, the one door: styles -> the variant chosen for this box -> engine -> pipeline;
  ``submit_file`` is the one verb for an input file, photo or clip (a clip on the Stylizer's clip lane).
- ``pipeline``: decode threads -> asynchronous inference -> encode threads, bounded, one ``on_done`` per job.
- ``naming``: the one naming rule for outputs: templates, suffixes, lengths, output extensions.

Clips (``edge_anime.video``) are frames through the same pipeline, in the same layer. Nothing is imported
here: ``edge_anime.core.naming`` must not pull in OpenVINO, which ``stylizer`` does; ``from edge_anime import
Stylizer`` is the public way in.
"""
