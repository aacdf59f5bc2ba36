// Command ceiling-signer is the benchmarks' throughput ceiling: a PodCertificateRequest
// "signer" with zero decision cost, written like the Go peer (client-go, an informer, a
// work queue) so that what it measures is the API server, not the client's language.
//
// It watches the PCRs of one namespace and, for every request without a condition, writes
// a status pre-signed by the benchmark before the clock started (looked up by the stub CSR
// and the kubernetes.io/service-names annotation, the key bench/ideal.py's status_key
// computes) from --workers goroutines. --content-type picks JSON or protobuf on the wire;
// --verb picks UpdateStatus (PUT, what client-go signers do) or a JSON merge patch of the
// status (what our signer sends). It prints "ready" on stdout once its informer synced.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	certsv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlistersv1 "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

const servicesAnnotation = "kubernetes.io/service-names"

type config struct {
	Kubeconfig string                                     `json:"kubeconfig"`
	Namespace  string                                     `json:"namespace"`
	Statuses   map[string]certsv1.PodCertificateRequestStatus `json:"statuses"`
}

func statusKey(pcr *certsv1.PodCertificateRequest) string {
	service, ok := pcr.Spec.UnverifiedUserAnnotations[servicesAnnotation]
	if !ok {
		service = "None"
	}
	return base64.StdEncoding.EncodeToString(pcr.Spec.StubPKCS10Request) + "|" + service
}

func main() {
	configPath := flag.String("config", "", "JSON file: kubeconfig, namespace, statuses")
	workers := flag.Int("workers", 16, "concurrent status writers")
	contentType := flag.String("content-type", "json", "json or protobuf")
	verb := flag.String("verb", "put", "put (UpdateStatus) or patch (JSON merge patch of /status)")
	flag.Parse()

	raw, err := os.ReadFile(*configPath)
	if err != nil {
		fail("config: %v", err)
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		fail("config: %v", err)
	}
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	rest.QPS, rest.Burst, rest.UserAgent = -1, 0, "ceiling-signer" // no client-side limit
	switch *contentType {
	case "json":
		rest.ContentType = "application/json"
	case "protobuf":
		rest.ContentType = "application/vnd.kubernetes.protobuf"
		rest.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	default:
		fail("--content-type must be json or protobuf")
	}
	kc, err := kubernetes.NewForConfig(rest)
	if err != nil {
		fail("client: %v", err)
	}
	patches := map[string][]byte{}
	for key, status := range cfg.Statuses {
		body, err := json.Marshal(map[string]any{"status": status})
		if err != nil {
			fail("status %s: %v", key, err)
		}
		patches[key] = body
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(kc, 24*time.Hour, informers.WithNamespace(cfg.Namespace))
	informer := factory.Certificates().V1().PodCertificateRequests()
	queue := workqueue.NewTyped[string]()
	enqueue := func(obj any) {
		pcr, ok := obj.(*certsv1.PodCertificateRequest)
		if ok && len(pcr.Status.Conditions) == 0 {
			queue.Add(pcr.Namespace + "/" + pcr.Name)
		}
	}
	informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue})
	lister := informer.Lister()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		fail("informer did not sync")
	}
	fmt.Println("ready")

	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				write(ctx, kc, lister, cfg.Namespace, key, cfg.Statuses, patches, *verb)
				queue.Done(key)
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

func write(ctx context.Context, kc kubernetes.Interface, lister certlistersv1.PodCertificateRequestLister, namespace, key string, statuses map[string]certsv1.PodCertificateRequestStatus, patches map[string][]byte, verb string) {
	_, name, _ := cache.SplitMetaNamespaceKey(key)
	pcr, err := lister.PodCertificateRequests(namespace).Get(name)
	if err != nil {
		return // deleted meanwhile
	}
	skey := statusKey(pcr)
	status, ok := statuses[skey]
	if !ok {
		fmt.Fprintf(os.Stderr, "ceiling-signer: no pre-signed status for %s\n", key)
		return
	}
	client := kc.CertificatesV1().PodCertificateRequests(namespace)
	if verb == "patch" {
		_, err = client.Patch(ctx, name, types.MergePatchType, patches[skey], metav1.PatchOptions{}, "status")
	} else {
		pcr = pcr.DeepCopy()
		pcr.Status = status
		_, err = client.UpdateStatus(ctx, pcr, metav1.UpdateOptions{})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ceiling-signer: %s %s: %v\n", verb, key, err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ceiling-signer: "+format+"\n", args...)
	os.Exit(1)
}
