// Package bandwidth paces the bytes of one app to a rate, fairly across the app's
// connections, and cuts a transfer that would have to wait too long. It knows nothing of
// HTTP: it limits io.Readers and io.Writers. Time comes from an injected clock.Clock; the
// decision itself has an explicit-time form, ReserveAt.
//
// # Algorithm
//
// One Limiter per app carries both directions, request and response bytes, in one budget
// (limits.bandwidth: 50MB/s is the app's total); an integrator who wants separate budgets
// builds two. It is GCRA over bytes, with waits taken rather than refused: one byte costs
// T = 1/Rate, a chunk of n bytes costs cost(n) = ⌈n·10⁹/Rate⌉ ns, and the depth of the
// bucket is D = ⌊Burst·10⁹/Rate⌋ ns (rounding always against the transfer). The state is
// one number, the theoretical arrival time TAT. A request for n ≤ Chunk bytes at time t
// reserves
//
//	TAT′ = max(TAT, t) + cost(n),   and its bytes may pass at  g = max(TAT′ − D, t),
//
// so an idle limiter passes Burst bytes at once and then Rate bytes per second. Every
// grant is ≤ Chunk bytes (default 16 KiB) and Burst holds at least two chunks (default:
// a tenth of a second's worth, at least 64 KiB; it also absorbs timer slack, which a burst
// much under a millisecond's worth cannot). The grants, at their times g, conform to GCRA,
// so over any window [s, s+W] of grant times the bytes granted are ≤ Rate·W + Burst; bytes
// pass at or after their grant time, so by any time t at most Rate·(t − t₀) + Burst bytes
// have passed since New. Over a long transfer the rate is within 1 ns per chunk of exact
// (under 1% up to MaxRate).
//
// # Fairness
//
// Reservations are served in the order they are made (FIFO: each TAT′ extends the last),
// and a wrapper holds at most one reservation at a time: it asks for its next chunk only
// after the previous one has passed. So with k connections waiting, each gets one chunk
// per round, round robin: a connection's next chunk passes within k·Chunk/Rate of asking,
// and a transfer of S bytes among k busy connections finishes within about
// k·S/Rate + Chunk/Rate, whatever the size of the others. One huge transfer cannot starve
// a small one; it only delays each of its chunks by one of the other's.
//
// # Cut-off
//
// A chunk whose grant would come more than MaxDelay (default 5 s) after it is asked for is
// not reserved: the wait returns a *TooSlowError (errors.Is ErrTooSlow) naming the limit,
// the limiter counts a cut in Stats.Cut, and the caller aborts the transfer. Every wait also
// honours its context: it ends with ctx.Err() when ctx ends, giving back its pending chunk,
// and when the chunk could not pass before ctx's deadline (read on the limiter's clock) it
// is refused up front with an error wrapping context.DeadlineExceeded, so no wait sleeps
// past its deadline. A chunk given back is returned to the bucket exactly when it is the
// last reservation; when others have already queued behind it, they keep their times
// (nothing is reordered) and its slot, at most one chunk's time, goes unused.
//
// # Changing the rate
//
// SetRate changes the rate in place (cluster mode sets each instance's share
// of an app's limit with it, each heartbeat; the strict fraction too). The
// bucket is kept in bytes: the queue beyond now, TAT − now, is rescaled by
// old/new rate so that the same bytes stay queued, and Burst is kept, so a
// change never hands out a fresh burst. A reservation knows its place in the
// queue (the bytes reserved up to its end), so a waiter woken by the change
// re-times itself from the new TAT: a lowered rate holds queued transfers
// longer, a raised one lets them go sooner. From the change on, GCRA holds
// at the new rate: at most rate·t + Burst bytes pass in any t after it. The
// rate is never set below Chunk/MaxDelay, so a chunk can still pass.
//
// Demand reports the bytes asked for (granted or refused), the bytes waiting
// now and the waiting bytes integrated over time: cluster mode derives from
// them how many bytes per second an instance wants.
//
// # Reads and writes
//
// Writer reserves before writing each chunk. Reader reads at most a chunk and then waits
// for the bytes it read before returning them: reserving before a read would charge bytes
// a slow or idle peer may never send and hold a reservation, ahead of everyone behind it,
// for as long as the read blocks. Pacing after the read charges only what was read and
// still pushes back on the peer through its transport's flow control, since the source is
// not read again until its bytes are paced. A Read or Write that passes at once allocates
// nothing; one that waits on the real clock reuses its wrapper's timer and allocates
// nothing either.
//
// # Wiring
//
// Build one Limiter per app from its config (Options{Name: app, Rate: bytes/s}) and keep it
// across reloads while the limit is unchanged. For each request, with ctx the request's
// context:
//
//   - net/http: r.Body = struct{io.Reader; io.Closer}{l.Reader(ctx, r.Body), r.Body}, and
//     a ResponseWriter whose Write goes through l.Writer(ctx, w) (keeping Flush and Unwrap
//     from the original).
//   - fasthttp: wrap the request body stream (RequestCtx.RequestBodyStream) with l.Reader,
//     and the response body stream with l.Reader when it is set with SetBodyStream, or the
//     *bufio.Writer of SetBodyStreamWriter with l.Writer.
//
// On an error from either wrapper the integrator aborts the transfer (closes the upstream
// and the client connection: once the response has started it is too late for a status
// code) and, for a cut, adds to levee_bandwidth_cut_total, which Stats.Cut already counts.
//
// # Metrics
//
// Export Stats per app: levee_bandwidth_cut_total{app} (Cut),
// levee_bandwidth_bytes_total{app} (Bytes), levee_bandwidth_delayed_bytes_total{app}
// (DelayedBytes, the bytes delayed) and levee_bandwidth_delay_seconds_total{app} (Delay).
//
// # Concurrency
//
// A Limiter is safe for concurrent use: a decision takes one mutex, does a few integer
// operations and allocates nothing. A Reader or Writer serves one goroutine at a time.
package bandwidth
