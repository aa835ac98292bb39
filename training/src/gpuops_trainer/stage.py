"""Stage a dataset into a directory (the dataset PVC): resumable, checksummed, idempotent.

    python -m gpuops_trainer.stage --source-kind http --source https://host/coco/ --dest /data/coco
    python -m gpuops_trainer.stage --source-kind s3 --s3-endpoint https://host --s3-bucket B \\
        --s3-prefix coco/ --dest /data/coco          # keys from AWS_ACCESS_KEY_ID/..._SECRET_...
    python -m gpuops_trainer.stage --source-kind path --source /mnt/source/coco --dest /data/coco

The files to copy: the source's manifest (``--manifest``, default SHA256SUMS, in the source's
root): ``sha256sum`` lines (``<sha256>  <path>``) or bare relative paths. An HTTP source must
have one; a bucket or a folder without one is copied whole (what ListObjectsV2 or a walk
finds) and the checksums are computed while copying. ``--include PREFIX`` keeps part of it.

- Resumable: a file is written under ``<dest>/.gpuops-stage/partial/`` and renamed into place
  once whole and checked; an interrupted copy continues the partial file where it stopped
  (an HTTP Range request; a server that ignores it sends the whole file, which is redone). The
  resume names the object the partial began (``If-Range`` with its ETag or Last-Modified over
  HTTP, ``If-Match`` with its ETag on S3), so an object changed since is fetched whole. A
  resume answered 416 (a kill between the last write and the rename left the partial whole)
  finishes the file once its checksum holds (the manifest's sha256, else an S3 MD5 ETag), and
  otherwise fetches it whole.
- Checksummed: every file is hashed while it is written and compared with the manifest's
  sha256; a mismatch fails (exit 3) naming the file. A resumed file that mismatches is redone
  once from its first byte before that. The checksums of everything staged are kept beside the
  data in ``<dest>/.gpuops-stage/SHA256SUMS`` (``cd <dest> && sha256sum -c`` reads it).
- Idempotent: a finished file is recorded (sha256, size, mtime, and a bucket's ETag) in a
  journal; a later run skips every file whose record still matches the file and the manifest
  (without a manifest, the bucket's ETag: an object changed at the same size is copied again),
  so a second run copies nothing. ``--verify`` re-hashes the skipped files instead of
  trusting the record.

The last stdout line is one JSON record: ``{"event": "stage", "copied_files": ...,
"copied_bytes": ..., "resumed_files": ..., "skipped_files": ..., "skipped_bytes": ...}``.
Exit codes: 0 done; 2 bad arguments; 3 a data error (checksum mismatch, a missing manifest
or file, the layout check); 1 anything else, such as a network error, which a retry resumes.
Standard library only (urllib; S3 requests are signed with SigV4 here).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from xml.etree import ElementTree

from .layout import DEFAULT_LAYOUT, SPLITS, missing, split_paths

PROG = "gpuops-stage"
EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_DATA = 0, 1, 2, 3
SOURCE_KINDS = ("http", "s3", "path")
STATE_DIR = ".gpuops-stage"
MANIFEST = "SHA256SUMS"
CHUNK = 1 << 20
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_SHA256_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *]?(.+)$")


class StageError(Exception):
    """A failure that names its cause; ``exit_code`` tells a retry whether it can help."""

    exit_code = EXIT_FAILURE


class DataError(StageError):
    """The source's data is wrong (a checksum, a missing file or manifest): retrying cannot help."""

    exit_code = EXIT_DATA


class RangeNotSatisfiable(StageError):
    """HTTP 416 to a resumed GET: the partial file may already hold the whole object
    (``total``, from ``Content-Range: bytes */N``, when the server says)."""

    def __init__(self, message: str, total: int | None):
        super().__init__(message)
        self.total = total


class ObjectChanged(StageError):
    """HTTP 412 to a resumed GET with ``If-Match``: the object is not the one the partial file
    began; it is fetched whole again."""


@dataclass(frozen=True)
class Entry:
    """One file to stage: its path under the dataset root, and what the source says of it."""

    path: str
    sha256: str | None = None
    size: int | None = None
    etag: str | None = None  # a bucket's ETag of the object, compared when there is no sha256


