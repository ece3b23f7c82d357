# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The figure of the fleet report (report.png), drawn with matplotlib on the control node.

One figure compares the hosts of a benchmark run at a glance:

* output tok/s against concurrency, one line per host (colour, marker and
  line style differ), the peak baseline of each model as a shaded band
  (floor = baseline * (1 - tolerance) to baseline * (1 + tolerance)) and
  the single-stream baseline as a small band at concurrency 1; levels with
  failed requests as a red cross on the x axis;
* TTFT and TPOT against concurrency (median: filled markers; p99: open
  markers, fainter line);
* per host, peak and single stream as a percentage of the model's baseline,
  green when at or above the floor, red below it; failed and incomplete
  hosts are named there, never left out.

matplotlib is imported only when a figure is drawn (Agg canvas, no display,
matplotlib's default style whatever the user's matplotlibrc says), so the
module runs without it when no PNG is asked for. It is a control-node
requirement (requirements/control.txt); the hosts never need it.

Public API:

* ``plot_data(entries) -> dict``: what is drawn, as plain data (no
  matplotlib): hosts (name, label, status, failure, points, failed_levels,
  baseline figures), concurrencies, omitted (hosts not drawn)
* ``build_figure(entries, run_id) -> matplotlib.figure.Figure``
* ``render_png(entries, run_id) -> bytes`` (the same input gives the same bytes)
* ``PlotUnavailable``: matplotlib cannot be imported (the message says what to install)

Bounds: at most ``MAX_HOSTS`` hosts are drawn (hosts that failed, regressed
or are incomplete first, then by name; the figure says how many were left
out), at most ``MAX_LEVELS`` levels per host, names cut to ``MAX_NAME``
characters. The figure is always ``FIGSIZE`` inches at ``DPI``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import io
import re
import textwrap

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import printable_block

MAX_HOSTS = 32
MAX_LEVELS = 32
MAX_NAME = 28
FIGSIZE = (14, 8)
DPI = 100
# the legend of the hosts goes below the panels, in rows of this many (two fewer while it shows each host's status)
LEGEND_COLUMNS = 8
# beyond this many hosts the legend names hosts only and the bars carry their percentage only
COMPACT_HOSTS = 16
# the summary panel has room for at least this many hosts (bars of one host stay thin)
MIN_ROWS = 6

# no green or red among the hosts' colours: those say pass and fail
COLOURS = ('#1f77b4', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf', '#393b79',
           '#000000')
MARKERS = ('o', 's', '^', 'D', 'v', 'P', '*', 'h')
LINESTYLES = ('-', '--', '-.', ':')
PASS = '#2ca02c'
FAIL = '#d62728'
# a figure below its floor that the server's own metrics do not confirm (the client was starved)
DOUBT = '#e6a700'
NEUTRAL = '#9e9e9e'
BAND = '#2ca02c'
PROBLEM_STATUSES = ('failed', 'regressed', 'incomplete', 'inconclusive')


class PlotUnavailable(RuntimeError):
    """matplotlib cannot be imported where the report is rendered."""


def _matplotlib():
    try:
        from matplotlib import style
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
        from PIL import Image
    except ImportError as exc:
        raise PlotUnavailable('matplotlib cannot be imported on the control node (%s): install it into the Python that '
                              'runs Ansible there (pip install -r requirements/control.txt, or pip install matplotlib); '
                              'the hosts do not need it' % exc)
    return {'style': style, 'Canvas': FigureCanvasAgg, 'Figure': Figure, 'Line2D': Line2D,
            'Patch': Patch, 'FixedLocator': FixedLocator, 'FuncFormatter': FuncFormatter, 'NullLocator': NullLocator, 'Image': Image}


def _short(value, limit=MAX_NAME):
    """A value from a host as one line of at most LIMIT characters."""
    value = bench_text(value)
    return value if len(value) <= limit else value[:limit - 1] + '\u2026'


