"""training_checks: every problem with a run's settings, by concern, each naming the caller's
variable; what applies depends on the launcher."""

from __future__ import annotations

import pytest
from test_training_workload import MPIRUN, RUN_ID, settings

from ansible_collections.gpuops.training.plugins.module_utils import training_checks as tc
from ansible_collections.gpuops.training.plugins.module_utils import training_settings as ts


def problems_of(**overrides):
    return tc.problems(settings(**overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"launcher": "slurm"},
            "training_job_launcher must be one of local, ssh, pytorchjob, indexed_job, trainjob, runai, "
            "mpijob, got 'slurm'",
        ),
        ({"run_id": "a/../../b"}, "training_job_run_id must be a plain name"),
        (
            {"name": "../../etc"},
            'so that the run directory stays inside /var/tmp/gpuops-runs, got "../../etc"',
        ),
        (
            {"k8s_name": "Bad_Name"},
            "training_job_k8s_name: the objects' name 'Bad_Name' must be a DNS-1035 label",
        ),
        ({"namespace": "Training"}, "training_job_namespace must be a DNS-1123 label"),
        ({"image": ""}, "training_job_image is required for the indexed_job launcher"),
        (
            {"image_pull_policy": "Sometimes"},
            "training_job_image_pull_policy must be one of Always, IfNotPresent, Never, got 'Sometimes'",
        ),
        ({"nnodes": 0}, "training_job_nnodes must be an integer of at least 1, got 0"),
        ({"nproc_per_node": 9}, "training_job_nproc_per_node (9) exceeds training_job_gpus_per_node (8)"),
        (
            {"gpus_per_node": 0, "nproc_per_node": 1, "backend": "nccl"},
            "training_job_backend is nccl but training_job_gpus_per_node is 0",
        ),
        ({"cpu": "lots"}, "training_job_cpu 'lots' is not a Kubernetes quantity"),
        ({"memory": "0"}, "training_job_memory must be a quantity above 0"),
        ({"memory": "8Gi"}, "training_job_memory (8Gi) must be larger than the /dev/shm size 14Gi"),
        ({"shm_size": "-1Gi"}, "training_job_shm_size must be a quantity above 0"),
        ({"fabric": "ethernet"}, "training_job_fabric must be one of ib, roce, socket, got 'ethernet'"),
        (
            {"network": "Not A Net"},
            "training_job_network: 'Not A Net' is not a NetworkAttachmentDefinition reference",
        ),
        ({"network": {"a": 1}}, "training_job_network must be a network name or a list of them"),
        ({"rdma_resource": "rdma"}, "training_job_rdma_resource must be an extended resource name"),
        ({"rdma_per_node": 0}, "training_job_rdma_per_node must be an integer of at least 1, got 0"),
        ({"nccl_ib_hca": ""}, "training_job_nccl_ib_hca must name the HCAs for the ib fabric"),
        (
            {"nccl_net_gdr_level": "FAR"},
            "training_job_nccl_net_gdr_level must be one of LOC, PIX, PXB, PHB, SYS or empty",
        ),
        (
            {"fabric": "roce", "nccl_ib_gid_index": -1},
            "training_job_nccl_ib_gid_index must be an integer of at least 0",
        ),
        ({"nccl_socket_ifname": "eth0; rm"}, "training_job_nccl_socket_ifname must be an interface name"),
        ({"env": {"1BAD": "x"}}, "training_job_env: '1BAD' is not a valid environment variable name"),
        (
            {"env_from_secrets": ["HF_TOKEN"]},
            "training_job_env_from_secrets must be a mapping of variable names to {secret, key}",
        ),
        (
            {"env_from_secrets": {"1BAD": {"secret": "s", "key": "k"}}},
            "training_job_env_from_secrets: '1BAD' is not a valid environment variable name",
        ),
        (
            {"env_from_secrets": {"TOKEN": "hub/token"}},
            "training_job_env_from_secrets: TOKEN must be a mapping with exactly the keys secret and key",
        ),
        (
            {"env_from_secrets": {"TOKEN": {"secret": "Hub Creds", "key": "token"}}},
            "training_job_env_from_secrets: TOKEN.secret must be a Secret name, got 'Hub Creds'",
        ),
        (
            {"env_from_secrets": {"TOKEN": {"secret": "hub", "key": "../token"}}},
            "training_job_env_from_secrets: TOKEN.key must be a key of the Secret",
        ),
        (
            {"env": {"TOKEN": "x"}, "env_from_secrets": {"TOKEN": {"secret": "hub", "key": "token"}}},
            "training_job_env_from_secrets: TOKEN is also set in training_job_env",
        ),
        (
            {"launcher": "runai", "env_from_secrets": {"TOKEN": {"secret": "hub", "key": "token"}}},
            "training_job_env_from_secrets: the runai launcher cannot reference Secrets",
        ),
        (
            {"seccomp_profile": "Localhost"},
            "training_job_seccomp_profile must be one of RuntimeDefault, Unconfined or empty, "
            "got 'Localhost'",
        ),
        (
            {"run_as_user": -1},
            "training_job_run_as_user must be a user or group id (0 or more) or empty, got -1",
        ),
        (
            {"checkpoint_pvc": "Bad PVC"},
            "training_job_checkpoint_pvc must be a PersistentVolumeClaim name or empty",
        ),
        (
            {"checkpoint_mount": "/dev/shm"},
            "training_job_checkpoint_mount must be an absolute path other than / and /dev/shm",
        ),
        (
            {"dataset_pvc": "coco", "dataset_mount": "/checkpoints"},
            "training_job_checkpoint_mount and training_job_dataset_mount must differ",
        ),
        ({"backoff_limit": -1}, "training_job_backoff_limit must be an integer of at least 0, got -1"),
        ({"rdzv_port": 70000}, "training_job_rdzv_port must be an integer between 1 and 65535, got 70000"),
        ({"timeout_s": 0}, "training_job_timeout_s must be an integer of at least 1, got 0"),
        (
            {"launcher": "pytorchjob", "elastic_min_nodes": 3, "elastic_max_nodes": 4},
            "training_job_elastic_min_nodes (3) <= training_job_nnodes (2) "
            "<= training_job_elastic_max_nodes (4) must hold",
        ),
        (
            {"elastic_max_nodes": 4},
            "training_job_elastic_max_nodes is set but training_job_elastic_min_nodes is 0",
        ),
        (
            {"elastic_min_nodes": 1, "elastic_max_nodes": 4},
            "training_job_elastic_min_nodes: elastic runs need the pytorchjob launcher, an Indexed Job",
        ),
        (
            {
                "launcher": "pytorchjob",
                "pytorchjob_master": True,
                "elastic_min_nodes": 1,
                "elastic_max_nodes": 4,
            },
            "an elastic PyTorchJob has Workers only",
        ),
        (
            {"launcher": "trainjob", "elastic_min_nodes": 1, "elastic_max_nodes": 4},
            "Kubeflow Trainer v2 does not run elastic TrainJobs yet",
        ),
        ({"sync_bn": "maybe"}, "training_job_sync_bn must be auto, true or false"),
        (
            {"sync_bn": "true", "gpus_per_node": 0, "nproc_per_node": 1},
            "training_job_sync_bn is true but the run has no GPUs or uses gloo",
        ),
        (
            {"namespace": "a-rather-long-namespace-name"},
            "training_job_set_hostname_as_fqdn: the pods' host name",
        ),
        (
            {"launcher": "trainjob", "trainjob_runtime_kind": "Runtime"},
            "training_job_trainjob_runtime_kind must be one of ClusterTrainingRuntime, TrainingRuntime",
        ),
        (
            {"pod_annotations": {"bad key!": "x"}},
            "training_job_pod_annotations: 'bad key!' is not a valid annotation key",
        ),
        (
            {"pod_labels": {"team": "a b"}},
            "training_job_pod_labels: the value 'a b' of team is not a valid label value",
        ),
        ({"tolerations": "all"}, "training_job_tolerations must be a list of tolerations"),
        ({"service_account": "Trainer"}, "training_job_service_account must be a DNS-1123 name or empty"),
        ({"extra_args": "--epochs=1"}, "training_job_extra_args must be a list of strings"),
        ({"image_pull_secrets": "regcred"}, "training_job_image_pull_secrets must be a list of Secret names"),
        (
            {"image_pull_secrets": ["regcred", "Reg Cred"]},
            "training_job_image_pull_secrets[1] is not a Secret name: must be a DNS-1123 subdomain",
        ),
        ({"image_pull_secrets": ["a", "a"]}, "training_job_image_pull_secrets[1] repeats 'a'"),
        (
            {"launcher": "runai", "image_pull_secrets": ["regcred"]},
            "training_job_image_pull_secrets: the runai launcher cannot set image pull Secrets",
        ),
    ],
)
def test_every_problem_names_its_variable(overrides, message):
    found = problems_of(**overrides)
    assert any(message in problem for problem in found), found


