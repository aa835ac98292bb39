# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: image_pull_secret_problems
short_description: Name each image pull Secret that is missing or holds no registry credentials
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Takes the results of a M(kubernetes.core.k8s_info) loop that read one Secret per item (its name)
    and returns one message per Secret that does not exist or whose type is neither
    C(kubernetes.io/dockerconfigjson) nor C(kubernetes.io/dockercfg); an empty list when every one is usable.
  - Each message names the Secret, the role variable that named it and the namespace. Only the Secrets'
    names and types are read, never their data, so the messages can be shown; read the Secrets with
    C(no_log) all the same, since the registered results hold their data.
  - The training_namespace, training_job and nccl_tests roles run it before they apply anything that
    references the Secrets.
options:
  _input:
    description: The C(results) of the loop; skipped items are ignored.
    type: list
    elements: dict
    required: true
  variable:
    description: The role variable that named the Secrets, for the messages.
    type: str
    required: true
  namespace:
    description: The namespace the Secrets were looked for in, for the messages.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the image pull Secrets (their data stays out of the output)
  kubernetes.core.k8s_info:
    kind: Secret
    namespace: training
    name: "{{ item }}"
  loop: "{{ training_job_image_pull_secrets }}"
  register: pull_secrets
  no_log: true

- name: Fail naming each missing Secret
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('; ') }}"
  vars:
    problems: "{{ pull_secrets.results | gpuops.training.image_pull_secret_problems('training_job_image_pull_secrets', 'training') }}"
"""

RETURN = r"""
_value:
  description: One message per unusable Secret; empty when all are usable.
  type: list
  elements: str
"""

from ansible_collections.gpuops.training.plugins.module_utils.image_pull_secrets import found_problems


def image_pull_secret_problems(results, variable, namespace):
    return found_problems(results, variable, namespace)


class FilterModule:
    def filters(self):
        return {"image_pull_secret_problems": image_pull_secret_problems}
