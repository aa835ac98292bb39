# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules that wait on Kubernetes share: their connection options, the client,
messages, limits and the poll loop.

A module is built with :func:`build_kubernetes_module`, which adds the connection options
(documented by the ``gpuops.training.kubernetes`` doc fragment) and ends the module when the
kubernetes client is not installed; :func:`connect` gives it an API client. A kubeconfig that
cannot be loaded and a server that cannot be reached end the module with one line naming the
kubeconfig (and the server), never with the client's traceback. What a wait waits for is a
judge: a function that reads the objects and returns one verdict per object (``done``, and
``failed`` when it never will be); :func:`poll` calls it until they are done, one has failed
or the time is up.
"""

from __future__ import annotations

import time
import traceback

from ansible.module_utils.basic import env_fallback, missing_required_lib

from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module

# The one import guard of the kubernetes client: the wait modules take client and
# ApiException from here, and build_kubernetes_module reports the missing library.
try:
    from kubernetes import client, config, watch
    from kubernetes.client.rest import ApiException  # pylint: disable=unused-import
except ImportError:
    client = config = watch = ApiException = None
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
else:
    KUBERNETES_IMPORT_ERROR = None

# Seconds a wait may be given: far beyond any real run, and small enough that the deadline
# stays a float and every sleep stays within what time.sleep accepts.
MAX_SECONDS = 10**9

# The options of the gpuops.training.kubernetes doc fragment; the variables are the ones
# kubernetes.core reads, so one environment serves both collections.
CONNECTION_ARGUMENT_SPEC = {
    "kubeconfig": {"type": "path", "fallback": (env_fallback, ["K8S_AUTH_KUBECONFIG"])},
    "context": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_CONTEXT"])},
}


def build_kubernetes_module(argument_spec):
    """The module (check mode supported: the waits change nothing) with its own options and the
    connection options; it fails at once when the kubernetes client is not installed."""
    module = build_module(dict(argument_spec, **CONNECTION_ARGUMENT_SPEC), supports_check_mode=True)
    if KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    return module


def connect(module, pool_size=None):
    """An ApiClient for the module's kubeconfig and context; the module fails with one line
    naming them when none can be configured. ``pool_size``: connections kept for reads made
    from that many threads at once (the client's default otherwise)."""
    kubeconfig, context = module.params["kubeconfig"], module.params["context"]
    try:
        return api_client(kubeconfig, context, pool_size)
    except Exception as error:  # the kubernetes client raises several unrelated types here
        module.fail_json(msg=config_error_message(error, kubeconfig, context))


def api_client(kubeconfig, context, pool_size=None):
    """An ApiClient from the kubeconfig (or the default locations), else in-cluster."""
    # A configuration of its own (not a copy of the client's process-wide default).
    configuration = type.__call__(client.Configuration)
    if pool_size:
        configuration.connection_pool_maxsize = max(pool_size, configuration.connection_pool_maxsize or 0)
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    except config.ConfigException:
        if kubeconfig:
            raise
        config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def poll(
    judge, timeout, poll_interval, started=None, window=0, clock=None, done=None, failed=None, pause=None
):
    """Call ``judge()`` until every verdict is done or one has failed, until the deadline
    ``started + timeout`` or, with a ``window``, until ``window`` seconds after this call began.
    Return ``(outcome, verdicts, elapsed)``: outcome "done", "failed", "timeout" or "window",
    elapsed the seconds since ``started``.

    ``started`` is a time on ``clock`` (time.monotonic unless given), this call's start when
    None: a wait that goes on over several calls passes its first start, on time.time.
    ``done(verdict)`` and ``failed(verdict)`` read the verdict's ``done`` and ``failed`` keys
    unless given. The judge is called at least once, and once more at the deadline or the end
    of the window: the last sleep is cut short rather than skipped. ``pause(seconds)`` sleeps
    between two calls (time.sleep unless given; a :class:`ChangeWatch` returns early when the
    object changes).
    """
    clock = clock or time.monotonic
    pause = pause or time.sleep
    done = done or _done
    failed = failed or _failed
    began = clock()
    started = began if started is None else started
    deadline = started + timeout
    window_end = began + window if window else deadline
    while True:
        verdicts = judge()
        now = clock()
        elapsed = round(now - started, 1)
        if all(done(verdict) for verdict in verdicts):
            return "done", verdicts, elapsed
        if any(failed(verdict) for verdict in verdicts):
            return "failed", verdicts, elapsed
        if now >= deadline:
            return "timeout", verdicts, elapsed
        if now >= window_end:
            return "window", verdicts, elapsed
        pause(min(poll_interval, deadline - now, window_end - now))


class ChangeWatch:
    """A pause between two reads of one object that ends as soon as the API server reports a
    change to it: a wait sees a job end when it ends, not up to a poll interval later.

    ``list_call(*args, **kwargs)`` lists the object's kind (for example
    ``BatchV1Api.list_namespaced_job`` and the namespace); :meth:`seen` takes the object as last
    read, whose resourceVersion the watch starts from, so a change made since that read ends
    the pause at once. Without one (the object is not there yet), and when the watch cannot be
    held (its resourceVersion is too old, the stream drops), the pause is a plain sleep.
    """

    # A burst of changes (a controller updating the status pod by pod) gives one read a second.
    MIN_PAUSE_S = 1.0

    def __init__(self, name, list_call, *args, **kwargs):
        self.list_call, self.args = list_call, args
        self.kwargs = dict(kwargs, field_selector="metadata.name=%s" % name)
        self.resource_version = None

    def seen(self, obj):
        self.resource_version = ((obj or {}).get("metadata") or {}).get("resourceVersion")

    def __call__(self, seconds):
        """Pause up to ``seconds``; True when a change of the object ended the pause."""
        if not self.resource_version or seconds < self.MIN_PAUSE_S:
            # No watch to hold: the plain sleep, whole (time.sleep is the caller's clock too).
            time.sleep(max(seconds, 0))
            return False
        began = time.monotonic()
        changed = self._until_change(seconds)
        rest = (self.MIN_PAUSE_S if changed else seconds) - (time.monotonic() - began)
        if rest > 0:
            time.sleep(rest)
        return changed

    def _until_change(self, seconds):
        """Whether the object changed within ``seconds``; False when the watch could not say."""
        watcher = watch.Watch()
        try:
            for event in watcher.stream(
                self.list_call,
                *self.args,
                resource_version=self.resource_version,
                timeout_seconds=max(1, int(seconds)),
                _request_timeout=seconds + 10,
                **self.kwargs,
            ):
                return event.get("type") != "ERROR"
        except Exception:  # an expired resourceVersion (410 Gone), a dropped stream
            return False
        finally:
            watcher.stop()
        return False


def growing_window(window, growth, elapsed):
    """Seconds one call of a windowed wait watches: ``window``, or ``growth`` times the
    ``elapsed`` seconds since the wait's start when that is longer (0, a wait to the end,
    stays 0). Each window is one more nested include in the role that calls again, and
    Ansible fails at about 240 of them: with a growth of 0.1 and 30 s windows, a wait of three
    days takes about 80 calls, a year about 120, where fixed 30 s windows failed after two
    hours."""
    if not window:
        return 0
    return max(int(window), int(growth * max(elapsed, 0)))


def _done(verdict):
    return verdict["done"]


def _failed(verdict):
    return verdict.get("failed")


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
