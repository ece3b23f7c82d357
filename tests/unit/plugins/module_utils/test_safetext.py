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


# Every Default_Ignorable_Code_Point of Unicode (DerivedCoreProperties.txt) that an earlier list missed, and the
# format characters (category Cf) beyond it: each renders as nothing, so "kimi" + U+FE0F looked like "kimi".
MISSED_RANGES = [(0xFE00, 0xFE0F), (0xE0100, 0xE01EF), (0x180F, 0x180F), (0x2065, 0x2065), (0x206A, 0x206F),
                 (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0080, 0xE0FFF), (0xFFF0, 0xFFF8),
                 (0x0600, 0x0605), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x110BD, 0x110BD)]


def _escaped(code):
    if code < 0x100:
        return "\\x%02x" % code
    return "\\U%08x" % code if code > 0xFFFF else "\\u%04x" % code


def test_every_invisible_code_point_of_the_missed_ranges_is_escaped():
    for first, last in MISSED_RANGES:
        for code in range(first, last + 1):
            char = chr(code)
            assert safetext.printable_block(u"kimi%s\n" % char) == "kimi%s\n" % _escaped(code), hex(code)
            assert safetext.one_line(u"kimi%s" % char) == "kimi%s" % _escaped(code), hex(code)


def test_every_format_character_and_default_ignorable_of_this_python_is_escaped():
    import unicodedata
    for code in range(0x80, 0x110000):
        char = chr(code)
        if unicodedata.category(char) == "Cf":
            assert safetext.one_line(char) == _escaped(code), hex(code)
    assert safetext.one_line(u"kimi\ufe0f") == "kimi\\ufe0f"
    # visible text is left alone: accents, CJK, emoji (the selector after it is shown), private use
    assert safetext.one_line(u"caf\u00e9 \u4e2d \U0001f600 \ue000") == u"caf\u00e9 \u4e2d \U0001f600 \ue000"
    assert safetext.one_line(u"\u2764\ufe0f") == u"\u2764\\ufe0f"


def test_the_phases_callback_uses_the_same_escaping():
    from ansible_collections.gpufleet.vllm.plugins.callback import phases
    assert phases.printable_block is safetext.printable_block
