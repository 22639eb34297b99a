"""Image memory: peak RSS of `load_image` on images of huge pixel dimensions against a
process that only decodes the same file with Pillow at full size (what loading cost before
the pixel cap and reduced decoding), and against a bare process that imports the code.

- a 13000x13000 PNG of one colour (~0.5 MB on disk): refused from its header;
- a 13000x13000 JPEG: decoded at 1/8 scale (draft), then downscaled;
- a 6300x6300 RGBA PNG, just under the pixel cap: decoded whole, then reduced.

Run: python bench/bench_images.py   (targets: refused <= 1.5x bare, JPEG <= 0.5x and
capped PNG <= 2.5x a full-size decode). Files go under the temp dir. Linux (reads /proc).
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUGE_SIDE = 13000
CAPPED_SIDE = 6300
TARGET_REFUSED_RATIO = 1.5
TARGET_JPEG_RATIO = 0.5
TARGET_CAPPED_RATIO = 2.5
# The child's own peak (VmHWM): ru_maxrss would carry the parent's peak across fork + exec.
PEAK_RSS = (
    "import re, sys\n"
    "sys.path.insert(0, {root!r})\n"
    "from PIL import Image\n"
    "from llmcore import images\n"
    "Image.MAX_IMAGE_PIXELS = None\n"
    "{call}\n"
    "status = open('/proc/self/status').read()\n"
    "print(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\n"
)
LOAD = ("try:\n    images.load_image({path!r})\nexcept images.ImageError as e:\n"
        "    print(e, file=sys.stderr)")
DECODE = "Image.open({path!r}).load()"
MAKE_JPEG = ("Image.effect_noise(({side}, {side}), 20).convert('RGB')"
             ".save({path!r}, quality=30)")
MAKE_RGBA = "Image.new('RGBA', ({side}, {side}), (200, 10, 10, 100)).save({path!r})"


def flat_png(path: Path, side: int) -> None:
    """A one-colour RGB PNG of ``side`` x ``side``, streamed so it never sits in memory."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))

    packer = zlib.compressobj(9)
    row = b"\0" + bytes([200, 10, 10]) * side
    data = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data)
                     + chunk(b"IEND", b""))


def peak_rss_kb(call: str) -> tuple[int, float]:
    code = PEAK_RSS.format(root=str(ROOT), call=call)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.split()[-1]), time.perf_counter() - started


def report(label: str, path: Path, against: str, base: int, target: float) -> bool:
    rss, took = peak_rss_kb(LOAD.format(path=str(path)))
    ratio = rss / base
    print(f"{label} ({path.stat().st_size / 1e6:.1f} MB): peak RSS {rss / 1024:.0f} MB in "
          f"{took:.1f} s against {against} {base / 1024:.0f} MB, ratio {ratio:.2f} "
          f"(target <= {target})")
    return ratio <= target


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ga-bench-") as tmp:
        png, jpeg, rgba = (Path(tmp) / n for n in ("huge.png", "huge.jpg", "capped.png"))
        flat_png(png, HUGE_SIDE)
        peak_rss_kb(MAKE_JPEG.format(side=HUGE_SIDE, path=str(jpeg)))
        peak_rss_kb(MAKE_RGBA.format(side=CAPPED_SIDE, path=str(rgba)))
        bare, _ = peak_rss_kb("pass")
        ok = report(f"{HUGE_SIDE}x{HUGE_SIDE} PNG, refused", png, "a bare process's", bare,
                    TARGET_REFUSED_RATIO)
        for label, path, target in (
                (f"{HUGE_SIDE}x{HUGE_SIDE} JPEG", jpeg, TARGET_JPEG_RATIO),
                (f"{CAPPED_SIDE}x{CAPPED_SIDE} RGBA PNG", rgba, TARGET_CAPPED_RATIO)):
            full, _ = peak_rss_kb(DECODE.format(path=str(path)))
            ok = report(label, path, "a full-size decode's", full, target) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
