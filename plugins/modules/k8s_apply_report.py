#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_apply_report
short_description: Report one kubernetes.core.k8s call over many objects, object by object
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - The cluster roles apply (or delete) all their objects in one M(kubernetes.core.k8s) call
    with a C(definition) list and C(continue_on_error=true), since one call per object costs
    about 0.4 s each. This action reads that call's registered result and reports it per
    object - which objects changed, with one diff per object headed with the object's name in
    C(--diff) mode, and the objects check mode did not send.
  - "Fails when the API server rejected any object, with one message naming every rejected
    object and the server's own reason, such as C(The API server rejected 1 of the 9 objects
    of namespace training: - PriorityClass gpu-training: ... may not be changed in an update.)"
  - "When a call never reached the API server (it did not answer), the message is headed
    C(N of the M objects of ... failed:) and each line gives the client's error instead."
  - Runs on the controller and contacts no API server.
options:
  objects:
    description:
      - The objects the call was given, in the same order, as a list or as their JSON text
        (what C(gpuops.training.k8s_manifest_json) returns; a string passes from task to task
        at no cost, where ansible-core 2.19 templates and copies a list of big objects at each
        task).
    type: raw
    required: true
  results:
    description:
      - The registered result of the M(kubernetes.core.k8s) call. A skipped call reports
        nothing.
    type: raw
    required: true
  deferred:
    description:
      - Objects check mode did not send, as their namespace does not exist yet (a server-side
        dry run of them fails with NotFound). They are reported as changes.
      - A list or its JSON text, as O(objects).
    type: raw
    default: []
  what:
    description: How the messages name the objects as a whole, such as C(namespace training).
    type: str
    default: the objects
attributes:
  check_mode:
    support: full
    description: Reports what the dry run of the call would change.
  diff_mode:
    support: full
    description:
      - Shows the diff of every changed object, headed with the object.
      - Set the task keyword C(diff) to false where the objects hold secrets (the apply call
        then has C(no_log)).
"""

EXAMPLES = r"""
- name: Apply every object in one server-side apply call
  kubernetes.core.k8s:
    state: present
    definition: "{{ my_objects }}"
    apply: true
    server_side_apply:
      field_manager: my-role
    continue_on_error: true
  register: my_applied

- name: Report the objects that changed, or fail naming every object the API server rejected
  gpuops.training.k8s_apply_report:
    objects: "{{ my_objects }}"
    results: "{{ my_applied }}"
    what: namespace training
"""

RETURN = r"""
changed_objects:
  description: The objects that changed (or would change in check mode), as C(Kind namespace/name).
  type: list
  elements: str
  returned: always
deferred_objects:
  description: The objects check mode did not send (O(deferred)), as C(Kind namespace/name).
  type: list
  elements: str
  returned: always
rejected_objects:
  description: "One C(Kind namespace/name: the API server's message) line per rejected object."
  type: list
  elements: str
  returned: always
msg:
  description: A one-line summary, or every rejected object with the server's reason.
  type: str
  returned: always
"""
