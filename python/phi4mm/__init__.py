"""phi4mm: Phi-4-multimodal-instruct (text, images and audio in, text out) from its Hugging Face
checkpoint, on the CPU, from Python.

One :class:`Model` loads a checkpoint folder and runs a batched engine: any number of Python
threads may call it at once and their requests are decoded together (the GIL is released while
the engine computes). Requests use the OpenAI chat format, and the same parser as ``phi4mm
serve``, so every field the server takes (sampling, ``stop``, ``logit_bias``, ``logprobs``,
``response_format``, ``tools`` and ``tool_choice``) works here with the same meaning and errors::

    import phi4mm
    model = phi4mm.Model("path/to/Phi-4-multimodal-instruct", quant="q4")
    for text in model.chat([{"role": "user", "content": ["Describe this.", PIL.Image.open("a.png")]}],
                           stream=True, max_tokens=128):
        print(text, end="", flush=True)
"""

from __future__ import annotations

import codecs
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

from . import _phi4mm
from ._media import prepare_messages

__all__ = ["Model", "ChatResult", "ChatStream", "Generation", "TokenStream", "cli_path"]


def cli_path() -> str:
    """The ``phi4mm`` command-line program installed with the package (what ``python -m phi4mm`` runs)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "phi4mm")


@dataclass
class ChatResult:
    """A finished chat answer.

    ``finish_reason`` is ``"stop"``, ``"length"``, ``"tool_calls"``, or ``"cancelled"`` for a
    stream closed early; ``usage`` is the OpenAI usage object (with phi4mm's image and audio token
    details); ``tool_calls`` holds OpenAI-shaped calls (``{"id", "type", "function": {"name",
    "arguments"}}``) when the request had tools and the model called them; ``logprobs`` is the
    OpenAI ``logprobs`` object when it was asked for.
    """

    text: str
    finish_reason: str
    usage: dict
    tool_calls: list = field(default_factory=list)
    tokens: list = field(default_factory=list)
    logprobs: Optional[dict] = None
    time_to_first_token: float = 0.0


@dataclass
class Generation:
    """A finished ``generate`` answer: its token ids, their text, why it ended, and the usage."""

    tokens: list
    text: str
    finish_reason: str
    usage: dict
    logprobs: Optional[dict] = None


class _Stream:
    def __init__(self, native: Any) -> None:
        self._native = native
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._outcome: Optional[dict] = None

    def _take(self) -> Optional[tuple]:
        if self._native is None:
            return None
        piece = self._native.take()
        if piece is None:
            self._outcome = json.loads(self._native.result())
            self._native = None
            return None
        return self._decoder.decode(piece[0]), piece[1]

    def close(self) -> None:
        """Stops the answer here: cancels the request and waits until the engine has freed its KV cache."""
        native = self._native
        if native is not None:
            native.close()
            while self._take() is not None:
                pass

    def _finish(self) -> dict:
        while self._outcome is None and self._take() is not None:
            pass
        if self._outcome is None:
            raise RuntimeError("the stream was closed before it ended")
        return self._outcome

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class ChatStream(_Stream):
    """A chat answer as it is generated: iterating yields text deltas (``str``); once the answer
    has ended (or the stream was closed), ``result`` holds the :class:`ChatResult` with the finish
    reason, usage and tool calls. Leaving the loop early and closing the stream (``close()``, a
    ``with`` block, or dropping the last reference) cancels the request at once."""

    def __iter__(self) -> Iterator[str]:
        while True:
            piece = self._take()
            if piece is None:
                return
            if piece[0]:
                yield piece[0]

    @property
    def result(self) -> ChatResult:
        o = self._finish()
        return ChatResult(text=o["text"], finish_reason=o["finish_reason"], usage=o["usage"],
                          tool_calls=o["tool_calls"], tokens=o["tokens"], logprobs=o.get("logprobs"),
                          time_to_first_token=o["time_to_first_token"])

    @property
    def finish_reason(self) -> str:
        return self.result.finish_reason

    @property
    def usage(self) -> dict:
        return self.result.usage

    @property
    def tool_calls(self) -> list:
        return self.result.tool_calls


class TokenStream(_Stream):
    """A ``generate`` answer as it is generated: iterating yields token ids (``int``); ``result``
    then holds the :class:`Generation`."""

    def __iter__(self) -> Iterator[int]:
        while True:
            piece = self._take()
            if piece is None:
                return
            yield from piece[1]

    @property
    def result(self) -> Generation:
        o = self._finish()
        return Generation(tokens=o["tokens"], text=o["text"], finish_reason=o["finish_reason"], usage=o["usage"],
                          logprobs=o.get("logprobs"))


class Model:
    """A Phi-4-multimodal checkpoint folder (Hugging Face layout, Microsoft's original or the
    transformers port, or a folder written by ``phi4mm quantize``), loaded once and shared by
    every thread of the process.

    ``quant``: ``"none"`` (as stored), ``"bf16"``, ``"q8"`` or ``"q4"``; ``threads``: compute
    threads (0: one per core); ``kv_dtype``: ``"f32"``, ``"f16"`` or ``"q8"`` (default: f32 for
    weights as stored, else f16); ``max_running``: requests decoded together; ``max_queue``:
    requests waiting beyond those (default 256, so a thread pool's burst queues instead of failing; beyond it a
    RuntimeError says the queue is full); ``kv_budget_bytes``: the
    KV caches' budget (0: half the memory available).
    """

    def __init__(self, path: "str | os.PathLike", *, quant: Optional[str] = None, threads: int = 0,
                 kv_dtype: Optional[str] = None, max_running: int = 0, max_queue: int = 256,
                 kv_budget_bytes: int = 0, prefill_chunk: int = 0) -> None:
        self._core = _phi4mm.Core.load(os.fspath(path), quant or "", threads, kv_dtype or "", max_running,
                                       max_queue, kv_budget_bytes, prefill_chunk)

    def chat(self, messages: Sequence[dict], *, stream: bool = False, **request: Any) -> "ChatResult | ChatStream":
        """Answers a conversation.

        ``messages``: OpenAI-style dicts; user content may hold text, images (``PIL.Image``, numpy
        ``H×W×3`` uint8 arrays, bytes, paths, ``image_url`` parts with data: URLs) and audio
        (``(samples, sample_rate)`` with a numpy array of ``(frames,)`` or ``(frames, channels)``,
        bytes, paths, ``input_audio`` parts). ``request``: any field of OpenAI's chat request that
        ``phi4mm serve`` takes: ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``min_p``,
        ``seed``, ``stop``, ``frequency_penalty``, ``presence_penalty``, ``repetition_penalty``,
        ``logit_bias``, ``logprobs``, ``top_logprobs``, ``response_format``, ``tools``,
        ``tool_choice``, ``dynamic_hd``, ``prediction`` (OpenAI's Predicted Outputs: drafts for
        speculative decoding) and ``speculative`` (``"none"`` or ``"ngram"``); neither changes the
        answer. An unknown one raises ValueError.

        Returns a :class:`ChatResult`, or with ``stream=True`` a :class:`ChatStream` of text deltas.
        """
        body, media = self._chat_body(messages, request)
        s = ChatStream(self._core.chat(body, media))
        if stream:
            return s
        with s:
            return s.result

    def generate(self, ids: Sequence[int], *, stream: bool = False, **request: Any) -> "Generation | TokenStream":
        """Continues a prompt given as token ids (no chat template, no media); ``request`` as for
        OpenAI's completions (``max_tokens``, sampling fields, ``stop``, ``logprobs``...).
        Returns a :class:`Generation`, or with ``stream=True`` a :class:`TokenStream` of token ids."""
        body = dict(request)
        body["prompt"] = [int(i) for i in ids]
        s = TokenStream(self._core.complete(json.dumps(body)))
        if stream:
            return s
        with s:
            return s.result

    def count(self, messages: Sequence[dict], **request: Any) -> dict:
        """What the prompt costs before paying for it: ``{"total_tokens", "text_tokens",
        "image_tokens": [per image], "audio_tokens": [per clip], "lora_mode", ...}``, from the
        images' sizes and the clips' lengths, without running an encoder."""
        body, media = self._chat_body(messages, request)
        return json.loads(self._core.count(body, media))

    def tokenize(self, text: str) -> list:
        """The token ids of ``text`` (special tokens written in it are recognised; nothing is added)."""
        return self._core.tokenize(text)

    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """The text of ``ids``."""
        return self._core.detokenize([int(i) for i in ids], skip_special).decode("utf-8", errors="replace")

    @property
    def info(self) -> dict:
        """What ``phi4mm info --json`` prints for the checkpoint (folder, layout, parameters by part and
        dtype, the decoder's shape, LoRA, context, KV cache, EOS ids, kernels), and ``threads``."""
        return json.loads(self._core.info())

    def stats(self) -> dict:
        """The engine's counters now: running and waiting requests, KV bytes reserved and the budget,
        steps, rows, finished and cancelled requests, prefix and media cache use."""
        return json.loads(self._core.stats())

    @staticmethod
    def _chat_body(messages: Sequence[dict], request: dict) -> tuple:
        if "messages" in request:
            raise TypeError("messages is given twice")
        msgs, media = prepare_messages(messages)
        body = dict(request)
        body["messages"] = msgs
        return json.dumps(body), media
