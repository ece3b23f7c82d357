# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVML reading on odd hosts: names that are not UTF-8, answers of the wrong type, a driver that hangs."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import sys
import threading
import time
import types

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.vllm.plugins.module_utils import nvml
from ansible_collections.gpufleet.vllm.plugins.modules import nvml_vram_info

pynvml = pytest.importorskip('pynvml')


class FakeNVMLError(Exception):
    def __init__(self, value):
        super(FakeNVMLError, self).__init__('NVML error %d' % value)
        self.value = value


def fake_pynvml(name=b'NVIDIA RTX PRO 6000', cc=(12, 0), init=None):
    """A pynvml whose string calls go through nvidia-ml-py's own convertStrBytes (strict UTF-8 decoding)."""
    gib = 1024 ** 3
    return types.SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVML_ERROR_GPU_IS_LOST=15,
        nvmlInit=init or (lambda: None),
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=pynvml.convertStrBytes(lambda: b'580.95.05'),
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=pynvml.convertStrBytes(lambda handle: name),
        nvmlDeviceGetUUID=pynvml.convertStrBytes(lambda handle: b'GPU-0000'),
        nvmlDeviceGetPciInfo=lambda handle: types.SimpleNamespace(busId=b'00000000:01:00.0'),
        nvmlDeviceGetCudaComputeCapability=lambda handle: cc,
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=96 * gib, used=gib, free=95 * gib),
    )


def test_a_gpu_name_that_is_not_utf8_is_escaped_not_an_error():
    result = nvml.collect(expect={'count': 1}, pynvml=fake_pynvml(name=b'NVIDIA \xff\xfe RTX\nX\x1b[2J'))
    assert result['nvml_available'] is True and result['expectation_met'] is True
    assert result['gpus'][0]['name'] == 'NVIDIA \\xff\\xfe RTX\\x0aX\\x1b[2J'
    json.dumps(result, allow_nan=False).encode('utf-8')


def test_an_answer_of_the_wrong_type_is_an_nvml_error_not_a_traceback():
    result = nvml.collect(pynvml=fake_pynvml(cc=None))
    assert result['nvml_available'] is False
    error = result['nvml_error']
    assert error['name'] == 'NVML_UNEXPECTED' and error['gpu_index'] == 0
    assert error['message'].startswith('NVML cannot query GPU 0 of 1: NVML_UNEXPECTED (TypeError: ')
    assert 'report it' in error['message']


def test_a_hung_driver_ends_at_the_call_timeout():
    release = threading.Event()
    try:
        started = time.monotonic()
        result = nvml.collect_bounded(timeout=0, call_timeout=1, pynvml=fake_pynvml(init=lambda: release.wait(20)))
        assert time.monotonic() - started < 3
        assert result['nvml_available'] is False and result['expectation_met'] is False
        assert result['nvml_error']['name'] == 'NVML_TIMEOUT'
        assert result['nvml_error']['message'].startswith(
            'NVML is not usable on this host: NVML_TIMEOUT (NVML did not answer within 1.0 s (call_timeout 1 s after '
            'timeout 0 s)). The NVIDIA driver did not answer in time')
        assert result['nvml_error']['message'].endswith('Nothing was changed.')
    finally:
        release.set()


def test_collect_bounded_returns_what_collect_read():
    result = nvml.collect_bounded(expect={'count': 1}, call_timeout=5, pynvml=fake_pynvml())
    assert result['expectation_met'] is True and result['gpus'][0]['name'] == 'NVIDIA RTX PRO 6000'


@pytest.fixture
def module_with(monkeypatch, capsys):
    def _run(fake, args):
        monkeypatch.setitem(sys.modules, 'pynvml', fake)
        with patch_module_args(dict(args, _ansible_check_mode=False)):
            with pytest.raises(SystemExit) as exc:
                nvml_vram_info.main()
        return exc.value.code, json.loads(capsys.readouterr().out)
    return _run


def test_the_module_fails_cleanly_when_the_driver_hangs(module_with):
    release = threading.Event()
    try:
        code, result = module_with(fake_pynvml(init=lambda: release.wait(20)), {'call_timeout': 1})
    finally:
        release.set()
    assert code == 1 and result['failed'] is True and result['changed'] is False
    assert 'NVML_TIMEOUT' in result['msg'] and 'Traceback' not in json.dumps(result)


def test_the_module_returns_an_odd_gpu_name_as_valid_text(module_with):
    code, result = module_with(fake_pynvml(name=b'GPU \xc3\x28'), {'expect': {'count': 1}})
    assert code == 0, result
    assert result['gpus'][0]['name'] == 'GPU \\xc3('
