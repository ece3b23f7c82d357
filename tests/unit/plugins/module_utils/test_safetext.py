# SPDX-License-Identifier: GPL-3.0-or-later
"""safetext.valid_text: one way of making any text valid UTF-8 for a result or a message, used by every module_utils.

A lone surrogate that does not stand for a byte (a JSON string may carry
"\\ud800") used to raise UnicodeEncodeError in the copies that assumed every
surrogate came from surrogateescape: a journal line, a command's error, a
rollout summary row and a GPU name.
"""

import json

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import bounded, nvml, safetext, systemd

from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import valid_text


@pytest.mark.parametrize("value, expected", [
    ("plain text", "plain text"),
    (u"caf\u00e9 \u2713", u"caf\u00e9 \u2713"),
    (b"dump-\xff.pt", "dump-\\xff.pt"),
    (b"dump-\xff.pt".decode("utf-8", "surrogateescape"), "dump-\\xff.pt"),
    (u"a\ud800b", "a\\ud800b"),
    (u"\ud800" + b"\xfe".decode("utf-8", "surrogateescape"), "\\ud800\\xfe"),
    (42, "42"),
])
def test_valid_text_escapes_what_is_not_utf8_and_keeps_the_rest(value, expected):
    shown = valid_text(value)
    assert shown == expected
    json.dumps(shown, ensure_ascii=False).encode("utf-8")


LONE = u"GPU \ud800 name"


def test_a_lone_surrogate_reaches_every_former_copy_without_an_error():
    assert systemd._shown_line(LONE) == "'GPU \\\\ud800 name'"
    assert bounded.command_failure(["systemctl", "show"], 1, LONE) == "systemctl show failed (exit 1): GPU \\ud800 name"
    assert rollout_report.one_line(LONE) == "GPU \\ud800 name"
    assert nvml._text(LONE) == "GPU \\ud800 name"


def test_the_module_utils_share_one_helper():
    # the same function object, not a copy that drifts
    for module in (bounded, nvml, rollout_report, systemd):
        assert module.valid_text is safetext.valid_text


@pytest.mark.parametrize("char", [u"\u061c", u"\u200b", u"\u200c", u"\u200d", u"\u200e", u"\u200f", u"\u202a",
                                  u"\u202e", u"\u2060", u"\u2063", u"\u2064", u"\u2066", u"\u2069", u"\ufeff"])
def test_printable_block_shows_zero_width_and_bidi_marks_as_escapes(char):
    # what a reader sees is what the file holds: "admin\u200b" is not "admin", a mark does not reorder the line
    shown = safetext.printable_block(u"token = 'admin%s'\n" % char)
    assert shown == "token = 'admin\\u%04x'\n" % ord(char)
    assert safetext.printable_block(u"caf\u00e9 \u2713 \u00a0\u4e2d\n") == u"caf\u00e9 \u2713 \u00a0\u4e2d\n"


@pytest.mark.parametrize("text, expected", [
    ("# All clear", "\\# All clear"), ("> quoted", "\\> quoted"), ("- item", "\\- item"), ("+ item", "\\+ item"),
    ("* item", "\\* item"), ("1. item", "1\\. item"), ("12) item", "12\\) item"), ("===", "\\==="),
    ("        indented code", "indented code"), ("no wheel of vllm 0.33.0 (wheel_dirs)", "no wheel of vllm 0.33.0 (wheel_dirs)"),
    ("a\\[b] \\x1b _c_ &amp; ~~s~~", "a\\\\\\[b\\] \\x1b \\_c\\_ \\&amp; \\~\\~s\\~\\~"),
])
def test_markdown_inline_leaves_no_markup_of_the_hosts_text(text, expected):
    assert safetext.markdown_inline(text, block_start=True) == expected
