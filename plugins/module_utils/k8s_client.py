# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Messages and limits the modules that wait on Kubernetes share.

A kubeconfig that cannot be loaded and a server that cannot be reached end the module with
one line naming the kubeconfig (and the server), never with the client's traceback.
"""

from __future__ import annotations

# Seconds a wait may be given: far beyond any real run, and small enough that the deadline
# stays a float and every sleep stays within what time.sleep accepts.
MAX_SECONDS = 10**9


def kubeconfig_name(kubeconfig):
    return kubeconfig or "(default: K8S_AUTH_KUBECONFIG, KUBECONFIG, ~/.kube/config, then in-cluster)"


def config_error_message(error, kubeconfig, context):
    """The module's message when no client can be configured from the kubeconfig."""
    where = "kubeconfig %s" % kubeconfig_name(kubeconfig)
    if context:
        where += ", context %s" % context
    return "cannot configure the Kubernetes client from %s: %s" % (where, error)


def connection_error_message(error, api, kubeconfig, what):
    """The module's message when reading ``what`` failed without an API status: the server did
    not answer (connection refused, TLS, DNS, timeout) or the client refused a value."""
    server = getattr(getattr(api, "configuration", None), "host", None) or "(unknown server)"
    reason = getattr(error, "reason", None) or error
    return "cannot read %s from the Kubernetes API server %s (kubeconfig %s): %s" % (
        what,
        server,
        kubeconfig_name(kubeconfig),
        reason,
    )


def too_long(params, names):
    """A message naming the options of ``names`` above MAX_SECONDS; empty when none is."""
    over = ["%s (%s)" % (name, params[name]) for name in names if (params.get(name) or 0) > MAX_SECONDS]
    return "%s must be at most %d seconds" % (" and ".join(over), MAX_SECONDS) if over else ""