@dataclass
class Summary:
    files: int = 0
    copied_files: int = 0
    copied_bytes: int = 0
    resumed_files: int = 0
    redone_files: int = 0
    skipped_files: int = 0
    skipped_bytes: int = 0
    missing: list[str] = field(default_factory=list)

    def record(self) -> dict:
        return {"event": "stage", **self.__dict__, "changed": self.copied_files > 0}


# --------------------------------------------------------------------------------------
# manifests
# --------------------------------------------------------------------------------------


# A backslash (a Windows separator, or sha256sum's escape), NUL and other control characters:
# no dataset file needs them, and each reads differently to some tool down the line.
_UNSAFE_CHARACTERS = re.compile(r"[\x00-\x1f\x7f\\]")


def safe_path(path: str, origin: str) -> str:
    """The one normal form of a dataset path, from a manifest, a bucket listing or a folder
    walk: relative POSIX with ``.`` and empty parts dropped. A path is refused, never repaired,
    when it could resolve anywhere but inside the destination or reach the stager's own state:
    absolute, with ``..``, leading or trailing whitespace, a backslash, NUL or another control
    character. The error names ``origin`` and the path."""

    def refuse(why: str) -> DataError:
        return DataError(f"{origin}: unsafe path {path!r}: {why}")

    if path != path.strip():
        raise refuse("leading or trailing whitespace (expected a relative path as it is stored)")
    if _UNSAFE_CHARACTERS.search(path):
        raise refuse("a backslash, NUL or control character (expected a POSIX relative path)")
    if path.startswith("/"):
        raise refuse("absolute (expected a path relative to the dataset root)")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise refuse(".. (expected a path that stays under the dataset root)")
    if not parts or parts[0] == STATE_DIR:
        raise refuse(f"not a dataset file (empty, or in the stager's own {STATE_DIR}/)")
    return "/".join(parts)


def contained(root: Path, path: str, origin: str) -> Path:
    """``root / path`` once it is known to resolve inside ``root``: a symbolic link on the way
    (or the file itself) that points out of ``root`` is a data error naming it."""
    target = root / path
    real_root = os.path.realpath(root)
    resolved = os.path.realpath(target)
    if os.path.commonpath([real_root, resolved]) != real_root:
        raise DataError(
            f"{origin}: {path} resolves to {resolved}, outside {root} (a symbolic link on the "
            f"way points out of it; expected every dataset path to stay inside)"
        )
    return target


def parse_manifest(text: str, origin: str) -> list[Entry]:
    """``sha256sum`` lines (``<hex>  <path>``, or ``<hex> *<path>``) or bare paths, one a line;
    blank lines and ``#`` comments are skipped. A path listed twice is an error."""
    entries: dict[str, Entry] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        line = line.rstrip("\r")
        match = _SHA256_LINE.match(line)
        digest, path = (match.group(1).lower(), match.group(2)) if match else (None, line)
        path = safe_path(path, f"{origin}:{number}")
        if path in entries:
            raise DataError(f"{origin}:{number}: {path} is listed twice")
        entries[path] = Entry(path, digest)
    if not entries:
        raise DataError(f"{origin}: lists no files")
    return list(entries.values())


def merge_listing(listed: list[Entry], manifest: list[Entry] | None, origin: str) -> list[Entry]:
    """The files of a bucket or folder: the manifest's, with the listing's sizes, when there is
    one (a file it names that is absent is a data error); else everything listed."""
    if manifest is None:
        return listed
    found = {entry.path: entry for entry in listed}
    absent = [entry.path for entry in manifest if entry.path not in found]
    if absent:
        more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
        raise DataError(f"{origin} names file(s) the source lacks: {', '.join(absent[:3])}{more}")
    return [
        Entry(entry.path, entry.sha256, found[entry.path].size, found[entry.path].etag)
        for entry in manifest
    ]


