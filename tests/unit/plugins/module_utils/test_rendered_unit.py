# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/systemd.py reads back what the service role's template wrote: the ExecStart= words and the
Environment= of a rendered unit (what a model switch's rollback starts, and which GPUs a unit takes), and
serving.endpoint: where its server answers."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.vllm.plugins.filter.systemd import systemd_environment, systemd_exec_args
from ansible_collections.gpufleet.vllm.plugins.module_utils import serving, systemd

MARKER = "# vLLM server for %s, rendered by the gpufleet.vllm.service role."


def render(argv, env=None, name="kimi-k2.5"):
    """The unit file the template writes (same directives and filters, templates/vllm.service.j2)."""
    return "\n".join(
        ["#", "# Ansible managed", "#", MARKER % name, "# ExecStart= words are quoted for systemd (no shell).",
         "[Unit]", "Description=vLLM %s" % name, "Wants=network-online.target", "", "[Service]", "Type=exec",
         "User=vllm"] + systemd_environment(env or {}) + [
            "ExecStart=" + systemd_exec_args(argv, wrap=True), "Restart=on-failure", "", "[Install]",
            "WantedBy=multi-user.target", ""])


ARGV = ["/opt/vllm/current/bin/vllm", "serve", "/models/kimi k2.5 100% \"q\"", "--served-model-name", "kimi-k2.5",
        "--port", "8000", "--override-generation-config", '{"temperature": 0.6,\n\t"top_p": 0.95}', "$HOME", "a\\b"]


def test_what_the_template_writes_is_read_back_word_for_word():
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "PYTHONUNBUFFERED": "1", "HF_HOME": "/x y/%h $z"}
    expected = {"argv": ARGV, "environment": env, "environment_files": []}
    assert systemd.parse_rendered_unit(render(ARGV, env)) == expected


WORD = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(WORD, max_size=8),
       st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True), WORD, max_size=4))
def test_any_command_line_and_environment_round_trip(words, env):
    argv = ["/opt/vllm/current/bin/vllm"] + words
    assert systemd.parse_rendered_unit(render(argv, env)) == {"argv": argv, "environment": env,
                                                              "environment_files": []}


@pytest.mark.parametrize("line, words", [
    ('"a b" c', ["a b", "c"]),
    ("'single q' x", ["single q", "x"]),
    ('"\\x41\\t\\s"', ["A\t "]),
    ('"100%%" "$$x"', ["100%", "$x"]),
    # (quotes anywhere in a word, as systemd's extract_first_word unquotes them)
    ('"a"b c"d e"', ["ab", "cd e"]),
    ('CUDA_VISIBLE_DEVICES="4,5"', ["CUDA_VISIBLE_DEVICES=4,5"]),
    ('"" x', ["", "x"]),
])
def test_systemd_word_rules(line, words):
    assert systemd.split_words(line, "the line") == words


@pytest.mark.parametrize("line, words", [
    ('"open', "a quote that is never closed"),
    ("%n", "the specifier %n"),
    ("$HOME", "a variable ($)"),
    ('"\\q"', "the escape \\q"),
    ("x\\", "unfinished escape"),
])
def test_what_only_systemd_can_resolve_is_refused(line, words):
    with pytest.raises(ValueError) as err:
        systemd.split_words(line, "the line")
    assert words in str(err.value)


@pytest.mark.parametrize("text, words", [
    ("[Service]\nType=exec\n", "has no ExecStart= command line"),
    ('[Service]\nExecStart="/a"\nExecStart="/b"\n', "more than one ExecStart= line"),
    ('[Service]\nEnvironment="1X=y"\nExecStart="/a"\n', "is not NAME=value"),
])
def test_a_unit_not_as_the_template_writes_it_is_refused(text, words):
    with pytest.raises(ValueError) as err:
        systemd.parse_rendered_unit(text, "u.service")
    assert words in str(err.value)


def test_a_comment_inside_a_continued_line_is_skipped_as_systemd_skips_it():
    # an operator commented out one word of the wrapped command line: systemd runs tp 8, not 4
    text = ('[Service]\nExecStart="/opt/vllm/bin/vllm" \\\n    "serve" \\\n    "--tensor-parallel-size" "8" \\\n'
            '#    "--tensor-parallel-size" "4" \\\n    "--port" "8001"\n')
    rendered = systemd.parse_rendered_unit(text)
    assert rendered["argv"] == ["/opt/vllm/bin/vllm", "serve", "--tensor-parallel-size", "8", "--port", "8001"]
    assert systemd.gpus_of(rendered) == (list(range(8)), None)


