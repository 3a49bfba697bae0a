// Package topview is `levee top`'s model and renderer: it reads a
// snapshot of a running levee from its admin API (docs/admin.md) and draws
// it as lines of text that fit a terminal. It draws; it does not own a
// terminal (cmd/levee does), so every frame can be tested as a string.
package topview

import (
	"encoding/json"
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/topk"
)

// Snapshot is one reading of the admin API. Its JSON has the shape of one
// GET /api/events event with ?app=: time, instance, apps, total, app, top
// (docs/admin.md, "levee top"). A Snapshot is made by Client.Fetch or by
// json.Unmarshal; either keeps the JSON as read, so marshalling it again
// loses no field the typed view below does not know.
type Snapshot struct {
	// Time is when the snapshot was read.
	Time time.Time
	// Instance is GET /api/instance.
	Instance Instance
	// Apps are the busiest apps (GET /api/apps), Total how many serve.
	Apps  []apps.AppSummary
	Total int
	// App is the selected app's detail (GET /api/apps/{app}) and Top its
	// heaviest clients (GET /api/apps/{app}/top); both nil when no app
	// serves.
	App *apps.AppDetail
	Top *topk.Report

	raw rawSnapshot
}

// Instance is GET /api/instance: the server's part and the build.
type Instance struct {
	apps.Instance
	Build struct {
		Version  string `json:"version"`
		Revision string `json:"revision"`
	} `json:"build"`
}

// rawSnapshot is a Snapshot's JSON, each part as the API wrote it.
type rawSnapshot struct {
	Time     time.Time       `json:"time"`
	Instance json.RawMessage `json:"instance"`
	Apps     json.RawMessage `json:"apps"`
	Total    int             `json:"total"`
	App      json.RawMessage `json:"app,omitempty"`
	Top      json.RawMessage `json:"top,omitempty"`
}

// MarshalJSON writes the snapshot as it was read.
func (s *Snapshot) MarshalJSON() ([]byte, error) { return json.Marshal(s.raw) }

// UnmarshalJSON reads a snapshot in the shape MarshalJSON writes (or an
// /api/events event).
func (s *Snapshot) UnmarshalJSON(b []byte) error {
	var raw rawSnapshot
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	return s.setRaw(raw)
}

// setRaw sets s from raw, decoding each part into the typed fields.
func (s *Snapshot) setRaw(raw rawSnapshot) error {
	*s = Snapshot{Time: raw.Time, Total: raw.Total, raw: raw}
	if len(raw.Instance) > 0 {
		if err := json.Unmarshal(raw.Instance, &s.Instance); err != nil {
			return err
		}
	}
	if len(raw.Apps) > 0 {
		if err := json.Unmarshal(raw.Apps, &s.Apps); err != nil {
			return err
		}
	}
	if isObject(raw.App) {
		s.App = new(apps.AppDetail)
		if err := json.Unmarshal(raw.App, s.App); err != nil {
			return err
		}
	}
	if isObject(raw.Top) {
		s.Top = new(topk.Report)
		if err := json.Unmarshal(raw.Top, s.Top); err != nil {
			return err
		}
	}
	return nil
}

func isObject(b json.RawMessage) bool { return len(b) > 0 && b[0] == '{' }
