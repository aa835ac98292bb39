"""The stager (gpuops_trainer.stage): real files, a real HTTP server on loopback that honours
or ignores Range, SigV4 recomputed from its definition and held to AWS's published example
values, and S3's ListObjectsV2 and ranged GETs against a signature-checking test double."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.parse
from html import escape
from pathlib import Path

import pytest
from conftest import PYTHON, write_coco

from gpuops_trainer import stage
from gpuops_trainer.stage import (
    DataError,
    Entry,
    HttpSource,
    PathSource,
    S3Source,
    Stager,
    parse_list_objects,
    parse_manifest,
    select,
    sign_request,
)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(root: Path, name: str = "SHA256SUMS") -> dict[str, str]:
    """sha256sum-style manifest of every file under root, as a source would publish it."""
    sums = {
        path.relative_to(root).as_posix(): sha256_of(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != name
    }
    (root / name).write_text("".join(f"{digest}  {path}\n" for path, digest in sums.items()))
    return sums


@pytest.fixture
def coco_source(tmp_path) -> Path:
    root = tmp_path / "source"
    write_coco(root, "val", 4)
    write_coco(root, "train", 6, seed=3)
    (root / "big.bin").write_bytes(os.urandom(3 * stage.CHUNK + 123))
    return root


def etag_of(data: bytes) -> str:
    return f'"{hashlib.sha256(data).hexdigest()[:32]}"'


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder as a Range-capable server does: ``Range: bytes=N-`` (unless the server
    says not to), 416 for a range that starts at the end, an ETag, and ``If-Range`` (the whole
    file when the ETag is not the one given). Records every request."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Range")))
        self.server.if_range.append(self.headers.get("If-Range"))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        wanted = self.headers.get("Range")
        still = self.headers.get("If-Range") in (None, etag_of(data))
        if wanted and self.server.honour_range and still:
            start = int(wanted.removeprefix("bytes=").rstrip("-"))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            data = data[start:]
        else:
            self.send_response(200)
        self.send_header("ETag", etag_of(path.read_bytes()))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def http_server(coco_source):
    def handler(*args, **kwargs):
        return RangeHandler(*args, directory=str(coco_source), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests, server.if_range, server.honour_range = [], [], True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url_of(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/"


def run(source, dest, **kwargs):
    messages = []
    summary = Stager(source, dest, log=messages.append, **kwargs).run(source.entries())
    return summary, messages


# ---- manifests


def test_manifest_reads_sha256sum_lines_and_bare_paths():
    digest = "ab" * 32
    text = f"# comment\n{digest}  annotations/a.json\n{digest.upper()} *train2017/1.jpg\n"
    entries = parse_manifest(text + "\nval2017/2.jpg\n", "m")
    assert entries == [
        Entry("annotations/a.json", digest),
        Entry("train2017/1.jpg", digest),
        Entry("val2017/2.jpg", None),
    ]


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../up.jpg", "a/../../b", ".gpuops-stage/done.log"]
)
def test_manifest_refuses_paths_that_leave_the_dataset(path):
    last = path.split("/")[-1].replace(".", r"\.")
    with pytest.raises(DataError, match=rf"m:2: .*{last}"):
        parse_manifest(f"ok.jpg\n{path}\n", "m")


HOSTILE_PATHS = {
    "a hash, three spaces and an absolute path": "{digest}   /etc/passwd",
    "a leading space": " train2017/1.jpg",
    "a trailing space": "train2017/1.jpg ",
    "a backslash": "train2017\\..\\..\\up.jpg",
    "a NUL": "train2017/1.jpg\0/etc/passwd",
    "a tab": "train2017/\t1.jpg",
    "absolute": "/etc/passwd",
    "dot-dot": "a/../../b",
    "the stager's state": "./.gpuops-stage/done.log",
}


@pytest.mark.parametrize("line", HOSTILE_PATHS.values(), ids=HOSTILE_PATHS.keys())
def test_manifest_refuses_every_path_that_is_not_plainly_inside_the_dataset(line):
    with pytest.raises(DataError, match=r"^m:2: unsafe path .*\(expected|not a dataset file"):
        parse_manifest("ok.jpg\n" + line.format(digest="ab" * 32) + "\n", "m")


def test_safe_path_normalises_dot_and_empty_parts_once():
    assert stage.safe_path("./train2017//1.jpg", "m") == "train2017/1.jpg"
    assert stage.safe_path("b c.jpg", "m") == "b c.jpg"


def escape_line(tmp_path: Path, digest: str) -> tuple[str, Path]:
    """The reproduction of the path-traversal report: a sha256sum line whose hash is followed
    by three spaces and an absolute path; before the fix the file landed at that path."""
    outside = tmp_path / "outside" / "escaped.txt"
    return f"{digest}   {outside}\n", outside


def hostile_source(root: Path, tmp_path: Path) -> Path:
    """A source whose manifest also names a file at an absolute path outside the destination,
    served by the source under that same path (so nothing but the refusal stops the copy)."""
    payload = b"written outside the dataset\n"
    line, outside = escape_line(tmp_path, hashlib.sha256(payload).hexdigest())
    served = root / str(outside).lstrip("/")
    served.parent.mkdir(parents=True)
    served.write_bytes(payload)
    write_manifest(root)
    with open(root / "SHA256SUMS", "a") as manifest:
        manifest.write(line)
    return outside


def stage_cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.stage", *argv],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip


def write_manifest_lines(root: Path) -> list[str]:
    return (root / "SHA256SUMS").read_text().splitlines()


@pytest.mark.parametrize("kind", ["http", "s3", "path"])
def test_a_hostile_manifest_from_any_source_writes_nothing_outside_the_destination(
    kind, coco_source, tmp_path, http_server, s3_server
):
    outside = hostile_source(coco_source, tmp_path)
    dest = tmp_path / "dest"
    s3_server.buckets["datasets"] = coco_source
    argv, env = {
        "http": (["--source", url_of(http_server)], None),
        "path": (["--source", str(coco_source)], None),
        "s3": (
            ["--s3-endpoint", endpoint_of(s3_server), "--s3-bucket", "datasets"],
            dict(os.environ, AWS_ACCESS_KEY_ID="AKIDTEST", AWS_SECRET_ACCESS_KEY=s3_server.secret),
        ),
    }[kind]
    result = stage_cli("--source-kind", kind, *argv, "--dest", str(dest), env=env)
    assert result.returncode == 3, result
    assert f"SHA256SUMS:{len(write_manifest_lines(coco_source))}: unsafe path ' {outside}'" in (
        result.stderr
    )
    assert "leading or trailing whitespace" in result.stderr
    assert not outside.exists()
    assert not dest.exists() or not any(dest.rglob("*.jpg"))  # refused before any copy


def test_an_s3_listing_with_a_hostile_key_is_refused_before_any_copy(tmp_path, s3_server):
    # No manifest: the listing itself names the files. A key "coco/ /<absolute path>" (a
    # folder named by one space) is the listing's form of the same escape.
    bucket = tmp_path / "bucket"
    outside = tmp_path / "outside" / "escaped.txt"
    hostile = bucket / "coco" / " " / str(outside).lstrip("/")
    hostile.parent.mkdir(parents=True)
    hostile.write_text("written outside the dataset\n")
    (bucket / "coco" / "ok.txt").write_text("fine\n")
    s3_server.buckets["datasets"] = bucket
    source = S3Source(
        endpoint_of(s3_server), "datasets", "coco", "us-east-1", "AKIDTEST", s3_server.secret
    )
    with pytest.raises(DataError, match=rf"^s3://datasets/coco/: unsafe path ' {outside}'"):
        source.entries()
    assert not outside.exists()


def test_a_folder_entry_with_a_hostile_name_is_refused(tmp_path):
    source = tmp_path / "source"
    (source / "train2017").mkdir(parents=True)
    (source / "train2017" / "1.jpg ").write_bytes(b"x")
    with pytest.raises(DataError, match=r"unsafe path 'train2017/1.jpg ': leading or trailing"):
        PathSource(str(source)).entries()


def test_a_link_in_the_destination_that_points_out_of_it_is_refused(coco_source, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "train2017").symlink_to(outside)
    with pytest.raises(DataError, match=rf"train2017/\S+ resolves to {outside}/\S+, outside"):
        run(PathSource(str(coco_source)), dest)
    assert not any(outside.iterdir())


def test_the_stagers_own_state_behind_a_link_out_of_the_destination_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / ".gpuops-stage").symlink_to(outside)
    with pytest.raises(DataError, match=rf"\.gpuops-stage resolves to {outside}, outside"):
        Stager(PathSource(str(tmp_path)), dest)
    assert not any(outside.iterdir())


def test_a_link_in_a_source_folder_to_a_file_outside_it_is_not_copied(tmp_path):
    secret = tmp_path / "node-secret"
    secret.write_text("the node's own file\n")
    source = tmp_path / "source"
    source.mkdir()
    (source / "ok.txt").write_text("fine\n")
    (source / "link.txt").symlink_to(secret)
    dest = tmp_path / "dest"
    with pytest.raises(DataError, match=rf"link\.txt resolves to {secret}, outside {source}"):
        run(PathSource(str(source)), dest)
    assert not (dest / "link.txt").exists()


def test_manifest_refuses_a_path_listed_twice():
    with pytest.raises(DataError, match="m:2: a.jpg is listed twice"):
        parse_manifest("a.jpg\n./a.jpg\n", "m")


def test_include_keeps_whole_folders_only():
    entries = [Entry("val2017/1.jpg"), Entry("val2017x/2.jpg"), Entry("annotations/a.json")]
    assert select(entries, ["val2017/", "annotations"]) == [entries[0], entries[2]]


# ---- copying: contents, checksums, idempotence


def test_a_folder_is_staged_with_its_checksums_and_a_second_run_copies_nothing(
    coco_source, tmp_path
):
    dest = tmp_path / "dest"
    sums = write_manifest(coco_source)
    first, _messages = run(PathSource(str(coco_source)), dest)
    assert first.copied_files == len(sums) and first.skipped_files == 0
    assert first.copied_bytes == sum((coco_source / path).stat().st_size for path in sums)
    for path, digest in sums.items():
        assert sha256_of(dest / path) == digest
    # The checksums beside the data list every file, in sha256sum's format.
    stored = parse_manifest((dest / ".gpuops-stage" / "SHA256SUMS").read_text(), "stored")
    assert {entry.path: entry.sha256 for entry in stored} == sums
    assert not list((dest / ".gpuops-stage" / "partial").rglob("*.*"))

    second, _messages = run(PathSource(str(coco_source)), dest)
    assert second.record()["changed"] is False
    assert (second.copied_files, second.copied_bytes) == (0, 0)
    assert second.skipped_files == len(sums) and second.skipped_bytes == first.copied_bytes


def test_without_a_manifest_the_checksums_are_computed_and_a_changed_file_is_copied_again(
    coco_source, tmp_path
):
    dest = tmp_path / "dest"
    first, _messages = run(PathSource(str(coco_source)), dest)
    assert first.copied_files > 0
    # A finished file damaged in place (its mtime changes): the next run re-hashes it against
    # the journal, finds it differs and copies it again; the rest are skipped.
    damaged = dest / "annotations" / "instances_val2017.json"
    damaged.write_text("{}")
    second, messages = run(PathSource(str(coco_source)), dest)
    assert second.copied_files == 1 and second.skipped_files == first.copied_files - 1
    assert (
        damaged.read_bytes()
        == (coco_source / "annotations" / "instances_val2017.json").read_bytes()
    )


def test_verify_rehashes_files_whose_record_still_matches(coco_source, tmp_path):
    dest = tmp_path / "dest"
    write_manifest(coco_source)
    run(PathSource(str(coco_source)), dest)
    target = dest / "big.bin"
    stat = target.stat()
    data = bytearray(target.read_bytes())
    data[10] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    trusting, _messages = run(PathSource(str(coco_source)), dest)
    assert trusting.copied_files == 0
    verifying, messages = run(PathSource(str(coco_source)), dest, verify=True)
    assert verifying.copied_files == 1
    assert any("big.bin: sha256 differs" in message for message in messages)
    assert sha256_of(target) == sha256_of(coco_source / "big.bin")


def test_a_checksum_mismatch_fails_naming_the_file_and_leaves_nothing_in_place(
    coco_source, tmp_path
):
    write_manifest(coco_source)
    (coco_source / "big.bin").write_bytes(b"not what the manifest says")
    dest = tmp_path / "dest"
    with pytest.raises(DataError, match=r"^big\.bin: sha256 mismatch: the source's manifest says"):
        run(PathSource(str(coco_source)), dest)
    assert not (dest / "big.bin").exists()
    assert not (dest / ".gpuops-stage" / "partial" / "big.bin").exists()


def test_the_command_line_exits_3_naming_the_file_on_a_mismatch(coco_source, tmp_path):
    sums = write_manifest(coco_source)
    (coco_source / "annotations" / "instances_val2017.json").write_text("{}")
    result = subprocess.run(
        [PYTHON, "-m", "gpuops_trainer.stage", "--source-kind", "path",
         "--source", str(coco_source), "--dest", str(tmp_path / "dest")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 3, result
    assert "annotations/instances_val2017.json: sha256 mismatch" in result.stderr
    assert sums["annotations/instances_val2017.json"] in result.stderr


# ---- resuming over HTTP


def test_an_interrupted_file_resumes_with_a_range_request(coco_source, tmp_path, http_server):
    sums = write_manifest(coco_source)
    dest = tmp_path / "dest"
    partial = dest / ".gpuops-stage" / "partial" / "big.bin"
    partial.parent.mkdir(parents=True)
    kept = 2 * stage.CHUNK + 7
    partial.write_bytes((coco_source / "big.bin").read_bytes()[:kept])
    summary, _messages = run(HttpSource(url_of(http_server)), dest)
    assert summary.resumed_files == 1 and summary.redone_files == 0
    assert ("/big.bin", f"bytes={kept}-") in http_server.requests
    big = (coco_source / "big.bin").stat().st_size
    assert summary.copied_bytes == sum((coco_source / p).stat().st_size for p in sums) - kept
    assert (
        sha256_of(dest / "big.bin") == sums["big.bin"] and (dest / "big.bin").stat().st_size == big
    )


def test_a_damaged_partial_file_is_redone_from_its_first_byte(coco_source, tmp_path, http_server):
    sums = write_manifest(coco_source)
    dest = tmp_path / "dest"
    partial = dest / ".gpuops-stage" / "partial" / "big.bin"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * 1000)
    summary, messages = run(HttpSource(url_of(http_server)), dest)
    assert (summary.resumed_files, summary.redone_files) == (0, 1)
    assert any("big.bin: resumed copy fails its checksum" in message for message in messages)
    assert sha256_of(dest / "big.bin") == sums["big.bin"]


def test_a_server_that_ignores_range_sends_the_whole_file_again(coco_source, tmp_path, http_server):
    sums = write_manifest(coco_source)
    http_server.honour_range = False
    dest = tmp_path / "dest"
    partial = dest / ".gpuops-stage" / "partial" / "big.bin"
    partial.parent.mkdir(parents=True)
    partial.write_bytes((coco_source / "big.bin").read_bytes()[:5000])
    summary, _messages = run(HttpSource(url_of(http_server)), dest)
    assert summary.resumed_files == 0
    assert sha256_of(dest / "big.bin") == sums["big.bin"]


def test_an_http_source_needs_its_manifest(tmp_path, http_server):
    with pytest.raises(DataError, match=r"GET http://127\.0\.0\.1:\d+/LIST: HTTP 404"):
        HttpSource(url_of(http_server), manifest="LIST").entries()


def test_the_command_line_stages_over_http_checks_the_layout_and_reports_json(
    coco_source, tmp_path, http_server
):
    write_manifest(coco_source)
    dest = tmp_path / "dest"
    argv = [PYTHON, "-m", "gpuops_trainer.stage", "--source-kind", "http",
            "--source", url_of(http_server), "--dest", str(dest), "--include", "annotations",
            "--include", "val2017", "--dataset", "coco"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    # Only val's images were included: the layout check names the train split's folder.
    assert result.returncode == 3, result
    assert (
        f"train: image folder not found: {dest}/train2017 (expected a directory)" in result.stderr
    )
    record = json.loads(result.stdout.splitlines()[-1])
    assert record["copied_files"] == 4 + 2 and record["changed"] is True
    again = subprocess.run([*argv, "--split", "val"], capture_output=True, text=True, check=False)
    assert again.returncode == 0, again
    record = json.loads(again.stdout.splitlines()[-1])
    assert (record["copied_files"], record["skipped_files"], record["changed"]) == (0, 6, False)
    assert record["missing"] == []


# ---- S3: SigV4 and ListObjectsV2

# AWS's published example credentials and its Signature Version 4 example for S3 (a GET of
# examplebucket/test.txt with a Range header on 2013-05-24).
EXAMPLE_ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
EXAMPLE_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
EXAMPLE_TIME = dt.datetime(2013, 5, 24, tzinfo=dt.timezone.utc)


def test_sigv4_follows_the_published_algorithm_step_by_step():
    """The signature recomputed here from the algorithm's definition (canonical request,
    string to sign, the four-step key derivation), independently of the module's code."""
    headers = sign_request(
        "GET", "https://examplebucket.s3.amazonaws.com/test.txt", {"Range": "bytes=0-9"},
        "us-east-1", EXAMPLE_ACCESS_KEY, EXAMPLE_SECRET_KEY, EXAMPLE_TIME,
    )  # fmt: skip
    empty = hashlib.sha256(b"").hexdigest()
    canonical = "\n".join([
        "GET", "/test.txt", "",
        "host:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        f"x-amz-content-sha256:{empty}\nx-amz-date:20130524T000000Z\n",
        "host;range;x-amz-content-sha256;x-amz-date", empty,
    ])  # fmt: skip
    to_sign = "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n" + (
        hashlib.sha256(canonical.encode()).hexdigest()
    )
    key = ("AWS4" + EXAMPLE_SECRET_KEY).encode()
    for part in ("20130524", "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    assert headers["authorization"].endswith("Signature=" + expected)
    # The value AWS's documentation gives for this request.
    assert expected == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    assert headers["authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
    )
    assert headers["x-amz-date"] == "20130524T000000Z"


def test_sigv4_sorts_and_encodes_the_query():
    """AWS's ListObjects example (GET /?max-keys=2&prefix=J), query given out of order."""
    headers = sign_request(
        "GET", "https://examplebucket.s3.amazonaws.com/?prefix=J&max-keys=2", {},
        "us-east-1", EXAMPLE_ACCESS_KEY, EXAMPLE_SECRET_KEY, EXAMPLE_TIME,
    )  # fmt: skip
    assert headers["authorization"].endswith(
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    )


def test_sigv4_signs_a_session_token():
    plain = sign_request("GET", "https://h/b/k", {}, "r", "A", "S", EXAMPLE_TIME)
    with_token = sign_request("GET", "https://h/b/k", {}, "r", "A", "S", EXAMPLE_TIME, "T")
    assert with_token["x-amz-security-token"] == "T"
    assert "x-amz-security-token" in with_token["authorization"]
    assert plain["authorization"] != with_token["authorization"]


def test_list_objects_v2_pages_are_read():
    ns = "http://s3.amazonaws.com/doc/2006-03-01/"
    body = (
        f'<ListBucketResult xmlns="{ns}"><IsTruncated>true</IsTruncated>'
        '<Contents><Key>coco/a.jpg</Key><Size>12</Size><ETag>"9e107d9d372bb6826bd81d3542a419d6"</ETag></Contents>'
        "<Contents><Key>coco/b c.jpg</Key><Size>0</Size></Contents>"
        "<NextContinuationToken>tok/en=</NextContinuationToken></ListBucketResult>"
    ).encode()
    assert parse_list_objects(body) == (
        [("coco/a.jpg", 12, '"9e107d9d372bb6826bd81d3542a419d6"'), ("coco/b c.jpg", 0, None)],
        "tok/en=",
    )
    last = body.replace(b"<IsTruncated>true", b"<IsTruncated>false")
    assert parse_list_objects(last)[1] is None


def md5_etag(data: bytes) -> str:
    """S3's ETag of an object uploaded in one part: its MD5, quoted."""
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


class SigningS3Handler(http.server.BaseHTTPRequestHandler):
    """A test double of S3's two read calls (path-style ListObjectsV2 with pagination, and
    GetObject with Range) over one folder per bucket. It refuses any request whose SigV4
    signature does not cover exactly what was sent with the test secret. moto, the real
    candidate, cannot be installed beside this project's pins (botocore requires
    python-dateutil < 3, constraints.txt pins 4.0.0)."""

    def log_message(self, *args):
        pass

    def fail(self, status: int, code: str) -> None:
        body = f"<Error><Code>{code}</Code><Message>test double</Message></Error>".encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def signed(self) -> bool:
        authorization = self.headers.get("Authorization", "")
        names = authorization.partition("SignedHeaders=")[2].partition(",")[0].split(";")
        if "host" not in names or "x-amz-date" not in names:
            return False
        sent = {name: self.headers[name] for name in names if name != "host"}
        when = dt.datetime.strptime(sent.pop("x-amz-date"), "%Y%m%dT%H%M%SZ")
        sent.pop("x-amz-content-sha256", None)
        url = f"http://{self.headers['Host']}{self.path}"
        again = sign_request(
            "GET", url, sent, "us-east-1", "AKIDTEST", self.server.secret,
            when.replace(tzinfo=dt.timezone.utc),
        )  # fmt: skip
        return hmac.compare_digest(again["authorization"], authorization)

    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Range")))
        if not self.signed():
            self.fail(403, "SignatureDoesNotMatch")
            return
        parts = urllib.parse.urlsplit(self.path)
        bucket, _slash, key = urllib.parse.unquote(parts.path).lstrip("/").partition("/")
        root = self.server.buckets.get(bucket)
        if root is None:
            self.fail(404, "NoSuchBucket")
        elif not key:
            self.list_objects(root, dict(urllib.parse.parse_qsl(parts.query)))
        elif not (root / key).is_file():
            self.fail(404, "NoSuchKey")
        else:
            self.get_object(root / key)

    def list_objects(self, root: Path, query: dict[str, str]) -> None:
        keys = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        keys = [key for key in keys if key.startswith(query.get("prefix", ""))]
        start = int(query.get("continuation-token", "0"))
        page = keys[start : start + int(query.get("max-keys", "1000"))]
        more = start + len(page) < len(keys)
        contents = "".join(
            f"<Contents><Key>{escape(key)}</Key><Size>{(root / key).stat().st_size}</Size>"
            f"<ETag>{escape(md5_etag((root / key).read_bytes()))}</ETag></Contents>"
            for key in page
        )
        token = (
            f"<NextContinuationToken>{start + len(page)}</NextContinuationToken>" if more else ""
        )
        body = (
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<IsTruncated>{str(more).lower()}</IsTruncated>{contents}{token}</ListBucketResult>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def get_object(self, path: Path) -> None:
        data = path.read_bytes()
        etag = md5_etag(data)
        if self.headers.get("If-Match") not in (None, etag):
            self.fail(412, "PreconditionFailed")
            return
        wanted = self.headers.get("Range")
        if wanted:
            start = int(wanted.removeprefix("bytes=").rstrip("-"))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = data[start:]
        self.send_response(206 if wanted else 200)
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def s3_server(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SigningS3Handler)
    server.requests, server.secret, server.buckets = [], "test/secret+key", {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def endpoint_of(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_s3_pages_through_the_listing_resumes_and_skips_on_a_second_run(
    coco_source, tmp_path, s3_server, monkeypatch
):
    (coco_source / "space name+plus.txt").write_text("a key that needs encoding\n")
    sums = write_manifest(coco_source)
    bucket = tmp_path / "bucket"
    shutil.copytree(coco_source, bucket / "coco" / "2017")
    (bucket / "coco" / "2017x").mkdir()
    (bucket / "coco" / "2017x" / "other.txt").write_text("not under the prefix\n")
    s3_server.buckets["datasets"] = bucket
    monkeypatch.setattr(S3Source, "page_size", 3)
    source = S3Source(
        endpoint_of(s3_server), "datasets", "coco/2017", "us-east-1", "AKIDTEST", s3_server.secret
    )
    assert sorted(entry.path for entry in source.entries()) == sorted(sums)
    assert sum("continuation-token=" in path for path, _range in s3_server.requests) >= 3
    dest = tmp_path / "dest"
    partial = dest / ".gpuops-stage" / "partial" / "big.bin"
    partial.parent.mkdir(parents=True)
    partial.write_bytes((coco_source / "big.bin").read_bytes()[:4096])
    first, _messages = run(source, dest)
    assert first.copied_files == len(sums) and first.resumed_files == 1
    assert ("/datasets/coco/2017/big.bin", "bytes=4096-") in s3_server.requests
    for path, digest in sums.items():
        assert sha256_of(dest / path) == digest
    second, _messages = run(source, dest)
    assert (second.copied_files, second.skipped_files) == (0, len(sums))


def test_s3_errors_carry_the_server_code_and_never_the_secret(coco_source, tmp_path, s3_server):
    s3_server.buckets["datasets"] = coco_source

    def stage_from(bucket: str, secret: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDTEST", AWS_SECRET_ACCESS_KEY=secret)
        return subprocess.run(
            [PYTHON, "-m", "gpuops_trainer.stage", "--source-kind", "s3",
             "--s3-endpoint", endpoint_of(s3_server), "--s3-bucket", bucket,
             "--dest", str(tmp_path / "dest")],
            capture_output=True, text=True, check=False, env=env,
        )  # fmt: skip

    missing = stage_from("nope", s3_server.secret)
    assert missing.returncode == 3, missing
    assert (
        f"s3://nope ({endpoint_of(s3_server)}): HTTP 404 Not Found: NoSuchBucket" in missing.stderr
    )
    wrong = stage_from("datasets", "wrong-secret-value")
    # A refused signature may be a clock or a key problem: not a data error, a retry may help.
    assert wrong.returncode == 1, wrong
    assert "HTTP 403 Forbidden: SignatureDoesNotMatch" in wrong.stderr
    for result in (missing, wrong):
        assert s3_server.secret not in result.stderr + result.stdout
        assert "wrong-secret-value" not in result.stderr + result.stdout


# ---- resuming what cannot be resumed, and objects that changed at the source


def partial_of(dest: Path, name: str) -> Path:
    partial = dest / ".gpuops-stage" / "partial" / name
    partial.parent.mkdir(parents=True, exist_ok=True)
    return partial


def test_a_whole_partial_file_answered_416_is_checked_by_its_checksum_and_finished(
    coco_source, tmp_path, http_server
):
    # A kill between the last write and the rename leaves the partial whole.
    sums = write_manifest(coco_source)
    dest = tmp_path / "dest"
    whole = (coco_source / "big.bin").read_bytes()
    partial_of(dest, "big.bin").write_bytes(whole)
    summary, messages = run(HttpSource(url_of(http_server)), dest)
    assert sha256_of(dest / "big.bin") == sums["big.bin"]
    assert ("/big.bin", f"bytes={len(whole)}-") in http_server.requests
    # Only the refused resume: the file was not fetched again.
    assert [request for request in http_server.requests if request[0] == "/big.bin"] == [
        ("/big.bin", f"bytes={len(whole)}-")
    ]
    assert summary.resumed_files == 1 and summary.redone_files == 0
    assert any("big.bin: the partial copy was whole already" in message for message in messages)


def test_a_partial_file_answered_416_that_fails_its_checksum_is_fetched_whole(
    coco_source, tmp_path, http_server
):
    sums = write_manifest(coco_source)
    dest = tmp_path / "dest"
    size = (coco_source / "big.bin").stat().st_size
    partial_of(dest, "big.bin").write_bytes(b"\0" * size)
    summary, messages = run(HttpSource(url_of(http_server)), dest)
    assert sha256_of(dest / "big.bin") == sums["big.bin"]
    assert ("/big.bin", None) in http_server.requests  # fetched whole after the 416
    assert any("refused to resume (HTTP 416); copying it again" in message for message in messages)


def test_a_resume_sends_if_range_and_a_file_changed_since_is_fetched_whole(
    coco_source, tmp_path, http_server
):
    dest = tmp_path / "dest"
    old = (coco_source / "big.bin").read_bytes()
    # An earlier run began the copy of the old file and kept the server's ETag of it.
    partial_of(dest, "big.bin").write_bytes(old[:4096])
    validator = dest / ".gpuops-stage" / "validators" / "big.bin"
    validator.parent.mkdir(parents=True)
    validator.write_text(etag_of(old))
    (coco_source / "big.bin").write_bytes(os.urandom(len(old)))
    sums = write_manifest(coco_source)
    summary, _messages = run(HttpSource(url_of(http_server)), dest)
    assert etag_of(old) in http_server.if_range
    # The server sent the new file whole: nothing of the old one was kept, nothing redone.
    assert (summary.resumed_files, summary.redone_files) == (0, 0)
    assert sha256_of(dest / "big.bin") == sums["big.bin"]
    assert not validator.exists()


def s3_source(server, bucket_root, name="datasets"):
    server.buckets[name] = bucket_root
    return S3Source(endpoint_of(server), name, "", "us-east-1", "AKIDTEST", server.secret)


def test_without_a_manifest_an_object_changed_at_the_same_size_is_copied_again(
    coco_source, tmp_path, s3_server
):
    source = s3_source(s3_server, coco_source)
    dest = tmp_path / "dest"
    first, _messages = run(source, dest)
    assert first.copied_files == len(source.entries())
    target = coco_source / "annotations" / "instances_val2017.json"
    text = target.read_text()
    target.write_text(text.replace("1", "2", 1) if "1" in text else text[::-1])
    second, _messages = run(source, dest)
    # The size and the staged file's mtime did not change; the ETag did.
    assert (second.copied_files, second.skipped_files) == (1, first.copied_files - 1)
    assert (dest / "annotations" / "instances_val2017.json").read_text() == target.read_text()
    third, _messages = run(source, dest)
    assert third.copied_files == 0


def test_an_s3_resume_sends_if_match_and_an_object_changed_since_is_fetched_whole(
    coco_source, tmp_path, s3_server
):
    dest = tmp_path / "dest"
    old = (coco_source / "big.bin").read_bytes()
    partial_of(dest, "big.bin").write_bytes(old[:4096])
    validator = dest / ".gpuops-stage" / "validators" / "big.bin"
    validator.parent.mkdir(parents=True)
    validator.write_text(md5_etag(old))
    (coco_source / "big.bin").write_bytes(os.urandom(len(old)))
    summary, messages = run(s3_source(s3_server, coco_source), dest)
    assert any("big.bin: changed at the source since its partial copy began" in m for m in messages)
    assert (dest / "big.bin").read_bytes() == (coco_source / "big.bin").read_bytes()
    assert summary.resumed_files == 0


def test_a_whole_s3_partial_answered_416_is_vouched_for_by_its_md5_etag(
    coco_source, tmp_path, s3_server
):
    dest = tmp_path / "dest"
    whole = (coco_source / "big.bin").read_bytes()
    partial_of(dest, "big.bin").write_bytes(whole)
    summary, messages = run(s3_source(s3_server, coco_source), dest)
    assert summary.resumed_files == 1
    assert ("/datasets/big.bin", f"bytes={len(whole)}-") in s3_server.requests
    assert ("/datasets/big.bin", None) not in s3_server.requests
    assert (dest / "big.bin").read_bytes() == whole


def test_a_journal_of_the_first_format_is_read_and_written_again(coco_source, tmp_path):
    dest = tmp_path / "dest"
    run(PathSource(str(coco_source)), dest)
    journal = dest / ".gpuops-stage" / "done.log"
    records = journal.read_text().splitlines()[1:]
    # What an older stager wrote: sha256 size mtime_ns path.
    journal.write_text(
        "".join(" ".join(line.split(" ")[:3] + line.split(" ", 4)[4:]) + "\n" for line in records)
    )
    again, _messages = run(PathSource(str(coco_source)), dest)
    assert again.copied_files == 0 and again.skipped_files == len(records)
    assert journal.read_text().splitlines()[0] == stage.Journal.HEADER