def test_an_empty_environment_line_resets_and_an_environment_file_makes_the_gpus_unknown():
    text = ('[Service]\nEnvironment="CUDA_VISIBLE_DEVICES=0,1"\nEnvironment=\nEnvironment="A=1"\n'
            'ExecStart="/opt/vllm/bin/vllm" "serve" "/m"\n')
    assert systemd.parse_rendered_unit(text)["environment"] == {"A": "1"}
    rendered = systemd.parse_rendered_unit(text + "EnvironmentFile=-/etc/vllm/gpus.env\n")
    assert rendered["environment_files"] == ["-/etc/vllm/gpus.env"]
    gpus, why = systemd.gpus_of(rendered)
    assert gpus is None and "EnvironmentFile= -/etc/vllm/gpus.env may set CUDA_VISIBLE_DEVICES" in why
    gpus, why = systemd.gpus_of(systemd.parse_rendered_unit(text), "/etc/systemd/system/u.service.d/override.conf")
    assert gpus is None and "drop-ins /etc/systemd/system/u.service.d/override.conf" in why


@pytest.mark.parametrize("lines, environment", [
    # (removed last, whatever the order; NAME=value removes only that assignment; an empty line resets the list)
    (["UnsetEnvironment=CUDA_VISIBLE_DEVICES", 'Environment="CUDA_VISIBLE_DEVICES=4,5"'], {"A": "1"}),
    (['Environment="CUDA_VISIBLE_DEVICES=4,5"', "UnsetEnvironment=CUDA_VISIBLE_DEVICES=4,5 A"], {}),
    (["UnsetEnvironment=CUDA_VISIBLE_DEVICES=0", 'Environment="CUDA_VISIBLE_DEVICES=4,5"'],
     {"A": "1", "CUDA_VISIBLE_DEVICES": "4,5"}),
    (["UnsetEnvironment=CUDA_VISIBLE_DEVICES", "UnsetEnvironment=", 'Environment="CUDA_VISIBLE_DEVICES=4,5"'],
     {"A": "1", "CUDA_VISIBLE_DEVICES": "4,5"}),
])
def test_unset_environment_is_applied_as_systemd_applies_it(lines, environment):
    text = "[Service]\nEnvironment=A=1\n%s\nExecStart=/opt/vllm/bin/vllm serve /m -tp 2\n" % "\n".join(lines)
    rendered = systemd.parse_rendered_unit(text)
    assert rendered["environment"] == environment
    assert systemd.gpus_of(rendered)[0] == ([4, 5] if "CUDA_VISIBLE_DEVICES" in environment else [0, 1])


@pytest.mark.parametrize("lines, known", [
    (["PassEnvironment=HOME CUDA_VISIBLE_DEVICES"], False),
    (["PassEnvironment=CUDA_VISIBLE_DEVICES", 'Environment="CUDA_VISIBLE_DEVICES=4,5"'], True),
    (["PassEnvironment=CUDA_VISIBLE_DEVICES", "PassEnvironment="], True),
    (["PassEnvironment=CUDA_VISIBLE_DEVICES", "UnsetEnvironment=CUDA_VISIBLE_DEVICES"], True),
])
def test_gpus_passed_from_systemds_own_environment_are_unknown(lines, known):
    text = "[Service]\n%s\nExecStart=/opt/vllm/bin/vllm serve /m -tp 2\n" % "\n".join(lines)
    gpus, why = systemd.gpus_of(systemd.parse_rendered_unit(text))
    assert (gpus is not None) == known, why
    if not known:
        assert why == "its PassEnvironment= takes CUDA_VISIBLE_DEVICES from systemd's own environment, not read here"


def test_an_unset_environment_entry_that_is_no_name_is_refused():
    with pytest.raises(ValueError, match="UnsetEnvironment= entry '1A' is not NAME"):
        systemd.parse_rendered_unit("[Service]\nUnsetEnvironment=1A\nExecStart=/v serve /m\n")


@pytest.mark.parametrize("argv", [["vllm", "serve", "/m", "--config", "/etc/vllm/kimi.yaml"],
                                  ["vllm", "serve", "/m", "--config=/etc/vllm/kimi.yaml", "-tp", "8"]])
