// Command peer-signer runs the Kubernetes project's own PodCertificateRequest test signer
// (k8s.io/kubernetes/test/utils/hermeticpodcertificatesigner) against a kubeconfig, so the
// benchmarks can compare our signer with it on the same API server in the same run.
//
// Its profile (not ours): an Ed25519 root + one intermediate generated at start, a leaf
// with a SPIFFE URI and server.<ns>.svc DNS names, one worker, no Pod/Service checks.
// It publishes the root as ClusterTrustBundle "<signer with / as :>:primary-bundle".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/utils/hermeticpodcertificatesigner"
	"k8s.io/utils/clock"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	signerName := flag.String("signer-name", "bench.example.com/go-peer", "signer to serve")
	domain := flag.String("cluster-dns-domain", "cluster.local", "cluster DNS domain")
	qps := flag.Float64("kube-api-qps", 1000, "client-side QPS")
	burst := flag.Int("kube-api-burst", 2000, "client-side burst")
	klog.InitFlags(nil)
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "peer-signer: kubeconfig: %v\n", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = float32(*qps), *burst, "peer-signer"
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "peer-signer: client: %v\n", err)
		os.Exit(1)
	}
	caKeys, caCerts, err := hermeticpodcertificatesigner.GenerateCAHierarchy(1)
	if err != nil {
		fmt.Fprintf(os.Stderr, "peer-signer: CA: %v\n", err)
		os.Exit(1)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	hermeticpodcertificatesigner.New(clock.RealClock{}, *signerName, *domain, caKeys, caCerts, kc).Run(ctx)
}
