# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's figure (module_utils/bench/plot.py): what is drawn, where, and the PNG it saves."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import io
import sys

import pytest

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import plot as bench_plot

import report_samples

pytest.importorskip('matplotlib')


def by_gid(axis, gid):
    found = [artist for artist in axis.get_children() if artist.get_gid() == gid]
    assert len(found) == 1, (gid, [artist.get_gid() for artist in axis.get_children() if artist.get_gid()])
    return found[0]


def panels(figure):
    return dict((axis.get_title(loc='left'), axis) for axis in figure.axes)


# --------------------------------------------------------------------------- plot_data (no matplotlib)


def test_plot_data_keeps_every_host_with_its_status_and_baseline():
    data = bench_plot.plot_data(report_samples.three_hosts())
    assert [host['label'] for host in data['hosts']] == ['gpu-node-1', 'gpu-node-2 (regressed)', 'gpu-node-3 (failed)']
    node1, node2, node3 = data['hosts']
    assert [point['concurrency'] for point in node1['points']] == [1, 8, 32, 64, 128, 256]
    assert node1['figures']['peak_tok_s']['baseline'] == 2276 and node1['tolerance'] == pytest.approx(0.10)
    assert node1['figures']['peak_tok_s']['status'] == 'ok'
    assert node2['figures']['peak_tok_s']['status'] == 'regressed'
    assert node2['figures']['peak_tok_s']['percent'] == pytest.approx(100 * 1625.25 / 2276, rel=1e-3)
    # the failed host: its good levels drawn, the failing level marked, its message kept
    assert [point['concurrency'] for point in node3['points']] == [1, 8, 32]
    assert node3['failed_levels'] == [64]
    assert node3['failure'] == '128 of 128 requests failed at concurrency 64 (0 completed).'
    assert data['concurrencies'] == [1, 8, 32, 64, 128, 256] and data['omitted'] == 0


def test_plot_data_caps_hosts_keeping_the_failed_and_regressed_in_natural_order():
    data = bench_plot.plot_data(report_samples.fleet(40))
    names = [host['name'] for host in data['hosts']]
    assert len(names) == bench_plot.MAX_HOSTS and data['omitted'] == 8
    assert 'gpu-node-7' in names and 'gpu-node-40' in names  # failed; regressed (every fifth)
    assert names[:3] == ['gpu-node-1', 'gpu-node-2', 'gpu-node-3'] and names.index('gpu-node-9') < names.index('gpu-node-10')
    dropped = set('gpu-node-%d' % number for number in range(1, 41)) - set(names)
    statuses = dict((entry['host'], entry['status']) for entry in report_samples.fleet(40))
    assert len(dropped) == 8 and set(statuses[name] for name in dropped) == set(['ok'])


def test_plot_data_survives_hand_edited_figures():
    entry = report_samples.host('gpu-node-1')
    entry['verdict'] = {'tolerance': 'lots', 'metrics': {'peak_tok_s': {'baseline': -5, 'status': 'fine'}}}
    entry['summary']['levels'].append({'concurrency': 'many', 'output_tok_s': 1.0, 'failed': 0, 'completed': 1})
    host = bench_plot.plot_data([entry, 'not an entry'])['hosts'][0]
    assert host['tolerance'] is None and host['figures']['peak_tok_s']['baseline'] is None
    assert len(host['points']) == 6


# --------------------------------------------------------------------------- the figure


