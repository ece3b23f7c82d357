# SPDX-License-Identifier: GPL-3.0-or-later
"""The uv_resolve lookup: requirement building and error classification
(pure), and real resolutions by the control node's uv against wheelhouses
of small synthetic wheels (offline) and an unreachable index."""

import base64
import hashlib
import os
import socket
import sys
import zipfile

import pytest
import yaml

from ansible.errors import AnsibleLookupError

from ansible_collections.gpufleet.vllm.plugins.lookup import uv_resolve as ur


def make_wheel(directory, name, version, tag="py3-none-any"):
    """A minimal valid wheel (METADATA, WHEEL, RECORD, one module)."""
    dist = "%s-%s" % (name.replace("-", "_"), version)
    files = {
        "%s/__init__.py" % name.replace("-", "_"): "VERSION = %r\n" % version,
        "%s.dist-info/METADATA" % dist: "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
        "%s.dist-info/WHEEL" % dist: "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: %s\n" % tag,
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(text.encode())))
    record.append("%s.dist-info/RECORD,," % dist)
    files["%s.dist-info/RECORD" % dist] = "\n".join(record) + "\n"
    path = os.path.join(str(directory), "%s-%s.whl" % (dist, tag))
    with zipfile.ZipFile(path, "w") as zf:
        for name_in_zip, text in files.items():
            zf.writestr(name_in_zip, text)
    return path


def have_uv():
    try:
        ur.find_uv("")
        return True
    except ur.ResolveError:
        return False


needs_uv = pytest.mark.skipif(not have_uv(), reason="uv is not installed on this control node")


