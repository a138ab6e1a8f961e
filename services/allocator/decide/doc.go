// Package decide is the allocator's pure core: what to do with an
// Allocate, a BatchAllocate, a Release, a retry of an answered request or a
// pool change, given what the pools hold. Its functions take the state they
// need as arguments and return their decision (a Step, a spec, a refusal);
// they take no lock, read no store and know nothing of gRPC. Package
// allocation is their runner: it holds the pools' locks, asks this package,
// and commits what it decides, as repair's pass runs repair's decide.
//
// Every way in follows one set of rules: Allocate and BatchAllocate decide
// each request with the same function (Allocate), so the same input gets
// the same answer whichever call carries it.
//
// The package also holds the allocator's domain vocabulary: the owner of
// an allocation (Owner), the requests (Request, ReleaseRequest, PoolSpec),
// their validation, and the errors the gRPC server maps to status codes.
package decide
