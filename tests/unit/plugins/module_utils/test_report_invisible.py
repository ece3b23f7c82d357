# SPDX-License-Identifier: GPL-3.0-or-later
"""A value from a host that holds a character that reorders text (U+202E, right-to-left override) or hides it
(U+200B, zero-width space) reaches every report escaped, as safetext.printable_block() shows it: the benchmark's
report.md, its figure's labels and the trend's, the rollout's summary.md and terminal line, the audit's drift.md
sections and its terminal line, and the lines of the benchmark history."""

import json
import os

import pytest

from ansible_collections.gpufleet.vllm.plugins.filter import audit as audit_filters
from ansible_collections.gpufleet.vllm.plugins.module_utils import safetext
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import history as bench_history
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import plot as bench_plot
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as bench_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import dependencies as dependency_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import drift as drift_report
from ansible_collections.gpufleet.vllm.plugins.module_utils.report import rollout as rollout_report

RLO, ZWSP = u'\u202e', u'\u200b'
HOSTILE = u'kimi-k2.5' + RLO + u'4tni' + ZWSP
# the invisible characters beyond the bidirectional and zero-width ones: soft hyphen, a tag character, a filler
OTHERS = u'\xad\U000e0041\u3164\ufff9'


def assert_escaped(text):
    assert RLO not in text and ZWSP not in text, repr(text)
    assert not any(char in text for char in OTHERS), repr(text)
    assert '\\u202e' in text and '\\u200b' in text, text


def test_printable_block_and_one_line_escape_every_invisible_character():
    assert safetext.printable_block(OTHERS) == '\\xad\\U000e0041\\u3164\\ufff9'
    assert safetext.one_line(u'a\u202eb\u200bc\nd\te\r') == 'a\\u202eb\\u200bc\\nd\\te\\x0d'
    assert safetext.one_line(b'gpu-\xff') == 'gpu-\\xff'
    assert safetext.one_line(7) == '7'
    # what is escaped once stays as it is
    assert safetext.one_line(safetext.one_line(HOSTILE)) == safetext.one_line(HOSTILE)


def bench_entry():
    level = {'concurrency': 1, 'num_prompts': 10, 'completed': 10, 'failed': 0, 'output_tok_s': 82.0,
             'total_tok_s': 90.0, 'request_s': 1.0}
    return {
        'host': 'gpu-node-1' + ZWSP,
        'status': 'regressed',
        'summary': {'levels': [dict(level, concurrency=RLO + '1')], 'single_stream_tok_s': 60.0, 'peak_tok_s': 60.0,
                    'peak_concurrency': 1, 'failed_requests': 0},
        'verdict': {'regressed': True, 'message': 'slow ' + RLO + ZWSP, 'tolerance': 0.1, 'baseline_model': HOSTILE,
                    'metrics': {'peak_tok_s': {'baseline': 82.0, 'status': 'regressed'}}},
        'meta': {'model': HOSTILE, 'quantization': 'int4' + RLO, 'vllm_version': '0.33' + ZWSP, 'base_url': RLO,
                 'started': '2026' + ZWSP, 'mode': 'gate' + OTHERS},
        'problems': ['unreadable ' + RLO + ZWSP + OTHERS],
    }


def test_the_benchmark_report_shows_a_hostile_model_name_escaped():
    entry = bench_entry()
    markdown = bench_report.render_markdown([entry], 'run' + RLO + ZWSP, title='fleet' + RLO + ZWSP,
                                            plot_note='no ' + RLO + ZWSP, record_file='b' + RLO + ZWSP + '.yml',
                                            trend=['gpu-node-1 (%s int4): first run' % HOSTILE])
    assert_escaped(markdown)
    assert '| kimi-k2.5\\\\u202e4tni\\\\u200b |' in markdown
    assert_escaped(bench_report.md_code(HOSTILE))
    failed = dict(entry, meta=dict(entry['meta'], failure='sweep died ' + RLO + ZWSP))
    assert_escaped(bench_report.render_markdown([failed], 'r'))


def test_the_benchmark_figures_label_a_hostile_name_escaped():
    data = bench_plot.plot_data([bench_entry()])
    assert data['hosts'][0]['name'] == 'gpu-node-1\\u200b' and data['hosts'][0]['model'] == 'kimi-k2.5\\u202e4tni\\u200b'
    assert bench_plot.bench_text(u'a\u202eb\nc\u00a0d') == 'a\\u202eb c d'
    pytest.importorskip('matplotlib')
    from matplotlib.text import Text
    figure = bench_plot.build_figure([bench_entry()], 'run' + RLO + ZWSP)
    texts = [item.get_text() for item in figure.findobj(Text)]
    assert any('\\u202e' in text for text in texts)
    for text in texts:
        assert RLO not in text and ZWSP not in text, text