def _drawn(value):
    """Text for matplotlib: a $ is drawn as itself, never starts mathtext (host names and messages are not TeX)."""
    return value.replace('$', '\\$')


def bench_text(value):
    """A value from a host as one line of printable text: control, invisible and bidirectional characters (U+202E,
    U+200B) and odd bytes as backslash escapes (safetext.printable_block), line breaks, tabs and any other character
    that prints nothing as spaces."""
    if value is None:
        return ''
    if isinstance(value, bytes):
        value = value.decode('utf-8', 'backslashreplace')
    elif not isinstance(value, str):
        value = str(value)
    return ''.join(ch if ch.isprintable() else ' ' for ch in printable_block(value)).strip()


def _baseline(entry):
    """(model, tolerance, {metric: (baseline, status, ratio)}) from the entry's verdict, figures checked."""
    verdict = entry.get('verdict') if isinstance(entry.get('verdict'), dict) else {}
    tolerance = bench._number(verdict.get('tolerance'))
    if tolerance is None or not 0 <= tolerance < 1:
        tolerance = None
    metrics = verdict.get('metrics') if isinstance(verdict.get('metrics'), dict) else {}
    figures = {}
    for name in bench.COMPARED_METRICS:
        metric = metrics.get(name) if isinstance(metrics.get(name), dict) else {}
        expected = bench._number(metric.get('baseline'))
        measured = bench._number((entry.get('summary') or {}).get(name))
        if expected is None or expected <= 0:
            expected = None
        status = metric.get('status') if metric.get('status') in (
            'ok', 'above', 'regressed', 'inconclusive', 'not_measured') else None
        if expected is not None and measured is not None and tolerance is not None:
            # the colour follows the figures drawn, whatever a hand-edited status says; below the floor,
            # a shortfall the server's own figures did not confirm stays inconclusive
            below = measured < expected * (1 - tolerance)
            status = ('inconclusive' if status == 'inconclusive' else 'regressed') if below else 'ok'
        figures[name] = {'baseline': expected, 'measured': measured, 'status': status,
                         'percent': 100.0 * measured / expected if expected and measured is not None else None}
    model = verdict.get('baseline_model') or (entry.get('meta') or {}).get('model')
    return bench_text(model), tolerance, figures


def _natural(name):
    """Sort key: gpu-node-2 before gpu-node-10."""
    return [(0, int(part), '') if part.isdigit() else (1, 0, part) for part in re.split(r'(\d+)', name)]


def _points(summary):
    """Rows of levels without failures, and the concurrencies of levels with failures (capped, sorted)."""
    good, failed = [], []
    for row in (summary.get('levels') or [])[:MAX_LEVELS]:
        level = bench._count(row.get('concurrency'))
        if not level:
            continue
        if bench._level_ok(row):
            good.append({'concurrency': level, 'output_tok_s': row['output_tok_s'],
                         'median_ttft_ms': row.get('median_ttft_ms'), 'p99_ttft_ms': row.get('p99_ttft_ms'),
                         'median_tpot_ms': row.get('median_tpot_ms'), 'p99_tpot_ms': row.get('p99_tpot_ms')})
        else:
            failed.append(level)
    good.sort(key=lambda point: point['concurrency'])
    return good, sorted(set(failed))


