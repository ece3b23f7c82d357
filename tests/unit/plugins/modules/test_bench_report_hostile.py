# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.bench_report (its action plugin) on hostile host results: escaped Markdown, capped reads, no traceback."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as report_utils
from writer_actions import action_runner

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'filter', 'fixtures')
EVIL_MODEL = 'kimi | <script>alert(1)</script>\n| injected | row |\r\n# heading `code` **bold** [x](http://evil) \x1b[31m'


def unescaped(markdown_text):
    """The text with every backslash escape removed: what Markdown would still read as markup."""
    return re.sub(r'\\.', '', markdown_text)


@pytest.fixture
def run():
    return action_runner('bench_report')


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.one_of(st.text(), st.binary().map(os.fsdecode), st.integers(), st.floats()))
def test_md_text_never_leaves_markup_line_breaks_or_control_characters(value):
    cell = report_utils.md_text(value)
    cell.encode('utf-8')  # valid text, whatever bytes the value held
    assert not re.search('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', cell)
    assert not re.search(r'[|`*_\[\]~<>]', unescaped(cell))


def test_md_code_fences_a_run_id_with_backticks():
    assert report_utils.md_code('nightly') == '`nightly`'
    assert report_utils.md_code('a``b\nc') == '```a``b c```'
    assert report_utils.md_code('`x') == '`` `x ``'


def test_values_from_hosts_cannot_break_the_tables_or_inject_markup(tmp_path, run):
    host = tmp_path / 'run1' / 'gpu-node-1'
    host.mkdir(parents=True)
    summary = {'levels': [{'concurrency': '1 | x', 'output_tok_s': 'NaN', 'notes': [], 'completed': 'many',
                           'failed': 0, 'mean_ttft_ms': 1e999},
                          'not a row', {'concurrency': 2, 'output_tok_s': 5.0, 'notes': [], 'completed': 2, 'failed': 0}],
               'single_stream_tok_s': '<b>fast</b>', 'peak_tok_s': 5.0, 'peak_concurrency': '|', 'failed_requests': [1]}
    (host / 'summary.json').write_text(json.dumps({
        'model': EVIL_MODEL, 'status': '**ok**\n|', 'failure': 'stopped `rm -rf /` <img src=x onerror=alert(1)>',
        'base_url': 'http://h|x', 'summary': summary, 'verdict': 'not a dict'}))
    odd = tmp_path / 'run1' / os.fsdecode(b'gpu-\xff|<i>')
    odd.mkdir()
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), str(odd / 'c1.json'))
    code, result = run({'path': str(tmp_path / 'run1'), 'run_id': 'r`1\n# x', 'title': 'Report\n<h1>x</h1>'})
    assert code == 0, result
    markdown = (tmp_path / 'run1' / 'report.md').read_text(encoding='utf-8')
    assert '<script' not in markdown and '<img' not in markdown and '<h1>' not in markdown and '<i>' not in markdown
    assert '&lt;script&gt;' in markdown and '\\[x\\](http://evil)' in markdown
    assert 'rm -rf /' in markdown and '\\`rm -rf /\\`' in markdown
    assert not any(line.startswith('| injected') or line.startswith('# heading') for line in markdown.splitlines())
    assert markdown.startswith('# Report &lt;h1&gt;x&lt;/h1&gt;\n')
    assert 'Run ``r`1 # x``:' in markdown
    fleet = [line for line in markdown.splitlines() if line.startswith('| ') and 'gpu' in line]
    assert len(fleet) == 2
    for line in fleet + [line for line in markdown.splitlines() if line.startswith('| 2 |')]:
        cells = unescaped(line).count('|')
        assert cells in (9, 11), line  # the fleet table has 8 columns, the level table 10
    assert '## gpu-\\\\xff\\|&lt;i&gt;' in markdown
    hosts = dict((entry['host'], entry) for entry in result['hosts'])
    assert sorted(hosts) == ['gpu-\\xff|<i>', 'gpu-node-1']
    assert hosts['gpu-node-1']['model'] == EVIL_MODEL
    assert hosts['gpu-node-1']['peak_tok_s'] == 5.0 and hosts['gpu-node-1']['peak_concurrency'] is None


def test_a_file_over_the_cap_is_listed_not_read(tmp_path, run):
    host = tmp_path / 'run1' / 'gpu-node-1'
    host.mkdir(parents=True)
    shutil.copy(os.path.join(FIXTURES, 'vllm-0.33.0-c1.json'), str(host / 'c1.json'))
    with open(str(host / 'c8.json'), 'w') as handle:
        handle.write('{"completed": 1, "pad": "%s"}' % ('x' * (1024 * 1024 + 10)))
    code, result = run({'path': str(tmp_path / 'run1'), 'max_file_mib': 1, 'png': False})
    assert code == 0, result
    assert result['problems'] == ['%s: larger than 1048576 bytes, more than a file is read up to; not read'
                                  % (host / 'c8.json')]
    assert result['hosts'][0]['levels'] == 1
    assert 'Unreadable: %s' % report_utils.md_text(result['problems'][0]) in (tmp_path / 'run1' / 'report.md').read_text()


def test_check_mode_with_a_broken_planned_result_reports_it_without_a_traceback(tmp_path, run):
    (tmp_path / 'run1').mkdir()
    code, result = run({'path': str(tmp_path / 'run1'), 'png': False,
                        'results': [{'host': 'gpu-node-1', 'files': {'c1.json': '{"truncated": '}}]}, check=True)
    assert code == 0, result
    assert result['changed'] is True and not (tmp_path / 'run1' / 'gpu-node-1').exists()
    assert len(result['problems']) == 1 and 'c1.json: the result file is not JSON' in result['problems'][0]


def test_a_bad_cap_is_refused(tmp_path, run):
    code, result = run({'path': str(tmp_path), 'max_file_mib': 0})
    assert code == 1 and result['msg'] == 'max_file_mib must be at least 1, got 0. Nothing was written.'