def select(entries: list[Entry], include: list[str]) -> list[Entry]:
    """The entries under any of the ``include`` prefixes (all when none is given)."""
    if not include:
        return entries
    prefixes = [prefix.strip("/") for prefix in include]
    return [
        entry
        for entry in entries
        if any(entry.path == prefix or entry.path.startswith(prefix + "/") for prefix in prefixes)
    ]


# --------------------------------------------------------------------------------------
# sources
# --------------------------------------------------------------------------------------


class Source:
    """Where the files come from: ``entries()`` lists them; ``open(path, offset, validator)``
    returns a stream, the offset it starts at (0 when the source cannot start further on or the
    object is no longer the one ``validator`` names) and the validator of what it sends (an
    ETag or a Last-Modified date, None when the source has none)."""

    def entries(self) -> list[Entry]:
        raise NotImplementedError

    def open(
        self, path: str, offset: int, validator: str | None = None
    ) -> tuple[BinaryIO, int, str | None]:
        raise NotImplementedError


class PathSource(Source):
    """A folder (a read-only hostPath on the node)."""

    def __init__(self, root: str, manifest: str = MANIFEST):
        self.root = Path(root)
        self.manifest = manifest
        if not self.root.is_dir():
            raise DataError(f"source folder not found: {self.root}")

    def entries(self) -> list[Entry]:
        listed = []
        for directory, dirs, files in os.walk(self.root):
            dirs.sort()
            for name in sorted(files):
                full = Path(directory, name)
                relative = full.relative_to(self.root).as_posix()
                if relative == self.manifest or relative.split("/", maxsplit=1)[0] == STATE_DIR:
                    continue
                listed.append(Entry(safe_path(relative, str(self.root)), None, full.stat().st_size))
        manifest_file = self.root / self.manifest
        manifest = None
        if manifest_file.is_file():
            manifest = parse_manifest(manifest_file.read_text(encoding="utf-8"), str(manifest_file))
        return merge_listing(listed, manifest, str(manifest_file))

    def open(
        self, path: str, offset: int, validator: str | None = None
    ) -> tuple[BinaryIO, int, str | None]:
        # A link to a file outside the folder would copy the node's own files into the volume.
        source = contained(self.root, path, f"source folder {self.root}")
        stream = open(source, "rb")  # noqa: SIM115 - the caller closes it
        stream.seek(offset)
        return stream, offset, None


def _http_error(method: str, url: str, error: urllib.error.HTTPError) -> StageError:
    """One line for an HTTP error: the status and, for S3, its error code and message (never
    the request's headers, which carry the signature)."""
    detail = ""
    try:
        body = error.read(4096)
        root = ElementTree.fromstring(body)
        code, message = root.findtext("Code"), root.findtext("Message")
        detail = f": {code}" + (f" ({message})" if message else "") if code else ""
    except (ElementTree.ParseError, OSError, ValueError):
        pass
    message = f"{method} {url}: HTTP {error.code} {error.reason}{detail}"
    if error.code == 416:
        total = (error.headers.get("Content-Range") or "").rpartition("/")[2]
        return RangeNotSatisfiable(message, int(total) if total.isdigit() else None)
    if error.code == 412:
        return ObjectChanged(message)
    kind = DataError if error.code in (404, 410) else StageError
    return kind(message)


def _get(url: str, headers: dict[str, str], timeout: float, what: str) -> urllib.request.addinfourl:
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - http(s) only
    except urllib.error.HTTPError as error:
        raise _http_error("GET", what, error) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise StageError(f"GET {what}: {reason}") from None


def _ranged(response, offset: int) -> tuple[BinaryIO, int, str | None]:
    """The response, the offset a GET with ``Range: bytes=offset-`` starts at (``offset`` for
    206 Partial Content, 0 for a server that sent the whole file) and the response's validator:
    its strong ETag, else its Last-Modified date."""
    etag = response.headers.get("ETag")
    validator = (
        etag if etag and not etag.startswith("W/") else response.headers.get("Last-Modified")
    )
    return response, (offset if offset and response.status == 206 else 0), validator


