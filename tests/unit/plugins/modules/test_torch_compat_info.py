# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.vllm.torch_compat_info: the staged torch against the driver and the GPUs, read from files, never imported.

The module runs as Ansible runs it, against the fake NVML library (real
pynvml), on torch trees the tests write (version.py and a libtorch_python.so
holding an architecture list among other strings) and, when this machine
has it, on the real torch of the bench environment (vLLM's own torch wheel).
"""

import json
import os
import subprocess
import sys

import pytest

from helpers import load_source

from ansible_collections.gpufleet.vllm.plugins.module_utils import torchcompat

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
MODULE = os.path.join(REPO, "plugins", "modules", "torch_compat_info.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
BENCH_ENV = os.environ.get("GPUFLEET_BENCH_ENV") or os.path.expanduser("~/.cache/gpufleet-vllm/bench-env")
ARCHS = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"

state = load_source("fakenvml_state_for_torch_compat", "tests", "sim", "fakenvml", "state.py")


def make_env(root, version="2.14.0+cu130", cuda="'13.0'", archs=ARCHS, library=None):
    """A venv-shaped tree with a torch the way its wheel installs it (only the files the check reads)."""
    site = os.path.join(str(root), "env", "lib", "python3.11", "site-packages")
    if version is None:
        os.makedirs(site, exist_ok=True)
        return os.path.join(str(root), "env")
    os.makedirs(os.path.join(site, "torch", "lib"))
    with open(os.path.join(site, "torch", "version.py"), "w") as f:
        f.write("from typing import Optional\n\n__all__ = ['__version__', 'cuda']\n__version__ = '%s'\n"
                "debug = False\ncuda: Optional[str] = %s\ngit_version = 'abc'\nhip: Optional[str] = None\n"
                % (version, cuda))
    if library is None:
        # other strings around it, as in the real library: NVCC flags, a lone word, text
        library = (b"\x7fELF" + b"\x00" * 64 + b"-gencode arch=compute_75,code=sm_75\x00sm_80\x00some text\x00"
                   + (b"\x00" + archs.encode() + b"\x00" if archs else b"") + os.urandom(4096) + b"\x00end\x00")
    with open(os.path.join(site, "torch", "lib", "libtorch_python.so"), "wb") as f:
        f.write(library)
    return os.path.join(str(root), "env")


def run(tmp_path, lib_dir, state_file, venv, check_mode=False, **args):
    args = dict(args, venv=venv)
    if check_mode:
        args["_ansible_check_mode"] = True
    args_file = os.path.join(str(tmp_path), "args.json")
    with open(args_file, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir, FAKE_NVML_STATE=state_file, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run([sys.executable, MODULE, args_file], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def set_state(state_file, **pairs):
    state.update_state(lambda d: d.update(dict((k.replace("__", "."), str(v)) for k, v in pairs.items())), state_file)


def test_a_cu130_build_with_sm_120_runs_on_eight_blackwell_gpus(tmp_path, lib_dir, state_file):
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path))
    assert rc == 0, result
    assert result["compatible"] is True and result["problems"] == []
    assert result["torch"] == {"present": True, "version": "2.14.0+cu130", "cuda": "13.0", "arch_list": ARCHS.split()}
    assert result["driver_cuda_version"] == "13.0"
    assert [(g["index"], g["compute_capability"], g["runs"], g["arch"]) for g in result["gpus"]] == [
        (i, "12.0", "binary", "sm_120") for i in range(8)]
    assert "runs on this host's driver (CUDA 13.0) and its 8 GPU(s)" in result["msg"]
    assert result["changed"] is False


def test_a_driver_of_an_older_cuda_major_stops_the_build(tmp_path, lib_dir, state_file):
    set_state(state_file, cuda_driver_version=12080)
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path))
    assert rc == 1 and result["failed"]
    assert result["compatible"] is False
    assert result["problems"] == ["the driver supports CUDA 12.8, torch 2.14.0+cu130 was built for CUDA 13.0: update "
                                  "the driver, or lock a torch built for CUDA 12 (reinstall_torch_backend)"]
    assert result["msg"] == "The build in %s cannot run on this host: %s." % (
        os.path.join(str(tmp_path), "env"), result["problems"][0])


def test_an_older_minor_of_the_same_major_is_a_note_not_a_problem(tmp_path, lib_dir, state_file):
    set_state(state_file, cuda_driver_version=12020)
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path, version="2.9.0+cu128", cuda="'12.8'"))
    assert rc == 0 and result["compatible"] is True
    assert any("minor-version compatibility" in note for note in result["notes"])


def test_a_gpu_outside_the_architecture_list_stops_the_build(tmp_path, lib_dir, state_file):
    # an sm_100-only build (data-center Blackwell) on an RTX PRO 6000 (12.0): the case of this fleet
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path, archs="sm_90 sm_100"))
    assert rc == 1 and result["compatible"] is False
    assert result["problems"] == ["torch 2.14.0+cu130 was not built for compute capability 12.0 (GPU 0, 1, 2, 3, 4, 5, "
                                  "6, 7, NVIDIA RTX PRO 6000 Blackwell Server Edition); its architectures are sm_90 sm_100"]


def test_one_odd_gpu_is_named(tmp_path, lib_dir, state_file):
    set_state(state_file, gpu__5__cc="7.0", gpu__5__name="Tesla V100")
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path))
    assert rc == 1
    assert "compute capability 7.0 (GPU 5, Tesla V100)" in result["problems"][0]
    assert [g["runs"] for g in result["gpus"]] == ["binary"] * 5 + ["no"] + ["binary"] * 2


def test_ptx_covers_a_newer_gpu_with_a_note(tmp_path, lib_dir, state_file):
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path, archs="sm_90 compute_90"))
    assert rc == 0 and result["compatible"] is True
    assert result["gpus"][0]["runs"] == "ptx" and result["gpus"][0]["arch"] == "compute_90"
    assert any("through PTX (compute_90)" in note for note in result["notes"])


def test_a_cpu_build_stops_the_build(tmp_path, lib_dir, state_file):
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path, version="2.14.0+cpu", cuda="None", archs=""))
    assert rc == 1
    assert result["problems"] == ["torch 2.14.0+cpu is a CPU build (no CUDA): vLLM would not use the GPUs"]


def test_no_torch_passes_with_a_note(tmp_path, lib_dir, state_file):
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path, version=None))
    assert rc == 0 and result["compatible"] is True and result["torch"]["present"] is False
    assert result["msg"].endswith("has no torch: nothing to check against the driver and the GPUs.")


def test_nvml_that_cannot_be_read_proves_nothing_and_fails(tmp_path, lib_dir, state_file):
    set_state(state_file, init_error="DRIVER_NOT_LOADED")
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path))
    assert rc == 1
    assert result["problems"][0].startswith("NVML could not be read, so nothing proves torch 2.14.0+cu130 runs here: ")
    assert "DRIVER_NOT_LOADED" in result["problems"][0]


def test_report_only_passes_and_says_why(tmp_path, lib_dir, state_file):
    set_state(state_file, cuda_driver_version=12080)
    rc, result = run(tmp_path, lib_dir, state_file, make_env(tmp_path), fail_on_problem=False, check_mode=True)
    assert rc == 0 and result["compatible"] is False and result["check_mode"] is True
    assert "cannot run on this host" in result["msg"]


@pytest.mark.parametrize("case", ["version_link", "torch_link", "huge_version", "no_version_line", "two_lists",
                                  "library_is_a_directory"])
def test_odd_torch_trees_fail_with_a_reason_and_are_not_followed(tmp_path, lib_dir, state_file, case):
    venv = make_env(tmp_path)
    torch = os.path.join(venv, "lib", "python3.11", "site-packages", "torch")
    outside = tmp_path / "outside.py"
    outside.write_text("__version__ = '9.9'\ncuda = '99.0'\n")
    if case == "version_link":
        os.remove(os.path.join(torch, "version.py"))
        os.symlink(str(outside), os.path.join(torch, "version.py"))
        expect = "cannot be opened"
    elif case == "torch_link":
        real = tmp_path / "real-torch"
        os.rename(torch, str(real))
        os.symlink(str(real), torch)
        expect = "is not a directory (a link or a file)"
    elif case == "huge_version":
        with open(os.path.join(torch, "version.py"), "w") as f:
            f.write("#" * (torchcompat.VERSION_LIMIT + 10))
        expect = "is larger than 65536 bytes"
    elif case == "no_version_line":
        with open(os.path.join(torch, "version.py"), "w") as f:
            f.write("import os\nos.system('echo pwned')\n")
        expect = "does not say torch's version and CUDA version"
    elif case == "two_lists":
        with open(os.path.join(torch, "lib", "libtorch_python.so"), "wb") as f:
            f.write(b"\x00sm_80 sm_90\x00junk\x00sm_75 sm_120\x00sm_86\x00")
        expect = "holds 2 different architecture lists"
    else:
        os.remove(os.path.join(torch, "lib", "libtorch_python.so"))
        os.mkdir(os.path.join(torch, "lib", "libtorch_python.so"))
        expect = "is not a regular file"
    rc, result = run(tmp_path, lib_dir, state_file, venv)
    assert rc == 1
    assert result["msg"].startswith("The torch of %s could not be read: " % venv)
    assert expect in result["msg"]
    assert "pwned" not in json.dumps(result)


def test_a_list_across_a_chunk_boundary_is_found(tmp_path):
    path = tmp_path / "libtorch_python.so"
    data = b"x" * (torchcompat.CHUNK - 10) + b"\x00" + ARCHS.encode() + b"\x00" + b"y" * 100
    path.write_bytes(data)
    assert torchcompat.find_arch_list(str(path)) == ARCHS.split()


def test_a_build_for_one_architecture_has_a_lone_word(tmp_path):
    path = tmp_path / "libtorch_python.so"
    path.write_bytes(b"\x00-gencode arch=compute_120,code=sm_120\x00sm_120\x00text\x00")
    assert torchcompat.find_arch_list(str(path)) == ["sm_120"]
    path.write_bytes(b"\x00sm_120\x00sm_90\x00")
    with pytest.raises(torchcompat.CompatError, match="holds 2 different architecture lists"):
        torchcompat.find_arch_list(str(path))


def test_the_scan_stops_at_its_limit(tmp_path):
    path = tmp_path / "libtorch_python.so"
    path.write_bytes(b"z" * 4096 + b"\x00" + ARCHS.encode() + b"\x00")
    assert torchcompat.find_arch_list(str(path), limit=4096) is None
    assert torchcompat.find_arch_list(str(path)) == ARCHS.split()


@pytest.mark.parametrize("cc, runs, arch", [
    ((12, 0), "binary", "sm_120"), ((12, 1), "binary", "sm_120"), ((8, 9), "binary", "sm_86"),
    ((9, 0), "binary", "sm_90"), ((7, 0), None, None), ((13, 0), None, None)])
def test_gpu_support_table(cc, runs, arch):
    assert torchcompat.gpu_support(ARCHS.split(), *cc) == (runs, arch)


def test_gpu_support_of_arch_specific_and_ptx_words():
    assert torchcompat.gpu_support(["sm_90a"], 9, 0) == ("binary", "sm_90a")
    assert torchcompat.gpu_support(["sm_90a"], 9, 1) == (None, None)
    assert torchcompat.gpu_support(["sm_80", "compute_80", "compute_90"], 12, 0) == ("ptx", "compute_90")
    assert torchcompat.gpu_support(["sm_100", "sm_100a"], 10, 0) == ("binary", "sm_100a")


def test_the_real_torch_wheel_of_the_bench_environment(tmp_path, lib_dir, state_file):
    if not os.path.isfile(os.path.join(BENCH_ENV, "lib", "python3.11", "site-packages", "torch", "version.py")):
        pytest.skip("no bench environment here")
    rc, result = run(tmp_path, lib_dir, state_file, BENCH_ENV)
    assert rc == 0, result
    assert result["torch"]["cuda"] and "sm_120" in result["torch"]["arch_list"]
    set_state(state_file, cuda_driver_version=12080)
    rc, result = run(tmp_path, lib_dir, state_file, BENCH_ENV)
    assert rc == 1 and "the driver supports CUDA 12.8" in result["msg"]


def test_many_lists_stop_the_scan_at_the_second_and_a_linked_lib_is_refused(tmp_path):
    path = tmp_path / "libtorch_python.so"
    path.write_bytes(b"".join(b"\x00sm_%d sm_90\x00" % (10 + i % 80) for i in range(20000)) + b"\x00")
    with pytest.raises(torchcompat.CompatError, match="holds 2 different architecture lists"):
        torchcompat.find_arch_list(str(path))
    venv = make_env(tmp_path / "v")
    torch = os.path.join(venv, "lib", "python3.11", "site-packages", "torch")
    os.rename(os.path.join(torch, "lib"), str(tmp_path / "real-lib"))
    os.symlink(str(tmp_path / "real-lib"), os.path.join(torch, "lib"))
    with pytest.raises(torchcompat.CompatError, match="is a symbolic link"):
        torchcompat.read_torch([os.path.join(venv, "lib", "python3.11", "site-packages")])
