"""Images of saved sessions, stored once by content hash: ``<home>/images/<sha256>.<ext>``.

The journal writes an image block as a reference (``"ref": "images/<sha256>.png"`` in place
of ``"data"``), so an image sent on every turn costs the journal a line, not megabytes.
Loading a session puts the data back, so a resumed session sends the image again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from pathlib import Path
from typing import Any

from llmcore.images import EXTENSIONS, describe, is_image
from tools.fsutil import atomic_write

log = logging.getLogger("ga.session")

IMAGES_DIR = "images"


def _walk(obj: Any, fn: Any) -> Any:
    """``obj`` with ``fn`` applied to every image block inside it; untouched parts are the
    same objects (nothing is copied where there is no image)."""
    if is_image(obj):
        return fn(obj)
    if isinstance(obj, dict):
        out = {k: _walk(v, fn) for k, v in obj.items()}
        return obj if all(out[k] is obj[k] for k in obj) else out
    if isinstance(obj, list):
        items = [_walk(v, fn) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
    return obj


class ImageStore:
    """Swaps image data for references (``externalize``) and back (``internalize``)."""

    def __init__(self, home: str | Path) -> None:
        self.home = Path(home)
        self._stored: set[str] = set()
        self._failed = False

    def externalize(self, obj: Any) -> Any:
        """``obj`` (a record, a message list) with each image's data stored and referenced."""
        return _walk(obj, self._reference)

    def internalize(self, obj: Any) -> Any:
        """``obj`` with each referenced image's data read back (a missing file: a note)."""
        return _walk(obj, self._restore)

    def _reference(self, block: dict) -> dict:
        data = block.get("data")
        if not isinstance(data, str):
            return block
        ext = EXTENSIONS.get(block.get("media_type", ""), "img")
        digest = block.get("sha256")
        if f"{digest}.{ext}" not in self._stored:  # once per image: no decoding every turn
            try:
                raw = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                return block  # not an image we made: written as it is
            digest = hashlib.sha256(raw).hexdigest()
            self._store(self.home / IMAGES_DIR / f"{digest}.{ext}", raw)
        out = {k: v for k, v in block.items() if k != "data"}
        out.update(sha256=digest, ref=f"{IMAGES_DIR}/{digest}.{ext}")
        return out

    def _store(self, path: Path, raw: bytes) -> None:
        try:
            if not path.is_file():
                atomic_write(path, raw)
            self._stored.add(path.name)
        except OSError as e:
            if not self._failed:  # reported once; the journal still names the image
                log.warning("cannot store an image of the session in %s: %s", path.parent, e)
            self._failed = True

    def _restore(self, block: dict) -> dict:
        ref = block.get("ref")
        if "data" in block or not isinstance(ref, str):
            return block
        path = self.home / ref
        try:
            raw = path.read_bytes()
        except OSError:
            raw = b""
        if not raw or (block.get("sha256") and hashlib.sha256(raw).hexdigest() != block["sha256"]):
            log.warning("session image %s is missing or changed; the model gets a note", path)
            return {"type": "text", "text": f"[image: {describe(block)}, its file {ref} is gone]"}
        out = {k: v for k, v in block.items() if k != "ref"}
        out["data"] = base64.b64encode(raw).decode("ascii")
        return out
