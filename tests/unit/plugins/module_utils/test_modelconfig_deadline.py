# SPDX-License-Identifier: GPL-3.0-or-later
"""The model config edit (module_utils/sm120/modelconfig.py): an overall timeout checked between files; a clean failure
that says what was written."""

import json

import pytest

from helpers import module_runner
import modelconfig_edit

NAMES = ["a.json", "b.json", "c.json"]
TEXT = '{\n  "keep": 1,\n  "kv_cache_scheme": {"num_bits": 8}\n}\n'


@pytest.fixture
def run(capsys):
    return module_runner(modelconfig_edit.main, capsys)


@pytest.fixture
def model(tmp_path):
    for name in NAMES:
        (tmp_path / name).write_text(TEXT)
    return tmp_path


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(modelconfig_edit, "_clock", lambda: now[0])
    return now


def args(model, **extra):
    return dict({"path": str(model), "timeout": 150,
                 "files": [{"name": n, "absent": ["kv_cache_scheme"], "required": True} for n in NAMES]}, **extra)


def test_time_up_while_planning_changes_nothing(model, run, clock, monkeypatch):
    real = modelconfig_edit.plan_file

    def slow(*a, **kw):
        clock[0] += 100
        return real(*a, **kw)

    monkeypatch.setattr(modelconfig_edit, "plan_file", slow)
    rc, res = run(args(model))
    assert rc == 1 and res["changed"] is False
    assert res["msg"] == ("The time limit of 150 s (timeout) passed before %s/c.json was planned. Nothing was changed "
                          "(2 file(s) planned, none written)." % model)
    assert res["file"] == "%s/c.json" % model
    assert [(model / n).read_text() for n in NAMES] == [TEXT] * 3


def test_time_up_while_writing_names_the_files_written_and_backups(model, run, clock, monkeypatch):
    real = modelconfig_edit.write_plan

    def slow(*a, **kw):
        clock[0] += 100
        return real(*a, **kw)

    monkeypatch.setattr(modelconfig_edit, "write_plan", slow)
    rc, res = run(args(model, backup=True))
    assert rc == 1 and res["changed"] is True
    written = ["%s/%s" % (model, n) for n in NAMES[:2]]
    assert res["msg"].startswith("The time limit of 150 s (timeout) passed before %s/c.json was written. Already "
                                 "written before this failure: %s." % (model, ", ".join(written)))
    assert " Backups made: " in res["msg"]
    assert [f["written"] for f in res["files"]] == written
    assert all(f["backup_file"].startswith(w + ".") for f, w in zip(res["files"], written))
    assert json.loads((model / "a.json").read_text()) == {"keep": 1}
    assert json.loads((model / "b.json").read_text()) == {"keep": 1}
    assert (model / "c.json").read_text() == TEXT


def test_timeout_out_of_range_is_refused(model, run):
    rc, res = run(args(model, timeout=0))
    assert rc == 1 and res["msg"] == "timeout must be from 1 to 604800 seconds, got 0."
