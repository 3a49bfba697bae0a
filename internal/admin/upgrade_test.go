package admin

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// POST /upgrade needs the token, checks its body, and answers with the
// outcome: the new levee's PID, or why the upgrade failed.
func TestUpgradeEndpoint(t *testing.T) {
	var asked []string
	fail := false
	h := Handler(Options{Registry: prometheus.NewRegistry(), Reload: func() error { return nil },
		Addr: "0.0.0.0:9901", Token: testToken,
		Upgrade: func(binary string) (int, error) {
			asked = append(asked, binary)
			if fail {
				return 0, errors.New("upgrade: the new levee (process 7) could not start: config: bad")
			}
			return 4243, nil
		}})
	post := func(body, auth string) (int, string) {
		r := httptest.NewRequest("POST", "/upgrade", strings.NewReader(body))
		r.Host = "10.0.0.5:9901"
		if auth != "" {
			r.Header.Set("Authorization", "Bearer "+auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	for _, tt := range []struct {
		name, body, auth string
		fail             bool
		code             int
		want             string
	}{
		{"no token", "", "", false, http.StatusUnauthorized, ""},
		{"same binary", "", testToken, false, 200, `"pid":4243`},
		{"another binary", `{"binary": "/opt/levee/levee-2"}`, testToken, false, 200, `"ok":true`},
		{"relative binary", `{"binary": "levee"}`, testToken, false, 400, "absolute path"},
		{"bad body", `{"binary":`, testToken, false, 400, "upgrade:"},
		{"failed", "", testToken, true, http.StatusBadGateway, "config: bad"},
	} {
		fail = tt.fail
		code, body := post(tt.body, tt.auth)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %d %s, want %d with %q", tt.name, code, body, tt.code, tt.want)
		}
	}
	if strings.Join(asked, ",") != ",/opt/levee/levee-2," {
		t.Errorf("upgrades asked for %q, want the same binary, /opt/levee/levee-2, the same", asked)
	}
}

// Without a token, POST /upgrade (loopback only) upgrades to the same
// binary and refuses to run one named in its body: that would let any
// local user run a program as levee's user.
func TestUpgradeNamingABinaryNeedsTheToken(t *testing.T) {
	var asked []string
	h := Handler(Options{Registry: prometheus.NewRegistry(), Reload: func() error { return nil },
		Addr: "127.0.0.1:9901",
		Upgrade: func(binary string) (int, error) {
			asked = append(asked, binary)
			return 4243, nil
		}})
	post := func(body string) (int, string) {
		r := httptest.NewRequest("POST", "/upgrade", strings.NewReader(body))
		r.Host, r.RemoteAddr = "127.0.0.1:9901", "127.0.0.1:50000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	if code, body := post(`{"binary": "/tmp/anything"}`); code != http.StatusForbidden || !strings.Contains(body, "admin.token_file") {
		t.Errorf("a named binary without a token: %d %s, want 403 naming admin.token_file", code, body)
	}
	if code, body := post(""); code != 200 || !strings.Contains(body, `"pid":4243`) {
		t.Errorf("the same binary without a token: %d %s, want 200", code, body)
	}
	if strings.Join(asked, ",") != "" || len(asked) != 1 {
		t.Errorf("upgrades asked for %q, want the same binary once", asked)
	}
}