def plot_data(entries):
    """What the figure shows, as plain data (see the module's docstring)."""
    entries = [entry for entry in entries or [] if isinstance(entry, dict)]
    problems = [entry for entry in entries if bench_text(entry.get('status')) in PROBLEM_STATUSES]
    others = [entry for entry in entries if bench_text(entry.get('status')) not in PROBLEM_STATUSES]
    drawn = (problems + others)[:MAX_HOSTS]
    drawn.sort(key=lambda entry: _natural(bench_text(entry.get('host'))))
    hosts = []
    levels = set()
    for entry in drawn:
        status = bench_text(entry.get('status')) or 'unknown'
        meta = entry.get('meta') if isinstance(entry.get('meta'), dict) else {}
        summary = entry.get('summary') if isinstance(entry.get('summary'), dict) else {}
        points, failed = _points(summary)
        model, tolerance, figures = _baseline(entry)
        if status == 'failed' or meta.get('failure'):
            status = 'failed'
        name = _short(entry.get('host'))
        hosts.append({
            'name': name,
            'label': name if status == 'ok' else '%s (%s)' % (name, status),
            'status': status,
            'failure': _short(meta.get('failure'), 60) or None,
            'model': model,
            'tolerance': tolerance,
            'figures': figures,
            'points': points,
            'failed_levels': failed,
        })
        levels.update(point['concurrency'] for point in points)
        levels.update(failed)
    return {'hosts': hosts, 'concurrencies': sorted(levels), 'omitted': len(entries) - len(drawn)}


def _style(index):
    return {'color': COLOURS[index % len(COLOURS)], 'marker': MARKERS[index % len(MARKERS)],
            'linestyle': LINESTYLES[index % len(LINESTYLES)]}


def _thousands(value, dummy=None):
    return '{:,.0f}'.format(value)


def _ms(value, dummy=None):
    return '{:,.0f}'.format(value) if value >= 10 else '{:,.1f}'.format(value).rstrip('0').rstrip('.')


def _concurrency_axis(mpl, axis, concurrencies):
    axis.set_xscale('log', base=2)
    if concurrencies:
        axis.xaxis.set_major_locator(mpl['FixedLocator'](concurrencies))
        axis.xaxis.set_minor_locator(mpl['NullLocator']())
        axis.xaxis.set_major_formatter(mpl['FuncFormatter'](lambda value, dummy: '%d' % round(value)))
        low, high = min(concurrencies), max(concurrencies)
        axis.set_xlim(low / 2 ** 0.4, high * 2 ** 0.4)
    axis.set_xlabel('concurrency (requests in flight, log2 scale)')
    axis.tick_params(labelsize=9)
    axis.grid(True, which='major', color='#dddddd', linewidth=0.8)
    axis.set_axisbelow(True)


def _baselines(data):
    """Distinct (model, metric, baseline, tolerance) among the hosts drawn (at most 4 of each metric)."""
    seen = {}
    for host in data['hosts']:
        if host['tolerance'] is None:
            continue
        for name in bench.COMPARED_METRICS:
            expected = host['figures'][name]['baseline']
            if expected is not None:
                seen.setdefault(name, {}).setdefault((host['model'], expected, host['tolerance']), None)
    return dict((name, list(keys)[:4]) for name, keys in seen.items())


