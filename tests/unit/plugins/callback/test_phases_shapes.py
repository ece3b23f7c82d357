# SPDX-License-Identifier: GPL-3.0-or-later
"""The phases callback never raises, whatever shape a result has: a failed loop item that is an empty string, a
dict, None or a number, a message that is a list or a megabyte, keys missing; and an error of its own still shows
the failure (raw) on the terminal, passes it to the log, and counts the host's phase as failed.

Most cases call the callback's events directly with results shaped as ansible-core's; one runs ansible-playbook."""

import os
import re

import pytest

from ansible_collections.gpufleet.vllm.plugins.callback import phases

from test_phases import HOSTS, playbook_run  # pylint: disable=import-error


class FakeHost:
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


class FakeTask:
    def __init__(self, name='Check each model', action='ansible.builtin.fail', args=None, task_vars=None):
        self.name, self.action = name, action
        self.args, self.vars = args or {}, task_vars or {}
        self._role = self._parent = None
        self._uuid = 'task-%s' % name
        self.check_mode = False
        self.run_once = False


class FakeResult:
    """The parts of ansible-core's TaskResult the callback reads."""

    def __init__(self, result, host='gpu-node-1', task=None):
        self._result, self._host, self._task = result, FakeHost(host), task or FakeTask()
        self.warnings, self.deprecations = [], []

    @property
    def result(self):
        return self._result

    @property
    def host(self):
        return self._host

    @property
    def task(self):
        return self._task

    def is_changed(self):
        return bool(self._result.get('changed')) if isinstance(self._result, dict) else False


class FakeStats:
    def __init__(self, hosts):
        self.processed = dict((host, 1) for host in hosts)

    @staticmethod
    def summarize(host):
        return {'ok': 0, 'changed': 0, 'failures': 1, 'unreachable': 0, 'rescued': 0, 'ignored': 0, 'skipped': 0}


class FullLog:
    """Stands in for ansible-core's default callback that writes the log: records what it was given."""

    def __init__(self):
        self.events = []
        self._current_task_result = None

    def __getattr__(self, name):
        if not name.startswith('v2_'):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.events.append((name, args))


@pytest.fixture
def callback():
    made = phases.CallbackModule()
    made._plugin_options = {'log_dir': 'unused', 'log_max_size': 0, 'tail_lines': 20, 'show_var': 'gpufleet_show',
                            'report_dir_fact': ''}
    made._full = made.full_log = FullLog()
    return made


def shown(capsys):
    captured = capsys.readouterr()
    return (captured.out + captured.err).splitlines()


def phase_line(lines, host='gpu-node-1', phase='play'):
    found = [line for line in lines if re.match(r'^  %s +%s +' % (re.escape(host), re.escape(phase)), line)]
    assert len(found) == 1, lines
    return found[0]


def failed_loop(*items):
    return {'failed': True, 'msg': 'One or more items failed', 'changed': False,
            'results': [dict(item, failed=True, ansible_loop_var='item') for item in items]}


ITEM_SHAPES = [
    ({'item': '', 'msg': 'the model directory is empty'}, "  item '' (empty):"),
    ({'item': '   ', 'msg': 'blank'}, "  item '   ' (blank):"),
    ({'item': {'name': 'kimi', 'dir': '/m'}, 'msg': 'a dict'}, '  item name: kimi:'),
    ({'item': None, 'msg': 'none'}, '  item:'),
    ({'item': 7, 'msg': 'a number'}, '  item 7:'),
    ({'item': 2.5, 'msg': 'a float'}, '  item 2.5:'),
    ({'item': ['a', 'b'], 'msg': 'a list'}, '  item a:'),
    ({'item': '\n\nsecond', 'msg': 'lines'}, "  item '\\n\\nsecond' (empty):"),
    ({'_ansible_item_label': '', 'item': 'x', 'msg': 'an empty label'}, "  item '' (empty):"),
    ({'item': 'gpu\x1b[2Jx\u202e', 'msg': 'escapes'}, '  item gpu\\x1b[2Jx\\u202e:'),
]


@pytest.mark.parametrize('item, label', ITEM_SHAPES, ids=[label for dummy, label in ITEM_SHAPES])
def test_a_failed_loop_item_of_any_shape_is_shown_and_the_phase_failed(callback, capsys, item, label):
    callback.v2_runner_on_failed(FakeResult(failed_loop(item)))
    callback.v2_playbook_on_stats(FakeStats(['gpu-node-1']))
    lines = shown(capsys)
    assert lines[0] == 'FAILED gpu-node-1 | play | Check each model', lines
    assert label in lines, lines
    assert '    msg: %s' % item['msg'] in lines, lines
    assert re.match(r'^  gpu-node-1 +play +failed +1 task ', phase_line(lines)), lines
    assert [name for name, dummy in callback.full_log.events][:1] == ['v2_runner_on_failed']
    assert not any('could not show this event' in line for line in lines), lines


