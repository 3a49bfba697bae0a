package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestRetryParses(t *testing.T) {
	cfg, err := Parse([]byte(`
apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:1]
    retry: {on: [connect, 502, 503, 504], budget: 10%, attempts: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Retry{On: []string{"connect", "502", "503", "504"}, Budget: 10, Attempts: 5}
	if got := cfg.Apps["a"].Retry; !reflect.DeepEqual(got, want) {
		t.Fatalf("retry = %+v, want %+v", got, want)
	}
}

func TestRetryValidation(t *testing.T) {
	_, err := Parse([]byte(`
apps:
  a:
    hosts: [a.test]
    backends: [127.0.0.1:1]
    retry: {on: [500, connect, connect], budget: 101%, attempts: 0}
`))
	if err == nil {
		t.Fatal("invalid retry accepted")
	}
	for _, want := range []string{
		`apps.a.retry.on[0]: must be connect, 502, 503 or 504 (got "500")`,
		`apps.a.retry.on[2]: connect is listed twice`,
		`apps.a.retry.budget: "101%" is not a percentage`,
		`apps.a.retry.attempts: must be 1..5 (got 0)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
}
