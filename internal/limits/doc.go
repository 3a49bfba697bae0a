// Package limits is the gate: the part of levee's `limits:` section that
// both the proxy (internal/server) and the admission middleware apply to a
// request before it reaches the backend or the handler, in one order:
// Check (shape, the rate rules and the order they are spent in, a declared
// body), then Admit (the concurrency slot, its queue, priorities, fair
// share, an adaptive limit), with shadowing, the RateLimit headers and the
// net/http Handler of the middleware. One implementation: the proxy
// composes a route's Gate from it, the middleware a Handler.
//
// It takes plain values (rates, counts, classes, shape limits), not
// config: internal/limitsconf makes them from a validated `limits:`
// section for both. It imports no fasthttp: the fasthttp engine writes a
// Refusal itself (internal/server).
package limits
