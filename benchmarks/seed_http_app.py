"""The seed's web service, as the baseline `http_load.py` measures against: FastAPI with the generator loaded
once as TorchScript, the write-up's preprocessing (PIL convert, BILINEAR resize to the 512 long side,
``from_numpy().permute().float()``, [-1, 1]), ``torch.set_num_threads(2)``, JPEG out. Served as the seed
deploys it: gunicorn, one worker (``-k uvicorn.workers.UvicornWorker``: FastAPI is ASGI; the seed's
``--threads 2`` has no meaning for that worker, so FastAPI's own thread pool runs the sync endpoint).

    pip install fastapi gunicorn     # benchmark only: not a dependency of edge-anime
    EDGE_ANIME_SEED_TORCHSCRIPT=benchmarks/results/models/toon_torchscript.pt \\
        gunicorn -w 1 -k uvicorn.workers.UvicornWorker -b 127.0.0.1:8090 seed_http_app:app
"""
from __future__ import annotations

import io
import os

import numpy as np
import torch
from fastapi import FastAPI, Request, Response
from PIL import Image

MAX_SIDE_PX = 512
MULTIPLE = 8
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
    image = Image.open(io.BytesIO(body)).convert("RGB")
    scale = MAX_SIDE_PX / max(image.size)
    factor = scale if scale < 1 else 1.0
    size = tuple(max(MULTIPLE, round(s * factor / MULTIPLE) * MULTIPLE) for s in image.size)
    image = image.resize(size, Image.BILINEAR)
    tensor = torch.from_numpy(np.array(image)).permute(2, 0, 1).float()
    tensor = (tensor / 255.0 - 0.5) / 0.5
    with torch.no_grad():
        result = model(tensor.unsqueeze(0))[0]
    pixels = ((result.permute(1, 2, 0) + 1) * 127.5).clamp(0, 255).round().to(torch.uint8).numpy()
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()
