package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// DefaultServiceClusterIPRange is the Service IP range of every test cluster
// unless one is set; clusters sharing an etcd may use the same range because
// each keeps its objects under its own prefix.
const DefaultServiceClusterIPRange = "10.96.0.0/16"

// disabledAdmissionPlugins are the default-on plugins that need controllers
// a bare API server does not run (ServiceAccount would reject every Pod
// without a "default" service account, which only the controller manager
// creates) or that only concern nodes, storage and quota. What stays on is
// NamespaceLifecycle and the webhook and policy plugins, so behaviour that
// comes from the API machinery itself matches a real cluster.
var disabledAdmissionPlugins = []string{
	"CertificateApproval",
	"CertificateSigning",
	"CertificateSubjectRestriction",
	"ClusterTrustBundleAttest",
	"DefaultIngressClass",
	"DefaultStorageClass",
	"DefaultTolerationSeconds",
	"JobValidation",
	"LimitRanger",
	"NodeDeclaredFeatureValidator",
	"PersistentVolumeClaimResize",
	"PodGroupProtection",
	"PodGroupWorkloadExists",
	"PodResizeValidator",
	"PodSecurity",
	"PodTopologyLabels",
	"Priority",
	"ResourceQuota",
	"RuntimeClass",
	"ServiceAccount",
	"StorageObjectInUseProtection",
	"TaintNodesByCondition",
}

// APIServerConfig configures LaunchAPIServer.
type APIServerConfig struct {
	// Binaries locates the kube-apiserver executable.
	Binaries Binaries
	// Dir receives the certificates, the kubeconfig and apiserver.log; it
	// must exist.
	Dir string
	// Name names the cluster, its kubeconfig context and its admin user.
	Name string
	// EtcdEndpoints are the etcd client URLs.
	EtcdEndpoints []string
	// EtcdPrefix is the key prefix of this cluster's objects. Empty picks a
	// new random one, so API servers sharing an etcd never share objects.
	EtcdPrefix string
	// ServiceClusterIPRange is the Service IP range;
	// DefaultServiceClusterIPRange when empty.
	ServiceClusterIPRange string
	// ExtraArgs are appended to the command line; a later flag overrides an
	// earlier one.
	ExtraArgs []string
	// StartTimeout bounds start-up; DefaultStartTimeout when zero.
	StartTimeout time.Duration
}

// Cluster is a running kube-apiserver with admin access.
type Cluster struct {
	// Name is the cluster's name (the kubeconfig context).
	Name string
	// Config is an admin (system:masters) client configuration without
	// client-side rate limits.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the same
	// credentials, for tools and child processes.
	Kubeconfig string
	// Clientset is a client built from Config.
	Clientset kubernetes.Interface
	// EtcdPrefix is the etcd key prefix of the cluster's objects.
	EtcdPrefix string

	ca   *authority
	proc *process
}

