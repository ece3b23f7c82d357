# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Baselines per model and quantisation (bench.resolve_baseline / compare), detection, record file, history, trend."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import json
import os
import threading

import pytest
import yaml

from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import result as bench
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import baseline as bench_baseline
from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import history as bench_history

import report_samples
from writer_actions import action_runner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
KEYED = {
    'kimi-k2.5': {'int4': {'single_stream_tok_s': 82, 'peak_tok_s': 2276}, 'nvfp4': None},
    'minimax-m2.5': {'fp8': {'single_stream_tok_s': None, 'peak_tok_s': 4000}},
}
FLAT = {'kimi-k2.5': {'single_stream_tok_s': 82, 'peak_tok_s': 2276}}


def summary(single, peak):
    return {'single_stream_tok_s': single, 'peak_tok_s': peak}


# --------------------------------------------------------------------------- keying


@pytest.mark.parametrize('quant, label, regressed', [
    ('int4', 'kimi-k2.5 int4', False),
    ('INT4', 'kimi-k2.5 int4', False),
])
def test_keyed_baseline_is_the_level_of_the_quantisation(quant, label, regressed):
    verdict = bench.compare(summary(81.0, 2250.0), KEYED, model='kimi-k2.5', quantization=quant)
    assert verdict['checked'] is True and verdict['regressed'] is regressed
    assert verdict['baseline_label'] == label and verdict['baseline_form'] == 'keyed'
    assert verdict['message'].startswith('within 10% of the baseline of kimi-k2.5 int4: ')


def test_nvfp4_is_unknown_until_measured_and_says_how_to_record_it():
    # NVFP4 figures far below INT4's: no gate (there is no NVFP4 baseline), and the message says what to do
    verdict = bench.compare(summary(40.0, 900.0), KEYED, model='kimi-k2.5', quantization='nvfp4')
    assert verdict['checked'] is False and verdict['regressed'] is False
    assert verdict['message'] == ('no baseline for kimi-k2.5 nvfp4: record one with benchmark_mode=record and add it '
                                  'under benchmark_baselines[kimi-k2.5][nvfp4]')
    missing = bench.compare(summary(40.0, 900.0), KEYED, model='kimi-k2.5', quantization='fp8')
    assert missing['checked'] is False and 'no baseline for kimi-k2.5 fp8: record one' in missing['message']


def test_a_keyed_model_with_an_unknown_quantisation_is_not_gated():
    verdict = bench.compare(summary(40.0, 900.0), KEYED, model='kimi-k2.5', quantization=None)
    assert verdict['checked'] is False and verdict['regressed'] is False
    assert verdict['message'] == ('no baseline for kimi-k2.5: its quantisation is unknown and its baselines are kept '
                                  'per quantisation (int4, nvfp4); set benchmark_quantization')


def test_minimax_fp8_gates_the_peak_only():
    verdict = bench.compare(summary(30.0, 3500.0), KEYED, model='minimax-m2.5', quantization='fp8')
    assert verdict['regressed'] is True
    assert verdict['metrics']['single_stream_tok_s']['status'] == 'no_baseline'
    assert verdict['message'].startswith('regression against the baseline of minimax-m2.5 fp8: peak: 3,500.0 tok/s')


def test_the_flat_form_still_gates_whatever_the_quantisation_and_says_so():
    verdict = bench.compare(summary(60.0, 1500.0), FLAT, model='kimi-k2.5', quantization='nvfp4')
    assert verdict['checked'] is True and verdict['regressed'] is True and verdict['baseline_form'] == 'flat'
    assert 'kimi-k2.5 (flat baseline, any quantisation; measured here: nvfp4)' in verdict['message']
    # without a quantisation the message is the one of earlier releases
    assert bench.compare(summary(82.0, 2276.0), FLAT, model='kimi-k2.5')['message'].startswith(
        'within 10% of the baseline of kimi-k2.5: ')


@pytest.mark.parametrize('entry, words', [
    ({'single_stream_tok_s': 82, 'int4': {'peak_tok_s': 2276}}, 'mixes the flat form'),
    ({'int4': 82}, 'quantisation int4 must be a dict'),
    ({'int4': {'peak': 2276}}, 'quantisation int4 must be a dict'),
    (82, 'must be a dict'),
])
def test_a_malformed_entry_is_refused_naming_it(entry, words):
    with pytest.raises(ValueError) as exc:
        bench.compare(summary(82.0, 2276.0), {'kimi-k2.5': entry}, model='kimi-k2.5', quantization='int4')
    assert str(exc.value).startswith('the baseline of kimi-k2.5 ') and words in str(exc.value)