def test_the_fqdn_problem_says_how_long_it_is():
    (problem,) = problems_of(namespace="a-rather-long-namespace-name")
    assert "has 82 characters, Linux allows 64" in problem
    assert problems_of(namespace="a-rather-long-namespace-name", set_hostname_as_fqdn=False) == []
    assert problems_of(namespace="a-rather-long-namespace-name", launcher="pytorchjob") == []


def test_valid_settings_have_no_problems_under_every_launcher():
    for launcher in ts.LAUNCHERS:
        assert tc.problems(settings(launcher=launcher, mpirun_argv=MPIRUN, python="/usr/bin/python3")) == []


HOST = {"launcher": "local", "run_id": "", "python": "/usr/bin/python3"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"epochs": 0}, "training_job_epochs must be an integer of at least 1, got 0"),
        ({"min_size": 16}, "training_job_min_size must be an integer of at least 32, got 16"),
        ({"workers": -1}, "training_job_workers must be an integer of at least 0, got -1"),
        ({"poll_interval_s": 0}, "training_job_poll_interval_s must be an integer of at least 1, got 0"),
        ({"collective_timeout_s": "x"}, "training_job_collective_timeout_s must be an integer of at least 1"),
        ({"rdzv_port": 0}, "training_job_rdzv_port must be an integer between 1 and 65535, got 0"),
        ({"lr": 0}, "training_job_lr must be a positive number, got 0"),
        ({"lr": "nan"}, "training_job_lr must be a positive number, got 'nan'"),
        ({"inject_fault": "rank1"}, "training_job_inject_fault must look like RANK@STEP"),
        ({"dataset": "coco"}, "training_job_dataset_path is required when training_job_dataset is coco"),
        ({"model": "yolo"}, "training_job_model must be one of retinanet_resnet50_fpn,"),
        ({"name": ".."}, 'got ".."'),
        ({"env": {"1BAD": "x"}}, "training_job_env: '1BAD' is not a valid environment variable name"),
        (
            {"env_from_secrets": {"HF_TOKEN": {"secret": "hub", "key": "token"}}},
            "training_job_env_from_secrets references Kubernetes Secrets, which the local launcher "
            "cannot read",
        ),
    ],
)
def test_the_host_launchers_settings_are_checked_in_python(overrides, message):
    """What tasks/validate.yml asserted in Jinja, with every other check."""
    for launcher in ts.HOST_LAUNCHERS:
        found = tc.problems(dict(HOST, launcher=launcher, **overrides))
        assert any(
            message.replace("local launcher", launcher + " launcher") in problem for problem in found
        ), found


