package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteReplacesWholeWithItsMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	require.NoError(t, Write(path, []byte("old"), 0o644))
	require.NoError(t, Write(path, []byte("new content"), 0o600))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "new content", string(b))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left")

	err = Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600)
	require.ErrorContains(t, err, filepath.Join(dir, "missing", "f"))
}