@pytest.fixture
def wheelhouse(tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for version in ("0.32.0", "0.33.0", "0.34.0rc1.dev5+gabcdef12"):
        make_wheel(house, "vllm", version)
    make_wheel(house, "nvidia-ml-py", "13.615.71")
    return str(house)


@pytest.fixture
def nightly_house(tmp_path):
    house = tmp_path / "nightly"
    house.mkdir()
    for version in ("0.16.0rc2.dev343+g1111111aa", "0.16.0rc2.dev344+gea5f903f8"):
        make_wheel(house, "vllm", version)
    return str(house)


def offline(house, **kw):
    kw.setdefault("python_platform", "")
    return ur.resolve("vllm", find_links=[house], no_index=True, **kw)


# --- requirement lines -------------------------------------------------------

@pytest.mark.parametrize("version,expected", [
    ("latest", "vllm"),
    ("", "vllm"),
    ("LATEST", "vllm"),
    ("0.33.0", "vllm==0.33.0"),
    ("v0.33.0", "vllm==0.33.0"),
    ("0.16.0rc2.dev344+gea5f903f8", "vllm==0.16.0rc2.dev344+gea5f903f8"),
    (">=0.32,<0.34", "vllm>=0.32,<0.34"),
    ("~=0.33.0", "vllm~=0.33.0"),
    ("==0.33.*", "vllm==0.33.*"),
])
def test_requirement_lines(version, expected):
    assert ur.requirement("vllm", version) == expected


@pytest.mark.parametrize("version", ["0.33.0\nevil==1", "0.33.0; python_version<'3'", "newest", "0.33 0.34",
                                     ">=0.32,,<0.34", "@ file:///x"])
def test_bad_version_requests_are_refused(version):
    with pytest.raises(ur.ResolveError) as err:
        ur.requirement("vllm", version)
    assert err.value.kind == "bad_input"
    assert "latest" in err.value.message


def test_bad_names_are_refused():
    with pytest.raises(ur.ResolveError):
        ur.requirement("vllm\nother", "latest")


# --- uv's command line and output -------------------------------------------

def test_argv_carries_every_source_and_never_a_shell():
    argv = ur.build_argv("/usr/bin/uv", index_url="https://mirror/simple",
                         extra_index_urls=["https://wheels.vllm.ai/nightly"], find_links=["/srv/wheelhouse"],
                         no_index=False, prerelease="allow", python_version="3.12",
                         python_platform="x86_64-manylinux_2_28")
    assert argv[:4] == ["/usr/bin/uv", "pip", "compile", "-"]
    for flag in ("--no-deps", "--no-cache", "--no-config", "--no-python-downloads"):
        assert flag in argv
    pairs = list(zip(argv, argv[1:]))
    assert ("--index-url", "https://mirror/simple") in pairs
    assert ("--extra-index-url", "https://wheels.vllm.ai/nightly") in pairs
    assert ("--find-links", "/srv/wheelhouse") in pairs
    assert ("--prerelease", "allow") in pairs
    assert ("--python-version", "3.12") in pairs
    assert ("--python-platform", "x86_64-manylinux_2_28") in pairs
    assert "--no-index" not in argv


def test_parse_version_finds_the_normalised_name():
    out = "nvidia-ml-py==13.615.71\nvllm==0.16.0rc2.dev344+gea5f903f8\n    # via -r -\n"
    assert ur.parse_version(out, "vllm") == "0.16.0rc2.dev344+gea5f903f8"
    assert ur.parse_version(out, "nvidia_ml_py") == "13.615.71"
    assert ur.parse_version("vllm-extra==1.0\n", "vllm") is None


@pytest.mark.parametrize("stderr,kind", [
    ("error: No solution found when resolving dependencies\n  cause: Because there is no version of vllm==0.99.0 "
     "and you require vllm==0.99.0, we can conclude that your requirements are unsatisfiable.", "not_found"),
    ("error: Failed to fetch: https://wheels.vllm.ai/nightly/vllm/\n  cause: dns error", "unreachable"),
    ("error: Failed to read `--find-links` directory: /nope\n  cause: No such file or directory", "find_links"),
    ("error: something new", "uv_error"),
])
def test_errors_are_classified(stderr, kind):
    err = ur.classify(stderr, "vllm==0.99.0", "index x")
    assert err.kind == kind
    assert "vllm==0.99.0" in err.message


def test_a_timeout_reads_as_unreachable(wheelhouse):
    import subprocess

    def slow(argv, stdin, env, timeout):
        raise subprocess.TimeoutExpired(argv, timeout)

    with pytest.raises(ur.ResolveError) as err:
        ur.resolve("vllm", find_links=[wheelhouse], no_index=True, uv=sys.executable, timeout=7, runner=slow)
    assert err.value.kind == "unreachable"
    assert "7 seconds" in err.value.message


def test_missing_uv_is_reported():
    with pytest.raises(ur.ResolveError) as err:
        ur.find_uv("/nonexistent/uv")
    assert err.value.kind == "no_uv"


def test_no_index_without_find_links_is_refused():
    with pytest.raises(ur.ResolveError) as err:
        ur.resolve("vllm", no_index=True)
    assert err.value.kind == "bad_input"


# --- real resolutions with the control node's uv ----------------------------

@needs_uv
def test_latest_is_the_newest_release(wheelhouse):
    # uv's default pre-release rule: a release exists, so the nightly is not taken
    assert offline(wheelhouse) == "0.33.0"


@needs_uv
def test_latest_with_prereleases_allowed_is_the_nightly(wheelhouse):
    assert offline(wheelhouse, prerelease="allow") == "0.34.0rc1.dev5+gabcdef12"


@needs_uv
def test_an_index_of_nightlies_only_yields_its_newest_nightly(nightly_house):
    assert offline(nightly_house) == "0.16.0rc2.dev344+gea5f903f8"


@needs_uv
def test_a_range_and_an_exact_version(wheelhouse):
    assert offline(wheelhouse, version=">=0.32,<0.33") == "0.32.0"
    assert offline(wheelhouse, version="0.32.0") == "0.32.0"
    assert offline(wheelhouse, version="0.34.0rc1.dev5+gabcdef12") == "0.34.0rc1.dev5+gabcdef12"


@needs_uv
def test_version_not_found(wheelhouse):
    with pytest.raises(ur.ResolveError) as err:
        offline(wheelhouse, version="0.99.0")
    assert err.value.kind == "not_found"
    assert "vllm==0.99.0" in err.value.message and wheelhouse in err.value.message


@needs_uv
def test_package_not_found(wheelhouse):
    with pytest.raises(ur.ResolveError) as err:
        ur.resolve("gpufleet-no-such-package", find_links=[wheelhouse], no_index=True, python_platform="")
    assert err.value.kind == "not_found"


@needs_uv
def test_wheelhouse_missing(tmp_path):
    with pytest.raises(ur.ResolveError) as err:
        offline(str(tmp_path / "nope"))
    assert err.value.kind == "find_links"


@needs_uv
def test_unreachable_index():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # nothing listens on the port once the socket is closed
    with pytest.raises(ur.ResolveError) as err:
        ur.resolve("vllm", index_url="http://127.0.0.1:%d/simple" % port, python_platform="",
                   environment={"UV_HTTP_RETRIES": "0"})
    assert err.value.kind == "unreachable"
    assert "127.0.0.1:%d" % port in err.value.message


@needs_uv
def test_the_platform_decides_which_wheels_count(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    make_wheel(house, "vllm", "0.33.0", tag="cp38-abi3-manylinux_2_28_x86_64")
    make_wheel(house, "vllm", "0.34.0", tag="cp38-abi3-manylinux_2_28_aarch64")
    assert offline(str(house), python_platform="x86_64-manylinux_2_28", python_version="3.11") == "0.33.0"
    assert offline(str(house), python_platform="aarch64-manylinux_2_28", python_version="3.11") == "0.34.0"


def loaded_lookup():
    """The lookup with its options defined from its own DOCUMENTATION, as the plugin loader does."""
    from ansible import constants as C
    defs = yaml.safe_load(ur.DOCUMENTATION)["options"]
    C.config.initialize_plugin_configuration_definitions("lookup", "gpufleet.vllm.uv_resolve", defs)
    lookup = ur.LookupModule()
    lookup._load_name = "gpufleet.vllm.uv_resolve"
    return lookup


@needs_uv
def test_the_lookup_plugin(wheelhouse):
    lookup = loaded_lookup()
    assert lookup.run(["vllm"], variables={}, find_links=[wheelhouse], no_index=True,
                      python_platform="") == ["0.33.0"]
    with pytest.raises(AnsibleLookupError) as err:
        lookup.run(["vllm"], variables={}, version="0.99.0", find_links=[wheelhouse], no_index=True,
                   python_platform="")
    assert "No build matching vllm==0.99.0" in str(err.value)


@needs_uv
@pytest.mark.realwheel
def test_the_real_wheelhouse():
    house = os.environ.get("GPUFLEET_WHEELHOUSE") or os.path.expanduser("~/.cache/gpufleet-vllm/wheelhouse")
    if not os.path.isdir(house):
        pytest.skip("no wheelhouse at %s" % house)
    assert ur.resolve("vllm", find_links=[house], no_index=True, python_version="3.11",
                      python_platform="x86_64-manylinux_2_28") == "0.33.0"


def test_index_credentials_stay_out_of_the_messages():
    sources = ur.describe_sources("https://bob:s3cret@mirror.example/simple", ["https://tok@x.example/nightly"])
    assert sources == "index https://***@mirror.example/simple, extra index https://***@x.example/nightly"
    err = ur.classify("error: Failed to fetch: https://bob:s3cret@mirror.example/simple/vllm/", "vllm", sources)
    assert err.kind == "unreachable" and "***@mirror.example" in err.message and "s3cret" not in err.message
