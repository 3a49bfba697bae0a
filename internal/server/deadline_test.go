package server

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// Every forwarded request carries Levee-Deadline: the milliseconds left of
// the app's upstream.deadline.timeout (or of the client's deadline.header, if
// shorter). A client's own Levee-Deadline never reaches the backend.
func TestLeveeDeadlineOnEveryRequest(t *testing.T) {
	backend := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Levee-Deadline"))
	})
	p := startProxy(t, photosApp(backend, "", "    upstream: {deadline: {timeout: 5s, header: x-timeout}}\n")) // matched whatever its case
	for _, c := range []struct {
		header, value string
		max           time.Duration
	}{{"Levee-Deadline", "999999", 5 * time.Second}, {"X-Timeout", "1500", 1500 * time.Millisecond}, {"X-Timeout", "60000", 5 * time.Second}} {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
		req.Host = "photos.test"
		req.Header.Set(c.header, c.value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, resp)
		ms, err := strconv.Atoi(got)
		if err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond > c.max {
			t.Errorf("%s: %s: the backend got Levee-Deadline %q; want (0, %v]", c.header, c.value, got, c.max)
		}
	}
}
