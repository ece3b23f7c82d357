# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet lock: written and read back, hostile locks refused with the line named, fitting a host, and the
dependency diff an operator reads."""

import time

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils import lockfile as lf
from ansible_collections.gpufleet.vllm.plugins.module_utils import pkgnames

H1 = "a" * 64
H2 = "b" * 64
H3 = "c" * 64

BODY = """lark==1.2.2 \\
    --hash=sha256:%s \\
    --hash=sha256:%s
    # via vllm
nvidia-ml-py==13.615.71 \\
    --hash=sha256:%s
    # via
    #   -r -
    #   vllm
    # from https://mirror.example/simple

vllm==0.33.0 \\
    --hash=sha256:%s
    # via -r -
""" % (H1, H2, H3, H1)

META = {
    "python_version": "3.12",
    "python_platform": "x86_64-manylinux_2_36",
    "package": "vllm",
    "sources": "index https://mirror.example/simple; extra-index https://wheels.vllm.ai/abc123",
    "excluded": [],
    "resolved_at": "2026-12-05T13:47:43Z",
    "resolver": "uv 0.13.9",
}


def good_lock(body=BODY, **meta):
    values = dict(META)
    values.update(meta)
    return lf.render_lock(values, body)


def test_render_writes_the_header_uv_reads_as_comments():
    text = good_lock()
    lines = text.splitlines()
    assert lines[0] == "# gpufleet.vllm lock v2"
    assert lines[1:9] == [
        "# python-version: 3.12",
        "# python-platform: x86_64-manylinux_2_36",
        "# package: vllm==0.33.0",
        "# sources: index https://mirror.example/simple; extra-index https://wheels.vllm.ai/abc123",
        "# excluded: none",
        "# resolved-at: 2026-12-05T13:47:43Z",
        "# resolver: uv 0.13.9",
        "# fingerprint: " + pkgnames.set_fingerprint([("lark", "1.2.2"), ("nvidia-ml-py", "13.615.71"),
                                                      ("vllm", "0.33.0")]),
    ]
    assert lines[9] == "lark==1.2.2 \\"
    # the trailer: the digest of the header and of every pin with its hashes
    assert lines[-2] == "    # via -r -"
    assert lines[-1] == "# digest: " + lf.digest_of(lf.parse_lock(text)["packages"], lines[:9])
    assert text.endswith("\n")


def test_parse_gives_meta_pins_and_fingerprint():
    parsed = lf.parse_lock(good_lock(excluded=["Flash_Attn", "gguf"]))
    assert parsed["meta"]["excluded"] == ["flash-attn", "gguf"]
    assert parsed["meta"]["python_platform"] == "x86_64-manylinux_2_36"
    assert parsed["package"] == {"name": "vllm", "version": "0.33.0"}
    assert parsed["packages"]["lark"] == {"name": "lark", "version": "1.2.2",
                                          "hashes": ["sha256:" + H1, "sha256:" + H2]}
    assert sorted(parsed["packages"]) == ["lark", "nvidia-ml-py", "vllm"]
    assert parsed["fingerprint"] == parsed["meta"]["fingerprint"]
    assert lf.versions(parsed) == {"lark": "1.2.2", "nvidia-ml-py": "13.615.71", "vllm": "0.33.0"}


def test_spelling_of_names_and_versions_is_canonical_in_the_fingerprint():
    body = "Typing_Extensions==4.12.2 \\\n    --hash=sha256:%s\nvllm==0.33.0 --hash=sha256:%s\n" % (H1, H2)
    parsed = lf.parse_lock(good_lock(body))
    assert parsed["packages"]["typing-extensions"]["version"] == "4.12.2"
    assert parsed["fingerprint"] == pkgnames.set_fingerprint([("typing-extensions", "4.12.2"), ("vllm", "0.33.0")])


def test_bytes_are_read_like_text():
    text = good_lock()
    assert lf.parse_lock(text.encode("utf-8")) == lf.parse_lock(text)


def test_a_package_given_as_name_must_be_pinned():
    with pytest.raises(lf.LockError) as err:
        good_lock(package="torch")
    assert "does not hold torch" in str(err.value)


def test_render_refuses_bad_meta():
    with pytest.raises(lf.LockError) as err:
        good_lock(python_version="3.12\n# fingerprint: x")
    assert "python-version" in str(err.value)
    with pytest.raises(lf.LockError):
        good_lock(resolved_at="yesterday")
    with pytest.raises(lf.LockError):
        good_lock(sources="")


def replace_line(text, number, new):
    lines = text.split("\n")
    lines[number - 1] = new
    return "\n".join(lines)


def insert_line(text, number, new):
    lines = text.split("\n")
    lines.insert(number - 1, new)
    return "\n".join(lines)


GOOD = good_lock()
# the body starts on line 10; line 10 is 'lark==1.2.2 \', line 22 'vllm==0.33.0 \'


def refit(text):
    """TEXT with its header fingerprint recomputed from its pins, so that only the refusal under test fires."""
    packages = {}
    for line in text.split("\n"):
        word = line.strip().split(" ")[0]
        if "==" in word and not line.startswith("#"):
            name, _sep, version = word.partition("==")
            packages[name] = version
    return text.replace(lf.parse_lock(GOOD)["fingerprint"],
                        pkgnames.set_fingerprint(packages.items()))


HOSTILE = [
    ("empty", "", "line 1: missing header"),
    ("no header", BODY, "line 1: missing header"),
    ("another format", GOOD.replace("lock v2", "lock v1", 1), "lock format this collection does not know"),
    ("no-break space", GOOD.replace("vllm==0.33.0 \\", "vllm==0.33.0\u00a0\\"),
     "holds a space that is not an ASCII blank or tab"),
    ("unknown header key", insert_line(GOOD, 3, "# python-abi: cp312"), "line 3: unknown header key 'python-abi'"),
    ("header key twice", insert_line(GOOD, 3, "# python-version: 3.11"), "line 3: header key 'python-version' is "
                                                                         "given twice"),
    ("missing meta key", GOOD.replace("# resolver: uv 0.13.9\n", ""), "the header lacks resolver"),
    ("bad python version", GOOD.replace("python-version: 3.12", "python-version: 3"), "line 2: python-version '3'"),
    ("bad fingerprint form", GOOD.replace("# fingerprint: sha256:", "# fingerprint: md5:"), "line 9: fingerprint"),
    ("pins edited", GOOD.replace("lark==1.2.2", "lark==1.3.1"), "edited after it was made"),
    ("pin removed", GOOD.replace("nvidia-ml-py==13.615.71 \\\n    --hash=sha256:%s\n" % H3, ""),
     "edited after it was made"),
    ("header package not pinned", refit(GOOD.replace("package: vllm==0.33.0", "package: torch==2.9.0")),
     "the package of its header, torch==2.9.0, is not among its pins"),
    ("header package at another version", refit(GOOD.replace("package: vllm==0.33.0", "package: vllm==0.34.0")),
     "the header names vllm==0.34.0 but the pin is vllm==0.33.0"),
    ("not utf-8", GOOD.encode("utf-8").replace(b"# via vllm", b"# via \xff\xfe"), "line 13: is not UTF-8"),
    ("control character", GOOD.replace("# via vllm", "# via \x1b[2Jvllm"), "line 13: holds a control character"),
    ("carriage returns", GOOD.replace("\n", "\r\n"), "line 1: holds a control character (U+000D)"),
    ("nul", GOOD.replace("# via vllm", "# via\x00"), "line 13: holds a control character (U+0000)"),
    ("editable", insert_line(GOOD, 10, "-e git+https://evil.example/x.git#egg=x"), "line 10: "),
    ("include another file", insert_line(GOOD, 10, "-r /etc/passwd"), "is an option line"),
    ("constraints", insert_line(GOOD, 10, "-c other.txt"), "is an option line"),
    ("index url", insert_line(GOOD, 10, "--index-url https://evil.example/simple"), "line 10: "),
    ("extra index url", insert_line(GOOD, 10, "--extra-index-url=https://evil.example/simple"), "is an option line"),
    ("find links", insert_line(GOOD, 10, "-f https://evil.example/wheels"), "is an option line"),
    ("a URL requirement", refit(insert_line(GOOD, 10, "evil @ https://evil.example/evil-1.0-py3-none-any.whl "
                                                      "--hash=sha256:%s" % H1)), "line 10: "),
    ("a marker", refit(GOOD.replace("lark==1.2.2 \\", "lark==1.2.2 ; python_version < '3.13' \\")),
     "line 10: 'lark==1.2.2 ; python_version"),
    ("extras", refit(GOOD.replace("lark==1.2.2 \\", "lark[nearley]==1.2.2 \\")), "names extras"),
    ("a range", GOOD.replace("lark==1.2.2 \\", "lark>=1.2 \\"), "line 10: 'lark>=1.2' is not name==version"),
    ("a wildcard", GOOD.replace("lark==1.2.2 \\", "lark==1.2.* \\"), "is not name==version"),
    ("a path", insert_line(GOOD, 10, "./evil-1.0-py3-none-any.whl --hash=sha256:%s" % H1), "is not name==version"),
    ("no hash", refit(insert_line(GOOD, 10, "evil==1.0")), "line 10: evil==1.0 has no --hash=sha256"),
    ("md5 hash", refit(insert_line(GOOD, 10, "evil==1.0 --hash=md5:%s" % ("d" * 32))),
     "is not --hash=sha256:<64 hex digits>"),
    ("short hash", GOOD.replace("--hash=sha256:%s \\" % H1, "--hash=sha256:abc \\"), "line 11: '--hash=sha256:abc'"),
    ("a word after the pin", refit(insert_line(GOOD, 10, "evil==1.0 --no-deps --hash=sha256:%s" % H1)),
     "'--no-deps' after evil==1.0 is not --hash"),
    ("duplicate", insert_line(GOOD, 10, "LARK==1.2.2 --hash=sha256:%s" % H1),
     "line 11: lark is pinned a second time (first on line 10)"),
    ("comment inside a continuation", GOOD.replace("--hash=sha256:%s \\\n" % H1, "--hash=sha256:%s \\\n#x\n" % H1),
     "a comment inside the requirement that starts on line 10"),
    ("ends in a continuation", GOOD.rstrip("\n").rsplit("\n", 1)[0].replace(
        "--hash=sha256:%s\n    # via -r -" % H1, "") + " \\\n", "the file ends in the middle of the requirement"),
    ("header only", "\n".join(GOOD.split("\n")[:9]) + "\n", "holds no pinned requirement"),
    ("huge", GOOD + ("# via x\n" * (lf.MAX_BYTES // 8 + 1)), "more than the 4 MiB"),
    ("too many lines", GOOD + ("\n" * lf.MAX_LINES), "lines, more than the 100000"),
    ("a long line", GOOD + "# " + "x" * lf.MAX_LINE + "\n", "characters long, more than the 4096"),
    ("too many hashes", refit(insert_line(GOOD, 10, "evil==1.0 " + " ".join(
        "--hash=sha256:%064x" % i for i in range(lf.MAX_HASHES + 1)).replace(" ", " \\\n"))),
     "evil==1.0 has more than 1024 hashes, the most a pin may have"),
]


@pytest.mark.parametrize("text,words", [(t, w) for _n, t, w in HOSTILE], ids=[n for n, _t, _w in HOSTILE])
def test_hostile_locks_are_refused_naming_what_and_where(text, words):
    with pytest.raises(lf.LockError) as err:
        lf.parse_lock(text, where="fleet.lock")
    message = str(err.value)
    assert message.startswith("fleet.lock")
    assert words in message


def with_one_pin(count, per_line=1):
    """A lock whose one pin, vllm, carries COUNT hashes, PER_LINE on each continued line (fingerprint and digest
    are not recomputed: the refusals under test come before them)."""
    head, _sep, _rest = GOOD.partition("lark==1.2.2 \\\n")
    words = ["--hash=sha256:%064x" % i for i in range(count)]
    lines = [" ".join(words[i:i + per_line]) for i in range(0, count, per_line)]
    return head + "vllm==0.33.0 \\\n" + "".join("    %s \\\n" % line for line in lines[:-1]) + \
        "    %s\n# digest: sha256:%s\n" % (lines[-1], H1)


def test_a_pin_past_the_hash_bound_is_refused_at_the_first_hash_past_it(monkeypatch):
    # 40 hashes a line, 60 lines: the refusal reads the hashes up to the first past the bound, not the rest
    calls = []
    real = lf._HASH

    class Counting(object):
        @staticmethod
        def match(word):
            calls.append(word)
            return real.match(word)

    monkeypatch.setattr(lf, "_HASH", Counting)
    with pytest.raises(lf.LockError) as err:
        lf.parse_lock(with_one_pin(2400, per_line=40), where="fleet.lock")
    assert "vllm==0.33.0 has more than %d hashes, the most a pin may have" % lf.MAX_HASHES in str(err.value)
    assert "fleet.lock, line %d:" % (11 + lf.MAX_HASHES // 40) in str(err.value)  # (the line of the 1025th)
    assert len(calls) == lf.MAX_HASHES + 1


def test_a_pin_continued_past_the_bound_is_refused_naming_it_and_the_bound():
    with pytest.raises(lf.LockError) as err:
        lf.parse_lock(with_one_pin(5000), where="fleet.lock")
    assert str(err.value) == (
        "fleet.lock, line %d: 'vllm==0.33.0', the requirement that starts on line 10, goes on for more than %d lines; "
        "a pin may have at most %d hashes, one a line." % (10 + lf.MAX_HASHES + 1, lf.MAX_HASHES + 1, lf.MAX_HASHES))


def cpu_seconds(text, repeats=3):
    """The least CPU time of REPEATS parses of TEXT (each refused)."""
    best = None
    for _i in range(repeats):
        started = time.process_time()
        with pytest.raises(lf.LockError):
            lf.parse_lock(text)
        spent = time.process_time() - started
        best = spent if best is None else min(best, spent)
    return best


def test_parsing_a_huge_pin_costs_time_linear_in_its_size():
    # a pin of 10,000 hashes and one of 40,000, one a line (3.4 MB, under the 4 MiB a lock may be): four times the
    # text costs about four times the CPU, never the sixteen times of a parse quadratic in the lines (the ratio,
    # not a number of seconds, so a busy or slow machine does not change the verdict)
    small, large = with_one_pin(10000), with_one_pin(40000)
    assert len(large) < lf.MAX_BYTES
    ratio = cpu_seconds(large) / max(cpu_seconds(small), 1e-4)
    assert ratio < 8, "a 4 times larger lock cost %.1f times the CPU" % ratio


def test_the_refusals_are_for_the_reason_given_not_another():
    # each hostile lock above differs from a good one by its one flaw: the good one parses
    assert lf.parse_lock(GOOD)["package"]["version"] == "0.33.0"
    assert lf.parse_lock(refit(GOOD)) == lf.parse_lock(GOOD)


def test_an_option_line_is_named_an_option_line():
    for line in ("-e git+https://evil.example/x.git#egg=x", "--index-url https://evil.example/simple"):
        with pytest.raises(lf.LockError) as err:
            lf.parse_lock(insert_line(GOOD, 10, line))
        assert "is an option line" in str(err.value)


def test_a_url_requirement_is_named_so():
    with pytest.raises(lf.LockError) as err:
        lf.parse_lock(insert_line(GOOD, 10, "evil @ https://evil.example/e.whl --hash=sha256:%s" % H1))
    assert "is a URL or path requirement" in str(err.value)


def test_via_comments_blank_lines_and_inline_comments_are_fine():
    text = GOOD.replace("# via vllm", "# via vllm\n\n    # a note: not a header") \
        .replace("vllm==0.33.0 \\", "vllm==0.33.0 \\  # the server")
    assert lf.parse_lock(text)["fingerprint"] == lf.parse_lock(GOOD)["fingerprint"]


def test_uppercase_hex_is_read_in_lower_case():
    text = GOOD.replace("--hash=sha256:%s \\" % H1, "--hash=sha256:%s \\" % H1.upper(), 1)
    assert lf.parse_lock(text)["packages"]["lark"]["hashes"][0] == "sha256:" + H1


# --- fitting a host --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("platform,python,machine,glibc,expected", [
    ("x86_64-manylinux_2_36", "3.12.3", "x86_64", "2.36", []),
    ("x86_64-manylinux_2_36", "3.12", "x86_64", "glibc 2.39", []),
    ("x86_64-manylinux_2_28", "3.12", "amd64", ("glibc", "2.31"), []),
    ("linux", "3.12", "x86_64", "2.17", []),
    ("x86_64-unknown-linux-gnu", "3.12", "x86_64", "2.28", []),
    ("x86_64-manylinux2014", "3.12", "x86_64", "2.17", []),
    ("x86_64-manylinux_2_36", "", "", "", []),
    ("x86_64-manylinux_2_36", "3.11.9", "x86_64", "2.36",
     ["the lock is for Python 3.12, this host's environment runs Python 3.11"]),
    ("x86_64-manylinux_2_36", "3.12", "aarch64", "2.36",
     ["the lock is for x86_64 (x86_64-manylinux_2_36), this host is aarch64"]),
    ("aarch64-manylinux_2_28", "3.12", "arm64", "2.28", []),
    ("x86_64-manylinux_2_36", "3.12", "x86_64", "2.35",
     ["the lock needs glibc 2.36 or newer (x86_64-manylinux_2_36), this host has glibc 2.35"]),
    ("x86_64-manylinux_2_40", "3.12", "x86_64", "2.9",
     ["the lock needs glibc 2.40 or newer (x86_64-manylinux_2_40), this host has glibc 2.9"]),
    ("x86_64-unknown-linux-musl", "3.12", "x86_64", "2.36",
     ["the lock is for musl Linux (x86_64-unknown-linux-musl), this host has glibc"]),
    ("macos", "3.12", "x86_64", "2.36", ["the lock is for macOS (macos), not for Linux"]),
    ("x86_64-pc-windows-msvc", "3.12", "x86_64", "2.36", ["the lock is for Windows (x86_64-pc-windows-msvc), not "
                                                          "for Linux"]),
    ("riscv64-something-odd", "3.12", "riscv64", "2.36",
     ["the lock's platform 'riscv64-something-odd' is not one this collection can check against a Linux host"]),
])
def test_check_target(platform, python, machine, glibc, expected):
    meta = {"python_version": "3.12", "python_platform": platform}
    assert lf.check_target(meta, python, machine, glibc) == expected


def test_check_target_lists_every_problem():
    meta = lf.parse_lock(GOOD)["meta"]
    assert len(lf.check_target(meta, "3.10.4", "aarch64", "2.31")) == 3


# --- the dependency diff ---------------------------------------------------------------------------------------

def env(**pins):
    return dict((name.replace("_", "-"), value if isinstance(value, dict) else {"version": value})
                for name, value in pins.items())


def test_diff_added_removed_changed_source_changed_and_unchanged():
    before = env(vllm="0.33.0", lark="1.2.2", foo="1.0", torch="2.9.0",
                 gguf={"version": "0.17.1", "source": "git+https://github.com/ggml-org/llama.cpp@abc1234"})
    after = env(vllm="0.33.1.dev7+gabc", lark="1.3.1", torch="2.9.0", gguf="0.17.1", numpy_lite="1.0")
    diff = lf.dependency_diff(before, after)
    assert diff["changed"] == [{"name": "lark", "old": "1.2.2", "new": "1.3.1"},
                               {"name": "vllm", "old": "0.33.0", "new": "0.33.1.dev7+gabc"}]
    assert diff["added"] == [{"name": "numpy-lite", "version": "1.0"}]
    assert diff["removed"] == [{"name": "foo", "version": "1.0"}]
    assert diff["source_changed"] == [{"name": "gguf", "old": "git+https://github.com/ggml-org/llama.cpp@abc1234",
                                       "new": "index", "version": "0.17.1"}]
    assert diff["unchanged"] == 1
    assert diff["counts"] == "2 changed, 1 added, 1 removed, 1 source changed (1 unchanged)"
    assert lf.diff_lines(diff, 10) == [
        "lark 1.2.2 -> 1.3.1",
        "vllm 0.33.0 -> 0.33.1.dev7+gabc",
        "+ numpy-lite 1.0",
        "- foo 1.0",
        "gguf: git+https://github.com/ggml-org/llama.cpp@abc1234 -> index",
    ]


def test_diff_of_the_same_set_in_other_spellings_is_no_change():
    before = env(Typing_Extensions="4.12.2", PyNvVideoCodec="1.0-1")
    after = {"typing-extensions": {"version": "4.12.2", "source": "index"},
             "pynvvideocodec": {"version": "1.0.post1"}}
    diff = lf.dependency_diff(before, after)
    assert diff["counts"] == "no change (2 unchanged)"
    assert lf.diff_lines(diff) == []


def test_diff_from_nothing_and_to_nothing():
    assert lf.dependency_diff({}, env(a="1"))["counts"] == "1 added (0 unchanged)"
    assert lf.dependency_diff(env(a="1"), None)["removed"] == [{"name": "a", "version": "1"}]


def test_a_version_and_source_change_is_listed_in_both():
    diff = lf.dependency_diff(env(gguf={"version": "0.17.0", "source": "git+https://x/y@abc"}), env(gguf="0.17.1"))
    assert lf.diff_lines(diff) == ["gguf 0.17.0 -> 0.17.1", "gguf: git+https://x/y@abc -> index"]


def test_diff_lines_are_bounded_and_say_how_many_more():
    diff = lf.dependency_diff({}, dict(("p%03d" % i, {"version": "1"}) for i in range(160)))
    lines = lf.diff_lines(diff, 5)
    assert lines == ["+ p000 1", "+ p001 1", "+ p002 1", "+ p003 1", "... and 156 more"]


def test_diff_hides_credentials_and_control_characters_and_cuts_long_sources():
    before = env(a={"version": "1", "source": "git+https://user:token@git.example/a.git@" + "f" * 40})
    after = env(a={"version": "1", "source": "url:https://x.example/\x1b[31m" + "y" * 200})
    diff = lf.dependency_diff(before, after)
    assert "token" not in repr(diff)
    line = lf.diff_lines(diff)[0]
    assert "token" not in line and "***@git.example" in line
    assert "\x1b" not in line and len(line) < 200


def test_a_hash_changed_after_the_lock_was_made_is_refused():
    # the fingerprint (names and versions, what a host can compute) does not change; the digest does
    swapped = GOOD.replace("vllm==0.33.0 \\\n    --hash=sha256:%s" % H1, "vllm==0.33.0 \\\n    --hash=sha256:%s" % H2)
    assert swapped != GOOD and lf.fingerprint_of(lf._body(swapped.split("\n")[9:], 10, "x")) == lf.parse_lock(GOOD)["fingerprint"]
    with pytest.raises(lf.LockError, match="its header or hashes do not match its digest .* a wheel's hash was changed"):
        lf.parse_lock(swapped)


@pytest.mark.parametrize("line, edited", [("# python-version: 3.12", "# python-version: 3.11"),
                                          ("# python-platform: x86_64-manylinux_2_36", "# python-platform: aarch64-manylinux_2_36"),
                                          ("# excluded: none", "# excluded: torch")])
def test_a_header_changed_after_the_lock_was_made_is_refused(line, edited):
    # a lock made for one Python or platform cannot be made to look like one for another by editing its header
    assert line in GOOD
    with pytest.raises(lf.LockError, match="its header or hashes do not match its digest .* its Python, platform, "
                                           "sources or a wheel's hash was changed"):
        lf.parse_lock(GOOD.replace(line, edited))


@pytest.mark.parametrize("case, words", [("none", "it has no digest line"), ("two", "it has 2 digest lines"),
                                         ("bad form", "digest 'md5:1' is not sha256")])
def test_the_digest_line_is_one_and_well_formed(case, words):
    last = GOOD.rstrip("\n").rsplit("\n", maxsplit=1)[-1]
    text = {"none": GOOD.replace(last + "\n", ""), "two": GOOD + last + "\n",
            "bad form": GOOD.replace(last, "# digest: md5:1")}[case]
    with pytest.raises(lf.LockError) as err:
        lf.parse_lock(text, where="fleet.lock")
    assert words in str(err.value)


# --- what an in-place install fetches before the stop --------------------------------------------------------------

def test_planned_installs_reads_the_plus_and_tilde_lines_of_uv_only():
    output = ("Would install 3 packages\n + Lark==1.3.1\n - lark==1.2.2\n ~ vllm==0.33.0\n"
              " + gguf==0.19.0 \n+ notindented==1\n + bad name==1\n + x==\n -- + y==1\n")
    assert lf.planned_installs(output) == ["gguf", "lark", "notindented", "vllm"]
    assert lf.planned_installs("") == lf.planned_installs(None) == []


def test_fetch_names_and_requirements_of_keep_to_the_locks_pins():
    parsed = lf.parse_lock(lf.render_lock(META, BODY))
    assert lf.fetch_names(parsed, ["vllm", "torch"], None, ["--reinstall-package", "torch"]) == ["vllm"]
    assert lf.fetch_names(parsed, [], {"different": [{"name": "LARK"}], "missing": ["not a dict"]},
                          ["--reinstall-package"]) == ["lark"]
    assert lf.fetch_names(parsed, [], None, ["--reinstall"]) == sorted(parsed["packages"])
    text = lf.requirements_of(parsed, ["Lark"])
    assert text == "lark==1.2.2 \\\n" + "".join(
        "    --hash=%s%s\n" % (digest, " \\" if n + 1 < len(parsed["packages"]["lark"]["hashes"]) else "")
        for n, digest in enumerate(parsed["packages"]["lark"]["hashes"]))
    with pytest.raises(lf.LockError, match="the lock does not pin 'torch'"):
        lf.requirements_of(parsed, ["torch"])
    assert lf.requirements_of(parsed, []) == ""


def test_hash_mismatch_reads_uvs_expected_and_computed_digests():
    a, b, c = ("sha256:" + ch * 64 for ch in "abc")
    said = ("error: Failed to download `vllm==0.33.0`\n  cause: Hash mismatch for `vllm==0.33.0`\n\n"
            "         Expected:\n           %s\n           %s\n\n         Computed:\n           %s\n"
            "warning: something else\n           sha256:%s\n" % (a, b, c.upper().replace("SHA256", "sha256"), "f" * 64))
    assert lf.hash_mismatch(said) == {"name": "vllm", "version": "0.33.0", "expected": [a, b], "computed": [c]}
    assert lf.hash_mismatch("error: Failed to fetch `vllm==0.33.0`\n  Caused by: Connection refused\n") is None
    assert lf.hash_mismatch(None) is None


# --- the bounds at their edge, and the branches no other test takes (each would let a changed comparison pass) --

def test_a_pin_with_exactly_the_most_hashes_is_read_and_duplicates_count_once():
    hashes = ["--hash=sha256:%064x" % i for i in range(lf.MAX_HASHES)]
    body = "vllm==0.33.0 \\\n" + "".join("    %s \\\n" % h for h in hashes) + "    %s\n" % hashes[0]
    parsed = lf.parse_lock(good_lock(body=body))
    assert len(parsed["packages"]["vllm"]["hashes"]) == lf.MAX_HASHES
    assert parsed["packages"]["vllm"]["hashes"][:2] == ["sha256:%064x" % 0, "sha256:%064x" % 1]  # (in order)


def test_exactly_the_most_pins_are_read_and_one_more_is_refused():
    body = "".join("p%05d==1.0 --hash=sha256:%s\n" % (i, H1) for i in range(lf.MAX_PACKAGES - 1))
    body += "vllm==0.33.0 --hash=sha256:%s\n" % H1
    assert len(lf.parse_lock(good_lock(body=body))["packages"]) == lf.MAX_PACKAGES
    with pytest.raises(lf.LockError, match=r"line %d: more than %d pins\." % (10 + lf.MAX_PACKAGES, lf.MAX_PACKAGES)):
        lf.parse_lock(insert_line(good_lock(body=body), 10 + lf.MAX_PACKAGES, "extra==1.0 --hash=sha256:%s" % H1))


def test_a_line_of_exactly_the_most_characters_is_read():
    assert lf.parse_lock(GOOD + "# " + "x" * (lf.MAX_LINE - 2) + "\n")["package"]["version"] == "0.33.0"


def test_a_lock_of_exactly_the_most_bytes_is_read_as_text_and_as_bytes():
    filler = lf.MAX_BYTES - len(GOOD.encode("utf-8"))
    line = "# " + "x" * 4000 + "\n"
    text = GOOD + line * (filler // len(line)) + "#" * (filler % len(line) - 1) + "\n"
    assert len(text.encode("utf-8")) == lf.MAX_BYTES
    assert lf.parse_lock(text)["package"]["version"] == "0.33.0"
    assert lf.parse_lock(text.encode("utf-8"))["package"]["version"] == "0.33.0"
    with pytest.raises(lf.LockError, match="is %d bytes, more than the 4 MiB" % (lf.MAX_BYTES + 1)):
        lf.parse_lock((text + "\n").encode("utf-8"))


def test_text_that_cannot_be_utf8_and_what_is_not_text_are_refused():
    with pytest.raises(lf.LockError, match="cannot be written as UTF-8"):
        lf.parse_lock(GOOD.replace("# via vllm", "# via \udc80"))
    with pytest.raises(lf.LockError, match=r"the lock is not text \(a list\)"):
        lf.parse_lock([GOOD])
    with pytest.raises(lf.LockError, match="line 11: is not UTF-8 text"):
        lf.parse_lock(GOOD.encode("utf-8").replace(b"--hash", b"--h\xffsh", 1))


def test_a_header_like_line_the_collection_does_not_write_is_named():
    with pytest.raises(lf.LockError, match="line 3: '# Python Version: 3.12' is not a header line this collection "
                                           "writes"):
        lf.parse_lock(insert_line(GOOD, 3, "# Python Version: 3.12"))


def test_the_header_package_must_be_the_pinned_version():
    text = GOOD.replace("# package: vllm==0.33.0", "# package: vllm==0.32.0")
    with pytest.raises(lf.LockError, match="the header names vllm==0.32.0 but the pin is vllm==0.33.0"):
        lf.parse_lock(text)


@pytest.mark.parametrize("args, names", [
    (["--reinstall-package=lark"], ["lark"]),
    (["--reinstall-package", "LARK"], ["lark"]),
    (["--reinstall-package"], []),                # (no name after it)
    (["--reinstall-package=not a name"], []),
    (["--reinstall"], ["lark", "nvidia-ml-py", "vllm"]),
])
def test_fetch_names_reads_each_form_of_uvs_reinstall_options(args, names):
    assert lf.fetch_names(lf.parse_lock(GOOD), reinstall=args) == names


@pytest.mark.parametrize("platform, glibc, fits", [
    ("x86_64-manylinux_2_36", "2.36", True), ("x86_64-manylinux_2_36", "2.35", False),
    ("x86_64-manylinux_2_36", "2.37", True), ("x86_64-manylinux_2_36", "3.0", True),
    ("x86_64-manylinux2014", "2.17", True), ("x86_64-manylinux2014", "2.16", False),
])
def test_the_glibc_level_fits_at_its_edge(platform, glibc, fits):
    problems = lf.check_target({"python_version": "3.12", "python_platform": platform}, "3.12.3", "x86_64", glibc)
    assert (problems == []) is fits, problems