def _throughput_panel(mpl, axis, data):
    peak_top = 0.0
    bands = _baselines(data)
    for model, expected, tolerance in bands.get('peak_tok_s', []):
        axis.axhspan(expected * (1 - tolerance), expected * (1 + tolerance), color=BAND, alpha=0.13, linewidth=0,
                     gid='baseline-band:peak_tok_s:%s' % model)
        axis.axhline(expected, color=BAND, linestyle=(0, (6, 3)), linewidth=1.2)
        label = '%s peak baseline %s tok/s \u00b1%.0f%%' % (_short(model, 24), _thousands(expected), tolerance * 100)
        axis.annotate(_drawn(label),
                      xy=(0.01, expected * (1 + tolerance)), xycoords=('axes fraction', 'data'), xytext=(0, 2),
                      textcoords='offset points', fontsize=8.5, color='#1b6e1b', va='bottom')
        peak_top = max(peak_top, expected * (1 + tolerance))
    for model, expected, tolerance in bands.get('single_stream_tok_s', []):
        axis.fill_between([2 ** -0.3, 2 ** 0.3], expected * (1 - tolerance), expected * (1 + tolerance), color=BAND,
                          gid='baseline-band:single_stream_tok_s:%s' % model,
                          alpha=0.35, linewidth=0)
        axis.plot([2 ** -0.3, 2 ** 0.3], [expected, expected], color=BAND, linewidth=1.2)
    for index, host in enumerate(data['hosts']):
        style = _style(index)
        xs = [point['concurrency'] for point in host['points']]
        ys = [point['output_tok_s'] for point in host['points']]
        if xs:
            axis.plot(xs, ys, linewidth=1.8, markersize=6.5, gid='output_tok_s:%s' % host['name'], **style)
            peak_top = max([peak_top] + ys)
        if host['failed_levels']:
            axis.scatter(host['failed_levels'], [0] * len(host['failed_levels']), marker='X', s=90, color=FAIL,
                         gid='failed_levels:%s' % host['name'],
                         edgecolors=style['color'], linewidths=1.2, zorder=5, clip_on=False)
    axis.set_ylim(0, (peak_top or 1.0) * 1.12)
    axis.yaxis.set_major_formatter(mpl['FuncFormatter'](_thousands))
    axis.set_ylabel('output tok/s')
    axis.set_title('Output throughput', fontsize=12, loc='left', fontweight='bold')
    _concurrency_axis(mpl, axis, data['concurrencies'])
    handles = [mpl['Patch'](facecolor=BAND, alpha=0.3, label='baseline \u00b1 tolerance (peak; single stream at 1)'),
               mpl['Line2D']([], [], marker='X', color=FAIL, linestyle='none', markersize=9,
                             label='level with failed requests')]
    axis.legend(handles=handles, loc='lower right', fontsize=8.5, framealpha=0.9)


def _latency_panel(mpl, axis, data, metric, title, log_y):
    values = []
    for index, host in enumerate(data['hosts']):
        style = _style(index)
        for stat, alpha, face, width in (('median', 1.0, None, 1.6), ('p99', 0.45, 'none', 1.0)):
            pairs = [(point['concurrency'], point['%s_%s_ms' % (stat, metric)]) for point in host['points']
                     if point.get('%s_%s_ms' % (stat, metric)) is not None
                     and point['%s_%s_ms' % (stat, metric)] > 0]
            if not pairs:
                continue
            values.extend(value for dummy, value in pairs)
            extra = {'markerfacecolor': face} if face else {}
            axis.plot([x for x, dummy in pairs], [y for dummy, y in pairs], alpha=alpha, linewidth=width,
                      gid='%s_%s_ms:%s' % (stat, metric, host['name']),
                      markersize=5.5, **dict(style, **extra))
    if log_y and values and max(values) / min(values) > 8:
        axis.set_yscale('log')
        axis.yaxis.set_minor_formatter(mpl['FuncFormatter'](lambda value, dummy: ''))
    else:
        axis.set_ylim(0, (max(values) if values else 1.0) * 1.1)
    axis.yaxis.set_major_formatter(mpl['FuncFormatter'](_ms))
    axis.set_ylabel('%s (ms%s)' % (metric.upper(), ', log scale' if axis.get_yscale() == 'log' else ''))
    axis.set_title(title, fontsize=12, loc='left', fontweight='bold')
    _concurrency_axis(mpl, axis, data['concurrencies'])
    handles = [mpl['Line2D']([], [], color='#444444', marker='o', label='median'),
               mpl['Line2D']([], [], color='#444444', marker='o', markerfacecolor='none', alpha=0.45, label='p99')]
    axis.legend(handles=handles, loc='upper left', fontsize=8.5, framealpha=0.9)


