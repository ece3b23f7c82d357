# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model directories in the audit and the rollout: each host's model_info results against the fleet's reference
(the recorded fingerprint, else the one most hosts whose directory is whole hold), the files that differ, the drift
class "model", what stops a restart, drift.md's section and model-fingerprints.yml."""

import hashlib

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.audit import (
    audit_line,
    audit_models,
    audit_models_markdown,
    audit_models_record,
    model_entries,
    model_refusals,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.modeldir import fingerprint_of

DIR = "/shared/kimi-k2.5"
SHARDS = ["model-0000%d-of-00004.safetensors" % i for i in range(1, 5)]
BASE = dict([("config.json", "c1"), ("tokenizer.json", "t1"), ("model.safetensors.index.json", "i1")]
            + [(name, "s%d" % i) for i, name in enumerate(SHARDS)])


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def result(files=None, problems=(), ok=None, item=DIR, **extra):
    """One loop result of gpufleet.vllm.model_info for FILES {path: content tag}."""
    files = dict(BASE if files is None else files)
    lines = [(path, 100, sha(tag)) for path, tag in sorted(files.items())]
    value = {"item": item, "ok": not problems if ok is None else ok, "mode": "quick", "path": item,
             "problems": [{"file": f, "kind": k, "detail": d} for f, k, d in problems],
             "files": [{"path": p, "size": s, "needed": True, "sha256": h} for p, s, h in lines],
             "fingerprint": fingerprint_of(lines), "changed": False}
    value.update(extra)
    return value


def hostvars(recorded=None, **results):
    return dict((host.replace("_", "-"), {"gpufleet_models": model_entries({"results": value}, recorded)})
                for host, value in results.items())


def rows_of(hv):
    return audit_models([{"host": host, "drift": []} for host in hv], hv)


def by_host(rows):
    return dict((row["host"], row) for row in rows)


def test_a_fleet_on_the_same_bytes_has_no_model_drift():
    rows = by_host(rows_of(hostvars(gpu_1=[result()], gpu_2=[result()], gpu_3=[result()])))
    for row in rows.values():
        model = row["model"][0]
        assert row["drift"] == [] and model["finding"] == "" and model["fleet"] == "same as all 3 hosts"
        assert model["reference_from"] == "majority" and model["fingerprint"].startswith("sha256:")
        assert "files" not in model  # drift.json keeps the files that differ, not every sha256
    assert rows["gpu-1"]["model_cell"] == rows["gpu-1"]["model"][0]["fingerprint"][:19]


def test_one_host_alone_is_its_own_reference():
    rows = by_host(rows_of(hostvars(gpu_1=[result()])))
    assert rows["gpu-1"]["drift"] == [] and rows["gpu-1"]["model"][0]["fleet"] == "the only host"


def test_another_tokenizer_revision_differs_from_the_majority_and_names_the_file():
    other = dict(BASE, **{"tokenizer.json": "t2"})
    rows = by_host(rows_of(hostvars(gpu_1=[result()], gpu_2=[result(other)], gpu_3=[result()])))
    model = rows["gpu-2"]["model"][0]
    assert rows["gpu-2"]["drift"] == ["model"] and model["finding"] == "differs"
    assert model["differs"] == ["tokenizer.json (other content)"]
    assert model["fleet"].startswith("DIFFERS from the fleet (2 of 3 hosts hold sha256:")
    assert "tokenizer.json (other content)" in model["summary"]
    assert rows["gpu-1"]["drift"] == [] and rows["gpu-3"]["drift"] == []
    assert "model %s: sha256:" % DIR in audit_line(rows["gpu-2"]) and "DIFFERS" in audit_line(rows["gpu-2"])


def test_a_broken_directory_is_named_with_its_file_and_not_counted_in_the_majority():
    truncated = [result(problems=[(SHARDS[3], "truncated", "the file is 4096 bytes, its header says 8192")])]
    missing = dict(BASE)
    del missing[SHARDS[1]]
    lost = [result(missing, problems=[(SHARDS[1], "missing", "the index names it, it is not there")])]
    rows = by_host(rows_of(hostvars(gpu_1=[result()], gpu_2=truncated, gpu_3=lost)))
    # (the one whole directory is the reference: broken ones do not count)
    assert rows["gpu-1"]["drift"] == [] and rows["gpu-1"]["model"][0]["fleet"] == "same as 1 of 3 hosts"
    for host, name in (("gpu-2", SHARDS[3]), ("gpu-3", SHARDS[1])):
        model = rows[host]["model"][0]
        assert rows[host]["drift"] == ["model"] and model["finding"] == "broken"
        assert model["summary"].startswith("BROKEN: %s: " % name)
        assert rows[host]["model_cell"] == "BROKEN (1 problem)"
    assert rows["gpu-3"]["model"][0]["differs"] == ["%s (missing here)" % SHARDS[1]]


def test_the_majority_excludes_broken_directories_and_lists_what_a_broken_one_lacks():
    missing = dict(BASE)
    del missing[SHARDS[1]]
    lost = [result(missing, problems=[(SHARDS[1], "missing", "the index names it, it is not there")])]
    rows = by_host(rows_of(hostvars(gpu_1=[result()], gpu_2=[result()], gpu_3=lost)))
    model = rows["gpu-3"]["model"][0]
    assert model["differs"] == ["%s (missing here)" % SHARDS[1]]
    assert rows["gpu-1"]["model"][0]["fleet"] == "same as 2 of 3 hosts"


def test_the_recorded_fingerprint_decides_over_the_majority():
    new = dict(BASE, **{"config.json": "c2"})
    recorded = {DIR + "/": result()["fingerprint"]}
    rows = by_host(rows_of(hostvars(recorded, gpu_1=[result()], gpu_2=[result(new)], gpu_3=[result(new)])))
    assert rows["gpu-1"]["drift"] == [] and rows["gpu-1"]["model"][0]["fleet"] == "= recorded"
    for host in ("gpu-2", "gpu-3"):
        model = rows[host]["model"][0]
        assert rows[host]["drift"] == ["model"] and model["reference_from"] == "recorded"
        assert model["differs"] == ["config.json (other content)"]
        assert model_refusals(model_entries({"results": [result(new)]}, recorded))[0].startswith(
            "The model directory %s holds other bytes than fleet_model_fingerprints records" % DIR)


def test_no_majority_flags_every_host():
    rows = by_host(rows_of(hostvars(gpu_1=[result()], gpu_2=[result(dict(BASE, **{"tokenizer.json": "t9"}))])))
    for row in rows.values():
        assert row["drift"] == ["model"] and row["model"][0]["fleet"].startswith("DIFFERS: no fingerprint is held by more")


def test_a_check_that_failed_is_drift_and_one_turned_off_is_not():
    failed = {"item": DIR, "failed": False, "msg": "Cannot check the model directory: /shared/x does not exist."}
    skipped = {"item": DIR, "skipped": True, "changed": False}
    rows = by_host(rows_of(hostvars(gpu_1=[failed], gpu_2=[skipped])))
    assert rows["gpu-1"]["drift"] == ["model"] and rows["gpu-1"]["model_cell"] == "not checked"
    assert rows["gpu-2"]["drift"] == [] and rows["gpu-2"]["model_cell"] == "-"
    assert model_refusals(model_entries([failed]))[0].startswith("The model directory %s could not be checked: Cannot"
                                                                 % DIR)
    assert model_refusals(model_entries([skipped])) == []
    assert audit_models_markdown(rows_of(hostvars(gpu_2=[skipped]))) == ""


def test_refusals_name_each_broken_file_and_a_whole_directory_has_none():
    problems = [(SHARDS[0], "lfs_pointer", "a Git LFS pointer file (130 bytes), not the shard: git lfs pull"),
                (SHARDS[3], "truncated", "4096 bytes missing")]
    said = model_refusals(model_entries([result(problems=problems)]))
    assert len(said) == 1 and "vLLM would fail to load it after the stop" in said[0]
    assert SHARDS[0] + ": a Git LFS pointer file" in said[0] and SHARDS[3] + ": 4096 bytes missing (truncated)" in said[0]
    assert model_refusals(model_entries([result()], {DIR: result()["fingerprint"]})) == []


@pytest.mark.parametrize("recorded", [["x"], {"relative": "sha256:" + "0" * 64}, {DIR: "md5:00"}, {DIR: None}])
def test_a_bad_recorded_value_is_refused_saying_what(recorded):
    with pytest.raises(AnsibleFilterError, match="fleet_model_fingerprints"):
        model_entries([result()], recorded)


def test_the_markdown_names_the_reference_each_host_and_shows_hostile_text_as_text():
    hostile = "evil-[x](http://e)|*"
    problems = [("<b>x</b>|.safetensors", "truncated", "**bold** `tick`")]
    hv = hostvars(gpu_1=[result()], gpu_2=[result()])
    hv[hostile] = {"gpufleet_models": model_entries([result(problems=problems)])}
    text = audit_models_markdown(rows_of(hv))
    assert text.startswith("## Model directories\n\n") and "reference `sha256:" in text
    assert "held by more hosts whose directory is whole than any other" in text
    # (escaped: no link, HTML or emphasis of a host's own)
    assert "[x](http" not in text and "<b>" not in text and "**bold**" not in text
    assert "\\[x\\](http" in text and "\\<b\\>" in text and "\\*\\*bold" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 4 and all(line.count(" | ") == 3 for line in table[1:])


def test_the_record_file_pins_what_most_hosts_hold_and_says_what_it_could_not():
    hv = hostvars(gpu_1=[result()], gpu_2=[result()], gpu_3=[result(dict(BASE, **{"tokenizer.json": "t2"}))])
    got = audit_models_record(rows_of(hv), "2026-12-07 10:00 UTC")
    assert got["fingerprints"] == {DIR: result()["fingerprint"]} and got["without"] == []
    assert yaml.safe_load(got["content"]) == {"fleet_model_fingerprints": {DIR: result()["fingerprint"]}}
    split = audit_models_record(rows_of(hostvars(gpu_1=[result()], gpu_2=[result(dict(BASE, **{"x.json": "x"}))])))
    assert split["fingerprints"] == {} and yaml.safe_load(split["content"]) == {"fleet_model_fingerprints": {}}
    assert "# %s: no fingerprint is held by more hosts than any other" % DIR in split["content"]
    assert "# %s: held by 2 of the 3 hosts that checked it." % DIR in got["content"]


def test_problems_that_do_not_stop_a_load_are_reported_but_not_refused():
    linked = [result(problems=[("README.md", "link_out", "a link to /etc/hostname, out of the model directory")])]
    entries = model_entries(linked)
    assert model_refusals(entries) == [] and entries[0]["ok"] is False and entries[0]["fatal"] is False
    rows = by_host(rows_of(hostvars(gpu_1=[result()], gpu_2=[result()], gpu_3=linked)))
    assert rows["gpu-3"]["drift"] == ["model"] and rows["gpu-3"]["model"][0]["finding"] == "problems"
    assert rows["gpu-3"]["model_cell"] == "PROBLEMS (1 problem)"
    assert rows["gpu-3"]["model"][0]["summary"].startswith("PROBLEMS: README.md: a link to /etc/hostname")


def test_the_modules_count_of_problems_not_listed_is_counted():
    problems = [(SHARDS[0], "truncated", "short")] * 3 + [(".", "more", "4800 more problems not listed")]
    entry = model_entries([result(problems=problems)])[0]
    assert entry["problems_total"] == 4803 and len(entry["problems"]) == 3 and entry["fatal"] is True
    assert "(and 4800 more)" in model_refusals([entry])[0]


def test_every_host_broken_says_so_without_an_empty_list():
    broken = [result(problems=[(SHARDS[0], "truncated", "short")], fingerprint=None)]
    rows = by_host(rows_of(hostvars(gpu_1=broken, gpu_2=broken)))
    assert rows["gpu-1"]["model"][0]["fleet"] == "no host's directory is whole"
    assert "()" not in rows["gpu-1"]["model"][0]["summary"]


def test_a_record_for_a_directory_the_fleet_does_not_check_is_refused():
    with pytest.raises(AnsibleFilterError, match="fleet_model_fingerprints names /hf/models--o--n, which is not one of "
                                                 "fleet_model_dirs"):
        model_entries([], {"/hf/models--o--n": "sha256:" + "0" * 64}, dirs=["/hf/models--o--n/snapshots/abc"])
    # (the same directory written with a trailing or doubled slash is the same directory)
    assert model_entries([result(item=DIR + "/")], {DIR + "//": result()["fingerprint"]}, dirs=[DIR])[0]["vs_recorded"] \
        == "same"


def test_one_directory_written_two_ways_is_compared_as_one():
    rows = by_host(rows_of(hostvars(gpu_1=[result(item=DIR + "/")], gpu_2=[result(item=DIR)])))
    assert rows["gpu-1"]["model"][0]["fleet"] == "same as all 2 hosts" and rows["gpu-1"]["model"][0]["dir"] == DIR


def test_a_mismatch_with_the_record_is_not_refused_when_the_run_edits_the_configs():
    entries = model_entries([result(dict(BASE, **{"config.json": "c2"}))], {DIR: result()["fingerprint"]})
    assert len(model_refusals(entries)) == 1 and model_refusals(entries, config_pending=True) == []
    broken = model_entries([result(problems=[(SHARDS[0], "truncated", "short")])], {DIR: result()["fingerprint"]})
    assert len(model_refusals(broken, config_pending=True)) == 1


def test_a_failed_check_whose_message_looks_like_off_is_still_not_checked():
    entries = model_entries([{"item": DIR, "msg": "not checked (fleet_model_check is off) -- or so it says"}])
    assert entries[0]["off"] is False and len(model_refusals(entries)) == 1


def test_a_host_whose_model_directories_were_not_noted_is_not_checked():
    # (its drift was read, but the task that notes its model directories failed on it)
    rows = by_host(audit_models([{"host": "gpu-1", "drift": []}], {"gpu-1": {"gpufleet_drift": {}}}))
    assert rows["gpu-1"]["drift"] == ["model"] and rows["gpu-1"]["model_cell"] == "not checked"
    assert "the task that checks them failed on this host" in rows["gpu-1"]["model"][0]["summary"]


def test_a_directory_that_begins_a_markdown_line_is_shown_as_text():
    hv = {"gpu-1": {"gpufleet_models": model_entries([result(item="# heading")])}}
    text = audit_models_markdown(rows_of(hv))
    line = [line for line in text.splitlines() if "heading" in line and "reference" in line][0]
    assert line.startswith("\\# heading: reference `sha256:"), line
