package decide

// SetMinChunk sets the fewest allocations scanned by one goroutine and
// returns a function that restores it.
func SetMinChunk(n int) (restore func()) {
	prev := minChunk
	minChunk = n
	return func() { minChunk = prev }
}
