# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.bench_report (its action plugin): an overall timeout checked between files, between hosts and before drawing."""

import os

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as report_utils
from ansible_collections.gpufleet.vllm.plugins.module_utils.writers import bench_report
from writer_actions import action_runner

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'filter', 'fixtures')


@pytest.fixture
def run():
    return action_runner('bench_report')


@pytest.fixture
def clock(monkeypatch):
    """Each file written or read takes 100 s."""
    now = [0.0]
    monkeypatch.setattr(bench_report, '_clock', lambda: now[0])
    real_write, real_read = bench_report.reportfile.write_atomic, report_utils._read_json

    def write(*args):
        now[0] += 100
        return real_write(*args)

    def read(*args):
        now[0] += 100
        return real_read(*args)

    monkeypatch.setattr(bench_report.reportfile, 'write_atomic', write)
    monkeypatch.setattr(report_utils, '_read_json', read)
    return now


def record(host):
    with open(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json')) as handle:
        return {'run_id': 'r1', 'host': host, 'files': {'c1.json': handle.read()}}


def test_time_up_between_hosts_names_what_was_kept(tmp_path, run, clock):
    path = tmp_path / 'r1'
    code, result = run({'path': str(path), 'results': [record('gpu-1'), record('gpu-2')], 'timeout': 250})
    kept = [str(path / h / 'c1.json') for h in ('gpu-1', 'gpu-2')]
    assert code == 1
    assert result['msg'] == ('The time limit of 250 s (timeout) passed before the files of host gpu-2 were read. '
                             'Already written: %s.' % ', '.join(kept))
    assert result['changed'] is True and result['written'] == kept
    assert all(os.path.isfile(k) for k in kept)
    assert not (path / 'report.md').exists() and not (path / 'report.png').exists()


def test_time_up_while_keeping_results(tmp_path, run, clock):
    path = tmp_path / 'r1'
    code, result = run({'path': str(path), 'results': [record('gpu-1'), record('gpu-2')], 'timeout': 100})
    kept = str(path / 'gpu-1' / 'c1.json')
    assert code == 1
    assert result['msg'] == ('The time limit of 100 s (timeout) passed before the result %s was kept. '
                             'Already written: %s.' % (path / 'gpu-2' / 'c1.json', kept))
    assert result['written'] == [kept] and not (path / 'gpu-2').exists()


def test_time_up_before_drawing_writes_no_report(tmp_path, run, clock):
    path = tmp_path / 'r1'
    (path / 'gpu-1').mkdir(parents=True)
    (path / 'gpu-1' / 'c1.json').write_text(record('gpu-1')['files']['c1.json'])
    code, result = run({'path': str(path), 'timeout': 50})
    assert code == 1
    assert result['msg'] == 'The time limit of 50 s (timeout) passed before the report was drawn. Nothing was written.'
    assert result['changed'] is False and result['written'] == []
    assert sorted(os.listdir(str(path))) == ['gpu-1']


def test_timeout_out_of_range_is_refused(tmp_path, run):
    code, result = run({'path': str(tmp_path), 'timeout': 0})
    assert code == 1 and result['msg'] == 'timeout must be from 1 to 604800 seconds, got 0. Nothing was written.'
