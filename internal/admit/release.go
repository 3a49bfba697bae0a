package admit

// Releaser gives back an admission slot; *Limiter is one. The slot is
// given back once the response is done, wherever that is (the forwarding
// code, or a middleware after its handler), so the type lives here rather
// than with either of them.
type Releaser interface{ Release() }

// StatusReleaser is a Releaser that learns the status sent (an adaptive
// concurrency limit samples failures).
type StatusReleaser interface {
	Releaser
	ReleaseStatus(code int)
}

// Release gives slot back, telling it the status sent (0: none) if it asks.
func Release(slot Releaser, code int) {
	if sr, ok := slot.(StatusReleaser); ok {
		sr.ReleaseStatus(code)
		return
	}
	slot.Release()
}
