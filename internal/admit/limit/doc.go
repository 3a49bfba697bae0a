// Package limit holds adaptive concurrency limit algorithms: pure state machines that turn
// observed request latencies into a concurrency limit. The package knows nothing of queues,
// HTTP or how the limit is enforced; the limiter in package admit owns enforcement and calls an
// Algorithm with what it measured. Time is always passed in, never read.
//
// # Gradient
//
// Gradient is Netflix's Gradient2 (concurrency-limits, Gradient2Limit) with one change to how the
// baseline latency is kept, so that re-measuring it never starves traffic (Envoy #8337, #38338).
// Samples are aggregated per window (Config.Window and at least Config.MinSamples samples); all
// of the following runs once per window, so a sample costs O(1) and no allocation.
//
//	short   = mean RTT of the window's non-dropped samples
//	long    = baseline RTT: when short < long, long ← long + 0.1·(short − long); it is also set
//	          by probes and rebases (below), never by an EWMA of loaded latency
//	q       = Config.Queue, or max(4, √limit) when Queue is 0
//	g       = clamp(Tolerance · long / short, 0.5, 1)
//	target  = limit·g + q
//	limit  ← clamp(limit·(1 − Smoothing) + target·Smoothing, Min, Max)
//
// and the limit is left unchanged when the window's largest in-flight count was below limit/2
// (the caller, not the backend, is what limits concurrency then, so latency says nothing).
//
// At steady state under overload the limit settles where g = 1 − q/limit: a standing queue of
// about q requests above the backend's real concurrency C, so limit ≈ C + q. While latency sits
// at the baseline (g = 1) the limit grows by Smoothing·q per window; the largest fall per window
// is Smoothing/2 (10% with the defaults).
//
// # Baseline: probes and rebases
//
// Netflix keeps the long RTT as a slow EWMA of all samples; under sustained load it creeps up
// toward the loaded latency, and the limit drifts up with it. Envoy re-measures a minimum RTT by
// dropping concurrency to its floor, starving traffic (#8337, #38338). Gradient does neither:
//
//   - Probe (ProbeEvery, default 10s): for about one window the enforced limit (Limit) is lowered
//     to max(Min, (1 − ProbeDepth)·limit − q), just below the knee the limit settles at; the mean
//     RTT of requests admitted under it becomes the baseline. It costs 10% + q of concurrency for
//     about 1% of the time, never a fall to Min. A probe held up by Min may only lower the
//     baseline. The limit itself does not change during a probe.
//   - Rebase: during a run of falling limits Gradient remembers the window with the highest RTT
//     (ref); if a later window has at most 60% of ref's mean in-flight count, or the limit has
//     reached Min, while its RTT is still at least 80% of ref's, the added latency is not
//     queueing caused by this caller (the backend became slower, or others load it): the
//     baseline is reset to the current RTT and the limit held. Under real queueing latency is
//     proportional to concurrency, so shedding 40% of it lowers latency by more than 20%. A
//     slower backend thus costs at most a dip to about 60% of the limit, then the limit regrows.
//
// Probing (ProbeEvery, ProbeDepth, and Queue, the growth headroom) and the floor (Min) are
// separate knobs.
//
// Dropped samples (timeouts, backend rejections) carry no latency information and are excluded
// from the RTT mean; as in Gradient2 they do not change the limit by themselves.
package limit
