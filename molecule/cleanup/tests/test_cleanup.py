# SPDX-License-Identifier: GPL-3.0-or-later
"""The cleanup roles on the dirty reference host (sm120_config, debug_artifacts).

State after the scenario's sequence: prepare (dirty host + fixtures +
manifest ``prepared.json``), converge in check mode (then manifest
``after-check.json``), converge, idempotence, side_effect.  Runs through
testinfra's podman backend on both hosts."""

import difflib
import fnmatch
import json
import posixpath

import pytest

TEST_DIR = "/var/tmp/cleanup-test"
MODEL_DIR = "/shared/kimi-k2.5-nvfp4"
HUB_REPO = "/shared/hf-hub/models--moonshotai--Kimi-K2.5"
HUB_SNAPSHOT = HUB_REPO + "/snapshots/9a8b7c6d5e4f30211f2e3d4c5b6a79880a1b2c3d"
HUB_OTHER_SNAPSHOT = HUB_REPO + "/snapshots/3f1c6a0e2b9d4c7a8e5f1b2c3d4e5f6a7b8c9d0e"
PATTERNS = ("nomla_debug_tp*.pt", "embed_debug_tp*.pt", "mla_debug_layer*_tp*.pt")
DUMP_LINK = "/tmp/nomla_debug_tp8.pt"
HELD_DUMP = "/tmp/mla_debug_layer2_tp2.pt"
REFERENCE_DUMP_BYTES = 65276224  # the 35 dumps of tests/sim/dumps.py (194 tokens)
BROKEN = "/shared/side/broken/config.json"


def read_json(host, path):
    file = host.file(path)
    assert file.exists, "%s is missing on %s" % (path, host.backend.get_hostname())
    return json.loads(file.content_string)


def sha256(host, path):
    return host.check_output("sha256sum %s", path).split()[0]


def find_key(data, key):
    """Dotted paths of every member named key, anywhere in data."""
    found = []

    def walk(node, prefix):
        if isinstance(node, dict):
            for name, value in node.items():
                path = prefix + [name]
                if name == key:
                    found.append(".".join(path))
                walk(value, path)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, prefix + [str(index)])

    walk(data, [])
    return found


def without(data, key_paths):
    """A deep copy of data without the members at the dotted key_paths."""
    data = json.loads(json.dumps(data))
    for key_path in key_paths:
        *parents, last = key_path.split(".")
        node = data
        for name in parents:
            node = node[name]
        del node[last]
    return data


def only_deleted_lines(before, after):
    """True when after is before with whole lines deleted, nothing else changed."""
    matcher = difflib.SequenceMatcher(a=before.splitlines(True), b=after.splitlines(True), autojunk=False)
    return all(tag in ("equal", "delete") for tag, *dummy in matcher.get_opcodes())


def current_dumps(host):
    out = host.check_output("find %s -maxdepth 1 -printf '%%f\\n'", "/tmp")
    return sorted(n for n in out.split() if any(fnmatch.fnmatchcase(n, p) for p in PATTERNS))


@pytest.fixture(name="prepared")
def fixture_prepared(host):
    return read_json(host, TEST_DIR + "/prepared.json")


@pytest.fixture(name="result")
def fixture_result(host):
    return read_json(host, TEST_DIR + "/converge-result.json")


# ------------------------------------------------------------ check mode


def test_check_mode_run_changed_nothing_on_disk(host, prepared):
    after = read_json(host, TEST_DIR + "/after-check.json")
    # the manifest covers what the roles would touch (not an empty comparison)
    assert len(prepared["tmp_dumps"]) == 36
    assert prepared["tmp_dumps"][DUMP_LINK]["type"] == "link"
    assert prepared["shared"][MODEL_DIR + "/config.json"]["type"] == "file"
    assert prepared["shared"][HUB_SNAPSHOT + "/config.json"]["type"] == "link"
    assert prepared["tools_venv"] is False
    for section in ("shared", "tmp_dumps"):
        changed = sorted(p for p in set(prepared[section]) | set(after[section])
                         if prepared[section].get(p) != after[section].get(p))
        assert not changed, "the check-mode run changed %s" % changed
    assert after == prepared


