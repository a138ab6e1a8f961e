// Package e2e tests the allocator as its users meet it: the real
// plexus-allocator binary, built once per test run, serving on free
// loopback ports, driven through gRPC, grpcurl and the plexusctl binary,
// and killed with SIGKILL in the middle of its work to show that what it
// acknowledged survives.
//
// The package holds only tests; this file documents it.
package e2e
