# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The allow-list check of the collection tarball (scripts/tarball_contents.py).

scripts/test.sh (stage "build") runs it on the real tarball; here its logic
meets fake file lists, as a table of cases, and its command line a small
tarball made in the test.
"""

import io
import tarfile

import pytest

from helpers import load_source

contents = load_source("tarball_contents", "scripts", "tarball_contents.py")

# what ansible-galaxy collection build writes for a clean collection
CLEAN = [
    "MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.rst",
    "plugins/", "plugins/modules/", "plugins/modules/drift_info.py", "plugins/filter/query.yml",
    "roles/", "roles/service/", "roles/service/tasks/main.yml",
    "playbooks/", "playbooks/audit.yml", "meta/", "meta/runtime.yml",
    "docs/", "docs/DESIGN.md", "LICENSES/", "LICENSES/GPL-3.0-or-later.txt",
    "changelogs/", "changelogs/changelog.yaml",
    "inventories/", "inventories/example/", "inventories/example/hosts.yml",
    "inventories/example/group_vars/vllm_fleet.yml",
]


@pytest.mark.parametrize("names, expected", [
    (CLEAN, {}),
    (["./", "./MANIFEST.json", "./plugins/modules/drift_info.py"], {}),
    # the simulated fleet's inventory, its directory entry and its files: one line
    (CLEAN + ["inventories/local/", "inventories/local/hosts.yml", "inventories/local/group_vars/vllm_fleet.yml"],
     {"inventories/local/": 3}),
    (CLEAN + ["tests/", "tests/unit/test_x.py", "tests/sim/standin/server.py"], {"tests/": 3}),
    (CLEAN + ["molecule/default/molecule.yml", "scripts/demo.sh", "benchmarks/bench_rollout.py"],
     {"molecule/": 1, "scripts/": 1, "benchmarks/": 1}),
    (CLEAN + [".cache/", "dist/gpufleet-vllm-0.1.0.tar.gz", "ansible.cfg", ".ansible-lint"],
     {".cache/": 1, "dist/": 1, "ansible.cfg": 1, ".ansible-lint": 1}),
    # byte code and caches inside allowed directories
    (CLEAN + ["plugins/module_utils/__pycache__/", "plugins/module_utils/__pycache__/drift.cpython-311.pyc"],
     {"plugins/module_utils/__pycache__/": 2}),
    (CLEAN + ["plugins/filter/bench.pyc", "roles/service/tasks/main.retry"],
     {"plugins/filter/bench.pyc": 1, "roles/service/tasks/main.retry": 1}),
    # an allowed name deeper down is not allowed at the top, and the reverse
    (CLEAN + ["example/hosts.yml", "docs.md", "roles_extra/x.yml"],
     {"example/": 1, "docs.md": 1, "roles_extra/": 1}),
    (CLEAN + ["inventories/README.md"], {"inventories/README.md": 1}),
    # hidden files and directories anywhere (pytest, hypothesis and editors leave them)
    (CLEAN + [".benchmarks/", ".hypothesis/examples/0a1b", "plugins/modules/.drift_info.py.swp", "roles/service/.DS_Store",
              "docs/.notes/todo.md"],
     {".benchmarks/": 1, ".hypothesis/": 1, "plugins/modules/.drift_info.py.swp": 1, "roles/service/.DS_Store": 1,
      "docs/.notes/": 1}),
], ids=["clean", "dot-slash", "sim-inventory", "tests", "dev-dirs", "caches-and-settings",
        "pycache", "byte-code", "look-alikes", "inventories-file", "hidden"])
def test_unexpected(names, expected):
    assert contents.unexpected(names) == expected


def _tarball(path, names):
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                data = b"{}\n"
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_command_fails_naming_each_unexpected_entry(tmp_path, capsys):
    path = str(tmp_path / "gpufleet-vllm-0.1.0.tar.gz")
    _tarball(path, CLEAN + ["inventories/local/", "inventories/local/hosts.yml", "tests/", "tests/unit/test_x.py",
                            "plugins/filter/__pycache__/", "plugins/filter/__pycache__/query.cpython-311.pyc"])
    assert contents.main(["tarball_contents.py", path]) == 1
    err = capsys.readouterr().err
    assert "holds 3 entries outside its allow-list" in err
    lines = err.splitlines()
    assert "  inventories/local/  (2 entries)" in lines
    assert "  tests/  (2 entries)" in lines
    assert "  plugins/filter/__pycache__/  (2 entries)" in lines
    assert "inventories/example/" in lines[-1]


def test_command_passes_a_clean_tarball(tmp_path, capsys):
    path = str(tmp_path / "gpufleet-vllm-0.1.0.tar.gz")
    _tarball(path, CLEAN)
    assert contents.main(["tarball_contents.py", path]) == 0
    assert capsys.readouterr().out.strip() == "%s: %d entries, all inside the allow-list" % (path, len(CLEAN))


def test_command_says_when_it_cannot_read_the_tarball(tmp_path, capsys):
    path = str(tmp_path / "missing.tar.gz")
    assert contents.main(["tarball_contents.py", path]) == 2
    assert capsys.readouterr().err.startswith("cannot read the collection tarball %s:" % path)