def test_messages_of_odd_shapes_are_shown_whole_or_cut_never_raised(callback, capsys):
    huge = '\n'.join('line %d' % number for number in range(100000))
    result = {'failed': True, 'msg': ['first', {'b': 2}, 3], 'rc': 'not a number', 'cmd': ['x'],
              'stderr': 'x' * (2 * phases.MSG_CHARS), 'stdout': ['a', 3, None], 'module_stderr': {'k': 'v'},
              'results': [{'failed': True, 'item': 'big', 'msg': huge}, 'not a dict', None,
                          {'failed': True, 'msg': None}, {'failed': True}]}
    callback.v2_runner_on_failed(FakeResult(result))
    lines = shown(capsys)
    text = '\n'.join(lines)
    assert '  msg:\n    - first\n    - b: 2\n    - 3' in text, text
    assert '  rc: not a number' in lines
    assert '  stderr (its last %d characters):' % phases.MSG_CHARS in lines
    assert '  stdout:' in lines and '    | 3' in lines
    assert '    line 199' in text and '    line 200\n' not in text
    assert '... (cut here: 100000 lines, %d characters in all; the log has the whole message)' % len(huge) in text
    assert len(text) < 4 * phases.MSG_CHARS
    assert not any('could not show this event' in line for line in lines), lines


def test_a_result_that_is_not_a_dict_and_missing_keys_do_not_raise(callback, capsys):
    callback.v2_runner_on_failed(FakeResult({}))
    callback.v2_runner_on_unreachable(FakeResult({'unreachable': True}, host='gpu-node-2'))
    callback.v2_runner_on_failed(FakeResult({'failed': True, 'results': 'not a list', 'msg': ''}, host='gpu-node-3'))
    lines = shown(capsys)
    assert lines.count('  (no message; the log has the whole result)') == 3, lines
    assert not any('could not show this event' in line for line in lines), lines


def test_an_error_of_the_callback_itself_shows_the_raw_failure_and_counts_it(callback, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise IndexError('list index out of range')
    monkeypatch.setattr(callback, '_detail', broken)
    callback.v2_runner_on_failed(FakeResult({'failed': True, 'msg': 'the service did not stop \u202e'}))
    callback.v2_playbook_on_stats(FakeStats(['gpu-node-1']))
    lines = shown(capsys)
    assert lines[1] == ('[gpufleet.vllm.phases] could not show this event (v2_runner_on_failed: IndexError: '
                        "'list index out of range'); what ansible-core sent follows, as it is"), lines
    assert lines[2] == "  gpu-node-1 | Check each model: {'failed': True, 'msg': 'the service did not stop \\u202e'}"
    # the event reached the log's default callback all the same, and the phase says failed, not skipped
    assert [name for name, dummy in callback.full_log.events][:1] == ['v2_runner_on_failed']
    assert re.match(r'^  gpu-node-1 +play +failed +1 task ', phase_line(lines)), lines


def test_every_event_is_guarded(callback, capsys, monkeypatch):
    events = sorted(name for name in vars(phases.CallbackModule) if name.startswith('v2_'))
    assert len(events) >= 20
    for name in events:
        assert getattr(phases.CallbackModule, name).__wrapped__, name
    # ansible-core still sees which events the callback implements (and no deprecated one)
    callback._init_callback_methods()
    implemented = callback._implemented_callback_methods
    assert {'v2_runner_on_failed', 'v2_runner_on_ok', 'v2_runner_item_on_failed', 'v2_playbook_on_stats'} <= implemented
    assert 'v2_on_any' not in implemented
    monkeypatch.setattr(phases, '_phase_of', lambda *args: 1 / 0)
    callback.v2_runner_on_ok(FakeResult({'changed': False}))
    callback.v2_runner_on_skipped(FakeResult({'skipped': True}))
    lines = shown(capsys)
    assert len([line for line in lines if 'could not show this event' in line]) == 2, lines
    assert [name for name, dummy in callback.full_log.events] == ['v2_runner_on_ok', 'v2_runner_on_skipped']


def test_the_log_stops_without_failing_the_run_when_it_cannot_be_written(tmp_path):
    log = phases._LogFile(str(tmp_path / 'logs' / 'run.log'), 1024 * 1024)

    class Full:
        name = 'full'

        @staticmethod
        def write(text):
            raise OSError(28, 'No space left on device')

        def close(self):
            return None
    log._handle = Full()
    log.write('a line\n')
    log.write('another\n')
    assert log.truncated and 'No space left on device' in log.error


def test_an_empty_string_item_fails_in_a_real_run_with_its_message_on_the_terminal_and_in_the_log(tmp_path):
    play = """
- name: Roll out
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Check each model directory
      ansible.builtin.fail:
        msg: "the model directory '{{ item }}' is not set"
      loop: ["", "/models/kimi"]
      when: inventory_hostname == 'gpu-node-1'
    - name: After the check
      ansible.builtin.debug:
        msg: checked
"""
    tmp = str(tmp_path)
    rc, out, err = playbook_run(tmp, play, hosts=HOSTS[:2], env={"GPUFLEET_PHASES_LOG_DIR": "logs"})
    assert rc == 2, out + err
    lines = out.splitlines()
    assert 'FAILED gpu-node-1 | Roll out | Check each model directory' in lines, out
    assert "  item '' (empty):" in lines and "    msg: the model directory '' is not set" in lines, out
    assert "    msg: the model directory '/models/kimi' is not set" in lines, out
    assert re.match(r'^  gpu-node-1 +Roll out +failed +1 task ', phase_line(lines, phase='Roll out')), out
    assert re.match(r'^  gpu-node-2 +Roll out +ok +2 tasks ', phase_line(lines, 'gpu-node-2', 'Roll out')), out
    assert 'could not show this event' not in out and 'Traceback' not in out + err
    logs = [os.path.join(tmp, 'logs', name) for name in os.listdir(os.path.join(tmp, 'logs'))]
    with open(logs[0], encoding='utf-8') as handle:
        log = handle.read()
    assert "the model directory '' is not set" in log, log
