// Package limits is the part of levee's `limits:` section that both the
// proxy (internal/server) and the admission middleware apply: the rate
// rules (limits.rate, limits.client.rate) and the order they are spent in,
// their RateLimit headers, and the priority classifier. One
// implementation: the proxy composes a route from it, the middleware a
// handler, from the same validated config.Limits.
package limits