# ------------------------------------------------------------ sm120_config


def test_kv_cache_keys_absent_and_json_otherwise_identical(host):
    for name, keys in (("config.json", ["quantization_config.kv_cache_scheme"]),
                       ("hf_quant_config.json", ["quantization.kv_cache_quant_algo"])):
        original_text = host.file(TEST_DIR + "/originals/" + name).content_string
        original = json.loads(original_text)
        assert all(k in find_key(original, k.rsplit(".", 1)[1]) for k in keys), "fixture lost its keys"
        text = host.file(MODEL_DIR + "/" + name).content_string
        current = json.loads(text)
        assert find_key(current, keys[0].rsplit(".", 1)[1]) == []
        assert current == without(original, keys)
        assert only_deleted_lines(original_text, text)
        assert len(original_text.splitlines()) - len(text.splitlines()) == (7 if name == "config.json" else 1)


def test_backups_hold_the_original_bytes(host):
    for name in ("config.json", "hf_quant_config.json"):
        backups = host.check_output("find %s -maxdepth 1 -name %s", MODEL_DIR, name + ".*~").split()
        assert len(backups) == 1, backups
        assert sha256(host, backups[0]) == sha256(host, TEST_DIR + "/originals/" + name)


def test_hub_snapshot_edited_as_a_copy_blob_and_other_snapshot_untouched(host, prepared):
    for name, keys in (("config.json", ["quantization_config.kv_cache_scheme",
                                        "text_config.quantization_config.kv_cache_scheme"]),
                       ("hf_quant_config.json", ["quantization.kv_cache_quant_algo"])):
        link = prepared["shared"][HUB_SNAPSHOT + "/" + name]
        assert link["type"] == "link"
        blob = posixpath.normpath(posixpath.join(HUB_SNAPSHOT, link["target"]))
        # the shared blob keeps its bytes, the other revision still links to it
        assert sha256(host, blob) == prepared["shared"][blob]["sha256"]
        other = host.file(HUB_OTHER_SNAPSHOT + "/" + name)
        assert other.is_symlink and other.linked_to == blob
        # this snapshot's file is now a regular, edited file
        edited = host.file(HUB_SNAPSHOT + "/" + name)
        assert edited.is_file and not edited.is_symlink
        original = json.loads(host.file(blob).content_string)
        current = json.loads(edited.content_string)
        assert current == without(original, keys)
        # the backup is a link to the same blob: renaming it back restores the snapshot
        backups = host.check_output("find %s -maxdepth 1 -name %s", HUB_SNAPSHOT, name + ".*~").split()
        assert len(backups) == 1
        assert host.file(backups[0]).is_symlink and host.file(backups[0]).linked_to == blob


def test_reported_sm120_result(result):
    sm120 = result["sm120_config"]
    assert sm120["applied"] is True and sm120["sm120"] is True and sm120["forced"] is False
    assert "12.0" in sm120["reason"]
    assert sm120["changed"] is True and sm120["removed_count"] == 5
    by_dir = {d["path"]: d for d in sm120["dirs"]}
    assert sorted((r["file"], r["key"]) for r in by_dir[MODEL_DIR]["removed"]) == [
        (MODEL_DIR + "/config.json", "quantization_config.kv_cache_scheme"),
        (MODEL_DIR + "/hf_quant_config.json", "quantization.kv_cache_quant_algo"),
    ]
    assert sorted(r["key"] for r in by_dir[HUB_SNAPSHOT]["removed"]) == [
        "quantization.kv_cache_quant_algo",
        "quantization_config.kv_cache_scheme",
        "text_config.quantization_config.kv_cache_scheme",
    ]
    assert len(by_dir[MODEL_DIR]["backups"]) == 2 and len(by_dir[HUB_SNAPSHOT]["backups"]) == 2


