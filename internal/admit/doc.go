// Package admit decides whether a request may proceed to a backend now, later
// (after a bounded wait) or not at all. It knows nothing of HTTP: a refusal is
// a *Rejection, which only the HTTP edge turns into a status code.
//
// A Limiter holds Limits.Concurrency slots. A request (a Ticket: a Class and
// a Client key) takes a free slot at once when nobody is waiting; otherwise
// it waits in a bounded queue, or is refused, by these rules:
//
// Priorities. The queue serves every Critical waiter before any Default one,
// and every Default one before any Sheddable one. Within a class it serves
// first in, first out, except under overload (below), when it serves last in,
// first out. When the queue is full (MaxLen waiters), an arrival displaces a
// waiter of a lower class, from the lowest class present, the one that would
// be served last; the displaced waiter gets Shed. With no lower class
// present the arrival gets QueueFull.
//
// Overload (CoDel-style, as used for RPC queues). The queueing delay is
// sampled at every arrival that must queue and every hand-over of a slot, as
// the age of the oldest waiter (under FIFO, the sojourn of the request
// served; under LIFO it still measures the standing queue, unlike the
// sojourn of the fresh request served). When the delay has stayed at or
// above Limits.Target (default 5ms) at every sample for Limits.Interval
// (default 100ms) — the minimum delay over the interval was above the
// target — the queue is overloaded. While overloaded:
//   - a Sheddable arrival that finds no free slot is refused at once (Shed);
//   - the max wait is 2×Target (10ms by default; never more than MaxWait):
//     arrivals wait at most that long, and waiters queued earlier that have
//     waited that long are dropped (QueueTimeout) at the next sample;
//   - each class is served LIFO: the fresh requests still have a client
//     waiting for them, the old ones most likely do not.
//
// The overload ends at the first sample below the target, or when the queue
// empties. Waiters queued during overload keep their short max wait.
//
// Fair share. Requests with a non-empty Client are counted per client; a
// client is active while it holds or waits for a slot, and only active
// clients are kept (a bounded map: at most Concurrency+MaxLen entries). The
// fair share is Concurrency / active clients, at least 1. When no slot is
// free, an arrival whose client already holds or waits for its fair share
// is refused at once (ClientShare) rather than queued behind the others,
// because a refusal costs the abuser nothing and the others no queue room;
// and a waiter whose client holds its fair share by the time a slot frees
// (the share shrinks as more clients arrive) is dropped (ClientShare) and
// the slot goes to the next waiter. A client is never limited while free
// slots remain. So a client that keeps at most its fair share of requests
// outstanding is never refused for its share, and is served ahead of the
// abuser's excess, which can neither queue nor be granted beyond its share.
// (The bound assumes the queue has room for the well-behaved clients'
// waiters: MaxLen ≥ Concurrency is enough when every request is identified.)
// Unidentified requests (Client "") are not counted and never refused for
// their share; Acquire and Release use them.
//
// Patient limiters. NewPatient makes a Limiter that never refuses, for the
// public admission.Budget (a process-wide bound on a service's fan-out
// tasks): the same slots, client counts and wait lists, but a request waits
// until it gets a slot or its context ends, and fair share is kept by order
// of service rather than by refusal: a freed slot goes to the first waiter
// whose client holds less than its share, and to the first waiter of all
// only when every waiting client holds its share. There is one scheduler
// (sched); the patient mode changes only how it queues and whom it grants.
//
// Every decision reads the injected clock.Clock, so tests run on a fake
// one. The uncontended path (a free slot, nobody waiting) takes one mutex,
// does not read the clock and does not allocate, with or without a Client.
package admit