class HttpSource(Source):
    """A base URL with the manifest beside the files (``<base>/<manifest>``)."""

    def __init__(self, base_url: str, manifest: str = MANIFEST, timeout: float = 60.0):
        self.base_url = base_url.rstrip("/") + "/"
        self.manifest = manifest
        self.timeout = timeout

    def url(self, path: str) -> str:
        return self.base_url + urllib.parse.quote(path)

    def entries(self) -> list[Entry]:
        url = self.url(self.manifest)
        with _get(url, {}, self.timeout, url) as response:
            text = response.read().decode("utf-8")
        return parse_manifest(text, url)

    def open(
        self, path: str, offset: int, validator: str | None = None
    ) -> tuple[BinaryIO, int, str | None]:
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        if offset and validator:
            # The rest of the file only if it is still the one the partial began; else all of it.
            headers["If-Range"] = validator
        url = self.url(path)
        return _ranged(_get(url, headers, self.timeout, url), offset)


# ---- S3 (Signature Version 4)


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).digest()


def _uri_encode(text: str, slash: bool = True) -> str:
    """SigV4's URI encoding: every byte but unreserved characters, ``/`` kept in paths."""
    return urllib.parse.quote(text, safe="-_.~/" if slash else "-_.~")


def signing_key(secret_key: str, datestamp: str, region: str, service: str = "s3") -> bytes:
    key = _hmac(("AWS4" + secret_key).encode("utf-8"), datestamp)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return key


