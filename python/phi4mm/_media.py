"""Turning the messages a Python caller writes into the request the engine parses.

Messages are OpenAI-style dicts. A content part may be an OpenAI part (``text``, ``image_url``,
``input_audio``, ``audio_url``), phi4mm's own ``{"type": "image", "image": X}`` /
``{"type": "audio", "audio": X}``, or a bare object: a string (text), an image (a ``PIL.Image``,
a numpy ``H×W×3`` uint8 array, encoded bytes or a path) or an audio clip (``(samples,
sample_rate)``, encoded bytes or a path). Every media part is replaced in the body by a reference
to an item of a list sent beside it, so the native side renders the prompt with the server's own
parser and takes the pixels and samples directly, without encoding them again.
"""

from __future__ import annotations

import base64
import os
from typing import Any

_REF = "phi4mm-media:"


def _is_pil(obj: Any) -> bool:
    return type(obj).__module__.startswith("PIL.") and hasattr(obj, "convert") and hasattr(obj, "tobytes")


def _is_array(obj: Any) -> bool:
    return hasattr(obj, "__array_interface__") or hasattr(obj, "__array__")


def _read(path: Any) -> bytes:
    with open(os.fspath(path), "rb") as f:
        return f.read()


def _encoded(obj: Any) -> bytes | None:
    """Encoded bytes from bytes-like objects and paths; None for anything else."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, (str, os.PathLike)):
        return _read(obj)
    return None


def _from_url(url: str, label: str) -> bytes:
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        if ";base64" not in head:
            raise ValueError(f"{label}: a data: URL must be base64-encoded")
        return base64.b64decode(data, validate=False)
    if url.startswith("file://"):
        return _read(url[len("file://"):])
    raise ValueError(f"{label}: phi4mm does not fetch URLs; give the image or clip as bytes, a path, "
                     "a data: URL, a PIL image or a numpy array")


def image_item(obj: Any, label: str) -> tuple:
    """The media item of one image."""
    data = _encoded(obj)
    if data is not None:
        return ("image", data, 0, 0, "", 0, 0, label)
    if _is_pil(obj):
        rgb = obj if obj.mode == "RGB" else obj.convert("RGB")
        return ("pixels", rgb.tobytes(), rgb.size[0], rgb.size[1], "", 0, 0, label)
    if _is_array(obj):
        import numpy as np

        a = np.asarray(obj)
        if a.dtype != np.uint8:
            raise ValueError(f"{label}: an image array must be uint8 (H×W×3), got {a.dtype}")
        if a.ndim == 2:
            a = np.repeat(a[:, :, None], 3, axis=2)
        elif a.ndim == 3 and a.shape[2] == 4:
            a = a[:, :, :3]  # as PIL's convert("RGB") does: the alpha channel is dropped
        elif a.ndim != 3 or a.shape[2] != 3:
            raise ValueError(f"{label}: an image array must be H×W×3 (or H×W grey, H×W×4 RGBA), "
                             f"got shape {tuple(a.shape)}")
        a = np.ascontiguousarray(a)
        return ("pixels", a.tobytes(), int(a.shape[1]), int(a.shape[0]), "", 0, 0, label)
    raise TypeError(f"{label}: an image must be a PIL image, a numpy uint8 array, bytes or a path, "
                    f"got {type(obj).__name__}")


_SAMPLE_TYPES = {"float32", "float64", "int16", "int32"}


def audio_item(obj: Any, label: str) -> tuple:
    """The media item of one audio clip."""
    data = _encoded(obj)
    if data is not None:
        return ("audio", data, 0, 0, "", 0, 0, label)
    if isinstance(obj, tuple) and len(obj) == 2:
        import numpy as np

        samples, rate = obj
        a = np.asarray(samples)
        if a.dtype.name not in _SAMPLE_TYPES:
            raise ValueError(f"{label}: audio samples must be float32, float64, int16 or int32, got {a.dtype}")
        if a.ndim not in (1, 2):
            raise ValueError(f"{label}: audio samples must be (frames,) or (frames, channels), got shape {tuple(a.shape)}")
        channels = 1 if a.ndim == 1 else int(a.shape[1])
        a = np.ascontiguousarray(a)
        return ("samples", a.tobytes(), 0, 0, a.dtype.name, channels, int(rate), label)
    raise TypeError(f"{label}: audio must be (samples, sample_rate), bytes or a path, got {type(obj).__name__}")


def _part(part: Any, media: list, label: str) -> dict:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if isinstance(part, dict):
        kind = part.get("type")
        if kind == "text":
            return part
        if kind in ("image", "image_url"):
            detail = None
            if kind == "image":
                obj = part.get("image")
                detail = part.get("detail")
            else:
                iu = part.get("image_url")
                url = iu.get("url") if isinstance(iu, dict) else iu
                if not isinstance(url, str):
                    raise ValueError(f"{label}.image_url.url must be a string")
                detail = iu.get("detail") if isinstance(iu, dict) else None
                obj = _from_url(url, label)
            media.append(image_item(obj, label))
            ref: dict = {"url": f"{_REF}{len(media) - 1}"}
            if detail is not None:
                ref["detail"] = detail
            return {"type": "image_url", "image_url": ref}
        if kind in ("audio", "input_audio", "audio_url"):
            if kind == "audio":
                obj = part.get("audio")
            elif kind == "input_audio":
                obj = base64.b64decode((part.get("input_audio") or {}).get("data", ""), validate=False)
            else:
                au = part.get("audio_url")
                obj = _from_url(au.get("url") if isinstance(au, dict) else au, label)
            media.append(audio_item(obj, label))
            return {"type": "audio_url", "audio_url": {"url": f"{_REF}{len(media) - 1}"}}
        raise ValueError(f"{label}.type: unsupported content part type {kind!r}; supported: text, image, "
                         "image_url, audio, input_audio, audio_url")
    if isinstance(part, tuple):
        media.append(audio_item(part, label))
        return {"type": "audio_url", "audio_url": {"url": f"{_REF}{len(media) - 1}"}}
    media.append(image_item(part, label))
    return {"type": "image_url", "image_url": {"url": f"{_REF}{len(media) - 1}"}}


def prepare_messages(messages: Any) -> tuple[list, list]:
    """The messages with media parts replaced by references, and the media items in order."""
    if isinstance(messages, (str, dict)) or not hasattr(messages, "__iter__"):
        raise TypeError("messages must be a list of message dicts ({'role': ..., 'content': ...})")
    out, media = [], []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TypeError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        content = m.get("content")
        if isinstance(content, (list, tuple)):
            m = dict(m)
            m["content"] = [_part(p, media, f"messages[{i}].content[{j}]") for j, p in enumerate(content)]
        out.append(m)
    return out, media
