package topview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/leveeproxy/levee/internal/clock"
)

// Query is what a snapshot reads beyond the instance and the app list.
type Query struct {
	// App is the app whose detail and heaviest clients to read; "" picks
	// the busiest.
	App string
	// By and Window are /top's parameters ("" for the API's defaults).
	By, Window string
	// Apps bounds the app list (?limit=); 0 takes the API's default.
	Apps int
}

// Client reads snapshots from a levee admin API. It is safe for
// concurrent use; the zero value is not (Base is required).
type Client struct {
	// Base is the admin API's root, such as http://127.0.0.1:9901.
	Base string
	// HTTP sends the requests; nil takes http.DefaultClient. Its Timeout,
	// and ctx, bound a Fetch.
	HTTP *http.Client
	// Clock stamps each snapshot; nil takes the wall clock.
	Clock clock.Clock
}

// ErrUnreachable is what Fetch's error wraps when the admin API did not
// answer at all (refused, timed out, not HTTP), as opposed to answering
// with an error.
var ErrUnreachable = errors.New("topview: admin unreachable")

// maxBody bounds one API answer read: the app list at its default limit
// is a few tens of kilobytes.
const maxBody = 16 << 20

// Fetch reads one snapshot: GET /api/instance, /api/apps, and for q.App
// (or the busiest app) /api/apps/{app} and /api/apps/{app}/top. Four
// requests, not one /api/events stream: a poll survives a restart of
// levee and takes none of the 16 event streams the admin listener allows.
// On failure it returns an error saying what could not be read: the admin
// unreachable, or the API's own message (an unknown app, a bad by).
func (c *Client) Fetch(ctx context.Context, q Query) (*Snapshot, error) {
	var clk clock.Clock = clock.Real{}
	if c.Clock != nil {
		clk = c.Clock
	}
	raw := rawSnapshot{Time: clk.Now().UTC()}
	var err error
	if raw.Instance, err = c.get(ctx, "/api/instance", nil); err != nil {
		return nil, err
	}
	v := url.Values{}
	if q.Apps > 0 {
		v.Set("limit", strconv.Itoa(q.Apps))
	}
	list, err := c.get(ctx, "/api/apps", v)
	if err != nil {
		return nil, err
	}
	var apps struct {
		Apps  json.RawMessage `json:"apps"`
		Total int             `json:"total"`
	}
	if err := json.Unmarshal(list, &apps); err != nil {
		return nil, fmt.Errorf("topview: GET /api/apps: %w", err)
	}
	raw.Apps, raw.Total = apps.Apps, apps.Total
	name := q.App
	if name == "" {
		var names []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(apps.Apps, &names); err != nil {
			return nil, fmt.Errorf("topview: GET /api/apps: %w", err)
		}
		if len(names) > 0 {
			name = names[0].Name
		}
	}
	if name != "" {
		path := "/api/apps/" + url.PathEscape(name)
		if raw.App, err = c.get(ctx, path, nil); err != nil {
			return nil, err
		}
		v := url.Values{}
		if q.By != "" {
			v.Set("by", q.By)
		}
		if q.Window != "" {
			v.Set("window", q.Window)
		}
		if raw.Top, err = c.get(ctx, path+"/top", v); err != nil {
			return nil, err
		}
	}
	s := new(Snapshot)
	if err := s.setRaw(raw); err != nil {
		return nil, fmt.Errorf("topview: %s: %w", c.Base, err)
	}
	return s, nil
}

// get reads one JSON answer of the API; a status other than 200 is an
// error carrying the API's {"error": "..."} message.
func (c *Client) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	u := strings.TrimSuffix(c.Base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("topview: %w", err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, c.Base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("topview: GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("topview: GET %s: %s", path, e.Error)
		}
		return nil, fmt.Errorf("topview: GET %s: %s", path, resp.Status)
	}
	if !json.Valid(body) {
		return nil, fmt.Errorf("topview: GET %s: the answer is not JSON (is %s a levee admin address?)", path, c.Base)
	}
	return body, nil
}
