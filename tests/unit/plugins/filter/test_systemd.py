# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The systemd quoting filters (plugins/filter/systemd.py).

Besides exact expected strings, the ExecStart= output is read back with a
small reader that follows systemd's documented rules (specifiers, ``$$``,
double quotes with C escapes, line continuations), so a round trip proves
that every word reaches the program unchanged.  The molecule scenario
``service`` checks the same on a real systemd (``systemctl show -p
ExecStart``).
"""

import re

import pytest
from hypothesis import given, settings, strategies as st
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vllm.plugins.filter.systemd import (
    FilterModule,
    systemd_environment,
    systemd_exec_args,
    systemd_quote,
    systemd_unit_name,
    systemd_value,
)
from ansible_collections.gpufleet.vllm.plugins.filter.values import value_problems

C_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}


def systemd_read_words(line):
    """Split an ExecStart= value into argv the way systemd documents it (double quotes only)."""
    line = line.replace("\\\n", " ")  # a line ending in a backslash continues
    words, i = [], 0
    while True:
        while i < len(line) and line[i] in " \t":
            i += 1
        if i >= len(line):
            return words
        assert line[i] == '"', "every word is quoted: %r" % line[i:]
        i += 1
        out = []
        while line[i] != '"':
            char = line[i]
            if char == "\\":
                nxt = line[i + 1]
                if nxt == "x":
                    out.append(chr(int(line[i + 2:i + 4], 16)))
                    i += 4
                    continue
                out.append(C_ESCAPES[nxt])
                i += 2
                continue
            if char in "%$":
                assert line[i + 1] == char, "a lone %s would be expanded by systemd: %r" % (char, line)
                out.append(char)
                i += 2
                continue
            out.append(char)
            i += 1
        words.append("".join(out))
        i += 1


def test_filters_are_registered():
    assert sorted(FilterModule().filters()) == ["systemd_environment", "systemd_exec_args", "systemd_quote",
                                                "systemd_unit_name", "systemd_value"]


@pytest.mark.parametrize("word, quoted", [
    ("serve", '"serve"'),
    ("/shared/kimi k2.5", '"/shared/kimi k2.5"'),
    ('{"max_tokens": 8}', '"{\\"max_tokens\\": 8}"'),
    ("C:\\temp", '"C:\\\\temp"'),
    ("90%", '"90%%"'),
    ("%n", '"%%n"'),
    ("$HOME", '"$$HOME"'),
    ("${X}", '"$${X}"'),
    ("a\nb\tc", '"a\\nb\\tc"'),
    ("bell\x07", '"bell\\x07"'),
    ("", '""'),
    (";", '";"'),
    ("über", '"über"'),
    (8, '"8"'),
    (0.95, '"0.95"'),
])
def test_systemd_quote(word, quoted):
    assert systemd_quote(word) == quoted


def test_exec_args_quotes_every_word_on_one_line():
    argv = ["/opt/vllm/current/bin/vllm", "serve", "/shared/kimi-k2.5-nvfp4", "--served-model-name", "kimi-k2.5",
            "--port", 8000, "--enable-expert-parallel"]
    assert systemd_exec_args(argv) == (
        '"/opt/vllm/current/bin/vllm" "serve" "/shared/kimi-k2.5-nvfp4" "--served-model-name" "kimi-k2.5" '
        '"--port" "8000" "--enable-expert-parallel"')


def test_exec_args_wrapped_one_word_per_line():
    text = systemd_exec_args(["/usr/bin/vllm", "serve", "m"], wrap=True)
    assert text == '"/usr/bin/vllm" \\\n    "serve" \\\n    "m"'
    assert all(line.endswith(" \\") for line in text.split("\n")[:-1])


NASTY = [
    "/opt/my env/bin/vllm", "serve", "/models/a b", "--chat-template", "{{ messages }} 100% \"quoted\" $USER ${HOME}",
    "--override-generation-config", '{"temperature": 0.6, "stop": ["\\n"]}', "", ";", "tab\there", "back\\slash\\",
    "multi\nline", "%%already", "$$", "'single'",
]


@pytest.mark.parametrize("wrap", [False, True])
def test_exec_args_round_trip_through_systemd_rules(wrap):
    line = systemd_exec_args(NASTY, wrap=wrap)
    assert systemd_read_words(line) == NASTY
    # nothing systemd would expand is left unescaped
    unquoted = re.sub(r"%%|\$\$", "", line)
    assert "%" not in unquoted and "$" not in unquoted


def test_exec_args_refuses_a_shell_string_and_relative_programs():
    with pytest.raises(AnsibleFilterError, match="needs a list of words"):
        systemd_exec_args("/usr/bin/vllm serve model")
    with pytest.raises(AnsibleFilterError, match="empty command line"):
        systemd_exec_args([])
    with pytest.raises(AnsibleFilterError, match="absolute path"):
        systemd_exec_args(["vllm", "serve"])


def test_exec_args_refuses_values_without_one_text_form():
    with pytest.raises(AnsibleFilterError, match="word 2 of the command line is the boolean True"):
        systemd_exec_args(["/usr/bin/vllm", "serve", True])
    with pytest.raises(AnsibleFilterError, match="is empty"):
        systemd_exec_args(["/usr/bin/vllm", None])
    with pytest.raises(AnsibleFilterError, match="not a single word"):
        systemd_exec_args(["/usr/bin/vllm", ["a", "b"]])


def test_environment_lines_sorted_and_quoted():
    env = {
        "VLLM_STANDIN_LOAD_SECONDS": "3",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        "NCCL_DEBUG": "INFO",
        "HF_HOME": "/srv/hf cache",
        "VLLM_LOGGING_PREFIX": '[%n] "$HOSTNAME"',
        "PATTERN": "a\\b",
        "TP": 8,
    }
    assert systemd_environment(env) == [
        'Environment="CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"',
        'Environment="HF_HOME=/srv/hf cache"',
        'Environment="NCCL_DEBUG=INFO"',
        'Environment="PATTERN=a\\\\b"',
        'Environment="TP=8"',
        'Environment="VLLM_LOGGING_PREFIX=[%%n] \\"$HOSTNAME\\""',  # no $ expansion in Environment=
        'Environment="VLLM_STANDIN_LOAD_SECONDS=3"',
    ]


def test_environment_empty_and_invalid():
    assert systemd_environment({}) == []
    assert systemd_environment(None) == []
    with pytest.raises(AnsibleFilterError, match="name '1BAD' is not valid"):
        systemd_environment({"1BAD": "x"})
    with pytest.raises(AnsibleFilterError, match="name 'A B' is not valid"):
        systemd_environment({"A B": "x"})
    with pytest.raises(AnsibleFilterError, match="VLLM_USE_V1 is the boolean True"):
        systemd_environment({"VLLM_USE_V1": True})
    with pytest.raises(AnsibleFilterError, match="needs a dict"):
        systemd_environment(["A=1"])


def test_value_doubles_percent_and_refuses_line_breaks():
    assert systemd_value("vLLM kimi-k2.5 (100% GPUs)") == "vLLM kimi-k2.5 (100%% GPUs)"
    assert systemd_value("/srv/vllm $HOME") == "/srv/vllm $HOME"
    with pytest.raises(AnsibleFilterError, match="line break"):
        systemd_value("two\nlines")


@pytest.mark.parametrize("value, words", [
    ("vLLM\tx", "service_description holds a control character (U+0009) at character 5 of 'vLLM\\tx'"),
    ("a\x85b", "service_description holds a line break (U+0085)"),
    ("a\u2028b", "service_description holds a line break (U+2028)"),
    ("a\x1bb", "service_description holds a control character (U+001B)"),
    ("vLLM\\", "service_description ends in a backslash"),
])
def test_value_names_the_variable_and_shows_the_value_escaped(value, words):
    with pytest.raises(AnsibleFilterError) as err:
        systemd_value(value, "service_description")
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_value_error_cuts_a_long_value():
    with pytest.raises(AnsibleFilterError) as err:
        systemd_value("x" * 10000 + "\n", "service_description")
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("name, unit", [
    ("vllm-kimi-k25", "vllm-kimi-k25.service"),
    ("vllm-kimi-k25.service", "vllm-kimi-k25.service"),
    ("vllm@kimi", "vllm@kimi.service"),
    ("a:b_c.d\\x2d", "a:b_c.d\\x2d.service"),
])
def test_unit_name_accepts_systemd_names(name, unit):
    assert systemd_unit_name(name, "fleet_unit_name") == unit


@pytest.mark.parametrize("name, words", [
    ("../../etc/cron.d/x", "cannot have"),
    ("vllm kimi", "cannot have"),
    ("", "is empty"),
    (".service", "is empty"),
    ("-vllm", "starts with -"),
    (".hidden", "starts with -"),
    ("a..b", "holds '..'"),
    ("vllm@", "is a template"),
    ("x" * 250, "255 characters"),
    ("vllm\nx", "holds a line break"),
])
def test_unit_name_refuses_what_is_not_one_unit_file_name(name, words):
    with pytest.raises(AnsibleFilterError) as err:
        systemd_unit_name(name, "fleet_unit_name")
    assert "fleet_unit_name" in str(err.value)
    assert words in str(err.value)


def test_value_problems_names_each_variable_and_item():
    problems = value_problems({
        "ok": "/models/kimi", "n": 5, "flag": True, "none": None,
        "lst": ["a", "b\nc"], "env": {"K": "v\r", "B\nAD": "x"},
        "pkgs": ["vllm", "--index-url=http://x"], "model": "-m",
    }, options=["pkgs", "model"])
    assert problems[0].startswith("lst[1] holds a line break (U+000A)")
    assert problems[1].startswith("env.K holds a line break (U+000D)")
    assert problems[2].startswith("env (a key) holds a line break (U+000A)")
    assert problems[3] == ("pkgs[1] is '--index-url=http://x', which starts with '-': the program would read it as "
                           "an option of its own, not as a value")
    assert problems[4].startswith("model is '-m', which starts with '-'")
    assert len(problems) == 5


def test_value_problems_refuses_bad_arguments():
    with pytest.raises(AnsibleFilterError, match="needs a dict"):
        value_problems(["x"])
    with pytest.raises(AnsibleFilterError, match="not among the values checked"):
        value_problems({"a": "x"}, options=["b"])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=40))
def test_value_problems_flags_exactly_the_values_that_could_break_a_line(text):
    problems = value_problems({"v": text})
    unsafe = any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in text)
    assert bool(problems) == unsafe
    for problem in problems:
        assert not any(ord(c) < 0x20 for c in problem)
    if not unsafe:
        rendered = systemd_value(text, "v") if not text.endswith("\\") else None
        if rendered is not None:
            assert "\n" not in rendered and "\r" not in rendered


def test_value_problems_lets_quoted_values_hold_line_breaks_but_not_nul():
    values = {"args": ["--override-generation-config", '{"a": 1,\n\t"b": 2}'], "env": {"PEM": "-----BEGIN\nX\n"},
              "bad": ["1\x00"], "keys": {"A\nB": "x"}}
    problems = value_problems(values, quoted=["args", "env", "bad", "keys"])
    assert len(problems) == 2
    assert problems[0].startswith("bad[0] holds a NUL character (U+0000) at character 2")
    assert problems[1].startswith("keys (a key) holds a line break")


def test_exec_words_refuse_nul():
    with pytest.raises(AnsibleFilterError, match="holds a NUL character"):
        systemd_exec_args(["/bin/vllm", "a\x00b"])
    with pytest.raises(AnsibleFilterError, match="holds a NUL character"):
        systemd_environment({"A": "\x00"})
