package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// Two one-shot modes for a kube-apiserver that localkube does not run
// (docker-compose runs the official image):
//
//	localkube pki --dir DIR --name NAME --server https://HOST:PORT
//	    writes the CA, the serving certificate, the service account keys
//	    and an admin kubeconfig into DIR, and exits;
//	localkube crds --kubeconfig FILE [--timeout 3m]
//	    waits until that API server answers, installs the Plexus CRDs,
//	    waits until they are served, and exits.

func runPKI(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("localkube pki", flag.ContinueOnError)
	dir := fs.String("dir", "", "folder to write the files into (required)")
	name := fs.String("name", "plexus", "cluster name, in the kubeconfig and the CA's subject")
	server := fs.String("server", "https://127.0.0.1:6443", "URL the API server is reached at (it serves 127.0.0.1, localhost and kubernetes.default.svc)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	if !clusterName.MatchString(*name) {
		return fmt.Errorf("--name %q is not a DNS label", *name)
	}
	if u, err := url.Parse(*server); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("--server %q: want https://HOST:PORT", *server)
	}
	if err := kubetest.WritePKI(*dir, *name, *server); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "wrote ca.crt apiserver.crt apiserver.key sa.key sa.pub kubeconfig into %s\n", *dir)
	return err
}

func runCRDs(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("localkube crds", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server (required)")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for the API server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", *kubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	for {
		_, err := dc.ServerVersion()
		if err == nil {
			break
		}
		log.Info("waiting for the API server", "server", cfg.Host, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("API server %s not reachable: %w", cfg.Host, err)
		case <-time.After(time.Second):
		}
	}
	if err := kubetest.ApplyCRDs(ctx, cfg); err != nil {
		return err
	}
	log.Info("CRDs installed and served", "server", cfg.Host)
	return nil
}
