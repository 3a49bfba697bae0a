package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
)

// maxUpgradeBody bounds POST /upgrade's body: one path.
const maxUpgradeBody = 4 << 10

// upgradeHandler is POST /upgrade: an optional JSON body {"binary": PATH}
// (an absolute path) names the new levee; without it, the same binary.
// Naming a binary runs it as levee's user, so it takes the admin token:
// without admin.token_file the endpoint (loopback only) upgrades to the
// same binary and refuses a binary with 403.
// The answer waits for the outcome: 200 {"ok": true, "pid": N} once the new
// process serves, 400 for a bad body, 502 {"ok": false, "error": ...} when
// the upgrade failed and this levee serves on.
func upgradeHandler(upgrade func(binary string) (int, error), tokenSet bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var req struct {
			Binary string `json:"binary"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxUpgradeBody+1))
		if err == nil && len(body) > maxUpgradeBody {
			err = errors.New("body too large")
		}
		if err == nil && len(body) > 0 {
			err = json.Unmarshal(body, &req)
		}
		if err == nil && req.Binary != "" && !filepath.IsAbs(req.Binary) {
			err = errors.New("binary: want an absolute path")
		}
		if err == nil && req.Binary != "" && !tokenSet {
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(map[string]any{"ok": false,
				"error": "upgrade: binary: naming a binary needs admin.token_file (without it, the same binary only)"})
			return
		}
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "upgrade: " + err.Error()})
			return
		}
		pid, err := upgrade(req.Binary)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": err.Error()})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "pid": pid})
	}
}
