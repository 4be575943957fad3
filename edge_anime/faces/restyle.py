"""``image.faces: auto``: each face found in a picture stylized again at its style's own scale and pasted back.

The face styles were trained on aligned face crops of ``crop_px`` (512 for the published ones); in a group photo
each face is 60-200 px, a scale the network never saw, and it comes out smeared. So a pipeline with faces on
runs, per picture: ``detect`` (decode stage, on the planned picture), then after the whole picture's inference,
``apply``: for each face, an aligned crop of the picture the model saw, one inference of the face style at
``crop_px``, and the paste (``paste``), before the style's palette and tone guard, so they treat the picture as
one. Faces are pasted smallest first, so where two overlap the larger one is on top.

With ``image.portrait: auto`` (the default) every face is *drawn* instead (``portrait``): its 468 landmarks
(``landmarks``, MediaPipe's face mesh on the photo) place anime eyes, brows, nose, mouth, cel skin, a blush and
the hair's tones and strands (``draw``, after the palette and the tone guard), at every size from
``image.portrait_min_px`` up, selfies included. A face the mesh sees is then not restyled: the drawing paints it
over, and the restyle only moved the hair's and the ears' edges by a few levels. Blind (cmp71, 2026-12-05: the six
shared face photos with restyled faces and three 4-face group shots, restyled and drawn against drawn only, two
raters): the same on 16 of 18 ratings, one preferred each way, the same scores; the restyle's inference was a
third of a face photo's CPU (0.71-0.76 s -> 0.50-0.54 s) and took a 4-face group shot from 1.16x to 1.67x the
time of faces off. A face of ``image.faces_min_px`` or more that the mesh does not see (a profile) is restyled
as before and not drawn. A face of a crowd, under ``image.faces_min_px``, is kept only where the face mesh sees
a face (it is never restyled: a 24 px face would be a 13x enlargement): the detector's false faces
(clouds, a sign: 48-58 px at scores 0.61-0.64 on ../shared/photos) start at those sizes, and the mesh turned down
each of them while it saw every real one (27-57 px, scores 0.60-0.94).

Each face's inference takes one of the pipeline's inference slots, like a picture's: faces never put more
inferences on the cores than ``engine.num_requests``.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import numpy as np

from ..config import Config
from ..runtime.engine import Engine
from .detect import Face, FaceDetector
from .landmarks import FaceLandmarker, FaceMesh
from .paste import Placement, crop, mask, paste
from .portrait import Held, draw_portrait

log = logging.getLogger(__name__)
# A face whose crop would shrink it by more than this is left as the whole picture drew it: the picture already
# shows it at or above the scale its style draws faces at (``crop_px / scale``: 160 px for the bundled styles, 256
# for the published face styles), and a crop shrunk further comes back softer than the picture (seen on a 412 px
# face at 1024 px: blurred lids, ink blots at the mouth's corners). So the bundled styles restyle faces of up to
# 200 px, the published face styles up to 320 px.
MAX_CROP_SHRINK = 1.25
HELD_MAX = 64  # tracked faces whose portrait choices are kept (a clip has a few at a time; ended ones go first)


class FaceRestyler:
    """Detection and the face pass for one style's pipeline; ``engine`` is the face style's (by default the
    picture's own style). ``chosen_style``: the engine is a face style the config names (``model.face_style``), so
    the faces the portrait draws are restyled in it too: the user asked for that style's faces (its hair and ears
    stay around the drawing), where the picture's own style at the face's scale is what the drawing replaces."""

    def __init__(self, config: Config, engine: Engine, *, detector: FaceDetector | None = None,
                 chosen_style: bool = False) -> None:
        self.engine = engine
        self.chosen_style = chosen_style
        self.min_px = config.image.faces_min_px  # faces restyled from this size up ...
        self.draw_min_px = config.image.portrait_min_px  # ... and drawn from this one (image.portrait: auto)
        self.max_faces = config.image.faces_max
        spec = engine.model_info.faces
        self.crop_px, self.scale = spec.crop_px, spec.scale
        self._feather = mask(self.crop_px)
        self._own_detector = detector is None
        self.detector = detector if detector is not None else FaceDetector(config.device)
        self.largest = self.crop_px * MAX_CROP_SHRINK / self.scale  # faces up to this size are restyled
        self.landmarker: FaceLandmarker | None = None
        self._held: dict[int, Held] = {}  # a clip's tracked faces: their portrait's choices so far (portrait.Held)
        self._held_lock = threading.Lock()
        self.last_too_large = 0  # faces the last ``find`` left out as too large to restyle (portrait off)
        if config.image.portrait == "auto":
            self.landmarker = FaceLandmarker(config.device)
            log.info("faces: on (image.faces: auto, image.portrait: auto): faces of %d px and more, at most %d a "
                     "picture, drawn as anime portraits; those of %d-%d px %s restyled in %s at %d px "
                     "(docs/faces.md)", self.draw_min_px, self.max_faces, self.min_px, round(self.largest),
                     "first" if chosen_style else "that the face mesh does not see", engine.model_info.style,
                     self.crop_px)
        else:
            log.info("faces: on (image.faces: auto): faces of %d-%d px, at most %d a picture, restyled in %s at %d px "
                     "(docs/faces.md)", self.min_px, round(self.largest), self.max_faces, engine.model_info.style,
                     self.crop_px)

    def close(self) -> None:
        if self._own_detector:
            self.detector.close()
        if self.landmarker is not None:
            self.landmarker.close()

    def detect(self, rgb: np.ndarray, *, name: str = "") -> list[Face]:
        """The faces to restyle in ``rgb``, largest first, at most ``image.faces_max`` (said in the log when
        more were found)."""
        faces, found = self.find(rgb)
        if found > len(faces):
            self.say_capped(name, found)
        if self.landmarker is None and self.last_too_large:  # found, not "no face" (issue 42)
            log.info("faces: %s: %d face(s) over the %d px the face pass restyles, left to the picture's style "
                     "(image.portrait: auto draws faces of every size)", name or "picture", self.last_too_large,
                     round(self.largest))
        return faces

    def find(self, rgb: np.ndarray) -> tuple[list[Face], int]:
        """``detect`` without the log line: (the faces to restyle or draw, how many were found); a clip says the
        cap once for the clip, not once a frame. Without the portrait, faces too large to restyle are left out
        (``last_too_large`` counts them); with it, faces under ``faces_min_px`` only where the mesh sees a face
        (module doc; their landmarks are found again when they are drawn: ~3 ms a face)."""
        self.last_too_large = 0
        if self.landmarker is None:
            faces = self.detector.detect(rgb, min_px=self.min_px)
            kept = [f for f in faces if f.size <= self.largest]
            self.last_too_large, faces = len(faces) - len(kept), kept
            return faces[:self.max_faces], len(faces)
        faces = self.detector.detect(rgb, min_px=min(self.min_px, self.draw_min_px))
        small = [f for f in faces if f.size < self.min_px][:self.max_faces]
        seen = {id(f) for f, mesh in zip(small, self.landmarker.landmarks_many(rgb, small)) if mesh is not None}
        faces = [f for f in faces if f.size >= self.min_px or id(f) in seen]
        return faces[:self.max_faces], len(faces)

    def say_capped(self, name: str, found: int) -> None:
        log.info("faces: %s: %d faces found, the %d largest restyled (image.faces_max)", name or "picture", found,
                 self.max_faces)

    def meshes(self, rgb: np.ndarray, faces: Sequence[Face]) -> list[FaceMesh | None]:
        """Each face's landmarks in ``rgb`` (None where the mesh sees no face, and for every face without the
        portrait): ``apply`` restyles the faces without one and ``draw`` draws those with one, so the pipeline
        finds them once for both."""
        if self.landmarker is None or not faces:
            return [None] * len(faces)
        return self.landmarker.landmarks_many(rgb, faces)

    def apply(self, stylized: np.ndarray, rgb: np.ndarray, faces: Sequence[Face], *,
              meshes: Sequence[FaceMesh | None] | None = None, slots: threading.Semaphore | None = None
              ) -> list[tuple[int, int, int, int]]:
        """Paste each face of ``faces`` (in ``rgb``'s pixels) of the sizes restyled, stylized on its own, into
        ``stylized`` (the whole picture's result, the same size as ``rgb``, changed in place); returns the pixels
        each paste touched (x0, y0, x1, y1), smallest face first. ``meshes``: ``self.meshes(rgb, faces)``, found
        here when not given. With the portrait a face the mesh sees is drawn, not restyled: the drawing paints it
        over, and its restyle was a third of a portrait photo's CPU for no difference two blind raters saw (module
        doc); a face the mesh does not see (a profile, a mask) is not drawn and keeps its restyle, and a face style
        the config chose (``chosen_style``) restyles them all."""
        meshes = self.meshes(rgb, faces) if meshes is None else meshes
        chosen = [face for face, mesh in sorted(zip(faces, meshes), key=lambda pair: pair[0].size)
                  if self.min_px <= face.size <= self.largest and (mesh is None or self.chosen_style)]
        places = [Placement.of(face, crop_px=self.crop_px, scale=self.scale) for face in chosen]
        places = [p for p in places if p.bounds(rgb.shape[1], rgb.shape[0]) is not None]
        styled = self.engine.infer_all([crop(rgb, place) for place in places], slots=slots)
        touched = [paste(stylized, face, place, self._feather) for place, face in zip(places, styled)]
        return [box for box in touched if box is not None]

    def draw(self, stylized: np.ndarray, rgb: np.ndarray, faces: Sequence[Face], *,
             meshes: Sequence[FaceMesh | None] | None = None) -> list[tuple[int, int, int, int]]:
        """Draw each face the mesh sees as an anime portrait onto ``stylized`` (changed in place), smallest first;
        returns the pixels each drawing touched. ``meshes`` as for ``apply``. Runs after the palette and the tone
        guard: the drawn features keep their exact colours (a 256-colour palette would band the iris, and the
        guard's pull to grey, which follows the photo's near-grey pixels, left grey blotches on pale skin)."""
        if self.landmarker is None or not faces:
            return []
        meshes = self.meshes(rgb, faces) if meshes is None else meshes
        touched = [draw_portrait(stylized, rgb, mesh.points, self._held_for(face))
                   for face, mesh in sorted(zip(faces, meshes), key=lambda pair: pair[0].size) if mesh is not None]
        return [box for box in touched if box is not None]

    def _held_for(self, face: Face) -> Held | None:
        """A tracked face's choices (None for a still picture's face). Tracks are numbered once a process, so a
        clip's ended tracks are dropped once more than ``HELD_MAX`` are kept (the oldest first)."""
        if face.track is None:
            return None
        with self._held_lock:
            held = self._held.get(face.track)
            if held is None:
                held = self._held[face.track] = Held()
                for old in sorted(self._held)[:max(0, len(self._held) - HELD_MAX)]:
                    del self._held[old]
            return held