def test_the_role_default_and_the_example_inventory_are_the_issue_table():
    with open(os.path.join(REPO, 'roles', 'benchmark', 'defaults', 'main.yml')) as handle:
        defaults = yaml.safe_load(handle)
    assert defaults['benchmark_baselines'] == KEYED
    assert defaults['benchmark_mode'] == 'gate' and defaults['benchmark_quantization'] == ''
    with open(os.path.join(REPO, 'inventories', 'example', 'group_vars', 'vllm_fleet.yml')) as handle:
        assert yaml.safe_load(handle)['benchmark_baselines'] == KEYED


def make_model_dir():
    spec = importlib.util.spec_from_file_location('gpufleet_sim_model_fixtures',
                                                  os.path.join(REPO, 'tests', 'sim', 'model', 'fixtures.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_model_dir


@pytest.mark.parametrize('hf_quant, layout, quant', [
    (True, 'plain', 'nvfp4'), (False, 'plain', 'int4'), (True, 'hf-cache', 'nvfp4'), (False, 'hf-cache', 'int4')])
def test_the_simulated_kimi_dirs_are_detected_and_gated_as_their_variant(tmp_path, hf_quant, layout, quant):
    """An NVFP4 export (hf_quant_config.json) is nvfp4: not gated by INT4's figures; the INT4 checkpoint is."""
    made = make_model_dir()(str(tmp_path / 'model'), layout=layout, hf_quant=hf_quant)
    found = bench_baseline.detect_quantization(made['model_dir'])
    assert found['name'] == quant
    verdict = bench.compare(summary(40.0, 900.0), KEYED, model='kimi-k2.5', quantization=found['name'])
    assert verdict['regressed'] is (quant == 'int4')
    if quant == 'nvfp4':
        assert verdict['message'].startswith('no baseline for kimi-k2.5 nvfp4: record one with benchmark_mode=record')


# --------------------------------------------------------------------------- quantisation detection


def write(directory, name, data):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(data if isinstance(data, str) else json.dumps(data))


@pytest.mark.parametrize('files, name, source', [
    ({'hf_quant_config.json': {'producer': {'name': 'modelopt'}, 'quantization': {'quant_algo': 'NVFP4',
                                                                                  'kv_cache_quant_algo': 'FP8'}},
      'config.json': {'quantization_config': {'quant_method': 'modelopt', 'quant_algo': 'NVFP4'}}},
     'nvfp4', 'hf_quant_config.json quantization.quant_algo'),
    ({'config.json': {'quantization_config': {'quant_method': 'modelopt', 'quant_algo': 'FP8'}}},
     'fp8', 'config.json quantization_config quant_algo'),
    # Kimi-K2.5's native INT4: compressed-tensors, 4-bit integer weights
    ({'config.json': {'text_config': {'quantization_config': {
        'quant_method': 'compressed-tensors', 'format': 'pack-quantized',
        'config_groups': {'group_0': {'weights': {'num_bits': 4, 'type': 'int', 'group_size': 32}}}}}}},
     'int4', 'config.json text_config.quantization_config quant_method compressed-tensors, its weights'),
    # MiniMax-M2.5: block FP8
    ({'config.json': {'quantization_config': {'quant_method': 'fp8', 'fmt': 'e4m3', 'weight_block_size': [128, 128]}}},
     'fp8', 'config.json quantization_config quant_method'),
    ({'config.json': {'quantization_config': {'quant_method': 'awq', 'bits': 4}}},
     'int4', 'config.json quantization_config quant_method awq, bits'),
    ({'config.json': {'torch_dtype': 'bfloat16'}}, 'bf16', 'config.json torch_dtype (no quantization_config)'),
])
def test_detection_reads_the_model_directory(tmp_path, files, name, source):
    for file_name, data in files.items():
        write(tmp_path / 'model', file_name, data)
    found = bench_baseline.detect_quantization(str(tmp_path / 'model'))
    assert (found['name'], found['source']) == (name, source)


def test_detection_follows_a_hugging_face_snapshot_link(tmp_path):
    write(tmp_path / 'blobs', 'abc123', {'quantization': {'quant_algo': 'NVFP4'}})
    (tmp_path / 'snapshot').mkdir()
    os.symlink(str(tmp_path / 'blobs' / 'abc123'), str(tmp_path / 'snapshot' / 'hf_quant_config.json'))
    assert bench_baseline.detect_quantization(str(tmp_path / 'snapshot'))['name'] == 'nvfp4'


@pytest.mark.parametrize('content, words', [
    ('{"quantization_config": ', 'config.json is not valid JSON'),
    ('[1, 2]', 'config.json does not hold a JSON object'),
    ('{"quantization_config": {"quant_method": "no such thing/with a slash"}}', 'is not a plain name'),
    ('{"architectures": ["X"]}', 'neither hf_quant_config.json nor config.json names a quantisation'),
    ('[' * 100000 + ']' * 100000, 'config.json is not valid JSON'),
])
def test_detection_of_a_bad_directory_is_unknown_with_the_reason(tmp_path, content, words):
    write(tmp_path / 'model', 'config.json', content)
    found = bench_baseline.detect_quantization(str(tmp_path / 'model'))
    assert found['name'] is None and words in found['detail']


def test_detection_reads_a_bounded_amount(tmp_path):
    write(tmp_path / 'model', 'config.json', json.dumps({'torch_dtype': 'bfloat16', 'pad': 'x' * 5000}))
    found = bench_baseline.detect_quantization(str(tmp_path / 'model'), max_bytes=1024)
    assert found['name'] is None and 'more than the 1024 read' in found['detail']
    assert bench_baseline.detect_quantization(str(tmp_path / 'absent'))['detail'].endswith('does not exist on the host')
    os.mkfifo(str(tmp_path / 'model' / 'hf_quant_config.json'))  # would block a plain open(): never opened
    assert 'hf_quant_config.json is not a regular file' in bench_baseline.detect_quantization(
        str(tmp_path / 'model'), max_bytes=1024)['detail']


@pytest.mark.parametrize('value, expected', [('NVFP4', 'nvfp4'), (' int4 ', 'int4'), ('W4A16_AWQ', 'w4a16_awq')])
def test_normalize_quantization(value, expected):
    assert bench_baseline.normalize_quantization(value) == expected


@pytest.mark.parametrize('value', ['', 'nv fp4', '-fp8', 'fp\n8', 'x' * 33, None, 4])
def test_normalize_quantization_refuses(value):
    with pytest.raises(ValueError):
        bench_baseline.normalize_quantization(value)


# --------------------------------------------------------------------------- record file


def recorded_entry(name, single, peak, quant='nvfp4', status='recorded', failure=None, version='0.11.1.dev484'):
    entry = report_samples.host(name, stream_tok_s=single, cap_tok_s=peak)
    entry['status'] = status
    entry['meta'].update(quantization=quant, run_id='20261206T020000Z', started='2026-12-06T02:00:00Z',
                         vllm_version=version, concurrency=[1, 8, 32, 64, 128, 256], input_len=1024, output_len=256,
                         failure=failure)
    return entry


def test_record_file_is_yaml_keyed_as_the_table_and_gates_the_next_run():
    entries = [recorded_entry('gpu-node-1', 61.0, 1480.0), recorded_entry('gpu-node-2', 62.0, 1500.0),
               recorded_entry('gpu-node-3', 63.0, 1520.0), recorded_entry('gpu-node-4', 5.0, 50.0, status='failed',
                                                                          failure='8 of 8 requests failed'),
               recorded_entry('gpu-node-5', 60.0, 1400.0, quant=None)]
    text = bench_baseline.render_record(entries, '20261206T020000Z', None)
    assert '# Not recorded: gpu-node-4: its sweep failed.' in text
    assert '# Not recorded: gpu-node-5: the quantisation of kimi-k2.5 is unknown (set benchmark_quantization).' in text
    data = yaml.safe_load(text)
    recorded = data['benchmark_baselines']['kimi-k2.5']['nvfp4']
    level1 = [row['output_tok_s'] for entry in entries[:3] for row in entry['summary']['levels']
              if row['concurrency'] == 1]
    assert recorded['single_stream_tok_s'] == round(sorted(level1)[1], 1)  # the median of the three hosts
    assert recorded['recorded']['figures'] == 'median of 3 hosts'
    assert [host['host'] for host in recorded['recorded']['hosts']] == ['gpu-node-1', 'gpu-node-2', 'gpu-node-3']
    assert recorded['recorded']['hosts'][0]['vllm_version'] == '0.11.1.dev484'
    assert recorded['recorded']['sweep'] == {'concurrency': [1, 8, 32, 64, 128, 256], 'input_len': 1024,
                                             'output_len': 256}
    assert recorded['recorded']['date'] == '2026-12-06T02:00:00Z'
    # pasted into the inventory, it is a baseline the gate uses
    verdict = bench.compare(entries[0]['summary'], data['benchmark_baselines'], model='kimi-k2.5', quantization='nvfp4')
    assert verdict['checked'] is True and verdict['regressed'] is False


def starved(entry, *names):
    """ENTRY with the cross-check of NAMES' levels saying its client was starved (as bench_serve writes it)."""
    entry['summary']['crosscheck'] = dict(
        (name, {'status': 'client_starved' if name in names else 'agree', 'server_tok_s': 2400.0 if name == 'peak_tok_s'
                else 84.0, 'reason': 'the client read less than the server generated'})
        for name in bench.COMPARED_METRICS)
    return entry


def test_record_mode_leaves_out_what_a_starved_client_measured(tmp_path):
    # three hosts: the second's single-stream level starved, the third's every level: neither figure may become
    # the baseline (a starved figure is low, and a low baseline lets a real regression pass)
    entries = [starved(recorded_entry('gpu-node-1', 82.0, 2276.0)),
               starved(recorded_entry('gpu-node-2', 41.0, 2290.0), 'single_stream_tok_s'),
               starved(recorded_entry('gpu-node-3', 30.0, 900.0), 'single_stream_tok_s', 'peak_tok_s')]
    table, skipped = bench_baseline.record_table(entries)
    recorded = table['kimi-k2.5']['nvfp4']
    single = [[row['output_tok_s'] for row in entry['summary']['levels'] if row['concurrency'] == 1][0]
              for entry in entries]
    assert recorded['single_stream_tok_s'] == round(single[0], 1)  # node-1 alone
    assert recorded['peak_tok_s'] == round((entries[0]['summary']['peak_tok_s'] +
                                            entries[1]['summary']['peak_tok_s']) / 2, 1)
    assert [host['host'] for host in recorded['recorded']['hosts']] == ['gpu-node-1', 'gpu-node-2']
    assert recorded['recorded']['hosts'][1]['single_stream_tok_s'] is None
    assert recorded['recorded']['figures'] == 'median of 2 hosts (single stream of 1: the others left out)'
    assert any(reason.startswith('gpu-node-2: its single stream figure, ') and 'starved' in reason and '84.0' in reason
               for reason in skipped), skipped
    assert 'gpu-node-3: no figure of its sweep can be trusted as a baseline (every one was measured by a starved ' \
           'client)' in skipped
    text = bench_baseline.render_record(entries, '20261206T020000Z', None)
    assert '# Not recorded: gpu-node-2: its single stream figure' in text
    assert '# Not recorded: gpu-node-3: no figure of its sweep can be trusted' in text
    assert yaml.safe_load(text)['benchmark_baselines']['kimi-k2.5']['nvfp4']['single_stream_tok_s'] == round(single[0], 1)
    # every host starved: nothing is recorded, and the file says why
    text = bench_baseline.render_record([entries[2]], 'r', None)
    assert '# No host of this run measured a baseline.' in text and 'gpu-node-3: no figure' in text


def test_record_mode_names_the_starved_figures_in_the_tasks_warnings(tmp_path, run_module):
    entries = [starved(recorded_entry('gpu-node-1', 82.0, 2276.0, quant='int4', status='ok')),
               starved(recorded_entry('gpu-node-2', 41.0, 2290.0, quant='int4', status='ok'), 'single_stream_tok_s'),
               starved(recorded_entry('gpu-node-3', 30.0, 900.0, quant='int4', status='ok'), 'single_stream_tok_s',
                       'peak_tok_s')]
    code, result = run_module({'path': str(tmp_path / 'r1'), 'results': [result_of(entry, 'r1') for entry in entries],
                               'record': True, 'png': False})
    assert code == 0, result
    assert [host['host'] for host in result['baselines']['kimi-k2.5']['int4']['recorded']['hosts']] == \
        ['gpu-node-1', 'gpu-node-2']
    warnings = ' '.join(result.get('warnings') or [])
    assert 'Not recorded as a baseline: gpu-node-2: its single stream figure' in warnings
    assert 'Not recorded as a baseline: gpu-node-3: no figure of its sweep can be trusted' in warnings


def test_record_file_keeps_hostile_names_as_text():
    entry = recorded_entry('gpu-node-1', 61.0, 1480.0, version='1.0\n"evil": true # x')
    entry['meta']['model'] = 'yes'
    data = yaml.safe_load(bench_baseline.render_record([entry], 'run: "x"\nbad', None))
    assert list(data['benchmark_baselines']) == ['yes']
    assert data['benchmark_baselines']['yes']['nvfp4']['recorded']['hosts'][0]['vllm_version'] == '1.0 "evil": true # x'
    assert bench_baseline.render_record([], 'r', None).endswith('benchmark_baselines: {}\n')


# --------------------------------------------------------------------------- history


def line(run_id, host='gpu-node-1', peak=2276.0, single=82.0, status='ok'):
    return {'schema': 1, 'run_id': run_id, 'date': run_id, 'host': host, 'model': 'kimi-k2.5', 'quantization': 'int4',
            'vllm_version': '0.11.1', 'mode': 'gate', 'status': status, 'single_stream_tok_s': single,
            'peak_tok_s': peak, 'peak_concurrency': 64, 'baseline_single_stream_tok_s': 82.0,
            'baseline_peak_tok_s': 2276.0, 'tolerance': 0.1}


def test_history_appends_once_per_run_and_host(tmp_path):
    path = bench_history.history_path(str(tmp_path), line('r1'))
    assert path == str(tmp_path / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl')
    assert bench_history.append(path, line('r1')) is True
    assert bench_history.append(path, line('r1', peak=1.0)) is False  # the same run again: not a second line
    assert bench_history.append(path, line('r2', peak=2200.0)) is True
    lines, problems = bench_history.read(path)
    assert [item['run_id'] for item in lines] == ['r1', 'r2'] and problems == []
    assert lines[0]['peak_tok_s'] == 2276.0


def test_history_names_are_plain_whatever_the_host_says(tmp_path):
    hostile = dict(line('r1'), host='../../etc', model='a/b c', quantization=None)
    path = bench_history.history_path(str(tmp_path), hostile)
    assert os.path.dirname(os.path.dirname(path)) == str(tmp_path) and path.endswith('a_b_c.unknown.jsonl')


def test_history_read_skips_corrupt_lines_and_names_them(tmp_path):
    path = tmp_path / 'h.jsonl'
    good = json.dumps(line('r1'))
    path.write_text('\n'.join([good, '{"truncated": ', '[1, 2]', json.dumps(dict(line('r2'), schema=9)),
                               json.dumps(dict(line('r3'), peak_tok_s='fast')), json.dumps({'run_id': 'r4'}),
                               '\xff\xfe', json.dumps(line('r5'))]) + '\n')
    lines, problems = bench_history.read(str(path))
    assert [item['run_id'] for item in lines] == ['r1', 'r5']
    assert problems == ['%s:2: not JSON, skipped' % path, '%s:3: not a JSON object, skipped' % path,
                        '%s:4: schema 9, not 1, skipped' % path,
                        '%s:5: peak_tok_s is the text \'fast\', not a number from 0 to 10,000,000 (tok/s), skipped' % path,
                        '%s:6: without schema, host, model, status, skipped' % path,
                        '%s:7: not JSON, skipped' % path]


def test_history_is_capped_in_lines_and_bytes_keeping_the_newest(tmp_path):
    path = str(tmp_path / 'h.jsonl')
    for number in range(12):
        bench_history.append(path, line('r%02d' % number), max_lines=8, max_bytes=64 * 1024)
    lines, dummy = bench_history.read(path)
    # at 9 lines the file keeps the newest 6 (three quarters of 8) with the new one, then grows again
    assert [item['run_id'] for item in lines] == ['r03', 'r04', 'r05', 'r06', 'r07', 'r08', 'r09', 'r10', 'r11'][-len(lines):]
    assert 6 <= len(lines) <= 8 and lines[-1]['run_id'] == 'r11'
    size = len(json.dumps(line('r000'), sort_keys=True)) + 1
    cap = 40 * 1024
    for number in range(12, 400):
        bench_history.append(path, line('r%03d' % number), max_lines=10000, max_bytes=cap)
        assert os.path.getsize(path) <= cap
    lines, problems = bench_history.read(path, max_bytes=cap)
    assert problems == [] and cap * 3 // 4 // size - 1 <= len(lines) <= cap // size
    assert [item['run_id'] for item in lines] == ['r%03d' % n for n in range(400 - len(lines), 400)]
    assert not [name for name in os.listdir(str(tmp_path)) if name.startswith('.gpufleet-tmp-')]


def test_history_read_is_bounded_to_the_last_bytes(tmp_path):
    path = tmp_path / 'h.jsonl'
    path.write_text(''.join(json.dumps(line('r%03d' % n)) + '\n' for n in range(300)))
    lines, problems = bench_history.read(str(path), max_bytes=4096)
    assert lines[-1]['run_id'] == 'r299' and len(lines) < 20
    assert problems[0].endswith('only the last 4096 bytes were read (from byte %d)' % (os.path.getsize(str(path)) - 4096))


def test_history_refuses_a_link_and_a_bad_line(tmp_path):
    target = tmp_path / 'elsewhere'
    target.write_text('')
    os.symlink(str(target), str(tmp_path / 'h.jsonl'))
    with pytest.raises(bench_history.HistoryFileError, match='symbolic link'):
        bench_history.append(str(tmp_path / 'h.jsonl'), line('r1'))
    with pytest.raises(bench_history.HistoryFileError, match='without host'):
        bench_history.append(str(tmp_path / 'g.jsonl'), dict(line('r1'), host=''))
    with pytest.raises(ValueError):
        bench_history.append(str(tmp_path / 'g.jsonl'), dict(line('r1'), peak_tok_s=float('nan')))


def test_concurrent_appends_lose_no_line_and_tear_none(tmp_path):
    path = str(tmp_path / 'h.jsonl')
    errors = []

    def writer(host):
        try:
            for number in range(50):
                bench_history.append(path, line('r%03d' % number, host=host))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=writer, args=(host,)) for host in ('a', 'b')]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    lines, problems = bench_history.read(path)
    assert problems == [] and len(lines) == 100
    assert set((item['host'], item['run_id']) for item in lines) == set(
        (host, 'r%03d' % number) for host in ('a', 'b') for number in range(50))


def test_an_append_that_waited_while_another_run_trimmed_lands_in_the_new_file(tmp_path, monkeypatch):
    """The race: run A opens the file, run B trims it (a new file renamed over it), then A gets the old file's lock."""
    path = str(tmp_path / 'h.jsonl')
    for number in range(4):
        bench_history.append(path, line('r%d' % number), max_lines=4)
    real_lock, raced = bench_history._lock, []

    def lock_after_another_run_trimmed(handle, *args, **kwargs):
        if not raced:
            raced.append(True)
            assert bench_history.append(path, line('other'), max_lines=4) is True  # trims: a new inode
        return real_lock(handle, *args, **kwargs)
    monkeypatch.setattr(bench_history, '_lock', lock_after_another_run_trimmed)
    assert bench_history.append(path, line('mine'), max_lines=4) is True
    lines, dummy = bench_history.read(path)
    assert [item['run_id'] for item in lines][-2:] == ['other', 'mine']


def test_trend_sentence_over_the_last_runs():
    lines = [line('r%d' % n, peak=2300.0 - 25 * n) for n in range(8)] + [line('r8', peak=None, status='failed')]
    sentence = bench_history.trend_sentence('gpu-node-1', 'kimi-k2.5', 'int4', lines, runs=5)
    assert sentence == ('gpu-node-1 (kimi-k2.5 int4): peak -4.5 % over the last 5 runs (2,225.0 to 2,125.0 tok/s); '
                        'single stream \u00b10.0 % over the last 5 runs (82.0 to 82.0 tok/s)')
    first = bench_history.trend_sentence('h', 'm', None, [line('r1')], runs=5)
    assert first == 'h (m quantisation unknown): peak: first run in the history; single stream: first run in the history'


# --------------------------------------------------------------------------- plot


def test_trend_png_is_drawn_with_every_host(tmp_path):
    pytest.importorskip('matplotlib')
    data = bench_history.render_trend_png(report_samples.history(), 'history')
    assert data.startswith(b'\x89PNG') and 20000 < len(data) < 400000
    path = tmp_path / 'trend.png'
    path.write_bytes(data)
    from matplotlib import image
    pixels = image.imread(str(path), format='png')
    assert (pixels.shape[1], pixels.shape[0]) == (1400, 480)
    assert bench_history.render_trend_png(report_samples.history(), 'history') == data  # same input, same bytes
    empty = bench_history.render_trend_png([], 'nothing')
    assert empty.startswith(b'\x89PNG') and len(empty) < len(data)


# --------------------------------------------------------------------------- the module: record, history, trend


@pytest.fixture
def run_module():
    return action_runner('bench_report')


def result_of(entry, run_id):
    stored = dict(entry['meta'], host=entry['host'], run_id=run_id, status=entry['status'], summary=entry['summary'],
                  verdict=entry['verdict'], schema=1)
    return {'host': entry['host'], 'run_id': run_id, 'files': {}, 'summary': stored}


def test_module_records_appends_history_and_writes_the_trend(tmp_path, run_module):
    pytest.importorskip('matplotlib')
    history = tmp_path / 'history'
    for night, cap in enumerate((2300.0, 2280.0, 2250.0)):
        run_id = '2026120%dT020000Z' % (night + 1)
        entry = recorded_entry('gpu-node-1', 82.0, cap, quant='int4', status='ok')
        entry['meta'].update(run_id=run_id, started='2026-12-0%dT02:00:00Z' % (night + 1))
        args = {'path': str(tmp_path / run_id), 'results': [result_of(entry, run_id)], 'history_dir': str(history),
                'record': night == 2}
        code, result = run_module(args)
        assert code == 0, result
    assert result['history']['appended'] == [str(history / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl')]
    assert result['history']['trend'][0].startswith('gpu-node-1 (kimi-k2.5 int4): peak -2.2 % over the last 3 runs')
    assert result['history']['png'] == str(tmp_path / run_id / 'trend.png')
    assert os.path.getsize(result['history']['png']) > 10000
    markdown = (tmp_path / run_id / 'report.md').read_text()
    assert '## Trend' in markdown and '- gpu-node-1 (kimi-k2.5 int4): peak -2.2 % over the last 3 runs' in markdown
    assert '![Single-stream and peak output tok/s per host across runs, with the baseline band](trend.png)' in markdown
    assert 'Record mode: no gate. The baselines measured are in `%s`' % (tmp_path / run_id / 'baselines.yml') in markdown
    assert result['baseline_file'] == str(tmp_path / run_id / 'baselines.yml')
    recorded = yaml.safe_load((tmp_path / run_id / 'baselines.yml').read_text())['benchmark_baselines']
    assert list(recorded) == ['kimi-k2.5'] and list(recorded['kimi-k2.5']) == ['int4']
    assert result['baselines'] == recorded
    # again: nothing appended, nothing rewritten
    code, again = run_module(args)
    assert code == 0 and again['changed'] is False and again['history']['appended'] == [] and again['written'] == []
    lines, dummy = bench_history.read(str(history / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl'))
    assert [item['run_id'] for item in lines] == ['20261201T020000Z', '20261202T020000Z', '20261203T020000Z']


def test_a_huge_figure_in_the_history_no_longer_breaks_this_report_or_the_next(tmp_path, run_module):
    pytest.importorskip('matplotlib')
    target = tmp_path / 'history' / 'gpu-node-1' / 'kimi-k2.5.int4.jsonl'
    target.parent.mkdir(parents=True)
    huge = dict(line('rx'), peak_tok_s=1.7976931348623157e308, single_stream_tok_s=1.7976931348623157e308)
    target.write_text(json.dumps(line('r0')) + '\n' + json.dumps(huge) + '\n')
    for run_id in ('r1', 'r2'):
        entry = recorded_entry('gpu-node-1', 82.0, 2276.0, quant='int4', status='ok')
        code, result = run_module({'path': str(tmp_path / run_id), 'results': [result_of(entry, run_id)],
                                   'history_dir': str(tmp_path / 'history')})
        assert code == 0, result
        assert result['history']['problems'] == [
            '%s:2: single_stream_tok_s is the number 1.7976931348623157e+308, not a number from 0 to 10,000,000 '
            '(tok/s), skipped' % target]
        assert os.path.getsize(str(tmp_path / run_id / 'trend.png')) > 1000
        markdown = (tmp_path / run_id / 'report.md').read_text()
        assert 'inf' not in result['history']['trend'][0] and '## Trend' in markdown


@pytest.mark.parametrize('broken', ['trend', 'report'])
def test_any_error_while_drawing_leaves_the_report_written_without_that_figure(
        tmp_path, run_module, monkeypatch, broken):
    pytest.importorskip('matplotlib')
    from ansible_collections.gpufleet.vllm.plugins.module_utils.bench import report as bench_report_utils

    def refuse(*args, **kwargs):
        raise ValueError('Axis limits cannot be NaN or Inf')
    if broken == 'trend':
        monkeypatch.setattr(bench_history, 'render_trend_png', refuse)
    else:
        monkeypatch.setattr(bench_report_utils, 'render_png', refuse)
    entry = recorded_entry('gpu-node-1', 82.0, 2276.0, quant='int4', status='ok')
    code, result = run_module({'path': str(tmp_path / 'r1'), 'results': [result_of(entry, 'r1')],
                               'history_dir': str(tmp_path / 'history')})
    assert code == 0, result
    markdown = (tmp_path / 'r1' / 'report.md').read_text()
    name = 'trend.png' if broken == 'trend' else 'report.png'
    assert not (tmp_path / 'r1' / name).exists()
    assert '](%s)' % name not in markdown
    assert ('%s was not drawn: ValueError while drawing: Axis limits cannot be NaN or Inf. report.md was written '
            'without the figure.' % name) in result['warnings']
    if broken == 'report':
        assert result['png'] is None and 'ValueError' in result['plot_skipped']
        assert (tmp_path / 'r1' / 'trend.png').exists()
    else:
        assert result['history']['png'] is None and (tmp_path / 'r1' / 'report.png').exists()


def test_module_check_mode_appends_nothing(tmp_path, run_module):
    entry = recorded_entry('gpu-node-1', 82.0, 2276.0, quant='int4', status='ok')
    code, result = run_module({'path': str(tmp_path / 'r1'), 'results': [result_of(entry, 'r1')],
                               'history_dir': str(tmp_path / 'history'), 'png': False}, check=True)
    assert code == 0 and result['history']['appended'] == [str(tmp_path / 'history' / 'gpu-node-1' /
                                                               'kimi-k2.5.int4.jsonl')]
    assert not (tmp_path / 'history').exists() and not (tmp_path / 'r1').exists()


def test_module_reports_a_corrupt_history_line_and_goes_on(tmp_path, run_module):
    target = tmp_path / 'history' / 'gpu-node-1'
    target.mkdir(parents=True)
    (target / 'kimi-k2.5.int4.jsonl').write_text(json.dumps(line('r0')) + '\n{"half a line\n')
    entry = recorded_entry('gpu-node-1', 82.0, 2276.0, quant='int4', status='ok')
    code, result = run_module({'path': str(tmp_path / 'r1'), 'results': [result_of(entry, 'r1')],
                               'history_dir': str(tmp_path / 'history'), 'png': False})
    assert code == 0
    assert result['history']['problems'] == ['%s:2: not JSON, skipped' % (target / 'kimi-k2.5.int4.jsonl')]
    assert result['problems'] == result['history']['problems']
    lines, dummy = bench_history.read(str(target / 'kimi-k2.5.int4.jsonl'))
    assert [item['run_id'] for item in lines] == ['r0', 'r1']


def test_trend_png_marks_no_regression_on_a_record_run_and_bands_the_gated_baseline():
    pytest.importorskip('matplotlib')
    gated = [line('r1'), dict(line('r2', peak=2000.0), mode='record', baseline_peak_tok_s=10000.0), line('r3')]
    series = [{'host': 'gpu-node-1', 'model': 'kimi-k2.5', 'quantization': 'int4', 'lines': gated}]
    assert [bench_history._below(item, 'peak_tok_s') for item in gated] == [False, False, False]
    assert bench_history._below(dict(line('r4', peak=2000.0)), 'peak_tok_s') is True
    assert bench_history.render_trend_png(series, 'x').startswith(b'\x89PNG')
