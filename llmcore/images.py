"""Images for vision models: load, check, downscale, store once, and each API's block.

An image in the canonical history is one block::

    {"type": "image", "media_type": "image/png", "data": BASE64, "width": W, "height": H,
     "sha256": HEX, "name": "shot.png"}

Tools and the CLI hand paths or bytes to ``load_image``; providers turn the block into
their own format with ``anthropic_block`` / ``chat_part`` / ``responses_part``. The
journal keeps a reference to a copy stored once under the home instead of the data.
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_SIDE = 1568  # long side sent to a model, in pixels (Anthropic's recommended maximum)
MAX_BYTES = 3_750_000  # encoded size cap: its base64 stays under the 5 MB APIs accept
JPEG_QUALITY = 85
MIN_JPEG_QUALITY = 40
SHRINK_STEP = 0.8  # when still over MAX_BYTES, scale the long side by this and retry
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp",
              "image/gif": "gif"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")


class ImageError(ValueError):
    """An image that cannot be used; the message names the file and what is wrong."""


@dataclass
class Picture:
    """A checked, send-ready image."""

    media_type: str
    data: bytes
    width: int
    height: int
    name: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def block(self) -> dict:
        return {"type": "image", "media_type": self.media_type,
                "data": base64.b64encode(self.data).decode("ascii"), "width": self.width,
                "height": self.height, "sha256": self.sha256, "name": self.name}


def is_image_path(path: str | Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def load_image(source: str | Path | bytes, name: str | None = None) -> Picture:
    """Open PNG, JPEG, WebP or GIF (first frame) from a path or bytes; downscale to
    ``MAX_SIDE`` and under ``MAX_BYTES``, keeping the aspect ratio."""
    from PIL import Image, UnidentifiedImageError

    label = name or (str(source) if not isinstance(source, bytes) else "image bytes")
    try:
        raw = source if isinstance(source, bytes) else Path(source).read_bytes()
    except OSError as e:
        raise ImageError(f"{label}: cannot read the image: {e.strerror or e}") from None
    try:
        img = Image.open(io.BytesIO(raw))
        img.load()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ImageError(f"{label}: not an image this runtime can send ({e}); "
                         "use PNG, JPEG, WebP or GIF") from None
    if img.format not in FORMATS:
        raise ImageError(f"{label}: {img.format} images are not supported; "
                         "use PNG, JPEG, WebP or GIF")
    if img.format != "GIF" and max(img.size) <= MAX_SIDE and len(raw) <= MAX_BYTES:
        return Picture(FORMATS[img.format], raw, img.width, img.height, Path(label).name)
    return _reencode(img, Path(label).name)


def _reencode(img: Any, name: str) -> Picture:
    """Downscale (first frame for GIF) and encode until the size cap holds."""
    fmt = img.format if img.format in ("JPEG", "WEBP") else "PNG"
    img.seek(0)  # GIF: the first frame
    frame = img.convert("RGBA" if fmt != "JPEG" and _has_alpha(img) else "RGB")
    side = min(MAX_SIDE, max(frame.size))
    quality = JPEG_QUALITY
    while True:
        scaled = _scale(frame, side)
        data = _encode(scaled, fmt, quality)
        if len(data) <= MAX_BYTES or side <= 64:
            return Picture(FORMATS[fmt], data, scaled.width, scaled.height, name)
        if fmt == "PNG":  # a photo saved as PNG: JPEG carries it in far fewer bytes
            fmt, frame = "JPEG", frame.convert("RGB")
        elif quality > MIN_JPEG_QUALITY:
            quality -= 15
        else:
            side = int(side * SHRINK_STEP)


def _has_alpha(img: Any) -> bool:
    return img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)


def _scale(img: Any, side: int) -> Any:
    if max(img.size) <= side:
        return img
    ratio = side / max(img.size)
    size = (max(1, round(img.width * ratio)), max(1, round(img.height * ratio)))
    return img.resize(size)


def _encode(img: Any, fmt: str, quality: int) -> bytes:
    buf = io.BytesIO()
    options = {"quality": quality} if fmt in ("JPEG", "WEBP") else {"optimize": True}
    img.save(buf, fmt, **options)
    return buf.getvalue()


def describe(block: dict) -> str:
    """One line for a model that cannot see images, and for squeezed history."""
    kind = EXTENSIONS.get(block.get("media_type", ""), "image")
    return f"{block.get('width', '?')}x{block.get('height', '?')} {kind}"


def removed_note(block: dict) -> dict:
    """What an old image becomes when the history is trimmed."""
    return {"type": "text", "text": f"[image: {describe(block)}, removed]"}


# ---- each API's format -----------------------------------------------------------------
def anthropic_block(block: dict) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": block["media_type"],
                                        "data": block["data"]}}


def data_url(block: dict) -> str:
    return f"data:{block['media_type']};base64,{block['data']}"


def chat_part(block: dict) -> dict:
    return {"type": "image_url", "image_url": {"url": data_url(block)}}


def responses_part(block: dict) -> dict:
    return {"type": "input_image", "image_url": data_url(block), "detail": "auto"}
