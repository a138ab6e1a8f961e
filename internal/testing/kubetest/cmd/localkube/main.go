// Command localkube runs a throwaway Kubernetes control plane for the demo
// and end-to-end tests: one etcd and one kube-apiserver per named cluster,
// all on the loopback interface, with the Plexus CRDs installed.
//
//	localkube --clusters a,b --dir ./run
//
// Once everything is ready it prints shell assignments (ETCD_ENDPOINT,
// KUBECONFIG_A, KUBECONFIG_B, ...) on stdout and writes the same lines to
// <dir>/env, then runs until SIGINT or SIGTERM and stops everything it
// started. A script can wait for <dir>/env to appear and source it.
//
// For an API server it does not run (docker-compose's), `localkube pki`
// writes the certificates, keys and kubeconfig, and `localkube crds`
// installs the CRDs once the server answers (see external.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/plexusnet/plexus/internal/atomicfile"
	"github.com/plexusnet/plexus/internal/testing/dataplane"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if version.Asked(os.Args[1:]) {
		fmt.Println(version.Line("localkube"))
		return
	}
	if err := run(ctx, os.Args[1:], os.Stdout, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // the usage is printed; asking for it is no failure
		}
		log.Error("localkube failed", "error", err)
		os.Exit(1)
	}
}

const usage = `usage: localkube [flags]       run etcd and one kube-apiserver per cluster until interrupted
       localkube pki [flags]   write an API server's certificates and kubeconfig, and exit
       localkube crds [flags]  install the CRDs into a running API server, and exit

flags of localkube:`

// maxClusters keeps every cluster's Service range inside 10.96.0.0/11.
const maxClusters = 32

var clusterName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

type options struct {
	clusters []string
	dir      string
	kubeBin  string
	crds     bool
	runPods  bool
	// controllers runs kube-controller-manager in each cluster.
	controllers bool
	// dataPlane runs Pods as processes in network namespaces, with
	// kube-proxy and CoreDNS in each cluster.
	dataPlane bool
}

func parseFlags(args []string) (options, error) { return parseFlagsTo(os.Stderr, args) }

// parseFlagsTo parses args, writing usage and errors to out.
func parseFlagsTo(out io.Writer, args []string) (options, error) {
	fs := flag.NewFlagSet("localkube", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	clusters := fs.String("clusters", "a", "comma-separated cluster names; each gets its own kube-apiserver on the shared etcd")
	dir := fs.String("dir", "", "folder for kubeconfigs, certificates, data and logs (default: a temporary folder, removed on exit)")
	kubeBin := fs.String("kube-bin", "", "folder holding etcd and kube-apiserver (default: $"+kubetest.EnvKubeBin+" or the build cache)")
	crds := fs.Bool("crds", true, "install the ServiceExport, ServiceImport and ExternalWorkload CRDs")
	controllers := fs.Bool("controllers", false, "run kube-controller-manager in each cluster ("+strings.Join(kubetest.Controllers, ", ")+"); needs the binary (make kube-binaries)")
	runPods := fs.Bool("run-pods", false, "stand in for the scheduler and kubelets: bind every Pod to a node of its cluster and report it Running and Ready with an address of the cluster's pod range (10.128+N.0.0/16, the N-th cluster); nothing runs in it")
	dataPlane := fs.Bool("data-plane", false, "give the clusters a data plane of real parts (needs root): every Pod's command runs as a process in a network namespace of its own (CNI ptp), with exec and logs through kube-apiserver, and each cluster gets a node namespace with kube-proxy (nftables) and CoreDNS behind kube-dns; implies -run-pods and -controllers. Where it cannot run, localkube says why in one line and runs Pods without it")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := options{dir: *dir, kubeBin: *kubeBin, crds: *crds, runPods: *runPods || *dataPlane, controllers: *controllers || *dataPlane, dataPlane: *dataPlane}
	seen := map[string]bool{}
	for _, name := range strings.Split(*clusters, ",") {
		name = strings.TrimSpace(name)
		if !clusterName.MatchString(name) || len(name) > 63 {
			return options{}, fmt.Errorf("cluster name %q is not a DNS label", name)
		}
		if seen[name] {
			return options{}, fmt.Errorf("cluster %q named twice", name)
		}
		seen[name] = true
		o.clusters = append(o.clusters, name)
	}
	if len(o.clusters) > maxClusters {
		return options{}, fmt.Errorf("at most %d clusters", maxClusters)
	}
	return o, nil
}

// run starts the control plane, reports it on stdout and keeps it up until
// ctx ends or a component dies; either way it stops everything it started.
func run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) (err error) {
	if len(args) > 0 {
		switch args[0] {
		case "pki":
			return runPKI(args[1:], stdout)
		case "crds":
			return runCRDs(ctx, args[1:], log)
		}
	}
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	bins, err := binaries(o.kubeBin)
	if err != nil {
		return err
	}
	dir, removeDir, err := workDir(o.dir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, removeDir()) }()
	envPath := filepath.Join(dir, "env")
	// A stale env file would tell a waiting script that this run is ready.
	if err := os.Remove(envPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", envPath, err)
	}

	start := time.Now()
	etcd, err := startEtcd(ctx, bins, dir)
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := etcd.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()
	log.Info("etcd ready", "endpoint", etcd.Endpoint(), "elapsed", time.Since(start).Round(time.Millisecond))

	clusters, launchErr := launchClusters(ctx, bins, dir, etcd, o)
	defer func() {
		for _, c := range clusters {
			if stopErr := c.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()
	if launchErr != nil {
		return launchErr
	}
	log.Info("control plane ready", "clusters", len(clusters), "elapsed", time.Since(start).Round(time.Millisecond))
	procs, stopAround, err := startAround(ctx, &o, bins, dir, clusters, stdout, log, start)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopAround()) }()

	env := envLines(dir, etcd, clusters, o.dataPlane)
	if err := atomicfile.Write(envPath, []byte(env), 0o600); err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, env); err != nil {
		return fmt.Errorf("write to stdout: %w", err)
	}
	return waitForEnd(ctx, etcd, clusters, procs, log)
}

