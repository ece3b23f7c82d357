# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""value_problems: the roles' check of the variables that reach a unit file or a command line.

``{'service_model': service_model, ...} | gpufleet.vllm.value_problems(options=['service_model'])``
gives one message per problem, naming the variable (and the list item or
dict key inside it), so that an assert can refuse the run before anything
is written, with words an operator can act on.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.vllm.plugins.module_utils import safetext


def value_problems(values, options=None, quoted=None):
    """The problems of a dict of variable name -> value (control characters; option-like words in options;
    only NUL in the strings of quoted)."""
    if not isinstance(values, dict):
        raise AnsibleFilterError("value_problems needs a dict of variable name -> value, got %s" % type(values).__name__)
    names = {}
    for label, given in (("options", options), ("quoted", quoted)):
        given = [] if given is None else given
        if isinstance(given, str) or not isinstance(given, (list, tuple)):
            raise AnsibleFilterError("value_problems: %s must be a list of variable names, got %r" % (label, given))
        unknown = [name for name in given if name not in values]
        if unknown:
            raise AnsibleFilterError("value_problems: %s names %s, which are not among the values checked"
                                     % (label, ", ".join(sorted(unknown))))
        names[label] = given
    return safetext.value_problems(values, options=names["options"], quoted=names["quoted"])


class FilterModule(object):
    """Checks of role variables."""

    def filters(self):
        return {"value_problems": value_problems}
