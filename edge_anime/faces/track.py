"""Faces followed across a clip's frames, so a restyled face does not jitter or blink.

Found on each frame alone, a face's box moves by a few pixels from frame to frame (the detector's own noise,
even on a still face), and a face whose score hovers at the threshold is found in one frame and not the next:
its restyled crop would shake and flash on and off. A ``FaceTrack`` keeps each face as a track: a face found
in a new frame is matched to the track it overlaps most (IoU over ``MATCH_IOU``) and moves it part of the way
(an exponential moving average of the box and landmarks, ``SMOOTHING`` of the new place); a track not found
for up to ``HOLD_FRAMES`` frames keeps its last place; a new face starts a track at once.

Runs on the clip's reader thread, in frame order (``video.job``), before the frame enters the pipeline.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from .anchors import iou
from .detect import Face

MATCH_IOU = 0.3  # a face in a new frame is the same face as a track it overlaps this much
SMOOTHING = 0.4  # share of the new place a matched track moves to: ~2.5 frames to settle, noise damped ~2x
HOLD_FRAMES = 3  # frames a track keeps its place without being found (0.1 s at 30 fps) before it ends
_NUMBERS = itertools.count(1)  # tracks numbered across every clip of the process: a number is never reused


@dataclass
class _Track:
    box: np.ndarray  # x0, y0, x1, y1
    landmarks: np.ndarray  # 6 x 2
    score: float
    missed: int = 0
    number: int = field(default_factory=lambda: next(_NUMBERS))

    def face(self) -> Face:
        x0, y0, x1, y1 = (float(v) for v in self.box)
        return Face((x0, y0, x1, y1), self.landmarks.copy(), self.score, self.number)


class FaceTrack:
    """``update(faces)`` once per frame, in order: the smoothed faces to restyle in that frame, largest first."""

    def __init__(self) -> None:
        self._tracks: list[_Track] = []
        self.cap_said = False  # image.faces_max was said in the log for this clip (once a clip, not a frame)

    def update(self, faces: list[Face]) -> list[Face]:
        taken: set[int] = set()
        for face in sorted(faces, key=lambda f: -f.size):
            box = np.array(face.box, dtype=np.float32)
            free = [i for i in range(len(self._tracks)) if i not in taken]
            overlaps = iou(box, np.array([self._tracks[i].box for i in free])) if free else np.zeros(0)
            best = int(overlaps.argmax()) if overlaps.size else -1
            if best >= 0 and overlaps[best] > MATCH_IOU:
                track = self._tracks[free[best]]
                track.box += SMOOTHING * (box - track.box)
                track.landmarks += SMOOTHING * (face.landmarks - track.landmarks)
                track.score, track.missed = face.score, 0
                taken.add(free[best])
            else:
                self._tracks.append(_Track(box, face.landmarks.astype(np.float32).copy(), face.score))
                taken.add(len(self._tracks) - 1)
        for index, track in enumerate(self._tracks):
            if index not in taken:
                track.missed += 1
        self._tracks = [t for t in self._tracks if t.missed <= HOLD_FRAMES]
        return sorted((t.face() for t in self._tracks), key=lambda f: -f.size)
