# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/modeldir: a model directory judged whole, and its fingerprint.

The shards are real safetensors files written here by hand (8-byte little-endian header length, the JSON header,
the tensors' bytes), in a plain directory and in a Hugging Face cache layout (snapshots/<rev>/X links into blobs/,
an LFS file's blob named by its sha256). Each fault the check exists for is made on a copy and named; hostile
input (a huge header length, a header that is not JSON or nests deeply, links out of the directory or in a loop,
a garbage or foreign cache file) gives a finding, bounded, and nothing written but the cache file.
"""

import hashlib
import json
import os
import shutil
import stat
import struct

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import modeldir
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import Deadline, DeadlinePassed

TENSORS = {
    "model-00001-of-00003.safetensors": {"embed.weight": ("BF16", [16, 8]), "layers.0.w": ("F32", [8, 8])},
    "model-00002-of-00003.safetensors": {"layers.1.w": ("F32", [8, 8]), "layers.1.scale": ("F8_E4M3", [8]),
                                         "layers.1.packed": ("F4", [4, 4])},
    "model-00003-of-00003.safetensors": {"lm_head.weight": ("BF16", [16, 8]), "norm.weight": ("F16", [8])},
}
SMALL = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 8}\n',
    "tokenizer.json": b'{"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}}}\n',
    "tokenizer_config.json": b'{"tokenizer_class": "PreTrainedTokenizerFast"}\n',
    "generation_config.json": b'{"do_sample": false}\n',
    "README.md": b"# a model\n",
}
LFS_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 33554432\n")


def shard_bytes(tensors, seed=0):
    """A safetensors file: TENSORS {name: (dtype, shape)}, the data of each made from SEED."""
    header = {"__metadata__": {"format": "pt"}}
    data = b""
    for number, name in enumerate(sorted(tensors)):
        dtype, shape = tensors[name]
        count = 1
        for dim in shape:
            count *= dim
        size = (count * modeldir.DTYPE_BITS[dtype] + 7) // 8
        chunk = bytes((seed + number + i) % 251 for i in range(size))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += chunk
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw_shard(header, data=b""):
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(text)) + text + data


def index_bytes(tensors=None):
    tensors = TENSORS if tensors is None else tensors
    weight_map = {}
    for shard, names in tensors.items():
        for name in names:
            weight_map[name] = shard
    return json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}).encode()


def plain_files():
    files = dict(SMALL)
    for shard, tensors in TENSORS.items():
        files[shard] = shard_bytes(tensors, seed=len(shard))
    files[modeldir.INDEX] = index_bytes()
    return files


def write_plain(where, files=None):
    os.makedirs(where, exist_ok=True)
    for name, data in (files or plain_files()).items():
        with open(os.path.join(where, name), "wb") as handle:
            handle.write(data)
    return where


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_hf(root, rev="0123456789abcdef0123456789abcdef01234567", files=None):
    """A Hugging Face cache repository models--org--tiny under ROOT: the repository's path, the snapshot's."""
    repo = os.path.join(root, "models--org--tiny")
    blobs = os.path.join(repo, "blobs")
    snap = os.path.join(repo, "snapshots", rev)
    os.makedirs(blobs, exist_ok=True)
    os.makedirs(snap, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as handle:
        handle.write(rev)
    for name, data in (files or plain_files()).items():
        lfs = name.endswith(".safetensors") or name == "tokenizer.json"
        blob = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        with open(os.path.join(blobs, blob), "wb") as handle:
            handle.write(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))
    return repo, snap


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch):
    """The files are written a moment before they are checked: no racy window, so that they are cached (one test
    puts it back)."""
    monkeypatch.setattr(modeldir, "RACY_SECONDS", 0.0)


@pytest.fixture
def plain(tmp_path):
    return write_plain(str(tmp_path / "model"))


def check(path, tmp_path=None, **kwargs):
    if tmp_path is not None and "cache_path" not in kwargs:
        kwargs["cache_path"] = str(tmp_path / "cache" / "hashes.json")
    return modeldir.check_model_dir(path, **kwargs)


def kinds(result):
    return sorted((p["file"], p["kind"]) for p in result["problems"])


# ---------------------------------------------------------------------------
# a whole model
# ---------------------------------------------------------------------------

def test_a_whole_plain_model_passes_with_a_fingerprint_of_its_files(plain, tmp_path):
    result = check(plain, tmp_path, mode="full")
    assert result["ok"], result["problems"]
    assert result["layout"] == "plain" and result["problems"] == []
    needed = dict((f["path"], f) for f in result["files"] if f["needed"])
    assert "README.md" not in needed and [f for f in result["files"] if f["path"] == "README.md"][0]["sha256"] is None
    files = plain_files()
    for name, item in needed.items():
        assert item["sha256"] == hashlib.sha256(files[name]).hexdigest() and item["size"] == len(files[name])
        assert item["source"] == "hashed"
    lines = sorted("%s\t%d\t%s\n" % (n, len(files[n]), hashlib.sha256(files[n]).hexdigest())
                   for n in files if n != "README.md")
    assert result["fingerprint"] == "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()
    assert result["fingerprint_files"] == len(files) - 1
    assert result["bytes_hashed"] == sum(len(files[n]) for n in files if n != "README.md")


def test_the_hf_cache_layout_has_the_fingerprint_of_the_same_plain_files(plain, tmp_path):
    repo, snap = write_hf(str(tmp_path / "hub"))
    by_snapshot = check(snap, tmp_path, mode="full")
    by_repo = check(repo, tmp_path, mode="full", cache_path=str(tmp_path / "other.json"))
    flat = check(plain, tmp_path, mode="full", cache_path=str(tmp_path / "flat.json"))
    assert by_snapshot["ok"] and by_repo["ok"], (by_snapshot["problems"], by_repo["problems"])
    assert by_snapshot["layout"] == by_repo["layout"] == "hf-cache"
    assert by_snapshot["fingerprint"] == by_repo["fingerprint"] == flat["fingerprint"]
    shard = [f for f in by_snapshot["files"] if f["path"] == "model-00001-of-00003.safetensors"][0]
    assert shard["blob"] == shard["sha256"]


def test_quick_takes_an_lfs_blobs_name_and_full_verifies_it(tmp_path):
    dummy, snap = write_hf(str(tmp_path / "hub"))
    quick = check(snap, tmp_path)
    assert quick["ok"] and quick["fingerprint"]
    sources = dict((f["path"], f["source"]) for f in quick["files"])
    assert sources["model-00001-of-00003.safetensors"] == "blob name" and sources["config.json"] == "hashed"
    # a blob damaged in place (same size, a byte changed): full finds it, names it; quick's header check cannot
    target = os.path.realpath(os.path.join(snap, "model-00002-of-00003.safetensors"))
    with open(target, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 0xFF]))
    full = check(snap, tmp_path, mode="full")
    assert kinds(full) == [("model-00002-of-00003.safetensors", "hash_mismatch")]
    assert "blob was damaged or edited in place" in full["problems"][0]["detail"]
    # and the cache remembers what the content's sha256 was: a quick check names it too, without reading it
    again = check(snap, tmp_path)
    assert kinds(again) == [("model-00002-of-00003.safetensors", "hash_mismatch")]
    assert again["bytes_hashed"] == 0


def test_an_edited_config_blob_in_place_is_no_finding(tmp_path):
    """config.json's blob is named by git's sha1, not sha256: the SM120 policy may edit it in place; the
    fingerprint takes it as it is on disk."""
    dummy, snap = write_hf(str(tmp_path / "hub"))
    before = check(snap, tmp_path, mode="full")
    with open(os.path.join(snap, "config.json"), "wb") as handle:
        handle.write(b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "edited": true}\n')
    after = check(snap, tmp_path, mode="full")
    assert after["ok"] and after["fingerprint"] != before["fingerprint"]


# ---------------------------------------------------------------------------
# the faults of a model directory
# ---------------------------------------------------------------------------

def test_a_truncated_shard_is_named(plain, tmp_path):
    shard = os.path.join(plain, "model-00002-of-00003.safetensors")
    size = os.path.getsize(shard)
    os.truncate(shard, size - 10)
    result = check(plain, tmp_path)
    assert kinds(result) == [("model-00002-of-00003.safetensors", "truncated")]
    assert "(10 missing)" in result["problems"][0]["detail"] and not result["ok"]


def test_an_lfs_pointer_is_named_as_such(plain, tmp_path):
    for name in ("model-00001-of-00003.safetensors", "tokenizer.json"):
        with open(os.path.join(plain, name), "wb") as handle:
            handle.write(LFS_POINTER)
    result = check(plain, tmp_path)
    assert kinds(result) == [("model-00001-of-00003.safetensors", "lfs_pointer"), ("tokenizer.json", "lfs_pointer")]
    assert result["problems"][0]["detail"] == "Git LFS pointer, not the shard (run git lfs pull)"


def test_a_shard_the_index_names_missing_and_one_it_does_not_name(plain, tmp_path):
    os.unlink(os.path.join(plain, "model-00003-of-00003.safetensors"))
    with open(os.path.join(plain, "model-00004-of-00004.safetensors"), "wb") as handle:
        handle.write(shard_bytes({"old.weight": ("F32", [2])}))
    result = check(plain, tmp_path)
    assert kinds(result) == [("model-00003-of-00003.safetensors", "missing"),
                             ("model-00004-of-00004.safetensors", "extra_shard")]
    assert "names this shard (2 tensors)" in result["problems"][0]["detail"]


def test_a_shard_without_the_tensors_the_index_puts_in_it(plain, tmp_path):
    with open(os.path.join(plain, "model-00003-of-00003.safetensors"), "wb") as handle:
        handle.write(shard_bytes({"lm_head.weight": ("BF16", [16, 8])}))
    result = check(plain, tmp_path)
    assert kinds(result) == [("model-00003-of-00003.safetensors", "index_mismatch")]
    assert "(first: norm.weight)" in result["problems"][0]["detail"]
    # a shard with more tensors than the index puts in it is no finding
    with open(os.path.join(plain, "model-00003-of-00003.safetensors"), "wb") as handle:
        handle.write(shard_bytes({"lm_head.weight": ("BF16", [16, 8]), "norm.weight": ("F16", [8]),
                                  "extra": ("U8", [3])}))
    assert check(plain, tmp_path)["ok"]


def test_offsets_past_the_end_of_the_file_and_wrong_sizes(plain, tmp_path):
    cases = {
        "past": raw_shard({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                           "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}, b"\0" * 6),
        "size": raw_shard({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, b"\0" * 8),
        "overlap": raw_shard({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                              "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"\0" * 6),
        "trailing": raw_shard({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"\0" * 9),
        "backwards": raw_shard({"a": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}, b"\0" * 4),
        "huge shape": raw_shard({"a": {"dtype": "U8", "shape": [1 << 62, 1 << 62], "data_offsets": [0, 4]}},
                                b"\0" * 4),
    }
    expected = {"past": "truncated", "size": "bad_offsets", "overlap": "bad_offsets", "trailing": "bad_offsets",
                "backwards": "bad_offsets", "huge shape": "bad_offsets"}
    shard = os.path.join(plain, "model-00003-of-00003.safetensors")
    for name, data in cases.items():
        with open(shard, "wb") as handle:
            handle.write(data)
        result = check(plain, tmp_path)
        found = [p for p in result["problems"] if p["file"] == "model-00003-of-00003.safetensors"]
        assert [p["kind"] for p in found] == [expected[name]], (name, result["problems"])
        if name == "size":
            assert "(F32, shape [4]) needs 16 bytes but its range [0, 8] holds 8" in found[0]["detail"]


def test_a_link_out_of_the_directory_is_named_and_never_followed(plain, tmp_path):
    secret = tmp_path / "outside.json"
    secret.write_text("{}")
    os.unlink(os.path.join(plain, "generation_config.json"))
    os.symlink(str(secret), os.path.join(plain, "generation_config.json"))
    os.symlink("/etc", os.path.join(plain, "etc"))
    os.symlink("../../..", os.path.join(plain, "up"))
    result = check(plain, tmp_path)
    assert kinds(result) == [("etc", "link_out"), ("generation_config.json", "link_out"), ("up", "link_out")]
    assert all("not followed" in p["detail"] for p in result["problems"])
    assert result["bytes_hashed"] < 10000
    # a link that stays inside is followed
    os.unlink(os.path.join(plain, "generation_config.json"))
    os.symlink("tokenizer_config.json", os.path.join(plain, "generation_config.json"))
    assert [k for k in kinds(check(plain, tmp_path)) if k[0] == "generation_config.json"] == []


def test_an_hf_snapshot_link_into_another_models_blobs_is_out(tmp_path):
    dummy, snap = write_hf(str(tmp_path / "hub"))
    other, dummy = write_hf(str(tmp_path / "hub2"))
    blob = os.listdir(os.path.join(other, "blobs"))[0]
    os.unlink(os.path.join(snap, "config.json"))
    os.symlink(os.path.join(other, "blobs", blob), os.path.join(snap, "config.json"))
    result = check(snap, tmp_path)
    assert ("config.json", "link_out") in kinds(result) and ("config.json", "missing") not in kinds(result)


def test_a_fifo_a_socket_and_a_broken_or_looping_link_are_named(plain, tmp_path):
    os.mkfifo(os.path.join(plain, "model-00009.safetensors"))
    os.symlink("nowhere", os.path.join(plain, "gone.json"))
    os.symlink("loop-b", os.path.join(plain, "loop-a"))
    os.symlink("loop-a", os.path.join(plain, "loop-b"))
    os.symlink("model-00009.safetensors", os.path.join(plain, "to-fifo"))
    result = check(plain, tmp_path, timeout=30)
    found = kinds(result)
    assert ("model-00009.safetensors", "odd_type") in found and ("to-fifo", "odd_type") in found
    assert ("gone.json", "broken_link") in found and ("loop-a", "broken_link") in found
    assert "a FIFO; never opened" in [p for p in result["problems"] if p["file"] == "to-fifo"][0]["detail"]


def test_a_deep_chain_of_links_inside_resolves(plain, tmp_path):
    previous = "tokenizer.json"
    for number in range(30):
        name = "chain-%d" % number
        os.symlink(previous, os.path.join(plain, name))
        previous = name
    result = check(plain, tmp_path)
    assert result["ok"], result["problems"]


def test_an_unreadable_file_is_named(plain, tmp_path, monkeypatch):
    real_open = os.open

    def refusing(path, flags, *args):
        if os.path.basename(path) == "tokenizer_config.json":
            raise OSError(13, "Permission denied")
        return real_open(path, flags, *args)

    # as root every file is readable: the open is refused here instead of by the file's mode
    monkeypatch.setattr(modeldir.os, "open", refusing)
    result = check(plain, tmp_path)
    assert kinds(result) == [("tokenizer_config.json", "unreadable")] and result["fingerprint"] is None
    assert result["problems"][0]["detail"] in ("cannot be read: Permission denied",
                                               "cannot be opened: Permission denied")


def test_missing_config_tokenizer_and_weights(tmp_path):
    where = write_plain(str(tmp_path / "m"), {"README.md": b"x", "tokenizer_config.json": b"{}"})
    result = check(where, tmp_path)
    assert kinds(result) == [("config.json", "missing"), ("model.safetensors", "missing"),
                             ("tokenizer.json", "missing")]


def test_without_an_index_the_shards_present_are_checked(tmp_path):
    files = dict(SMALL)
    files["model.safetensors"] = shard_bytes({"w": ("BF16", [4, 4])})
    where = write_plain(str(tmp_path / "m"), files)
    assert check(where, tmp_path)["ok"]
    os.truncate(os.path.join(where, "model.safetensors"), 40)
    assert kinds(check(where, tmp_path)) == [("model.safetensors", "truncated")]


def test_a_changed_tokenizer_gives_another_fingerprint_and_the_file_that_differs(plain, tmp_path):
    first = check(plain, tmp_path)
    with open(os.path.join(plain, "tokenizer.json"), "wb") as handle:
        handle.write(b'{"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "b": 1}}}\n')
    second = check(plain, tmp_path)
    assert first["ok"] and second["ok"] and first["fingerprint"] != second["fingerprint"]
    shas = [dict((f["path"], f["sha256"]) for f in r["files"]) for r in (first, second)]
    assert [p for p in shas[0] if shas[0][p] != shas[1][p]] == ["tokenizer.json"]


def test_backups_and_documentation_are_not_in_the_fingerprint(plain, tmp_path):
    first = check(plain, tmp_path)
    with open(os.path.join(plain, "config.json.4242.2026-12-07@17:45:24~"), "w") as handle:
        handle.write("{}")
    with open(os.path.join(plain, "LICENSE"), "w") as handle:
        handle.write("MIT")
    os.makedirs(os.path.join(plain, ".cache", "huggingface"))
    second = check(plain, tmp_path)
    assert second["fingerprint"] == first["fingerprint"]
    assert any(".cache/ (a hidden directory)" in n for n in second["notes"])


# ---------------------------------------------------------------------------
# the hash cache
# ---------------------------------------------------------------------------

def test_the_second_check_reads_only_metadata(plain, tmp_path):
    first = check(plain, tmp_path)
    assert first["cache_written"] and first["bytes_hashed"] > 0 and first["cache_hits"] == 0
    cache = str(tmp_path / "cache" / "hashes.json")
    written = os.stat(cache)
    second = check(plain, tmp_path)
    assert second["bytes_hashed"] == 0 and second["cache_hits"] == first["fingerprint_files"]
    assert second["fingerprint"] == first["fingerprint"]
    # and nothing written: the cache was up to date
    assert not second["cache_written"] and os.stat(cache).st_ino == written.st_ino
    assert all(f["source"] == "cache" for f in second["files"] if f["needed"])
    # full reads and hashes everything again
    full = check(plain, tmp_path, mode="full")
    assert full["bytes_hashed"] == first["bytes_hashed"] and full["cache_hits"] == 0
    with open(str(tmp_path / "cache" / "hashes.json")) as handle:
        doc = json.load(handle)
    assert doc["model"] == os.path.realpath(plain) and len(doc["files"]) == first["fingerprint_files"]
    assert stat.S_IMODE(os.stat(str(tmp_path / "cache" / "hashes.json")).st_mode) == 0o600


def test_a_full_check_judges_again_a_file_whose_content_changed(plain, tmp_path):
    first = check(plain, tmp_path, mode="full")
    again = check(plain, tmp_path, mode="full")
    assert first["ok"] and again["ok"] and again["bytes_hashed"] == first["bytes_hashed"]
    # the header's JSON broken in place, the size kept: the full check hashes it, finds another sha256, judges it
    shard = os.path.join(plain, "model-00001-of-00003.safetensors")
    with open(shard, "r+b") as handle:
        handle.seek(8)
        handle.write(b"[")
    result = check(plain, tmp_path, mode="full")
    assert kinds(result) == [("model-00001-of-00003.safetensors", "bad_header")]


def test_a_rewrite_in_place_with_the_same_size_and_mtime_is_a_miss(plain, tmp_path):
    shard = os.path.join(plain, "model-00001-of-00003.safetensors")
    first = check(plain, tmp_path)
    before = os.stat(shard)
    with open(shard, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        handle.write(b"\x7f")
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(shard)
    assert after.st_mtime_ns == before.st_mtime_ns and after.st_size == before.st_size
    if after.st_ctime_ns == before.st_ctime_ns:
        pytest.skip("this filesystem's ctime did not move")
    second = check(plain, tmp_path)
    assert second["bytes_hashed"] == before.st_size and second["fingerprint"] != first["fingerprint"]
    assert dict((f["path"], f["source"]) for f in second["files"])["model-00001-of-00003.safetensors"] == "hashed"


def test_a_file_changed_just_before_the_check_is_hashed_but_not_cached(plain, tmp_path, monkeypatch):
    monkeypatch.setattr(modeldir, "RACY_SECONDS", 3600.0)
    first = check(plain, tmp_path)
    assert first["ok"] and first["fingerprint"]
    second = check(plain, tmp_path)
    assert second["cache_hits"] == 0 and second["bytes_hashed"] == first["bytes_hashed"]


@pytest.mark.parametrize("garbage", [
    b"", b"not json", b"[1, 2, 3]", b"{" * 100000, b'{"format": "x"}',
    json.dumps({"format": modeldir.CACHE_FORMAT, "version": 1, "model": "/elsewhere", "files": {}}).encode(),
], ids=["empty", "text", "list", "deep", "foreign", "another-model"])
def test_a_garbage_cache_file_is_ignored_and_replaced(plain, tmp_path, garbage):
    cache = tmp_path / "cache" / "hashes.json"
    cache.parent.mkdir()
    cache.write_bytes(garbage)
    result = check(plain, tmp_path)
    assert result["ok"] and result["bytes_hashed"] > 0 and result["cache_written"]
    assert check(plain, tmp_path)["bytes_hashed"] == 0


def test_a_cache_that_lies_about_a_changed_file_is_not_trusted(plain, tmp_path):
    first = check(plain, tmp_path)
    cache = tmp_path / "cache" / "hashes.json"
    doc = json.loads(cache.read_text())
    lie = doc["files"]["tokenizer.json"]
    lie["sha256"] = "0" * 64
    lie["key"][2] += 1          # for another size: never taken
    doc["files"]["config.json"]["sha256"] = "not hex"    # invalid: dropped
    doc["files"]["tokenizer_config.json"] = {"key": "x", "sha256": 5}
    cache.write_text(json.dumps(doc))
    again = check(plain, tmp_path)
    assert again["fingerprint"] == first["fingerprint"]
    sources = dict((f["path"], f["source"]) for f in again["files"])
    assert sources["tokenizer.json"] == sources["config.json"] == sources["tokenizer_config.json"] == "hashed"


def test_a_cache_file_others_may_write_or_a_huge_one_is_not_used(plain, tmp_path, monkeypatch):
    check(plain, tmp_path)
    cache = tmp_path / "cache" / "hashes.json"
    os.chmod(str(cache), 0o666)
    result = check(plain, tmp_path)
    assert result["bytes_hashed"] > 0 and any("writable by others" in n for n in result["notes"])
    assert stat.S_IMODE(os.stat(str(cache)).st_mode) == 0o600
    if os.geteuid() == 0:
        # written by another user (root can make one)
        os.chown(str(cache), 4242, 4242)
        result = check(plain, tmp_path)
        assert result["bytes_hashed"] > 0 and any("owned by another user (uid 4242)" in n for n in result["notes"])
        assert os.stat(str(cache)).st_uid == 0
    monkeypatch.setattr(modeldir, "MAX_CACHE", 10)
    result = check(plain, tmp_path)
    assert result["bytes_hashed"] > 0 and any("more than 10" in n for n in result["notes"])


def test_a_cache_path_that_is_a_link_is_not_read_and_the_link_is_replaced(plain, tmp_path):
    target = tmp_path / "target.json"
    target.write_text("keep me")
    (tmp_path / "cache").mkdir()
    os.symlink(str(target), str(tmp_path / "cache" / "hashes.json"))
    result = check(plain, tmp_path)
    assert result["cache_written"] and target.read_text() == "keep me"
    assert not os.path.islink(str(tmp_path / "cache" / "hashes.json"))


def test_nothing_is_written_without_write_and_nothing_in_the_model_directory(plain, tmp_path):
    before = sorted(os.listdir(plain))
    result = check(plain, tmp_path, write=False)
    assert result["ok"] and not result["cache_written"] and not os.path.exists(str(tmp_path / "cache"))
    check(plain, tmp_path, mode="full")
    assert sorted(os.listdir(plain)) == before


def test_a_cache_that_cannot_be_written_is_a_note(plain, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = check(plain, tmp_path, cache_path=str(blocker / "sub" / "hashes.json"))
    assert result["ok"] and not result["cache_written"]
    assert any("could not be written" in n for n in result["notes"])


@pytest.mark.parametrize("path, words", [
    ("relative.json", "absolute"), ("/var/cache/../x.json", "plain file path"), ("/var/cache/x", ".json"),
    ("/var/cache/a\nb.json", "control character"),
])
def test_cache_path_problems(tmp_path, path, words):
    assert words in modeldir.cache_path_problem(path, str(tmp_path))


def test_a_cache_path_inside_the_model_directory_is_refused(plain):
    assert "inside the model directory" in modeldir.cache_path_problem(os.path.join(plain, "h.json"), plain)
    assert modeldir.cache_path_problem("/var/cache/gpufleet/model-hashes/x.json", plain) is None


def test_the_default_cache_path_is_per_directory():
    one, two = modeldir.default_cache_path("/models/a"), modeldir.default_cache_path("/models/b")
    assert one != two and one.endswith(".json") and "model-hashes" in one
    assert modeldir.cache_path_problem(one, "/models/a") is None


# ---------------------------------------------------------------------------
# hostile input
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("data, kind, words", [
    (struct.pack("<Q", 1 << 62) + b"{}", "bad_header", "more than the 100000000"),
    (struct.pack("<Q", 99999999) + b"{}", "truncated", "announces 99999999 bytes"),
    (raw_shard(b"this is not json"), "bad_header", "does not start with '{'"),
    (raw_shard(b"{not json}"), "bad_header", "not JSON"),
    (raw_shard(b'{"a": ' + b"[" * 50000 + b"]" * 50000 + b"}"), "bad_header", "nests too deeply"),
    (raw_shard(b"{\xff\xfe}"), "bad_header", "not UTF-8"),
    (raw_shard({"a": "string"}), "bad_offsets", "not an object"),
    (raw_shard({"__metadata__": {"k": 1}}), "bad_header", "__metadata__"),
    (b"\x01\x02", "truncated", "too short"),
], ids=["huge-length", "length-past-the-end", "text", "not-json", "deep", "not-utf8", "tensor-not-object",
        "bad-metadata", "tiny"])
def test_hostile_shard_headers(plain, tmp_path, data, kind, words):
    with open(os.path.join(plain, "model-00003-of-00003.safetensors"), "wb") as handle:
        handle.write(data)
    result = check(plain, tmp_path)
    found = [p for p in result["problems"] if p["file"] == "model-00003-of-00003.safetensors"]
    assert [p["kind"] for p in found] == [kind] and words in found[0]["detail"], result["problems"]


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/x.safetensors", ".hidden"])
def test_an_index_naming_a_shard_outside_the_directory(plain, tmp_path, shard):
    (tmp_path / "outside.safetensors").write_bytes(shard_bytes({"w": ("U8", [1])}))
    index = json.loads(index_bytes())
    index["weight_map"]["norm.weight"] = shard
    with open(os.path.join(plain, modeldir.INDEX), "w") as handle:
        json.dump(index, handle)
    result = check(plain, tmp_path)
    assert kinds(result) == [(modeldir.INDEX, "bad_index")]
    assert "not a file of this directory" in result["problems"][0]["detail"]


@pytest.mark.parametrize("data", [b"[]", b'{"weight_map": []}', b"{", b'{"weight_map": {"a": 5}}'])
def test_a_broken_index(plain, tmp_path, data):
    with open(os.path.join(plain, modeldir.INDEX), "wb") as handle:
        handle.write(data)
    assert kinds(check(plain, tmp_path)) == [(modeldir.INDEX, "bad_index")]


def test_a_model_directory_that_links_to_the_root_is_refused(tmp_path):
    os.symlink("/", str(tmp_path / "root"))
    with pytest.raises(modeldir.ModelDirError, match="system directory /;"):
        check(str(tmp_path / "root"), tmp_path)
    assert not os.path.exists(str(tmp_path / "cache"))


@pytest.mark.parametrize("make, words", [
    (lambda p: None, "cannot be read"),
    (lambda p: open(p, "w").close(), "not a directory"),
])
def test_a_path_that_is_no_directory(tmp_path, make, words):
    where = str(tmp_path / "m")
    make(where)
    with pytest.raises(modeldir.ModelDirError, match=words):
        check(where)


def test_an_hf_repository_with_several_snapshots_and_no_ref_is_refused(tmp_path):
    repo, dummy = write_hf(str(tmp_path / "hub"))
    os.makedirs(os.path.join(repo, "snapshots", "another"))
    os.unlink(os.path.join(repo, "refs", "main"))
    with pytest.raises(modeldir.ModelDirError, match="2 snapshots and no usable refs/main"):
        check(repo)


def test_the_listing_is_bounded(plain, tmp_path):
    os.makedirs(os.path.join(plain, "a", "b", "c", "d"))
    for number in range(30):
        open(os.path.join(plain, "a", "f%d" % number), "w").close()
    result = check(plain, tmp_path, max_files=20)
    assert ("a", "too_many_files") in kinds(result) or (".", "too_many_files") in kinds(result)
    assert result["fingerprint"] is None
    result = check(plain, tmp_path)
    assert any("a/b/c/ is deeper" in n for n in result["notes"]) and result["ok"]


def test_the_deadline_stops_hashing_and_keeps_what_was_hashed(plain, tmp_path, monkeypatch):
    now = [0.0]
    real_hash = modeldir._hash_fd

    def slow_hash(*args):
        # each file hashed takes an hour on this clock
        now[0] += 3600
        return real_hash(*args)

    monkeypatch.setattr(modeldir, "_hash_fd", slow_hash)
    # (the headers are checked while the files are hashed: either finds the time is up)
    with pytest.raises(DeadlinePassed, match=r"passed before (hashing the files \(1 of 8 hashed\)|checking the)"):
        check(plain, tmp_path, max_workers=1, deadline=Deadline(60, clock=lambda: now[0]))
    monkeypatch.setattr(modeldir, "_hash_fd", real_hash)
    # the largest file (hashed first) was cached: the next check hashes the others only
    largest = max(os.path.getsize(os.path.join(plain, n)) for n in os.listdir(plain) if n != "README.md")
    total = sum(os.path.getsize(os.path.join(plain, n)) for n in os.listdir(plain) if n != "README.md")
    result = check(plain, tmp_path)
    assert result["ok"] and result["cache_hits"] == 1 and result["bytes_hashed"] == total - largest


def test_the_deadline_bounds_the_listing(plain, tmp_path):
    with pytest.raises(DeadlinePassed, match="listing the model directory"):
        check(plain, tmp_path, deadline=Deadline(0, clock=lambda: 1.0))
    assert not os.path.exists(str(tmp_path / "cache"))


def test_the_problems_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(modeldir, "MAX_PROBLEMS", 5)
    where = write_plain(str(tmp_path / "m"))
    for number in range(12):
        os.mkfifo(os.path.join(where, "fifo-%d" % number))
    result = check(where, tmp_path)
    assert len(result["problems"]) == 6 and result["problems"][-1]["kind"] == "more"


def test_parallel_hashing_gives_the_same_answer(tmp_path):
    files = dict(SMALL)
    tensors = {}
    for number in range(12):
        name = "model-%05d-of-00012.safetensors" % (number + 1)
        tensors[name] = {"t%d" % number: ("F32", [64, 64 * (number + 1)])}
        files[name] = shard_bytes(tensors[name], seed=number)
    files[modeldir.INDEX] = index_bytes(tensors)
    where = write_plain(str(tmp_path / "m"), files)
    results = [check(where, tmp_path, mode="full", max_workers=w, write=False) for w in (1, 2, 8)]
    assert len(set(r["fingerprint"] for r in results)) == 1 and all(r["ok"] for r in results)


def test_the_memory_of_a_check_is_bounded_by_the_chunk(tmp_path, monkeypatch):
    files = dict(SMALL)
    files["model.safetensors"] = shard_bytes({"w": ("U8", [3 * modeldir.CHUNK + 5])})
    where = write_plain(str(tmp_path / "m"), files)
    reads = []
    real = os.readv

    def counting(fd, bufs):
        reads.append(sum(len(b) for b in bufs))
        return real(fd, bufs)

    monkeypatch.setattr(modeldir.os, "readv", counting)
    result = check(where, tmp_path, mode="full")
    assert result["ok"] and reads and max(reads) == modeldir.CHUNK


def test_a_copy_has_the_same_fingerprint(tmp_path):
    where = write_plain(str(tmp_path / "m"))
    copy = str(tmp_path / "copy")
    shutil.copytree(where, copy)
    assert check(where, tmp_path, write=False)["fingerprint"] == check(copy, tmp_path, write=False)["fingerprint"]