def test_malformed_json_fails_naming_file_line_column_and_nothing_is_written(host, prepared):
    record = read_json(host, TEST_DIR + "/side-malformed.json")
    # (one module run plans every directory before it writes any: the failure names the malformed one)
    assert record["task"] == "Decide and remove the KV-cache quantization keys from the model configs"
    failed = record["result"]
    assert failed["model_dir"] == "/shared/side/broken"
    msg = failed["msg"]
    assert BROKEN in msg and "line 10 column 3: trailing comma before '}'" in msg, msg
    assert "Expecting" not in msg, msg  # (the parser's own reason, which points at another fault, is not quoted)
    assert failed["line"] == 10 and failed["column"] == 3
    # neither the malformed directory nor the dirty one planned before it was written
    for path, entry in prepared["shared"].items():
        if path.startswith(("/shared/side/broken/", "/shared/side/dirty/")) and entry["type"] == "file":
            assert sha256(host, path) == entry["sha256"], path
    assert host.check_output("find /shared/side -name '*~'") == ""
    # and the dirty one still carries its keys: the role stopped before any write
    assert find_key(read_json(host, "/shared/side/dirty/config.json"), "kv_cache_scheme")


def test_not_sm120_changes_nothing_and_says_why(host, prepared):
    record = read_json(host, TEST_DIR + "/side-h100.json")
    assert record["gpus"]["compute_capabilities"] == ["9.0"] and record["gpus"]["sm120"] is False
    sm120 = record["sm120_config"]
    assert sm120["applied"] is False and sm120["sm120"] is False and sm120["changed"] is False
    assert "9.0" in sm120["reason"] and "fleet_strip_kv_cache_keys_force" in sm120["reason"]
    assert sm120["dirs"] == []
    for name in ("config.json", "hf_quant_config.json"):
        path = "/shared/side/h100/" + name
        assert sha256(host, path) == prepared["shared"][path]["sha256"]


def test_policy_off_keeps_the_keys(host):
    sm120 = read_json(host, TEST_DIR + "/side-policy.json")["sm120_config"]
    assert sm120["action"] == "skip" and sm120["applied"] is False
    assert "fleet_strip_kv_cache_keys is false" in sm120["reason"]
    assert find_key(read_json(host, "/shared/side/h100/config.json"), "kv_cache_scheme")


# ------------------------------------------------------------ debug_artifacts


def test_no_dump_left(host):
    assert current_dumps(host) == []


def test_reported_count_and_bytes(result, prepared):
    dumps = result["debug_artifacts"]
    files = [e for e in prepared["tmp_dumps"].values() if e["type"] == "file"]
    assert len(files) == 35 and sum(e["size"] for e in files) == REFERENCE_DUMP_BYTES
    assert dumps["files"] == 35 and dumps["links"] == 1 and dumps["count"] == 36
    assert dumps["bytes_freed"] == REFERENCE_DUMP_BYTES
    assert dumps["bytes_freed_human"] == "65.3 MB"
    assert sorted(dumps["paths"]) == sorted(prepared["tmp_dumps"])
    assert dumps["msg"] == "removed 35 file(s) and 1 link(s) (65.3 MB) from /tmp"


def test_dump_link_removed_as_a_link_target_untouched(host, prepared, result):
    assert not host.file(DUMP_LINK).exists and host.run("test -L %s", DUMP_LINK).rc == 1
    assert DUMP_LINK in result["debug_artifacts"]["paths"]
    assert host.file("/etc/passwd").is_file
    assert sha256(host, "/etc/passwd") == prepared["passwd_sha256"]


def test_dump_held_open_is_reported(host, result):
    holder = host.service("cleanup-dump-holder")
    assert holder.is_running
    pid = int(host.check_output("systemctl show -p MainPID --value cleanup-dump-holder"))
    in_use = result["debug_artifacts"]["in_use"]
    assert [e["path"] for e in in_use] == [HELD_DUMP]
    assert in_use[0]["in_use_by"] == [{"pid": pid, "name": "sleep"}]
    assert result["debug_artifacts"]["bytes_held"] == in_use[0]["size"] > 0
    # removed from the directory, still open in the process until it exits
    assert host.check_output("readlink %s", "/proc/%d/fd/0" % pid) == HELD_DUMP + " (deleted)"
