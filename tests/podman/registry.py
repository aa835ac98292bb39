"""A real container registry on 127.0.0.1 for the tests that push: distribution's registry
with TLS and htpasswd (basic) authentication.

No container registry is reachable from the test machines, so the registry is built from its
Go module through the module proxy, at an exact version (the proxy refuses @latest and version
lists), into ``$GPUOPS_CACHE_DIR/registry/<version>/`` with the harness's Go caches, once per
machine. It is built from a small module of its own whose server registers the filesystem
storage and htpasswd authentication only: the upstream command also compiles the Azure, GCS
and S3 drivers, twice the build time. The htpasswd file needs bcrypt hashes: a second small
program of that module makes them with golang.org/x/crypto.

Usage::

    with Registry(tmp_path, "alice", "password") as registry:
        registry.address      # 127.0.0.1:PORT
        registry.cert_dir     # a directory with its CA certificate (ca.crt)
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "harness"))

from k8s_harness import Builder, HarnessConfig, exclusive_lock  # noqa: E402

REGISTRY_MODULE = "github.com/distribution/distribution/v3"
REGISTRY_VERSION = "v3.0.0"
# The golang.org/x/crypto version distribution v3.0.0's go.mod requires (already in the cache).
CRYPTO_VERSION = "v0.36.0"
GO_MOD = f"""module gpuops.test/registry

go 1.23

require (
    {REGISTRY_MODULE} {REGISTRY_VERSION}
    golang.org/x/crypto {CRYPTO_VERSION}
)
"""
SERVER_SOURCE = """// distribution's registry server with the filesystem storage and htpasswd authentication.
package main

import (
    "os"

    "github.com/distribution/distribution/v3/registry"
    _ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
    _ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
    if err := registry.RootCmd.Execute(); err != nil {
        os.Exit(1)
    }
}
"""
HTPASSWD_SOURCE = """// Prints an htpasswd line (bcrypt) for the user and password given as arguments.
package main

import (
    "fmt"
    "os"

    "golang.org/x/crypto/bcrypt"
)

func main() {
    hash, err := bcrypt.GenerateFromPassword([]byte(os.Args[2]), bcrypt.DefaultCost)
    if err != nil {
        fmt.Fprintln(os.Stderr, err)
        os.Exit(1)
    }
    fmt.Printf("%s:%s\\n", os.Args[1], hash)
}
"""


class RegistryError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"[registry] {message}", file=sys.stderr, flush=True)


def _builder() -> Builder:
    return Builder(HarnessConfig.from_environment().cache_dir)


def registry_dir(builder: Builder | None = None) -> pathlib.Path:
    """<cache>/registry/<version>-<digest of the sources>: a changed program builds anew."""
    digest = hashlib.sha256((GO_MOD + SERVER_SOURCE + HTPASSWD_SOURCE).encode()).hexdigest()[:8]
    return (builder or _builder()).cache_dir.parent / "registry" / f"{REGISTRY_VERSION}-{digest}"


def build_registry() -> pathlib.Path:
    """Build the registry and the htpasswd helper once per version; returns their directory."""
    builder = _builder()
    target = registry_dir(builder)
    with exclusive_lock(target.parent / "build.lock", "registry build"):
        if (target / "registry").exists() and (target / "htpasswd").exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix="registry-", dir=target.parent))
        started = time.monotonic()
        log(f"building the registry {REGISTRY_VERSION} into {target} (a few minutes, once per machine)")
        try:
            env = builder.go_environment() | {"GOFLAGS": "-modcacherw"}
            source = staging / "src"
            for program, text in (("registry", SERVER_SOURCE), ("htpasswd", HTPASSWD_SOURCE)):
                (source / program).mkdir(parents=True)
                (source / program / "main.go").write_text(text)
            (source / "go.mod").write_text(GO_MOD)
            _go(builder, ["mod", "tidy"], source, env)
            for program in ("registry", "htpasswd"):
                _go(
                    builder,
                    ["build", "-trimpath", "-ldflags=-s -w", "-o", str(staging / program), "./" + program],
                    source,
                    env,
                )
            shutil.rmtree(source)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log(f"registry built in {time.monotonic() - started:.0f}s")
        return target


def _go(builder: Builder, args: list[str], cwd: pathlib.Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        [builder.go, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RegistryError(
            "go %s failed (exit %d):\n%s" % (" ".join(args), result.returncode, result.stderr[-3000:])
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Registry:
    """The registry serving from WORKDIR on a free port of 127.0.0.1, with TLS (its own CA in
    ``cert_dir``) and one htpasswd user; stopped, with its process, on exit."""

    def __init__(self, workdir: pathlib.Path, username: str, password: str):
        self.workdir = pathlib.Path(workdir)
        self.username = username
        self.password = password
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cert_dir = self.workdir / "certs"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Registry:
        binaries = build_registry()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cert_dir.mkdir()
        key, cert = self.workdir / "key.pem", self.workdir / "cert.pem"
        certificate = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        certificate += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        subprocess.run(
            [*certificate, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True
        )
        shutil.copy(cert, self.cert_dir / "ca.crt")
        htpasswd = subprocess.run(
            [str(binaries / "htpasswd"), self.username, self.password],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (self.workdir / "htpasswd").write_text(htpasswd)
        config = self.workdir / "config.yml"
        # JSON is YAML.
        config.write_text(
            '{"version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": true}},'
            ' "storage": {"filesystem": {"rootdirectory": "%s"}},'
            ' "http": {"addr": "%s", "secret": "gpuops-test", "tls": {"certificate": "%s", "key": "%s"}},'
            ' "auth": {"htpasswd": {"realm": "gpuops-test", "path": "%s"}}}'
            % (self.workdir / "data", self.address, cert, key, self.workdir / "htpasswd")
        )
        self.log = (self.workdir / "registry.log").open("w")
        self.process = subprocess.Popen(
            [str(binaries / "registry"), "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT
        )
        self._wait_until_it_answers(ssl.create_default_context(cafile=str(cert)))
        return self

    def _wait_until_it_answers(self, context: ssl.SSLContext, attempts: int = 100) -> None:
        for _attempt in range(attempts):
            if self.process.poll() is not None:
                raise RegistryError(
                    f"the registry exited: {(self.workdir / 'registry.log').read_text()[-2000:]}"
                )
            try:
                urllib.request.urlopen(f"https://{self.address}/v2/", context=context, timeout=2)
            except urllib.error.HTTPError as error:
                if error.code == 401:  # up, and asking for credentials
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RegistryError(f"the registry did not answer on {self.address}")

    def __exit__(self, *exc_info) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


if __name__ == "__main__":
    print(build_registry())