def test_the_host_launchers_ignore_the_pods_settings():
    assert tc.problems(dict(HOST, cpu="lots", image="", namespace="Bad", nnodes=0)) == []
    assert tc.problems(dict(HOST, launcher="ssh", checkpoint_mount="relative")) == []


def test_the_trainers_settings_are_not_an_mpijobs():
    """nccl-tests runs no trainer: its MPIJob is not held to the trainer's settings."""
    mpijob = settings(launcher="mpijob", mpirun_argv=MPIRUN, epochs=0, dataset="coco")
    assert tc.problems(mpijob) == []
    assert tc.problems(dict(mpijob, launcher="pytorchjob")) != []


def test_every_message_names_the_callers_variables():
    bad = settings(
        launcher="mpijob", mpirun_argv=MPIRUN, cpu="lots", memory="1Gi", network="Bad_Net", tolerations="all"
    )
    found = tc.problems(bad, prefix="nccl_tests_")
    assert len(found) == 4, found
    assert all(problem.startswith("nccl_tests_") for problem in found), found
    assert not any("training_job_" in problem for problem in found), found


def test_a_builder_needs_a_run_id_and_mpiruns_command():
    with pytest.raises(tc.SettingsError, match="nccl_tests_run_id is empty: the run needs an id"):
        tc.checked(settings(run_id=""), prefix="nccl_tests_")
    with pytest.raises(tc.SettingsError, match="training_job_mpirun_argv must be a non-empty list"):
        tc.checked(settings(launcher="mpijob"))
    with pytest.raises(tc.SettingsError, match="training_job_launcher is 'local', but the workloads are for"):
        tc.checked(dict(HOST, run_id=RUN_ID), launchers=ts.WORKLOAD_LAUNCHERS, what="the workloads")
    # The problems of the settings come first; the run id is the caller's to choose.
    assert tc.problems(settings(run_id="")) == []


def test_settings_that_are_not_a_mapping_are_named():
    assert tc.problems(["cpu"], prefix="nccl_tests_") == [
        "the settings must be a mapping of nccl_tests_* variables (without the prefix), got list"
    ]


@pytest.mark.parametrize(
    ("volumes", "mounts", "message"),
    [
        (
            [{"name": "dshm", "emptyDir": {}}],
            [],
            "training_job_volumes[0] is named 'dshm', which the pod uses",
        ),
        ([{"name": "Bad_Name", "emptyDir": {}}], [], "training_job_volumes[0] must be a Volume with a name"),
        ([{"name": "libs"}], [], "training_job_volumes[0] (libs) names no volume source"),
        (
            [{"name": "libs", "emptyDir": {}}, {"name": "libs", "emptyDir": {}}],
            [],
            "training_job_volumes[1] is named 'libs', which an earlier volume has",
        ),
        (
            [],
            [{"name": "libs", "mountPath": "/libs"}],
            "training_job_volume_mounts[0] mounts 'libs', which is not in",
        ),
        (
            [{"name": "libs", "emptyDir": {}}],
            [{"name": "libs", "mountPath": "relative"}],
            "training_job_volume_mounts[0] needs an absolute mountPath",
        ),
        (
            [{"name": "libs", "emptyDir": {}}],
            [{"name": "libs", "mountPath": "/checkpoints"}],
            "training_job_volume_mounts[0] mounts at /checkpoints, which the pod already uses",
        ),
    ],
)
def test_extra_volumes_are_checked_naming_the_entry(volumes, mounts, message):
    found = problems_of(volumes=volumes, volume_mounts=mounts)
    assert any(message in problem for problem in found), found
