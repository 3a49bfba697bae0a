// Package admission is levee's admission control as a Go library: the same
// scheduler and the same refusals as the levee proxy, for Go services that
// fan out work per item.
//
// # The fan-out budget
//
// errgroup.SetLimit bounds one group, so one request: a thousand concurrent
// requests with SetLimit(16) still run 16,000 goroutines, and a handler that
// forgets the line runs one per item. A Budget bounds the whole process:
//
//	var budget = admission.NewBudget(64) // at most 64 tasks at once, across every request
//
//	func handle(w http.ResponseWriter, r *http.Request) {
//		g := budget.Group(r.Context(), clientKey(r))
//		for _, item := range items {
//			g.Go(func(ctx context.Context) error { return call(ctx, item) })
//		}
//		if err := g.Wait(); err != nil { ... }
//	}
//
// Go blocks until its task may run, then hands it to one of the budget's
// goroutines: there are at most Limit of them, however many items are
// submitted, and a loop over 20,000 items waits in Go rather than parking
// 20,000 goroutines. While tasks wait, each key gets its fair share of the
// budget (Limit ÷ keys with work, at least 1), so one client's huge batches
// cannot keep another client's small requests waiting behind them.
//
// # The contract
//
//   - What blocks, and for how long: Go, until its task may run (the
//     group's own cap WithGroupLimit, then a free slot within the key's
//     fair share) or the group's context ends, with no other deadline: give
//     the context a deadline to bound the wait. Wait, until every started
//     task has returned. Nothing else blocks; Expect, Limit, Running and
//     Waiting return at once.
//   - Cancellation: a Go whose context ends while it waits returns without
//     running its task and leaves nothing behind (no goroutine, no slot,
//     no queue entry); its group's error is then ctx.Err(). The first error
//     of a group (a task's, a context's, a refusal) cancels the group's
//     context, so the remaining Go calls return at once and running tasks
//     see ctx.Done; Wait returns that first error, as errgroup does.
//   - Panics: a task's panic is recovered in the goroutine that ran it, its
//     slot given back, its group cancelled, and Wait panics with a
//     *PanicError (value and stack) once the group's other tasks have
//     returned.
//   - Refusals are typed: a *Rejection with a Reason that levee also uses
//     (BatchItems from WithMaxItems), found with errors.As.
//   - Zero values: a nil or zero Budget, and a zero Group, are not usable:
//     Budget.Group and Group.Go panic, as do NewBudget(n < 1) and the
//     options given a bound < 1. These are programming errors, not load.
//   - Goroutine safety: a Budget is safe for concurrent use; a Group's Go
//     and Expect may be called concurrently, and Wait once after the last Go.
//   - Goroutines: a Budget has at most Limit, which run its tasks one
//     after another: started when a task finds none idle, and each ended
//     after a second with no task, so NewBudget starts none and an idle
//     Budget holds none and needs no Close. A Group starts none of its own;
//     Wait returns once its tasks have returned, not their goroutines.
//   - Deadlock: a task must not call Go on a Group of the same Budget and
//     wait for it; if every slot were held by such tasks, none could run.
//
// # The HTTP middleware
//
// Limits are levee's `limits:` section of an app as Go values, a zero
// field being levee's default; NewGate checks them by levee's rules and
// puts them in force, and Wrap applies them to a handler:
//
//	gate, err := admission.NewGate(admission.Limits{
//		Concurrency: 64,
//		Rate:        admission.PerSecond(500),
//		Body:        1 << 20,
//	})
//	...
//	http.ListenAndServe(addr, gate.Wrap(mux))
//
// ParseLimits is the other way in: the same section in YAML, with the
// same keys, defaults and validation as levee's config.
//
// A gate applies every limit of the section but bandwidth (which
// ParseLimits refuses): request shape, rate and per-client rate, body,
// batch items, the concurrency limit (static or adaptive) with its queue,
// priorities and fair share, per_path and shadow; see Gate.Wrap for the
// order. It
// refuses as the levee proxy does, with the same code (the proxy's gate,
// internal/limits): the same status, Levee-Reject, Retry-After, RateLimit
// headers and body, so a client, a dashboard or a runbook reads a refusal
// the same way from either. Gate.Stats counts refusals by reason, and
// package admissionprom exports them to Prometheus under levee's own metric
// names; Gate.Top and Gate.TopHandler report the heaviest clients, as
// levee's admin API does (limits.client.top_k).
//
// What a gate costs: a refusal allocates nothing (TestGateRefusalAllocatesNothing),
// and an admitted request allocates nothing on the gate's side
// (BenchmarkGateAdmitted); a gate starts no goroutine. A request waits only
// in the queue, at most limits.queue.max_wait, or until its client goes.
//
// # One implementation
//
// A Gate is the proxy's own gate: the levee proxy composes each app's
// route from the same internal/limits.Gate, and runs its requests through
// the same Check (shape, rate, declared body) and Admit (slot, queue,
// priority, fair share, adaptive) before it forwards them; this package
// is its net/http face. The scheduler is the levee proxy's
// (internal/admit): a Budget is a
// patient admit.Limiter, the same slots, client table and wait lists as an
// app's concurrency limit, run in a mode where a request over its share
// waits instead of being refused (admit.NewPatient). The proxy refuses
// (a refusal costs an abusive client nothing and a well-behaved one no queue
// room); a service's fan-out waits (the items are already accepted work, and
// Go blocking the caller is the back-pressure). Reason and Rejection are
// this package's own types; each reason constant is the proxy's, so a
// refusal means the same thing in both. The exported API of this package
// is pinned by a golden file, api.txt (see TestAPI), so a change to it is
// deliberate.
//
// What it links: the scheduler and the gate, and neither the proxy's
// forwarding code nor fasthttp nor Prometheus (internal/layering,
// TestLibraryDoesNotLinkTheProxy, checks it with go list -deps).
package admission