// workDir returns the absolute path of the work folder: dir, or a
// temporary folder that remove deletes.
func workDir(dir string) (abs string, remove func() error, err error) {
	remove = func() error { return nil }
	if dir == "" {
		if dir, err = os.MkdirTemp("", "localkube-"); err != nil {
			return "", nil, fmt.Errorf("create work folder: %w", err)
		}
		tmp := dir
		remove = func() error {
			if err := os.RemoveAll(tmp); err != nil {
				return fmt.Errorf("remove work folder: %w", err)
			}
			return nil
		}
	}
	if abs, err = filepath.Abs(dir); err != nil {
		return "", nil, errors.Join(fmt.Errorf("resolve work folder: %w", err), remove())
	}
	return abs, remove, nil
}

// startEtcd starts the etcd every cluster stores its objects in. The
// allocator replicas of the demo share it: the limits docs/deploy.md
// gives, so a BatchAllocate takes up to the API's 10,000 addresses.
func startEtcd(ctx context.Context, bins kubetest.Binaries, dir string) (*kubetest.Etcd, error) {
	etcdDir, err := freshDir(dir, "etcd")
	if err != nil {
		return nil, err
	}
	return kubetest.LaunchEtcd(ctx, kubetest.EtcdConfig{Binaries: bins, Dir: etcdDir, Args: []string{"--max-txn-ops=32768", "--max-request-bytes=10485760"}})
}

// startAround starts what runs around the control plane, as o asks: the
// data plane (o.dataPlane is turned off when this machine cannot run
// one) or the pod runner, and the controller managers. It returns the data
// plane's processes and a stop that stops what it started, last first;
// when starting fails, what was started is stopped before the error is
// returned.
func startAround(ctx context.Context, o *options, bins kubetest.Binaries, dir string, clusters []*kubetest.Cluster, stdout io.Writer, log *slog.Logger, start time.Time) (procs []*kubetest.Process, stop func() error, err error) {
	var stops []func() error
	stopAll := func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, stopAll())
		}
	}()
	var coredns string
	if o.dataPlane {
		if coredns, err = dataplane.Ready(bins); err != nil {
			// One line, on stdout too: scripts and people both see it.
			fmt.Fprintf(stdout, "# localkube: %v; Pods are reported Running but nothing runs in them\n", err)
			log.Warn("no data plane", "reason", err)
			o.dataPlane, err = false, nil
		}
	}
	if o.runPods && !o.dataPlane {
		runPods(ctx, clusters, log)
	}
	if o.controllers {
		for _, c := range clusters {
			m, err := kubetest.LaunchControllerManager(bins, c, filepath.Join(dir, c.Name))
			if err != nil {
				return nil, nil, err
			}
			stops = append(stops, m.Stop)
		}
		log.Info("controllers running", "controllers", kubetest.Controllers)
	}
	if o.dataPlane {
		p, err := startDataPlane(ctx, bins, coredns, dir, clusters, log)
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, p.Stop)
		procs = p.Processes()
		log.Info("data plane ready", "elapsed", time.Since(start).Round(time.Millisecond))
	}
	return procs, stopAll, nil
}