def test_the_trend_figure_labels_and_the_history_lines_are_escaped(tmp_path, monkeypatch):
    pytest.importorskip('matplotlib')
    path = tmp_path / 'gpu-node-1' / 'kimi.int4.jsonl'
    path.parent.mkdir()
    line = {'schema': 1, 'run_id': 'r1', 'date': '2026-12-07' + RLO, 'host': 'gpu-node-1' + ZWSP, 'model': HOSTILE,
            'quantization': 'int4' + RLO, 'vllm_version': '0.33' + ZWSP, 'status': 'ok', 'peak_tok_s': 2000.0}
    path.write_text(json.dumps(line) + '\n' + json.dumps(dict(line, run_id='r2', peak_tok_s=2100.0)) + '\n')
    lines, problems = bench_history.read(str(path))
    assert problems == [] and len(lines) == 2
    for item in lines:
        for value in item.values():
            if isinstance(value, str):
                assert RLO not in value and ZWSP not in value
    drawn = []
    real_figure = bench_plot._matplotlib()['Figure']

    def keep(*args, **kwargs):
        figure = real_figure(*args, **kwargs)
        drawn.append(figure)
        return figure
    real = bench_plot._matplotlib

    def patched():
        found = real()
        found['Figure'] = keep
        return found
    monkeypatch.setattr(bench_plot, '_matplotlib', patched)
    # the lines as a caller may give them (not read back): the labels are escaped all the same
    raw = [dict(line, peak_tok_s=2000.0), dict(line, run_id='r2', peak_tok_s=2100.0)]
    for given in (lines, raw):
        bench_history.render_trend_png([{'host': HOSTILE, 'model': HOSTILE, 'quantization': 'int4' + RLO,
                                         'lines': given}], title='history ' + RLO)
    from matplotlib.text import Text
    texts = [item.get_text() for figure in drawn for item in figure.findobj(Text)]
    texts += [text.get_text() for figure in drawn for axis in figure.axes for text in axis.get_xticklabels()]
    assert any('\\u202e' in text for text in texts)
    for text in texts:
        assert RLO not in text and ZWSP not in text, text


def rollout_row():
    return {'host': 'gpu-node-1' + ZWSP, 'status': 'FAILED, rolled back', 'build_before': '0.32' + RLO,
            'build_after': '0.32' + ZWSP, 'build_tried': '0.33' + RLO, 'failure': 'boom ' + RLO + ZWSP + OTHERS,
            'benchmark': 'regressed' + ZWSP, 'config_reason': 'sm120 ' + RLO, 'skipped': None,
            'artifacts_removed': 3, 'artifacts_bytes': '3 MB' + ZWSP, 'config_keys_removed': 2,
            'lock': 'abc' + RLO, 'lock_packages': 9, 'environment_after': 'differs' + ZWSP,
            'dependencies': {'counts': '1 changed' + RLO, 'lines': ['torch: 2.8 -> 2.9' + ZWSP]},
            'diffs_before': [{'path': 'vllm/x' + RLO + '.py', 'file': 'diffs/gpu-node-1/vllm/x.py.diff'}]}


def test_the_rollout_summary_and_its_terminal_line_are_escaped():
    row = rollout_row()
    assert_escaped(rollout_report.markdown([row, dict(row, host='gpu-node-2', skipped='GPU ' + RLO + ZWSP,
                                                      failure=None)], [['gpu-node-1' + ZWSP, RLO]]))
    assert_escaped(rollout_report.host_line(row))
    assert_escaped(rollout_report.cell(HOSTILE))
    assert rollout_report.one_line(u'a\r\n\u202e') == 'a\\r\\n\\u202e'


def test_the_audit_line_and_drift_sections_are_escaped():
    row = {'host': 'gpu-a01' + ZWSP, 'drift': ['build' + RLO], 'build': '0.33' + RLO + ZWSP,
           'integrity': 'pristine' + ZWSP, 'unit': 'vllm' + RLO + '.service', 'unit_state': 'active',
           'gpu_problems': ['GPU 0 ' + RLO + ZWSP], 'fingerprint': 'f' + RLO, 'packages': 3}
    assert_escaped(audit_filters.audit_line(row))
    assert_escaped(audit_filters.markdown_text(HOSTILE))
    # (a backslash before a letter is a backslash in Markdown: the escape shows as written)
    assert audit_filters.markdown_text('a|b' + RLO, cell=True) == 'a\\|b\\u202e'
    assert audit_filters.markdown_text('a|b') == 'a|b'
    diffs = {'wheel': '/w/vllm-0.33' + RLO + '.whl', 'note': 'note ' + RLO + ZWSP, 'not_diffed': 0,
             'files': [{'path': 'vllm/a' + ZWSP + '.py', 'class': 'modified' + RLO,
                        'diff': '--- a\n+++ b\n+x = "' + RLO + ZWSP + '"\n', 'truncated': False, 'note': None}]}
    section = drift_report.markdown([('gpu-a01' + ZWSP, diffs)])
    assert_escaped(section)
    for entry in drift_report.diff_entries([('gpu-a01', diffs)]):
        assert_escaped(entry['content'])
    rows = [dict(row, dependencies={'against': 'the lock ' + RLO + ZWSP, 'reference': 'lock',
                                    'counts': '1 changed' + ZWSP, 'lines': ['torch: 2.8' + RLO + ' -> 2.9' + ZWSP]},
                 packages_not_pristine=['torch ' + RLO + ZWSP])]
    assert_escaped(dependency_report.audit_markdown(rows))


def test_no_writer_of_a_report_keeps_a_raw_invisible_character_of_its_own_module():
    """The sweep: the writers of reports reach printable_block through these few functions only."""
    here = os.path.dirname(os.path.abspath(bench_report.__file__))
    for path in (os.path.join(here, 'report.py'), os.path.join(here, 'plot.py'),
                 os.path.join(os.path.dirname(here), 'report', 'rollout.py'),
                 os.path.join(os.path.dirname(here), 'report', 'drift.py')):
        with open(path, encoding='utf-8') as handle:
            assert 'printable_block' in handle.read(), path
