// Command training-operator runs the Kubeflow Training Operator v1 controllers
// for PyTorchJob and MPIJob outside the cluster, against a kubeconfig.
//
// The upstream main always starts a certificate rotator that needs in-cluster
// objects and a webhook server listening on every interface. Tests need
// neither: the webhooks are not registered (the server never starts), and the
// metrics and health endpoints listen on 127.0.0.1 only.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
	mpicontroller "github.com/kubeflow/training-operator/pkg/controller.v1/mpi"
	pytorchcontroller "github.com/kubeflow/training-operator/pkg/controller.v1/pytorch"
)

func main() {
	var metricsAddr, probeAddr string
	var controllerThreads int
	flag.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:18080", "address of the metrics endpoint (loopback only)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:18081", "address of /healthz and /readyz (loopback only)")
	flag.IntVar(&controllerThreads, "controller-threads", 1, "worker threads per controller")
	flag.StringVar(&config.Config.PyTorchInitContainerImage, "pytorch-init-container-image",
		config.PyTorchInitContainerImageDefault, "image of the PyTorch init container")
	flag.IntVar(&config.Config.PyTorchInitContainerMaxTries, "pytorch-init-container-max-tries",
		config.PyTorchInitContainerMaxTriesDefault, "tries of the PyTorch init container")
	// Empty keeps the operator's built-in template; the harness passes the file the
	// collection's training_operator role gives a cluster's operator (requests equal to limits).
	flag.StringVar(&config.Config.PyTorchInitContainerTemplateFile, "pytorch-init-container-template-file", "",
		"the PyTorch init container template (YAML); empty: the built-in one, not a file on the host")
	flag.StringVar(&config.Config.MPIKubectlDeliveryImage, "mpi-kubectl-delivery-image",
		config.MPIKubectlDeliveryImageDefault, "image of the MPI launcher init container")
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(metricsAddr, probeAddr, controllerThreads); err != nil {
		fmt.Fprintln(os.Stderr, "training-operator:", err)
		os.Exit(1)
	}
}

func run(metricsAddr, probeAddr string, controllerThreads int) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubeflowv1.AddToScheme(scheme))
	// The reconcilers look these types up even when gang scheduling is off.
	utilruntime.Must(volcanov1beta1.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))

	// GetConfig honours $KUBECONFIG, which the harness sets.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         false,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}

	// Only the kinds whose CRDs the harness installs; the reconcilers need
	// their CRD present when they start (REST mapping).
	noGang := common.GenNonGangSchedulerSetupFunc()
	if err := pytorchcontroller.NewReconciler(mgr, noGang).SetupWithManager(mgr, controllerThreads); err != nil {
		return fmt.Errorf("setting up PyTorchJob controller: %w", err)
	}
	if err := mpicontroller.NewReconciler(mgr, noGang).SetupWithManager(mgr, controllerThreads); err != nil {
		return fmt.Errorf("setting up MPIJob controller: %w", err)
	}

	ctrl.Log.WithName("setup").Info("starting manager")
	return mgr.Start(ctrl.SetupSignalHandler())
}
