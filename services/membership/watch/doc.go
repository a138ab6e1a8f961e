// Package watch is the fan-out behind WatchServices: it numbers every change
// of a Service's endpoint set, keeps the current sets for snapshots and a
// short history for resuming, and hands each subscriber the changes it has
// not seen yet without ever making a publisher wait for a subscriber.
//
// # Revisions and epochs
//
// Every published change gets the next revision of the Hub. Revisions only
// mean something within one Hub, so each Hub has an epoch, a random id made
// when it starts; a subscriber that comes back with a revision of another
// epoch (the process restarted) gets a fresh snapshot.
//
// # Resuming
//
// The history is a ring of the last N changes, holding keys and revisions
// only, never endpoint sets. A subscriber that resumes after revision R gets,
// for every Service changed after R, the Service's current state, in the
// order of their latest revisions: exactly what it missed, coalesced. When
// R is older than the ring, it gets a snapshot instead.
//
// # Coalescing and slow subscribers
//
// A subscriber's queue holds at most one entry per Service: a newer change
// replaces the older one and moves to the back, so the revisions a
// subscriber receives always increase, a burst of changes to one Service
// costs one event, and the queue is bounded by the number of Services. A
// subscriber whose queue outgrows MaxPending, or that has not taken anything
// from a non-empty queue for MaxLag, is cut off with ErrTooSlow; it
// reconnects with its last revision and resumes.
//
// # Filters
//
// A subscriber may ask for one namespace and for exported Services only. A
// Service that stops matching (its export was deleted) is sent as a
// deletion, and one that starts matching as an upsert, so a filtered view
// is always the filtered state of the Hub.
package watch
