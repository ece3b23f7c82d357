#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: drift_info
short_description: Read one vLLM host's drift from its intended state, in one task, changing nothing
version_added: 0.1.0
description:
  - Answers in one module run every question the C(gpufleet.vllm.audit) playbook asks a host. It returns one drift
    row (RV(row)) and the details behind it.
  - B(Environment.) The environment the service runs is the target of O(venv_link), the link that the C(reinstall)
    role switches. While that link does not exist, it is O(venv), the venv the operators set up by hand.
  - B(Integrity and build.) That environment's vLLM is checked against the sha256 hashes of its RECORD, with the
    same code as M(gpufleet.vllm.package_integrity_info). The build is the installed version.
  - B(SM120 model configs.) The edits that the C(sm120_config) role would make to the model directories are
    planned, and the keys still present are counted. The plan uses the same code as M(gpufleet.vllm.sm120_config),
    and nothing is written.
  - B(Debug dumps.) The files that the C(debug_artifacts) role would remove are counted, with their bytes. The scan
    uses the same code as M(gpufleet.vllm.remove_artifacts), and nothing is removed.
  - B(Unit.) The unit's state is read from C(systemctl show).
  - B(GPUs.) The GPUs are read through NVML, with the same code as M(gpufleet.vllm.nvml_vram_info). An optional
    expectation (O(expect)) can be checked.
  - B(Diffs.) With O(wheel_dirs), each modified file of the package is diffed against its copy in the wheel of the
    installed name and version, found in those directories on the host (RV(diffs)). The diffs are bounded (O(diff_max_files),
    O(diff_max_bytes), O(diff_max_total)) and are no drift class of their own.
  - Names that are not UTF-8 are shown in the result with the odd bytes escaped (C(dump\xff_tp0.pt)).
  - Drift is judged on the host, so RV(row.drift) names its classes. V(integrity) means not pristine or no
    environment. V(build) means not O(expected_version). V(packages) means another distribution of the environment is not
    pristine, or the environment is not exactly O(expected_packages). V(config) means SM120 KV-cache keys present where they
    must not be, or a model config that cannot be read. V(dumps) means debug dumps present. V(unit) means the unit is
    not active. V(gpus) means NVML is not usable, or O(expect) is not met.
  - Read-only. RV(changed) is always V(false), with or without check mode. Drift never fails the task; only
    invalid options do.
