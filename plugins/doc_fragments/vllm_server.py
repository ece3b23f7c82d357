# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """How a module reaches a vLLM server and runs its readiness gate (vllm_api.server_argument_spec)."""

    DOCUMENTATION = r"""
options:
  base_url:
    description:
      - The server's base URL, for example V(http://127.0.0.1:8000). Without it, the URL is made from O(host) and
        O(port).
      - No proxy is used for a loopback address; other addresses follow the C(http_proxy)/C(no_proxy) environment.
    type: str
  host:
    description:
      - The address to reach the server at, when O(base_url) is not given. Default V(127.0.0.1).
      - A server that listens on C(0.0.0.0) is reached at V(127.0.0.1) from its own host.
    type: str
  port:
    description:
      - The server's port, when O(base_url) is not given. Default V(8000).
    type: int
  served_model_name:
    description:
      - The model name the server must list in C(/v1/models) (vLLM's C(--served-model-name)), and the model of the
        test completion.
      - Without it, any listed model passes and the first one is used for the completion.
    type: str
  request_timeout:
    description:
      - Seconds one HTTP request may take (capped by the time left before the deadline).
    type: float
    default: 30.0
  completion:
    description:
      - Whether the readiness gate's last check (a 1-token completion) is made. Switch off for a server that must not
        generate, or whose model name is not used for completions.
    type: bool
    default: true
  prompt:
    description:
      - The prompt of the 1-token completion.
    type: str
    default: ping
  api_key:
    description:
      - The server's API key (vLLM's C(--api-key) or C(VLLM_API_KEY)), sent in the C(Authorization) header as a
        bearer token.
    type: str
  validate_certs:
    description:
      - Whether to verify the server's TLS certificate for an C(https://) O(base_url).
    type: bool
    default: true
  journal_lines:
    description:
      - How many lines of the unit's journal a failure message shows.
    type: int
    default: 30
"""