def test_figure_has_the_four_panels_with_units_and_the_run_in_its_title():
    figure = bench_plot.build_figure(report_samples.three_hosts(), '20261202T153000Z')
    assert tuple(figure.get_size_inches()) == (14, 8) and figure.dpi == 100
    assert figure.get_suptitle() == 'vLLM benchmark, run 20261202T153000Z: 3 hosts (1 failed, 1 regressed)'
    axes = panels(figure)
    assert sorted(axes) == ['Hosts against baseline', 'Output throughput', 'Time per output token',
                            'Time to first token']
    throughput = axes['Output throughput']
    assert throughput.get_ylabel() == 'output tok/s'
    assert throughput.get_xscale() == 'log' and list(throughput.get_xticks()) == [1, 8, 32, 64, 128, 256]
    assert [label.get_text() for label in throughput.get_xticklabels()] == ['1', '8', '32', '64', '128', '256']
    assert 'concurrency' in throughput.get_xlabel() and 'log2' in throughput.get_xlabel()
    assert axes['Time to first token'].get_ylabel() == 'TTFT (ms, log scale)'
    assert axes['Time per output token'].get_ylabel() == 'TPOT (ms)'
    legend = figure.legends[0]
    assert [text.get_text() for text in legend.get_texts()] == ['gpu-node-1', 'gpu-node-2 (regressed)',
                                                                'gpu-node-3 (failed)']
    # every host looks different: colour, marker and line style
    styles = [(line.get_color(), line.get_marker(), line.get_linestyle()) for line in legend.get_lines()]
    assert len(set(color for color, dummy, dummy2 in styles)) == 3
    assert len(set(marker for dummy, marker, dummy2 in styles)) == 3
    assert len(set(style for dummy, dummy2, style in styles)) == 3


def test_throughput_panel_draws_hosts_where_their_numbers_are_and_the_baseline_band():
    entries = report_samples.three_hosts()
    throughput = panels(bench_plot.build_figure(entries, 'r1'))['Output throughput']
    band = by_gid(throughput, 'baseline-band:peak_tok_s:kimi-k2.5')
    assert (band.get_y(), band.get_y() + band.get_height()) == (pytest.approx(2276 * 0.9), pytest.approx(2276 * 1.1))
    by_gid(throughput, 'baseline-band:single_stream_tok_s:kimi-k2.5')
    line = by_gid(throughput, 'output_tok_s:gpu-node-2')
    levels = entries[1]['summary']['levels']
    assert list(line.get_xdata()) == [1, 8, 32, 64, 128, 256]
    assert list(line.get_ydata()) == [pytest.approx(row['output_tok_s']) for row in levels]
    assert list(by_gid(throughput, 'output_tok_s:gpu-node-3').get_xdata()) == [1, 8, 32]
    crosses = by_gid(throughput, 'failed_levels:gpu-node-3')
    assert [list(point) for point in crosses.get_offsets()] == [[64, 0]]
    assert throughput.get_ylim()[1] > 2276 * 1.1  # the band is inside the panel


def test_latency_panels_draw_median_and_p99():
    entries = report_samples.three_hosts()
    axes = panels(bench_plot.build_figure(entries, 'r1'))
    rows = entries[0]['summary']['levels']
    for title, metric in (('Time to first token', 'ttft'), ('Time per output token', 'tpot')):
        for stat in ('median', 'p99'):
            line = by_gid(axes[title], '%s_%s_ms:gpu-node-1' % (stat, metric))
            assert list(line.get_ydata()) == [pytest.approx(row['%s_%s_ms' % (stat, metric)]) for row in rows]
        median = by_gid(axes[title], 'median_%s_ms:gpu-node-1' % metric)
        p99 = by_gid(axes[title], 'p99_%s_ms:gpu-node-1' % metric)
        assert median.get_markerfacecolor() != 'none' and p99.get_markerfacecolor() == 'none'
    assert [text.get_text() for text in axes['Time to first token'].get_legend().get_texts()] == ['median', 'p99']


def test_summary_panel_colours_pass_and_fail_and_names_the_failed_host():
    summary = panels(bench_plot.build_figure(report_samples.three_hosts(), 'r1'))['Hosts against baseline']
    good = by_gid(summary, 'peak_tok_s:gpu-node-1')
    slow = by_gid(summary, 'peak_tok_s:gpu-node-2')
    assert good.get_width() == pytest.approx(100 * 2242.14 / 2276, rel=1e-3)
    assert good.get_facecolor()[:3] == pytest.approx((0x2c / 255, 0xa0 / 255, 0x2c / 255))
    assert slow.get_facecolor()[:3] == pytest.approx((0xd6 / 255, 0x27 / 255, 0x28 / 255))
    assert by_gid(summary, 'single_stream_tok_s:gpu-node-2').get_hatch() == '////'
    assert [label.get_text() for label in summary.get_yticklabels()] == ['gpu-node-1', 'gpu-node-2', 'gpu-node-3']
    texts = [text.get_text() for text in summary.texts]
    assert 'FAILED\n128 of 128 requests failed at\nconcurrency 64 (0 completed).' in texts
    assert '2,242 tok/s (98%)' in texts and '1,625 tok/s (71%)' in texts
    assert summary.get_xlabel() == "% of the model's baseline tok/s"


