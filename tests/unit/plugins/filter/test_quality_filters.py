# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.quality_recorded: several hosts' records of one run in one file a person reviews."""

import copy

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.quality import quality_recorded


def entry(model="kimi-k2.5", quantization="int4", ids=(1, 2, 3), nll=2.0):
    return {"format": 1, "model": model, "quantization": quantization, "build": "0.33.1", "tokenizer": "sha256:ab",
            "recorded_at": "2026-12-07T10:00:00Z", "settings": {"max_tokens": 4, "compare_tokens": 3, "seed": 0},
            "prompts": [{"prompt": "p%d" % index, "token_ids": list(ids), "text": "t"} for index in range(4)],
            "passage": {"text": "a passage", "tokens": 40, "nll": nll}}


def hostvars(**entries):
    return {host: {"quality_result": {"entry": value}} if value is not None else {} for host, value in entries.items()}


def test_one_entry_per_model_and_quantisation_and_the_file_reads_back():
    recorded = hostvars(**{"gpu-1": entry(), "gpu-2": entry(nll=2.02), "gpu-3": None})
    found = quality_recorded(["gpu-1", "gpu-2", "gpu-3"], recorded, 0.05, "2026-12-07T10:00:00Z")
    assert list(found["references"]) == ["kimi-k2.5"] and found["hosts"] == {"kimi-k2.5": {"int4": ["gpu-1", "gpu-2"]}}
    assert found["notes"] == ["gpu-2 agrees with gpu-1 on kimi-k2.5 (int4): the same answers, passage NLL +1.00 %"]
    loaded = yaml.safe_load(found["content"])
    assert loaded == {"quality_references": {"kimi-k2.5": {"int4": entry()}}}
    assert found["content"].startswith("# Quality references recorded 2026-12-07T10:00:00Z by gpufleet.vllm.quality "
                                       "(quality_mode=record) on gpu-1, gpu-2.\n")


def test_hosts_that_disagree_are_said_in_the_file():
    other = entry(ids=(1, 2, 9), nll=2.5)
    found = quality_recorded(["a", "b"], hostvars(a=entry(), b=other))
    assert found["notes"] == ["b disagrees with a on kimi-k2.5 (int4): answers 1, 2, 3, 4 differ, its passage NLL "
                              "+25.00 % from the kept one; look at both hosts before you commit the reference"]
    assert "# b disagrees with a" in found["content"]


def test_a_malformed_record_is_left_out_and_named_and_odd_text_stays_one_comment_line():
    bad = copy.deepcopy(entry())
    bad["passage"]["nll"] = -1
    found = quality_recorded(["a", "b\u202e\nx"], {"a": {"quality_result": {"entry": entry()}},
                                                   "b\u202e\nx": {"quality_result": {"entry": bad}}})
    assert len(found["notes"]) == 1 and "passage.nll is not a positive number" in found["notes"][0]
    comments = [line for line in found["content"].splitlines() if line.startswith("#")]
    assert len(comments) == 3 and "\u202e" not in found["content"]
    assert yaml.safe_load(found["content"]) == {"quality_references": {"kimi-k2.5": {"int4": entry()}}}


@pytest.mark.parametrize("hosts, tolerance", [
    ("gpu-1", 0.05), ([1], 0.05), (["a"], "five"), (["a"], "nan"), (["a"], float("inf")), (["a"], -0.1)])
def test_bad_input_is_a_clear_error(hosts, tolerance):
    with pytest.raises(AnsibleFilterError, match="quality_recorded"):
        quality_recorded(hosts, {}, tolerance)


def test_the_file_is_what_yamllint_and_ansible_lint_accept_in_group_vars():
    # (an operator pastes it into group_vars: a document start, sequences indented under their key)
    content = quality_recorded(["a"], hostvars(a=entry()))["content"]
    body = [line for line in content.splitlines() if not line.startswith("#")]
    assert body[0] == "---" and "        - prompt: p0" in body, content
    assert yaml.safe_load(content) == {"quality_references": {"kimi-k2.5": {"int4": entry()}}}
