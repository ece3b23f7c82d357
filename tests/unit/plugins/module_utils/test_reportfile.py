# SPDX-License-Identifier: GPL-3.0-or-later
"""reportfile.write_atomic: a report file is written whole or not at all (rollout_summary and bench_report share it)."""

import os
import shutil

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.report import files as reportfile


class Module(object):
    """The one AnsibleModule method the helper uses, as a plain move; FAIL makes the move fail."""

    def __init__(self, fail=False):
        self.fail = fail

    def atomic_move(self, src, dest):
        if self.fail:
            raise OSError(28, "No space left on device")
        shutil.move(src, dest)


def test_text_and_bytes_are_written_readable_by_all(tmp_path):
    reportfile.write_atomic(Module(), str(tmp_path / "summary.md"), u"host \u2713\n")
    reportfile.write_atomic(Module(), str(tmp_path / "report.png"), b"\x89PNG")
    assert (tmp_path / "summary.md").read_text(encoding="utf-8") == u"host \u2713\n"
    assert (tmp_path / "report.png").read_bytes() == b"\x89PNG"
    assert oct(os.stat(str(tmp_path / "summary.md")).st_mode & 0o777) == "0o644"


def test_a_failed_move_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    with pytest.raises(OSError):
        reportfile.write_atomic(Module(fail=True), str(target), "new")
    assert target.read_text() == "old"
    assert sorted(os.listdir(str(tmp_path))) == ["summary.json"]


def test_the_writers_share_it():
    from ansible_collections.gpufleet.vllm.plugins.module_utils.writers import bench_report, report_files, rollout_summary
    assert not hasattr(bench_report, "_write") and not hasattr(rollout_summary, "_write")
    assert bench_report.reportfile is rollout_summary.reportfile is report_files.reportfile is reportfile
