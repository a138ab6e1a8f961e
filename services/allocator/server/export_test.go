package server

// ErrorReasons returns every reason of the error table, so the tests can
// check that each one is produced through the real server.
func ErrorReasons() []string {
	out := make([]string, 0, len(errorTable))
	for _, r := range errorTable {
		out = append(out, r.Reason)
	}
	return out
}

// CheckErrorTable reports a malformed rule of the error table.
func CheckErrorTable() error { return errorTable.Check() }
