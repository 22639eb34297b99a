"""Images for vision models: load, check, downscale, and each API's block.

An image in the canonical history is one block::

    {"type": "image", "media_type": "image/png", "data": BASE64, "width": W, "height": H,
     "sha256": HEX, "name": "shot.png"}

It stands in a user message's content, or in a ``tool_result``'s content list (``[text
block, image block…]``). Tools and the CLI hand paths or bytes to ``load_image``; providers
turn the block into their own format with ``anthropic_block`` / ``chat_part`` /
``responses_part``. A model without vision gets a one-line note instead (``as_notes``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import os
import re
import stat
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from .base import ConfigError

MAX_SIDE = 1568  # long side sent to a model, in pixels (Anthropic's recommended maximum)
MAX_BYTES = 3_750_000  # encoded size cap: its base64 stays under the 5 MB APIs accept
MAX_SOURCE_BYTES = 50_000_000  # a bigger file is refused before it is read
MAX_PIXELS = 40_000_000  # pixels decoded (a JPEG's after draft); a bigger image is refused
REDUCIBLE_MODES = ("L", "LA", "RGB", "RGBA")  # what Image.reduce averages as colours
JPEG_QUALITY = 85
MIN_JPEG_QUALITY = 40
QUALITY_STEP = 15
SHRINK_STEP = 0.8  # when still over MAX_BYTES, scale the long side by this and retry
OPAQUE = 255
PHOTO_RATIO = 0.5  # a PNG goes as JPEG when that takes at most this share of its bytes
MIN_SIDE = 64  # shrinking stops here, whatever the size
EXIF_ORIENTATION = 0x0112
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp",
              "image/gif": "gif"}
SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")
FORMAT_NAMES = "PNG, JPEG, WebP or GIF"
SUPPORTED = f"use {FORMAT_NAMES}"
UNUSABLE = "not an image this runtime can send"
PIXELS_PER_TOKEN = 750  # what an image costs a vision model (Anthropic's published rule)
NO_VISION = ("{model} cannot see images, so the {n} image(s) were not sent: its profile has "
             "vision: false (the default with a base_url). Pick a vision model (-m, /model), "
             "or set vision: true in the profile if the model takes images.")
TEXT_ONLY_NOTE = "not shown: this model cannot see images"


class ImageError(ConfigError):
    """An image that cannot be used; the message names the file and what is wrong."""

    def __init__(self, label: str, message: str):
        super().__init__(label, None, message)


@dataclass
class Picture:
    """A checked, send-ready image; ``original`` is the size of the source."""

    media_type: str
    data: bytes
    width: int
    height: int
    name: str
    original: tuple[int, int] = (0, 0)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def block(self) -> dict:
        return {"type": "image", "media_type": self.media_type,
                "data": base64.b64encode(self.data).decode("ascii"), "width": self.width,
                "height": self.height, "sha256": self.sha256, "name": self.name}


def is_image_bytes(head: bytes) -> bool:
    """Whether ``head`` (the first bytes of a file) starts like PNG, JPEG, GIF or WebP."""
    return head.startswith(SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def read_source(path: str | Path) -> bytes:
    """The bytes of an image file: a regular file of at most ``MAX_SOURCE_BYTES``."""
    label = str(path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(label, "not a regular file; give the path of an image file")
        if st.st_size > MAX_SOURCE_BYTES:
            raise ImageError(label, f"{st.st_size:,} bytes is too large for an image "
                                    f"(limit {MAX_SOURCE_BYTES:,})")
        return Path(path).read_bytes()
    except OSError as e:
        raise ImageError(label, f"cannot read the image: {e.strerror or e}") from None


def open_image(raw: bytes, label: str, load: bool = True) -> tuple[Any, tuple[int, int]]:
    """The decoded Pillow image (only its header read, without ``load``) and the size of
    the source (formats and ``MAX_PIXELS`` checked from the header); ``ImageError``
    otherwise. An image far larger than
    ``MAX_SIDE`` is decoded reduced: a JPEG at 1/2 to 1/8 scale (``draft``), any other then
    shrunk by a whole factor (``reduce``), so no full-size copy outlives the decoding."""
    from PIL import Image, UnidentifiedImageError

    if len(raw) > MAX_SOURCE_BYTES:
        raise ImageError(label, f"{len(raw):,} bytes is too large for an image "
                                f"(limit {MAX_SOURCE_BYTES:,})")
    try:
        with warnings.catch_warnings():  # the pixel cap below is lower than Pillow's
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(raw))
    except Image.DecompressionBombError:
        raise _too_large(label, f"more than {2 * Image.MAX_IMAGE_PIXELS:,}", raw) from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise ImageError(label, f"{UNUSABLE}: its data is not a readable "
                                f"{FORMAT_NAMES} image") from None
    if img.format not in FORMATS:
        raise ImageError(label, f"{img.format} images are not supported; {SUPPORTED}")
    original = img.size
    if not load:
        return img, original
    if img.format == "JPEG" and max(original) >= 2 * MAX_SIDE:
        img.draft(None, _fitting(original, MAX_SIDE + 1))
    if img.width * img.height > MAX_PIXELS:
        raise _too_large(label, f"{original[0]}x{original[1]}", raw)
    try:
        img.load()
    except (OSError, ValueError, EOFError, SyntaxError) as e:
        raise ImageError(label, f"{UNUSABLE}: the data is damaged or cut short "
                                f"({_reason(e)})") from None
    return _reduced(img), original


def _too_large(label: str, size: str, raw: bytes) -> ImageError:
    return ImageError(label, f"{size} pixels ({len(raw):,} bytes) is too large to decode "
                             f"(limit {MAX_PIXELS:,} pixels); scale it down first")


def _reason(error: Exception) -> str:
    """Pillow's words for a decoding error, without object reprs."""
    return re.sub(r"<[^>]*>", "the image", str(error)).strip() or type(error).__name__


