// Package shape enforces request shape limits: how large a request's header
// block and request target may be, how many query parameters it may carry,
// and how many items a declared JSON batch field of its body may hold.
//
// It knows nothing of net/http or fasthttp. Its checks take strings, counts
// and an io.Reader, so both of levee's HTTP engines call the same code, and
// a refusal is a *Violation that only the HTTP edge turns into a response
// (its Status, and Reason as the Levee-Reject header and metric label).
//
// # What each limit protects against
//
//   - MaxHeaderBytes, MaxHeaderCount (431): a request that makes every
//     handler and backend parse, copy and index a huge header block. The
//     listener's own header limit bounds memory; these are the per-app limits.
//   - MaxURLBytes (414): request targets that blow up routing, logging and
//     backend URL parsers.
//   - MaxQueryValues (414): query strings with thousands of parameters, which
//     backends parse into maps (hash flooding, allocation storms).
//   - Batch (422): one client's batches. The incident behind it: a client
//     sent 20,000-item batches to a handler with no concurrency limit and
//     exhausted the host; each request was small in bytes but huge in work.
//     A route that declares a JSON field (limits.batch: {json_field: uris,
//     max: 100}) gets its body counted while it streams to the backend.
//
// A zero field in Limits turns that check off; the integrator applies the
// defaults from config before calling New.
//
// # The streaming guarantee
//
// A BatchReader passes the body through byte for byte while it tokenizes the
// JSON. It keeps O(nesting depth) state — a few hundred bytes, never the
// body — and fails the Read that carries the first byte of item max+1 with
// a *Violation: the bytes before that point have been passed on, nothing
// after it is read. A 20,000-item body with max 100 is cut off at item 101.
// Chunk boundaries do not matter: any split of the body gives the same result.
//
// A body that must be counted but cannot be is refused, never let through
// uncounted: invalid or truncated JSON is 400 (batch-json); JSON whose shape
// hides the count (top level not an object, the field not an array, nesting
// deeper than MaxDepth) is 422 (batch-shape). An empty body passes. See
// BatchReader for the matching rules (duplicate fields, escapes, case).
package shape
