package kubetest

import (
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperEnv makes the test binary act as a child process that ignores
// SIGTERM, to exercise the SIGKILL path of stop.
const helperEnv = "KUBETEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "ignore-term":
		// The child lives until the test kills it, or until the test
		// binary is gone (the kernel sends it SIGKILL then).
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
			os.Exit(4)
		}
		signal.Ignore(syscall.SIGTERM)
		os.Stdout.WriteString("ignoring SIGTERM\n")
		select {}
	case "exit":
		os.Stdout.WriteString("bind: address already in use\n")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func startHelper(t *testing.T, mode string) *process {
	t.Helper()
	t.Setenv(helperEnv, mode)
	p, err := startProcess("helper", os.Args[0], nil, filepath.Join(t.TempDir(), "helper.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

func TestStopKillsAfterGrace(t *testing.T) {
	p := startHelper(t, "ignore-term")
	// Only once the child says so is SIGTERM really ignored.
	require.Eventually(t, func() bool { return p.logTail(1) == "ignoring SIGTERM" }, 10*time.Second, 10*time.Millisecond)

	start := time.Now()
	err := p.stop(200 * time.Millisecond)
	require.ErrorContains(t, err, "was killed")
	require.Less(t, time.Since(start), 5*time.Second)
	require.ErrorIs(t, p.cmd.Process.Signal(syscall.Signal(0)), os.ErrProcessDone, "the child is gone")
	require.NoError(t, p.stop(time.Second), "stopping twice is harmless")
}

func TestStopTerminates(t *testing.T) {
	p, err := startProcess("sleep", "/bin/sh", []string{"-c", "exec sleep 30"}, filepath.Join(t.TempDir(), "sleep.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	start := time.Now()
	require.NoError(t, p.stop(5*time.Second))
	require.Less(t, time.Since(start), 4*time.Second, "SIGTERM alone ends it")
}

func TestExitErrorRecognisesPortRace(t *testing.T) {
	p := startHelper(t, "exit")
	<-p.done
	err := p.exitError()
	require.True(t, errors.Is(err, errAddressInUse), "%v", err)
	require.ErrorContains(t, err, "bind: address already in use")
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(3)
	require.NoError(t, err)
	require.Len(t, ports, 3)
	require.NotEqual(t, ports[0], ports[1])
	require.NotEqual(t, ports[1], ports[2])
	require.NotEqual(t, ports[0], ports[2])
}

func TestKillDoesNotWaitForSIGTERM(t *testing.T) {
	p := startHelper(t, "ignore-term")
	require.Eventually(t, func() bool { return p.logTail(1) == "ignoring SIGTERM" }, 10*time.Second, 10*time.Millisecond)

	start := time.Now()
	require.NoError(t, p.kill())
	require.Less(t, time.Since(start), 5*time.Second)
	require.ErrorIs(t, p.cmd.Process.Signal(syscall.Signal(0)), os.ErrProcessDone, "the child is gone")
	require.NoError(t, p.kill(), "killing twice is harmless")
	require.NoError(t, p.stop(time.Second), "stopping a killed process is harmless")
}
