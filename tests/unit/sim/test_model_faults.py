# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated model directory is whole as module_utils/modeldir judges it, and each fault
tests/sim/model/damage_model.py makes is the finding the check names.

make_model_dir.py writes four real safetensors shards and their index in both layouts (plain, Hugging Face cache
with the shards' blobs named by their sha256); damage_model.py (standard library only, run here with this
interpreter as the hosts run it with theirs) truncates a shard, replaces one by a Git LFS pointer, removes one, or
moves the tokenizer to a newer revision.
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import modeldir
from helpers import load_source

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DAMAGE = os.path.join(REPO, "tests", "sim", "model", "damage_model.py")
SHARDS = ["model-%05d-of-00004.safetensors" % n for n in range(1, 5)]

make_model_dir = load_source("gpufleet_sim_make_model_dir_faults", "tests", "sim", "model", "make_model_dir.py")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{layout: model directory} of one build in each layout (needs ``tokenizers``)."""
    pytest.importorskip("tokenizers")
    root = tmp_path_factory.mktemp("models")
    return {
        "plain": make_model_dir.make_model_dir(str(root / "plain" / "kimi-k2.5-nvfp4"))["model_dir"],
        "hf-cache": make_model_dir.make_model_dir(str(root / "hub"), layout="hf-cache")["model_dir"],
    }


@pytest.fixture
def plain_copy(built, tmp_path):
    """A copy of the plain build to damage (what the tests do on the hosts: copy again)."""
    path = str(tmp_path / "kimi-k2.5-nvfp4")
    shutil.copytree(built["plain"], path)
    return path


def damage(model_dir, *args):
    proc = subprocess.run([sys.executable, DAMAGE, model_dir] + list(args), capture_output=True, text=True,
                          timeout=120, check=False)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    return proc.returncode, lines


def problems(result):
    return [(p["kind"], p["file"]) for p in result["problems"]]


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def test_both_layouts_are_whole_and_share_one_fingerprint(built):
    plain = modeldir.check_model_dir(built["plain"], mode="full")
    cache = modeldir.check_model_dir(built["hf-cache"], mode="full")
    assert plain["ok"] and cache["ok"], (plain["problems"], cache["problems"])
    assert plain["layout"] == "plain" and cache["layout"] == "hf-cache"
    assert plain["fingerprint"].startswith("sha256:")
    assert plain["fingerprint"] == cache["fingerprint"]
    names = sorted(f["path"] for f in plain["files"])
    assert names == sorted(f["path"] for f in cache["files"])
    assert set(SHARDS + ["model.safetensors.index.json", "tokenizer.json", "config.json"]) <= set(names)
    assert plain["fingerprint_files"] == len(names) == 11


def test_the_cache_names_shard_blobs_by_sha256_and_the_rest_by_git_sha1(built):
    fixtures = load_source("gpufleet_sim_model_fixtures_faults", "tests", "sim", "model", "fixtures.py")
    snapshot = built["hf-cache"]
    for name in sorted(os.listdir(snapshot)):
        link = os.path.join(snapshot, name)
        assert os.path.islink(link), name
        blob = os.path.basename(os.readlink(link))
        with open(link, "rb") as handle:
            data = handle.read()
        want = hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else fixtures.git_blob_sha1(data)
        assert blob == want, name


def test_the_shards_are_safetensors_files_the_index_describes(built):
    model_dir = built["plain"]
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as handle:
        index = json.load(handle)
    assert sorted(set(index["weight_map"].values())) == SHARDS
    total = 0
    sizes = 0
    for shard in SHARDS:
        with open(os.path.join(model_dir, shard), "rb") as handle:
            data = handle.read()
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + length])
        assert header.pop("__metadata__") == {"format": "pt"} and length % 8 == 0
        ends = [info["data_offsets"][1] for info in header.values()]
        assert len(data) == 8 + length + max(ends)
        total += sum(info["data_offsets"][1] - info["data_offsets"][0] for info in header.values())
        assert sorted(header) == sorted(t for t, s in index["weight_map"].items() if s == shard)
        sizes += len(data)
    assert index["metadata"]["total_size"] == total
    assert 256 * 1024 <= sizes <= 1024 * 1024


def test_the_build_is_reproducible_byte_for_byte(built, tmp_path):
    again = make_model_dir.make_model_dir(str(tmp_path / "again"))["model_dir"]
    for name in sorted(os.listdir(built["plain"])):
        assert sha256(os.path.join(again, name)) == sha256(os.path.join(built["plain"], name)), name
    assert sorted(os.listdir(again)) == sorted(os.listdir(built["plain"]))


def test_a_truncated_shard_is_named_by_its_length(plain_copy, tmp_path):
    # (a hard link to the shard elsewhere, as a kept copy made with cp -l, stays whole: the cut shard is a new file)
    kept = str(tmp_path / "kept.safetensors")
    os.link(os.path.join(plain_copy, SHARDS[-1]), kept)
    whole = sha256(kept)
    code, lines = damage(plain_copy, "truncate-shard")
    assert sha256(kept) == whole and os.path.getsize(kept) == lines[0]["was"]
    assert code == 0 and lines[0]["fault"] == "truncate-shard" and lines[0]["changed"]
    assert lines[0]["file"] == SHARDS[-1] and lines[0]["size"] == lines[0]["was"] - 16 * 1024
    result = modeldir.check_model_dir(plain_copy, mode="full")
    assert problems(result) == [("truncated", SHARDS[-1])]
    assert "16384 missing" in result["problems"][0]["detail"]
    code, lines = damage(plain_copy, "truncate-shard")
    assert code == 0 and not lines[0]["changed"]
    assert os.path.getsize(os.path.join(plain_copy, SHARDS[-1])) == lines[0]["size"]


def test_a_git_lfs_pointer_is_named_as_such(plain_copy):
    real = sha256(os.path.join(plain_copy, SHARDS[0]))
    size = os.path.getsize(os.path.join(plain_copy, SHARDS[0]))
    code, lines = damage(plain_copy, "lfs-pointer")
    assert code == 0 and lines[0]["file"] == SHARDS[0] and lines[0]["oid"] == "sha256:" + real
    with open(os.path.join(plain_copy, SHARDS[0]), "rb") as handle:
        pointer = handle.read()
    assert pointer == ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
                       % (real, size)).encode()
    assert 120 <= len(pointer) <= 140
    assert problems(modeldir.check_model_dir(plain_copy, mode="full")) == [("lfs_pointer", SHARDS[0])]
    code, lines = damage(plain_copy, "lfs-pointer")
    assert code == 0 and not lines[0]["changed"]


def test_a_missing_shard_is_named(plain_copy):
    code, lines = damage(plain_copy, "missing-shard")
    assert code == 0 and lines[0]["file"] == SHARDS[1] and lines[0]["changed"]
    assert not os.path.exists(os.path.join(plain_copy, SHARDS[1]))
    assert problems(modeldir.check_model_dir(plain_copy, mode="full")) == [("missing", SHARDS[1])]
    code, lines = damage(plain_copy, "missing-shard")
    assert code == 0 and not lines[0]["changed"]


def test_faults_combine_and_a_named_shard_is_the_one_damaged(plain_copy):
    code, lines = damage(plain_copy, "truncate-shard", "--shard", SHARDS[2], "--kib", "4")
    assert code == 0 and lines[0]["file"] == SHARDS[2]
    code, lines = damage(plain_copy, "lfs-pointer", "missing-shard")
    assert code == 0 and [line["file"] for line in lines] == [SHARDS[0], SHARDS[1]]
    assert sorted(problems(modeldir.check_model_dir(plain_copy, mode="full"))) == [
        ("lfs_pointer", SHARDS[0]), ("missing", SHARDS[1]), ("truncated", SHARDS[2])]


def test_a_newer_tokenizer_revision_is_whole_but_another_fingerprint(built, plain_copy):
    before = modeldir.check_model_dir(plain_copy, mode="full")
    code, lines = damage(plain_copy, "tokenizer-revision")
    assert code == 0 and lines[0]["file"] == "tokenizer.json" and lines[0]["changed"]
    after = modeldir.check_model_dir(plain_copy, mode="full")
    assert after["ok"] and after["fingerprint"] and after["fingerprint"] != before["fingerprint"]
    sums = dict((r["fingerprint"], dict((f["path"], f["sha256"]) for f in r["files"])) for r in (before, after))
    old, new = sums[before["fingerprint"]], sums[after["fingerprint"]]
    assert old["tokenizer.json"] != new["tokenizer.json"] == sha256(os.path.join(plain_copy, "tokenizer.json"))
    assert all(old[name] == new[name] for name in SHARDS)
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(plain_copy, "tokenizer.json"))
    old_tokenizer = tokenizers.Tokenizer.from_file(os.path.join(built["plain"], "tokenizer.json"))
    assert tokenizer.get_vocab_size() == old_tokenizer.get_vocab_size() + 1
    assert tokenizer.token_to_id(lines[0]["token"]) == lines[0]["id"]
    code, again = damage(plain_copy, "tokenizer-revision")
    assert code == 0 and not again[0]["changed"]
    assert modeldir.check_model_dir(plain_copy, mode="full")["fingerprint"] == after["fingerprint"]


def test_links_and_what_is_not_a_directory_are_refused(built, plain_copy, tmp_path):
    snapshot = built["hf-cache"]
    blobs = os.path.join(os.path.dirname(os.path.dirname(snapshot)), "blobs")
    before = dict((name, sha256(os.path.join(blobs, name))) for name in os.listdir(blobs))
    for fault in ("truncate-shard", "lfs-pointer", "missing-shard", "tokenizer-revision"):
        code, lines = damage(snapshot, fault)
        assert code == 1 and lines[0]["failed"] and "is a link" in lines[0]["msg"], lines
    assert dict((name, sha256(os.path.join(blobs, name))) for name in os.listdir(blobs)) == before
    assert modeldir.check_model_dir(snapshot, mode="full")["ok"]
    link = str(tmp_path / "link")
    os.symlink(plain_copy, link)
    code, lines = damage(link, "missing-shard")
    assert code == 1 and "not a directory" in lines[0]["msg"]
    code, lines = damage(os.path.join(plain_copy, "config.json"), "missing-shard")
    assert code == 1 and "not a directory" in lines[0]["msg"]
    assert modeldir.check_model_dir(plain_copy, mode="full")["ok"]
