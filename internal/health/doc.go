// Package health takes bad backends out of rotation and brings them back.
//
// Two mechanisms act on the live state of a [balance.Set]:
//
//   - [Ejector] is passive outlier ejection: the forwarder reports every
//     response's outcome, and a backend with too many failures in a row is
//     ejected for a backoff period ([balance.Backend.EjectUntil]); the
//     ejection ends by time alone.
//   - [Checker] is active health checking: one goroutine per Set probes every
//     backend each interval and flips [balance.Backend.SetHealthy] after
//     enough failed or passed probes in a row.
//
// Neither knows about the balancing policy; the policies skip a backend that
// is not [balance.Backend.Healthy]. State changes are logged once per change
// through an injected *slog.Logger, never per probe or per request.
package health
