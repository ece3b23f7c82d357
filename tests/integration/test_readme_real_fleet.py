# SPDX-License-Identifier: GPL-3.0-or-later
"""The README's "Using the collection on a real fleet" commands, as written.

A newcomer copies that block into a shell: it must build the tarball,
install it where ansible finds it from any directory, and run the playbooks
by FQCN from a fleet directory outside the clone. This test runs the block
itself (not a copy of it) with bash, in a HOME of its own and without the
repository's Ansible settings in the environment; ansible-playbook gets
--syntax-check added, since there is no real fleet to talk to.
"""

import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADING = "## Using the collection on a real fleet"


def readme_block():
    with open(os.path.join(REPO, "README.md")) as handle:
        text = handle.read()
    assert HEADING in text, "the README lost its section %r" % HEADING
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "expected one sh block in %r, found %d" % (HEADING, len(blocks))
    return blocks[0]


def test_readme_real_fleet_commands_work_as_written(tmp_path):
    block = readme_block()
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(HOME=str(home), ANSIBLE_NOCOLOR="1")
    script = "set -euo pipefail\n" \
             "ansible-playbook() { command ansible-playbook --syntax-check \"$@\"; }\n" + block
    result = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    installed = home / ".ansible" / "collections" / "ansible_collections" / "gpufleet" / "vllm"
    assert (installed / "MANIFEST.json").is_file(), output
    assert not installed.is_symlink()
    # both playbooks were found by FQCN from the fleet directory, outside the clone
    for playbook in ("audit.yml", "rollout.yml"):
        assert re.search(r"^playbook: .*/ansible_collections/gpufleet/vllm/playbooks/%s$" % playbook,
                         output, re.M), output
    assert "[WARNING]" not in output, output
