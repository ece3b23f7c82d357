# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for the get-pip bootstrap script that ansible-test downloads.

ansible-test creates one virtual environment per sanity test and bootstraps
pip in it with a script it downloads from its own CI file server, which the
package-registry-only network of the test machines cannot reach.
scripts/test.sh places this file where ansible-test caches that script (in
a HOME of its own under .cache/): pip comes from the interpreter's bundled
wheel (ensurepip), then the requested packages from the package index.
"""

import ensurepip
import os
import subprocess
import sys

env = dict(os.environ)
ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env))