options:
  venv_link:
    description:
      - The symbolic link that names the serving environment, for example V(/opt/vllm/current) (the C(reinstall)
        role's C(fleet_current_link)).
      - A real directory at that path is reported as integrity drift, with the reason.
      - At least one of O(venv_link) and O(venv) is required.
    type: path
  venv:
    description:
      - The environment the service runs while O(venv_link) does not exist, for example the venv the operators
        built by hand (the C(reinstall) role's C(fleet_adopt_venv)).
    type: path
  name:
    description:
      - The distribution to verify.
    type: str
    default: vllm
  expected_version:
    description:
      - The build every host should serve, for example V(0.33.0). When it is given, any other installed version is
        V(build) drift.
    type: str
  max_list:
    description:
      - The most offending files listed in RV(integrity.offenders). The counts are always complete.
    type: int
    default: 10
  model_dirs:
    description:
      - The model directories whose configs must not carry the SM120 KV-cache keys (the C(sm120_config) role's
        C(fleet_model_dirs)).
    type: list
    elements: path
    default: []
  model_files:
    description:
      - The files of each model directory and the key paths that must be absent (the key path syntax of
        O(gpufleet.vllm.sm120_config#module:files)), each file with whether it must exist.
      - Left out (and O(model_keys) too), C(config.json) with C(**.kv_cache_scheme) and C(hf_quant_config.json) with
        C(quantization.kv_cache_quant_algo), both optional.
      - Mutually exclusive with O(model_keys).
    type: list
    elements: dict
    suboptions:
      name:
        description:
          - File name relative to the model directory, for example C(config.json).
        type: str
        required: true
      absent:
        description:
          - Key paths that must be absent from this file (dotted, with C(*) and C(**) wildcards).
        type: list
        elements: str
        required: true
      required:
        description:
          - If V(true), a missing file is V(config) drift.
        type: bool
        default: false
  model_keys:
    description:
      - The same as O(model_files) in the shape of the C(sm120_config) role's C(fleet_config_files) - file name
        (relative to the model directory) mapped to the key paths that must be absent - checked with the role's own
        code, so the audit reads the role's settings as they are.
      - Mutually exclusive with O(model_files).
    type: dict
  model_required_files:
    description:
      - With O(model_keys), the files that must exist (the role's C(fleet_config_required_files)); a missing one is
        V(config) drift.
    type: list
    elements: str
    default: []
  model_symlinks:
    description:
      - How the C(sm120_config) role edits a config that is a symbolic link (the Hugging Face cache layout). This is
        the O(gpufleet.vllm.sm120_config#module:symlinks) option of M(gpufleet.vllm.sm120_config).
      - With V(refuse), a link that would need an edit is V(config) drift, because the role would stop on it.
    type: str
    choices: [refuse, copy, follow]
    default: copy
  config_policy:
    description:
      - When the SM120 KV-cache keys count as drift.
      - V(auto) means where a GPU has compute capability 12.x, as the C(sm120_config) role decides by default.
      - V(strip) means always, as with C(fleet_strip_kv_cache_keys_force). V(keep) means never, as with
        C(fleet_strip_kv_cache_keys=false).
      - The keys present are counted in every case.
    type: str
    choices: [auto, strip, keep]
    default: auto
  config_builds:
    description:
      - The table of vLLM builds that run an FP8 KV cache on SM120 (the C(fleet) role's C(fleet_sm120_fp8_kv_cache_builds)),
        read as the C(sm120_config) role reads it. The first row whose C(versions) specifier takes O(config_build) applies;
        one with C(fp8_kv_cache_on_sm120=true) makes the keys allowed whatever O(config_policy) (but V(keep)) and the GPUs say.
    type: list
    elements: dict
    default: []
  config_build:
    description:
      - The vLLM version the model configs are judged for. Left out, the installed build (RV(row.build)); the rollout's
        plan gives its target build.
    type: str
  artifact_paths:
    description:
      - The directories to scan for debug dumps (absolute, not V(/), not through a link).
    type: list
    elements: path
    default: [/tmp]
  artifact_patterns:
    description:
      - File name patterns of the debug dumps.
    type: list
    elements: str
    default: [nomla_debug_tp*.pt, embed_debug_tp*.pt, mla_debug_layer*_tp*.pt]
  artifact_recursive:
    description:
      - Whether to scan the subdirectories of O(artifact_paths) too.
    type: bool
    default: false
  artifact_max_depth:
    description:
      - How deep to scan with O(artifact_recursive=true); V(0) means only the directories themselves.
    type: int
  artifact_symlinks:
    description:
      - V(remove_link) counts a link that matches a pattern (as the role would remove it). V(skip) leaves links out.
    type: str
    choices: [remove_link, skip]
    default: remove_link
  artifact_min_age:
    description:
      - Only count dumps older than this, for example V(10m) or V(2h).
    type: str
  artifact_max_entries:
    description:
      - The most directory entries the dump scan reads, over all O(artifact_paths) and their subdirectories together.
        However deep O(artifact_recursive=true) goes, it enters at most 2000 levels of subdirectories.
      - A scan stopped by one of these bounds or by O(artifact_timeout) counts no dumps. It is V(dumps) drift, and
        RV(dumps.error) and RV(row.dumps_bytes) say which bound stopped it and where.
    type: int
    default: 100000
  artifact_timeout:
    description:
      - The most seconds the dump scan may take, within O(timeout) (the scan gets the lesser of the two and what is
        left of O(timeout)).
    type: int
    default: 300
  timeout:
    description:
      - The most seconds the whole run may take. Each part gets what is left of it, in this order. The integrity check
        (RECORD hashes), the config planning (checked before each model directory), the dump scan (also bounded by
        O(artifact_timeout)), C(systemctl show) (at most 30 s), NVML (at most 60 s) and the diffs (O(wheel_dirs)).
      - When the time is up, the parts not done are still a clean row. Their cells say C(not checked), C(not
        planned), C(not counted) or C(not read) and the time limit, and they count as drift of their class. RV(not_done)
        lists them. The task does not fail.
      - A hung C(systemctl) is killed with its process group. An NVML call that does not return is left behind in a
        thread that ends with the module.
    type: int
    default: 600
  unit:
    description:
      - The systemd unit of the vLLM server, for example V(vllm-kimi-k25.service). If it is not active, that is
        V(unit) drift.
      - Left out, the unit is neither read nor judged.
    type: str
  unit_dir:
    description:
      - Where the M(gpufleet.vllm.service) role renders its units (the fleet's C(fleet_unit_dir)). The other units it
        rendered there, other than O(unit), that run or are enabled at boot (another model's, after a model switch)
        are V(unit) drift, listed in RV(row.other_units).
      - Left out, they are not looked for.
    type: path
  nvml_venvs:
    description:
      - Other venvs whose nvidia-ml-py (C(pynvml.py)) may be used when the interpreter running the module cannot
        import C(pynvml). An example is the C(host_tools) role's venv. The serving environment is always tried first.
      - Only that one file is loaded. The venv's C(site-packages) is not added to the import path, and its C(.pth)
        files are not run. A dirty environment's startup hooks therefore never run in the audit.
    type: list
    elements: path
    default: []
  health:
    description:
      - If V(true), also judge the GPUs' health as M(gpufleet.vllm.gpu_health_info) does (uncorrected ECC errors, pages or
        rows waiting for a reset, throttling, temperature, PCIe link below the card's maximum, persistence mode,
        processes on the GPUs other than the O(unit)'s C(MainPID) and its descendants), with the same code.
      - A host that is not healthy has the drift class V(health), and RV(row.health_problems) says why. Health that
        cannot be read is not healthy either (drift V(health), unless NVML is not usable at all, which is V(gpus)).
    type: bool
    default: false
  health_thresholds:
    description:
      - The limits of O(health), with the keys and defaults of the O(gpufleet.vllm.gpu_health_info#module:thresholds)
        option of M(gpufleet.vllm.gpu_health_info); a key not given keeps its default.
    type: dict
    default: {}
  health_required:
    description:
      - The fields every GPU must be able to report for O(health), as the
        O(gpufleet.vllm.gpu_health_info#module:required) option of M(gpufleet.vllm.gpu_health_info) (for example
        V([ecc, remapped_rows])); a field the card cannot report is otherwise unknown and not judged.
    type: list
    elements: str
    default: []
  wheel_dirs:
    description:
      - Directories on the host that hold wheels, for example the fleet's mirror (the C(fleet) role's C(fleet_wheel_dirs)).
        The first one with a wheel of O(name) at the installed version is used; of several there, the one whose own
        RECORD carries the installed RECORD's hashes (with none, the next directory, and RV(diffs.note) names them).
      - Each file that is modified or of another size than RECORD says is diffed against that wheel's copy (RV(diffs)).
        A file whose wheel copy is not the one RECORD names (another build with the same version) is not diffed.
      - Left empty, no diffs are made, and RV(diffs.note) says so when files changed.
    type: list
    elements: path
    default: []
  expected_packages:
    description:
      - The packages the environment must hold, name -> version (a fleet lock's pins). With it, RV(row.lock) says
        whether the environment holds exactly them and RV(packages) lists what differs; a difference is drift
        (V(packages)).
      - Every distribution of the environment is read and checked against its RECORD in any case (RV(packages)); one
        other than O(name) that is not pristine is drift (V(packages)) too.
    type: dict
  expected_fingerprint:
    description: The fingerprint the environment must have (a fleet lock's, C(sha256:<hex>)).
    type: str
  accept_not_pristine:
    description:
      - Distributions whose files do not match their own RECORD by upstream packaging (the C(fleet) role's
        C(fleet_accepted_not_pristine)); they are left out of RV(row.packages_not_pristine) and are no drift.
    type: list
    elements: str
    default: []
  diff_max_files:
    description:
      - The most changed files diffed. The others are counted in RV(diffs.not_diffed).
      - At most O(max_list) files of each class are known to the module, so that bounds the diffs too.
    type: int
    default: 10
  diff_max_bytes:
    description:
      - The most bytes of one diff. A longer diff is cut at a line end and says where it was cut.
    type: int
    default: 65536
  diff_max_total:
    description:
      - The most bytes of all the diffs together. A diff that would go over it is listed in RV(diffs.files) without its
        text, with a note.
    type: int
    default: 262144
extends_documentation_fragment:
  - gpufleet.vllm.nvml_expect
  - gpufleet.vllm.attributes.info_module
  - ansible.builtin.action_common_attributes
notes:
  - The integrity check reads and hashes every file of the distribution, so it takes a second or two for a vLLM
    wheel. This is the whole cost of the module. The whole run is bounded by O(timeout); the dump scan also by
    O(artifact_max_entries) and O(artifact_timeout); C(systemctl show) by 30 s (at most the last 1 MiB of its
    output is read); NVML by 60 s.
  - O(expect) is checked once, with no waiting.
  - Diff text is shown safely. Terminal escapes and other control characters (except the line break and the tab),
    bidirectional overrides, and bytes that are not UTF-8 become backslash escapes (C(\x1b), C(\xff)). A binary
    file gets a note instead of a diff.
requirements:
  - Python 3.10 or newer on the managed host.
  - C(systemctl) for O(unit).
  - nvidia-ml-py (module C(pynvml)) in the interpreter, the serving environment or one of O(nvml_venvs), for the
    GPUs. Without it the row says V(gpus) drift, and O(config_policy=auto) treats the keys as allowed.
seealso:
  - module: gpufleet.vllm.package_integrity_info
  - module: gpufleet.vllm.sm120_config
  - module: gpufleet.vllm.remove_artifacts
  - module: gpufleet.vllm.nvml_vram_info
author: gpufleet.vllm developers (@gpufleet)
"""

EXAMPLES = r"""
- name: One host's drift row, as the audit playbook reads it
  gpufleet.vllm.drift_info:
    venv_link: /opt/vllm/current
    venv: /root/ml-env
    expected_version: 0.33.0
    model_dirs: [/models/Kimi-K2.5]
    model_keys:
      config.json: ["**.kv_cache_scheme"]
      hf_quant_config.json: [quantization.kv_cache_quant_algo]
    model_required_files: [config.json]
    unit: vllm-kimi-k25.service
    nvml_venvs: [/opt/gpufleet/tools]
    expect:
      count: 8
      compute_capability: "12.0"
  register: drift

- name: Fail this host when it drifted
  ansible.builtin.assert:
    that: drift.row.drift | length == 0
    fail_msg: "{{ inventory_hostname }} drifted: {{ drift.row.drift | join(', ') }} ({{ drift.row.integrity }})"

- name: Only the dumps somewhere else, recursively
  gpufleet.vllm.drift_info:
    venv: /opt/vllm/current
    artifact_paths: [/scratch/debug]
    artifact_recursive: true
    artifact_max_depth: 2

- name: What changed in the modified files, against the wheels of the fleet's mirror
  gpufleet.vllm.drift_info:
    venv_link: /opt/vllm/current
    wheel_dirs: [/srv/wheelhouse]
    diff_max_files: 5
  register: drift
"""

RETURN = r"""
check_mode:
  description:
    - Whether the module ran in check mode (it reads only, in check mode as in a real run).
      Also true for a task with C(check_mode=true) in a run without C(--check), where the C(ansible_check_mode)
      variable is false. Roles decide from this, not from that variable.
  returned: success
  type: bool
  sample: false
changed:
  description: Always V(false).
  returned: always
  type: bool
not_done:
  description:
    - The parts that O(timeout) left no time for (or stopped), each as the part, a colon and the reason. The part is V(integrity),
      V(packages), V(config), V(dumps), V(unit), V(gpus) or V(diffs). Empty when every part was done.
  returned: always
  type: list
  elements: str
  sample: ["dumps: the time limit of 600 s (timeout) passed before the dump scan"]
row:
  description: The host's row of the fleet's drift table.
  returned: always
  type: dict
  contains:
    drift:
      description: The drift classes, in the order V(integrity), V(build), V(packages), V(config), V(dumps), V(unit),
        V(gpus), V(health).
      type: list
      elements: str
      sample: [integrity, config, dumps]
    build:
      description: The installed version of O(name), or an empty string when it could not be read.
      type: str
      sample: 0.33.0
    environment:
      description: The serving environment (links resolved), or an empty string.
      type: str
      sample: /opt/vllm/envs/vllm-0.33.0-20261202T101500Z
    pristine:
      description: Whether every file matches its RECORD hash.
      type: bool
    integrity:
      description:
        - V(pristine), or the verdict in words, nothing cut. It gives the count of each kind of drift, whether uv's
          cache holds the edit too, and up to three offending files with their whole paths (and how many more there
          are), or why no verdict was possible. RV(integrity.msg) has the whole sentence.
      type: str
      sample: "not pristine: 2 files of another size than RECORD says; the edit is also in uv's cache; files:
        vllm/model_executor/model_loader/weight_utils.py, vllm/model_executor/models/deepseek_v2.py"
    fingerprint:
      description:
        - The first 12 hex digits of the fingerprint of every distribution's name and version in the environment (the same
          set gives the same fingerprint on every host, and a fleet lock's); empty when it could not be read.
      type: str
      sample: 3f9a0c2b71de
    packages:
      description: How many distributions the environment holds; null when it could not be read.
      type: int
    packages_not_pristine:
      description: The distributions other than O(name) whose files do not match their RECORD (at most O(max_list)).
      type: list
      elements: str
    lock:
      description:
        - Empty without O(expected_packages); V(same) when the environment holds exactly them; else what differs, such as
          C(differs - 2 other version, 1 missing) (with a colon after C(differs)).
      type: str
    config_keys_present:
      description: The SM120 KV-cache keys present in the model configs.
      type: int
      sample: 2
    config_policy:
      description: V(strip) when those keys are drift here, V(keep) when they are allowed.
      type: str
    config_reason:
      description: Why, in a few words (the build and the row of O(config_builds) that decided, or the GPUs).
      type: str
      sample: 'keys kept: vLLM 0.33.0, fleet_sm120_fp8_kv_cache_builds[2] ">=0.19.0"'
    config_errors:
      description: Model configs that cannot be planned (missing directory, malformed JSON, a refused link).
      type: list
      elements: str
    dumps:
      description: The number of debug dumps present.
      type: int
      sample: 35
    dumps_bytes:
      description: Their size, in decimal units; C(not counted:) and the reason when the scan stopped at a bound.
      type: str
      sample: 65.3 MB
    unit:
      description: O(unit), or an empty string.
      type: str
    unit_state:
      description: The unit's C(ActiveState) (V(active), V(inactive), V(failed), ...), or V(unknown).
      type: str
    gpus:
      description: The GPU count NVML reports; V(null) when NVML is not usable.
      type: int
      sample: 8
    vram_used_mib:
      description: The memory in use over all GPUs, in MiB; V(null) when NVML is not usable.
      type: int
    other_units:
      description: With O(unit_dir), the other units the service role rendered that run or are enabled, one line
        each with their C(ActiveState) and C(UnitFileState); or why they could not be read.
      type: list
      elements: str
      sample: ["vllm-kimi-k25.service (active, enabled)"]
    gpu_problems:
      description: The NVML error, or one line per GPU that does not meet O(expect).
      type: list
      elements: str
    gpu_health:
      description: The health verdict in a few words (such as C(all 8 GPUs healthy) or C(1 of 8 GPUs unhealthy (GPU
        3))); empty without O(health).
      type: str
      sample: all 8 GPUs healthy
    health_problems:
      description:
        - Why the GPUs are not healthy, GPUs with the same problem on one line (C(GPUs 0-7)); at most 12 lines, the
          last saying how many more. Empty when healthy or without O(health).
      type: list
      elements: str
      sample: ["GPU 3 (bus 5D): PCIe link at Gen5 x8, the card can do Gen5 x16: a degraded link starves all-reduce
        over PCIe"]
drift:
  description: The same list as RV(row.drift).
  returned: always
  type: list
  elements: str
environment:
  description: The serving environment, or an empty string.
  returned: always
  type: str
packages:
  description: Every distribution of the environment and the comparison with O(expected_packages); null when none was read.
  returned: always
  type: dict
  contains:
    fingerprint:
      description: C(sha256:<hex>) of the sorted C(name==version) of every distribution.
      type: str
    count:
      description: How many distributions.
      type: int
    matches:
      description: Whether the environment holds exactly O(expected_packages); null without them.
      type: bool
    missing:
      description: C(name), C(version) of each expected package that is not installed.
      type: list
      elements: dict
    extra:
      description: C(name), C(version) of each installed distribution that is not expected.
      type: list
      elements: dict
    different:
      description: C(name), C(expected), C(found) of each one at another version.
      type: list
      elements: dict
    not_pristine:
      description: C(name), C(version), C(reason) of each distribution whose files do not match its RECORD.
      type: list
      elements: dict
    not_pristine_total:
      description: How many there are in all.
      type: int
    distributions:
      description: C(name), C(version), C(source), C(pristine) of every distribution.
      type: list
      elements: dict
    msg:
      description: One sentence.
      type: str
integrity:
  description:
    - The verdict of M(gpufleet.vllm.package_integrity_info), cut down to its main fields.
    - V(null) when there is no environment to check (RV(row.integrity) says why).
  returned: always
  type: dict
  contains:
    distribution:
      description: O(name).
      type: str
    version:
      description: The installed version.
      type: str
      sample: 0.33.0
    pristine:
      description: Whether every file matches its RECORD hash.
      type: bool
    verifiable:
      description: Whether a verdict was possible (an editable install, for example, has no hashes to check).
      type: bool
    site_packages:
      description: The site-packages directory checked.
      type: str
    counts:
      description: Files per class (V(ok), V(modified), V(size_differs), V(missing), V(unowned), ...).
      type: dict
    offenders:
      description: The first O(max_list) files that drifted, each with C(path) and C(class).
      type: list
      elements: dict
    uv_cache_tainted:
      description: Whether an edited file is hard-linked into uv's cache, so a plain reinstall could put it back.
      type: bool
    msg:
      description: The verdict in one sentence, with what to do about a tainted uv cache.
      type: str
diffs:
  description:
    - What changed in each modified file, against the pristine wheel (O(wheel_dirs)).
  returned: always
  type: dict
  contains:
    wheel:
      description: The wheel diffed against, or V(null) when none was found or no file changed.
      type: str
      sample: /srv/wheelhouse/vllm-0.33.0-cp38-abi3-manylinux1_x86_64.whl
    wheel_dirs:
      description: O(wheel_dirs), when they were searched.
      type: list
      elements: str
    files:
      description:
        - One entry per changed file, in path order, at most O(diff_max_files). C(path) (relative to site-packages),
          C(class) (V(modified) or V(size_differs)), C(diff) (a unified diff from C(wheel/<path>) to
          C(installed/<path>), or an empty string), C(truncated) (cut at O(diff_max_bytes)), and C(note) (why there is
          no diff, or V(null)).
      type: list
      elements: dict
      sample:
        - path: vllm/model_executor/models/deepseek_v2.py
          class: size_differs
          diff: "--- wheel/vllm/model_executor/models/deepseek_v2.py\n+++ installed/vllm/...\n@@ -10,3 +10,7 @@\n..."
          truncated: false
          note: null
    bytes:
      description: The bytes of the diff text returned, at most O(diff_max_total).
      type: int
    not_diffed:
      description: Changed files left without a diff entry (beyond O(diff_max_files) or O(max_list), no wheel, the time
        limit).
      type: int
    note:
      description: Why there are no diffs at all (no O(wheel_dirs), no wheel of the installed version in them, the time
        limit), or V(null).
      type: str
      sample: "no wheel of vllm 0.33.0 in /srv/wheelhouse"
configs:
  description: The planned model config edits.
  returned: always
  type: dict
  contains:
    keys_present:
      description: As RV(row.config_keys_present).
      type: int
    policy:
      description: As RV(row.config_policy).
      type: str
    reason:
      description: The decision in words, naming the build and the row of O(config_builds) (as the C(sm120_config) role says it).
      type: str
    build:
      description: The build judged for (O(config_build), else the installed one); null when unknown.
      type: str
    build_row:
      description: The row of O(config_builds) that took it (C(index) from 0, C(versions), C(fp8_kv_cache_on_sm120), C(note)), or null.
      type: dict
    files:
      description:
        - One entry per file, as planned (nothing written) - C(path), C(exists), C(changed) (keys would be removed),
          C(skipped) (why a missing, not required file was skipped), C(removed) (C(key), C(value) of each member, at
          most 1000), C(removed_count), C(removed_truncated) and C(symlink) (null for a regular file; for a link its
          C(link), C(target) and C(shared_with)).
      type: list
      elements: dict
    errors:
      description: As RV(row.config_errors).
      type: list
      elements: str
dumps:
  description: The debug dumps found.
  returned: always
  type: dict
  contains:
    count:
      description: How many.
      type: int
    bytes:
      description: Their size in bytes.
      type: int
    bytes_human:
      description: The same in decimal units.
      type: str
    files:
      description: The first 20, sorted.
      type: list
      elements: str
    skipped:
      description: Entries left out of the scan, with the reason (at most 20).
      type: list
      elements: dict
    error:
      description: Why the dumps were not counted, when the scan stopped at one of its bounds (then V(dumps) drift).
      type: str
      returned: when the scan stopped
unit:
  description: The unit's C(LoadState), C(ActiveState), C(SubState), C(MainPID) (a number) and C(FragmentPath), plus
    C(unit), and C(error) when it could not be read (read by the same code as RV(gpufleet.vllm.managed_units#module:keep_state)). Only
    C(unit) when O(unit) is left out.
  returned: always
  type: dict
  sample: {unit: vllm-kimi-k25.service, LoadState: loaded, ActiveState: active, SubState: running, MainPID: 412}
gpus:
  description:
    - What NVML says, as M(gpufleet.vllm.nvml_vram_info) returns it. The fields are C(nvml_available), C(nvml_error),
      C(driver_version), C(cuda_driver_version), C(gpu_count), C(gpus), C(summary), C(mismatches) and
      C(expectation_met).
    - C(pynvml_from) is the C(pynvml.py) that was loaded from another venv, or V(null) for the interpreter's own.
  returned: always
  type: dict
health:
  description:
    - The GPUs' health as M(gpufleet.vllm.gpu_health_info) returns it, with O(health). The fields are C(healthy),
      C(summary), C(problems) (a line per GPU), C(notes), C(nvml_available), C(nvml_error), C(gpu_count), C(gpus) (the readings per GPU)
      and C(thresholds) (the limits applied, defaults filled in).
    - V(null) without O(health).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vllm.plugins.module_utils.artifacts import (
    DEFAULT_PATHS,
    DEFAULT_PATTERNS,
    MAX_ENTRIES,
    ArtifactError,
    safe_result,
    validate_options,
)
from ansible_collections.gpufleet.vllm.plugins.module_utils.bounded import READ_TIMEOUT, Deadline, runner
from ansible_collections.gpufleet.vllm.plugins.module_utils.drift import gather
from ansible_collections.gpufleet.vllm.plugins.module_utils.gpuhealth import validate_required, validate_thresholds
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.policy import POLICIES as CONFIG_POLICIES
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.jsonedit import JSONEditError, directory_entries
from ansible_collections.gpufleet.vllm.plugins.module_utils.nvml import expect_argument_spec, validate_expect
from ansible_collections.gpufleet.vllm.plugins.module_utils.sm120.policy import builds_problems, files_problems, module_files
from ansible_collections.gpufleet.vllm.plugins.module_utils.safetext import shown
from ansible_collections.gpufleet.vllm.plugins.module_utils.integrity.wheeldiff import DIFF_MAX_BYTES, DIFF_MAX_FILES, DIFF_MAX_TOTAL


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv_link=dict(type="path"),
            venv=dict(type="path"),
            name=dict(type="str", default="vllm"),
            expected_version=dict(type="str"),
            max_list=dict(type="int", default=10),
            model_dirs=dict(type="list", elements="path", default=[]),
            model_files=dict(type="list", elements="dict", options=dict(
                name=dict(type="str", required=True),
                absent=dict(type="list", elements="str", required=True),
                required=dict(type="bool", default=False),
            )),
            model_keys=dict(type="dict", no_log=False),
            model_required_files=dict(type="list", elements="str", default=[]),
            model_symlinks=dict(type="str", choices=["refuse", "copy", "follow"], default="copy"),
            config_policy=dict(type="str", choices=list(CONFIG_POLICIES), default="auto"),
            config_builds=dict(type="list", elements="dict", default=[]),
            config_build=dict(type="str"),
            artifact_paths=dict(type="list", elements="path", default=list(DEFAULT_PATHS)),
            artifact_patterns=dict(type="list", elements="str", default=list(DEFAULT_PATTERNS)),
            artifact_recursive=dict(type="bool", default=False),
            artifact_max_depth=dict(type="int"),
            artifact_symlinks=dict(type="str", choices=["remove_link", "skip"], default="remove_link"),
            artifact_min_age=dict(type="str"),
            artifact_max_entries=dict(type="int", default=MAX_ENTRIES),
            artifact_timeout=dict(type="int", default=300),
            timeout=dict(type="int", default=600),
            unit=dict(type="str"),
            unit_dir=dict(type="path"),
            expect=expect_argument_spec(),
            nvml_venvs=dict(type="list", elements="path", default=[]),
            health=dict(type="bool", default=False),
            health_thresholds=dict(type="dict", default={}),
            health_required=dict(type="list", elements="str", default=[]),
            wheel_dirs=dict(type="list", elements="path", default=[]),
            expected_packages=dict(type="dict"),
            expected_fingerprint=dict(type="str"),
            accept_not_pristine=dict(type="list", elements="str", default=[]),
            diff_max_files=dict(type="int", default=DIFF_MAX_FILES),
            diff_max_bytes=dict(type="int", default=DIFF_MAX_BYTES),
            diff_max_total=dict(type="int", default=DIFF_MAX_TOTAL),
        ),
        required_one_of=[("venv_link", "venv")],
        mutually_exclusive=[("model_files", "model_keys")],
        supports_check_mode=True,
    )
    params = module.params
    deadline = Deadline(max(1, params["timeout"]))
    problems = []
    if not 1 <= params["timeout"] <= 604800:
        problems.append("timeout must be from 1 to 604800 seconds (got %d)." % params["timeout"])
    if params["max_list"] < 1:
        problems.append("max_list must be 1 or more (got %d)." % params["max_list"])
    if not 0 <= params["diff_max_files"] <= 1000:
        problems.append("diff_max_files must be from 0 to 1000 (got %d)." % params["diff_max_files"])
    for option in ("diff_max_bytes", "diff_max_total"):
        if not 256 <= params[option] <= 64 << 20:
            problems.append("%s must be from 256 to %d bytes (got %d)." % (option, 64 << 20, params[option]))
    for directory in params["wheel_dirs"]:
        if not directory.startswith("/"):
            problems.append("wheel_dirs names %s, which is not an absolute path." % shown(directory))
    try:
        paths, min_age = validate_options(params["artifact_paths"], params["artifact_patterns"],
                                          recursive=params["artifact_recursive"],
                                          max_depth=params["artifact_max_depth"], min_age=params["artifact_min_age"],
                                          max_entries=params["artifact_max_entries"], timeout=params["artifact_timeout"],
                                          names=dict((n, "artifact_" + n) for n in (
                                              "paths", "patterns", "max_depth", "max_entries", "timeout")))
    except ArtifactError as exc:
        problems.append("artifact options: %s" % exc)
        paths, min_age = [], None
    if params["model_files"] is not None:
        try:
            directory_entries("<model directory>", params["model_files"])
        except JSONEditError as exc:
            problems.append("model_files: %s" % exc.msg)
    model_files = params["model_files"]
    if params["model_keys"] is not None:
        key_problems = files_problems(params["model_keys"], params["model_required_files"],
                                      names=("model_keys", "model_required_files"))
        problems.extend(key_problems)
        if not key_problems:
            model_files = module_files(params["model_keys"], params["model_required_files"])
    elif params["model_required_files"]:
        problems.append("model_required_files goes with model_keys (with model_files, say required: true per file).")
    problems.extend(builds_problems(params["config_builds"], name="config_builds"))
    problems.extend("expect: %s" % p for p in validate_expect(params["expect"] or {}))
    problems.extend("health_%s" % p for p in validate_thresholds(params["health_thresholds"] or {}))
    problems.extend("health_%s" % p for p in validate_required(params["health_required"]))
    if problems:
        module.fail_json(msg="Invalid options for gpufleet.vllm.drift_info: " + " ".join(
            p if p.endswith(".") else p + "." for p in problems), changed=False)

    try:
        result = gather(
            runner(READ_TIMEOUT, deadline=deadline), module.get_bin_path("systemctl") if params["unit"] or params["unit_dir"] else None,
            link=params["venv_link"], venv=params["venv"], dist_name=params["name"], max_list=params["max_list"],
            model_dirs=params["model_dirs"], model_files=model_files, symlinks=params["model_symlinks"],
            config_policy=params["config_policy"], config_builds=params["config_builds"],
            config_build=params["config_build"],
            dumps=dict(paths=paths, patterns=params["artifact_patterns"], recursive=params["artifact_recursive"],
                       max_depth=params["artifact_max_depth"], symlinks=params["artifact_symlinks"], min_age=min_age,
                       max_entries=params["artifact_max_entries"], timeout=params["artifact_timeout"]),
            unit=params["unit"], unit_dir=params["unit_dir"], expect=params["expect"] or {}, nvml_venvs=params["nvml_venvs"],
            expected_version=params["expected_version"], deadline=deadline,
            expected_packages=params["expected_packages"], expected_fingerprint=params["expected_fingerprint"],
            accept_not_pristine=params["accept_not_pristine"],
            health=(params["health_thresholds"] or {}) if params["health"] else None,
            health_required=params["health_required"],
            diffs=dict(wheel_dirs=params["wheel_dirs"], max_files=params["diff_max_files"],
                       max_bytes=params["diff_max_bytes"], max_total=params["diff_max_total"]))
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(**safe_result(dict(
            msg="gpufleet.vllm.drift_info stopped on an unexpected error (%s: %s); nothing was changed, and no row "
                "could be made for this host." % (type(exc).__name__, exc), changed=False)))
    result['check_mode'] = module.check_mode
    module.exit_json(**safe_result(result))


if __name__ == "__main__":
    main()
