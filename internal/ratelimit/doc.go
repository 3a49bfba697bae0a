// Package ratelimit enforces request rates exactly with GCRA, the generic cell rate
// algorithm, over a bounded, sharded per-key table. It knows nothing of HTTP beyond the
// header values in headers.go; time is always passed in (AllowAt), never read.
//
// # Algorithm
//
// A Limit is an emission interval T (the time one request costs: 1/rate) and a burst B ≥ 1.
// The state of a key is one number, its theoretical arrival time TAT. The burst tolerance is
// τ = (B−1)·T. A request for n ≥ 1 units arriving at time t is conforming iff
//
//	max(TAT, t) + (n−1)·T ≤ t + τ,   equivalently   max(TAT, t) + n·T − t ≤ B·T,
//
// and then TAT becomes max(TAT, t) + n·T; a non-conforming request leaves TAT unchanged.
// So an idle key (TAT ≤ t) admits B requests at once, and then one more every T.
//
//   - RetryAfter (rejected) = max(TAT, t) + n·T − B·T − t: exactly the time until the same
//     request would conform; at t + RetryAfter it does, one nanosecond earlier it does not.
//   - Remaining = ⌊(t + B·T − max(TAT′, t)) / T⌋, with TAT′ the state after the decision: how
//     many single requests would be admitted now.
//   - Reset = max(TAT′ − t, 0): the time until the bucket is full again (Remaining = B).
//
// # Bound
//
// For one key under one Limit, over any closed window [s, s+W] with W ≥ 0, the units
// admitted are at most B + ⌊W/T⌋, and this is reached (B at s, then one every T). Proof: the
// first admission in the window starts from max(TAT, t) ≥ s and each admitted unit adds T, so
// after k units TAT ≥ s + k·T; the last admission needs TAT ≤ t + B·T ≤ s + W + B·T; hence
// k·T ≤ W + B·T. There is no boundary effect as with fixed windows. config.Rate.Interval
// rounds T up to a whole nanosecond, so ⌊W/T⌋ ≤ rate·W: admitted ≤ rate·W + B.
//
// # Table and eviction
//
// LocalStore keeps TATs in a power-of-two number of padded shards, each a mutex and a map,
// holding at most Options.MaxKeys keys in all. A key's entry is removed only when its
// TAT ≤ now, that is when its bucket is full anyway: recreating it later gives exactly the
// state it had, so eviction never changes a decision and never hands a client a burst it
// would not otherwise have (the failure of nginx limit_req zones, nginx PR #542).
//
// Idle entries are removed by Sweep, which an owner calls periodically, and by a full shard
// that needs room for a new key (at most once per Options.ScanInterval per shard, and only
// once some entry can have gone idle). When a shard is full of keys that are not idle, a new
// key does not displace them: it is decided against one overflow bucket shared by the
// whole table, under the limit passed with the request, and counted in Stats.Overflowed.
// Keys that overflow are still limited, each to at most its own bound, but they share one
// budget. Each shard remembers the overflow bucket's TAT after it last admitted one of the
// shard's keys, and a new entry in that shard starts from it (when it is still in the
// future) rather than from a full bucket: so moving from the overflow bucket to an own
// entry cannot reset a client either, and only keys of shards that overflowed lately start
// below a full bucket. In every case a key's TAT is at least the TAT of the requests it was
// actually admitted alone, so the bound above holds for every key.
//
// # Concurrency
//
// All methods of LocalStore are safe for concurrent use. A decision takes one shard lock
// (and, only while the table is full, one atomic compare-and-swap on the overflow bucket),
// does one or two map operations and allocates nothing for an existing key. The table
// retains key strings: callers must pass an immutable string (not one aliasing a reused
// byte buffer).
//
// The Store interface is the decision a Redis-backed store also implements, so the HTTP
// path does not change with the store.
package ratelimit
