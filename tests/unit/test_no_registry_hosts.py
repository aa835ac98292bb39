"""No file of the project names a container registry host.

Images are referenced by repository path and tag only; the registry is the user's (their
mirror, their pull-through cache), passed in a variable. A default that names a public
registry would make the collection try to reach it from clusters that cannot.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REGISTRY_HOSTS = re.compile(
    r"\b(?:nvcr\.io|docker\.io|quay\.io|(?:[a-z0-9-]+\.)?gcr\.io|registry\.k8s\.io|k8s\.gcr\.io|ghcr\.io"
    r"|[a-z0-9-]+-docker\.pkg\.dev|registry\.redhat\.io|registry\.access\.redhat\.com|public\.ecr\.aws"
    r"|mcr\.microsoft\.com)\b"
)


def tracked_text_files():
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in listed:
        path = REPO_ROOT / name.decode()
        if name and path.is_file():
            data = path.read_bytes()
            if b"\0" not in data[:8192]:
                yield path, data.decode("utf-8", errors="replace")


def test_no_tracked_file_names_a_registry_host():
    found = [
        "%s:%d: %s" % (path.relative_to(REPO_ROOT), text.count("\n", 0, match.start()) + 1, match.group(0))
        for path, text in tracked_text_files()
        for match in REGISTRY_HOSTS.finditer(text)
    ]
    assert not found, "registry hosts named:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_is_for():
    # Spelt in pieces so that this file does not name them itself.
    assert REGISTRY_HOSTS.search("image: " + "nvcr" + ".io/nvidia/gpu-operator:v24.3.0")
    assert REGISTRY_HOSTS.search("us-central1-docker" + ".pkg.dev/k8s-staging-images/jobset")
    assert not REGISTRY_HOSTS.search("repository: registry.example/nvidia/mellanox")