// KubeletTLS is the TLS configuration of a kubelet API this API server
// calls: a serving certificate of the cluster's CA for the loopback
// address, and only client certificates of that CA (the API server's)
// accepted.
func (c *Cluster) KubeletTLS() (*tls.Config, error) {
	if c.ca == nil {
		return nil, fmt.Errorf("cluster %s: no CA to issue a kubelet certificate", c.Name)
	}
	certPEM, keyPEM, err := c.ca.issue("localkube-kubelet-"+c.Name, nil, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.ca.CertPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// LogPath is the file that holds the API server's output.
func (c *Cluster) LogPath() string { return c.proc.logPath }

// Exited is closed when the API server process has exited, for whatever
// reason.
func (c *Cluster) Exited() <-chan struct{} { return c.proc.done }

// Pid is the API server process's id, for benchmarks that read its CPU
// time.
func (c *Cluster) Pid() int { return c.proc.cmd.Process.Pid }

// Stop terminates the API server (SIGTERM, then SIGKILL after
// DefaultStopGrace) and returns once it is gone. Stopping twice is harmless.
func (c *Cluster) Stop() error { return c.proc.stop(DefaultStopGrace) }

// UserConfig returns a client configuration that authenticates as user in
// groups with a client certificate, for tests of RBAC rules. Unlike Config it
// has only the permissions RBAC grants that user.
func (c *Cluster) UserConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := c.ca.issue(user, groups, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("issue client certificate for %s: %w", user, err)
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.CertData = certPEM
	cfg.KeyData = keyPEM
	return cfg, nil
}

// LaunchAPIServer writes fresh credentials into cfg.Dir, starts
// kube-apiserver on a free loopback port and waits until /readyz is ok and
// the default namespace exists. The caller owns the process and must call
// Stop.
func LaunchAPIServer(ctx context.Context, cfg APIServerConfig) (*Cluster, error) {
	if cfg.Name == "" {
		return nil, errors.New("launch kube-apiserver: no cluster name")
	}
	if len(cfg.EtcdEndpoints) == 0 {
		return nil, fmt.Errorf("launch kube-apiserver %s: no etcd endpoints", cfg.Name)
	}
	if cfg.ServiceClusterIPRange == "" {
		cfg.ServiceClusterIPRange = DefaultServiceClusterIPRange
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.EtcdPrefix == "" {
		suffix := make([]byte, 4)
		if _, err := rand.Read(suffix); err != nil {
			return nil, fmt.Errorf("launch kube-apiserver %s: %w", cfg.Name, err)
		}
		cfg.EtcdPrefix = "/plexus-kubetest/" + cfg.Name + "-" + hex.EncodeToString(suffix)
	}
	pki, err := writeAPIServerPKI(filepath.Join(cfg.Dir, "pki"), cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("launch kube-apiserver %s: %w", cfg.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	for range startAttempts {
		var c *Cluster
		c, err = launchAPIServerOnce(ctx, cfg, pki)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errAddressInUse) {
			break
		}
	}
	return nil, fmt.Errorf("launch kube-apiserver %s: %w", cfg.Name, err)
}

func launchAPIServerOnce(ctx context.Context, cfg APIServerConfig, pki *apiServerPKI) (*Cluster, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ports[0])
	args := []string{
		"--etcd-servers=" + strings.Join(cfg.EtcdEndpoints, ","),
		"--etcd-prefix=" + cfg.EtcdPrefix,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caFile,
		// A node's kubelet API (the data plane's, for exec and logs)
		// serves a certificate of the cluster's CA and asks for this one.
		"--kubelet-certificate-authority=" + pki.caFile,
		"--kubelet-client-certificate=" + pki.kubeletClientCert,
		"--kubelet-client-key=" + pki.kubeletClientKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.serviceAccountPub,
		"--service-account-signing-key-file=" + pki.serviceAccountKey,
		"--service-cluster-ip-range=" + cfg.ServiceClusterIPRange,
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=" + strings.Join(disabledAdmissionPlugins, ","),
		// Priority and fairness writes its bootstrap configuration and
		// runs controllers at start-up; a test cluster has one client.
		"--enable-priority-and-fairness=false",
		// One API server per cluster: no endpoint leases to maintain.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	args = append(args, cfg.ExtraArgs...)
	proc, err := startProcess("kube-apiserver "+cfg.Name, cfg.Binaries.APIServer(), args,
		filepath.Join(cfg.Dir, "apiserver.log"))
	if err != nil {
		return nil, err
	}
	c, err := connect(ctx, cfg, pki, "https://127.0.0.1:"+port, proc)
	if err != nil {
		_ = proc.stop(DefaultStopGrace)
		return nil, err
	}
	return c, nil
}

func connect(ctx context.Context, cfg APIServerConfig, pki *apiServerPKI, host string, proc *process) (*Cluster, error) {
	restCfg := &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pki.ca.CertPEM,
			CertData: pki.adminCert,
			KeyData:  pki.adminKey,
		},
		// A negative QPS turns client-side rate limiting off: tests create
		// objects in bursts and the default 5 QPS would dominate run time.
		QPS:       -1,
		UserAgent: "plexus-kubetest",
	}
	httpClient, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		return nil, fmt.Errorf("build HTTP client: %w", err)
	}
	httpClient.Timeout = 5 * time.Second
	clientset, err := kubernetes.NewForConfigAndClient(restCfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build clientset: %w", err)
	}
	ready := func(ctx context.Context) error {
		if err := readyz(ctx, httpClient, host); err != nil {
			return err
		}
		// NamespaceLifecycle rejects objects in "default" until the
		// bootstrap controller has created it, slightly after /readyz.
		_, err := clientset.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err
	}
	if err := proc.waitReady(ctx, ready); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(cfg.Dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, cfg.Name, restCfg); err != nil {
		return nil, err
	}
	// The clientset handed out gets its own HTTP client without the
	// probe timeout, which would cut watches short.
	clientset, err = kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("build clientset: %w", err)
	}
	return &Cluster{
		Name:       cfg.Name,
		Config:     restCfg,
		Kubeconfig: kubeconfig,
		Clientset:  clientset,
		EtcdPrefix: cfg.EtcdPrefix,
		ca:         pki.ca,
		proc:       proc,
	}, nil
}