func binaries(dir string) (kubetest.Binaries, error) {
	if dir != "" {
		return kubetest.BinariesIn(dir)
	}
	return kubetest.FindBinaries()
}

// freshDir empties dir/name: clusters start from nothing on every run.
func freshDir(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	if err := os.RemoveAll(path); err != nil {
		return "", fmt.Errorf("clear %s: %w", path, err)
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", path, err)
	}
	return path, nil
}

// launchClusters starts the API servers side by side and installs the CRDs.
// It returns every cluster that started, even on error, so the caller can
// stop them.
func launchClusters(ctx context.Context, bins kubetest.Binaries, dir string, etcd *kubetest.Etcd, o options) ([]*kubetest.Cluster, error) {
	results := make([]*kubetest.Cluster, len(o.clusters))
	errs := make([]error, len(o.clusters))
	var wg sync.WaitGroup
	for i, name := range o.clusters {
		wg.Go(func() {
			clusterDir, err := freshDir(dir, name)
			if err != nil {
				errs[i] = err
				return
			}
			c, err := kubetest.LaunchAPIServer(ctx, kubetest.APIServerConfig{
				Binaries:      bins,
				Dir:           clusterDir,
				Name:          name,
				EtcdEndpoints: etcd.Endpoints(),
				// Separate ranges, as separate real clusters would have.
				ServiceClusterIPRange: serviceCIDR(i),
			})
			if err != nil {
				errs[i] = err
				return
			}
			results[i] = c
			if o.crds {
				crdCtx, cancel := context.WithTimeout(ctx, kubetest.DefaultStartTimeout)
				defer cancel()
				if err := kubetest.ApplyCRDs(crdCtx, c.Config); err != nil {
					errs[i] = fmt.Errorf("install CRDs in cluster %s: %w", name, err)
				}
			}
		})
	}
	wg.Wait()
	var started []*kubetest.Cluster
	for _, c := range results {
		if c != nil {
			started = append(started, c)
		}
	}
	return started, errors.Join(errs...)
}

// runPods starts a pod runner per cluster, each with a pod range of its
// own, until ctx ends.
func runPods(ctx context.Context, clusters []*kubetest.Cluster, log *slog.Logger) {
	for i, c := range clusters {
		r := kubetest.NewPodRunner(c.Clientset, nodeName(c.Name), podCIDR(i), log.With("cluster", c.Name))
		go func() {
			if err := r.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("pod runner stopped", "cluster", c.Name, "error", err)
			}
		}()
	}
}

func envLines(dir string, etcd *kubetest.Etcd, clusters []*kubetest.Cluster, dataPlane bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "LOCALKUBE_DIR=%s\n", shellQuote(dir))
	if dataPlane {
		// Scripts test it to know whether Pods are real endpoints.
		fmt.Fprintf(&b, "LOCALKUBE_DATA_PLANE=1\n")
	}
	fmt.Fprintf(&b, "ETCD_ENDPOINT=%s\n", shellQuote(etcd.Endpoint()))
	for _, c := range clusters {
		fmt.Fprintf(&b, "KUBECONFIG_%s=%s\n", envName(c.Name), shellQuote(c.Kubeconfig))
	}
	return b.String()
}

// envName turns a cluster name into the tail of a variable name: "east-1"
// becomes "EAST_1".
func envName(cluster string) string {
	return strings.ToUpper(strings.ReplaceAll(cluster, "-", "_"))
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// waitForEnd blocks until ctx ends (a clean stop) or a component exits on
// its own (an error: the control plane is no longer whole).
func waitForEnd(ctx context.Context, etcd *kubetest.Etcd, clusters []*kubetest.Cluster, procs []*kubetest.Process, log *slog.Logger) error {
	died := make(chan string, len(clusters)+len(procs)+1)
	watch := func(name string, exited <-chan struct{}) {
		select {
		case <-exited:
			died <- name
		case <-ctx.Done():
		}
	}
	go watch("etcd ("+etcd.LogPath()+")", etcd.Exited())
	for _, c := range clusters {
		go watch("kube-apiserver "+c.Name+" ("+c.LogPath()+")", c.Exited())
	}
	for _, p := range procs {
		go watch(p.LogPath(), p.Exited())
	}
	select {
	case <-ctx.Done():
		log.Info("stopping")
		return nil
	case name := <-died:
		return fmt.Errorf("%s exited unexpectedly", name)
	}
}
