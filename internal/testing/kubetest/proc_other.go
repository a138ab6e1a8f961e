//go:build !linux

package kubetest

import "syscall"

// childAttrs has no parent-death signal outside Linux; children are still
// stopped by the cleanup of a test that ends normally.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
