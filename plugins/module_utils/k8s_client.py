# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client, messages, limits and poll loop the modules that wait on Kubernetes share.

A kubeconfig that cannot be loaded and a server that cannot be reached end the module with
one line naming the kubeconfig (and the server), never with the client's traceback. What a
wait waits for is a judge: a function that reads the objects and returns one verdict per
object (``done``, and ``failed`` when it never will be); :func:`poll` calls it until they are
done, one has failed or the time is up.
"""

from __future__ import annotations

import time

# Seconds a wait may be given: far beyond any real run, and small enough that the deadline
# stays a float and every sleep stays within what time.sleep accepts.
MAX_SECONDS = 10**9


def api_client(kubeconfig, context):
    """An ApiClient from the kubeconfig (or the default locations), else in-cluster."""
    from kubernetes import client, config  # the modules report a missing client themselves

    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except config.ConfigException:
        if kubeconfig:
            raise
        config.load_incluster_config()
        return client.ApiClient()


def poll(judge, timeout, poll_interval):
    """Call ``judge()`` until every verdict is done or one has failed, or ``timeout`` seconds
    have passed. Return ``(outcome, verdicts, elapsed)``, outcome "done", "failed" or "timeout".

    The judge is called at least once, and once more at the deadline: the last sleep is cut
    short rather than skipped.
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        verdicts = judge()
        elapsed = round(time.monotonic() - started, 1)
        if all(verdict["done"] for verdict in verdicts):
            return "done", verdicts, elapsed
        if any(verdict.get("failed") for verdict in verdicts):
            return "failed", verdicts, elapsed
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout", verdicts, elapsed
        time.sleep(min(poll_interval, remaining))


def wait_options_problem(params, at_least_zero=("timeout",)):
    """A message for wait options out of range (``poll_interval`` below 1 second, any of
    ``at_least_zero`` negative, any above MAX_SECONDS); empty when they are fine."""
    if any(params[name] < 0 for name in at_least_zero) or params["poll_interval"] < 1:
        return "%s must be 0 or more and poll_interval at least 1 second" % _and(at_least_zero)
    return too_long(params, tuple(at_least_zero) + ("poll_interval",))


def _and(names):
    names = list(names)
    return names[0] if len(names) == 1 else "%s and %s" % (", ".join(names[:-1]), names[-1])


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