def _fitting(size: tuple[int, int], side: int) -> tuple[int, int]:
    """``size`` scaled so its long side is ``side``."""
    ratio = side / max(size)
    return max(1, math.ceil(size[0] * ratio)), max(1, math.ceil(size[1] * ratio))


def _reduced(img: Any) -> Any:
    """``img`` shrunk by the whole factor that keeps its long side at least ``MAX_SIDE``
    (palette and other modes as RGB(A) first), its format kept; ``img`` itself when
    under twice that."""
    factor = max(img.size) // MAX_SIDE
    if factor < 2:
        return img
    source = img if img.mode in REDUCIBLE_MODES else img.convert(
        "RGBA" if _has_alpha(img) else "RGB")
    small = source.reduce(factor)
    small.format = img.format  # the source's format decides how it is re-encoded
    return small


def load_image(source: str | Path | bytes, name: str | None = None) -> Picture:
    """Open PNG, JPEG, WebP or GIF (first frame) from a path or bytes; downscale to
    ``MAX_SIDE`` and under ``MAX_BYTES``, keeping the aspect ratio; EXIF rotation applied."""
    label = name or (str(source) if not isinstance(source, bytes) else "image bytes")
    raw = source if isinstance(source, bytes) else read_source(source)
    return picture(*open_image(raw, label), raw, label)


def picture(img: Any, original: tuple[int, int], raw: bytes, label: str) -> Picture:
    """The send-ready form of ``img`` (opened by ``open_image`` from ``raw``, ``original``
    pixels in size)."""
    base = Path(label).name
    rotated = img.getexif().get(EXIF_ORIENTATION, 1) not in (0, 1)
    if img.format != "GIF" and not rotated and max(original) <= MAX_SIDE \
            and len(raw) <= MAX_BYTES:
        kept = Picture(FORMATS[img.format], raw, img.width, img.height, base, original)
        return _as_jpeg(img, kept) if img.format == "PNG" else kept
    return _reencode(img, base, original)