def test_a_config_file_makes_the_gpus_unsure(argv):
    rendered = {"argv": argv, "environment": {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, "environment_files": []}
    assert systemd.gpus_of(rendered) == (
        None, "unsure: --config /etc/vllm/kimi.yaml not read (vLLM takes options such as tensor-parallel-size from it)")
    # (--config-format is another option: the model's config format)
    assert serving.serving_config(["vllm", "serve", "/m", "--config-format", "hf"])["config_files"] == []


def test_exec_start_outside_the_service_section_is_not_read():
    text = '[Unit]\nExecStart="/evil"\n[Service]\nExecStart="/opt/vllm/bin/vllm" "serve" "/m"\n'
    assert systemd.parse_rendered_unit(text)["argv"] == ["/opt/vllm/bin/vllm", "serve", "/m"]


# -------------------------------------------------------------- the file on disk


def test_read_rendered_file_needs_the_marker_and_a_regular_file(tmp_path):
    good = tmp_path / "good.service"
    good.write_text(render(ARGV))
    assert systemd.read_rendered_file(str(good))["argv"] == ARGV
    plain = tmp_path / "plain.service"
    plain.write_text(render(ARGV).replace(MARKER % "kimi-k2.5", "# hand made"))
    with pytest.raises(systemd.SystemdError) as err:
        systemd.read_rendered_file(str(plain))
    assert "was not rendered by the gpufleet.vllm.service role" in str(err.value)
    link = tmp_path / "link.service"
    os.symlink(str(good), str(link))
    with pytest.raises(systemd.SystemdError) as err:
        systemd.read_rendered_file(str(link))
    assert "a link is not followed" in str(err.value)
    with pytest.raises(systemd.SystemdError) as err:
        systemd.read_rendered_file("")
    assert "FragmentPath is empty" in str(err.value)
    big = tmp_path / "big.service"
    big.write_text(render(ARGV) + "#" * (70 * 1024))
    with pytest.raises(systemd.SystemdError) as err:
        systemd.read_rendered_file(str(big))
    assert "larger than 64 KiB" in str(err.value)


# ------------------------------------------------------------------ GPUs shared


@pytest.mark.parametrize("first, second, shared", [
    ([0, 1, 2, 3], [4, 5, 6, 7], False),
    ([0, 1, 2, 3], [3, 4], True),
    (None, [4, 5], True),
    ([0, 1], ["GPU-aaaa"], True),
    (["GPU-aaaa"], ["GPU-bbbb"], False),
    (["GPU-aaaa"], ["GPU-aaaa", "GPU-cccc"], True),
])
def test_units_share_gpus_unless_both_name_disjoint_ones_alike(first, second, shared):
    assert systemd.share_gpus(first, second) is shared


def test_gpus_of_a_rendered_unit():
    rendered = systemd.parse_rendered_unit(render(ARGV + ["--tensor-parallel-size", "4"],
                                                  {"CUDA_VISIBLE_DEVICES": "4,5,6,7,0"}))
    assert systemd.gpus_of(rendered) == ([4, 5, 6, 7], None)
    assert systemd.gpus_of({"error": "x"}) == (None, "x")
    gpus, why = systemd.gpus_of({"argv": ARGV + ["-tp", "x"], "environment": {}})
    assert gpus is None and why.startswith("its serving arguments are not valid: -tp must be")


# --------------------------------------------------------------------- endpoint


@pytest.mark.parametrize("words, expected", [
    (["serve", "/models/kimi", "--port", "8101", "--served-model-name", "kimi-k2.5", "kimi", "--host", "10.0.0.5"],
     {"port": 8101, "served_model_name": "kimi-k2.5", "host": "10.0.0.5", "api_key": None}),
    (["serve", "/models/kimi"], {"port": 8000, "served_model_name": "/models/kimi", "host": None, "api_key": None}),
    (["serve", "--model=/models/m", "--port=9000", "--api-key", "k1"],
     {"port": 9000, "served_model_name": "/models/m", "host": None, "api_key": "k1"}),
    (["serve", "/m", "--served_model_name", "x", "--port", "1"],
     {"port": 1, "served_model_name": "x", "host": None, "api_key": "from-env"}),
])
def test_endpoint_reads_port_and_served_name_as_vllm_does(words, expected):
    assert serving.endpoint(["/opt/vllm/bin/vllm"] + words, {"VLLM_API_KEY": "from-env"} if "x" in words
                            else {}) == expected


@pytest.mark.parametrize("words", [["serve", "/m", "--port", "70000"], ["serve", "/m", "--port", "x"],
                                   ["serve", "/m", "--port"]])
def test_endpoint_refuses_a_port_that_is_not_one(words):
    with pytest.raises(serving.ServingConfigError):
        serving.endpoint(["/opt/vllm/bin/vllm"] + words)
