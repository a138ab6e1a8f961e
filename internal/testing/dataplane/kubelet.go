package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// streamCreationTimeout bounds how long an exec waits for the client's
// streams; idleTimeout ends an exec session nobody uses.
const (
	streamCreationTimeout = 30 * time.Second
	idleTimeout           = 4 * time.Hour
	// maxLogBytes bounds what one logs request returns.
	maxLogBytes = 10 << 20
)

// Serve runs the node's kubelet API on ln until ctx ends: exec (SPDY and
// WebSocket, what kube-apiserver forwards `pods/exec` to) and container
// logs. tlsConfig is the cluster's (kubetest.Cluster.KubeletTLS): only the
// API server's client certificate is let in.
func (r *Runtime) Serve(ctx context.Context, ln net.Listener, tlsConfig *tls.Config) error {
	mux := http.NewServeMux()
	exec := func(w http.ResponseWriter, req *http.Request) {
		opts, err := remotecommand.NewOptions(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := req.PathValue("namespace") + "/" + req.PathValue("pod")
		container := req.PathValue("container")
		if _, _, err := r.lookup(key, container); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		r.cfg.Log.Debug("exec", "pod", key, "container", container, "command", req.URL.Query()["command"], "tty", opts.TTY)
		remotecommand.ServeExec(w, req, r, key, "", container, req.URL.Query()["command"], opts,
			idleTimeout, streamCreationTimeout, remotecommandconsts.SupportedStreamingProtocols)
	}
	for _, pattern := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc(pattern, exec)
	}
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", r.serveLogs)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Handler: mux, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	err := srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// serveLogs answers `kubectl logs`: the container's output so far, the
// last tailLines lines when asked (no follow).
func (r *Runtime) serveLogs(w http.ResponseWriter, req *http.Request) {
	key := req.PathValue("namespace") + "/" + req.PathValue("pod")
	var path string
	r.mu.Lock()
	for _, sb := range r.pods {
		if sb.key == key {
			for _, c := range sb.containers {
				if c.name == req.PathValue("container") {
					path = c.logPath
				}
			}
		}
	}
	r.mu.Unlock()
	if path == "" {
		http.Error(w, fmt.Sprintf("pod %s has no container %s on this node", key, req.PathValue("container")), http.StatusNotFound)
		return
	}
	data, err := readTail(path, maxLogBytes)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if n, err := strconv.Atoi(req.URL.Query().Get("tailLines")); err == nil && n >= 0 {
		lines := bytes.SplitAfter(data, []byte("\n"))
		if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		if len(lines) > n {
			data = bytes.Join(lines[len(lines)-n:], nil)
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(data)
}

// readTail reads at most the last limit bytes of path.
func readTail(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(info.Size()-limit, 0)
	buf := make([]byte, info.Size()-off)
	_, err = f.ReadAt(buf, off)
	return buf, err
}
