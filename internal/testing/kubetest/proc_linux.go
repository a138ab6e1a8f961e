package kubetest

import "syscall"

// childAttrs makes the kernel kill a child when the process that started it
// dies, so a test binary that panics or times out leaves no etcd or API
// server behind.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