def _summary_panel(mpl, axis, data):
    hosts = data['hosts']
    compact = len(hosts) > COMPACT_HOSTS
    size = 9 if len(hosts) <= 8 else (8 if not compact else 7)
    high = 130.0
    for row, host in enumerate(hosts):
        if host['tolerance'] is not None:
            low_band, high_band = 100 * (1 - host['tolerance']), 100 * (1 + host['tolerance'])
            axis.fill_betweenx([row - 0.5, row + 0.5], low_band, high_band, color=BAND, alpha=0.13, linewidth=0)
            high = max(high, high_band + 10)
        if host['status'] in ('failed', 'incomplete'):
            if host['status'] == 'failed' and compact:
                what = 'FAILED: %s' % _short(host['failure'] or 'see report.md', 36)
            elif host['status'] == 'failed':
                what = 'FAILED\n' + '\n'.join(textwrap.wrap(host['failure'] or 'see report.md', 34)[:2])
            elif compact:
                what = 'incomplete (no summary.json)'
            else:
                what = 'incomplete: no summary.json\n(run cut short), see report.md'
            axis.text(3, row, _drawn(what), va='center', ha='left', fontsize=size, clip_on=True, linespacing=1.3,
                      color=FAIL if host['status'] == 'failed' else '#555555',
                      bbox={'facecolor': 'white', 'edgecolor': 'none', 'alpha': 0.85, 'pad': 1.5})
            continue
        notes = []
        for offset, name, hatch in ((-0.2, 'peak_tok_s', None), (0.2, 'single_stream_tok_s', '////')):
            figure = host['figures'][name]
            label = 'peak' if name == 'peak_tok_s' else 'single'
            if figure['percent'] is None:
                if figure['measured'] is not None:
                    notes.append('%s %s tok/s' % (label, _thousands(figure['measured'])))
                continue
            colour = {'regressed': FAIL, 'inconclusive': DOUBT}.get(figure['status'], PASS)
            axis.barh(row + offset, figure['percent'], height=0.38, color=colour, alpha=0.85, hatch=hatch,
                      gid='%s:%s' % (name, host['name']),
                      edgecolor='white' if hatch else colour, linewidth=0)
            full = '%s tok/s (%.0f%%)' % (_thousands(figure['measured']), figure['percent'])
            words = '%.0f%%' % figure['percent'] if compact else full
            if compact and name != 'peak_tok_s':
                continue
            axis.text(figure['percent'] + 1.5, row + offset, words,
                      va='center', ha='left', fontsize=size - 1, color='#222222',
                      bbox={'facecolor': 'white', 'edgecolor': 'none', 'alpha': 0.7, 'pad': 0.5})
            high = max(high, figure['percent'] + 45)
        if notes:
            axis.text(3, row, 'no baseline: %s' % ', '.join(notes), va='center', ha='left', fontsize=size,
                      color='#555555')
    axis.axvline(100, color=BAND, linestyle=(0, (6, 3)), linewidth=1.2)
    axis.set_xlim(0, min(high, 400))
    axis.set_ylim(max(len(hosts), MIN_ROWS) - 0.5, -0.5)  # a bar is never thicker than a sixth of the panel
    axis.set_yticks(range(len(hosts)))
    axis.set_yticklabels([_drawn(host['name']) for host in hosts], fontsize=size)
    for label, host in zip(axis.get_yticklabels(), hosts):
        if host['status'] in ('failed', 'regressed'):
            label.set_color(FAIL)
            label.set_fontweight('bold')
    axis.set_xlabel("% of the model's baseline tok/s")
    axis.set_title('Hosts against baseline', fontsize=12, loc='left', fontweight='bold')
    axis.grid(True, axis='x', color='#dddddd', linewidth=0.8)
    axis.set_axisbelow(True)
    handles = [mpl['Patch'](facecolor=PASS, label='peak, at or above floor'),
               mpl['Patch'](facecolor=FAIL, label='below floor (regressed)'),
               mpl['Patch'](facecolor=DOUBT, label='below floor, client starved (inconclusive)'),
               mpl['Patch'](facecolor=PASS, hatch='////', edgecolor='white', label='single stream (hatched)'),
               mpl['Patch'](facecolor=BAND, alpha=0.3, label='100% \u00b1 tolerance')]
    axis.legend(handles=handles, loc='upper center', bbox_to_anchor=(0.5, -0.08),
                ncol=2, fontsize=8, frameon=False)


