"""Images: accepted formats, downscaling with the aspect ratio kept, the size cap, errors."""

from __future__ import annotations

import base64
import io
import os
import random
import struct
import warnings
import zlib

import pytest
from PIL import Image

from llmcore import images
from llmcore.images import ImageError, load_image


def make(fmt: str, size=(40, 30), mode="RGB", color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, fmt)
    return buf.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` x ``height`` but holds no pixel data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"x") + chunk(
        b"IEND", b"")


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


def test_noise_over_the_byte_cap_is_shrunk_below_it(monkeypatch):
    monkeypatch.setattr(images, "MAX_BYTES", 150_000)
    noise = Image.frombytes("RGB", (500, 500), random.Random(7).randbytes(500 * 500 * 3))
    buf = io.BytesIO()
    noise.save(buf, "PNG")
    assert len(buf.getvalue()) > images.MAX_BYTES
    pic = load_image(buf.getvalue())
    assert len(pic.data) <= images.MAX_BYTES
    assert pic.width == pic.height


def photo_png(size=(1920, 1080), mode="RGB") -> bytes:
    buf = io.BytesIO()
    Image.effect_noise(size, 60).convert(mode).save(buf, "PNG")
    return buf.getvalue()


def text_png(size=(1200, 800)) -> bytes:
    from PIL import ImageDraw

    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    for y in range(10, size[1] - 20, 18):
        draw.text((20, y), f"line {y}: the quick brown fox jumps over the lazy dog " * 3,
                  fill=(20, 20, 20))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("size", [(1600, 900), (1200, 800)])  # downscaled, and as it is
def test_a_photo_saved_as_png_goes_as_a_far_smaller_jpeg(size):
    raw = photo_png(size)
    png = io.BytesIO()
    Image.open(io.BytesIO(raw)).resize((1568, 882) if size[0] > 1568 else size).save(png, "PNG")
    pic = load_image(raw, name="photo.png")
    assert pic.media_type == "image/jpeg" and decoded(pic.block()).format == "JPEG"
    assert len(pic.data) <= images.PHOTO_RATIO * len(png.getvalue())
    assert (pic.width, pic.height) == ((1568, 882) if size[0] > 1568 else size)


def test_text_and_transparency_stay_lossless_png():
    raw = text_png()
    assert load_image(raw).data == raw  # JPEG would be no smaller: the file goes as it is
    see_through = Image.effect_noise((800, 600), 60).convert("RGBA")
    see_through.putpixel((0, 0), (0, 0, 0, 0))
    buf = io.BytesIO()
    see_through.save(buf, "PNG")
    assert load_image(buf.getvalue()).media_type == "image/png"
    assert load_image(photo_png((800, 600), "RGBA")).media_type == "image/jpeg"  # opaque


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


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    with pytest.raises(ImageError, match="pipe.png: not a regular file"):
        load_image(fifo)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_SOURCE_BYTES", 1000)
    big = tmp_path / "big.png"
    big.write_bytes(make("PNG", size=(400, 400), mode="RGB") + b"\0" * 2000)
    with pytest.raises(ImageError, match="big.png: .*too large"):
        load_image(big)


def test_an_image_over_the_pixel_cap_is_refused_before_decoding(tmp_path):
    big = tmp_path / "poster.png"
    big.write_bytes(png_header(13000, 13000))  # no pixel data: decoding it would fail
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor does Pillow's bomb warning reach the console
        with pytest.raises(ImageError) as info:
            load_image(big)
    assert str(info.value) == (
        f"{big}: 13000x13000 pixels ({big.stat().st_size:,} bytes) is too large to decode "
        f"(limit {images.MAX_PIXELS:,} pixels); scale it down first")


def test_a_decompression_bomb_is_refused_by_the_pixel_cap():
    with pytest.raises(ImageError, match=r"bomb.png: more than [\d,]+ pixels \(\d+ bytes\) "
                                         r"is too large to decode"):
        load_image(png_header(20000, 10000), name="bomb.png")


def test_a_big_jpeg_is_decoded_reduced_so_the_pixel_cap_allows_it(monkeypatch):
    monkeypatch.setattr(images, "MAX_PIXELS", 3_000_000)
    raw = make("JPEG", size=(3200, 3200), color=(10, 200, 10))
    pic = load_image(raw, name="photo.jpg")
    assert (pic.width, pic.height, pic.original) == (1568, 1568, (3200, 3200))
    assert decoded(pic.block()).convert("RGB").getpixel((700, 700))[1] > 190
    with pytest.raises(ImageError, match="3200x3200 pixels"):  # a PNG decodes whole
        load_image(make("PNG", size=(3200, 3200)), name="scan.png")


@pytest.mark.parametrize(("fmt", "mode", "color"), [
    ("PNG", "RGBA", (10, 20, 200, 255)), ("PNG", "P", 3), ("GIF", "P", 3),
    ("WEBP", "RGB", (10, 20, 200))])
def test_a_far_larger_image_is_reduced_keeping_its_colours(fmt, mode, color):
    img = Image.new(mode, (4000, 1000), color)
    if mode == "P":
        img.putpalette([0, 0, 0] * 3 + [10, 20, 200] + [0, 0, 0] * 252)
    buf = io.BytesIO()
    img.save(buf, fmt)
    pic = load_image(buf.getvalue(), name=f"wide.{fmt.lower()}")
    assert (pic.width, pic.height, pic.original) == (1568, 392, (4000, 1000))
    r, g, b = decoded(pic.block()).convert("RGB").getpixel((800, 200))
    assert abs(r - 10) + abs(g - 20) + abs(b - 200) < 12


def test_exif_rotation_is_applied():
    img = Image.new("RGB", (40, 20), (0, 255, 0))
    exif = img.getexif()
    exif[images.EXIF_ORIENTATION] = 6  # camera held upright: rotate 90° for display
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif)
    pic = load_image(buf.getvalue(), name="phone.jpg")
    assert (pic.width, pic.height) == (20, 40)
    assert decoded(pic.block()).size == (20, 40)


@pytest.mark.parametrize(("raw", "what"), [
    (b"hello, not an image", "its data is not a readable PNG, JPEG, WebP or GIF image"),
    (make("PNG", size=(300, 300))[:200], "the data is damaged or cut short"),
], ids=["text", "truncated"])
def test_image_errors_name_the_image_without_python_internals(raw, what):
    with pytest.raises(ImageError) as info:
        load_image(raw)
    message = str(info.value)
    assert message.startswith(f"image bytes: not an image this runtime can send: {what}")
    assert "<" not in message and "0x" not in message and "\n" not in message


def test_image_errors_are_config_errors_naming_the_file(tmp_path):
    from llmcore.base import ConfigError

    with pytest.raises(ConfigError) as info:
        load_image(tmp_path / "gone.webp")
    assert str(info.value).startswith(f"{tmp_path / 'gone.webp'}: cannot read the image")


def test_signatures_recognise_each_format():
    for fmt in ("PNG", "JPEG", "WEBP", "GIF"):
        assert images.is_image_bytes(make(fmt)[:16]), fmt
    assert not images.is_image_bytes(b"hello world, not an image")


def test_notes_replace_images_in_messages_and_tool_results():
    block = load_image(make("PNG"), name="a.png").block()
    history = [{"role": "user", "content": [{"type": "text", "text": "look"}, block]},
               {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                             "content": [{"type": "text", "text": "x"},
                                                         block]}]}]
    notes = images.as_notes(history)
    assert list(images.iter_images(history)) == [block, block]
    assert list(images.iter_images(notes)) == []
    assert notes[1] is history[1]
    assert notes[0]["content"][1]["text"] == (
        "[image: a.png, 40x30 png, not shown: this model cannot see images]")
    assert notes[2]["content"][0]["content"][1]["type"] == "text"
    assert history[0]["content"][1] is block  # the original is untouched


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