def sign_request(
    method: str,
    url: str,
    headers: dict[str, str],
    region: str,
    access_key: str,
    secret_key: str,
    now: dt.datetime,
    session_token: str | None = None,
    payload_sha256: str = EMPTY_SHA256,
    service: str = "s3",
) -> dict[str, str]:
    """``headers`` plus Host, X-Amz-Date, X-Amz-Content-Sha256 (and X-Amz-Security-Token) and
    the SigV4 Authorization header that signs them all. ``url``'s path must already be
    URI-encoded (as :func:`_uri_encode` does); its query is re-encoded canonically."""
    parts = urllib.parse.urlsplit(url)
    amz_date = now.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    datestamp = amz_date[:8]
    signed = {name.lower(): " ".join(str(value).split()) for name, value in headers.items()}
    signed["host"] = parts.netloc
    signed["x-amz-date"] = amz_date
    signed["x-amz-content-sha256"] = payload_sha256
    if session_token:
        signed["x-amz-security-token"] = session_token
    query = sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    canonical_query = "&".join(
        f"{_uri_encode(key, False)}={_uri_encode(value, False)}" for key, value in query
    )
    names = sorted(signed)
    canonical_request = "\n".join(
        [
            method,
            parts.path or "/",
            canonical_query,
            "".join(f"{name}:{signed[name]}\n" for name in names),
            ";".join(names),
            payload_sha256,
        ]
    )
    scope = f"{datestamp}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            amz_date,
            scope,
            hashlib.sha256(canonical_request.encode("utf-8")).hexdigest(),
        ]
    )
    signature = hmac.new(
        signing_key(secret_key, datestamp, region, service),
        string_to_sign.encode("utf-8"),
        hashlib.sha256,
    ).hexdigest()
    result = {name: value for name, value in signed.items() if name != "host"}
    result["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return result


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_list_objects(body: bytes) -> tuple[list[tuple[str, int, str | None]], str | None]:
    """``([(key, size, etag)], next continuation token or None)`` of a ListObjectsV2 response."""
    root = ElementTree.fromstring(body)
    objects, token, truncated = [], None, False
    for child in root:
        name = _local_name(child.tag)
        if name == "Contents":
            values = {_local_name(item.tag): item.text or "" for item in child}
            objects.append(
                (values["Key"], int(values.get("Size") or 0), values.get("ETag") or None)
            )
        elif name == "NextContinuationToken":
            token = child.text
        elif name == "IsTruncated":
            truncated = (child.text or "").strip().lower() == "true"
    return objects, token if truncated else None


class S3Source(Source):
    """An S3-compatible bucket, path-style requests (``<endpoint>/<bucket>/<key>``), signed
    with the credentials given (never printed)."""

    page_size: int | None = None  # ListObjectsV2 max-keys; None leaves the server's (1000)

    def __init__(
        self,
        endpoint: str,
        bucket: str,
        prefix: str,
        region: str,
        access_key: str,
        secret_key: str,
        session_token: str | None = None,
        manifest: str = MANIFEST,
        timeout: float = 60.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
    ):
        self.endpoint = endpoint.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.region = region
        self.credentials = (access_key, secret_key, session_token)
        self.manifest = manifest
        self.timeout = timeout
        self.clock = clock

    def _request(self, key: str | None, query: dict[str, str], headers: dict[str, str]):
        path = "/" + _uri_encode(self.bucket) + ("/" + _uri_encode(key) if key is not None else "")
        encoded = urllib.parse.urlencode(sorted(query.items()), quote_via=urllib.parse.quote)
        url = self.endpoint + path + ("?" + encoded if encoded else "")
        access_key, secret_key, token = self.credentials
        signed = sign_request(
            "GET", url, headers, self.region, access_key, secret_key, self.clock(), token
        )
        shown = f"s3://{self.bucket}/{key}" if key is not None else f"s3://{self.bucket}"
        return _get(url, signed, self.timeout, f"{shown} ({self.endpoint})")

    def list_objects(self) -> Iterator[tuple[str, int, str | None]]:
        token = None
        while True:
            query = {"list-type": "2", "prefix": self.prefix}
            if self.page_size:
                query["max-keys"] = str(self.page_size)
            if token:
                query["continuation-token"] = token
            with self._request(None, query, {}) as response:
                objects, token = parse_list_objects(response.read())
            yield from objects
            if not token:
                return

    def entries(self) -> list[Entry]:
        origin = f"s3://{self.bucket}/{self.prefix}"
        listed, has_manifest = [], False
        for key, size, etag in self.list_objects():
            relative = key[len(self.prefix) :]
            if not relative or key.endswith("/"):
                continue  # the prefix itself, or a folder marker
            if relative == self.manifest:
                has_manifest = True
                continue
            listed.append(Entry(safe_path(relative, origin), None, size, etag))
        if not listed and not has_manifest:
            raise DataError(f"{origin}: no objects under the prefix")
        manifest = None
        if has_manifest:
            with self._request(self.prefix + self.manifest, {}, {}) as response:
                text = response.read().decode("utf-8")
            manifest = parse_manifest(text, origin + self.manifest)
        return merge_listing(listed, manifest, origin + self.manifest)

    def open(
        self, path: str, offset: int, validator: str | None = None
    ) -> tuple[BinaryIO, int, str | None]:
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        if offset and validator:
            # S3 has no If-Range: a changed object answers 412, and is fetched whole again.
            headers["If-Match"] = validator
        return _ranged(self._request(self.prefix + path, {}, headers), offset)


# --------------------------------------------------------------------------------------
# the copy
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """What the journal knows of a finished file."""

    sha256: str
    size: int
    mtime_ns: int
    etag: str | None = None  # the bucket's ETag of the object copied, when it gave one


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


class Journal:
    """``<dest>/.gpuops-stage/done.log``: one ``sha256 size mtime_ns etag path`` line per
    finished file (``-`` for no ETag), after a first line naming the format, appended and
    flushed as each file completes; the last line of a path wins. A journal of the first
    format (``sha256 size mtime_ns path``) is read and written again in this one."""

    HEADER = "# gpuops-stage journal 2: sha256 size mtime_ns etag path"

    def __init__(self, state_dir: Path):
        self.file = state_dir / "done.log"
        self.records: dict[str, Record] = {}
        lines = self.file.read_text(encoding="utf-8").splitlines() if self.file.is_file() else []
        current = bool(lines) and lines[0] == self.HEADER
        for line in lines[1:] if current else lines:
            fields = line.split(" ", 4 if current else 3)
            if len(fields) < 4 or not (fields[1].isdigit() and fields[2].isdigit()):
                continue
            etag = (fields[3] if fields[3] != "-" else None) if current else None
            if current and len(fields) < 5:
                continue
            self.records[fields[-1]] = Record(fields[0], int(fields[1]), int(fields[2]), etag)
        if not current:
            self._rewrite()

    @staticmethod
    def _line(path: str, record: Record) -> str:
        return f"{record.sha256} {record.size} {record.mtime_ns} {record.etag or '-'} {path}\n"

    def _rewrite(self) -> None:
        temporary = self.file.with_suffix(".tmp")
        temporary.write_text(
            self.HEADER
            + "\n"
            + "".join(self._line(path, record) for path, record in self.records.items()),
            encoding="utf-8",
        )
        os.replace(temporary, self.file)

    def add(self, path: str, record: Record) -> None:
        self.records[path] = record
        with open(self.file, "a", encoding="utf-8") as stream:
            stream.write(self._line(path, record))
            stream.flush()
            os.fsync(stream.fileno())


class Stager:
    def __init__(
        self,
        source: Source,
        dest: str | os.PathLike,
        verify: bool = False,
        log: Callable[[str], None] = lambda message: print(message, file=sys.stderr, flush=True),
    ):
        self.source = source
        self.dest = Path(dest)
        self.verify = verify
        self.log = log
        # The stager's own state is refused too when a link takes it out of the destination.
        self.state_dir = self._in_dest(STATE_DIR)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.state_dir)

    def _in_dest(self, path: str) -> Path:
        return contained(self.dest, path, f"destination {self.dest}")

    def run(self, entries: Iterable[Entry]) -> Summary:
        summary = Summary()
        entries = list(entries)
        summary.files = len(entries)
        last_report = time.monotonic()
        for number, entry in enumerate(entries, start=1):
            size = self._skip_size(entry)
            if size is not None:
                summary.skipped_files += 1
                summary.skipped_bytes += size
            else:
                resumed, redone, written = self._copy(entry)
                summary.copied_files += 1
                summary.copied_bytes += written
                summary.resumed_files += resumed
                summary.redone_files += redone
            if time.monotonic() - last_report >= 30 or number == len(entries):
                last_report = time.monotonic()
                self.log(
                    f"{PROG}: {number}/{len(entries)} files: {summary.copied_files} copied "
                    f"({summary.copied_bytes} bytes), {summary.skipped_files} already there"
                )
        self._write_checksums()
        return summary

    def _skip_size(self, entry: Entry) -> int | None:
        """The size of the destination file when it is already the entry's file, else None."""
        target = self._in_dest(entry.path)
        if not target.is_file():
            return None
        stat = target.stat()
        if entry.size is not None and stat.st_size != entry.size:
            return None
        record = self.journal.records.get(entry.path)
        current = (
            record is not None
            and record.size == stat.st_size
            and record.mtime_ns == stat.st_mtime_ns
            and entry.sha256 in (None, record.sha256)
            # Without a checksum, a bucket's ETag tells an object changed at the same size.
            and (entry.sha256 is not None or entry.etag is None or entry.etag == record.etag)
        )
        if current and not self.verify:
            return stat.st_size
        wanted = entry.sha256 or (record.sha256 if current else None)
        if wanted is None:
            return None  # a file from elsewhere that nothing can vouch for: copy it again
        digest = file_sha256(target)
        if digest != wanted:
            self.log(f"{PROG}: {entry.path}: sha256 differs from the source's, copying it again")
            return None
        self.journal.add(entry.path, Record(digest, stat.st_size, stat.st_mtime_ns, entry.etag))
        return stat.st_size

    def _copy(self, entry: Entry) -> tuple[int, int, int]:
        """Copy one file through its partial file; (resumed, redone, bytes written)."""
        partial = self._in_dest(f"{STATE_DIR}/partial/{entry.path}")
        # What the source said of the object the partial file began (ETag or Last-Modified).
        validator_file = self._in_dest(f"{STATE_DIR}/validators/{entry.path}")
        target = self._in_dest(entry.path)
        partial.parent.mkdir(parents=True, exist_ok=True)
        offset = partial.stat().st_size if partial.is_file() else 0
        if entry.size is not None and offset > entry.size:
            offset = 0
        validator = (
            validator_file.read_text(encoding="utf-8")
            if offset and validator_file.is_file()
            else None
        )
        try:
            resumed, written, digest = self._fetch(
                entry, partial, offset, validator, validator_file
            )
        except RangeNotSatisfiable as refused:
            resumed, written, digest = self._whole_partial(
                entry, partial, offset, refused.total, validator_file
            )
        except ObjectChanged:
            self.log(
                f"{PROG}: {entry.path}: changed at the source since its partial copy began, "
                "copying it again"
            )
            resumed, written, digest = self._fetch(entry, partial, 0, None, validator_file)
        redone = 0
        if entry.sha256 and digest != entry.sha256 and resumed:
            # The kept part may be what is wrong: fetch the whole file once more.
            self.log(f"{PROG}: {entry.path}: resumed copy fails its checksum, copying it again")
            redone = 1
            resumed, more, digest = self._fetch(entry, partial, 0, None, validator_file)
            written += more
        size = partial.stat().st_size
        if entry.sha256 and digest != entry.sha256:
            partial.unlink()
            raise DataError(
                f"{entry.path}: sha256 mismatch: the source's manifest says {entry.sha256}, "
                f"the copied file has {digest}"
            )
        if entry.size is not None and size != entry.size:
            raise StageError(f"{entry.path}: copied {size} bytes, the source lists {entry.size}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, target)
        validator_file.unlink(missing_ok=True)
        stat = target.stat()
        self.journal.add(entry.path, Record(digest, stat.st_size, stat.st_mtime_ns, entry.etag))
        return resumed, redone, written

    def _whole_partial(
        self, entry: Entry, partial: Path, offset: int, total: int | None, validator_file: Path
    ) -> tuple[int, int, str]:
        """The source answered 416 to a resume: a partial file as long as the object (a kill
        between its last write and its rename) is finished once its checksum (the manifest's
        sha256, else a bucket's MD5 ETag) vouches for it; any other is dropped and the file
        fetched whole."""
        length = total if total is not None else entry.size
        if offset and offset == length:
            digest = file_sha256(partial)
            if digest == entry.sha256 or (
                entry.sha256 is None and _md5_etag_matches(partial, entry.etag)
            ):
                self.log(
                    f"{PROG}: {entry.path}: the partial copy was whole already; its checksum holds"
                )
                return 1, 0, digest
        self.log(f"{PROG}: {entry.path}: the source refused to resume (HTTP 416); copying it again")
        return self._fetch(entry, partial, 0, None, validator_file)

    def _fetch(
        self, entry: Entry, partial: Path, offset: int, validator: str | None, validator_file: Path
    ) -> tuple[int, int, str]:
        """Write the file to ``partial`` from ``offset`` on (hashing what is kept first), and
        keep the source's validator of a copy begun from its first byte; (whether it resumed,
        bytes written, sha256 of the whole file)."""
        digest = hashlib.sha256()
        stream, start, answered = self.source.open(entry.path, offset, validator)
        with stream:
            if not start:
                validator_file.parent.mkdir(parents=True, exist_ok=True)
                if answered:
                    validator_file.write_text(answered, encoding="utf-8")
                else:
                    validator_file.unlink(missing_ok=True)
            if start and start == offset:
                with open(partial, "rb") as kept:
                    for block in iter(lambda: kept.read(CHUNK), b""):
                        digest.update(block)
            written = 0
            with open(partial, "r+b" if start else "wb") as out:
                out.seek(start)
                out.truncate()
                for block in iter(lambda: stream.read(CHUNK), b""):
                    out.write(block)
                    digest.update(block)
                    written += len(block)
                out.flush()
                os.fsync(out.fileno())
        return int(bool(start)), written, digest.hexdigest()

    def _write_checksums(self) -> None:
        """``SHA256SUMS`` of every staged file still in place, beside the journal."""
        lines = [
            f"{record.sha256}  {path}\n"
            for path, record in sorted(self.journal.records.items())
            if (self.dest / path).is_file()
        ]
        text = "".join(lines)
        target = self.state_dir / MANIFEST
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            return
        temporary = target.with_suffix(".tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, target)


def _md5_etag_matches(path: Path, etag: str | None) -> bool:
    """Whether a bucket's ETag is the file's MD5 (what S3 gives an object uploaded in one part;
    a multipart ETag, ``<hex>-<parts>``, says nothing of the bytes)."""
    value = (etag or "").strip('"').lower()
    if len(value) != 32 or any(char not in "0123456789abcdef" for char in value):
        return False
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest() == value


def check_layout(dest: Path, dataset: str, splits: list[str]) -> list[str]:
    """The layout check of the staged dataset (the trainer's default paths under ``dest``)."""
    problems = []
    for split in splits:
        problems += [
            f"{split}: {message}" for message in missing(split_paths(dataset, split, dest))
        ]
    return problems


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Stage a dataset into a directory (see the module's docstring)."
    )
    parser.add_argument("--source-kind", choices=SOURCE_KINDS, required=True)
    parser.add_argument("--source", help="http: the base URL; path: the source folder")
    parser.add_argument("--s3-endpoint", help="s3: the endpoint URL (https://host[:port])")
    parser.add_argument("--s3-bucket", help="s3: the bucket")
    parser.add_argument("--s3-prefix", default="", help="s3: the dataset root's key prefix")
    parser.add_argument("--s3-region", default="us-east-1", help="s3: the signing region")
    parser.add_argument("--dest", required=True, help="the dataset root to stage into")
    parser.add_argument(
        "--manifest", default=MANIFEST, help="the manifest's name in the source root"
    )
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PREFIX",
        help="stage only paths under PREFIX (repeatable)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="re-hash files already staged instead of trusting the journal",
    )
    parser.add_argument("--timeout-s", type=float, default=60.0, help="network timeout per request")
    parser.add_argument(
        "--dataset",
        choices=sorted(DEFAULT_LAYOUT),
        help="check afterwards that the trainer's default layout of this dataset is there",
    )
    parser.add_argument(
        "--split",
        action="append",
        choices=SPLITS,
        default=[],
        help="the splits that check looks for (repeatable; default train and val)",
    )
    return parser


def make_source(args, parser: argparse.ArgumentParser) -> Source:
    if args.source_kind == "s3":
        for option in ("s3_endpoint", "s3_bucket"):
            if not getattr(args, option):
                parser.error(f"--{option.replace('_', '-')} is required with --source-kind s3")
        access_key = os.environ.get("AWS_ACCESS_KEY_ID", "")
        secret_key = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        if not access_key or not secret_key:
            parser.error("s3 needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
        return S3Source(
            args.s3_endpoint,
            args.s3_bucket,
            args.s3_prefix,
            args.s3_region,
            access_key,
            secret_key,
            os.environ.get("AWS_SESSION_TOKEN") or None,
            manifest=args.manifest,
            timeout=args.timeout_s,
        )
    if not args.source:
        parser.error(f"--source is required with --source-kind {args.source_kind}")
    if args.source_kind == "http":
        if urllib.parse.urlsplit(args.source).scheme not in ("http", "https"):
            parser.error(f"--source: expected an http(s) URL, got {args.source!r}")
        return HttpSource(args.source, args.manifest, args.timeout_s)
    return PathSource(args.source, args.manifest)


def cli(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        source = make_source(args, parser)
        entries = select(source.entries(), args.include)
        if not entries:
            raise DataError(f"no file of the source is under --include {', '.join(args.include)}")
        summary = Stager(source, args.dest, verify=args.verify).run(entries)
        if args.dataset:
            summary.missing = check_layout(
                Path(args.dest), args.dataset, args.split or list(SPLITS)
            )
    except StageError as error:
        print(f"{PROG}: {error}", file=sys.stderr, flush=True)
        return error.exit_code
    print(json.dumps(summary.record()), flush=True)
    for message in summary.missing:
        print(f"{PROG}: dataset layout: {message}", file=sys.stderr, flush=True)
    return EXIT_DATA if summary.missing else EXIT_OK


if __name__ == "__main__":
    sys.exit(cli())
