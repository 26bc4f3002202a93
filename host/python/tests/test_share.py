"""Sharing envs through an OCI registry: the CNCF Distribution registry (Debian's
docker-registry, unpacked by `cargo xtask` into .venv/registry) started on 127.0.0.1 here;
`vagen-host push / pull / lock / keygen`, `--plugin oci://…` in run, check, inspect, train
and the Python package; digests, signatures and a lockfile; and ORAS's own Python SDK
reading what we push and pushing what we run. VAGEN_HOST names the vagen-host binary,
VAGEN_REGISTRY the registry's."""

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import oras.client
import pytest

ROOT = Path(__file__).resolve().parents[3]
HOST = Path(os.environ.get("VAGEN_HOST", ROOT / "target" / "release" / "vagen-host")).resolve()
REGISTRY = Path(os.environ.get("VAGEN_REGISTRY", ROOT / ".venv" / "registry" / "usr" / "bin" / "docker-registry"))
FROZENLAKE = ROOT / "target" / "plugins" / "frozenlake.wasm"
CONFIG = ROOT / "examples" / "frozenlake-cpu.toml"
# A training run small enough to be a check of what it names, not of learning.
TINY = ["--set", "schedule.steps=1", "--set", "sft.steps=0", "--set", "env.val_episodes=2"]
TINY += ["--set", "env.groups=1", "--set", "env.group_size=2"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """`host:port` of a fresh registry, and the folder its blobs are stored in."""
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    server = subprocess.Popen([str(REGISTRY), "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            break
        except OSError:
            assert server.poll() is None, server.stderr.read()
            assert time.time() < deadline, "the registry did not start"
            time.sleep(0.1)
    yield f"127.0.0.1:{port}", root / "data"
    server.kill()
    server.wait()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user of their own: an empty component cache and user config for each test."""
    for var, sub in [("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"), ("DOCKER_CONFIG", "docker")]:
        monkeypatch.setenv(var, str(tmp_path / sub))
    return tmp_path


def host(*args, check=True, **kwargs):
    out = subprocess.run([str(HOST), *map(str, args)], capture_output=True, text=True, timeout=600, **kwargs)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def pushed(file, ref, *extra, **kwargs):
    """The digest-pinned reference `push` printed."""
    out = host("push", file, ref, *extra, **kwargs).stdout
    return next(line.split()[1] for line in out.splitlines() if line.startswith("pushed"))


def transcript(plugin, tmp_path, name):
    out = tmp_path / f"{name}.jsonl"
    host("run", "--plugin", plugin, "--policy", "random", "--episodes", 6, "--seed", 11, "--out", out)
    return out.read_text()


def another_build(tmp_path, version):
    """FrozenLake with other bytes (its metadata says another version), same behaviour."""
    out = tmp_path / f"frozenlake-{version}.wasm"
    host("metadata", FROZENLAKE, "--version", version, "--out", out)
    return out


def sha256_of(file):
    import hashlib

    return "sha256:" + hashlib.sha256(Path(file).read_bytes()).hexdigest()


def test_run_check_inspect_and_the_python_package_from_oci_equal_the_file(registry, home):
    addr, _ = registry
    ref = f"oci://{addr}/envs/frozenlake:1.0.0"
    pinned = pushed(FROZENLAKE, ref)
    assert pinned.startswith(ref + "@sha256:")
    assert transcript(ref, home, "oci") == transcript(FROZENLAKE, home, "file")
    assert "all" in host("check", "--plugin", ref, "--oracle-episodes", 4).stdout
    info = json.loads(host("inspect", "--plugin", pinned, "--json").stdout)
    assert "sha256:" + info["plugin"]["sha256"] == sha256_of(FROZENLAKE)
    cached = list((home / "cache" / "vagen" / "components" / "sha256").glob("*.wasm"))
    assert [sha256_of(c) for c in cached] == [sha256_of(FROZENLAKE)]

    import vagen

    env, local = vagen.make(pinned), vagen.make(FROZENLAKE)
    assert env.reset(seed=5)[0]["text"] == local.reset(seed=5)[0]["text"]


def test_a_run_records_the_digest_and_a_moved_tag_or_a_lock_keeps_it(registry, home):
    addr, _ = registry
    ref = f"oci://{addr}/envs/moving:1"
    first = pushed(FROZENLAKE, ref)
    config = home / "train.toml"
    config.write_text(CONFIG.read_text().replace('"../target/plugins/frozenlake.wasm"', f'"{ref}"'))
    host("lock", config)
    assert first.split("@")[1] in (home / "vagen.lock").read_text()
    host("train", "--config", config, "--run-dir", home / "run", *TINY)
    written = (home / "run" / "config.toml").read_text()
    assert f'plugin = "{first}"' in written
    # The tag now names another build: the run it started, resumed, and the lock keep the first.
    second = pushed(another_build(home, "1.0.1"), ref)
    assert second != first
    host("train", "--resume", home / "run", "--set", "schedule.steps=2")
    metrics = [json.loads(line) for line in (home / "run" / "metrics.jsonl").read_text().splitlines()]
    builds = [m["run"]["env"] for m in metrics if "run" in m]
    assert len(builds) == 2 and set(builds) == {f"frozenlake 0.1.0 {sha256_of(FROZENLAKE)}"}, builds
    assert any(m.get("step") == 2 for m in metrics)
    host("train", "--config", config, "--run-dir", home / "locked", *TINY)
    assert f'plugin = "{first}"' in (home / "locked" / "config.toml").read_text()
    env_line = lambda run: (home / run / "config.toml").read_text().splitlines()[0]
    assert env_line("locked") == env_line("run") == f"# env: frozenlake 0.1.0 {sha256_of(FROZENLAKE)}"
    (home / "vagen.lock").unlink()
    host("train", "--config", config, "--run-dir", home / "unlocked", *TINY)
    assert f'plugin = "{second}"' in (home / "unlocked" / "config.toml").read_text()
    # A lock that does not name a reference the config has is refused, naming the fix.
    (home / "vagen.lock").write_text("version = 1\n")
    out = host("train", "--config", config, "--run-dir", home / "stale", *TINY, check=False)
    assert out.returncode != 0 and "vagen-host lock" in out.stderr, out.stderr


def test_a_tampered_blob_or_a_wrong_digest_is_refused(registry, home):
    addr, data = registry
    ref = f"oci://{addr}/envs/tampered:1"
    build = another_build(home, "2.0.0")
    pushed(build, ref)
    digest = sha256_of(build).split(":")[1]
    blob = data / "docker/registry/v2/blobs/sha256" / digest[:2] / digest / "data"
    changed = bytearray(blob.read_bytes())
    changed[-1] ^= 0xFF
    blob.write_bytes(bytes(changed))
    out = host("run", "--plugin", ref, "--episodes", 1, check=False)
    assert out.returncode != 0 and "tampered" in out.stderr, out.stderr
    assert not list((home / "cache" / "vagen" / "components" / "sha256").glob("*.wasm"))
    wrong = f"oci://{addr}/envs/frozenlake@sha256:" + "0" * 64
    out = host("run", "--plugin", wrong, "--episodes", 1, check=False)
    assert out.returncode != 0 and "not in the registry" in out.stderr, out.stderr


def test_signed_by_the_key_is_accepted_unsigned_or_another_key_refused(registry, home):
    addr, _ = registry
    for k in ["ours", "theirs"]:
        host("keygen", "--out-dir", home / k, env={**os.environ, "COSIGN_PASSWORD": "pw"})
    signed = f"oci://{addr}/envs/signed:1"
    unsigned = f"oci://{addr}/envs/unsigned:1"
    pushed(FROZENLAKE, signed, "--sign-key", home / "ours" / "cosign.key", env={**os.environ, "COSIGN_PASSWORD": "pw"})
    pushed(FROZENLAKE, unsigned)
    ours, theirs = ["--verify-key", home / "ours" / "cosign.pub"], ["--verify-key", home / "theirs" / "cosign.pub"]
    out = host("pull", signed, *ours, "--require-signed").stdout
    assert "verified with" in out
    host("run", "--plugin", signed, "--episodes", 1, *ours, "--require-signed")
    refused = lambda *a: host(*a, check=False)
    out = refused("run", "--plugin", signed, "--episodes", 1, *theirs)
    assert out.returncode != 0 and "signed, but not by the key" in out.stderr, out.stderr
    out = refused("run", "--plugin", unsigned, "--episodes", 1, *ours, "--require-signed")
    assert out.returncode != 0 and "not signed" in out.stderr, out.stderr
    # The user's config holds the same settings, for every command (and no flag).
    (home / "config" / "vagen").mkdir(parents=True)
    (home / "config" / "vagen" / "config.toml").write_text(
        f'[plugins]\nverify_key = "{home / "ours" / "cosign.pub"}"\nrequire_signed = true\n'
    )
    host("check", "--plugin", signed, "--oracle-episodes", 2)
    out = refused("inspect", "--plugin", unsigned)
    assert out.returncode != 0 and "not signed" in out.stderr, out.stderr
    # A private key the password does not open is named, before anything is pushed.
    out = refused("push", FROZENLAKE, signed, "--sign-key", home / "ours" / "cosign.key")
    assert out.returncode != 0 and "cosign.key" in out.stderr, out.stderr


class Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="registry"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_PUT = do_POST = do_GET

    def log_message(self, *_):
        pass


@contextmanager
def refusing_registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_an_unreachable_registry_or_a_401_is_a_clear_error(home):
    start = time.time()
    out = host("run", "--plugin", f"oci://127.0.0.1:{free_port()}/envs/frozenlake:1", "--episodes", 1, check=False)
    assert out.returncode != 0 and "cannot reach the registry" in out.stderr, out.stderr
    with refusing_registry() as addr:
        out = host("pull", f"oci://{addr}/envs/frozenlake:1", check=False)
        assert out.returncode != 0 and "refused the credentials" in out.stderr, out.stderr
        out = host("push", FROZENLAKE, f"oci://{addr}/envs/frozenlake:1", "--username", "u", "--password-env", "NOPE", check=False)
        assert out.returncode != 0 and "NOPE" in out.stderr, out.stderr
    assert time.time() - start < 60


def test_oras_reads_what_we_push_and_we_run_what_oras_pushes(registry, home):
    addr, _ = registry
    client = oras.client.OrasClient(hostname=addr, insecure=True)
    ours = f"{addr}/envs/ours:1"
    pushed(FROZENLAKE, f"oci://{ours}")
    manifest = client.get_manifest(ours)
    assert manifest["config"]["mediaType"] == "application/vnd.wasm.config.v0+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/wasm"]
    files = client.pull(target=ours, outdir=str(home / "pulled"))
    assert [sha256_of(f) for f in files] == [sha256_of(FROZENLAKE)]

    # ORAS pushing the layout itself (a config it did not get from us), from its folder.
    stage = home / "stage"
    stage.mkdir()
    shutil.copy(FROZENLAKE, stage / "env.wasm")
    (stage / "config.json").write_text(json.dumps({"architecture": "wasm", "os": "wasip2"}))
    theirs = f"{addr}/envs/theirs:1"
    cwd = os.getcwd()
    os.chdir(stage)
    try:
        client.push(
            target=theirs,
            files=["env.wasm:application/wasm"],
            manifest_config="config.json:application/vnd.wasm.config.v0+json",
            disable_path_validation=True,
        )
    finally:
        os.chdir(cwd)
    assert transcript(f"oci://{theirs}", home, "oras") == transcript(FROZENLAKE, home, "file")


def test_metadata_is_embedded_shown_and_pushed_as_annotations(registry, home):
    addr, _ = registry
    package = home / "pyproject.toml"
    package.write_text(
        '[project]\nname = "frozen"\nversion = "1.2.3"\ndescription = "A lake."\nlicense = "Apache-2.0"\n'
        'authors = [{ name = "Ada" }]\n[project.urls]\nSource = "https://example.org/frozen"\n'
    )
    out = home / "frozen.wasm"
    host("metadata", FROZENLAKE, "--from", package, "--revision", "abc123", "--out", out)
    info = json.loads(host("inspect", "--plugin", out, "--json").stdout)["metadata"]
    assert info["name"] == "frozen" and info["version"] == "1.2.3" and info["license"] == "Apache-2.0"
    assert (info["authors"], info["source"], info["revision"]) == ("Ada", "https://example.org/frozen", "abc123")
    assert "warning" not in host("check", "--plugin", out, "--oracle-episodes", 2).stdout
    assert "warning: no name, version" in host("check", "--plugin", FROZENLAKE, "--oracle-episodes", 2).stdout
    ref = f"oci://{addr}/envs/frozen:1.2.3"
    pushed(out, ref)
    annotations = oras.client.OrasClient(hostname=addr, insecure=True).get_manifest(ref[len("oci://") :])["annotations"]
    assert annotations["org.opencontainers.image.version"] == "1.2.3"
    assert annotations["org.opencontainers.image.licenses"] == "Apache-2.0"
    bad = host("metadata", FROZENLAKE, "--version", "one", "--out", home / "bad.wasm", check=False)
    assert bad.returncode != 0 and "semver" in bad.stderr, bad.stderr
