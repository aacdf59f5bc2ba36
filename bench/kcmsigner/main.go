// Command kcm-signer is a PodCertificateRequest signer shaped like one of
// kube-controller-manager's own certificate signers (pkg/controller/certificates in
// Kubernetes 1.37): the shape KEP-6283's in-tree `kubernetes.io/service-serving` signer is
// expected to take, for the start-up bench to compare ours with (bench/startup.py).
//
// The shape, as kube-controller-manager builds a controller:
//   - a client of its own at kube-controller-manager's defaults: 20 QPS / 30 burst, protobuf
//     on the wire (--kube-api-qps, --kube-api-burst, --kube-api-content-type);
//   - a shared informer factory (resync 12 h) and its PodCertificateRequest informer,
//     filtered server-side to --signer-name as the hermetic signer does;
//   - a rate-limited work queue with the certificate controller's limiter (per-item
//     exponential 200 ms → 1000 s, max'ed with a 10 QPS / 100 burst bucket);
//   - --workers workers (5: kube-controller-manager runs each CSR signer with 5,
//     cmd/kube-controller-manager/app/certificates.go) writing the status with UpdateStatus
//     (PUT), as the CSR signers do.
//
// What it signs, simplified to what the bench needs: the request's public key (from its stub
// PKCS#10 request, as the hermetic signer reads it; the API server has checked possession) for the Pod's Service names
// from the `kubernetes.io/service-names` annotation (<svc>.<ns>.svc and
// <svc>.<ns>.svc.<cluster domain>), server auth, the lifetime the request asks up to 24 h,
// refresh at two thirds; the CA is read from --ca-cert / --ca-key (PEM; the key PKCS#8,
// SEC 1 or PKCS#1). It does not check that the Service exists or selects the Pod (ours
// does, from its informers). It prints "ready" on stdout once its informer synced.
package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/time/rate"
	certsv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlistersv1 "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const servicesAnnotation = "kubernetes.io/service-names"

type signer struct {
	name     string
	domain   string
	kc       kubernetes.Interface
	lister   certlistersv1.PodCertificateRequestLister
	queue    workqueue.TypedRateLimitingInterface[string]
	caCert   *x509.Certificate
	caKey    crypto.Signer
	chainPEM []byte // the CA certificates after the leaf (ca.crt: signing cert, then intermediates)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	signerName := flag.String("signer-name", "bench.example.com/kcm-shaped", "signer to serve")
	domain := flag.String("cluster-dns-domain", "cluster.local", "cluster DNS domain")
	caCertPath := flag.String("ca-cert", "", "PEM: the signing certificate, then intermediates")
	caKeyPath := flag.String("ca-key", "", "PEM: the signing key")
	qps := flag.Float64("kube-api-qps", 20, "client-side QPS (kube-controller-manager's default)")
	burst := flag.Int("kube-api-burst", 30, "client-side burst (kube-controller-manager's default)")
	contentType := flag.String("kube-api-content-type", "application/vnd.kubernetes.protobuf", "content type")
	workers := flag.Int("workers", 5, "concurrent syncs")
	klog.InitFlags(nil)
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = float32(*qps), *burst, "kcm-signer"
	cfg.ContentType = *contentType
	cfg.AcceptContentTypes = *contentType + ",application/json"
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("client: %v", err)
	}
	caCert, chainPEM, caKey, err := loadCA(*caCertPath, *caKeyPath)
	if err != nil {
		fail("CA: %v", err)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(kc, 12*time.Hour,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", *signerName).String()
		}))
	pcrs := factory.Certificates().V1().PodCertificateRequests()
	s := &signer{
		name:   *signerName,
		domain: *domain,
		kc:     kc,
		lister: pcrs.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter[string](
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 1000*time.Second),
				&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "podcertificaterequest"},
		),
		caCert:   caCert,
		caKey:    caKey,
		chainPEM: chainPEM,
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	if _, err := pcrs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		fail("handler: %v", err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	defer s.queue.ShutDown()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pcrs.Informer().HasSynced) {
		fail("informer did not sync")
	}
	for i := 0; i < *workers; i++ {
		go wait.UntilWithContext(ctx, s.worker, time.Second)
	}
	fmt.Println("ready")
	<-ctx.Done()
	factory.Shutdown()
}