func readyz(ctx context.Context, client *http.Client, host string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func writeKubeconfig(path, name string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	// WriteToFile leaves the mode to the umask; the file holds a key.
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("restrict kubeconfig %s: %w", path, err)
	}
	return nil
}

// Option adjusts how StartAPIServer starts a cluster.
type Option func(*APIServerConfig)

// WithName names the cluster; tests get "cluster-N" otherwise.
func WithName(name string) Option { return func(c *APIServerConfig) { c.Name = name } }

// WithServiceClusterIPRange sets the Service IP range.
func WithServiceClusterIPRange(cidr string) Option {
	return func(c *APIServerConfig) { c.ServiceClusterIPRange = cidr }
}

// WithEtcdPrefix sets the etcd key prefix, for example to start a second API
// server over the same objects.
func WithEtcdPrefix(prefix string) Option { return func(c *APIServerConfig) { c.EtcdPrefix = prefix } }

var clusterSeq atomic.Int64

// StartAPIServer starts a kube-apiserver for the test against etcd and
// stops it when the test ends. Each call gets its own etcd prefix, so
// several API servers on one etcd are separate clusters.
func StartAPIServer(t testing.TB, etcd *Etcd, opts ...Option) *Cluster {
	t.Helper()
	cfg := APIServerConfig{
		Binaries:      RequireBinaries(t),
		Dir:           t.TempDir(),
		Name:          "cluster-" + strconv.FormatInt(clusterSeq.Add(1), 10),
		EtcdEndpoints: etcd.Endpoints(),
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	c, err := LaunchAPIServer(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop kube-apiserver %s: %v", c.Name, err)
		}
	})
	return c
}

// productionStopGrace is how long a kube-apiserver started with a
// production command line gets to exit after SIGTERM.
const productionStopGrace = 30 * time.Second

// RunAPIServerArgs runs kube-apiserver with exactly args, every flag given
// by the caller (a test of a command line written elsewhere, such as
// docker-compose's), until the test ends. It does not wait for the server:
// the caller checks what it needs. When the test fails, the end of the
// server's log is reported.
func RunAPIServerArgs(t testing.TB, args []string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "apiserver.log")
	p, err := startProcess("kube-apiserver", RequireBinaries(t).APIServer(), args, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("end of %s:\n%s", logPath, p.logTail(30))
		}
		// args are a production command line (compose's), with priority
		// and fairness and the admission plugins that StartAPIServer turns
		// off: its graceful shutdown can outlast DefaultStopGrace on a
		// busy machine, so it gets a longer grace; a hang still fails.
		if err := p.stop(productionStopGrace); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
}
