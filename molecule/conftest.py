# SPDX-License-Identifier: GPL-3.0-or-later
"""Makes molecule/probes.py importable from every scenario's tests."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
