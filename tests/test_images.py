"""Images: accepted formats, downscaling with the aspect ratio kept, the size cap, errors."""

from __future__ import annotations

import base64
import io
import random

import pytest
from PIL import Image

from llmcore import images
from llmcore.images import ImageError, load_image


def make(fmt: str, size=(40, 30), mode="RGB", color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, fmt)
    return buf.getvalue()


def decoded(block: dict) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(block["data"])))


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"),
                                           ("WEBP", "image/webp")])
def test_small_images_pass_through_unchanged(tmp_path, fmt, mime):
    raw = make(fmt)
    path = tmp_path / f"x.{fmt.lower()}"
    path.write_bytes(raw)
    pic = load_image(path)
    assert (pic.media_type, pic.data, pic.width, pic.height) == (mime, raw, 40, 30)
    assert pic.block()["name"] == path.name


def test_a_large_image_is_downscaled_keeping_its_aspect_ratio():
    pic = load_image(make("PNG", size=(3000, 2000)))
    block = pic.block()
    img = decoded(block)
    assert max(img.size) == images.MAX_SIDE
    assert img.size == (block["width"], block["height"]) == (1568, 1045)
    assert abs(img.width / img.height - 1.5) < 0.01


def test_gif_sends_its_first_frame_as_png():
    buf = io.BytesIO()
    frames = [Image.new("RGB", (20, 10), c) for c in ((255, 0, 0), (0, 0, 255))]
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    pic = load_image(buf.getvalue(), name="anim.gif")
    assert pic.media_type == "image/png"
    assert decoded(pic.block()).convert("RGB").getpixel((5, 5)) == (255, 0, 0)


def test_noise_over_the_byte_cap_is_shrunk_below_it():
    noise = Image.frombytes("RGB", (1500, 1500), random.Random(7).randbytes(1500 * 1500 * 3))
    buf = io.BytesIO()
    noise.save(buf, "PNG")
    assert len(buf.getvalue()) > images.MAX_BYTES
    pic = load_image(buf.getvalue())
    assert len(pic.data) <= images.MAX_BYTES
    assert pic.width == pic.height


def test_not_an_image_names_the_file(tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("hello")
    with pytest.raises(ImageError, match="notes.png.*PNG, JPEG, WebP or GIF"):
        load_image(bad)


def test_unsupported_format_names_the_file_and_format(tmp_path):
    bmp = tmp_path / "old.bmp"
    bmp.write_bytes(make("BMP"))
    with pytest.raises(ImageError, match="old.bmp: BMP images are not supported"):
        load_image(bmp)


def test_missing_file_is_an_image_error(tmp_path):
    with pytest.raises(ImageError, match="cannot read"):
        load_image(tmp_path / "nope.png")


def test_provider_formats():
    block = load_image(make("PNG"), name="a.png").block()
    assert images.anthropic_block(block) == {
        "type": "image", "source": {"type": "base64", "media_type": "image/png",
                                    "data": block["data"]}}
    url = f"data:image/png;base64,{block['data']}"
    assert images.chat_part(block) == {"type": "image_url", "image_url": {"url": url}}
    assert images.responses_part(block) == {"type": "input_image", "image_url": url,
                                            "detail": "auto"}
    assert images.removed_note(block)["text"] == "[image: 40x30 png, removed]"
