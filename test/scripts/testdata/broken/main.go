// Package main does not compile, on purpose: the gobuild test's failing
// build.
package main

func main() { notDefined() }
