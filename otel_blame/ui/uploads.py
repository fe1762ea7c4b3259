"""An uploaded trace becomes a Trajectory: size-limited reading, text checks and the project's loaders.

Every refusal is an :class:`UploadError` with an HTTP status and a sentence a person can act on.
"""

from __future__ import annotations

from starlette.datastructures import UploadFile
from starlette.requests import Request

from otel_blame.loaders import GZIP_MAGIC, SavedRun, TrajectoryFormatError, decode_bytes, parse_saved_run


class UploadError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise UploadError(413, f"the upload is {_mib(int(declared))}; at most {_mib(limit)} is accepted")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise UploadError(413, f"the upload is larger than {_mib(limit)}, the most accepted")
        chunks.append(chunk)
    return b"".join(chunks)


async def replayed_request(request: Request, body: bytes) -> Request:
    """A request whose body is ``body`` (already read), so Starlette can parse the form from it."""
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


# a gzipped upload may expand to this many times the upload limit, and no more (a bound on a gzip bomb)
GUNZIP_RATIO = 16


def decode_text(data: bytes, name: str, max_upload_bytes: int) -> str:
    """Trace files are UTF-8 JSON text, gzipped or not; anything else is refused with a reason."""
    if not data.strip():
        raise UploadError(400, f"{name} is empty: upload or paste a trace (JSON)")
    if not data.startswith(GZIP_MAGIC) and b"\x00" in data[:65536]:
        raise UploadError(415, f"{name} is a binary file; expected JSON text (a conversation or OTLP JSON)")
    try:
        return decode_bytes(data, name, max_gunzipped=GUNZIP_RATIO * max_upload_bytes)
    except TrajectoryFormatError as error:
        raise UploadError(415, str(error)) from None


def parse_upload(text: str, name: str) -> SavedRun:
    """The run in an upload, with the known answer it carries (Who&When ``mistake_agent``/``step``)."""
    try:
        saved = parse_saved_run(text, source=name)
    except TrajectoryFormatError as error:
        raise UploadError(422, str(error)) from None
    except RecursionError:
        raise UploadError(422, f"{name}: the JSON is nested too deeply") from None
    if not saved.trajectory.steps:
        raise UploadError(422, f"{name}: the trace has no agent steps to attribute")
    return saved


async def upload_file_text(upload: UploadFile | str | None, limit: int) -> tuple[bytes, str]:
    """The bytes and the name of a multipart ``file`` field (already size-limited by the body)."""
    if upload is None or isinstance(upload, str):
        return (upload or "").encode("utf-8"), "the pasted trace"
    data = await upload.read(limit + 1)
    if len(data) > limit:
        raise UploadError(413, f"{upload.filename or 'the file'} is larger than {_mib(limit)}")
    return data, upload.filename or "the uploaded file"
