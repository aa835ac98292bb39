"""pod_scheduling: the GPU taint's toleration, node affinity, the spread across nodes, Kueue's
queue and the PyTorchJob's schedulingPolicy, as every kind renders them, and each bad input
named by its variable before anything is rendered."""

from __future__ import annotations

import pytest
from test_training_workload import MPIRUN, RUN_ID, every_pod, settings

from ansible_collections.gpuops.training.plugins.module_utils import pod_scheduling as ps
from ansible_collections.gpuops.training.plugins.module_utils import training_checks as tc
from ansible_collections.gpuops.training.plugins.module_utils import training_workload as tw
from ansible_collections.gpuops.training.plugins.module_utils.role_settings import SettingsError

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
RANKS = {"matchLabels": {"gpuops.training/run-id": RUN_ID, "app.kubernetes.io/component": "ranks"}}
H100_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}]}
        ]
    },
    "preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "rack", "operator": "Exists"}]}}
    ],
}


def mpijob_pods(s):
    (job,), _command = tw.mpijob(dict(s, launcher="mpijob", mpirun_argv=MPIRUN))
    specs = job["spec"]["mpiReplicaSpecs"]
    return specs["Launcher"]["template"], specs["Worker"]["template"]


def all_pods(s):
    pods = every_pod(s)
    pods["mpi-launcher"], pods["mpi-worker"] = mpijob_pods(s)
    return pods


def override_spec(s):
    objects, _command = tw.trainjob(dict(s, launcher="trainjob", trainjob_runtime="torch-distributed"))
    return objects[-1]["spec"]["podTemplateOverrides"][0]["spec"]


# ---- the GPU taint


def test_every_pod_with_gpus_tolerates_the_gpu_taint_by_default():
    for kind, pod in all_pods(settings()).items():
        assert pod["spec"]["tolerations"] == [GPU_TOLERATION], kind
    assert override_spec(settings())["tolerations"] == [GPU_TOLERATION]


def test_the_toleration_follows_the_gpu_resource_and_only_pods_with_gpus_get_it():
    pods = every_pod(settings(gpu_resource="amd.com/gpu"))
    assert pods["pytorchjob"]["spec"]["tolerations"] == [dict(GPU_TOLERATION, key="amd.com/gpu")]
    cpu_only = every_pod(settings(gpus_per_node=0, nproc_per_node=1, backend="gloo", fabric="socket"))
    assert all("tolerations" not in pod["spec"] for pod in cpu_only.values())
    assert all("tolerations" not in pod["spec"] for pod in all_pods(settings(gpu_toleration=False)).values())
    assert "tolerations" not in every_pod(settings(gpu_toleration="false"))["indexed_job"]["spec"]


@pytest.mark.parametrize(
    "own",
    [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        # An empty key with Exists tolerates every taint.
        {"operator": "Exists"},
    ],
)
def test_a_user_toleration_that_covers_the_taint_is_not_repeated(own):
    for pod in all_pods(settings(tolerations=[own])).values():
        assert pod["spec"]["tolerations"] == [own]


@pytest.mark.parametrize(
    "own",
    [
        # Only one value of the taint, or another effect: the default is still needed.
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
        {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
    ],
)
def test_the_gpu_toleration_follows_user_tolerations_that_do_not_cover_it(own):
    for pod in all_pods(settings(tolerations=[own])).values():
        assert pod["spec"]["tolerations"] == [own, GPU_TOLERATION]


# ---- node affinity and the spread across nodes


def test_node_affinity_reaches_every_pod_and_an_existing_runtimes_overrides():
    s = settings(node_affinity=H100_AFFINITY)
    for kind, pod in all_pods(s).items():
        assert pod["spec"]["affinity"] == {"nodeAffinity": H100_AFFINITY}, kind
    assert override_spec(s)["affinity"] == {"nodeAffinity": H100_AFFINITY}
    assert all("affinity" not in pod["spec"] for pod in all_pods(settings()).values())


def test_require_puts_one_rank_pod_per_node_and_leaves_the_mpi_launcher_out():
    pods = all_pods(settings(spread_across_nodes="require", nnodes=3))
    launcher = pods.pop("mpi-launcher")
    for kind, pod in pods.items():
        assert pod["spec"]["topologySpreadConstraints"] == [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": RANKS,
                "nodeTaintsPolicy": "Honor",
                # Fewer eligible nodes than pods: the global minimum counts as 0, no node takes two.
                "minDomains": 3,
            }
        ], kind
        assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "ranks", kind
    # The launcher runs no rank: neither spread nor counted by the workers' selector.
    assert "topologySpreadConstraints" not in launcher["spec"]
    assert "app.kubernetes.io/component" not in launcher["metadata"]["labels"]


