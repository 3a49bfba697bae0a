package limits

import (
	"io"
	"net/http"
)

// Recorder is a net/http ResponseWriter that remembers the status code
// and the body bytes written through it, for metrics, the balancer and an
// adaptive limit: the proxy's net/http engine and the middleware both
// answer through one. Unwrap lets http.ResponseController reach Flush and
// Hijack underneath.
type Recorder struct {
	http.ResponseWriter
	Code    int   // the status written (0: none yet)
	Written int64 // body bytes
}

func (rec *Recorder) WriteHeader(code int) {
	if rec.Code == 0 || (rec.Code >= 100 && rec.Code < 200 && rec.Code != http.StatusSwitchingProtocols) {
		rec.Code = code
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *Recorder) Write(p []byte) (int, error) {
	if rec.Code == 0 {
		rec.Code = http.StatusOK
	}
	n, err := rec.ResponseWriter.Write(p)
	rec.Written += int64(n)
	return n, err
}

// WriteString is Write without a copy: refusals are written by it.
func (rec *Recorder) WriteString(s string) (int, error) {
	if rec.Code == 0 {
		rec.Code = http.StatusOK
	}
	n, err := io.WriteString(rec.ResponseWriter, s)
	rec.Written += int64(n)
	return n, err
}

func (rec *Recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// Status is the status written so far (0: none), for the balancer.
func (rec *Recorder) Status() int { return rec.Code }

// Final is the code to record for r: what was written, or 499 if the
// client left before anything was.
func (rec *Recorder) Final(r *http.Request) int {
	if rec.Code == 0 {
		if r.Context().Err() != nil {
			return StatusClientClosed
		}
		return http.StatusOK
	}
	return rec.Code
}
