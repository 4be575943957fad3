"""The seed's web service, as the baseline `http_load.py` measures against: FastAPI with the generator loaded
once as TorchScript, the write-up's pipeline (``_seed.paint``), ``torch.set_num_threads(2)``, JPEG out. Served as the seed
deploys it: gunicorn, one worker (``-k uvicorn.workers.UvicornWorker``: FastAPI is ASGI; the seed's
``--threads 2`` has no meaning for that worker, so FastAPI's own thread pool runs the sync endpoint).

    pip install fastapi gunicorn     # benchmark only: not a dependency of edge-anime
    EDGE_ANIME_SEED_TORCHSCRIPT=benchmarks/results/models/toon_torchscript.pt \\
        gunicorn -w 1 -k uvicorn.workers.UvicornWorker -b 127.0.0.1:8090 seed_http_app:app
"""
from __future__ import annotations

import io
import os

import torch
from _seed import paint
from fastapi import FastAPI, Request, Response
from PIL import Image

JPEG_QUALITY = 92

torch.set_num_threads(2)
torch.set_num_interop_threads(1)
model = torch.jit.load(os.environ["EDGE_ANIME_SEED_TORCHSCRIPT"]).eval()
app = FastAPI()


@app.post("/v1/stylize")
async def stylize(request: Request) -> Response:
    """The same path as ours, so one load generator drives both; the picture is painted in a worker thread."""
    from starlette.concurrency import run_in_threadpool

    body = await request.body()
    return Response(await run_in_threadpool(_paint, body), media_type="image/jpeg")


def _paint(body: bytes) -> bytes:
    out = io.BytesIO()
    paint(model, Image.open(io.BytesIO(body))).save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()