def test_prefer_spreads_without_holding_pods_back():
    pod = every_pod(settings(spread_across_nodes="prefer"))["pytorchjob"]
    (constraint,) = pod["spec"]["topologySpreadConstraints"]
    assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
    assert "minDomains" not in constraint
    assert all("topologySpreadConstraints" not in pod["spec"] for pod in every_pod(settings()).values())


def test_user_constraints_follow_and_count_the_runs_rank_pods_unless_they_select_their_own():
    zone = {
        "maxSkew": "2",
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
    }
    keyed = {
        "maxSkew": 1,
        "topologyKey": "example.com/rack",
        "whenUnsatisfiable": "ScheduleAnyway",
        "matchLabelKeys": ["gpuops.training/run-id"],
    }
    pod = every_pod(settings(spread_across_nodes="require", topology_spread_constraints=[zone, keyed]))[
        "indexed_job"
    ]
    own, zone_rendered, keyed_rendered = pod["spec"]["topologySpreadConstraints"]
    assert own["topologyKey"] == "kubernetes.io/hostname"
    assert zone_rendered == dict(zone, maxSkew=2, labelSelector=RANKS)
    assert keyed_rendered == keyed


# ---- gang scheduling


def test_a_kueue_queue_labels_the_workload_and_creates_it_suspended():
    s = settings(kueue_local_queue="team-a")
    (service, job), _command = tw.indexed_job(dict(s, launcher="indexed_job"))
    assert job["metadata"]["labels"][ps.KUEUE_QUEUE_LABEL] == "team-a"
    assert job["spec"]["suspend"] is True
    assert ps.KUEUE_QUEUE_LABEL not in service["metadata"]["labels"]
    (pytorchjob,), _command = tw.pytorchjob(dict(s, launcher="pytorchjob"))
    assert pytorchjob["metadata"]["labels"][ps.KUEUE_QUEUE_LABEL] == "team-a"
    assert pytorchjob["spec"]["runPolicy"]["suspend"] is True
    (runtime, trainjob), _command = tw.trainjob(dict(s, launcher="trainjob"))
    assert trainjob["metadata"]["labels"][ps.KUEUE_QUEUE_LABEL] == "team-a"
    assert trainjob["spec"]["suspend"] is True
    assert ps.KUEUE_QUEUE_LABEL not in runtime["metadata"]["labels"]
    assert tw.workload(dict(s, launcher="pytorchjob"))["kueue_local_queue"] == "team-a"


def test_without_a_queue_nothing_is_suspended_or_labelled():
    (_service, job), _command = tw.indexed_job(settings())
    (pytorchjob,), _command = tw.pytorchjob(settings(launcher="pytorchjob"))
    assert "suspend" not in job["spec"] and "suspend" not in pytorchjob["spec"]["runPolicy"]
    assert ps.KUEUE_QUEUE_LABEL not in job["metadata"]["labels"]
    assert tw.workload(settings())["kueue_local_queue"] == ""


def test_the_scheduling_policy_gangs_every_pod_or_the_elastic_minimum():
    s = settings(
        launcher="pytorchjob",
        nnodes=4,
        pytorchjob_gang=True,
        pytorchjob_gang_queue="research",
        pytorchjob_gang_timeout_s=600,
        priority_class="gpu-training",
    )
    (job,), _command = tw.pytorchjob(s)
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": 4,
        "queue": "research",
        "priorityClass": "gpu-training",
        "scheduleTimeoutSeconds": 600,
    }
    (job,), _command = tw.pytorchjob(dict(s, elastic_min_nodes=2, elastic_max_nodes=4))
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2
    (job,), _command = tw.pytorchjob(
        dict(
            s,
            pytorchjob_master=True,
            pytorchjob_gang_queue="",
            pytorchjob_gang_timeout_s=0,
            priority_class="",
        )
    )
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4}
    (job,), _command = tw.pytorchjob(settings(launcher="pytorchjob"))
    assert "schedulingPolicy" not in job["spec"]["runPolicy"]


