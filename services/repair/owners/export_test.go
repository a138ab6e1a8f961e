package owners

// SourceProblem exposes why a source is not synced ("" when it is).
func SourceProblem(s *Source) string { return s.problem() }
