package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckBreakingAgainstTheLastRelease: hack/check-breaking.sh compares
// the protos with the commit of the last release in RELEASES, not with the
// branch: a field deleted after the release fails it, even once committed,
// until the changelog's Unreleased section names it under Breaking.
func TestCheckBreakingAgainstTheLastRelease(t *testing.T) {
	buf := filepath.Join(root(t), ".bin", "buf")
	if _, err := os.Stat(buf); err != nil {
		if testing.Short() {
			t.Skip("no .bin/buf (make tools)")
		}
		t.Fatalf("no .bin/buf: make tools builds it (-short skips this test): %v", err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	write := func(name, body string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	proto := func(fields string) string {
		return "syntax = \"proto3\";\npackage demo.v1;\nmessage Pool {\n" + fields + "}\n"
	}
	run := func() (string, error) {
		cmd := exec.Command(filepath.Join(root(t), "hack", "check-breaking.sh"))
		cmd.Env = append(os.Environ(), "CHECK_BREAKING_DIR="+dir, "BUF="+buf)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	git("init", "-q", "-b", "main")
	write("buf.yaml", "version: v2\nmodules:\n  - path: proto\nbreaking:\n  use:\n    - FILE\n")
	write("proto/demo/v1/demo.proto", proto("  string name = 1;\n  uint32 quota = 2;\n"))
	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-01-01\n")
	git("add", "-A")
	git("commit", "-q", "-m", "release")
	release := git("rev-parse", "HEAD")
	write("RELEASES", "# version commit date\nv0.1.0 "+release+" 2026-01-01\n")
	write("proto/demo/v1/demo.proto", proto("  string name = 1;\n  uint32 quota = 2;\n  string added = 3;\n"))
	git("add", "-A")
	git("commit", "-q", "-m", "an added field")
	out, err := run()
	require.NoError(t, err, out)
	require.Contains(t, out, "against v0.1.0 ("+release+")")

	// Deleting a field breaks the release's clients, committed or not.
	write("proto/demo/v1/demo.proto", proto("  string name = 1;\n  string added = 3;\n"))
	git("add", "-A")
	git("commit", "-q", "-m", "a deleted field")
	out, err = run()
	require.Error(t, err, out)
	require.Contains(t, out, "BREAKING")
	require.Contains(t, out, "quota")

	// A Breaking entry of another section, or under Added, does not count.
	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- quota is gone\n\n## [0.1.0] - 2026-01-01\n\n### Breaking\n\n- quota\n")
	out, err = run()
	require.Error(t, err, out)

	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n### Breaking\n\n- `Pool.quota` (field 2) is removed: set limits with `added`.\n\n## [0.1.0] - 2026-01-01\n")
	out, err = run()
	require.NoError(t, err, out)
	require.Contains(t, out, "named in CHANGELOG.md")
}