def test_many_hosts_legend_in_columns_and_title_says_how_many_are_not_drawn():
    figure = bench_plot.build_figure(report_samples.fleet(40), 'r1')
    legend = figure.legends[0]
    assert len(legend.get_texts()) == 32 and legend._ncols == bench_plot.LEGEND_COLUMNS
    assert figure.get_suptitle() == 'vLLM benchmark, run r1: 40 hosts (1 failed, 20 regressed, 8 not drawn, see report.md)'


def test_one_host_and_no_host():
    figure = bench_plot.build_figure([report_samples.host('gpu-node-1')], 'r1')
    assert figure.get_suptitle() == 'vLLM benchmark, run r1: 1 host'
    empty = bench_plot.build_figure([], 'r1')
    assert any(text.get_text() == 'No host results in this run.' for axis in empty.axes for text in axis.texts)


def test_dollar_signs_in_names_are_drawn_as_text_not_mathtext():
    entry = report_samples.host('gpu$node$1', failure_at=8)
    entry['meta']['failure'] = r'server said $\frac{ and stopped'
    png = bench_plot.render_png([entry], r'run$\x')
    assert png[:8] == b'\x89PNG\r\n\x1a\n'


# --------------------------------------------------------------------------- the PNG


def test_png_decodes_to_1400_by_800():
    from matplotlib import image
    png = bench_plot.render_png(report_samples.three_hosts(), '20261202T153000Z')
    pixels = image.imread(io.BytesIO(png), format='png')
    assert pixels.shape[:2] == (800, 1400)
    assert b'Matplotlib' not in png and len(png) < 150 * 1024  # 256 colours: about 50 KB, not the 170 KB of full colour


def test_png_is_the_same_bytes_each_time():
    entries = [report_samples.host('gpu-node-1', levels=(1, 64))]
    assert bench_plot.render_png(entries, 'r1') == bench_plot.render_png(entries, 'r1')


def test_without_matplotlib_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    with pytest.raises(bench_plot.PlotUnavailable) as exc:
        bench_plot.build_figure(report_samples.three_hosts(), 'r1')
    assert 'requirements/control.txt' in str(exc.value) and 'control node' in str(exc.value)
    # what is drawn is still known
    assert len(bench_plot.plot_data(report_samples.three_hosts())['hosts']) == 3


def test_a_shortfall_the_server_did_not_confirm_is_drawn_as_inconclusive_not_regressed():
    entries = report_samples.three_hosts()
    slow = entries[1]
    slow['status'] = 'inconclusive'
    slow['verdict']['metrics']['peak_tok_s']['status'] = 'inconclusive'
    data = bench_plot.plot_data(entries)
    node2 = [host for host in data['hosts'] if host['name'] == 'gpu-node-2'][0]
    assert node2['label'] == 'gpu-node-2 (inconclusive)'
    assert node2['figures']['peak_tok_s']['status'] == 'inconclusive'
    figure = bench_plot.build_figure(entries, 'r1')
    summary = panels(figure)['Hosts against baseline']
    drawn = by_gid(summary, 'peak_tok_s:gpu-node-2')
    assert drawn.get_facecolor()[:3] == pytest.approx((0xe6 / 255, 0xa7 / 255, 0x00 / 255))
    assert 'below floor, client starved (inconclusive)' in [text.get_text() for text in summary.get_legend().get_texts()]
    assert '1 inconclusive' in bench_plot._title(data, 'r1')
