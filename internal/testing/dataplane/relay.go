package dataplane

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Relay makes a TCP address of the host's loopback (a kube-apiserver)
// answer at the same address inside the node's namespace, so kube-proxy and
// CoreDNS there use the cluster's kubeconfig as it is. It stops when the
// returned function is called.
func (n *Node) Relay(addr string) (stop func(), err error) {
	ln, err := listenIn(n.NetNS, addr)
	if err != nil {
		return nil, fmt.Errorf("relay %s into node %s: %w", addr, n.Cluster, err)
	}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return // closed by stop
			}
			go pipe(in, addr)
		}
	}()
	return func() {
		_ = ln.Close()
	}, nil
}

// pipe copies between in and a new connection to addr until either closes.
func pipe(in net.Conn, addr string) {
	defer in.Close()
	out, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// listenIn opens a TCP listener inside the named network namespace.
func listenIn(netns, addr string) (ln net.Listener, err error) {
	err = inNamespace(netns, func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// dialIn checks that addr accepts TCP connections inside the namespace.
func dialIn(netns, addr string) error {
	return inNamespace(netns, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
}

// inNamespace runs f on a thread inside the named network namespace. A
// socket belongs to the namespace of the thread that made it, so f runs on
// a goroutine of its own, locked to a thread that enters the namespace;
// the thread comes back, or, if it cannot, dies with the goroutine.
func inNamespace(netns string, f func() error) error {
	target, err := os.Open(nsPath(netns))
	if err != nil {
		return err
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer home.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter %s: %w", netns, err)
			return
		}
		fErr := f()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(fErr, fmt.Errorf("leave %s: %w", netns, err))
			return // still locked: the thread ends with the goroutine
		}
		runtime.UnlockOSThread()
		done <- fErr
	}()
	return <-done
}