func (s *signer) worker(ctx context.Context) {
	for s.next(ctx) {
	}
}

func (s *signer) next(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.sync(ctx, key); err != nil {
		utilruntime.HandleError(fmt.Errorf("sync %q: %w", key, err))
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

func (s *signer) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pcr, err := s.lister.PodCertificateRequests(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if pcr.Spec.SignerName != s.name || pcr.Status.CertificateChain != "" || len(pcr.Status.Conditions) > 0 {
		return nil
	}
	stub, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		return s.deny(ctx, pcr, "BadStubRequest", err.Error())
	}
	public := stub.PublicKey
	var dnsNames []string
	for _, svc := range strings.Split(pcr.Spec.UnverifiedUserAnnotations[servicesAnnotation], ",") {
		if svc = strings.TrimSpace(svc); svc == "" {
			continue
		}
		dnsNames = append(dnsNames, fmt.Sprintf("%s.%s.svc", svc, namespace))
		if s.domain != "" {
			dnsNames = append(dnsNames, fmt.Sprintf("%s.%s.svc.%s", svc, namespace, s.domain))
		}
	}
	if len(dnsNames) == 0 {
		return s.deny(ctx, pcr, "NoServiceNames", "the "+servicesAnnotation+" annotation names no Service")
	}
	lifetime := 24 * time.Hour
	if pcr.Spec.MaxExpirationSeconds != nil {
		if asked := time.Duration(*pcr.Spec.MaxExpirationSeconds) * time.Second; asked < lifetime {
			lifetime = asked
		}
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return err
	}
	// Whole seconds (the status's timestamps have no more), and no longer than asked: the
	// API server checks the status against the leaf and the request's maxExpirationSeconds.
	now := time.Now().Truncate(time.Second)
	notBefore := now.Add(-2 * time.Minute) // the API server allows 5 min of clock skew
	notAfter := notBefore.Add(lifetime)
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, s.caCert, public, s.caKey)
	if err != nil {
		return err
	}
	chain := &bytes.Buffer{}
	_ = pem.Encode(chain, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain.Write(s.chainPEM)
	pcr = pcr.DeepCopy()
	pcr.Status.Conditions = []metav1.Condition{{
		Type:               certsv1.PodCertificateRequestConditionTypeIssued,
		Status:             metav1.ConditionTrue,
		Reason:             "Issued",
		Message:            "issued by the kube-controller-manager-shaped bench signer",
		LastTransitionTime: metav1.NewTime(now),
	}}
	pcr.Status.CertificateChain = chain.String()
	pcr.Status.NotBefore = ptr.To(metav1.NewTime(notBefore))
	pcr.Status.BeginRefreshAt = ptr.To(metav1.NewTime(notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)))
	pcr.Status.NotAfter = ptr.To(metav1.NewTime(notAfter))
	_, err = s.kc.CertificatesV1().PodCertificateRequests(namespace).UpdateStatus(ctx, pcr, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version is on its way through the informer, or it is gone
	}
	return err
}

func (s *signer) deny(ctx context.Context, pcr *certsv1.PodCertificateRequest, reason, message string) error {
	pcr = pcr.DeepCopy()
	pcr.Status.Conditions = []metav1.Condition{{
		Type:               certsv1.PodCertificateRequestConditionTypeDenied,
		Status:             metav1.ConditionTrue,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: metav1.NewTime(time.Now()),
	}}
	_, err := s.kc.CertificatesV1().PodCertificateRequests(pcr.Namespace).UpdateStatus(ctx, pcr, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func loadCA(certPath, keyPath string) (*x509.Certificate, []byte, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, nil, err
	}
	block, rest := pem.Decode(certPEM)
	if block == nil {
		return nil, nil, nil, errors.New("no certificate in " + certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, nil, errors.New("no key in " + keyPath)
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			if key, err = x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
				return nil, nil, nil, fmt.Errorf("unreadable key in %s", keyPath)
			}
		}
	}
	signerKey, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, nil, errors.New("the CA key cannot sign")
	}
	return cert, bytes.TrimLeft(rest, "\n"), signerKey, nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kcm-signer: "+format+"\n", args...)
	os.Exit(1)
}