def _reencode(img: Any, name: str, original: tuple[int, int]) -> Picture:
    """Downscale (first frame for GIF) and encode until the size cap holds."""
    from PIL import ImageOps

    fmt = img.format if img.format in ("JPEG", "WEBP") else "PNG"
    img.seek(0)  # GIF: the first frame
    frame = ImageOps.exif_transpose(img)
    frame = frame.convert("RGBA" if fmt != "JPEG" and _has_alpha(img) else "RGB")
    side = min(MAX_SIDE, max(frame.size))
    quality = JPEG_QUALITY
    while True:
        scaled = _scale(frame, side)
        pic = Picture(FORMATS[fmt], _encode(scaled, fmt, quality), scaled.width, scaled.height,
                      name, original)
        if fmt == "PNG":
            pic = _as_jpeg(scaled, pic)
            fmt = "JPEG" if pic.media_type == FORMATS["JPEG"] else fmt
        if len(pic.data) <= MAX_BYTES or side <= MIN_SIDE:
            return pic
        if fmt == "PNG":  # still too big: JPEG carries it in fewer bytes
            fmt, frame = "JPEG", frame.convert("RGB")
        elif quality > MIN_JPEG_QUALITY:
            quality -= QUALITY_STEP
        else:
            side = int(side * SHRINK_STEP)


def _as_jpeg(img: Any, png: Picture) -> Picture:
    """``png`` as a JPEG when that is far smaller (a photo or a photo-like screenshot; text
    and flat colours stay lossless PNG); an image with transparency stays PNG."""
    if _has_alpha(img) or img.mode not in ("RGB", "L", "P", "RGBA"):
        return png
    data = _encode(img if img.mode in ("RGB", "L") else img.convert("RGB"), "JPEG",
                   JPEG_QUALITY)
    if len(data) > PHOTO_RATIO * len(png.data):
        return png
    return replace(png, media_type=FORMATS["JPEG"], data=data)


def _has_alpha(img: Any) -> bool:
    """Whether some pixel of ``img`` is see-through (an opaque alpha channel does not count)."""
    if img.mode in ("RGBA", "LA"):
        return img.getchannel("A").getextrema()[0] < OPAQUE
    return img.mode == "PA" or (img.mode == "P" and "transparency" in img.info)


def _scale(img: Any, side: int) -> Any:
    if max(img.size) <= side:
        return img
    ratio = side / max(img.size)
    size = (max(1, round(img.width * ratio)), max(1, round(img.height * ratio)))
    return img.resize(size)


def _encode(img: Any, fmt: str, quality: int) -> bytes:
    buf = io.BytesIO()
    # PNG without optimize=True: that costs seconds on a photo for a few per cent of bytes
    options = {"quality": quality} if fmt in ("JPEG", "WEBP") else {}
    img.save(buf, fmt, **options)
    return buf.getvalue()


def to_block(item: Any) -> dict:
    """The canonical block for a path, bytes, a ``Picture`` or a block already made."""
    if isinstance(item, dict) and item.get("type") == "image":
        return item
    if isinstance(item, Picture):
        return item.block()
    if isinstance(item, (str, Path, bytes)):
        return load_image(item).block()
    raise ImageError(repr(item)[:60], "an image is a file path or bytes")


def for_model(items: list | None, client: Any) -> list[dict]:
    """Blocks for ``items`` (paths, bytes or blocks) that ``client``'s model is to see: a file
    that is no usable image, or a model without vision, is a ``ConfigError`` (exit 2)."""
    blocks = [to_block(item) for item in items or []]
    if blocks and not getattr(client, "vision", True):
        raise ConfigError(None, "images", NO_VISION.format(
            model=getattr(client, "name", "?"), n=len(blocks)))
    return blocks


def inspect(raw: bytes, label: str, decode: bool) -> tuple[dict, Picture | None]:
    """An image file's facts (name, format, width, height, bytes) and, with ``decode``, the
    picture to send."""
    img, original = open_image(raw, label, load=decode)  # facts need the header only
    facts = {"name": Path(label).name, "format": img.format, "width": original[0],
             "height": original[1], "bytes": len(raw)}
    return facts, picture(img, original, raw, label) if decode else None