def _title(data, run_id):
    hosts = data['hosts']
    counts = []
    for status in ('failed', 'regressed', 'incomplete', 'inconclusive'):
        number = sum(1 for host in hosts if host['status'] == status)
        if number:
            counts.append('%d %s' % (number, status))
    total = len(hosts) + data['omitted']
    title = 'vLLM benchmark, run %s: %d host%s' % (_short(run_id, 40), total, '' if total == 1 else 's')
    if data['omitted']:
        counts.append('%d not drawn, see report.md' % data['omitted'])
    if counts:
        title += ' (%s)' % ', '.join(counts)
    return title


def build_figure(entries, run_id):
    """The report's figure for ``entries`` (bench_report.collect_run), not yet saved."""
    mpl = _matplotlib()
    data = plot_data(entries)
    with mpl['style'].context('default'):
        figure = mpl['Figure'](figsize=FIGSIZE, dpi=DPI, layout='constrained')
        mpl['Canvas'](figure)
        grid = figure.add_gridspec(2, 3, width_ratios=[1, 1, 0.95], height_ratios=[1.15, 1])
        throughput = figure.add_subplot(grid[0, 0:2])
        ttft = figure.add_subplot(grid[1, 0])
        tpot = figure.add_subplot(grid[1, 1])
        summary = figure.add_subplot(grid[:, 2])
        if data['hosts']:
            _throughput_panel(mpl, throughput, data)
            _latency_panel(mpl, ttft, data, 'ttft', 'Time to first token', log_y=True)
            _latency_panel(mpl, tpot, data, 'tpot', 'Time per output token', log_y=False)
            _summary_panel(mpl, summary, data)
            compact = len(data['hosts']) > COMPACT_HOSTS
            handles = [mpl['Line2D']([], [], linewidth=1.8, markersize=6.5,
                                     label=_drawn(host['name'] if compact else host['label']), **_style(index))
                       for index, host in enumerate(data['hosts'])]
            legend = figure.legend(handles=handles, loc='outside lower center', fontsize=7.5 if compact else 9,
                                   ncol=min(len(handles), LEGEND_COLUMNS if compact else LEGEND_COLUMNS - 2), handlelength=2.6 if compact else 3.2,
                                   title='hosts (red: failed or regressed)' if compact else 'hosts', title_fontsize=9)
            for text, host in zip(legend.get_texts(), data['hosts']):
                if host['status'] in ('failed', 'regressed'):
                    text.set_color(FAIL)
        else:
            for axis in (throughput, ttft, tpot, summary):
                axis.set_axis_off()
            throughput.text(0.5, 0.5, 'No host results in this run.', ha='center', va='center', fontsize=14,
                            transform=throughput.transAxes)
        figure.suptitle(_drawn(_title(data, run_id)), fontsize=15, fontweight='bold')
    return figure


def render_png(entries, run_id):
    """report.png's bytes: the figure at FIGSIZE * DPI pixels in 256 colours, without a timestamp or version in the file.

    Quantized without dithering (Pillow, which matplotlib itself needs): the
    same picture at about a third of the bytes of full colour (45 to 80 KB
    for 3 to 32 hosts).
    """
    mpl = _matplotlib()
    figure = build_figure(entries, run_id)
    figure.canvas.draw()
    width, height = figure.canvas.get_width_height()
    picture = mpl['Image'].frombuffer('RGBA', (width, height), bytes(figure.canvas.buffer_rgba()), 'raw', 'RGBA', 0, 1)
    picture = picture.convert('RGB').quantize(colors=256, method=mpl['Image'].Quantize.FASTOCTREE,
                                              dither=mpl['Image'].Dither.NONE)
    out = io.BytesIO()
    picture.save(out, format='png', optimize=True)
    return out.getvalue()
