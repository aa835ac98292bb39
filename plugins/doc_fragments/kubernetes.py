# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the modules that read the Kubernetes API find it (see module_utils/k8s_client.api_client)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to the kubeconfig file. Without it the environment variable
        E(K8S_AUTH_KUBECONFIG), then E(KUBECONFIG) and C(~/.kube/config), then the
        in-cluster service account are used.
    type: path
  context:
    description: Context of the kubeconfig to use; its current context when not given.
    type: str
"""