def meta(block: dict) -> dict:
    """What an event or a listing shows of an image: everything but its data."""
    return {k: v for k, v in block.items() if k != "data"}


# ---- in the history ----------------------------------------------------------------------
def is_image(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "image"


def token_estimate(block: dict) -> int:
    """About how many input tokens an image costs a model: its pixels, not its bytes (an
    image of unknown size counts as the largest one sent)."""
    width, height = int(block.get("width") or 0), int(block.get("height") or 0)
    pixels = width * height if width and height else MAX_SIDE * MAX_SIDE
    return -(-pixels // PIXELS_PER_TOKEN)


def describe(block: dict) -> str:
    """``WxH png``: a short line for a model that cannot see images, or a trimmed one."""
    kind = EXTENSIONS.get(block.get("media_type", ""), "image")
    return f"{block.get('width', '?')}x{block.get('height', '?')} {kind}"


def removed_note(block: dict) -> dict:
    """What an old image becomes when the history is trimmed."""
    return {"type": "text", "text": f"[image: {describe(block)}, removed]"}


def text_only_note(block: dict) -> dict:
    """What an image becomes for a model without vision."""
    name = f"{block['name']}, " if block.get("name") else ""
    return {"type": "text", "text": f"[image: {name}{describe(block)}, {TEXT_ONLY_NOTE}]"}


def map_images(messages: list[dict], fn: Callable[[dict], dict]) -> list[dict]:
    """A copy of ``messages`` with every image block (in a message or inside a tool result)
    replaced by ``fn(block)``; messages without images are the same objects."""
    return [_map_message(m, fn) for m in messages]


def _map_message(msg: dict, fn: Callable[[dict], dict]) -> dict:
    if not has_images(msg):
        return msg
    return {**msg, "content": [_map_block(b, fn) for b in msg["content"]]}


def has_images(message: dict) -> bool:
    """Whether a message holds an image (in its content or inside a tool result)."""
    content = message.get("content")
    return isinstance(content, list) and any(map(_holds_image, content))


def _holds_image(block: Any) -> bool:
    if is_image(block):
        return True
    inner = block.get("content") if isinstance(block, dict) else None
    return isinstance(inner, list) and any(map(is_image, inner))


def _map_block(block: dict, fn: Callable[[dict], dict]) -> dict:
    if is_image(block):
        return fn(block)
    inner = block.get("content")
    if isinstance(inner, list) and any(map(is_image, inner)):
        return {**block, "content": [fn(b) if is_image(b) else b for b in inner]}
    return block


def as_notes(messages: list[dict]) -> list[dict]:
    """The history for a model without vision: each image a one-line note."""
    return map_images(messages, text_only_note)


def without_images(message: dict) -> dict:
    """One message for a model without vision (the same object when it holds no image)."""
    return _map_message(message, text_only_note)


def iter_images(messages: list[dict]) -> Iterator[dict]:
    """Every image block of ``messages``, in order (inside tool results too)."""
    for m in messages:
        content = m.get("content")
        for b in content if isinstance(content, list) else []:
            inner = b.get("content") if isinstance(b, dict) else None
            yield from (x for x in [b, *(inner if isinstance(inner, list) else [])]
                        if is_image(x))


def result_images(block: dict) -> list[dict]:
    """The image blocks of a tool result's content list (none for a text result)."""
    content = block.get("content")
    return [b for b in content if is_image(b)] if isinstance(content, list) else []


def content_parts(blocks: list[dict], text_part: Callable[[str], dict],
                  image_part: Callable[[dict], dict], results: bool = False) -> list[dict]:
    """A message's text and images as one API's content parts, in order; with ``results``,
    the images of its tool results too (for an API whose tool results take no images)."""
    parts: list[dict] = []
    for b in blocks:
        if b["type"] == "text" and b.get("text"):
            parts.append(text_part(b["text"]))
        elif is_image(b):
            parts.append(image_part(b))
        elif b["type"] == "tool_result" and results:
            parts.extend(image_part(x) for x in result_images(b))
    return parts


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
