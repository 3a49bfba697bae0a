package shape_test

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/leveeproxy/levee/internal/shape"
)

// An engine checks the request line and headers before it reads the body,
// then streams the body through the Checker's BatchReader to the backend.
func Example() {
	c, err := shape.New(shape.Limits{
		MaxURLBytes:    8192,
		MaxQueryValues: 64,
		MaxHeaderCount: 100,
		MaxHeaderBytes: 32 << 10,
		Batch:          shape.Batch{JSONField: "uris", Max: 2},
	})
	if err != nil {
		panic(err)
	}
	if v := c.CheckTarget("/v1/purge?dry_run=1"); v != nil {
		fmt.Println(v.Status, v.Reason)
	}
	if v := c.CheckHeaders(shape.HeaderSize(map[string][]string{"Accept": {"*/*"}})); v != nil {
		fmt.Println(v.Status, v.Reason)
	}

	body := c.WrapBody(strings.NewReader(`{"uris": ["/a", "/b", "/c"]}`))
	n, err := io.Copy(io.Discard, body) // the upstream request
	var v *shape.Violation
	if errors.As(err, &v) {
		fmt.Printf("after %d bytes: %d %s: %s\n", n, v.Status, v.Reason, v.Msg)
	}
	// Output:
	// after 22 bytes: 422 batch-items: batch field "uris" has more than 2 items
}
