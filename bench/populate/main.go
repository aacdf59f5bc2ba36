// Command bench-populate builds the scale scenario's cluster: namespaces, headless
// Services and bound Pods (spec.nodeName set, so no scheduler or kubelet is needed), with
// client-go, protobuf and many concurrent creators, because a Python creator pool is the
// bottleneck at 150,000 Pods.
//
// Layout (deterministic, so the benchmark can name objects without listing them):
// namespace <prefix>-<i> for i < --namespaces; in each, Services app-<k> for
// k < services-per-namespace selecting app=app-<k>, and Pods app-<k>-<hash(k)>-<j> for
// j < pods-per-namespace with k = j mod services-per-namespace, labelled like a
// Deployment's ReplicaSet (app, pod-template-hash), owned by that ReplicaSet, on node
// node-<n>, ServiceAccount sa-<k>. Objects that already exist count as created, so a
// second run completes a partial cluster. Prints one JSON line with the counts.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func templateHash(k int) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "app-%d", k)
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	v, out := h.Sum32(), make([]byte, 10)
	for i := range out {
		out[i] = alphabet[v%uint32(len(alphabet))]
		v = v/uint32(len(alphabet)) + uint32(i*7919)
	}
	return string(out)
}

func pod(namespace string, j, services, nodes int) *corev1.Pod {
	k := j % services
	app, hash := fmt.Sprintf("app-%d", k), templateHash(k)
	rs := app + "-" + hash
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%05d", rs, j),
			Namespace: namespace,
			Labels:    map[string]string{"app": app, "pod-template-hash": hash},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs,
				UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", k)), Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:                     fmt.Sprintf("node-%05d", (j*7+k)%nodes),
			ServiceAccountName:           fmt.Sprintf("sa-%d", k),
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.k8s.io/pause:3.10",
				Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443, Protocol: corev1.ProtocolTCP}},
				Env:   []corev1.EnvVar{{Name: "APP", Value: app}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
		},
	}
}

func service(namespace string, k int) *corev1.Service {
	app := fmt.Sprintf("app-%d", k)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": app},
			Ports:     []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}},
		},
	}
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	prefix := flag.String("prefix", "scale", "namespace prefix")
	namespaces := flag.Int("namespaces", 100, "namespaces")
	pods := flag.Int("pods-per-namespace", 1500, "Pods per namespace")
	services := flag.Int("services-per-namespace", 100, "Services per namespace")
	nodes := flag.Int("nodes", 5000, "distinct node names")
	workers := flag.Int("workers", 32, "concurrent creators")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-populate: %v\n", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = -1, 0, "bench-populate"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	kc := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	start := time.Now()

	var created, existed, failed atomic.Int64
	create := func(fn func() error) {
		for attempt := 0; ; attempt++ {
			err := fn()
			switch {
			case err == nil:
				created.Add(1)
				return
			case apierrors.IsAlreadyExists(err):
				existed.Add(1)
				return
			case attempt < 8:
				time.Sleep(time.Duration(100<<attempt) * time.Millisecond)
			default:
				failed.Add(1)
				fmt.Fprintf(os.Stderr, "bench-populate: %v\n", err)
				return
			}
		}
	}
	jobs := make(chan func() error, *workers*4)
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range jobs {
				create(job)
			}
		}()
	}
	opts := metav1.CreateOptions{}
	for i := range *namespaces {
		ns := fmt.Sprintf("%s-%03d", *prefix, i)
		create(func() error {
			_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, opts)
			return err
		})
		for k := range *services {
			jobs <- func() error { _, err := kc.CoreV1().Services(ns).Create(ctx, service(ns, k), opts); return err }
		}
	}
	for j := range *pods { // interleave namespaces, as a roll-out across a cluster would
		for i := range *namespaces {
			ns := fmt.Sprintf("%s-%03d", *prefix, i)
			jobs <- func() error { _, err := kc.CoreV1().Pods(ns).Create(ctx, pod(ns, j, *services, *nodes), opts); return err }
		}
	}
	close(jobs)
	wg.Wait()
	out, _ := json.Marshal(map[string]any{
		"created": created.Load(), "existed": existed.Load(), "failed": failed.Load(),
		"seconds": time.Since(start).Seconds(),
	})
	fmt.Println(string(out))
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