# ---- bad input, named


AFFINITY_ROOT = "training_job_node_affinity.requiredDuringSchedulingIgnoredDuringExecution"


def required(*expressions, fields=()):
    term = {}
    if expressions:
        term["matchExpressions"] = list(expressions)
    if fields:
        term["matchFields"] = list(fields)
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gpu_toleration": "maybe"}, "training_job_gpu_toleration must be true or false, got 'maybe'"),
        ({"node_affinity": ["a"]}, "training_job_node_affinity must be a nodeAffinity mapping"),
        (
            {"node_affinity": {"nodeSelectorTerms": []}},
            "training_job_node_affinity has unknown fields ['nodeSelectorTerms']: a nodeAffinity has "
            "requiredDuringSchedulingIgnoredDuringExecution and preferredDuring",
        ),
        (
            {"node_affinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
            AFFINITY_ROOT + ".nodeSelectorTerms must be a non-empty list of terms",
        ),
        ({"node_affinity": required()}, AFFINITY_ROOT + ".nodeSelectorTerms[0] has no requirement"),
        (
            {"node_affinity": required({"key": "gpu", "operator": "Equals", "values": ["a"]})},
            AFFINITY_ROOT + ".nodeSelectorTerms[0].matchExpressions[0].operator must be one of In, NotIn, "
            "Exists, DoesNotExist, Gt, Lt, got 'Equals'",
        ),
        (
            {"node_affinity": required({"key": "gpu", "operator": "In", "values": []})},
            "matchExpressions[0]: operator In needs a non-empty list of strings as values, got []",
        ),
        (
            {"node_affinity": required({"key": "gpu", "operator": "Exists", "values": ["a"]})},
            "matchExpressions[0]: operator Exists takes no values",
        ),
        (
            {"node_affinity": required({"key": "gpu.count", "operator": "Gt", "values": ["eight"]})},
            "matchExpressions[0]: operator Gt needs exactly one integer value, got ['eight']",
        ),
        (
            {"node_affinity": required({"key": "bad key", "operator": "Exists"})},
            "matchExpressions[0].key has an invalid name part 'bad key'",
        ),
        (
            {
                "node_affinity": required(
                    fields=[{"key": "metadata.labels", "operator": "In", "values": ["a"]}]
                )
            },
            "matchFields[0].key must be metadata.name, the only node field, got 'metadata.labels'",
        ),
        (
            {
                "node_affinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 0,
                            "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                        }
                    ]
                }
            },
            "training_job_node_affinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight must be an "
            "integer from 1 to 100, got 0",
        ),
        (
            {"spread_across_nodes": "always"},
            "training_job_spread_across_nodes must be one of none, prefer, require, got 'always'",
        ),
        (
            {"topology_spread_constraints": {"maxSkew": 1}},
            "training_job_topology_spread_constraints must be a list of topology spread constraints",
        ),
        (
            {"topology_spread_constraints": [{"topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
            "training_job_topology_spread_constraints[0].maxSkew must be an integer of at least 1, got None",
        ),
        (
            {
                "topology_spread_constraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Never"}
                ]
            },
            "training_job_topology_spread_constraints[0].whenUnsatisfiable must be one of DoNotSchedule, "
            "ScheduleAnyway, got 'Never'",
        ),
        (
            {
                "topology_spread_constraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "minDomains": 2,
                    }
                ]
            },
            "training_job_topology_spread_constraints[0].minDomains needs whenUnsatisfiable DoNotSchedule",
        ),
        (
            {
                "topology_spread_constraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "skew": 1}
                ]
            },
            "training_job_topology_spread_constraints[0] has unknown fields ['skew']",
        ),
        (
            {
                "topology_spread_constraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "a b"}},
                    }
                ]
            },
            "training_job_topology_spread_constraints[0].labelSelector.matchLabels 'app'",
        ),
        (
            {
                "spread_across_nodes": "require",
                "topology_spread_constraints": [
                    {
                        "maxSkew": 2,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                    }
                ],
            },
            "training_job_topology_spread_constraints[0] repeats topologyKey kubernetes.io/hostname with "
            "whenUnsatisfiable DoNotSchedule, which training_job_spread_across_nodes or an earlier entry",
        ),
        (
            {"kueue_local_queue": "Team_A"},
            "training_job_kueue_local_queue must name a LocalQueue",
        ),
        (
            {"kueue_local_queue": "q" * 64},
            "training_job_kueue_local_queue must name a LocalQueue",
        ),
        (
            {"pytorchjob_gang": True},
            "training_job_pytorchjob_gang: the schedulingPolicy is the Training Operator's, for the "
            "pytorchjob launcher, not indexed_job; use training_job_kueue_local_queue for Kueue",
        ),
        (
            {"pytorchjob_gang_queue": "research"},
            "training_job_pytorchjob_gang_queue is set but training_job_pytorchjob_gang is false",
        ),
        (
            {"launcher": "pytorchjob", "pytorchjob_gang": True, "pytorchjob_gang_timeout_s": -1},
            "training_job_pytorchjob_gang_timeout_s must be an integer of at least 0",
        ),
        (
            {"launcher": "pytorchjob", "pytorchjob_gang": True, "pytorchjob_gang_queue": "Research Queue"},
            "training_job_pytorchjob_gang_queue must name a gang scheduler's queue or be empty",
        ),
        (
            {"launcher": "runai", "node_affinity": H100_AFFINITY},
            "training_job_node_affinity: the runai launcher renders no pod spec to carry it",
        ),
        (
            {"launcher": "runai", "spread_across_nodes": "prefer"},
            "training_job_spread_across_nodes: the runai launcher renders no pod spec to carry it",
        ),
        (
            {"launcher": "runai", "kueue_local_queue": "team-a"},
            "training_job_kueue_local_queue: Kueue manages the pytorchjob, indexed_job, trainjob launchers' "
            "workloads, not the runai launcher's",
        ),
        (
            {
                "launcher": "trainjob",
                "trainjob_runtime": "torch-distributed",
                "spread_across_nodes": "require",
            },
            "training_job_spread_across_nodes: a TrainJob's overrides of an existing runtime "
            "(training_job_trainjob_runtime) cannot carry topology spread constraints",
        ),
    ],
)
def test_every_scheduling_problem_names_its_variable(overrides, message):
    found = tc.problems(settings(**overrides))
    assert any(message in problem for problem in found), found
    with pytest.raises(SettingsError):
        tw.workload(settings(**overrides))


def test_the_valid_scheduling_settings_have_no_problems():
    s = settings(
        node_affinity=H100_AFFINITY,
        spread_across_nodes="require",
        topology_spread_constraints=[
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
        kueue_local_queue="team-a",
    )
    for launcher in ("indexed_job", "pytorchjob", "trainjob"):
        assert tc.problems(dict(s, launcher=launcher)) == [], launcher
    assert tc.problems(dict(s, launcher="pytorchjob", pytorchjob_gang=True)) == []
    # An existing runtime's overrides carry the node affinity, not the spread.
    assert (
        tc.problems(settings(launcher="trainjob", trainjob_runtime="torch", node_affinity=H100_AFFINITY))
        == []
    )


def test_the_nccl_tests_messages_name_its_variables():
    found = tc.problems(
        settings(
            launcher="mpijob",
            mpirun_argv=MPIRUN,
            node_affinity={"required": {}},
            spread_across_nodes="sometimes",
            kueue_local_queue="team-a",
        ),
        prefix="nccl_tests_",
    )
    assert len(found) == 3, found
    assert all(problem.startswith("nccl_tests_") for problem in found), found
    assert any("Kueue manages the pytorchjob, indexed_job, trainjob" in problem for problem in found), found
