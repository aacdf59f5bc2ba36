// hollow-node: a hollow kubelet (the real kubelet with a fake container runtime), started
// the way `kubemark --morph=kubelet --use-host-image-service=false` started it, built on
// the Kubernetes release's own kubelet packages. kubelet.go holds kubemark's hollow kubelet
// (pkg/kubemark, removed in 1.38), ported; this file adds what a shared test machine needs:
//
//   - the kubelet API listens on 127.0.0.1 only (kubemark hard-codes 0.0.0.0), the
//     read-only port and the healthz port are off (kubemark: 10255 and 10248 on every
//     node, so two nodes on one machine collide);
//   - the root directory and the fake runtime's socket are the ones given on the command
//     line (kubemark: a fresh /tmp/hollow-kubelet.* and /tmp/kubelet_remote_*.sock that
//     nobody removes);
//   - SIGTERM/SIGINT stop it (kubemark's Run blocks forever);
//   - --feature-gates sets the kubelet's gates, as cmd/kubelet's run() does before
//     RunKubelet (1.38's kubelet declares the PodCertificateMLDSA node feature only with
//     its gate on, and without it refuses a Pod that asks for an ML-DSA key).
//
// Everything else -- the kubelet configuration, the volume plugins, the fake runtime,
// image service, cAdvisor and container manager, the discarded Events -- is kubemark's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig with this node's identity (system:node:<name>)")
	name := flag.String("name", "hollow-node", "Node name")
	rootDir := flag.String("root-dir", "", "kubelet root directory (created; its pods/ holds the volumes)")
	port := flag.Int("kubelet-port", 0, "kubelet API port on 127.0.0.1")
	maxPods := flag.Int("max-pods", 110, "pods this node accepts")
	labels := flag.String("node-labels", "", "extra node labels k=v,k=v")
	gates := flag.String("feature-gates", "", "kubelet feature gates Name=true|false,...")
	flag.Parse()
	if err := run(*kubeconfig, *name, *rootDir, *port, *maxPods, *labels, *gates); err != nil {
		fmt.Fprintf(os.Stderr, "hollow-node: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, name, rootDir string, port, maxPods int, labels, gates string) error {
	if kubeconfig == "" || rootDir == "" || port == 0 {
		return fmt.Errorf("--kubeconfig, --root-dir and --kubelet-port are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.QPS, config.Burst = 10, 20 // kubemark's defaults
	config.UserAgent = "hollow-kubelet"
	client, err := clientset.NewForConfig(config)
	if err != nil {
		return err
	}

	nodeLabels := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			nodeLabels[k] = v
		}
	}
	f, c, err := hollowKubeletConfig(name, rootDir, port, maxPods, nodeLabels)
	if err != nil {
		return fmt.Errorf("kubelet configuration: %w", err)
	}
	if c.FeatureGates == nil {
		c.FeatureGates = map[string]bool{}
	}
	for _, kv := range strings.Split(gates, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			on, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("--feature-gates %s: %w", kv, err)
			}
			c.FeatureGates[k] = on
		}
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(c.FeatureGates); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	for _, d := range []string{c.StaticPodPath, c.PodLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}

	heartbeatConfig := *config
	heartbeatConfig.Timeout = c.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(c.NodeLeaseDurationSeconds) * time.Second; heartbeatConfig.Timeout > lease {
		heartbeatConfig.Timeout = lease
	}
	heartbeatConfig.QPS = float32(-1)
	heartbeatClient, err := clientset.NewForConfig(&heartbeatConfig)
	if err != nil {
		return err
	}

	endpoint := "unix://" + filepath.Join(rootDir, "runtime.sock")
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("fake runtime on %s: %w", endpoint, err)
	}
	defer fakeRuntime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(15 * time.Second).
		Build(ctx)
	if err != nil {
		return fmt.Errorf("runtime service: %w", err)
	}

	hollow := newHollowKubelet(
		f, c, client, heartbeatClient,
		&cadvisortest.Fake{NodeName: name},
		fakeRuntime.ImageService, // --use-host-image-service=false
		runtimeService,
		cm.NewStubContainerManager(),
	)
	klog.Infof("hollow-node %s: root %s, kubelet API 127.0.0.1:%d", name, rootDir, port)
	if err := hollow.run(ctx); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	<-ctx.Done()
	klog.Infof("hollow-node %s: stopping", name)
	return nil
}
